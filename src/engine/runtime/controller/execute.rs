//! Execute: carrying out a plan (applies, re-ownings, prunes, decorations,
//! the status), within the primary's write budget, and what a failed write
//! becomes.

use super::*;
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
        // Decorating an object another primary of the rule decorates too
        // fails, once the children went through.
        let shared = self.claim(obj, decorations);
        let none = Ok(Decorations::default());
        let written = if shared.is_some() { &none } else { decorations };
        if let Some(failure) = self.over_budget(obj, plan, written).await {
            return self.failed(obj, plan, failure, secrets).await;
        }
        for child in &plan.apply {
            if let Err(failure) = self.apply(obj, child).await {
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
        match plan.event() {
            Some(event) => {
                let kind = if event.warning {
                    self.count_failure(event.reason);
                    tracing::warn!(rule = %self.rule.name, object = %ObjKey::of(obj), reason = event.reason, message = %event.message, "reconcile failed");
                    EventType::Warning
                } else {
                    EventType::Normal
                };
                self.report(obj, kind, event.reason, &event.message).await;
            }
            None => {
                if let Some(state) = lock(&self.states).get_mut(&ObjKey::of(obj)) {
                    state.reported = None;
                }
            }
        }
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

    /// What a write that went over budget targets, and the last other
    /// field manager that changed it (who kiln keeps fighting with).
    async fn fought_over(&self, written: &Written<'_>) -> (String, Option<String>) {
        match *written {
            Written::Child(child) => {
                let other = match self.wiring.children.get(&child.gvk) {
                    Some(informer) => {
                        let ours = &self.shared.options.field_manager;
                        let (ns, name) = (child.namespace.as_deref(), &child.name);
                        self.last_other_manager(informer.kind(), ns, name, ours)
                            .await
                    }
                    None => None,
                };
                (format!("{} {}", child.gvk.kind, plan::key_of(child)), other)
            }
            Written::Strip(gvk, key) => {
                let other = match self.wiring.children.get(gvk) {
                    Some(informer) => {
                        let ours = &self.shared.options.field_manager;
                        let ns = key.namespace.as_deref();
                        self.last_other_manager(informer.kind(), ns, &key.name, ours)
                            .await
                    }
                    None => None,
                };
                (format!("{} {key} (replace)", gvk.kind), other)
            }
            Written::Decoration(d) => {
                let other = match self.shared.kinds.resolve(&d.gvk).await {
                    Ok(kind) => {
                        let ns = d.namespace.as_deref();
                        self.last_other_manager(&kind, ns, &d.name, &d.manager)
                            .await
                    }
                    Err(_) => None,
                };
                let at = d
                    .namespace
                    .as_ref()
                    .map_or(String::new(), |n| format!("{n}/"));
                let what = format!("{} {at}{} (decorated as {})", d.gvk.kind, d.name, d.manager);
                (what, other)
            }
        }
    }

    /// Spends the write budget of the primary on the plan's applies and the
    /// decorations (budget.rs: only writes repeating what kiln last wrote
    /// count), or says why its writes are paused (a fight with another
    /// field manager).
    pub(super) async fn over_budget(
        &self,
        obj: &DynamicObject,
        plan: &Plan,
        decorations: &Result<Decorations, String>,
    ) -> Option<Failure> {
        let now = std::time::Instant::now();
        let writes = planned_writes(plan, decorations);
        if writes.is_empty() {
            return None;
        }
        let key = ObjKey::of(obj);
        let first = {
            let mut states = lock(&self.states);
            let rare = states.entry(key.clone()).or_default().rare();
            rare.expire(now);
            if let Some((_, why)) = rare.paused() {
                return Some(Failure::new(Category::Conflict, why.clone()));
            }
            let prints: Vec<budget::Write> = writes.iter().map(|(w, _)| *w).collect();
            match rare.window.spend(now, &prints) {
                Ok(()) => return None,
                Err(first) => first,
            }
        };
        // Over budget: find who keeps changing the object, then pause.
        let (what, other) = self.fought_over(&writes[first].1).await;
        let cool_down = self.rule.requeue.on_error.max;
        let why = format!(
            "{what} was rewritten more than {} times in {}s with what kiln last wrote: another controller ({}) keeps changing what the rule sets; kiln pauses its writes to this object for {}s",
            budget::BUDGET,
            budget::WINDOW.as_secs(),
            other.as_deref().unwrap_or("unknown field manager"),
            cool_down.as_secs()
        );
        self.shared
            .metrics
            .budget_exhausted
            .get_or_create(&metrics::label("rule", &self.rule.name))
            .inc();
        let mut states = lock(&self.states);
        let rare = states.entry(key).or_default().rare();
        rare.window.forgive();
        rare.rarer().paused = Some((now + cool_down, why.clone()));
        Some(Failure::new(Category::Conflict, why))
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

    /// A write of the plan failed: the status says so; a permanent failure
    /// is an Event and waits (for a change, or slowly), a transient one backs off.
    pub(super) async fn failed(
        &self,
        obj: &DynamicObject,
        plan: &Plan,
        failure: Failure,
        secrets: &[String],
    ) -> Result<Next, Failure> {
        // The API server may quote a value back, and a value may come from a Secret.
        let failure = Failure {
            message: crate::redact::redact(&failure.message, secrets),
            ..failure
        };
        let reason = failure.category.reason();
        self.count_failure(reason);
        let part = plan::failed(plan, reason, failure.message.clone());
        let written = self.write_status(obj, &part).await;
        let slow = self.rule.requeue.on_error.max;
        let retry = failure.category.retry(slow);
        if retry.is_some() || failure.category == Category::Denied {
            tracing::warn!(rule = %self.rule.name, object = %ObjKey::of(obj), reason, message = %failure.message, "reconcile failed");
            self.report(obj, EventType::Warning, reason, &failure.message)
                .await;
        }
        match (retry, written) {
            (Some(next), Ok(())) => Ok(next),
            // Even the smaller status is refused for good: the Event says why.
            (Some(next), Err(e)) if e.category.retry(slow).is_some() => Ok(next),
            (Some(_), Err(e)) => Err(e),
            (None, _) => Err(failure),
        }
    }

    /// Counts a reconcile that ended failed, by its reason.
    pub(super) fn count_failure(&self, reason: &str) {
        let labels = metrics::labels2(("rule", &self.rule.name), ("reason", reason));
        self.shared
            .metrics
            .reconcile_failures
            .get_or_create(&labels)
            .inc();
    }
}

/// A write a reconcile is about to make.
pub(super) enum Written<'a> {
    Child(&'a DesiredChild),
    Decoration(&'a decorate::Decoration),
    /// Keys removed under a child's `replace` fields (replace.rs).
    Strip(&'a Gvk, &'a ObjKey),
}

/// Every write of a plan and its decorations, fingerprinted for the budget.
pub(super) fn planned_writes<'a>(
    plan: &'a Plan,
    decorations: &'a Result<Decorations, String>,
) -> Vec<(budget::Write, Written<'a>)> {
    let children = plan.apply.iter().map(|c| {
        let target = (c.gvk.to_string(), &c.namespace, &c.name);
        (budget::Write::of(target, &c.object), Written::Child(c))
    });
    let decorated = decorations
        .iter()
        .flat_map(|d| d.apply.iter().chain(&d.take_back))
        .map(|d| {
            let target = (d.gvk.to_string(), &d.namespace, &d.name, &d.manager);
            (budget::Write::of(target, &d.body), Written::Decoration(d))
        });
    // Removing keys another writer adds again and again is a fight too.
    let stripped = plan.touch.iter().filter_map(|t| match t {
        Touch::Strip {
            gvk, key, desired, ..
        } => {
            let target = (gvk.to_string(), &key.namespace, &key.name, "replace");
            Some((budget::Write::of(target, desired), Written::Strip(gvk, key)))
        }
        Touch::Remember { .. } => None,
    });
    children.chain(decorated).chain(stripped).collect()
}
