//! Which status fields kiln's field manager owns on a primary: the
//! top-level fields and the conditions (by type) of its managed-fields
//! entry for the status subresource. kiln removes a status field it owned
//! once no rule sets it, and leaves everyone else's alone.
//!
//! The cache keeps that one entry of each primary (every other managed-field
//! entry is dropped at ingest), cut by [`trim`] to what [`owned`] reads: the
//! API server's entry also lists every sub-field of every condition, with
//! a timestamp and an API version (about 250 bytes on the bench's WebApp,
//! over 600 where conditions are a map list), none of which kiln reads.
//!
//! Pure data, no API calls.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::core::ObjectMeta;
use serde_json::{Map, Value};

/// Whether `entry` is `manager`'s entry for the status subresource.
pub(crate) fn is_status_entry(entry: &ManagedFieldsEntry, manager: &str) -> bool {
    entry.manager.as_deref() == Some(manager) && entry.subresource.as_deref() == Some("status")
}

/// The status fields `manager` owns according to `meta`'s managed fields:
/// top-level field names, and `conditions/<type>` for each condition of a
/// map-list `conditions` (`k:{"type":"Ready"}`).
pub(crate) fn owned(meta: &ObjectMeta, manager: &str) -> Vec<String> {
    let statuses = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| is_status_entry(m, manager))
        .filter_map(|m| m.fields_v1.as_ref())
        .filter_map(|f| f.0.get("f:status").and_then(Value::as_object));
    let mut owned = Vec::new();
    for status in statuses {
        owned.extend(
            status
                .keys()
                .filter_map(|k| k.strip_prefix("f:"))
                .map(str::to_string),
        );
        let types = status
            .get("f:conditions")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|cs| cs.keys())
            .filter_map(|k| k.strip_prefix("k:"))
            .filter_map(|k| serde_json::from_str::<Value>(k).ok())
            .filter_map(|k| k["type"].as_str().map(|t| format!("conditions/{t}")));
        owned.extend(types);
    }
    owned
}

/// Cuts a status entry to what [`owned`] reads: its manager and
/// subresource, and under `f:status` the top-level fields and the
/// conditions' keys, each with nothing below.
pub(crate) fn trim(entry: &mut ManagedFieldsEntry) {
    entry.time = None;
    entry.api_version = None;
    entry.fields_type = None;
    entry.operation = None;
    let Some(FieldsV1(fields)) = entry.fields_v1.as_mut() else {
        return;
    };
    let status = match fields.get_mut("f:status") {
        Some(Value::Object(status)) => std::mem::take(status),
        _ => Map::new(),
    };
    let mut kept = Map::new();
    for (key, value) in status {
        if !key.starts_with("f:") {
            continue;
        }
        let below = match (key.as_str(), value) {
            ("f:conditions", Value::Object(conditions)) => conditions
                .into_iter()
                .filter(|(k, _)| k.starts_with("k:"))
                .map(|(k, _)| (k, Value::Object(Map::new())))
                .collect(),
            _ => Map::new(),
        };
        kept.insert(key, Value::Object(below));
    }
    *fields = serde_json::json!({ "f:status": kept });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kiln's status entry as the API server writes it for a CRD whose
    /// conditions are a map list keyed by type.
    fn entry() -> ManagedFieldsEntry {
        let condition = serde_json::json!({
            ".": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:observedGeneration": {},
            "f:reason": {}, "f:status": {}, "f:type": {},
        });
        serde_json::from_value(serde_json::json!({
            "apiVersion": "demo.kiln.dev/v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {
                ".": {},
                "f:conditions": {
                    ".": {},
                    "k:{\"type\":\"Ready\"}": condition.clone(),
                    "k:{\"type\":\"Reconciled\"}": condition.clone(),
                    "k:{\"type\":\"Waiting\"}": condition,
                },
                "f:observedGeneration": {},
                "f:url": {},
            }},
            "manager": "kiln",
            "operation": "Apply",
            "subresource": "status",
            "time": "2026-11-23T21:28:31Z",
        }))
        .unwrap_or_default()
    }

    fn meta(entries: Vec<ManagedFieldsEntry>) -> ObjectMeta {
        ObjectMeta {
            managed_fields: Some(entries),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn owned_lists_top_level_fields_and_conditions_by_type() {
        let owned = owned(&meta(vec![entry()]), "kiln");
        assert_eq!(
            owned,
            [
                "conditions",
                "observedGeneration",
                "url",
                "conditions/Ready",
                "conditions/Reconciled",
                "conditions/Waiting"
            ]
        );
    }

    #[test]
    fn only_the_managers_status_entry_counts() {
        let mut other = entry();
        other.manager = Some("someone".into());
        let mut main = entry();
        main.subresource = None;
        assert!(owned(&meta(vec![other, main]), "kiln").is_empty());
    }

    #[test]
    fn a_trimmed_entry_owns_the_same_and_is_a_third_of_the_size() {
        let full = entry();
        let mut trimmed = full.clone();
        trim(&mut trimmed);
        assert_eq!(
            owned(&meta(vec![trimmed.clone()]), "kiln"),
            owned(&meta(vec![full.clone()]), "kiln")
        );
        assert!(is_status_entry(&trimmed, "kiln"));
        let size = |e: &ManagedFieldsEntry| serde_json::to_string(e).map_or(0, |s| s.len());
        assert!(
            size(&trimmed) * 3 < size(&full),
            "{} of {} bytes kept",
            size(&trimmed),
            size(&full)
        );
    }

    #[test]
    fn trimming_twice_changes_nothing_and_an_entry_without_fields_stays_empty() {
        let mut once = entry();
        trim(&mut once);
        let mut twice = once.clone();
        trim(&mut twice);
        assert_eq!(once, twice);
        let mut bare = ManagedFieldsEntry {
            manager: Some("kiln".into()),
            subresource: Some("status".into()),
            ..ManagedFieldsEntry::default()
        };
        trim(&mut bare);
        assert!(bare.fields_v1.is_none());
        assert!(owned(&meta(vec![bare]), "kiln").is_empty());
    }
}
