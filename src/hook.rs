//! Metacontroller's hook JSON, both ways (pure): the request kiln POSTs to a
//! rule's sync or finalize hook (a CompositeController's: `controller`,
//! `parent`, `children`, `related`, `finalizing`) and the answer it reads
//! back (`status`, `children`, `resyncAfterSeconds`, `finalized`). Children
//! and related objects are keyed `Kind.apiVersion` (`Pod.v1`,
//! `Deployment.apps/v1`), then by name, as Metacontroller keys them, so a
//! hook written for Metacontroller answers kiln unchanged.
//!
//! What the answer's children become (checked, marked, placed) is the
//! decision's (`engine::decision::hooked`); the call itself is the engine's.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::rules::{Gvk, Rule};

/// The soonest a hook's `resyncAfterSeconds` brings a primary back.
const MIN_RESYNC: f64 = 1.0;

/// What a hook answered, read.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Answer {
    /// Status fields for the primary (`None`: the hook sets none).
    pub status: Option<Map<String, Value>>,
    /// The children the primary should have, as the hook returned them.
    pub children: Vec<Value>,
    /// Call again this long after (`resyncAfterSeconds`, when positive).
    pub resync_after: Option<Duration>,
    /// The finalize hook is done: kiln may let the primary go.
    pub finalized: bool,
}

/// A hook's call, as a reconcile sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Called {
    /// The hook answered.
    Answered(Answer),
    /// The call failed (the error, the status, the time or the body): for
    /// humans, with nothing a Secret holds.
    Failed(String),
    /// This source does not call hooks (`kiln explain`, `kiln diff`).
    NotCalled,
}

/// Why an answer cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// The body is not the JSON of a hook's answer.
    #[error("the answer is not a hook's JSON response: {0}")]
    Json(String),
    /// The body is larger than kiln reads.
    #[error("the answer is {got} bytes; kiln reads at most {max}")]
    TooLarge {
        /// Its size.
        got: usize,
        /// The bound.
        max: usize,
    },
    /// More children than one primary may have.
    #[error("the answer holds {got} children; at most {max}")]
    TooMany {
        /// How many.
        got: usize,
        /// The bound.
        max: usize,
    },
}

/// The answer as Metacontroller defines it; unknown fields are ignored, as
/// Metacontroller ignores them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    #[serde(default)]
    status: Option<Map<String, Value>>,
    #[serde(default)]
    children: Option<Vec<Value>>,
    #[serde(default)]
    resync_after_seconds: Option<f64>,
    #[serde(default)]
    finalized: bool,
}

/// Reads a hook's answer (at most `max` bytes, at most `children` children).
pub fn answer(body: &[u8], max: usize, children: usize) -> Result<Answer, AnswerError> {
    if body.len() > max {
        return Err(AnswerError::TooLarge {
            got: body.len(),
            max,
        });
    }
    let wire: Wire = serde_json::from_slice(body).map_err(|e| AnswerError::Json(e.to_string()))?;
    let returned = wire.children.unwrap_or_default();
    if returned.len() > children {
        return Err(AnswerError::TooMany {
            got: returned.len(),
            max: children,
        });
    }
    // Seconds as Metacontroller reads them: positive and finite, else none;
    // at least one (a hook asking again at once would call itself in a
    // loop) and at most a day.
    let resync_after = wire
        .resync_after_seconds
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| Duration::from_secs_f64(s.clamp(MIN_RESYNC, 86_400.0)));
    Ok(Answer {
        status: wire.status,
        children: returned,
        resync_after,
        finalized: wire.finalized,
    })
}

/// Whether a reconcile of `primary` asks `rule`'s finalize hook: the
/// primary is being deleted and the rule has one.
pub fn finalizing(rule: &Rule, primary: &Value) -> bool {
    !primary["metadata"]["deletionTimestamp"].is_null()
        && rule.hook.as_ref().is_some_and(|h| h.finalize.is_some())
}

/// Metacontroller's key of a kind: `Kind.apiVersion`.
pub fn kind_key(gvk: &Gvk) -> String {
    format!("{}.{}", gvk.kind, gvk.api_version())
}

/// The request for `rule`'s hook about `primary`, whose live children are
/// `observed` (child id → object, or list) and related objects `related`
/// (watch name → object, or list).
pub fn request(
    rule: &Rule,
    primary: &Value,
    observed: &Map<String, Value>,
    related: &Map<String, Value>,
    finalizing: bool,
) -> Value {
    let namespace = primary["metadata"]["namespace"].as_str();
    let mut children = Map::new();
    for child in rule.children.iter().filter(|c| c.from_hook) {
        let by_name = by_name(observed.get(&child.id), namespace);
        children.insert(kind_key(&child.gvk), Value::Object(by_name));
    }
    let mut related_map: Map<String, Value> = Map::new();
    for watch in &rule.watches {
        let entry = related_map
            .entry(kind_key(&watch.gvk))
            .or_insert_with(|| json!({}));
        if let Value::Object(m) = entry {
            m.extend(by_name(related.get(&watch.name), namespace));
        }
    }
    json!({
        "controller": controller(rule),
        "parent": primary,
        "children": children,
        "related": related_map,
        "finalizing": finalizing,
    })
}

/// The objects of one id or watch by name (`namespace/name` for one in
/// another namespace than the primary's).
fn by_name(found: Option<&Value>, namespace: Option<&str>) -> Map<String, Value> {
    let items: Vec<&Value> = match found {
        Some(Value::Array(items)) => items.iter().collect(),
        Some(Value::Null) | None => Vec::new(),
        Some(one) => vec![one],
    };
    items
        .into_iter()
        .map(|o| {
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            let key = match o["metadata"]["namespace"].as_str() {
                Some(ns) if Some(ns) != namespace => format!("{ns}/{name}"),
                _ => name.to_string(),
            };
            (key, o.clone())
        })
        .collect()
}

/// The `controller` a hook is told about: a CompositeController named after
/// the rule, with the parent's and the children's kinds.
fn controller(rule: &Rule) -> Value {
    let kind = |gvk: &Gvk| json!({"apiVersion": gvk.api_version(), "kind": gvk.kind});
    let children: Vec<Value> = rule
        .children
        .iter()
        .filter(|c| c.from_hook)
        .map(|c| kind(&c.gvk))
        .collect();
    json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "CompositeController",
        "metadata": {"name": rule.name},
        "spec": {
            "parentResource": kind(&rule.primary.gvk),
            "childResources": children,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: hello}
spec:
  for: {apiVersion: ctl.example.com/v1, kind: HelloWorld}
  watches:
    - name: settings
      apiVersion: v1
      kind: ConfigMap
      ref: {name: settings}
  hooks:
    sync: {url: "http://127.0.0.1:9/sync"}
    children:
      - {id: pods, apiVersion: v1, kind: Pod}
      - {id: deployments, apiVersion: apps/v1, kind: Deployment}
"#;

    #[test]
    fn the_request_keys_children_and_related_as_metacontroller_does() {
        let rule = crate::rules::one_rule(RULE);
        let parent = json!({"metadata": {"name": "w", "namespace": "team"}});
        let pod = json!({"metadata": {"name": "w-pod", "namespace": "team"}});
        let settings = json!({"metadata": {"name": "settings", "namespace": "shared"}});
        let observed = Map::from_iter([("pods".to_string(), json!([pod]))]);
        let related = Map::from_iter([("settings".to_string(), settings.clone())]);
        let got = request(&rule, &parent, &observed, &related, false);
        assert_eq!(got["parent"], parent);
        assert_eq!(got["children"]["Pod.v1"]["w-pod"], pod);
        assert_eq!(got["children"]["Deployment.apps/v1"], json!({}));
        assert_eq!(got["related"]["ConfigMap.v1"]["shared/settings"], settings);
        assert_eq!(got["finalizing"], json!(false));
        assert_eq!(got["controller"]["metadata"]["name"], json!("hello"));
    }

    #[test]
    fn an_answer_is_read_within_its_bounds() {
        let body = br#"{"status": {"replicas": 1}, "children": [{"kind": "Pod"}],
            "resyncAfterSeconds": 2.5, "finalized": true, "extra": 1}"#;
        let got = answer(body, 1024, 10).unwrap();
        assert_eq!(
            got.status,
            Some(Map::from_iter([("replicas".into(), json!(1))]))
        );
        assert_eq!(got.children.len(), 1);
        assert_eq!(got.resync_after, Some(Duration::from_millis(2500)));
        assert!(got.finalized);
        let soon = answer(br#"{"resyncAfterSeconds": 0.001}"#, 1024, 10).unwrap();
        assert_eq!(
            soon.resync_after,
            Some(Duration::from_secs(1)),
            "no hot loop"
        );
        // Metacontroller's nulls and zero: nothing.
        let none = answer(br#"{"children": null, "resyncAfterSeconds": 0}"#, 1024, 10).unwrap();
        assert_eq!(none, Answer::default());
        let refused = [
            (&b"{"[..], "not a hook's JSON"),
            (&b"[1]"[..], "not a hook's JSON"),
            (&br#"{"children": [1, 2]}"#[..], "holds 2 children"),
            (&[b' '; 2000][..], "2000 bytes"),
        ];
        for (body, why) in refused {
            let got = answer(body, 1024, 1).unwrap_err().to_string();
            assert!(got.contains(why), "{got}");
        }
    }
}
