//! The current rule set: one cell per process, holding the last good set.
//!
//! The [`Loader`](super::Loader) writes it (the first load and every reload
//! alike); every engine start reads it, and a running engine follows its
//! changes ([`Follower`](super::Follower)). An engine started again (the
//! leader Lease lost and won back) therefore starts on the last good rules,
//! never on the ones read at process start.
//!
//! When the loader installs CRDs (`kiln run`), the cell is *gated*: a rule
//! that defines an API runs only once its CRD has been installed since the
//! engine started (each engine start begins a *round*, and the loader
//! installs every such CRD again in it), so a rule whose CRD is refused at
//! start, after a Lease re-win or on a standby taking over never runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

use crate::rules::{Rule, RuleSet};

/// The last good rule set, shared by the loader and every engine start.
#[derive(Clone)]
pub struct CurrentRules {
    cell: Arc<watch::Sender<Current>>,
    /// The latest round: bumped by each engine start, followed by the loader.
    rounds: Arc<watch::Sender<u64>>,
}

/// The rules now, and which of their CRDs are installed.
#[derive(Clone)]
pub struct Current {
    /// The last good rules.
    pub set: Arc<RuleSet>,
    /// Whether a rule defining an API waits for its CRD to be installed.
    gated: bool,
    /// Each rule whose CRD is installed: the fingerprint of the version
    /// installed, and the round it was installed in.
    installed: Arc<BTreeMap<String, (String, u64)>>,
}

impl Current {
    /// The rules an engine started in `round` may run: every rule without
    /// an API of its own, and those whose CRD (of the version in the set)
    /// was installed in that round or later. Every rule when not gated.
    pub fn runnable(&self, round: u64) -> RuleSet {
        let rules = self
            .set
            .rules
            .iter()
            .filter(|r| !self.gated || r.api.is_none() || self.installed_in(r, round))
            .cloned()
            .collect();
        RuleSet { rules }
    }

    fn installed_in(&self, rule: &Rule, round: u64) -> bool {
        self.installed
            .get(&rule.name)
            .is_some_and(|(fingerprint, r)| *fingerprint == rule.fingerprint && *r >= round)
    }

    /// The rules with an API whose CRD is not installed in `round`.
    pub(super) fn uninstalled(&self, round: u64) -> Vec<Arc<Rule>> {
        self.set
            .rules
            .iter()
            .filter(|r| r.api.is_some() && !self.installed_in(r, round))
            .cloned()
            .collect()
    }
}

impl CurrentRules {
    /// A cell holding `set`, every rule of it runnable.
    pub fn new(set: RuleSet) -> Self {
        let current = Current {
            set: Arc::new(set),
            gated: false,
            installed: Arc::default(),
        };
        Self {
            cell: Arc::new(watch::Sender::new(current)),
            rounds: Arc::new(watch::Sender::new(0)),
        }
    }

    /// From now on a rule defining an API runs only once its CRD is
    /// installed in the round of the engine's start.
    pub(super) fn gate(&self) {
        self.cell.send_modify(|c| c.gated = true);
    }

    /// The rules now.
    pub fn get(&self) -> Arc<RuleSet> {
        self.cell.borrow().set.clone()
    }

    /// The rules now, with which CRDs are installed.
    pub fn current(&self) -> Current {
        self.cell.borrow().clone()
    }

    /// Replaces the rules; every follower sees it. A rule unchanged from
    /// the set it replaces is kept as it is (the engine runs on it already),
    /// so the copy just compiled is dropped instead of held beside it. The
    /// CRDs of the rules named `installed` were installed in `round`.
    pub(super) fn set(&self, set: RuleSet, installed: &[String], round: u64) {
        let set = set.reusing(&self.get());
        self.cell.send_modify(|c| {
            let mut marks = (*c.installed).clone();
            marks.retain(|name, (fingerprint, _)| {
                set.get(name).is_some_and(|r| r.fingerprint == *fingerprint)
            });
            for rule in installed.iter().filter_map(|name| set.get(name)) {
                marks.insert(rule.name.clone(), (rule.fingerprint.clone(), round));
            }
            c.set = Arc::new(set);
            c.installed = Arc::new(marks);
        });
    }

    /// Records that `rule`'s CRD was installed in `round`.
    pub(super) fn installed(&self, rule: &Rule, round: u64) {
        self.cell.send_modify(|c| {
            let mut marks = (*c.installed).clone();
            marks.insert(rule.name.clone(), (rule.fingerprint.clone(), round));
            c.installed = Arc::new(marks);
        });
    }

    /// Takes the rules named `refused` out of the set.
    pub(super) fn without(&self, refused: &[String]) {
        let mut set = (*self.get()).clone();
        set.rules.retain(|r| !refused.contains(&r.name));
        self.set(set, &[], 0);
    }

    /// Changes from now on.
    pub fn subscribe(&self) -> watch::Receiver<Current> {
        self.cell.subscribe()
    }

    /// An engine starts: begins a new round, in which every CRD is
    /// installed again before its rule runs; the round.
    pub fn begin_round(&self) -> u64 {
        self.rounds.send_modify(|r| *r += 1);
        self.round()
    }

    /// The latest round.
    pub fn round(&self) -> u64 {
        *self.rounds.borrow()
    }

    /// The rounds, as engines begin them.
    pub(super) fn rounds(&self) -> watch::Receiver<u64> {
        self.rounds.subscribe()
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
        current.set(set(&[("a", "ConfigMap"), ("b", "Pod")]), &[], 0);
        let after = current.get();
        let (a0, a1) = (before.get("a").unwrap(), after.get("a").unwrap());
        assert!(
            Arc::ptr_eq(a0, a1),
            "one compiled copy of an unchanged rule"
        );
        assert_eq!(Arc::strong_count(a1), 2, "the new copy of `a` is dropped");
        assert_eq!(after.get("b").unwrap().primary.gvk.kind, "Pod");
    }

    fn api_rule(name: &str, title: &str) -> RuleSet {
        let text = format!(
            "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: {name}}}\nspec:\n  api:\n    group: {name}.example.com\n    kind: Site\n    versions:\n      - name: v1\n        schema:\n          spec:\n            title: {title}\n"
        );
        crate::rules::load_sources(vec![crate::rules::load::Source {
            file: format!("{name}.yaml").into(),
            text,
        }])
        .unwrap()
    }

    fn names(set: &RuleSet) -> Vec<&str> {
        set.rules.iter().map(|r| r.name.as_str()).collect()
    }

    #[test]
    fn a_rule_with_an_api_runs_once_its_crd_is_installed_in_the_engines_round() {
        let mut both = api_rule("a", "string");
        both.rules.extend(set(&[("plain", "ConfigMap")]).rules);
        let current = CurrentRules::new(both);
        assert_eq!(
            names(&current.current().runnable(1)),
            ["a", "plain"],
            "not gated"
        );
        current.gate();
        let round = current.begin_round();
        assert_eq!(names(&current.current().runnable(round)), ["plain"]);
        let a = current.get().get("a").unwrap().clone();
        current.installed(&a, round);
        assert_eq!(names(&current.current().runnable(round)), ["a", "plain"]);
        // The next engine start installs it again before it runs.
        let next = current.begin_round();
        assert_eq!(names(&current.current().runnable(next)), ["plain"]);
        assert_eq!(current.current().uninstalled(next).len(), 1);
        // A changed version needs its own install; an unchanged one keeps it.
        current.installed(&a, next);
        let mut changed = api_rule("a", "integer");
        changed.rules.extend(set(&[("plain", "ConfigMap")]).rules);
        current.set(changed, &[], next);
        assert_eq!(names(&current.current().runnable(next)), ["plain"]);
        current.without(&["a".to_string()]);
        assert_eq!(names(&current.get()), ["plain"]);
    }
}
