//! Whether a live object already holds everything kiln would apply. Server-side
//! apply merges, so the live object has more (defaults, other managers'
//! fields, status); kiln's intent is satisfied when every field it sets is
//! there with the same value. This is what makes a steady-state resync cost
//! zero writes while drift by anyone else is still corrected.

use serde_json::Value;

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
        (Value::Number(l), Value::Number(d)) => l == d || l.as_f64() == d.as_f64(),
        (l, d) => l == d,
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
    fn numbers_compare_by_value_and_null_means_absent() {
        assert!(satisfied(&json!({"a": 1.0}), &json!({"a": 1})));
        assert!(satisfied(&json!({}), &json!({"a": null})));
        assert!(!satisfied(&json!({"a": 1}), &json!({"a": "1"})));
    }
}
