//! How many primaries of each rule are `Ready` `True`, `False` or
//! `Unknown` (the status kiln last composed for them): the bounded gauge
//! `kiln_primaries{rule,ready}`, one series per rule and status, so "objects
//! not ready" can be alerted on without a label per object.
//!
//! The engine records each primary's `Ready` status when it composes the
//! status and forgets it when the primary is deleted or the rule stops.
//! Pure bookkeeping, no API calls.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::Value;

use crate::engine::key::ObjKey;

/// The values of a `Ready` condition's status, as the gauge's `ready` label.
pub(super) const STATUSES: [&str; 3] = ["True", "False", "Unknown"];

/// Per rule, each primary's `Ready` status (an index into [`STATUSES`]).
#[derive(Default)]
pub struct ReadyTally {
    inner: Mutex<BTreeMap<String, HashMap<ObjKey, usize>>>,
}

impl ReadyTally {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, HashMap<ObjKey, usize>>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the `Ready` condition of `status` (a composed status) for
    /// the primary `key` of `rule`; no `Ready` condition counts as `Unknown`.
    pub fn record(&self, rule: &str, key: &ObjKey, status: &Value) {
        let ready = status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .and_then(|c| c["status"].as_str());
        let at = STATUSES.iter().position(|s| Some(*s) == ready).unwrap_or(2);
        self.lock()
            .entry(rule.to_string())
            .or_default()
            .insert(key.clone(), at);
    }

    /// The primary `key` is gone.
    pub fn forget(&self, rule: &str, key: &ObjKey) {
        if let Some(keys) = self.lock().get_mut(rule) {
            keys.remove(key);
        }
    }

    /// `rule` stopped: it counts nothing (its series read 0).
    pub fn stopped(&self, rule: &str) {
        if let Some(keys) = self.lock().get_mut(rule) {
            keys.clear();
        }
    }

    /// `rule` was removed from the set: it has no series any more.
    pub fn removed(&self, rule: &str) {
        self.lock().remove(rule);
    }

    /// Per rule ever seen, the number of primaries per status of [`STATUSES`].
    pub fn counts(&self) -> Vec<(String, [i64; 3])> {
        self.lock()
            .iter()
            .map(|(rule, keys)| {
                let mut n = [0i64; 3];
                for at in keys.values() {
                    n[*at] += 1;
                }
                (rule.clone(), n)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn key(name: &str) -> ObjKey {
        ObjKey {
            namespace: Some("ns".into()),
            name: name.into(),
        }
    }

    fn ready(status: &str) -> Value {
        json!({"conditions": [{"type": "Reconciled", "status": "True"}, {"type": "Ready", "status": status}]})
    }

    #[test]
    fn counts_each_primary_once_by_its_latest_ready_status() {
        let t = ReadyTally::default();
        t.record("web", &key("a"), &ready("True"));
        t.record("web", &key("b"), &ready("False"));
        t.record("web", &key("c"), &json!({}));
        t.record("db", &key("a"), &ready("False"));
        assert_eq!(
            t.counts(),
            [
                ("db".to_string(), [0, 1, 0]),
                ("web".to_string(), [1, 1, 1])
            ]
        );
        // A primary recorded again moves; a deleted one goes.
        t.record("web", &key("b"), &ready("True"));
        t.forget("web", &key("c"));
        assert_eq!(t.counts()[1], ("web".to_string(), [2, 0, 0]));
        // A stopped rule reads 0, so its series do not stay at old values.
        t.stopped("web");
        assert_eq!(t.counts()[1], ("web".to_string(), [0, 0, 0]));
        // A rule removed from the set has no series at all.
        t.removed("web");
        assert_eq!(t.counts(), [("db".to_string(), [0, 1, 0])]);
    }
}
