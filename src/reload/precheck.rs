//! A new or changed rule checked against the cluster before it replaces the
//! running one: its kinds served, its status fitting the primary's CRD
//! schema, and every permission it needs granted (one
//! SelfSubjectAccessReview per verb, resource and namespace, the verbs
//! `kiln rbac` would grant). What cannot be known (a read that failed, a CRD
//! kiln may not read) blocks like what is known to be wrong: the loader
//! keeps the last good rules and checks again, rather than guessing. The
//! kinds a rule defines itself (`spec.api`) are taken from its own CRD,
//! which is applied only once every check holds ([`Checker::install`]), so
//! an edit held back writes nothing.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::join_all;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::api::Api as RuleApi;
use crate::api::install::{Installer, Refusal};
use crate::engine::cache::kinds::{Kind, KindError, Kinds};
use crate::engine::decision::schema::{SchemaError, StatusSchema, StatusWrites, status_writes};
use crate::engine::{SchemaRead, kinds_of, status_schema};
use crate::gate::{self, Warrant};
use crate::rbac::{Grants, guess_plural, rule_grants};
use crate::rules::{Gvk, Rule, RuleSet};

/// What the cluster says about one rule of a new rule set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The rule cannot run (or could not be checked): the set waits.
    Blocks {
        /// The rule.
        rule: String,
        /// Why, for people.
        why: String,
    },
    /// A new rule whose kinds are not served yet: it starts and waits for
    /// them (no running version to keep), and says so.
    Waits {
        /// The rule.
        rule: String,
        /// The kinds not served.
        kinds: Vec<String>,
    },
}

impl Finding {
    /// The rule it is about.
    pub fn rule(&self) -> &str {
        match self {
            Self::Blocks { rule, .. } | Self::Waits { rule, .. } => rule,
        }
    }

    /// Whether the set waits for it.
    pub fn blocks(&self) -> bool {
        matches!(self, Self::Blocks { .. })
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Blocks { rule, why } => write!(f, "rule {rule}: {why}"),
            Self::Waits { rule, kinds } => write!(
                f,
                "rule {rule} waits for kinds the API server does not serve yet: {}",
                kinds.join(", ")
            ),
        }
    }
}

/// Checks rules against the cluster, as kiln's own identity.
#[derive(Clone)]
pub struct Checker {
    client: Client,
    namespaces: Vec<String>,
    installer: Installer,
}

impl Checker {
    /// Checks with `client`, for an engine watching `namespaces` (empty:
    /// all); installs CRDs as kiln's default field manager.
    pub fn new(client: Client, namespaces: Vec<String>) -> Self {
        let installer = Installer::new(&client, crate::api::install::FIELD_MANAGER);
        Self {
            client,
            namespaces,
            installer,
        }
    }

    /// Installs CRDs as `manager` (`<--field-manager>-api`).
    #[must_use]
    pub fn installing_as(mut self, manager: &str) -> Self {
        self.installer = Installer::new(&self.client, manager);
        self
    }

    /// What installs the rules' CRDs.
    pub fn installer(&self) -> &Installer {
        &self.installer
    }

    /// Vets the CRDs that the new and changed rules of `candidate` define
    /// against those in the cluster (whose each is, what the change would
    /// break), writing nothing.
    pub async fn vet(&self, running: &RuleSet, candidate: &RuleSet) -> Result<(), Refusal> {
        self.installer.vet_set(Some(running), candidate).await
    }

    /// Installs the CRDs that the new and changed rules of `candidate`
    /// define (vetted again first): the last step before the set runs.
    pub async fn install(&self, running: &RuleSet, candidate: &RuleSet) -> Result<(), Refusal> {
        self.installer.install_set(Some(running), candidate).await
    }

    /// The findings about every rule of `candidate` that is new or changed
    /// from `running`.
    pub async fn check(&self, running: &RuleSet, candidate: &RuleSet) -> Vec<Finding> {
        let plan = super::plan(running, candidate);
        // Discovery afresh: a kind served or gone since the last check counts.
        let kinds = Kinds::new(self.client.clone());
        let mut findings = Vec::new();
        for (names, new) in [(&plan.start, true), (&plan.replace, false)] {
            for rule in names.iter().filter_map(|n| candidate.get(n)) {
                findings.extend(self.check_rule(&kinds, candidate, rule, new).await);
            }
        }
        findings
    }

    async fn check_rule(
        &self,
        kinds: &Kinds,
        candidate: &RuleSet,
        rule: &Arc<Rule>,
        new: bool,
    ) -> Vec<Finding> {
        let blocks = |why: String| Finding::Blocks {
            rule: rule.name.clone(),
            why,
        };
        let mut resolved: HashMap<Gvk, Arc<Kind>> = HashMap::new();
        let mut missing = Vec::new();
        let mut out = Vec::new();
        for gvk in kinds_of(rule) {
            if let Some((_, kind)) = defined(candidate, &gvk) {
                resolved.insert(gvk, Arc::new(kind));
                continue;
            }
            match kinds.resolve(&gvk).await {
                Ok(kind) => {
                    resolved.insert(gvk, kind);
                }
                Err(KindError::NotServed(gvk)) => missing.push(gvk.to_string()),
                Err(error) => out.push(blocks(format!("{error} (checked again)"))),
            }
        }
        if !missing.is_empty() {
            out.push(if new {
                Finding::Waits {
                    rule: rule.name.clone(),
                    kinds: missing,
                }
            } else {
                blocks(format!(
                    "kinds not served by the API server: {} (the running version keeps running)",
                    missing.join(", ")
                ))
            });
            return out;
        }
        // A kind the set defines is checked against the CRD the set applies.
        if let Some((api, primary)) = defined(candidate, &rule.primary.gvk) {
            out.extend(
                own_status(rule, api, &primary)
                    .err()
                    .map(|e| blocks(e.to_string())),
            );
        } else if let Some(primary) = resolved.get(&rule.primary.gvk) {
            match status_schema(rule, &self.client, primary, None).await {
                Ok(_) => {}
                Err(SchemaRead::Refused(why)) => out.push(blocks(why.to_string())),
                Err(SchemaRead::Failed(kube::Error::Api(s))) if s.code == 403 => {
                    out.push(blocks(format!(
                        "kiln may not read the CustomResourceDefinition {}.{}, so the status schema of the primary kind cannot be checked (RBAC; checked again)",
                        primary.ar.plural, primary.gvk.group
                    )));
                }
                Err(SchemaRead::Failed(error)) => out.push(blocks(format!(
                    "the primary's CustomResourceDefinition cannot be read, so its status schema cannot be checked: {error} (checked again)"
                ))),
            }
        }
        let namespaced = |gvk: &Gvk| resolved.get(gvk).map(|k| k.namespaced);
        out.extend(
            crate::engine::runtime::unwatched(rule, &self.namespaces, namespaced)
                .into_iter()
                .map(blocks),
        );
        out.extend(
            self.permissions(rule, &resolved)
                .await
                .into_iter()
                .map(blocks),
        );
        out
    }

    /// What the rule needs that kiln may not do, one line per denial.
    async fn permissions(
        &self,
        rule: &Arc<Rule>,
        resolved: &HashMap<Gvk, Arc<Kind>>,
    ) -> Vec<String> {
        let set = RuleSet {
            rules: vec![rule.clone()],
        };
        let plural = |gvk: &Gvk| {
            resolved
                .get(gvk)
                .map_or_else(|| guess_plural(gvk), |k| k.ar.plural.clone())
        };
        let namespaced = |group: &str, resource: &str| {
            let base = resource.split('/').next().unwrap_or(resource);
            resource == "roles"
                || resolved
                    .values()
                    .any(|k| k.gvk.group == group && k.ar.plural == base && k.namespaced)
        };
        let asks = asks(&rule_grants(&set, &plural), &self.namespaces, &namespaced);
        let answers = join_all(asks.iter().map(|a| self.allowed(a))).await;
        asks.iter()
            .zip(answers)
            .filter_map(|(ask, answer)| match answer {
                Ok(true) => None,
                Ok(false) => Some(format!("kiln may not {ask} (RBAC)")),
                Err(error) => Some(format!(
                    "could not ask whether kiln may {ask}: {error} (checked again)"
                )),
            })
            .collect()
    }

    async fn allowed(&self, ask: &Ask) -> Result<bool, kube::Error> {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(ask.group.clone()),
                    resource: Some(ask.resource.clone()),
                    subresource: ask.subresource.clone(),
                    verb: Some(ask.verb.to_string()),
                    name: ask.name.clone(),
                    namespace: ask.namespace.clone(),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let api: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
        let answer = gate::create(&api, &PostParams::default(), &review, Warrant::Review).await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

/// `gvk` as the API a rule of `set` defines will serve it (once its CRD is
/// applied, the last step of a reload), with that API.
fn defined<'a>(set: &'a RuleSet, gvk: &Gvk) -> Option<(&'a RuleApi, Kind)> {
    let api = set
        .rules
        .iter()
        .filter_map(|r| r.api.as_deref())
        .find(|a| a.group == gvk.group && a.kind == gvk.kind)?;
    let version = api.crd["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == gvk.version.as_str() && v["served"] == true)?;
    let kind = Kind {
        gvk: gvk.clone(),
        ar: kube::api::ApiResource {
            group: api.group.clone(),
            version: gvk.version.clone(),
            api_version: gvk.api_version(),
            kind: api.kind.clone(),
            plural: api.plural.clone(),
        },
        namespaced: api.crd["spec"]["scope"] == "Namespaced",
        has_status: version["subresources"].get("status").is_some(),
    };
    Some((api, kind))
}

/// Whether the status schema of the CRD `api` defines declares what `rule`
/// writes on `primary`.
fn own_status(rule: &Rule, api: &RuleApi, primary: &Kind) -> Result<(), SchemaError> {
    // A CRD defines it: its status is written when it has the subresource.
    if status_writes(&primary.gvk, primary.has_status, true) != StatusWrites::Yes {
        return Ok(());
    }
    let version = &primary.gvk.version;
    StatusSchema::from_crd(&api.crd, version)?.check(
        &api.name(),
        version,
        &rule.status_fields,
        !rule.conditions.is_empty(),
    )
}

/// One question for the API server: may kiln do this?
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    group: String,
    resource: String,
    subresource: Option<String>,
    verb: &'static str,
    name: Option<String>,
    namespace: Option<String>,
}

impl std::fmt::Display for Ask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if let Some(sub) = &self.subresource {
            write!(f, "/{sub}")?;
        }
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(name) = &self.name {
            write!(f, " named {name}")?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in namespace {ns}"),
            None => Ok(()),
        }
    }
}

/// The questions that cover `grants`: namespaced resources in each of
/// `namespaces` (none: across all namespaces), the others cluster-wide.
fn asks(
    grants: &Grants,
    namespaces: &[String],
    namespaced: &dyn Fn(&str, &str) -> bool,
) -> Vec<Ask> {
    let mut out = Vec::new();
    let everywhere = [None];
    let listed: Vec<Option<String>> = namespaces.iter().cloned().map(Some).collect();
    let mut push = |group: &str, resource: &str, name: Option<&str>, verb: &'static str| {
        let (resource, subresource) = match resource.split_once('/') {
            Some((r, sub)) => (r.to_string(), Some(sub.to_string())),
            None => (resource.to_string(), None),
        };
        let places: &[Option<String>] = if namespaced(group, &resource) && !listed.is_empty() {
            &listed
        } else {
            &everywhere
        };
        for namespace in places {
            out.push(Ask {
                group: group.to_string(),
                resource: resource.clone(),
                subresource: subresource.clone(),
                verb,
                name: name.map(str::to_string),
                namespace: namespace.clone(),
            });
        }
    };
    for ((group, resource), verbs) in &grants.all {
        for verb in verbs {
            push(group, resource, None, verb);
        }
    }
    for ((group, resource, name), verbs) in &grants.named {
        for verb in verbs {
            push(group, resource, Some(name), verb);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_resources_are_asked_in_each_watched_namespace_others_cluster_wide() {
        let mut grants = Grants::default();
        grants
            .all
            .insert(("x.dev".into(), "widgets/status".into()), ["patch"].into());
        grants.named.insert(
            (
                "apiextensions.k8s.io".into(),
                "customresourcedefinitions".into(),
                "widgets.x.dev".into(),
            ),
            ["get"].into(),
        );
        let namespaced = |group: &str, resource: &str| group == "x.dev" && resource == "widgets";
        let got: Vec<String> = asks(&grants, &["a".into(), "b".into()], &namespaced)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            got,
            [
                "patch widgets/status.x.dev in namespace a",
                "patch widgets/status.x.dev in namespace b",
                "get customresourcedefinitions.apiextensions.k8s.io named widgets.x.dev",
            ]
        );
        // No namespace listed: asked across all of them.
        let got = asks(&grants, &[], &namespaced);
        assert!(got.iter().all(|a| a.namespace.is_none()), "{got:?}");
    }
}
