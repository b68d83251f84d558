//! `kiln run` owns the CRDs its rules define: before a rule runs (at
//! start, on every engine start and on every reload) its CRD is read and
//! vetted, then applied by server-side apply under kiln's own field manager
//! and waited for until the API server serves it (Established). A CRD kiln
//! did not create is never written ([`super::provenance`]) unless the rule
//! adopts it and nothing stored breaks; a change that would break stored
//! objects ([`super::compat`]) is refused unless the rule allows breaking
//! changes. A CRD is never deleted: a rule that goes leaves its CRD, and
//! says so.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api as KubeApi, Client};
use serde_json::Value;

use super::Api;
use super::compat::{self, Breaking};
use super::crd::RULE_ANNOTATION;
use super::provenance::{self, Manager, Whose};
use crate::gate::{self, Warrant};
use crate::rules::{Diagnostic, Rule, RuleSet};

/// The field manager kiln applies CRDs with (with `--field-manager kiln`).
pub const FIELD_MANAGER: &str = "kiln-api";

/// The field manager of the CRDs of a kiln whose field manager is `engine`:
/// `<engine>-api`, so two kilns never take each other's CRDs for their own.
pub fn manager_of(engine: &str) -> String {
    format!("{engine}-api")
}

/// How long a CRD may take to be Established.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a rule's CRD was not installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The new CRD would break objects stored under the one in the cluster.
    #[error(
        "the new CustomResourceDefinition {crd} would break objects stored under the current one: {}; set spec.api.allowBreakingChanges: true to apply it anyway",
        joined(.changes)
    )]
    Breaking {
        /// The CRD's name.
        crd: String,
        /// Each breaking change.
        changes: Vec<Breaking>,
    },
    /// The CRD exists and kiln did not create it.
    #[error(
        "the CustomResourceDefinition {crd} exists and this kiln did not create it (no annotation {RULE_ANNOTATION} applied by its field manager {manager}); its field managers: {}. kiln writes no CRD it did not create: define another group or kind, or set spec.api.adopt: true to take this one over (applied only when no stored object breaks)",
        super::provenance::list(.managers)
    )]
    Foreign {
        /// The CRD's name.
        crd: String,
        /// kiln's own field manager for CRDs.
        manager: String,
        /// Who wrote it.
        managers: Vec<Manager>,
    },
    /// Adopting the CRD would break objects stored under it, or add CEL rules.
    #[error(
        "adopting the CustomResourceDefinition {crd} would break objects stored under it, or refuse its owner's writes: {}; a CRD is adopted only as it is or extended, and gains validation rules only in a later change (spec.api.allowBreakingChanges does not apply to another owner's objects)",
        joined(.changes)
    )]
    BreakingAdoption {
        /// The CRD's name.
        crd: String,
        /// Each breaking change.
        changes: Vec<Breaking>,
    },
    /// One of kiln's own CRDs.
    #[error("the CustomResourceDefinition {crd} is kiln's own: no rule may define or adopt it")]
    Reserved {
        /// The CRD's name.
        crd: String,
    },
    /// Reading the CRD in the cluster failed (the comparison cannot be made).
    #[error("reading CustomResourceDefinition {crd}: {source}")]
    Read {
        /// The CRD's name.
        crd: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The API server refused the CRD.
    #[error("applying CustomResourceDefinition {crd}: {source}")]
    Apply {
        /// The CRD's name.
        crd: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The conversion webhook this process serves has no certificate yet:
    /// a CRD with several versions is not created without it.
    #[error("CustomResourceDefinition {crd} waits for the conversion webhook: {source}")]
    NoConversion {
        /// The CRD's name.
        crd: String,
        /// How long it waited.
        #[source]
        source: super::webhook::NotReady,
    },
    /// A CRD with several versions, and this process serves no conversion
    /// webhook: it is never applied to be served without one.
    #[error("CustomResourceDefinition {crd} is not applied: {why}")]
    NeedsWebhook {
        /// The CRD's name.
        crd: String,
        /// Why, with the flags to add.
        why: String,
    },
    /// The CRD was applied but is not served.
    #[error("CustomResourceDefinition {crd} is not Established: {why}")]
    NotEstablished {
        /// The CRD's name.
        crd: String,
        /// Its conditions' word on why, or a timeout.
        why: String,
    },
}

fn joined(changes: &[Breaking]) -> String {
    changes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The rules of `new` whose CRD must be applied: those that define an API
/// and are new or changed since `old`.
fn to_install<'a>(old: Option<&RuleSet>, new: &'a RuleSet) -> Vec<(&'a Rule, &'a Api)> {
    new.rules
        .iter()
        .filter(|r| {
            old.and_then(|o| o.get(&r.name))
                .is_none_or(|before| before.fingerprint != r.fingerprint)
        })
        .filter_map(|r| r.api.as_deref().map(|api| (r.as_ref(), api)))
        .collect()
}

impl InstallError {
    /// Whether trying again may succeed (the API server was not reached or
    /// was slow), as opposed to an answer that will not change by itself.
    pub fn transient(&self) -> bool {
        match self {
            Self::Breaking { .. }
            | Self::Foreign { .. }
            | Self::BreakingAdoption { .. }
            | Self::Reserved { .. }
            | Self::NeedsWebhook { .. } => false,
            Self::Read { source, .. } | Self::Apply { source, .. } => match source {
                kube::Error::Api(status) => {
                    status.code >= 500 || status.code == 429 || status.code == 409
                }
                _ => true,
            },
            Self::NotEstablished { why, .. } => why.starts_with("not Established after"),
            Self::NoConversion { .. } => true,
        }
    }
}

/// Why a rule set's CRDs were not installed.
#[derive(Debug)]
pub struct Refusal {
    /// Each problem, on its rule.
    pub diagnostics: Vec<Diagnostic>,
    /// Whether every problem is transient: the same set may be tried again.
    pub transient: bool,
}

impl Refusal {
    fn of(problems: &[(&Rule, InstallError)]) -> Result<(), Self> {
        if problems.is_empty() {
            return Ok(());
        }
        Err(Self {
            transient: problems.iter().all(|(_, e)| e.transient()),
            diagnostics: problems.iter().map(|(r, e)| diagnostic(r, e)).collect(),
        })
    }
}

/// What a vetted CRD may be applied over: nothing (it is created), or the
/// CRD read, at the resource version read; and the CEL rules the change
/// adds (logged once it is applied).
pub struct Vetted(Option<String>, Vec<Breaking>);

/// Installs the CRDs of rules as one kiln: its field manager for CRDs.
#[derive(Clone)]
pub struct Installer {
    crds: KubeApi<CustomResourceDefinition>,
    manager: String,
}

impl Installer {
    /// Installs through `client` as `manager` ([`manager_of`] kiln's field manager).
    pub fn new(client: &Client, manager: impl Into<String>) -> Self {
        Self {
            crds: KubeApi::all(client.clone()),
            manager: manager.into(),
        }
    }

    /// Checks, reading the CRD in the cluster, that `api`'s CRD may be
    /// written: absent, or this kiln's and not broken by the change (unless
    /// the rule allows breaking changes), or adopted by the rule without
    /// breaking anything stored. Writes nothing.
    pub async fn vet(&self, api: &Api) -> Result<Vetted, InstallError> {
        let crd = api.name();
        let read = self.crds.get_opt(&crd).await;
        let current = read.map_err(|source| InstallError::Read {
            crd: crd.clone(),
            source,
        })?;
        let Some(current) = current else {
            return Ok(Vetted(None, Vec::new()));
        };
        let version = current.metadata.resource_version.clone();
        let current = serde_json::to_value(&current).unwrap_or(Value::Null);
        let changes = compat::breaking(&current, api);
        let tightened = compat::tightened(&current, &api.crd);
        match provenance::whose(&current, &self.manager) {
            Whose::Reserved => Err(InstallError::Reserved { crd }),
            Whose::Foreign(managers) if !api.adopt => Err(InstallError::Foreign {
                crd,
                manager: self.manager.clone(),
                managers,
            }),
            // A takeover changes the owner only: a new CEL rule could refuse
            // the writes of the owner's controller still running; a later
            // change of kiln's own CRD may add it.
            Whose::Foreign(_) if !changes.is_empty() || !tightened.is_empty() => {
                let changes = changes.into_iter().chain(tightened).collect();
                Err(InstallError::BreakingAdoption { crd, changes })
            }
            Whose::Kilns if !changes.is_empty() && !api.allow_breaking_changes => {
                Err(InstallError::Breaking { crd, changes })
            }
            Whose::Foreign(_) | Whose::Kilns => Ok(Vetted(version, tightened)),
        }
    }

    /// Vets `api`'s CRD, applies it over what was vetted and waits until it
    /// is served.
    pub async fn install(&self, api: &Api) -> Result<(), InstallError> {
        let vetted = self.vet(api).await?;
        self.apply(api, vetted).await
    }

    /// Vets the CRDs of the new and changed rules of `new` (every one when
    /// `old` is `None`); writes nothing. The problems, as diagnostics on
    /// their rules, refuse the set.
    pub async fn vet_set(&self, old: Option<&RuleSet>, new: &RuleSet) -> Result<(), Refusal> {
        let mut problems = Vec::new();
        for (rule, api) in to_install(old, new) {
            if let Err(e) = self.vet(api).await {
                problems.push((rule, e));
            }
        }
        Refusal::of(&problems)
    }

    /// Installs the CRDs of the new and changed rules of `new` (every one
    /// when `old` is `None`): all are vetted first, then all applied and
    /// waited for. The problems, as diagnostics on their rules, refuse the
    /// set.
    pub async fn install_set(&self, old: Option<&RuleSet>, new: &RuleSet) -> Result<(), Refusal> {
        let install = to_install(old, new);
        let mut problems = Vec::new();
        let mut vetted = Vec::new();
        for (rule, api) in &install {
            match self.vet(api).await {
                Ok(v) => vetted.push(v),
                Err(e) => problems.push((*rule, e)),
            }
        }
        if problems.is_empty() {
            for ((rule, api), v) in install.iter().zip(vetted) {
                if let Err(e) = self.apply(api, v).await {
                    problems.push((*rule, e));
                }
            }
        }
        Refusal::of(&problems)?;
        for (name, crd) in left_behind(old, new) {
            tracing::info!(rule = %name, crd = %crd, "the rule that defined this CustomResourceDefinition is gone; the CRD and its objects stay (kiln never deletes a CRD)");
        }
        Ok(())
    }

    /// Applies the CRD over the one vetted (conditioned on its resource
    /// version: a CRD replaced since is not written) and waits until it is
    /// served.
    async fn apply(&self, api: &Api, vetted: Vetted) -> Result<(), InstallError> {
        let crd = api.name();
        let params = PatchParams::apply(&self.manager).force();
        let mut body = api.crd.clone();
        if let Some(version) = vetted.0 {
            body["metadata"]["resourceVersion"] = Value::String(version);
        }
        if api.conversions.is_some() {
            // Several versions: pointed at the conversion webhook this process
            // serves, once it serves its certificate, so no object is
            // converted without it (or through a webhook that cannot answer).
            let ready = super::webhook::ready_conversion(ESTABLISH_TIMEOUT).await;
            match ready {
                Ok(Some(conversion)) => body["spec"]["conversion"] = conversion,
                Ok(None) => {
                    let why = super::served::needs_webhook(api, super::served::RUN_FLAGS);
                    let why = why.unwrap_or_default();
                    return Err(InstallError::NeedsWebhook { crd, why });
                }
                Err(source) => return Err(InstallError::NoConversion { crd, source }),
            }
        }
        gate::patch(
            &self.crds,
            &crd,
            &params,
            &Patch::Apply(&body),
            Warrant::Crd,
        )
        .await
        .map_err(|source| InstallError::Apply {
            crd: crd.clone(),
            source,
        })?;
        for rule in &vetted.1 {
            tracing::warn!(crd = %crd, %rule, "the CRD gains a CEL rule objects stored before may not satisfy: the API server still reads them, and refuses only an update that changes the value the rule sits on to one that fails it");
        }
        self.established(&crd).await
    }

    /// Waits until the CRD is served.
    async fn established(&self, crd: &str) -> Result<(), InstallError> {
        let deadline = tokio::time::Instant::now() + ESTABLISH_TIMEOUT;
        loop {
            let now = self
                .crds
                .get(crd)
                .await
                .map_err(|source| InstallError::Read {
                    crd: crd.to_string(),
                    source,
                })?;
            let crd = crd.to_string();
            match established(&now) {
                Ok(true) => return Ok(()),
                Err(why) => return Err(InstallError::NotEstablished { crd, why }),
                Ok(false) if tokio::time::Instant::now() > deadline => {
                    let why = format!("not Established after {}s", ESTABLISH_TIMEOUT.as_secs());
                    return Err(InstallError::NotEstablished { crd, why });
                }
                Ok(false) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

/// Installs the CRDs of the new and changed rules of `new` as kiln's
/// default field manager ([`Installer::install_set`]).
pub async fn install_set(
    client: &Client,
    old: Option<&RuleSet>,
    new: &RuleSet,
) -> Result<(), Refusal> {
    Installer::new(client, FIELD_MANAGER)
        .install_set(old, new)
        .await
}

/// Rules of `old` whose API no rule of `new` defines: (rule, CRD name).
fn left_behind(old: Option<&RuleSet>, new: &RuleSet) -> Vec<(String, String)> {
    let defined: Vec<String> = new
        .rules
        .iter()
        .filter_map(|r| r.api.as_ref().map(|a| a.name()))
        .collect();
    old.map(|o| o.rules.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|r| r.api.as_ref().map(|a| (r.name.clone(), a.name())))
        .filter(|(_, crd)| !defined.contains(crd))
        .collect()
}

/// `e` as a diagnostic on `rule`'s `spec.api`.
pub fn diagnostic(rule: &Rule, e: &InstallError) -> Diagnostic {
    Diagnostic::new(&rule.file, "", None, "spec.api".into(), e.to_string()).in_rule(&rule.name)
}

/// Whether the API server serves the CRD (its names accepted and
/// Established); an error when its names were refused.
fn established(crd: &CustomResourceDefinition) -> Result<bool, String> {
    let conditions = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let find = |t: &str| conditions.iter().find(|c| c.type_ == t);
    if let Some(c) = find("NamesAccepted").filter(|c| c.status == "False") {
        return Err(c
            .message
            .clone()
            .unwrap_or_else(|| "its names were not accepted".into()));
    }
    Ok(find("Established").is_some_and(|c| c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::load::Source;

    fn set(rules: &[(&str, &str)]) -> RuleSet {
        let sources = rules
            .iter()
            .map(|(name, title)| Source {
                file: format!("{name}.yaml").into(),
                text: format!(
                    "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: {name}}}\nspec:\n  api:\n    group: {name}.example.com\n    kind: Site\n    versions:\n      - name: v1\n        schema:\n          spec:\n            title: {title}\n"
                ),
            })
            .collect();
        crate::rules::load_sources(sources).unwrap()
    }

    fn names(v: Vec<(&Rule, &Api)>) -> Vec<String> {
        v.into_iter().map(|(_, a)| a.name()).collect()
    }

    #[test]
    fn only_new_and_changed_rules_install_their_crd() {
        let old = set(&[("a", "string"), ("b", "string")]);
        assert_eq!(
            names(to_install(None, &old)),
            ["sites.a.example.com", "sites.b.example.com"]
        );
        let new = set(&[("a", "string"), ("b", "integer"), ("c", "string")]);
        assert_eq!(
            names(to_install(Some(&old), &new)),
            ["sites.b.example.com", "sites.c.example.com"]
        );
    }

    #[test]
    fn a_removed_rule_leaves_its_crd_and_it_is_named() {
        let old = set(&[("a", "string"), ("b", "string")]);
        let new = set(&[("b", "string")]);
        assert_eq!(
            left_behind(Some(&old), &new),
            [("a".to_string(), "sites.a.example.com".to_string())]
        );
        assert!(left_behind(None, &new).is_empty());
    }

    #[test]
    fn only_unanswered_requests_are_tried_again() {
        let api = |code: u16| {
            InstallError::Apply {
            crd: "x".into(),
            source: kube::Error::Api(
                serde_json::from_value(serde_json::json!({"code": code, "message": "m", "reason": "r", "status": "Failure"}))
                    .unwrap(),
            ),
        }
        };
        assert!(api(503).transient() && api(429).transient() && api(409).transient());
        assert!(
            !api(422).transient(),
            "the API server refused the CRD itself"
        );
        assert!(!api(403).transient());
        let breaking = InstallError::Breaking {
            crd: "x".into(),
            changes: Vec::new(),
        };
        assert!(!breaking.transient());
        let slow = InstallError::NotEstablished {
            crd: "x".into(),
            why: "not Established after 60s".into(),
        };
        assert!(slow.transient());
    }

    #[test]
    fn a_crd_is_served_once_established_and_refused_names_say_why() {
        let crd = |conditions: Value| -> CustomResourceDefinition {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "x"},
                "spec": {"group": "g", "names": {"kind": "K", "plural": "ks"}, "scope": "Namespaced", "versions": []},
                "status": {"conditions": conditions},
            }))
            .unwrap()
        };
        assert_eq!(established(&crd(serde_json::json!([]))), Ok(false));
        let ok = serde_json::json!([{"type": "Established", "status": "True"}]);
        assert_eq!(established(&crd(ok)), Ok(true));
        let clash = serde_json::json!([{"type": "NamesAccepted", "status": "False", "message": "\"ks\" is already in use"}]);
        assert_eq!(
            established(&crd(clash)),
            Err("\"ks\" is already in use".into())
        );
    }
}
