//! Execute: carrying out a plan (applies, re-ownings, prunes, decorations,
//! the status), within the primary's write budget, and what a failed write
//! becomes.

use super::*;
use crate::engine::decision::budget::Written;
use crate::engine::decision::outcome::{self, Ending, Report};
use crate::engine::runtime::decorations;

impl RuleController {
    /// Performs a plan: applies, then prunes (only once every apply
    /// succeeded), then the status; Events for what changed.
    /// `secrets` are kept out of every message it writes.
    pub(super) async fn execute(
        &self,
        obj: &DynamicObject,
        plan: &Plan,
        decorations: &Result<Decorations, String>,
        secrets: &[String],
    ) -> Result<Next, Failure> {
        // The hook failed or its answer is refused: nothing is applied,
        // pruned or decorated; the status and a Warning say why, and the
        // primary is retried with backoff.
        if let Some(why) = &plan.hook_failed {
            let failure = Failure::new(Category::Hook, why.clone());
            return self.failed(obj, plan, failure, secrets).await;
        }
        // Decorating an object another primary of the rule decorates too
        // fails, once the children went through.
        let shared = self.claim(obj, decorations);
        let none = Ok(Decorations::default());
        let written = if shared.is_some() { &none } else { decorations };
        if let Some(failure) = self.over_budget(obj, plan, written).await {
            return self.failed(obj, plan, failure, secrets).await;
        }
        for (i, child) in plan.apply.iter().enumerate() {
            if let Err(failure) = self.apply(obj, child).await {
                if failure.category == Category::Invalid {
                    self.refund(obj, plan, written, i);
                }
                return self.failed(obj, plan, failure, secrets).await;
            }
        }
        for reown in &plan.reown {
            if let Err(failure) = self.reown(obj, reown).await {
                return self.failed(obj, plan, failure, secrets).await;
            }
        }
        for prune in &plan.prune {
            if let Err(failure) = self.prune(obj, prune).await {
                return self.failed(obj, plan, failure, secrets).await;
            }
        }
        for touch in &plan.touch {
            if let Err(failure) = self.touch(obj, touch).await {
                return self.failed(obj, plan, failure, secrets).await;
            }
        }
        let decorated = match (decorations, shared) {
            (_, Some(failure)) => Err(failure),
            (Ok(d), None) => self.decorate(obj, d).await,
            (Err(message), None) => Err(Failure::new(
                Category::Invalid,
                format!("decorating: {message}"),
            )),
        };
        if let Err(failure) = decorated {
            return self.failed(obj, plan, failure, secrets).await;
        }
        if let Err(failure) = self.write_status(obj, &plan.status).await {
            // A status the server refuses (too large, not in its schema)
            // shows up as a failure, with the smaller status it can take.
            return self.failed(obj, plan, failure, secrets).await;
        }
        self.end(obj, &outcome::succeeded(plan)).await;
        self.tell(obj, &plan.status.outcome).await;
        Ok(plan.next)
    }

    /// Applies each decoration as its decorator's field manager: fields
    /// set, or taken back.
    pub(super) async fn decorate(
        &self,
        obj: &DynamicObject,
        decorations: &Decorations,
    ) -> Result<(), Failure> {
        for d in decorations.apply.iter().chain(&decorations.take_back) {
            let kind = self.shared.kinds.resolve(&d.gvk).await.map_err(|e| {
                Failure::new(Category::Transient, format!("decorating {}: {e}", d.gvk))
            })?;
            let permit = self.fence(obj)?;
            let api = self.api(&kind, d.namespace.as_deref());
            let what = format!("decorating {} {} as {}", d.gvk.kind, d.name, d.manager);
            self.shared.metrics.wrote(&self.rule.name, "apply");
            match fenced(permit.as_ref(), decorations::send(&api, d)).await? {
                // Gone meanwhile: nothing to decorate, nothing created.
                Ok(decorations::Sent::Applied | decorations::Sent::Gone) => {}
                Err(e) => return Err(Failure::of(&e, &what, d.force)),
            }
        }
        Ok(())
    }

    /// Records the related objects the primary decorates (claims.rs): one
    /// another primary of the rule decorates too is a conflict, reported on
    /// both, and decorated for neither.
    pub(super) fn claim(
        &self,
        obj: &DynamicObject,
        decorations: &Result<Decorations, String>,
    ) -> Option<Failure> {
        let targets = decorations
            .as_ref()
            .map(|d| d.claimed.clone())
            .unwrap_or_default();
        let claimed = lock(&self.claims).set(&ObjKey::of(obj), targets);
        for other in claimed.touched {
            self.enqueue(other);
        }
        let ((kind, namespace, name, manager), other) = claimed.shared.first()?;
        let at = namespace
            .as_ref()
            .map_or(String::new(), |n| format!("{n}/"));
        let message = format!(
            "{kind} {at}{name} is decorated as {manager} for {} {other} too: two primaries of rule {} may not decorate one object (each would undo the other); kiln decorates it for neither until one stops",
            self.rule.primary.gvk.kind, self.rule.name
        );
        Some(Failure::new(Category::Conflict, message))
    }

    /// The API server refused the plan's `failed`th apply as invalid: that
    /// write and every one after it, never made, are taken back from the
    /// primary's write budget (budget.rs lists the applies first).
    fn refund(
        &self,
        obj: &DynamicObject,
        plan: &Plan,
        decorations: &Result<Decorations, String>,
        failed: usize,
    ) {
        let writes = budget::planned(plan, decorations.as_ref().ok());
        let unmade: Vec<budget::Write> = writes.iter().skip(failed).map(|(w, _)| *w).collect();
        if let Some(rare) = lock(&self.states)
            .get_mut(&ObjKey::of(obj))
            .and_then(|s| s.rare.as_mut())
        {
            rare.window.refund(&unmade);
        }
    }

    /// The last other field manager that changed what a write over budget
    /// targets (who kiln keeps fighting with), if it can be read.
    async fn fought_with(&self, written: &Written<'_>) -> Option<String> {
        let ours = &self.shared.options.field_manager;
        match *written {
            Written::Child(child) => {
                let informer = self.wiring.children.get(&child.gvk)?;
                let (ns, name) = (child.namespace.as_deref(), &child.name);
                self.last_other_manager(informer.kind(), ns, name, ours)
                    .await
            }
            Written::Strip(gvk, key) => {
                let informer = self.wiring.children.get(gvk)?;
                let ns = key.namespace.as_deref();
                self.last_other_manager(informer.kind(), ns, &key.name, ours)
                    .await
            }
            Written::Decoration(d) => {
                let kind = self.shared.kinds.resolve(&d.gvk).await.ok()?;
                let ns = d.namespace.as_deref();
                self.last_other_manager(&kind, ns, &d.name, &d.manager)
                    .await
            }
        }
    }

    /// Spends the write budget of the primary on the plan's applies and the
    /// decorations (budget.rs decides: only writes repeating what kiln last
    /// wrote count), or says why its writes are paused; over budget, reads
    /// who kiln keeps fighting with and records the pause.
    pub(super) async fn over_budget(
        &self,
        obj: &DynamicObject,
        plan: &Plan,
        decorations: &Result<Decorations, String>,
    ) -> Option<Failure> {
        let now = std::time::Instant::now();
        let writes = budget::planned(plan, decorations.as_ref().ok());
        // Nothing to write: no state is kept for the primary.
        if writes.is_empty() {
            return None;
        }
        let key = ObjKey::of(obj);
        let first = {
            let prints: Vec<budget::Write> = writes.iter().map(|(w, _)| *w).collect();
            let mut states = lock(&self.states);
            match states
                .entry(key.clone())
                .or_default()
                .rare()
                .judge(now, &prints)
            {
                budget::Verdict::Within => return None,
                budget::Verdict::Paused(why) => return Some(Failure::new(Category::Conflict, why)),
                budget::Verdict::Over { first } => first,
            }
        };
        let written = &writes[first].1;
        let other = self.fought_with(written).await;
        let pause = budget::pause(now, &written.what(), other.as_deref(), &self.rule.requeue);
        self.shared
            .metrics
            .budget_exhausted
            .get_or_create(&metrics::label("rule", &self.rule.name))
            .inc();
        let mut states = lock(&self.states);
        let rare = states.entry(key).or_default().rare();
        rare.window.forgive();
        rare.rarer().paused = Some((pause.until, pause.why.clone()));
        Some(Failure::new(Category::Conflict, pause.why))
    }

    /// The field manager other than `ours` that wrote an object last (one
    /// GET: the caches keep no managed fields of other managers).
    pub(super) async fn last_other_manager(
        &self,
        kind: &Kind,
        namespace: Option<&str>,
        name: &str,
        ours: &str,
    ) -> Option<String> {
        let live = self.api(kind, namespace).get(name).await.ok()?;
        live.managed_fields()
            .iter()
            .filter(|m| m.manager.as_deref() != Some(ours))
            .max_by_key(|m| m.time.as_ref().map(|t| t.0))
            .and_then(|m| m.manager.clone())
    }

    /// A write of the plan failed: carries out what it becomes
    /// (outcome.rs): the status that says so, the metric, the Event and the
    /// retry.
    pub(super) async fn failed(
        &self,
        obj: &DynamicObject,
        plan: &Plan,
        failure: Failure,
        secrets: &[String],
    ) -> Result<Next, Failure> {
        let failed = outcome::failed(plan, failure, secrets, &self.rule.requeue);
        self.count_failure(&failed.ending);
        let written = self.write_status(obj, &failed.status).await;
        self.report_ending(obj, &failed.ending.report).await;
        self.tell(obj, &failed.status.outcome).await;
        failed.next(written)
    }

    /// Carries out how a reconcile ends: the metric, then the Event.
    async fn end(&self, obj: &DynamicObject, ending: &Ending) {
        self.count_failure(ending);
        self.report_ending(obj, &ending.report).await;
    }

    /// Raises the Event of a reconcile's end, or forgets the last one.
    async fn report_ending(&self, obj: &DynamicObject, report: &Report) {
        match report {
            Report::Raise(event) => {
                let kind = if event.warning {
                    tracing::warn!(rule = %self.rule.name, object = %ObjKey::of(obj), reason = event.reason, message = %event.message, "reconcile failed");
                    EventType::Warning
                } else {
                    EventType::Normal
                };
                self.report(obj, kind, event.reason, &event.message).await;
            }
            Report::Clear => {
                if let Some(state) = lock(&self.states).get_mut(&ObjKey::of(obj)) {
                    state.reported = None;
                }
            }
            Report::Keep => {}
        }
    }

    /// Counts a reconcile that ended failed, by its reason.
    fn count_failure(&self, ending: &Ending) {
        let Some(reason) = ending.failed else {
            return;
        };
        let labels = metrics::labels2(("rule", &self.rule.name), ("reason", reason));
        self.shared
            .metrics
            .reconcile_failures
            .get_or_create(&labels)
            .inc();
    }
}
