//! A family of series labelled by rule (`controller=<rule>` or
//! `rule=<rule>`), which forgets a rule's series when the rule is removed:
//! without it, every rule ever run (each rename, each rule removed) would
//! stay in `/metrics` and in memory until kiln restarts.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use prometheus_client::metrics::family::{Family, MetricConstructor};

use super::Labels;

/// A [`Family`] that knows which label sets each rule made.
pub struct PerRule<M, C = fn() -> M> {
    family: Family<Labels, M, C>,
    /// Each label set made, by the rule it names.
    made: Mutex<HashMap<String, HashSet<Labels>>>,
}

impl<M: Default> Default for PerRule<M> {
    fn default() -> Self {
        Self::with(Family::new_with_constructor(M::default))
    }
}

impl<M, C> PerRule<M, C> {
    /// Over `family`.
    pub fn with(family: Family<Labels, M, C>) -> Self {
        Self {
            family,
            made: Mutex::default(),
        }
    }

    /// The family, to register.
    pub fn family(&self) -> Family<Labels, M, C>
    where
        C: Clone,
    {
        self.family.clone()
    }

    fn made(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashSet<Labels>>> {
        self.made.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<M: Clone, C: MetricConstructor<M>> PerRule<M, C> {
    /// Removes every series of `rule`.
    pub fn forget(&self, rule: &str) {
        for labels in self.made().remove(rule).unwrap_or_default() {
            self.family.remove(&labels);
        }
    }

    /// The series of `labels` (one of them names the rule), made if new.
    pub fn get_or_create(&self, labels: &Labels) -> M {
        let new = self.family.get(labels).is_none();
        if new
            && let Some((_, rule)) = labels
                .iter()
                .find(|(k, _)| matches!(*k, "controller" | "rule"))
        {
            self.made()
                .entry(rule.clone())
                .or_default()
                .insert(labels.clone());
        }
        self.family.get_or_create_owned(labels)
    }
}
