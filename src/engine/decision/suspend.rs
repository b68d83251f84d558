//! Per-object control by annotation on the primary: `kiln.dev/reconcile:
//! suspended` stops every write for that object until it is removed;
//! `kiln.dev/reconcile-requested-at` asks for a reconcile now (any new
//! value changes the primary's metadata, which queues it).
//!
//! Pure logic, no API calls.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

/// The annotation whose value `suspended` stops kiln writing for the object.
pub(crate) const RECONCILE: &str = "kiln.dev/reconcile";
/// The value of [`RECONCILE`] that suspends the object.
pub(crate) const SUSPENDED: &str = "suspended";
/// The reason of the Event kiln publishes once when it finds an object suspended.
pub(crate) const REASON: &str = "Suspended";

/// What kiln says, once, of a suspended object.
pub fn message() -> String {
    format!(
        "{RECONCILE} is `{SUSPENDED}`: kiln writes nothing for this object (children, status, finalizer) until the annotation is removed"
    )
}

/// Whether the primary's metadata suspends it.
pub(crate) fn suspended_meta(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(RECONCILE))
        .is_some_and(|v| v == SUSPENDED)
}

/// Whether the primary, as JSON, is suspended.
pub(crate) fn suspended(primary: &Value) -> bool {
    primary["metadata"]["annotations"][RECONCILE].as_str() == Some(SUSPENDED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_value_suspended_suspends() {
        let with = |v: &str| json!({"metadata": {"annotations": {RECONCILE: v}}});
        assert!(suspended(&with("suspended")));
        assert!(!suspended(&with("Suspended")));
        assert!(!suspended(&with("")));
        assert!(!suspended(&json!({"metadata": {}})));
        let meta: ObjectMeta =
            serde_json::from_value(json!({"annotations": {RECONCILE: "suspended"}})).unwrap();
        assert!(suspended_meta(&meta));
        assert!(!suspended_meta(&ObjectMeta::default()));
    }
}
