//! The current rule set: one cell per process, holding the last good set.
//!
//! The [`Loader`](super::Loader) writes it (the first load and every reload
//! alike); every engine start reads it, and a running engine follows its
//! changes ([`Follower`](super::Follower)). An engine started again (the
//! leader Lease lost and won back) therefore starts on the last good rules,
//! never on the ones read at process start.

use std::sync::Arc;

use tokio::sync::watch;

use crate::rules::RuleSet;

/// The last good rule set, shared by the loader and every engine start.
#[derive(Clone)]
pub struct CurrentRules {
    cell: Arc<watch::Sender<Arc<RuleSet>>>,
}

impl CurrentRules {
    /// A cell holding `set`.
    pub fn new(set: RuleSet) -> Self {
        Self {
            cell: Arc::new(watch::Sender::new(Arc::new(set))),
        }
    }

    /// The rules now.
    pub fn get(&self) -> Arc<RuleSet> {
        self.cell.borrow().clone()
    }

    /// Replaces the rules; every follower sees it. A rule unchanged from
    /// the set it replaces is kept as it is (the engine runs on it already),
    /// so the copy just compiled is dropped instead of held beside it.
    pub(super) fn set(&self, set: RuleSet) {
        let set = set.reusing(&self.get());
        self.cell.send_replace(Arc::new(set));
    }

    /// Changes from now on.
    pub fn subscribe(&self) -> watch::Receiver<Arc<RuleSet>> {
        self.cell.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reload::plan::tests::set;

    #[test]
    fn a_reload_keeps_the_running_copy_of_each_unchanged_rule() {
        let current = CurrentRules::new(set(&[("a", "ConfigMap"), ("b", "Secret")]));
        let before = current.get();
        // Both rules compiled afresh, only `b` changed.
        current.set(set(&[("a", "ConfigMap"), ("b", "Pod")]));
        let after = current.get();
        let (a0, a1) = (before.get("a").unwrap(), after.get("a").unwrap());
        assert!(
            Arc::ptr_eq(a0, a1),
            "one compiled copy of an unchanged rule"
        );
        assert_eq!(Arc::strong_count(a1), 2, "the new copy of `a` is dropped");
        assert_eq!(after.get("b").unwrap().primary.gvk.kind, "Pod");
    }
}
