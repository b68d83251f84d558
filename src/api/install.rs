//! `kiln run` owns the CRDs its rules define: before a rule set starts (at
//! start and on every reload) each new or changed rule's CRD is read,
//! compared with what it would become ([`super::compat`]), applied by
//! server-side apply under kiln's own field manager, and waited for until
//! the API server serves it (Established). A change that would break
//! stored objects refuses the whole set, before anything is written, unless
//! the rule allows breaking changes. A CRD is never deleted: a rule that
//! goes leaves its CRD, and says so.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api as KubeApi, Client};
use serde_json::Value;

use super::Api;
use super::compat::{self, Breaking};
use crate::rules::{Diagnostic, Rule, RuleSet};

/// The field manager kiln applies CRDs with.
pub const FIELD_MANAGER: &str = "kiln-api";

/// How long a CRD may take to be Established.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a rule's CRD was not installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The new CRD would break objects stored under the one in the cluster.
    #[error(
        "the new CustomResourceDefinition {crd} would break objects stored under the current one: {}; set spec.api.allowBreakingChanges: true to apply it anyway",
        .changes.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    Breaking {
        /// The CRD's name.
        crd: String,
        /// Each breaking change.
        changes: Vec<Breaking>,
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
            Self::Breaking { .. } | Self::NeedsWebhook { .. } => false,
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

/// Installs the CRDs of the new and changed rules of `new` (every one at
/// start, when `old` is `None`): all are checked first, then all applied
/// and waited for. The problems, as diagnostics on their rules, refuse the
/// set.
pub async fn install_set(
    client: &Client,
    old: Option<&RuleSet>,
    new: &RuleSet,
) -> Result<(), Refusal> {
    let crds: KubeApi<CustomResourceDefinition> = KubeApi::all(client.clone());
    let install = to_install(old, new);
    let mut problems = Vec::new();
    for (rule, api) in &install {
        if let Err(e) = check(&crds, api).await {
            problems.push((*rule, e));
        }
    }
    if problems.is_empty() {
        for (rule, api) in &install {
            if let Err(e) = apply(&crds, api).await {
                problems.push((*rule, e));
            }
        }
    }
    if !problems.is_empty() {
        return Err(Refusal {
            transient: problems.iter().all(|(_, e)| e.transient()),
            diagnostics: problems.iter().map(|(r, e)| diagnostic(r, e)).collect(),
        });
    }
    for (name, crd) in left_behind(old, new) {
        tracing::info!(rule = %name, crd = %crd, "the rule that defined this CustomResourceDefinition is gone; the CRD and its objects stay (kiln never deletes a CRD)");
    }
    Ok(())
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

/// At start: installs the CRDs of `set` in the background, trying again
/// (with backoff) while the API server cannot be reached, so that kiln
/// starts and its rules wait for their kinds meanwhile. A refusal is
/// logged: the CRD in the cluster stays as it is.
pub async fn until_installed(client: Client, set: RuleSet) {
    let mut delay = Duration::from_secs(1);
    loop {
        match install_set(&client, None, &set).await {
            Ok(()) => return,
            Err(refusal) => {
                for d in &refusal.diagnostics {
                    tracing::error!(location = %d.location(), "{}", d.message);
                }
                if !refusal.transient {
                    tracing::error!(
                        "the CRDs of the rules were not applied; the rules run on the CRDs in the cluster"
                    );
                    return;
                }
                tracing::warn!(retry_in = ?delay, "the CRDs of the rules could not be applied yet");
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(60));
    }
}

fn diagnostic(rule: &Rule, e: &InstallError) -> Diagnostic {
    Diagnostic::new(&rule.file, "", None, "spec.api".into(), e.to_string()).in_rule(&rule.name)
}

/// Refuses a CRD change that would break stored objects.
async fn check(crds: &KubeApi<CustomResourceDefinition>, api: &Api) -> Result<(), InstallError> {
    let crd = api.name();
    let current = crds
        .get_opt(&crd)
        .await
        .map_err(|source| InstallError::Read {
            crd: crd.clone(),
            source,
        })?;
    let Some(current) = current else {
        return Ok(());
    };
    let current = serde_json::to_value(&current).unwrap_or(Value::Null);
    let changes = compat::breaking(&current, api);
    if changes.is_empty() || api.allow_breaking_changes {
        return Ok(());
    }
    Err(InstallError::Breaking { crd, changes })
}

/// Applies the CRD and waits until it is served.
async fn apply(crds: &KubeApi<CustomResourceDefinition>, api: &Api) -> Result<(), InstallError> {
    let crd = api.name();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut body = api.crd.clone();
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
    crds.patch(&crd, &params, &Patch::Apply(&body))
        .await
        .map_err(|source| InstallError::Apply {
            crd: crd.clone(),
            source,
        })?;
    let deadline = tokio::time::Instant::now() + ESTABLISH_TIMEOUT;
    loop {
        let now = crds.get(&crd).await.map_err(|source| InstallError::Read {
            crd: crd.clone(),
            source,
        })?;
        let served = established(&now);
        match served {
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
