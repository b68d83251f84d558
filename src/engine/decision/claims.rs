//! Which primary of a rule decorates which object: two primaries of one
//! rule that decorate the same object would do it as the same field
//! manager (`kiln.<rule>.<id>`), each apply replacing the other's value and
//! waking the other primary, without end. Such a shared target is found
//! here and reported on both primaries instead; kiln decorates it for
//! neither until one lets go.
//!
//! Pure bookkeeping: the controller records each primary's targets after
//! planning its decorations and forgets a primary once it is deleted.

use std::collections::{BTreeSet, HashMap};

use crate::engine::key::ObjKey;

/// One object decorated as one field manager: kind, namespace, name, manager.
pub(crate) type Target = (String, Option<String>, String, String);

/// The targets each primary of one rule decorates.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    by_target: HashMap<Target, BTreeSet<ObjKey>>,
    by_primary: HashMap<ObjKey, BTreeSet<Target>>,
}

/// What recording a primary's targets found.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Claimed {
    /// Targets another primary decorates too, with that primary.
    pub shared: Vec<(Target, ObjKey)>,
    /// Primaries that gained or lost a co-claimant: they look again.
    pub touched: BTreeSet<ObjKey>,
}

impl Claims {
    /// Records that `primary` decorates `targets` now (and nothing else).
    pub(crate) fn set(&mut self, primary: &ObjKey, targets: BTreeSet<Target>) -> Claimed {
        let before = self.by_primary.remove(primary).unwrap_or_default();
        let mut touched = BTreeSet::new();
        // Only a change wakes the others: a primary that claims what it
        // claimed before wakes nobody (no ping-pong between two).
        for gone in before.difference(&targets) {
            touched.extend(self.drop_claim(gone, primary));
        }
        for new in targets.difference(&before) {
            let holders = self.by_target.entry(new.clone()).or_default();
            touched.extend(holders.iter().cloned());
            holders.insert(primary.clone());
        }
        let shared = targets
            .iter()
            .flat_map(|t| {
                self.by_target
                    .get(t)
                    .into_iter()
                    .flatten()
                    .filter(|p| *p != primary)
                    .map(|p| (t.clone(), p.clone()))
            })
            .collect();
        if !targets.is_empty() {
            self.by_primary.insert(primary.clone(), targets);
        }
        Claimed { shared, touched }
    }

    /// Forgets a deleted primary; returns the primaries that shared a
    /// target with it.
    pub(crate) fn forget(&mut self, primary: &ObjKey) -> BTreeSet<ObjKey> {
        self.set(primary, BTreeSet::new()).touched
    }

    fn drop_claim(&mut self, target: &Target, primary: &ObjKey) -> BTreeSet<ObjKey> {
        let Some(holders) = self.by_target.get_mut(target) else {
            return BTreeSet::new();
        };
        holders.remove(primary);
        let left = holders.clone();
        if holders.is_empty() {
            self.by_target.remove(target);
        }
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjKey {
        ObjKey {
            namespace: Some("ns".into()),
            name: name.into(),
        }
    }

    fn target(name: &str) -> Target {
        ("v1/Namespace".into(), None, name.into(), "kiln.r.d".into())
    }

    fn targets(names: &[&str]) -> BTreeSet<Target> {
        names.iter().map(|n| target(n)).collect()
    }

    #[test]
    fn two_primaries_claiming_one_target_both_see_it_and_nobody_ping_pongs() {
        let mut claims = Claims::default();
        let (a, b) = (key("a"), key("b"));
        assert_eq!(claims.set(&a, targets(&["shared"])), Claimed::default());
        let claimed = claims.set(&b, targets(&["shared", "own"]));
        assert_eq!(claimed.shared, vec![(target("shared"), a.clone())]);
        assert_eq!(claimed.touched, BTreeSet::from([a.clone()]));
        // a looks again: it sees b, and wakes nobody (nothing changed).
        let claimed = claims.set(&a, targets(&["shared"]));
        assert_eq!(claimed.shared, vec![(target("shared"), b.clone())]);
        assert!(claimed.touched.is_empty());
        // a lets go: b is woken, and decorates alone.
        assert_eq!(claims.forget(&a), BTreeSet::from([b.clone()]));
        assert!(
            claims
                .set(&b, targets(&["shared", "own"]))
                .shared
                .is_empty()
        );
    }

    #[test]
    fn a_primary_that_decorates_nothing_holds_nothing() {
        let mut claims = Claims::default();
        claims.set(&key("a"), targets(&["x"]));
        claims.set(&key("a"), BTreeSet::new());
        assert!(claims.by_primary.is_empty() && claims.by_target.is_empty());
    }
}
