//! The observe and plan steps of a reconcile, read from the API server
//! (not from the engine's caches): what `kiln explain` and `kiln diff`
//! print. The snapshot is the engine's `Observed` and the plan its own
//! `plan::draft` + `Draft::decide`, so neither command states a verdict of
//! its own. It reads, never writes.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context as _;
use kiln::engine::ObjKey;
use kiln::engine::decision::{
    self, Decorations, Found, LiveChild, Observed, Plan, Refusal, Target,
};
use kiln::ownership;
use kiln::render::{self, CHILD_LABEL, Inputs, RULE_LABEL};
use kiln::rules::{Gvk, Rule};
use kiln::template::generate::Draw;
use kiln::template::{Budget, Piece, to_jinja};
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
    /// What the engine's decorators would do (as field managers under
    /// kiln's default `kiln`), or why they cannot render.
    pub decorations: Result<Decorations, String>,
}

/// Reads the primary's snapshot for `rule` from the API server and plans
/// over it; `Ok(Err(why))` when its watches cannot be read (as the engine
/// refuses such a reconcile).
pub async fn read(
    client: &Client,
    rule: &Rule,
    primary: &Value,
    key: &ObjKey,
) -> anyhow::Result<Result<Reading, String>> {
    let this = to_jinja(primary);
    let mut observed = Observed {
        inputs: Inputs {
            primary: primary.clone(),
            // A child that does not exist yet shows as missing; nothing is drawn.
            draw: Draw::Placeholder,
            ..Inputs::default()
        },
        ..Observed::default()
    };
    if let Err(refusal) = related(client, rule, &this, key, &mut observed).await {
        let (Refusal::Template(m) | Refusal::Namespace(m)) = refusal;
        return Ok(Err(m));
    }
    let scopes = live_children(client, rule, primary, key, &mut observed).await?;
    let scope_of = |gvk: &Gvk| scopes.get(gvk).map(|(_, s)| *s == Scope::Namespaced);
    let plan = match decision::draft(rule, &this, &observed, &scope_of) {
        Ok(draft) => {
            let uid = primary["metadata"]["uid"].as_str().unwrap_or_default();
            let mut occupants = decision::Occupants::new();
            for (gvk, at) in draft.names(rule, &observed) {
                let Some((ar, scope)) = scopes.get(gvk) else {
                    continue;
                };
                let found = api(client, ar, scope, at.namespace.as_deref())
                    .get_metadata_opt(&at.name)
                    .await?;
                if let Some(who) =
                    found.and_then(|f| ownership::holder(&f.metadata, &rule.name, uid))
                {
                    occupants.insert((gvk.clone(), at), who);
                }
            }
            observed.occupants = occupants;
            draft.decide(rule, &observed, &decision::Known::new())
        }
        Err(plan) => *plan,
    };
    let decorations = decision::decorations(
        &plan,
        rule,
        "kiln",
        || render::context(rule, &this, &observed.inputs),
        &observed.inputs,
    );
    Ok(Ok(Reading {
        observed,
        plan,
        decorations,
    }))
}

/// The rule's related objects for the primary, read as the engine reads
/// them, with the required ones not found.
async fn related(
    client: &Client,
    rule: &Rule,
    this: &minijinja::Value,
    key: &ObjKey,
    observed: &mut Observed,
) -> Result<(), Refusal> {
    let ctx = render::context(rule, this, &observed.inputs);
    let mut budget = Budget::default();
    let mut found = serde_json::Map::new();
    for watch in &rule.watches {
        let (ar, scope) = resolve(client, &watch.gvk)
            .await
            .map_err(|e| Refusal::Template(e.to_string()))?;
        let mut text = |piece: &Piece| {
            piece
                .render_string(&rule.templates, &ctx, &mut budget)
                .map_err(|e| Refusal::Template(e.to_string()))
        };
        let target = decision::related_target(watch, scope == Scope::Namespaced, key, &mut text)?;
        let read = |e: kube::Error| Refusal::Template(e.to_string());
        let got = match &target {
            Target::Named(at) => {
                let got = api(client, &ar, &scope, at.namespace.as_deref())
                    .get_opt(&at.name)
                    .await
                    .map_err(read)?;
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
                let list = api(client, &ar, &scope, namespace.as_deref())
                    .list(&ListParams::default().labels(&labels.join(",")))
                    .await
                    .map_err(read)?;
                Found::Selected(
                    list.items
                        .into_iter()
                        .filter(|o| {
                            selector.matches(o.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
                        })
                        .map(|o| serde_json::to_value(o).unwrap_or_default())
                        .collect(),
                )
            }
        };
        let (value, absent) = decision::related_seen(watch, &target, got);
        observed.missing.extend(absent);
        if let Some(value) = value {
            found.insert(watch.name.clone(), value);
        }
    }
    observed.inputs.related = found;
    Ok(())
}

/// The rule's live children of the primary, read from the API server as
/// the engine reads its caches: kiln's mark names the rule and the primary
/// (an `outside` child is looked for in every namespace). Returns each
/// child kind's resource and scope.
async fn live_children(
    client: &Client,
    rule: &Rule,
    primary: &Value,
    key: &ObjKey,
    observed: &mut Observed,
) -> anyhow::Result<HashMap<Gvk, (ApiResource, Scope)>> {
    let uid = primary["metadata"]["uid"].as_str().unwrap_or_default();
    let identity = decision::placed_identity(&serde_json::from_value(primary["metadata"].clone())?);
    let mut scopes = HashMap::new();
    for child in &rule.children {
        let (ar, scope) = resolve(client, &child.gvk).await?;
        let params = ListParams::default().labels(&format!(
            "{RULE_LABEL}={},{CHILD_LABEL}={}",
            rule.name, child.id
        ));
        let namespace = key.namespace.as_deref().filter(|_| !child.outside);
        let listed = api(client, &ar, &scope, namespace).list(&params).await?;
        let mut items = Vec::new();
        for o in listed.items {
            let Some(mark) = ownership::read(&o.metadata).filter(|m| {
                m.of(&rule.name, uid)
                    && decision::placed_believed(rule, m, &ObjKey::of(&o), &identity)
            }) else {
                continue;
            };
            observed.children.push(LiveChild {
                id: mark.child.clone(),
                gvk: child.gvk.clone(),
                key: ObjKey::of(&o),
                uid: o.metadata.uid.clone(),
                deleting: o.metadata.deletion_timestamp.is_some(),
                orphan: mark.orphaned(),
            });
            items.push(serde_json::to_value(o).unwrap_or_default());
        }
        by_name(&mut items);
        scopes.insert(child.gvk.clone(), (ar, scope));
        let value = match child.for_each {
            Some(_) => Value::Array(items),
            None if items.is_empty() => continue,
            None => items.swap_remove(0),
        };
        observed.inputs.observed.insert(child.id.clone(), value);
    }
    gone_children(client, rule, uid, key, &scopes, observed).await?;
    Ok(scopes)
}

/// The rule's live children of the primary whose id the rule no longer
/// has, in the primary's namespace, of the kinds the rule's children still
/// are (those the engine watches): the plan prunes them.
async fn gone_children(
    client: &Client,
    rule: &Rule,
    uid: &str,
    key: &ObjKey,
    scopes: &HashMap<Gvk, (ApiResource, Scope)>,
    observed: &mut Observed,
) -> anyhow::Result<()> {
    let params = ListParams::default().labels(&format!("{RULE_LABEL}={}", rule.name));
    for (gvk, (ar, scope)) in scopes {
        let listed = api(client, ar, scope, key.namespace.as_deref())
            .list(&params)
            .await?;
        for o in listed.items {
            let Some(mark) = ownership::read(&o.metadata).filter(|m| {
                let (at, of) = (o.metadata.namespace.as_deref(), key.namespace.as_deref());
                m.of(&rule.name, uid)
                    && ownership::in_place(at, of)
                    && !rule.children.iter().any(|c| c.id == m.child)
            }) else {
                continue;
            };
            observed.children.push(LiveChild {
                id: mark.child.clone(),
                gvk: gvk.clone(),
                key: ObjKey::of(&o),
                uid: o.metadata.uid.clone(),
                deleting: o.metadata.deletion_timestamp.is_some(),
                orphan: mark.orphaned(),
            });
        }
    }
    Ok(())
}

/// Sorts objects by name, as the engine orders `forEach` children.
fn by_name(items: &mut [Value]) {
    items.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
}

pub async fn resolve(client: &Client, gvk: &Gvk) -> anyhow::Result<(ApiResource, Scope)> {
    let (ar, caps) = capabilities(client, gvk).await?;
    Ok((ar, caps.scope))
}

pub async fn capabilities(
    client: &Client,
    gvk: &Gvk,
) -> anyhow::Result<(ApiResource, discovery::ApiCapabilities)> {
    let wanted = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
    discovery::pinned_kind(client, &wanted)
        .await
        .with_context(|| format!("the cluster does not serve {gvk}"))
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
