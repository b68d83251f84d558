//! What a sync hook's answer becomes in a plan (pure): its children join
//! the rendered ones (checked, marked and placed exactly as a template's,
//! so pruning, ownership, the write budget and the gate are the same), its
//! status joins the rule's fields, its `resyncAfterSeconds` the next look.
//!
//! An answer is taken whole or not at all: one child of a kind the rule
//! does not list, in another namespace, cluster-scoped under a namespaced
//! primary, unnamed or named twice refuses the answer, and the plan applies
//! nothing (no create, no change, no prune), as for a hook that failed.

use serde_json::Value;

use crate::hook::{Answer, Called};
use crate::render::{ChildReadiness, DesiredChild, Rendered, ScopeOf, Wake};
use crate::rules::{Gvk, Rule};

/// Fields of a returned child's metadata the API server sets: left out,
/// as a hook may echo a live child back.
const SERVER_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "ownerReferences",
];

/// Status keys that are the engine's: a hook's values for them are not
/// written.
const ENGINE_STATUS: &[&str] = &["observedGeneration", "conditions"];

/// Why a plan applies nothing from the hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The call failed, or its answer is refused: for humans.
    Failed(String),
    /// This source does not call hooks.
    NotCalled,
}

/// Adds what the sync hook answered to `rendered`. `live` is the primary's
/// live children by id, as templates read them (`observed.<id>`).
pub(crate) fn merge(
    rule: &Rule,
    called: Option<&Called>,
    primary: &Value,
    live: &serde_json::Map<String, Value>,
    rendered: &mut Rendered,
    scope_of: ScopeOf<'_>,
) -> Result<(), Refused> {
    let answer = match called {
        Some(Called::Answered(answer)) => answer,
        Some(Called::Failed(why)) => return Err(Refused::Failed(why.clone())),
        Some(Called::NotCalled) | None => return Err(Refused::NotCalled),
    };
    let children = children(rule, answer, primary, scope_of).map_err(Refused::Failed)?;
    for child in &children {
        if rendered
            .children
            .iter()
            .any(|c| c.gvk == child.gvk && c.namespace == child.namespace && c.name == child.name)
        {
            return Err(Refused::Failed(format!(
                "the sync hook returned {} {}, which a template of the rule renders too",
                child.gvk.kind, child.name
            )));
        }
    }
    for child in children {
        let id_live = crate::render::observed_named(live.get(&child.id), &child.name);
        let ready = id_live.is_some_and(|l| crate::readiness::judge(&child.gvk, l).is_ok());
        rendered.readiness.push(ChildReadiness {
            id: child.id.clone(),
            name: child.name.clone(),
            ready,
        });
        rendered.children.push(child);
    }
    if let Some(status) = &answer.status {
        for (k, v) in status {
            // The rule's own fields win: its author wrote them.
            if !ENGINE_STATUS.contains(&k.as_str()) && !rendered.status.contains_key(k) {
                rendered.status.insert(k.clone(), v.clone());
            }
        }
    }
    if let Some(after) = answer.resync_after
        && rendered.wake.is_none_or(|w| after < w.after)
    {
        let at = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::try_from(after).unwrap_or_default())
            .unwrap_or_else(|_| jiff::Timestamp::now());
        rendered.wake = Some(Wake { at, after });
    }
    Ok(())
}

/// The answer's children as kiln applies them, each marked with the id of
/// its kind; the first one refused refuses them all.
fn children(
    rule: &Rule,
    answer: &Answer,
    primary: &Value,
    scope_of: ScopeOf<'_>,
) -> Result<Vec<DesiredChild>, String> {
    let cluster_scoped_primary = primary["metadata"]["namespace"]
        .as_str()
        .is_none_or(str::is_empty);
    let mut out: Vec<DesiredChild> = Vec::with_capacity(answer.children.len());
    for (i, object) in answer.children.iter().enumerate() {
        let gvk = gvk_of(object).ok_or_else(|| {
            format!("the sync hook's child {i} has no apiVersion and kind it could be applied as")
        })?;
        let named = object["metadata"]["name"].as_str().unwrap_or_default();
        let Some(spec) = rule.children.iter().find(|c| c.from_hook && c.gvk == gvk) else {
            return Err(format!(
                "the sync hook returned {gvk} `{named}`, a kind spec.hooks.children does not list: kiln applies only the kinds the rule declares"
            ));
        };
        if cluster_scoped_primary && scope_of(&gvk).unwrap_or(true) {
            return Err(format!(
                "the sync hook returned the namespaced {gvk} `{named}` for a cluster-scoped primary: kiln places a hook's children only in the primary's namespace"
            ));
        }
        let mut object = object.clone();
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in SERVER_METADATA {
                meta.remove(*field);
            }
            // kiln's marks are kiln's to write: a hook's copy (another
            // primary's uid, another rule) is not kept.
            for map in ["labels", "annotations"] {
                if let Some(Value::Object(m)) = meta.get_mut(map) {
                    m.retain(|k, _| !is_kilns(k));
                }
            }
        }
        if let Some(o) = object.as_object_mut() {
            o.remove("status");
        }
        let child = crate::render::finish::hooked(rule, spec, object, primary, scope_of)
            .map_err(|e| format!("the sync hook's {gvk} `{named}`: {e}"))?;
        if out
            .iter()
            .any(|c| c.gvk == child.gvk && c.namespace == child.namespace && c.name == child.name)
        {
            return Err(format!(
                "the sync hook returned {gvk} `{}` twice",
                child.name
            ));
        }
        out.push(child);
    }
    Ok(out)
}

/// Whether a label or annotation key is one of kiln's (`kiln.dev/...`,
/// `<rule>.kiln.dev/...`).
fn is_kilns(key: &str) -> bool {
    key.split_once('/')
        .is_some_and(|(prefix, _)| prefix == "kiln.dev" || prefix.ends_with(".kiln.dev"))
}

/// The kind an object names (`apiVersion`, `kind`).
fn gvk_of(object: &Value) -> Option<Gvk> {
    let api_version = object["apiVersion"].as_str()?;
    let kind = object["kind"].as_str().filter(|k| !k.is_empty())?;
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.to_string()),
    };
    (!version.is_empty()).then(|| Gvk {
        group,
        version,
        kind: kind.to_string(),
    })
}

#[cfg(test)]
mod tests;
