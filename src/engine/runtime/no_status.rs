//! A primary whose kind has no status subresource gets no status from
//! kiln (no conditions, no fields). The engine logs that once per rule when
//! it starts; this module makes it said once on each such object too, as a
//! Warning Event, so `kubectl describe` shows why its status stays empty.
//!
//! Pure bookkeeping, no API calls.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

/// The reason of the Warning Event.
pub(super) const REASON: &str = "NoStatusSubresource";

/// The Event's message for an object of `kind`.
pub(super) fn message(kind: &str) -> String {
    format!(
        "kiln writes no status on this object: {kind} has no status subresource (add `subresources: {{status: {{}}}}` to its CustomResourceDefinition)"
    )
}

/// The objects already told, by rule and uid.
#[derive(Default)]
pub struct Told {
    told: Mutex<HashSet<(String, String)>>,
}

impl Told {
    /// True the first time `rule` asks about the object `uid`.
    pub fn first(&self, rule: &str, uid: &str) -> bool {
        self.told
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((rule.to_string(), uid.to_string()))
    }

    /// The object `uid` is gone.
    pub fn forget(&self, uid: &str) {
        self.told
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(_, u)| u != uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_object_is_told_once_per_rule() {
        let t = Told::default();
        assert!(t.first("r", "u1"));
        assert!(!t.first("r", "u1"));
        assert!(t.first("other", "u1"));
        assert!(t.first("r", "u2"));
        t.forget("u1");
        assert!(t.first("r", "u1"));
        assert!(message("Gizmo").contains("Gizmo has no status subresource"));
    }
}
