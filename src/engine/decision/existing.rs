//! `spec.for.takeExisting: false`: which primaries a rule takes, given the
//! instant it was first loaded (read by the runtime, `runtime/since.rs`).
//! Both instants come from the API server's clock, in whole seconds: of the
//! primaries created in the same second as the record, those kiln listed
//! before it made the record are existing, the others new.

use jiff::Timestamp;

/// When a rule was first loaded, and what already existed in that second.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Since {
    /// The record's creation (whole seconds).
    pub at: Timestamp,
    /// The uids of the primaries created in the second of `at` that existed
    /// before the record (`None`: not recorded, so every primary of that
    /// second counts as existing).
    pub same_second: Option<Vec<String>>,
}

/// Whether a primary created at `created` with `uid` is taken by a rule
/// first loaded `since` (`None`: the rule takes existing objects too). An
/// object without a creation time is not taken.
pub(crate) fn takes(since: Option<&Since>, created: Option<Timestamp>, uid: &str) -> bool {
    let Some(since) = since else {
        return true;
    };
    match created {
        Some(created) if created > since.at => true,
        Some(created) if created == since.at => since
            .same_second
            .as_ref()
            .is_some_and(|before| !before.iter().any(|u| u == uid)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Option<Timestamp> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn only_objects_created_after_the_first_load_are_taken() {
        let mut since = Since {
            at: at("2026-11-26T12:00:00Z").unwrap(),
            same_second: None,
        };
        let takes = |s: &Since, created, uid| takes(Some(s), created, uid);
        assert!(
            super::takes(None, at("2020-01-01T00:00:00Z"), "a"),
            "takeExisting"
        );
        assert!(takes(&since, at("2026-11-26T12:00:01Z"), "a"));
        assert!(!takes(&since, at("2026-11-26T11:59:59Z"), "a"));
        assert!(
            !takes(&since, at("2026-11-26T12:00:00Z"), "a"),
            "the same second, unrecorded, counts as existing"
        );
        assert!(!takes(&since, None, "a"), "no creation time: not taken");
        // Recorded: of that second, what existed before the record is not
        // taken; what was created after it is.
        since.same_second = Some(vec!["old".into()]);
        assert!(!takes(&since, at("2026-11-26T12:00:00Z"), "old"));
        assert!(takes(&since, at("2026-11-26T12:00:00Z"), "new"));
    }
}
