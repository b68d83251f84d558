//! Small merge patches a plan sends besides server-side apply, each
//! conditioned on the `resourceVersion` of the object as read just before
//! (a stale read gets 409 and the reconcile runs again): the record of the
//! created-once children kiln made (on the primary, `remember.rs`) and the
//! keys another writer added under a child's `replace` fields
//! (`replace.rs`). Pure: the patch, from the object as read ([`Touch::patch`]).

use serde_json::{Map, Value, json};

use crate::engine::key::ObjKey;
use crate::rules::Gvk;

/// A merge patch a plan sends.
#[derive(Debug, Clone, PartialEq)]
pub enum Touch {
    /// The primary's annotation `annotation` becomes `value` (`None`: removed).
    Remember {
        /// `<rule>.kiln.dev/created-once`.
        annotation: String,
        /// The record.
        value: Option<String>,
    },
    /// Keys under the child's `replace` fields that the rule does not
    /// render are removed.
    Strip {
        /// The child's kind.
        gvk: Gvk,
        /// Its namespace and name.
        key: ObjKey,
        /// Its uid as cached: only that object is patched.
        uid: Option<String>,
        /// The `replace` paths.
        paths: Vec<Vec<String>>,
        /// The child as rendered.
        desired: Value,
    },
}

impl Touch {
    /// For messages.
    pub fn describe(&self) -> String {
        match self {
            Self::Remember { annotation, .. } => format!("recording {annotation} on the primary"),
            Self::Strip { gvk, key, .. } => {
                format!(
                    "removing keys the rule does not render from {} {key}",
                    gvk.kind
                )
            }
        }
    }

    /// The merge patch to send to `live` (the object read just now), or
    /// `None` when it holds what the touch wants already.
    pub fn patch(&self, live: &Value) -> Option<Value> {
        let version = live["metadata"]["resourceVersion"].clone();
        let mut patch = match self {
            Self::Remember { annotation, value } => {
                let now = live["metadata"]["annotations"][annotation].as_str();
                if now == value.as_deref() {
                    return None;
                }
                json!({"metadata": {"annotations": {annotation.as_str(): value}}})
            }
            Self::Strip { paths, desired, .. } => {
                let extra = extra(paths, desired, live);
                if extra.is_empty() {
                    return None;
                }
                nulls(&extra)
            }
        };
        patch["metadata"]["resourceVersion"] = version;
        Some(patch)
    }
}

/// The full paths of keys under `paths` that `live` holds and `desired`
/// does not (what a `replace` path holds beyond what the rule renders).
pub(super) fn extra(paths: &[Vec<String>], desired: &Value, live: &Value) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for path in paths {
        let (Some(Value::Object(want)), Some(Value::Object(have))) =
            (at(desired, path), at(live, path))
        else {
            continue;
        };
        for key in have.keys().filter(|k| !want.contains_key(*k)) {
            let mut full = path.clone();
            full.push(key.clone());
            out.push(full);
        }
    }
    out
}

fn at<'v>(value: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(value, |v, k| v.get(k))
}

/// A merge patch setting each path to null (removing it).
fn nulls(paths: &[Vec<String>]) -> Value {
    let mut out = Value::Object(Map::new());
    for path in paths {
        let mut at = &mut out;
        for (i, key) in path.iter().enumerate() {
            let Value::Object(map) = at else { break };
            at = if i + 1 == path.len() {
                map.insert(key.clone(), Value::Null);
                break;
            } else {
                map.entry(key.clone())
                    .or_insert_with(|| Value::Object(Map::new()))
            };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_written_only_when_it_differs_and_conditioned_on_the_version() {
        let t = Touch::Remember {
            annotation: "r.kiln.dev/created-once".into(),
            value: Some("deny/default-deny".into()),
        };
        let live = json!({"metadata": {"resourceVersion": "7", "annotations": {"a": "b"}}});
        assert_eq!(
            t.patch(&live),
            Some(json!({"metadata": {"resourceVersion": "7",
                "annotations": {"r.kiln.dev/created-once": "deny/default-deny"}}}))
        );
        let same =
            json!({"metadata": {"annotations": {"r.kiln.dev/created-once": "deny/default-deny"}}});
        assert_eq!(t.patch(&same), None);
        let gone = Touch::Remember {
            annotation: "r.kiln.dev/created-once".into(),
            value: None,
        };
        assert_eq!(gone.patch(&live), None, "nothing to remove");
        assert_eq!(
            gone.patch(&same).unwrap()["metadata"]["annotations"]["r.kiln.dev/created-once"],
            Value::Null
        );
    }

    #[test]
    fn a_strip_sets_exactly_the_extra_keys_to_null() {
        let t = Touch::Strip {
            gvk: Gvk {
                group: String::new(),
                version: "v1".into(),
                kind: "ResourceQuota".into(),
            },
            key: ObjKey {
                namespace: Some("ns".into()),
                name: "q".into(),
            },
            uid: None,
            paths: vec![vec!["spec".into(), "hard".into()]],
            desired: json!({"spec": {"hard": {"pods": "10"}}}),
        };
        let live = json!({"metadata": {"resourceVersion": "3"},
            "spec": {"hard": {"pods": "10", "count/secrets": "5"}}});
        assert_eq!(
            t.patch(&live),
            Some(json!({"metadata": {"resourceVersion": "3"},
                "spec": {"hard": {"count/secrets": null}}}))
        );
        let clean = json!({"spec": {"hard": {"pods": "10"}}});
        assert_eq!(t.patch(&clean), None);
    }
}
