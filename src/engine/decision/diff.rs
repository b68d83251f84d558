//! Whether a live object already holds everything kiln would apply. Server-side
//! apply merges, so the live object has more (defaults, other managers'
//! fields, status); kiln's intent is satisfied when every field it sets is
//! there with the same value. This is what makes a steady-state resync cost
//! zero writes while drift by anyone else is still corrected.
//!
//! Two things make "every field is there" not enough, and both are handled
//! here:
//! - a field kiln set before and no longer renders is still "there": every
//!   child carries a hash of what kiln applied (`kiln.dev/applied`, set by
//!   render), so a change of the desired object — a removal included — is a
//!   difference, and the full object is applied again;
//! - the API server stores some values differently from how they were sent
//!   (`stringData` becomes `data`, a quantity `1000m` becomes `1`): the leaves
//!   an apply's response shows changed are remembered ([`Normalized`]) and the
//!   desired object is compared as the server stores it.

use serde_json::Value;

use crate::render::APPLIED_ANNOTATION;

/// True when every field of `desired` is present in `live` with an equal value.
/// Lists must have the same length and match item by item.
pub fn satisfied(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => d.iter().all(|(k, dv)| match l.get(k) {
            Some(lv) => satisfied(lv, dv),
            None => dv.is_null(),
        }),
        (Value::Array(l), Value::Array(d)) => {
            l.len() == d.len() && l.iter().zip(d).all(|(lv, dv)| satisfied(lv, dv))
        }
        (l, d) => same_scalar(l, d),
    }
}

/// True when `a` and `b` are the same value, numbers compared by value.
pub fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| equal(v, w))
        }
        (x, y) => same_scalar(x, y),
    }
}

fn same_scalar(l: &Value, d: &Value) -> bool {
    match (l, d) {
        (Value::Number(l), Value::Number(d)) => l == d || l.as_f64() == d.as_f64(),
        (l, d) => l == d,
    }
}

/// One step into a JSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// How the API server stored one applied object: the leaves it stored
/// differently, for the applied hash they were seen with.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalized {
    hash: String,
    /// Path → the value stored (`None`: not stored at all, like `stringData`).
    leaves: Vec<(Vec<Step>, Option<Value>)>,
}

/// What the server changed when it stored `sent` as `stored` (an apply's
/// response); `None` when it stored every field as sent, the usual case, so
/// nothing is kept for it.
pub(crate) fn normalized(sent: &Value, stored: &Value) -> Option<Normalized> {
    let mut leaves = Vec::new();
    walk(sent, Some(stored), &mut Vec::new(), &mut leaves);
    if leaves.is_empty() {
        return None;
    }
    Some(Normalized {
        hash: applied_hash(sent)?.to_string(),
        leaves,
    })
}

fn walk(
    sent: &Value,
    stored: Option<&Value>,
    path: &mut Vec<Step>,
    out: &mut Vec<(Vec<Step>, Option<Value>)>,
) {
    match (sent, stored) {
        (Value::Object(s), Some(Value::Object(t))) => {
            for (k, v) in s {
                path.push(Step::Key(k.clone()));
                walk(v, t.get(k), path, out);
                path.pop();
            }
        }
        (Value::Array(s), Some(Value::Array(t))) if s.len() == t.len() => {
            for (i, v) in s.iter().enumerate() {
                path.push(Step::Index(i));
                walk(v, t.get(i), path, out);
                path.pop();
            }
        }
        (Value::Null, None) => {}
        (s, Some(t)) if satisfied(t, s) => {}
        (_, t) => out.push((path.clone(), t.cloned())),
    }
}

/// The `kiln.dev/applied` hash an object carries.
pub(crate) fn applied_hash(object: &Value) -> Option<&str> {
    object["metadata"]["annotations"][APPLIED_ANNOTATION].as_str()
}

/// Whether `live` holds what kiln would apply (`desired`, as render made it),
/// comparing the leaves the server is known to store differently as it
/// stores them.
pub(crate) fn converged(live: &Value, desired: &Value, known: Option<&Normalized>) -> bool {
    match known.filter(|n| applied_hash(desired) == Some(n.hash.as_str())) {
        None => satisfied_object(live, desired),
        Some(n) => {
            let mut expected = desired.clone();
            for (path, stored) in &n.leaves {
                set(&mut expected, path, stored.clone());
            }
            satisfied_object(live, &expected)
        }
    }
}

/// [`satisfied`] for a whole object from a cache of its kind: the items of a
/// LIST carry no `apiVersion` and `kind`, so an object the cache got from
/// its first list (after a restart of kiln, or a relist) lacks them; the
/// cache holds one kind, so their absence is no difference (a different
/// value still is).
fn satisfied_object(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => d.iter().all(|(k, dv)| match l.get(k) {
            Some(lv) => satisfied(lv, dv),
            None => dv.is_null() || k == "apiVersion" || k == "kind",
        }),
        _ => satisfied(live, desired),
    }
}

fn set(value: &mut Value, path: &[Step], new: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = value;
    for step in parents {
        let next = match step {
            Step::Key(k) => at.get_mut(k.as_str()),
            Step::Index(i) => at.get_mut(*i),
        };
        let Some(next) = next else { return };
        at = next;
    }
    match (last, new, at) {
        (Step::Key(k), Some(v), Value::Object(m)) => {
            m.insert(k.clone(), v);
        }
        (Step::Key(k), None, Value::Object(m)) => {
            m.remove(k);
        }
        (Step::Index(i), Some(v), Value::Array(a)) if *i < a.len() => a[*i] = v,
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn extra_live_fields_and_defaults_are_fine() {
        let live = json!({"spec": {"replicas": 2, "strategy": {"type": "RollingUpdate"},
            "template": {"spec": {"containers": [{"name": "a", "image": "x", "imagePullPolicy": "IfNotPresent"}]}}},
            "status": {"readyReplicas": 2}});
        let desired = json!({"spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}});
        assert!(satisfied(&live, &desired));
    }

    #[test]
    fn a_changed_or_missing_field_is_drift() {
        let live = json!({"spec": {"replicas": 3, "ports": [{"port": 80}]}});
        assert!(!satisfied(&live, &json!({"spec": {"replicas": 2}})));
        assert!(!satisfied(&live, &json!({"spec": {"paused": true}})));
        assert!(!satisfied(
            &live,
            &json!({"spec": {"ports": [{"port": 80}, {"port": 443}]}})
        ));
        assert!(!satisfied(
            &live,
            &json!({"spec": {"ports": [{"port": 81}]}})
        ));
    }

    #[test]
    fn a_listed_object_without_api_version_and_kind_is_converged() {
        let desired = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}, "data": {"k": "dg=="}});
        let listed =
            json!({"metadata": {"name": "x", "uid": "u"}, "data": {"k": "dg=="}, "type": "Opaque"});
        assert!(converged(&listed, &desired, None));
        let other = json!({"apiVersion": "v2", "kind": "Secret", "metadata": {"name": "x"}, "data": {"k": "dg=="}});
        assert!(
            !converged(&other, &desired, None),
            "a different value still differs"
        );
        let drifted = json!({"metadata": {"name": "x"}, "data": {"k": "eA=="}});
        assert!(!converged(&drifted, &desired, None));
    }

    fn stamped(mut v: Value, hash: &str) -> Value {
        v["metadata"] = json!({"name": "x", "annotations": {APPLIED_ANNOTATION: hash}});
        v
    }

    #[test]
    fn a_secret_written_with_string_data_converges_once_its_storage_is_known() {
        let sent = stamped(json!({"stringData": {"password": "p"}}), "h1");
        let stored = stamped(
            json!({"data": {"password": "cA=="}, "type": "Opaque"}),
            "h1",
        );
        assert!(
            !converged(&stored, &sent, None),
            "without knowledge: looks like drift"
        );
        let known = normalized(&sent, &stored).unwrap();
        assert!(converged(&stored, &sent, Some(&known)));
        // A different desired object (new hash) is not excused by old knowledge.
        let changed = stamped(json!({"stringData": {"password": "q"}}), "h2");
        assert!(!converged(&stored, &changed, Some(&known)));
    }

    #[test]
    fn a_quantity_the_server_canonicalises_is_compared_as_stored() {
        let sent = stamped(json!({"spec": {"cpu": "1000m", "replicas": 2}}), "h");
        let stored = stamped(json!({"spec": {"cpu": "1", "replicas": 2}}), "h");
        let known = normalized(&sent, &stored).unwrap();
        assert!(converged(&stored, &sent, Some(&known)));
        // Someone changes the normalised field: that is drift again.
        let drifted = stamped(json!({"spec": {"cpu": "2", "replicas": 2}}), "h");
        assert!(!converged(&drifted, &sent, Some(&known)));
        // Or another field.
        let drifted = stamped(json!({"spec": {"cpu": "1", "replicas": 3}}), "h");
        assert!(!converged(&drifted, &sent, Some(&known)));
    }

    #[test]
    fn an_object_stored_as_sent_needs_no_record() {
        let sent = stamped(json!({"data": {"a": "1"}}), "h");
        let mut stored = sent.clone();
        stored["metadata"]["resourceVersion"] = json!("7");
        assert!(normalized(&sent, &stored).is_none());
    }

    #[test]
    fn a_field_no_longer_rendered_is_a_difference_through_the_hash() {
        // What the engine sees after a rule drops `data.old`: the live object
        // still has it, and only the applied hash tells them apart.
        let live = stamped(json!({"data": {"owner": "me", "old": "x"}}), "before");
        let desired = stamped(json!({"data": {"owner": "me"}}), "after");
        assert!(!converged(&live, &desired, None));
    }

    #[test]
    fn equal_is_exact_but_numbers_compare_by_value() {
        assert!(equal(&json!({"a": [1, 2.0]}), &json!({"a": [1.0, 2]})));
        assert!(!equal(&json!({"a": 1, "b": 2}), &json!({"a": 1})));
        assert!(!equal(&json!([1]), &json!([1, 2])));
    }

    #[test]
    fn numbers_compare_by_value_and_null_means_absent() {
        assert!(satisfied(&json!({"a": 1.0}), &json!({"a": 1})));
        assert!(satisfied(&json!({}), &json!({"a": null})));
        assert!(!satisfied(&json!({"a": 1}), &json!({"a": "1"})));
    }
}
