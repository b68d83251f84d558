//! One engine kept on the current rule set: started on it, then changed
//! rule by rule as the set changes (unchanged rules are not touched,
//! removed rules stop, new rules start, changed rules are swapped and
//! re-reconcile every primary once). A rule defining an API starts once
//! the loader has installed its CRD since this engine started.

use std::sync::Arc;

use tokio::sync::watch;

use super::current::{Current, CurrentRules};
use super::plan::plan;
use crate::engine::Engine;
use crate::rules::RuleSet;

/// Applies the current rule set's changes to one engine.
pub struct Follower {
    engine: Arc<Engine>,
    changes: watch::Receiver<Current>,
    running: Arc<RuleSet>,
    /// The round this engine started in.
    round: u64,
    prune_on_rule_removal: bool,
}

impl Follower {
    /// Starts every current rule that may run on `engine` (beginning a
    /// round: a rule defining an API waits until its CRD is installed
    /// again); with `prune_on_rule_removal`, a rule removed later has its
    /// children deleted.
    pub fn start(engine: Arc<Engine>, rules: &CurrentRules, prune_on_rule_removal: bool) -> Self {
        let round = rules.begin_round();
        let mut changes = rules.subscribe();
        let running = Arc::new(changes.borrow_and_update().runnable(round));
        engine.start_all(&running);
        Self {
            engine,
            changes,
            running,
            round,
            prune_on_rule_removal,
        }
    }

    /// The rules the engine runs.
    pub fn running(&self) -> &RuleSet {
        &self.running
    }

    /// Follows the changes until `shutdown` resolves (or the cell is gone).
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        futures::pin_mut!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                changed = self.changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let next = self.changes.borrow_and_update().runnable(self.round);
                    self.apply(Arc::new(next)).await;
                }
            }
        }
    }

    async fn apply(&mut self, set: Arc<RuleSet>) {
        let plan = plan(&self.running, &set);
        if plan.stop.is_empty() && plan.replace.is_empty() && plan.start.is_empty() {
            // Only which CRDs are installed changed, or nothing.
            self.running = set;
            return;
        }
        for name in &plan.stop {
            self.engine.remove(name, self.prune_on_rule_removal).await;
        }
        for name in &plan.replace {
            if let Some(rule) = set.get(name) {
                self.engine.replace(rule.clone()).await;
            }
        }
        for name in &plan.start {
            if let Some(rule) = set.get(name) {
                self.engine.start(rule.clone());
            }
        }
        tracing::info!(
            started = ?plan.start, stopped = ?plan.stop, replaced = ?plan.replace,
            unchanged = plan.unchanged.len(), "rules changed"
        );
        self.running = set;
    }
}
