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

    /// Replaces the rules; every follower sees it.
    pub(super) fn set(&self, set: RuleSet) {
        self.cell.send_replace(Arc::new(set));
    }

    /// Changes from now on.
    pub fn subscribe(&self) -> watch::Receiver<Arc<RuleSet>> {
        self.cell.subscribe()
    }
}
