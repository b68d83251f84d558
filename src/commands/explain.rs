//! `kiln explain`: what kiln makes of one object, read from the cluster the
//! way `kubectl describe` reads it: which rules select it (and why not),
//! per child whether the live child holds what the rule renders now, the
//! object's conditions and kiln's recent Events about it. It reads, never
//! writes.

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Event;
use kiln::engine::informer::ObjKey;
use kiln::engine::placed;
use kiln::engine::plan::{self, LiveChild, Observed};
use kiln::engine::related::{self, Found, Refusal, Target};
use kiln::ownership;
use kiln::render::{self, CHILD_LABEL, Inputs, RULE_LABEL};
use kiln::rules::{Gvk, Rule, RuleSet};
use kiln::template::generate::Draw;
use kiln::template::{Budget, Piece, to_jinja};
use kube::api::{DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Scope};
use kube::{Api, Client};
use serde_json::Value;

use crate::cli::ExplainArgs;

/// How many of the latest Events are shown.
const EVENTS: usize = 10;

/// Explains the object; exit code 1 when it does not exist.
pub fn run(args: &ExplainArgs) -> anyhow::Result<ExitCode> {
    let from_files = match &args.rules_configmap {
        None => Some(super::render::load_rules(&args.rules)?),
        Some(_) => None,
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let client = super::run::client(
                args.kubeconfig.as_deref(),
                args.context.as_deref(),
                Some(super::run::REQUEST_TIMEOUT),
            )
            .await?;
            let set = match (from_files, &args.rules_configmap) {
                (Some(set), _) => set,
                (None, Some((ns, name))) => rules_in_cluster(&client, ns, name).await?,
                (None, None) => unreachable!("clap requires --rules or --rules-configmap"),
            };
            let out = explain(&client, args, &set.rules).await?;
            print!("{out}");
            Ok(ExitCode::SUCCESS)
        })
}

/// The rules in the ConfigMap `ns/name`, read through the same rule source
/// as `kiln run --rules-configmap`.
async fn rules_in_cluster(client: &Client, ns: &str, name: &str) -> anyhow::Result<RuleSet> {
    use kiln::reload::RuleSource;
    let version = kiln::reload::RulesConfigMap::new(client.clone(), ns, name)
        .first()
        .await?;
    kiln::reload::load(version, true).map_err(|refusal| {
        for d in refusal.diagnostics() {
            eprintln!("{d}");
        }
        anyhow::anyhow!("the rules in ConfigMap {ns}/{name} are invalid: kiln runs the last good version of them, which it does not keep in the cluster")
    })
}

/// The explanation, as text.
async fn explain(
    client: &Client,
    args: &ExplainArgs,
    rules: &[std::sync::Arc<Rule>],
) -> anyhow::Result<String> {
    let gvk = parse_gvk(&args.api_version, &args.kind)?;
    let (namespace, name) = match args.object.split_once('/') {
        Some((ns, name)) => (Some(ns.to_string()), name.to_string()),
        None => (None, args.object.clone()),
    };
    let (ar, caps) = capabilities(client, &gvk).await?;
    let scope = caps.scope.clone();
    let status_subresource = caps
        .subresources
        .iter()
        .any(|(sr, _)| sr.plural == "status");
    let key = ObjKey {
        namespace: namespace.filter(|_| scope == Scope::Namespaced),
        name,
    };
    let primary = api(client, &ar, &scope, key.namespace.as_deref())
        .get_opt(&key.name)
        .await?
        .with_context(|| format!("{} {key} not found", gvk.kind))?;
    let primary = serde_json::to_value(&primary)?;
    let uid = primary["metadata"]["uid"].as_str().unwrap_or_default();
    let mut out = format!("{} {key} (uid {uid})\n", gvk.kind);

    let labels: BTreeMap<String, String> =
        serde_json::from_value(primary["metadata"]["labels"].clone()).unwrap_or_default();
    let taking: Vec<&Rule> = rules
        .iter()
        .map(AsRef::as_ref)
        .filter(|r| r.primary.gvk == gvk)
        .collect();
    let no_status = gvk.is_custom() && !status_subresource && !taking.is_empty();
    out.push_str("\nRules:\n");
    if taking.is_empty() {
        out.push_str(&format!("  no rule takes {}\n", gvk));
    }
    // The labels of the object's namespace, for `spec.for.namespaceSelector`.
    let namespace_labels = match &key.namespace {
        Some(ns)
            if taking
                .iter()
                .any(|r| r.primary.namespace_selector.is_some()) =>
        {
            kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
                .get_opt(ns)
                .await?
                .map(|n| n.metadata.labels.unwrap_or_default())
        }
        _ => None,
    };
    for rule in taking {
        let refusal = rule
            .primary
            .refusal(key.namespace.as_deref(), &labels)
            .or_else(|| {
                let ns = key.namespace.as_deref()?;
                rule.primary
                    .namespace_refusal(ns, namespace_labels.as_ref().map(|l| l as _))
            });
        match refusal {
            Some(why) => out.push_str(&format!("  {}: does not select it: {why}\n", rule.name)),
            None => {
                out.push_str(&format!("  {}: selects it\n", rule.name));
                if rule.read_only {
                    out.push_str(&format!("  {}: spec.for.readOnly: kiln writes nothing on this object (no condition, observedGeneration, status field, finalizer, label or annotation)\n", rule.name));
                }
                out.push_str(&children(client, rule, &primary, &key).await?);
            }
        }
    }

    out.push_str("\nConditions:\n");
    if no_status {
        out.push_str(&format!(
            "  kiln writes no status: {} has no status subresource (add `subresources: {{status: {{}}}}` to its CustomResourceDefinition)\n",
            gvk.kind
        ));
    }
    let conditions = primary["status"]["conditions"].as_array();
    for c in conditions.into_iter().flatten() {
        let message = c["message"].as_str().unwrap_or_default();
        out.push_str(&format!(
            "  {} {} {}{}{message}\n",
            c["type"].as_str().unwrap_or_default(),
            c["status"].as_str().unwrap_or_default(),
            c["reason"].as_str().unwrap_or_default(),
            if message.is_empty() { "" } else { ": " },
        ));
    }
    if conditions.is_none_or(Vec::is_empty) {
        out.push_str("  none\n");
    }

    out.push_str("\nEvents (kiln's, latest last):\n");
    let events = events(client, key.namespace.as_deref(), uid).await?;
    for e in &events {
        out.push_str(&format!(
            "  {} {} x{}: {}\n",
            e.type_.as_deref().unwrap_or_default(),
            e.reason.as_deref().unwrap_or_default(),
            e.count.unwrap_or(1),
            e.message.as_deref().unwrap_or_default()
        ));
    }
    if events.is_empty() {
        out.push_str("  none\n");
    }
    Ok(out)
}

/// One rule's children of the primary: the engine's plan, from what the
/// API server holds now.
async fn children(
    client: &Client,
    rule: &Rule,
    primary: &Value,
    key: &ObjKey,
) -> anyhow::Result<String> {
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
        return Ok(format!("    its watches cannot be read: {m}\n"));
    }
    let scopes = live_children(client, rule, primary, key, &mut observed).await?;
    let scope_of = |gvk: &Gvk| scopes.get(gvk).map(|(_, s)| *s == Scope::Namespaced);
    let plan = match plan::draft(rule, &this, &observed, &scope_of) {
        Ok(draft) => {
            let uid = primary["metadata"]["uid"].as_str().unwrap_or_default();
            let mut occupants = plan::Occupants::new();
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
            draft.decide(rule, &observed, &plan::Known::new())
        }
        Err(plan) => *plan,
    };
    Ok(super::verdict::lines(&plan, "    "))
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
        let target = related::target(watch, scope == Scope::Namespaced, key, &mut text)?;
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
        let (value, absent) = related::seen(watch, &target, got);
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
    let identity = placed::identity(&serde_json::from_value(primary["metadata"].clone())?);
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
                m.of(&rule.name, uid) && placed::believed(rule, m, &ObjKey::of(&o), &identity)
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
    Ok(scopes)
}

/// kiln's latest Events about the object with this uid.
async fn events(client: &Client, namespace: Option<&str>, uid: &str) -> anyhow::Result<Vec<Event>> {
    let api: Api<Event> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::namespaced(client.clone(), "default"),
    };
    let params = ListParams::default().fields(&format!("involvedObject.uid={uid}"));
    let mut events: Vec<Event> = api
        .list(&params)
        .await?
        .items
        .into_iter()
        .filter(|e| e.reporting_component.as_deref() == Some("kiln"))
        .collect();
    events.sort_by_key(|e| {
        e.event_time
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.last_timestamp.as_ref().map(|t| t.0))
    });
    let skip = events.len().saturating_sub(EVENTS);
    Ok(events.split_off(skip))
}

/// Sorts objects by name, as the engine orders `forEach` children.
fn by_name(items: &mut [Value]) {
    items.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
}

fn parse_gvk(api_version: &str, kind: &str) -> anyhow::Result<Gvk> {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    if version.is_empty() || kind.is_empty() {
        bail!(
            "give the object as APIVERSION KIND [NAMESPACE/]NAME, e.g. demo.kiln.dev/v1 WebApp default/shop"
        );
    }
    Ok(Gvk {
        group: group.to_string(),
        version: version.to_string(),
        kind: kind.to_string(),
    })
}

async fn resolve(client: &Client, gvk: &Gvk) -> anyhow::Result<(ApiResource, Scope)> {
    let (ar, caps) = capabilities(client, gvk).await?;
    Ok((ar, caps.scope))
}

async fn capabilities(
    client: &Client,
    gvk: &Gvk,
) -> anyhow::Result<(ApiResource, discovery::ApiCapabilities)> {
    let wanted = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
    discovery::pinned_kind(client, &wanted)
        .await
        .with_context(|| format!("the cluster does not serve {gvk}"))
}

fn api(
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
