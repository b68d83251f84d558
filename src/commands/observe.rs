//! The observe and plan steps of a reconcile, read from the API server
//! (not from the engine's caches): what `kiln explain` and `kiln diff`
//! print. The snapshot is the engine's `Observed` and the plan its own
//! `plan::draft` + `Draft::decide`, so neither command states a verdict of
//! its own. It reads, never writes.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kiln::engine::ObjKey;
use kiln::engine::decision::{
    self, Decorations, Found, Live, LiveChild, Observed, Plan, Source, Target,
};
use kiln::ownership;
use kiln::render::{self, Inputs, RULE_LABEL};
use kiln::rules::{Gvk, Rule, Watch};
use kiln::template::generate::Draw;
use kiln::template::to_jinja;
use kube::api::{DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Scope};
use kube::{Api, Client};
use serde_json::Value;

/// Runs `f` with a client of the cluster the kubeconfig names (kiln's
/// request timeout), on a runtime of its own.
pub fn with_client<T>(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
    f: impl AsyncFnOnce(Client) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let client =
                super::run::client(kubeconfig, context, Some(super::run::REQUEST_TIMEOUT)).await?;
            f(client).await
        })
}

/// One rule's reconcile of one primary, as read now: the snapshot and the
/// engine's plan over it.
pub struct Reading {
    /// What the plan was decided from (the live children among it).
    pub observed: Observed,
    /// The engine's plan.
    pub plan: Plan,
    /// What the engine's decorators would do (judged by the fields of the
    /// field manager given), or why they cannot render.
    pub decorations: Result<Decorations, String>,
}

/// Reads the primary's snapshot for `rule` from the API server and plans
/// over it; `Ok(Err(why))` when its watches cannot be read (as the engine
/// refuses such a reconcile).
pub async fn read(
    client: &Client,
    rule: &Rule,
    primary: &Value,
    field_manager: &str,
) -> anyhow::Result<Result<Reading, String>> {
    let this = to_jinja(primary);
    let source = ApiServer::of(client, rule).await?;
    let inputs = Inputs {
        primary: primary.clone(),
        // A child that does not exist yet shows as missing; nothing is drawn.
        draw: Draw::Placeholder,
        ..Inputs::default()
    };
    let mut observed = match decision::snapshot(&source, rule, &this, inputs).await? {
        Ok(observed) => observed,
        Err((_, refusal)) => return Ok(Err(refusal.message().to_string())),
    };
    let known = decision::Known::new();
    let (plan, _) = decision::decide(&source, rule, &this, &mut observed, &known, false).await?;
    let decorations = decision::decorations(
        &plan,
        rule,
        field_manager,
        || render::context(rule, &this, &observed.inputs),
        &observed.inputs,
    );
    Ok(Ok(Reading {
        observed,
        plan,
        decorations,
    }))
}

/// The API server, read for one rule: each kind the rule reads or writes
/// resolved once.
struct ApiServer<'c> {
    client: &'c Client,
    kinds: HashMap<Gvk, (ApiResource, Scope)>,
}

impl<'c> ApiServer<'c> {
    /// Resolves the rule's child and watched kinds; fails when the cluster
    /// does not serve one.
    async fn of(client: &'c Client, rule: &Rule) -> anyhow::Result<Self> {
        let mut kinds = HashMap::new();
        let gvks = rule.children.iter().map(|c| &c.gvk);
        for gvk in gvks.chain(rule.watches.iter().map(|w| &w.gvk)) {
            if !kinds.contains_key(gvk) {
                kinds.insert(gvk.clone(), resolve(client, gvk).await?);
            }
        }
        Ok(Self { client, kinds })
    }

    /// The API of `gvk` in `namespace` (every namespace: `None`).
    fn api(&self, gvk: &Gvk, namespace: Option<&str>) -> anyhow::Result<Api<DynamicObject>> {
        let (ar, scope) = self
            .kinds
            .get(gvk)
            .with_context(|| format!("{gvk} was not resolved"))?;
        Ok(api(self.client, ar, scope, namespace))
    }
}

impl Source for ApiServer<'_> {
    type Error = anyhow::Error;

    fn namespaced(&self, gvk: &Gvk) -> Option<bool> {
        self.kinds.get(gvk).map(|(_, s)| *s == Scope::Namespaced)
    }

    async fn related(&self, watch: &Watch, target: &Target) -> anyhow::Result<Option<Found>> {
        Ok(Some(match target {
            Target::Named(at) => {
                let got = self
                    .api(&watch.gvk, at.namespace.as_deref())?
                    .get_opt(&at.name)
                    .await?;
                Found::Named(got.map(|o| serde_json::to_value(o).unwrap_or_default()))
            }
            Target::Selected {
                namespace,
                selector,
                ..
            } => {
                let labels: Vec<String> = selector
                    .match_labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                let params = ListParams::default().labels(&labels.join(","));
                let list = self
                    .api(&watch.gvk, namespace.as_deref())?
                    .list(&params)
                    .await?;
                let no_labels = BTreeMap::new();
                Found::Selected(
                    list.items
                        .into_iter()
                        .filter(|o| {
                            selector.matches(o.metadata.labels.as_ref().unwrap_or(&no_labels))
                        })
                        .map(|o| serde_json::to_value(o).unwrap_or_default())
                        .collect(),
                )
            }
        }))
    }

    /// Lists each child kind by kiln's rule label, in the primary's
    /// namespace (every namespace for a kind some `outside` child is),
    /// and takes what the engine's judgement takes.
    async fn children(&self, rule: &Rule, primary: &Value) -> anyhow::Result<Vec<Live>> {
        let meta: ObjectMeta = serde_json::from_value(primary["metadata"].clone())?;
        let uid = meta.uid.clone().unwrap_or_default();
        let identity = decision::placed_identity(&meta);
        let params = ListParams::default().labels(&format!("{RULE_LABEL}={}", rule.name));
        let mut live = Vec::new();
        let mut seen: Vec<&Gvk> = Vec::new();
        for spec in &rule.children {
            if seen.contains(&&spec.gvk) {
                continue;
            }
            seen.push(&spec.gvk);
            let outside = rule.children.iter().any(|c| c.gvk == spec.gvk && c.outside);
            let namespace = meta.namespace.as_deref().filter(|_| !outside);
            for o in self.api(&spec.gvk, namespace)?.list(&params).await?.items {
                let key = ObjKey::of(&o);
                let Some(mark) = decision::child_mark(rule, &uid, &identity, &o.metadata, &key)
                else {
                    continue;
                };
                live.push(Live {
                    child: LiveChild {
                        id: mark.child.clone(),
                        gvk: spec.gvk.clone(),
                        key,
                        uid: o.metadata.uid.clone(),
                        deleting: o.metadata.deletion_timestamp.is_some(),
                        orphan: mark.orphaned(),
                    },
                    object: serde_json::to_value(o)?,
                });
            }
        }
        Ok(live)
    }

    async fn holder(
        &self,
        rule: &Rule,
        gvk: &Gvk,
        at: &ObjKey,
        uid: &str,
    ) -> anyhow::Result<Option<String>> {
        let found = self
            .api(gvk, at.namespace.as_deref())?
            .get_metadata_opt(&at.name)
            .await?;
        Ok(found.and_then(|f| ownership::holder(&f.metadata, &rule.name, uid)))
    }
}

pub async fn resolve(client: &Client, gvk: &Gvk) -> anyhow::Result<(ApiResource, Scope)> {
    let (ar, caps) = capabilities(client, gvk).await?;
    Ok((ar, caps.scope))
}

pub async fn capabilities(
    client: &Client,
    gvk: &Gvk,
) -> anyhow::Result<(ApiResource, discovery::ApiCapabilities)> {
    served(client, gvk)
        .await?
        .with_context(|| format!("the cluster does not serve {gvk}"))
}

/// The kind's resource and capabilities; `None` when the API server does
/// not serve it (discovery does not list it, or its group is not found),
/// as the engine tells a kind that is not served yet
/// (`engine::cache::Kinds`). Any other failure is an error.
pub async fn served(
    client: &Client,
    gvk: &Gvk,
) -> anyhow::Result<Option<(ApiResource, discovery::ApiCapabilities)>> {
    let wanted = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
    match discovery::pinned_kind(client, &wanted).await {
        Ok(found) => Ok(Some(found)),
        Err(kube::Error::Discovery(_)) => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e).with_context(|| format!("discovering {gvk}")),
    }
}

pub fn api(
    client: &Client,
    ar: &ApiResource,
    scope: &Scope,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match (scope, namespace) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, ar),
        _ => Api::all_with(client.clone(), ar),
    }
}
