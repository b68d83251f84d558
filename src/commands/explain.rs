//! `kiln explain`: what kiln makes of one object, read from the cluster the
//! way `kubectl describe` reads it: which rules select it (and why not),
//! per child whether the live child holds what the rule renders now, the
//! object's conditions and kiln's recent Events about it. It reads, never
//! writes.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Event;
use kiln::engine::ObjKey;
use kiln::rules::{Gvk, Rule, RuleSet};
use kube::api::ListParams;
use kube::discovery::Scope;
use kube::{Api, Client};
use serde_json::Value;

use super::observe::{self, api, capabilities};
use crate::cli::ExplainArgs;

/// How many of the latest Events are shown.
const EVENTS: usize = 10;

/// Explains the object; exit code 1 when it does not exist.
pub fn run(args: &ExplainArgs) -> anyhow::Result<ExitCode> {
    let from_files = match &args.rules_configmap {
        None if !args.rules_from_cluster => Some(super::render::load_rules(&args.rules)?),
        _ => None,
    };
    observe::with_client(
        args.kubeconfig.as_deref(),
        args.context.as_deref(),
        async |client| {
            let set = match (from_files, &args.rules_configmap) {
                (Some(set), _) => set,
                (None, Some((ns, name))) => rules_in_cluster(&client, ns, name).await?,
                (None, None) => super::explain_rules::from_resources(&client).await?,
            };
            let out = explain(&client, args, &set.rules).await?;
            print!("{out}");
            Ok(ExitCode::SUCCESS)
        },
    )
}

/// The rules in the ConfigMap `ns/name`, read through the same rule source
/// as `kiln run --rules-configmap`.
async fn rules_in_cluster(client: &Client, ns: &str, name: &str) -> anyhow::Result<RuleSet> {
    use kiln::reload::RuleSource;
    let version = kiln::reload::RulesConfigMap::new(client.clone(), ns, name)
        .first()
        .await?;
    Ok(super::explain_rules::valid(version))
}

/// The explanation, as text.
async fn explain(
    client: &Client,
    args: &ExplainArgs,
    rules: &[std::sync::Arc<Rule>],
) -> anyhow::Result<String> {
    let found = find(client, args).await?;
    let uid = found.primary["metadata"]["uid"]
        .as_str()
        .unwrap_or_default();
    let mut out = format!("{} {} (uid {uid})\n", found.gvk.kind, found.key);
    // A rule on another version of the kind reads the object as the API
    // server serves it at that version (`rules_section`).
    let taking: Vec<&Rule> = rules
        .iter()
        .map(AsRef::as_ref)
        .filter(|r| r.primary.gvk.group == found.gvk.group && r.primary.gvk.kind == found.gvk.kind)
        .collect();
    out.push_str(&rules_section(client, &found, &taking, &args.field_manager).await?);
    let no_status = found.gvk.may_be_crd() && !found.status_subresource && !taking.is_empty();
    out.push_str(&conditions_section(&found, no_status));
    let events = events(client, found.key.namespace.as_deref(), uid).await?;
    out.push_str(&events_section(&events));
    Ok(out)
}

/// The object explained, as the API server holds it.
struct Found {
    gvk: Gvk,
    key: ObjKey,
    primary: Value,
    /// Its kind has a status subresource.
    status_subresource: bool,
}

/// Reads the object the arguments name (`namespace/name` or `name`).
async fn find(client: &Client, args: &ExplainArgs) -> anyhow::Result<Found> {
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
    Ok(Found {
        primary: serde_json::to_value(&primary)?,
        gvk,
        key,
        status_subresource,
    })
}

/// The rules taking the object's kind: whether each selects it (and why
/// not), and each selecting rule's plan for its children.
async fn rules_section(
    client: &Client,
    found: &Found,
    taking: &[&Rule],
    field_manager: &str,
) -> anyhow::Result<String> {
    let (key, primary) = (&found.key, &found.primary);
    let mut out = "\nRules:\n".to_string();
    if taking.is_empty() {
        out.push_str(&format!("  no rule takes {}\n", found.gvk));
    }
    let labels: BTreeMap<String, String> =
        serde_json::from_value(primary["metadata"]["labels"].clone()).unwrap_or_default();
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
                match at_version(client, found, &rule.primary.gvk).await {
                    Ok(primary) => {
                        out.push_str(&children(client, rule, &primary, field_manager).await?);
                    }
                    Err(e) => out.push_str(&format!("    cannot be read: {e:#}\n")),
                }
            }
        }
    }
    Ok(out)
}

/// The object explained as the API server serves it at `gvk`'s version
/// (the version a rule reads it at): read again when that is not the
/// version it was named at, so the API server converts it.
async fn at_version(client: &Client, found: &Found, gvk: &Gvk) -> anyhow::Result<Value> {
    if gvk.version == found.gvk.version {
        return Ok(found.primary.clone());
    }
    let (ar, caps) = capabilities(client, gvk).await?;
    let key = &found.key;
    let object = api(client, &ar, &caps.scope, key.namespace.as_deref())
        .get_opt(&key.name)
        .await?
        .with_context(|| format!("{} {key} not found at {}", gvk.kind, gvk.api_version()))?;
    Ok(serde_json::to_value(&object)?)
}

/// The object's conditions, and why kiln writes none when `no_status`.
fn conditions_section(found: &Found, no_status: bool) -> String {
    let mut out = "\nConditions:\n".to_string();
    if no_status {
        out.push_str(&format!(
            "  kiln writes no status: {} has no status subresource (add `subresources: {{status: {{}}}}` to its CustomResourceDefinition)\n",
            found.gvk.kind
        ));
    }
    let conditions = found.primary["status"]["conditions"].as_array();
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
    out
}

/// kiln's Events about the object, latest last.
fn events_section(events: &[Event]) -> String {
    let mut out = "\nEvents (kiln's, latest last):\n".to_string();
    for e in events {
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
    out
}

/// One rule's children of the primary: the engine's plan, from what the
/// API server holds now, with the fields each changed child would get.
async fn children(
    client: &Client,
    rule: &Rule,
    primary: &Value,
    field_manager: &str,
) -> anyhow::Result<String> {
    Ok(
        match observe::read(client, rule, primary, field_manager).await {
            // What the API server refuses (a kind kiln's credentials may not
            // read) is said here; the primary's conditions and Events follow.
            Err(e) => format!("    cannot be read: {e:#}\n"),
            Ok(Err(m)) => format!("    its watches cannot be read: {m}\n"),
            Ok(Ok(reading)) => {
                let children = super::verdict::lines_with(&reading.plan, "    ", |v| {
                    super::live_diff::changed_fields(&reading, v)
                });
                children + &super::verdict::decorations(&reading.decorations, "    ")
            }
        },
    )
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
