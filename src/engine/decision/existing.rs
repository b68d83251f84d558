//! `spec.for.takeExisting: false`: which primaries a rule takes, given the
//! instant it was first loaded (read by the runtime, `runtime/since.rs`).
//! Both instants come from the API server's clock, in whole seconds: a
//! primary created in the same second as the record counts as existing.

use jiff::Timestamp;

/// Whether a primary created at `created` is taken by a rule first loaded
/// at `since` (`None`: the rule takes existing objects too). An object
/// without a creation time is not taken.
pub(crate) fn takes(since: Option<Timestamp>, created: Option<Timestamp>) -> bool {
    match (since, created) {
        (None, _) => true,
        (Some(since), Some(created)) => created > since,
        (Some(_), None) => false,
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
        let since = at("2026-11-26T12:00:00Z");
        assert!(takes(None, at("2020-01-01T00:00:00Z")), "takeExisting");
        assert!(takes(since, at("2026-11-26T12:00:01Z")));
        assert!(!takes(since, at("2026-11-26T11:59:59Z")));
        assert!(
            !takes(since, at("2026-11-26T12:00:00Z")),
            "the same second counts as existing"
        );
        assert!(!takes(since, None), "no creation time: not taken");
    }
}
