//! One rule, running: the handlers that turn cache changes into queued
//! primaries, the workers, and the executor of each reconcile's plan.
//!
//! ```text
//! primary / child / related change ─▶ queue (key = primary) ─▶ worker ─▶ reconcile
//! reconcile: observe (cache reads) ─▶ plan (pure, plan.rs) ─▶ apply ─▶ prune ─▶ status ─▶ next
//! ```

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, Weak};

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::{Api, Resource, ResourceExt};
use minijinja::Value as JinjaValue;
use serde_json::{Value, json};
use tracing::Instrument;

use super::Shared;
use super::backoff;
use super::budget;
use super::claims::Claims;
use super::decorate::{self, Decorations};
use super::diff;
use super::failure::{Category, Failure, Stage};
use super::informer::{Change, Handler, Informer, ObjKey};
use super::kinds::Kind;
use super::owned_status;
use super::placing;
pub use super::plan::Next;
use super::plan::{self, Blind, Known, LiveChild, Observed, Occupants, Plan, Prune};
use super::queue::Queue;
use super::related::{self, Found, Refusal, Target};
use super::reown::{self, Reown};
use super::reverse::{Reverse, SelectorRef};
use super::schema::StatusSchema;
use super::status::{self, Contributor, Outcome, Part, reasons};
use super::touch::Touch;
use crate::metrics;
use crate::render::{self, DesiredChild};
use crate::rules::{Gvk, LabelSelector, LabelSource, Rule};
use crate::shard::Whose;
use crate::template::{Budget, to_jinja};

/// Kinds and informers a rule uses.
pub struct Wiring {
    /// The primary kind.
    pub primary: Arc<Informer>,
    /// Child kinds.
    pub children: HashMap<Gvk, Arc<Informer>>,
    /// Watch name → informer of the watched kind.
    pub related: HashMap<String, Arc<Informer>>,
    /// What the primary's status schema lets kiln write.
    pub status: Arc<StatusSchema>,
    /// Namespaces, when the rule selects primaries by their namespace's labels.
    pub namespaces: Option<Arc<Informer>>,
    /// The rule is refused (its status does not fit the primary's schema):
    /// it only tears down the primaries being deleted, as deleting
    /// children and letting go of its finalizer needs no status.
    pub refused: bool,
    /// Only primaries created after this are taken (`takeExisting: false`).
    pub since: Option<jiff::Timestamp>,
}

/// What the controller keeps per primary between reconciles; dropped with it.
/// Kept small (48 bytes): what most primaries never need sits behind
/// [`PrimaryState::rare`], allocated only while in use (issue 16).
#[derive(Debug, Default)]
struct PrimaryState {
    /// Fingerprint of spec and metadata last queued, so status-only updates
    /// do not re-render.
    fingerprint: Option<u64>,
    /// The last condition reported as an Event, so Events are not repeated.
    reported: Option<Box<str>>,
    /// Transient failures of children's writes in a row (their backoff's exponent).
    failures: u32,
    /// Transient failures of the status write in a row, counted apart so
    /// that a refused status never slows the retries of a child.
    status_failures: u32,
    /// Normalised children, recent writes and a pause; `None` while all empty.
    rare: Option<Box<Rare>>,
}

/// The part of [`PrimaryState`] that is empty for most primaries most of the time.
/// Every primary that writes holds one for [`budget::WINDOW`] (all of them
/// while the bench converges), so what fewer need sits behind `rarer`:
/// 40 bytes instead of 120 (issue 16).
#[derive(Debug, Default)]
struct Rare {
    /// The writes made within the last [`budget::WINDOW`].
    window: budget::Window,
    /// Normalised children and a pause; `None` while both empty.
    rarer: Option<Box<Rarer>>,
}

/// The part of [`Rare`] only primaries with normalised children or a
/// paused write hold.
#[derive(Debug, Default)]
struct Rarer {
    /// How the server stored children it normalises.
    known: Known,
    /// While set and in the future: writes paused, with this explanation.
    paused: Option<(std::time::Instant, String)>,
}

impl Rare {
    /// Forgets writes older than [`budget::WINDOW`] and a pause that is over.
    fn expire(&mut self, now: std::time::Instant) {
        self.window.expire(now);
        if let Some(rarer) = &mut self.rarer {
            if rarer
                .paused
                .as_ref()
                .is_some_and(|(until, _)| *until <= now)
            {
                rarer.paused = None;
            }
            if rarer.known.is_empty() && rarer.paused.is_none() {
                self.rarer = None;
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.window.is_empty() && self.rarer.is_none()
    }

    /// How the server stored children it normalises (none: empty).
    fn known(&self) -> Option<&Known> {
        self.rarer.as_ref().map(|r| &r.known)
    }

    /// The part fewer primaries need, allocated on first use.
    fn rarer(&mut self) -> &mut Rarer {
        self.rarer.get_or_insert_with(Box::default)
    }

    /// The pause in force, if any (as of the last [`expire`](Self::expire)).
    fn paused(&self) -> Option<&(std::time::Instant, String)> {
        self.rarer.as_ref().and_then(|r| r.paused.as_ref())
    }
}

impl PrimaryState {
    /// A reconcile succeeded: every retry count starts again, and what
    /// expired by `now` is freed.
    fn succeeded(&mut self, now: std::time::Instant) {
        self.failures = 0;
        self.status_failures = 0;
        self.tidy(now);
    }

    /// The rarely used part, allocated on first use.
    fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Drops what expired by `now`, and the rarely used part once empty.
    fn tidy(&mut self, now: std::time::Instant) {
        if let Some(rare) = &mut self.rare {
            rare.expire(now);
            if rare.is_empty() {
                self.rare = None;
            }
        }
    }

    /// A reconcile failed in `stage`; returns that stage's retry number (from
    /// 0). A status failure means the children's writes went through.
    fn failed(&mut self, stage: Stage) -> u32 {
        let count = match stage {
            Stage::Children => &mut self.failures,
            Stage::Status => {
                self.failures = 0;
                &mut self.status_failures
            }
        };
        let before = *count;
        *count = before.saturating_add(1);
        before
    }
}

/// A running rule.
pub struct RuleController {
    rule: Arc<Rule>,
    shared: Arc<Shared>,
    wiring: Wiring,
    queue: Queue<ObjKey>,
    reverse: Mutex<Reverse>,
    states: Mutex<HashMap<ObjKey, PrimaryState>>,
    /// Which primary decorates which related object.
    claims: Mutex<Claims>,
    subscriptions: Mutex<Vec<(Arc<Informer>, u64)>>,
}

/// `write` under the permit [`RuleController::fence`] gave (none when not
/// sharded): given up, as a lost Lease, once this replica's shard Lease
/// goes stale before it is answered.
async fn fenced<F: Future>(
    permit: Option<&crate::shard::Permit>,
    write: F,
) -> Result<F::Output, Failure> {
    let Some(permit) = permit else {
        return Ok(write.await);
    };
    permit.fenced(write).await.ok_or_else(|| {
        Failure::new(
            Category::LeaseLost,
            "this replica's shard Lease went stale before the API server answered: the write was given up",
        )
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RuleController {
    /// Wires the rule to its informers and subscribes its handlers.
    pub fn new(rule: Arc<Rule>, shared: Arc<Shared>, wiring: Wiring) -> Arc<Self> {
        // A refused rule writes no status: it has no part in any.
        if !wiring.refused {
            shared.board.register(&rule, wiring.since);
        }
        let this = Arc::new(Self {
            rule,
            shared,
            wiring,
            queue: Queue::default(),
            reverse: Mutex::default(),
            states: Mutex::default(),
            claims: Mutex::default(),
            subscriptions: Mutex::default(),
        });
        let weak = Arc::downgrade(&this);
        let mut subs = Vec::new();
        let primary = this.wiring.primary.clone();
        subs.push((
            primary.clone(),
            primary.subscribe(handler(&weak, Self::on_primary)),
        ));
        for informer in this.wiring.children.values() {
            subs.push((
                informer.clone(),
                informer.subscribe(handler(&weak, Self::on_child)),
            ));
        }
        if let Some(informer) = &this.wiring.namespaces {
            subs.push((
                informer.clone(),
                informer.subscribe(handler(&weak, Self::on_namespace)),
            ));
        }
        for (watch, informer) in &this.wiring.related {
            let watch = watch.clone();
            let weak = weak.clone();
            let h: Handler = Arc::new(move |change: &Change<'_>| {
                if let Some(this) = weak.upgrade() {
                    this.on_related(&watch, change);
                }
            });
            subs.push((informer.clone(), informer.subscribe(h)));
        }
        *lock(&this.subscriptions) = subs;
        this
    }

    /// The rule.
    pub fn rule(&self) -> &Arc<Rule> {
        &self.rule
    }

    /// The cache of the rule's primaries.
    pub fn primaries(&self) -> &Arc<Informer> {
        &self.wiring.primary
    }

    /// The informers the rule uses.
    pub fn wiring(&self) -> &Wiring {
        &self.wiring
    }

    /// Queues every primary the rule selects (start-up, resync, rule change).
    pub fn enqueue_all(&self) {
        for obj in self.wiring.primary.entries() {
            if self.selects(obj.namespace(), &obj.labels()) {
                self.enqueue(obj.key());
            }
        }
    }

    /// Reconciles up to `workers` primaries at once until the queue shuts
    /// down (`workers.rs`); cancelling this future (a rule aborted because
    /// the lease was lost) cancels every reconcile under way.
    pub async fn run_workers(self: &Arc<Self>, workers: usize) {
        super::workers::run(&self.queue, workers, |key, waited| {
            self.clone().work(key, waited)
        })
        .await;
    }

    /// Deletes every child this rule made, for every primary (used when a
    /// rule is removed with pruning on). A child is what kiln created: the
    /// rule's label *and* a controller owner reference to a primary of the
    /// rule — a label alone anyone can write.
    pub async fn delete_all_children(&self) {
        let primaries: HashMap<String, Value> = self
            .wiring
            .primary
            .list()
            .iter()
            .filter_map(|p| Some((p.uid()?, super::placed::identity(&p.metadata))))
            .collect();
        let gvk = &self.rule.primary.gvk;
        // An orphaned child outlives its rule as it outlives its primary.
        let made_by_kiln = |child: &DynamicObject| {
            crate::ownership::read(&child.metadata).filter(|m| {
                m.rule == self.rule.name
                    && !m.orphaned()
                    && m.kind_is(&gvk.api_version(), &gvk.kind)
                    && primaries.get(&m.uid).is_some_and(|p| {
                        super::placed::believed(&self.rule, m, &ObjKey::of(child), p)
                    })
            })
        };
        for (gvk, informer) in &self.wiring.children {
            for child in informer.list() {
                let Some(mark) = made_by_kiln(&child) else {
                    continue;
                };
                // Sharded: only the children of this replica's share.
                let primary_uid = mark.uid;
                // Only while this replica may write: its Lease held (a
                // standby, or a leader past its renew deadline, deletes
                // nothing) and, sharded, the primary's bucket (another
                // replica deletes the rest).
                if !self.shared.may_write() {
                    tracing::warn!(rule = %self.rule.name, "the lease is not held: not deleting the children of the removed rule");
                    return;
                }
                let Ok(permit) = self.fence_uid(&primary_uid) else {
                    continue;
                };
                let key = ObjKey::of(&child);
                let api = self.api(informer.kind(), key.namespace.as_deref());
                let dp = DeleteParams::background();
                let deleting = api.delete(&key.name, &dp);
                let Ok(deleted) = fenced(permit.as_ref(), deleting).await else {
                    continue;
                };
                match deleted {
                    Ok(_) => {
                        tracing::info!(rule = %self.rule.name, child = %key, kind = %gvk, "deleted: its rule was removed")
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(error) => {
                        tracing::warn!(rule = %self.rule.name, child = %key, %error, "could not delete the child of a removed rule")
                    }
                }
            }
        }
    }

    /// Stops handing out work; workers finish what they hold, then return.
    pub fn shutdown(&self) {
        self.queue.shutdown();
        self.shared.board.unregister(&self.rule);
        self.shared.ready.stopped(&self.rule.name);
        for (informer, id) in lock(&self.subscriptions).drain(..) {
            informer.unsubscribe(id);
        }
    }

    async fn work(self: Arc<Self>, key: ObjKey, waited: std::time::Duration) {
        let m = &self.shared.metrics;
        let controller = metrics::controller(&self.rule.name);
        let queue = metrics::queue(&self.rule.name);
        m.queue_duration
            .get_or_create(&queue)
            .observe(waited.as_secs_f64());
        m.queue_depth
            .get_or_create(&queue)
            .set(self.queue.len() as i64);
        let timer = m.reconcile_timer(&controller);
        let span = tracing::info_span!("reconcile", rule = %self.rule.name, object = %key);
        let result = self.reconcile(&key).instrument(span).await;
        drop(timer);
        let outcome = self.schedule(&key, result);
        let labels = metrics::labels2(("controller", &self.rule.name), ("result", outcome));
        m.reconcile_total.get_or_create(&labels).inc();
        self.queue.done(&key);
    }

    /// Queues the primary again as `result` says; returns the metric's result label.
    fn schedule(&self, key: &ObjKey, result: Result<Next, Failure>) -> &'static str {
        match result {
            Ok(next) => {
                if let Some(state) = lock(&self.states).get_mut(key) {
                    state.succeeded(std::time::Instant::now());
                }
                match next {
                    Next::After(delay) => {
                        self.queue.add_after(key.clone(), delay);
                        "requeue_after"
                    }
                    Next::Done => "success",
                }
            }
            Err(failure) => {
                let attempt = lock(&self.states)
                    .get_mut(key)
                    .map_or(0, |state| state.failed(failure.stage));
                let delay = backoff::delay(self.rule.requeue.on_error, attempt, backoff::jitter());
                tracing::warn!(rule = %self.rule.name, object = %key, error = %failure, retry_in = ?delay, "reconcile failed");
                self.queue.add_after(key.clone(), delay);
                let queue = metrics::queue(&self.rule.name);
                let m = &self.shared.metrics;
                m.reconcile_errors
                    .get_or_create(&metrics::controller(&self.rule.name))
                    .inc();
                m.queue_retries.get_or_create(&queue).inc();
                "error"
            }
        }
    }

    /// Queues a primary (counted as a work-queue add).
    fn enqueue(&self, key: ObjKey) {
        let queue = metrics::queue(&self.rule.name);
        self.shared.metrics.queue_adds.get_or_create(&queue).inc();
        self.queue.add(key);
        self.shared
            .metrics
            .queue_depth
            .get_or_create(&queue)
            .set(self.queue.len() as i64);
    }

    // --- handlers: cheap, synchronous, never drop a change ---------------

    fn on_primary(&self, change: &Change<'_>) {
        match change {
            Change::Applied(obj) => {
                if !self.selects(obj.namespace().as_deref(), obj.labels()) && !self.holds(obj) {
                    return;
                }
                let key = ObjKey::of(obj);
                let print = Some(fingerprint(obj));
                let mut states = lock(&self.states);
                let state = states.entry(key.clone()).or_default();
                if std::mem::replace(&mut state.fingerprint, print) != print {
                    drop(states);
                    self.enqueue(key);
                }
            }
            Change::Deleted(obj) => {
                let key = ObjKey::of(obj);
                lock(&self.states).remove(&key);
                lock(&self.reverse).forget(&key);
                let touched = lock(&self.claims).forget(&key);
                for other in touched {
                    self.enqueue(other);
                }
                self.shared.board.forget(&self.rule.primary.gvk, &key);
                self.shared.ready.forget(&self.rule.name, &key);
                self.shared
                    .no_status
                    .forget(obj.metadata.uid.as_deref().unwrap_or_default());
            }
        }
    }

    fn on_child(&self, change: &Change<'_>) {
        let (Change::Applied(obj) | Change::Deleted(obj)) = change;
        let Some(mark) = crate::ownership::read(&obj.metadata) else {
            return;
        };
        let gvk = &self.rule.primary.gvk;
        if mark.rule != self.rule.name || !mark.kind_is(&gvk.api_version(), &gvk.kind) {
            return;
        }
        // An `outside` child names its primary's namespace; an owned or
        // orphaned one lives in it.
        let namespaced = self.wiring.primary.kind().namespaced;
        let namespace = mark.primary_namespace(obj.namespace().as_deref(), namespaced);
        self.enqueue(ObjKey {
            namespace,
            name: mark.name,
        });
    }

    /// A Namespace changed (its labels, say): its primaries are looked at
    /// again, as `spec.for.namespaceSelector` may take them now.
    fn on_namespace(&self, change: &Change<'_>) {
        let (Change::Applied(ns) | Change::Deleted(ns)) = change;
        let name = ns.name_any();
        for obj in self.wiring.primary.entries() {
            let namespace = obj.namespace();
            if namespace == Some(name.as_str()) && self.selects(namespace, &obj.labels()) {
                self.enqueue(obj.key());
            }
        }
    }

    fn on_related(&self, watch: &str, change: &Change<'_>) {
        let (Change::Applied(obj) | Change::Deleted(obj)) = change;
        let key = ObjKey::of(obj);
        let primaries = lock(&self.reverse).primaries_for(watch, &key, obj.labels());
        for primary in primaries {
            self.enqueue(primary);
        }
    }

    /// Whether the rule takes the object in `namespace` with `labels` as a primary.
    pub fn selects<L: LabelSource + ?Sized>(&self, namespace: Option<&str>, labels: &L) -> bool {
        let primary = &self.rule.primary;
        primary.selects(namespace, labels)
            && namespace_takes(primary, namespace, self.wiring.namespaces.as_deref())
    }

    // --- reconcile: observe, plan, execute ------------------------------

    /// Reconciles one primary.
    pub async fn reconcile(&self, key: &ObjKey) -> Result<Next, Failure> {
        let Some(obj) = self.wiring.primary.get(key) else {
            return Ok(Next::Done);
        };
        let whose = self
            .shared
            .whose(obj.metadata.uid.as_deref().unwrap_or_default());
        if let Some(next) = not_mine(whose) {
            if whose == Whose::Unsure {
                self.shared.put_off();
            }
            return Ok(next);
        }
        if self.wiring.refused && obj.metadata.deletion_timestamp.is_none() {
            return Ok(Next::Done);
        }
        // Suspended: nothing is written for the object (children, status,
        // finalizer) until the annotation goes, which queues it again.
        if super::suspend::suspended_meta(&obj.metadata) {
            let message = super::suspend::message();
            let reason = super::suspend::REASON;
            self.report(&obj, EventType::Normal, reason, &message).await;
            return Ok(Next::Done);
        }
        let holds = self.holds(&obj);
        let selected = self.selects(obj.namespace().as_deref(), obj.labels())
            && super::since::takes(
                self.wiring.since,
                obj.metadata.creation_timestamp.as_ref().map(|t| t.0),
            );
        let wanted = self.needs_finalizer() && selected;
        // Never act on missing information: while the Namespace cache cannot
        // be trusted, whether the rule takes the primary is unknown, so its
        // finalizer stays as it is and the reconcile below (blind) says why.
        let unsure = selected && self.namespaces_blind().is_some();
        let wanted = (!unsure).then_some(wanted);
        let going = obj.metadata.deletion_timestamp.is_some();
        match plan::finalizing(holds, wanted, going) {
            plan::Finalizing::TearDown => return self.tear_down(&obj).await,
            plan::Finalizing::Release => return self.hold(&obj, false).await.map(|()| Next::Done),
            plan::Finalizing::Stop => return Ok(Next::Done),
            plan::Finalizing::Set(hold) => self.hold(&obj, hold).await?,
            plan::Finalizing::Keep => {}
        }
        if !selected {
            return Ok(Next::Done);
        }
        let primary = serde_json::to_value(&*obj)
            .map_err(|e| Failure::new(Category::Transient, e.to_string()))?;
        // Converted for templates once, for the watch references and the render.
        let this = to_jinja(&primary);
        // Reading the watches and rendering run on one big stack (template limits).
        let (plan, secrets, decorations) =
            crate::template::limits::render_stack(|| self.decide(key, &obj, primary, &this));
        self.execute(&obj, &plan, &decorations, &secrets).await
    }

    /// Whether the rule holds its finalizer on primaries: it deletes its
    /// children in order, or it has `outside` children (no owner reference
    /// lets the garbage collector delete those; kiln does).
    fn needs_finalizer(&self) -> bool {
        self.rule.ordered_deletion
            || self
                .rule
                .children
                .iter()
                .any(|c| c.outside && c.deletion_policy != crate::rules::DeletionPolicy::Orphan)
    }

    /// Observes and plans; returns the plan and the Secret values it saw
    /// (kept out of every message).
    fn decide(
        &self,
        key: &ObjKey,
        obj: &DynamicObject,
        primary: Value,
        this: &JinjaValue,
    ) -> (Plan, Vec<String>, Result<Decorations, String>) {
        let mut observed = match self.observe(key, obj, primary, this) {
            Ok(observed) => observed,
            // A watch reference that does not render, or points where it
            // may not, fails for this object like any template.
            Err(refusal) => {
                let (reason, message) = match refusal {
                    Refusal::Template(m) => (reasons::TEMPLATE_ERROR, m),
                    Refusal::Namespace(m) => (reasons::NAMESPACE_NOT_ALLOWED, m),
                };
                let plan = Plan::refused(reason, message, obj.metadata.generation);
                return (plan, Vec::new(), Ok(Decorations::default()));
            }
        };
        let known = lock(&self.states)
            .get(key)
            .and_then(|s| s.rare.as_ref().and_then(|r| r.known().cloned()))
            .unwrap_or_default();
        let kinds = &self.shared.kinds;
        let scope_of = |gvk: &Gvk| kinds.namespaced(gvk);
        let plan = match plan::draft(&self.rule, this, &observed, &scope_of) {
            Ok(draft) => {
                let namespaces = &self.shared.options.namespaces;
                if let Some(why) =
                    super::unwatched::unseen(&self.rule, draft.rendered(), namespaces)
                {
                    let generation = obj.metadata.generation;
                    return (
                        Plan::refused(reasons::NAMESPACE_NOT_ALLOWED, why, generation),
                        Vec::new(),
                        Ok(Decorations::default()),
                    );
                }
                observed.occupants = self.occupants(&draft, &observed, obj);
                draft.decide(&self.rule, &observed, &known)
            }
            Err(plan) => *plan,
        };
        let drawn = plan.apply.iter().flat_map(|c| &c.generated);
        let secrets = crate::redact::with_drawn(observed.secrets(&self.rule), drawn);
        // Decorators patch only once the children went through: while the
        // rule waits or fails, what they set stays as it is. A rule with no
        // decorators (left) still takes back what an earlier version set.
        let decorations = match plan.status.outcome {
            Outcome::Applied { .. } => decorate::plan(
                &self.rule,
                &self.shared.options.field_manager,
                || crate::render::context(&self.rule, this, &observed.inputs),
                &observed.inputs,
            )
            .map_err(|e| e.to_string()),
            _ => Ok(Decorations::default()),
        };
        (plan, secrets, decorations)
    }

    /// Who holds, in the cache, each name the draft's children take that
    /// is not this primary's live child (part of the snapshot the
    /// decision reads).
    fn occupants(
        &self,
        draft: &plan::Draft,
        observed: &Observed,
        obj: &DynamicObject,
    ) -> Occupants {
        let uid = obj.uid().unwrap_or_default();
        draft
            .names(&self.rule, observed)
            .filter_map(|(gvk, key)| {
                let found = self.wiring.children.get(gvk)?.get(&key)?;
                let who = stranger(&found, &self.rule.name, &uid)?;
                Some(((gvk.clone(), key), who))
            })
            .collect()
    }

    /// Reads what the plan needs from the caches: related objects (recording
    /// the references in the reverse index) and this rule's live children.
    fn observe(
        &self,
        key: &ObjKey,
        obj: &DynamicObject,
        primary: Value,
        this: &JinjaValue,
    ) -> Result<Observed, Refusal> {
        let mut observed = Observed::default();
        observed.inputs.primary = primary;
        // One instant for all of this reconcile's templates (`now()`).
        observed.inputs.now = Some(crate::template::time::current());
        observed.blind = self.blind();
        if !observed.blind.is_empty() {
            return Ok(observed);
        }
        self.gather_related(key, this, &mut observed)?;
        let (children, mut by_id) = self.live_children(obj);
        observed.children = children;
        for child in &self.rule.children {
            let Some(mut live) = by_id.remove(child.id.as_str()) else {
                continue;
            };
            let value = if child.for_each.is_some() {
                live.sort_by(|a, b| {
                    a["metadata"]["name"]
                        .as_str()
                        .cmp(&b["metadata"]["name"].as_str())
                });
                Value::Array(live)
            } else {
                live.swap_remove(0)
            };
            observed.inputs.observed.insert(child.id.clone(), value);
        }
        Ok(observed)
    }

    /// The rule's live children of `obj`, and the objects of those whose id
    /// and kind the rule has now, by id.
    fn live_children(&self, obj: &DynamicObject) -> (Vec<LiveChild>, BTreeMap<&str, Vec<Value>>) {
        let uid = obj.uid().unwrap_or_default();
        let mut children = Vec::new();
        let mut by_id: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
        for (gvk, informer) in &self.wiring.children {
            for child in informer.owned_by(&uid) {
                // The index finds every object naming the uid; the mark
                // says whether it is this rule's child of this primary.
                let Some(mark) = self.child_of(&child, obj) else {
                    continue;
                };
                let id = mark.child.clone();
                // Every child of the rule is live (a removed id is pruned);
                // templates see those of the ids and kinds the rule has now.
                if let Some(spec) = self
                    .rule
                    .children
                    .iter()
                    .find(|c| c.id == id && &c.gvk == gvk)
                {
                    by_id
                        .entry(spec.id.as_str())
                        .or_default()
                        .push(to_json(&child));
                }
                children.push(LiveChild {
                    id,
                    gvk: gvk.clone(),
                    key: ObjKey::of(&child),
                    uid: child.uid(),
                    deleting: child.metadata.deletion_timestamp.is_some(),
                    orphan: mark.orphaned(),
                });
            }
        }
        (children, by_id)
    }

    /// The mark of `child` when it is this rule's child of `primary`:
    /// marked so, and where kiln put it (`placed::believed`).
    fn child_of(
        &self,
        child: &DynamicObject,
        primary: &DynamicObject,
    ) -> Option<crate::ownership::Mark> {
        let uid = primary.metadata.uid.as_deref().unwrap_or_default();
        let mark =
            crate::ownership::read(&child.metadata).filter(|m| m.of(&self.rule.name, uid))?;
        let identity = super::placed::identity(&primary.metadata);
        super::placed::believed(&self.rule, &mark, &ObjKey::of(child), &identity).then_some(mark)
    }

    /// Keeps (`hold`) or lets go of this rule's ordered-deletion finalizer on
    /// the primary, with a field manager of the rule's own: other rules'
    /// and other controllers' finalizers are never touched.
    async fn hold(&self, obj: &DynamicObject, hold: bool) -> Result<(), Failure> {
        let permit = self.fence(obj)?;
        let gvk = &self.rule.primary.gvk;
        let key = ObjKey::of(obj);
        let finalizers: Vec<String> = if hold {
            vec![plan::finalizer(&self.rule.name)]
        } else {
            Vec::new()
        };
        let mut fields = serde_json::Map::new();
        fields.insert("metadata".into(), json!({ "finalizers": finalizers }));
        // With the primary's uid: a primary deleted meanwhile is never
        // created again by this apply (a Conflict, taken as gone).
        let uid = obj.metadata.uid.as_deref();
        let patch = decorate::apply_body(gvk, key.namespace.as_deref(), &key.name, uid, &fields);
        let manager = format!("kiln-finalizer-{}", self.rule.name);
        let api = self.api(self.wiring.primary.kind(), key.namespace.as_deref());
        let pp = PatchParams::apply(&manager).force();
        match fenced(
            permit.as_ref(),
            api.patch(&key.name, &pp, &Patch::Apply(&patch)),
        )
        .await?
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.message.contains("uid mismatch") => {
                Ok(())
            }
            Err(e) => Err(Failure::of(&e, "updating the primary's finalizer", true)),
        }
    }

    /// Whether the primary carries this rule's ordered-deletion finalizer.
    fn holds(&self, obj: &DynamicObject) -> bool {
        let finalizer = plan::finalizer(&self.rule.name);
        obj.finalizers().contains(&finalizer)
    }

    /// One step of deleting a primary's children in reverse dependency
    /// order: the children nothing live waits for are deleted; once none is
    /// left, the finalizer goes and the primary with it.
    async fn tear_down(&self, obj: &DynamicObject) -> Result<Next, Failure> {
        // Never act on missing information: a child a blind cache lacks may exist.
        if !self.blind().is_empty() {
            return Ok(Next::After(self.rule.requeue.waiting));
        }
        let (live, _) = self.live_children(obj);
        // Orphaned children stay: they never hold the primary back.
        if live.iter().all(|c| plan::orphaned(&self.rule, c)) {
            self.hold(obj, false).await?;
            return Ok(Next::Done);
        }
        for prune in plan::teardown(&self.rule, &live) {
            self.prune(obj, &prune).await?;
        }
        Ok(Next::After(self.rule.requeue.waiting))
    }

    /// Lets go of the finalizer on every primary holding it (the rule is
    /// removed: nobody would remove it otherwise).
    pub async fn release(&self) {
        for obj in self.wiring.primary.list() {
            if self.holds(&obj)
                && let Err(failure) = self.hold(&obj, false).await
            {
                tracing::warn!(rule = %self.rule.name, object = %ObjKey::of(&obj), error = %failure, "could not remove the finalizer of a removed rule");
            }
        }
    }

    /// The caches of related and child kinds (and of Namespaces, when the
    /// rule selects primaries by theirs) that cannot be trusted now.
    fn blind(&self) -> Vec<Blind> {
        let mut blind: Vec<Blind> = Vec::new();
        let informers = self
            .wiring
            .related
            .values()
            .chain(self.wiring.children.values())
            .chain(&self.wiring.namespaces);
        for b in informers.filter_map(|i| blindness(i)) {
            if !blind.contains(&b) {
                blind.push(b);
            }
        }
        blind
    }

    /// Why the Namespace cache `spec.for.namespaceSelector` reads cannot be
    /// trusted now, if it cannot.
    fn namespaces_blind(&self) -> Option<Blind> {
        self.wiring.namespaces.as_deref().and_then(blindness)
    }

    /// Renders each watch's reference, records it in the reverse index and
    /// reads the related objects from the cache, noting required ones missing.
    fn gather_related(
        &self,
        key: &ObjKey,
        this: &JinjaValue,
        observed: &mut Observed,
    ) -> Result<(), Refusal> {
        let ctx = render::context(&self.rule, this, &observed.inputs);
        let set = &self.rule.templates;
        let mut budget = Budget::default();
        let mut refs = Vec::new();
        let mut selectors = Vec::new();
        for watch in &self.rule.watches {
            let Some(informer) = self.wiring.related.get(&watch.name) else {
                continue;
            };
            let mut text = |piece: &crate::template::Piece| {
                piece
                    .render_string(set, &ctx, &mut budget)
                    .map_err(|e| Refusal::Template(e.to_string()))
            };
            let target = related::target(watch, informer.kind().namespaced, key, &mut text)?;
            let found = match &target {
                Target::Named(key) => {
                    refs.push((watch.name.clone(), key.clone()));
                    Found::Named(informer.get(key).map(|o| to_json(&o)))
                }
                Target::Selected {
                    namespace,
                    all_namespaces,
                    selector,
                } => {
                    selectors.push(SelectorRef {
                        watch: watch.name.clone(),
                        namespace: namespace.clone(),
                        all_namespaces: *all_namespaces,
                        selector: selector.clone(),
                    });
                    Found::Selected(matching(
                        informer,
                        namespace.as_deref(),
                        *all_namespaces,
                        selector,
                    ))
                }
            };
            let (value, missing) = related::seen(watch, &target, found);
            observed.missing.extend(missing);
            if let Some(value) = value {
                observed.inputs.related.insert(watch.name.clone(), value);
            }
        }
        lock(&self.reverse).set(key, refs, selectors);
        Ok(())
    }

    /// Performs a plan: applies, then prunes (only once every apply
    /// succeeded), then the status; Events for what changed.
    /// `secrets` are kept out of every message it writes.
    async fn execute(
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
    async fn decorate(
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
            match fenced(permit.as_ref(), decorate::send(&api, d)).await? {
                // Gone meanwhile: nothing to decorate, nothing created.
                Ok(decorate::Sent::Applied | decorate::Sent::Gone) => {}
                Err(e) => return Err(Failure::of(&e, &what, d.force)),
            }
        }
        Ok(())
    }

    /// Records the related objects the primary decorates (claims.rs): one
    /// another primary of the rule decorates too is a conflict, reported on
    /// both, and decorated for neither.
    fn claim(
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

    /// Spends the write budget of the primary on the plan's applies and the
    /// decorations (budget.rs: only writes repeating what kiln last wrote
    /// count), or says why its writes are paused (a fight with another
    /// field manager).
    async fn over_budget(
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
        let (what, other) = match writes[first].1 {
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
        };
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
    async fn last_other_manager(
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
    async fn failed(
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
    fn count_failure(&self, reason: &str) {
        let labels = metrics::labels2(("rule", &self.rule.name), ("reason", reason));
        self.shared
            .metrics
            .reconcile_failures
            .get_or_create(&labels)
            .inc();
    }

    /// Refuses every write once this replica may no longer make one (its
    /// lease is not known to be held right now; sharded: or the primary is
    /// not in its share any more). Hold the permit until the write returns:
    /// the share is not handed over while a write is in flight.
    fn fence(&self, primary: &DynamicObject) -> Result<Option<crate::shard::Permit>, Failure> {
        self.fence_uid(primary.metadata.uid.as_deref().unwrap_or_default())
    }

    /// [`fence`](Self::fence) for the primary with this uid.
    fn fence_uid(&self, primary_uid: &str) -> Result<Option<crate::shard::Permit>, Failure> {
        if !self.shared.may_write() {
            return Err(Failure::new(Category::LeaseLost, "the lease is not held"));
        }
        let Some(scope) = &self.shared.shard else {
            return Ok(None);
        };
        scope.shard().permit(primary_uid).map(Some).ok_or_else(|| {
            Failure::new(
                Category::LeaseLost,
                "this replica's shard Lease or this primary's bucket is not held",
            )
        })
    }

    /// Gives a created-once child the ownership its `deletionPolicy` says
    /// (`reown.rs`): read again, then a merge patch of its owner
    /// references and kiln's annotations only, conditioned on the
    /// `resourceVersion` read (a concurrent change is a conflict, retried).
    async fn reown(&self, obj: &DynamicObject, reown: &Reown) -> Result<(), Failure> {
        let Some(informer) = self.wiring.children.get(&reown.gvk) else {
            return Ok(());
        };
        let permit = self.fence(obj)?;
        let api = self.api(informer.kind(), reown.key.namespace.as_deref());
        let what = format!("{} {} {}", reown.to.describe(), reown.gvk.kind, reown.key);
        let live = match fenced(permit.as_ref(), api.get(&reown.key.name)).await? {
            Ok(live) => to_json(&live),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(Failure::of(&e, &what, false)),
        };
        // Another object by that name now: it is not this child.
        if live["metadata"]["uid"].as_str() != reown.uid.as_deref() {
            return Ok(());
        }
        let Some(patch) = reown::patch(&live, &reown.to) else {
            return Ok(());
        };
        let pp = PatchParams {
            field_manager: Some(self.shared.options.field_manager.clone()),
            ..PatchParams::default()
        };
        self.shared.metrics.wrote(&self.rule.name, "patch");
        let patch = Patch::Merge(&patch);
        let patching = api.patch(&reown.key.name, &pp, &patch);
        match fenced(permit.as_ref(), patching).await? {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(Failure::of(&e, &what, false)),
        }
    }

    /// Sends one of the plan's merge patches (touch.rs) to the object as
    /// read now, if it still needs it.
    async fn touch(&self, obj: &DynamicObject, touch: &Touch) -> Result<(), Failure> {
        let (informer, namespace, name, uid) = match touch {
            Touch::Remember { .. } => (
                Some(&self.wiring.primary),
                obj.namespace(),
                obj.name_any(),
                obj.uid(),
            ),
            Touch::Strip { gvk, key, uid, .. } => (
                self.wiring.children.get(gvk),
                key.namespace.clone(),
                key.name.clone(),
                uid.clone(),
            ),
        };
        let Some(informer) = informer else {
            return Ok(());
        };
        let permit = self.fence(obj)?;
        let api = self.api(informer.kind(), namespace.as_deref());
        let what = touch.describe();
        let live = match fenced(permit.as_ref(), api.get(&name)).await? {
            Ok(live) => to_json(&live),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(Failure::of(&e, &what, false)),
        };
        let Some(patch) = touch
            .patch(&live)
            .filter(|_| live["metadata"]["uid"].as_str() == uid.as_deref())
        else {
            return Ok(());
        };
        let pp = PatchParams {
            field_manager: Some(self.shared.options.field_manager.clone()),
            ..PatchParams::default()
        };
        self.shared.metrics.wrote(&self.rule.name, "patch");
        match fenced(
            permit.as_ref(),
            api.patch(&name, &pp, &Patch::Merge(&patch)),
        )
        .await?
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(Failure::of(&e, &what, false)),
        }
    }

    /// Server-side applies one child, and remembers how the server stored it.
    async fn apply(&self, obj: &DynamicObject, child: &DesiredChild) -> Result<(), Failure> {
        let Some(informer) = self.wiring.children.get(&child.gvk) else {
            return Ok(());
        };
        let permit = self.fence(obj)?;
        let pp = PatchParams::apply(&self.shared.options.field_manager);
        let pp = if self.rule.force_conflicts {
            pp.force()
        } else {
            pp
        };
        let ckey = plan::key_of(child);
        let api = self.api(informer.kind(), ckey.namespace.as_deref());
        // A sharded cache holds only kiln's children of this replica's
        // share: an object it left out under this name (another replica's,
        // or one kiln's labels were copied onto) is looked up before
        // anything is written over it.
        let unseen = self.shared.shard.is_some()
            && informer.entry(&ckey).is_none()
            && informer.may_hold_unseen(&ckey);
        if unseen {
            self.shared.looking_up();
        }
        if !child.generated.is_empty() || unseen {
            fenced(permit.as_ref(), self.absent(&api, child, &ckey)).await??;
        }
        self.shared.metrics.wrote(&self.rule.name, "apply");
        let patch = Patch::Apply(&child.object);
        let applying = api.patch(&ckey.name, &pp, &patch);
        let applied = fenced(permit.as_ref(), applying).await?.map_err(|e| {
            let what = format!("applying {} {ckey}", child.gvk.kind);
            Failure::of(&e, &what, self.rule.force_conflicts)
        });
        let result = applied
            .as_ref()
            .map_or_else(|f| f.category.label(), |_| "success");
        let labels = metrics::labels2(("rule", &self.rule.name), ("result", result));
        self.shared.metrics.apply_total.get_or_create(&labels).inc();
        let mut stored = to_json(&applied?);
        // Compared later with the cached child: cut as the cache cuts it, so
        // a leaf stored whole (a list the server lengthened) is compared
        // with what the cache holds of it.
        if let Some(informer) = self.wiring.children.get(&child.gvk) {
            informer.project(&mut stored);
        }
        let normalized = diff::normalized(&child.object, &stored);
        let mut states = lock(&self.states);
        let state = states.entry(ObjKey::of(obj)).or_default();
        let key = (child.gvk.clone(), ckey);
        match normalized {
            Some(n) => {
                state.rare().rarer().known.insert(key, n);
            }
            None => {
                if let Some(rarer) = state.rare.as_mut().and_then(|r| r.rarer.as_mut()) {
                    rarer.known.remove(&key);
                }
            }
        }
        Ok(())
    }

    /// Checks with the API server, not the cache, that a child holding
    /// freshly drawn values does not exist: a cache that has not seen the
    /// child yet (its create is still on its way back through the watch),
    /// or an object an `adopt` child would take over, must not make kiln
    /// overwrite the value it keeps.
    async fn absent(
        &self,
        api: &Api<DynamicObject>,
        child: &DesiredChild,
        ckey: &ObjKey,
    ) -> Result<(), Failure> {
        let what = format!("reading {} {ckey}", child.gvk.kind);
        let found = api
            .get_metadata_opt(&ckey.name)
            .await
            .map_err(|e| Failure::of(&e, &what, self.rule.force_conflicts))?;
        match found {
            None => Ok(()),
            Some(_) => Err(Failure::new(
                Category::Transient,
                format!(
                    "{} {ckey} exists, but not as this primary's child in kiln's cache (not seen yet, or not kiln's): a value drawn now would replace the one it keeps, so nothing is written; retrying",
                    child.gvk.kind
                ),
            )),
        }
    }

    /// Deletes a child the rule no longer renders (that very object: its uid).
    async fn prune(&self, obj: &DynamicObject, prune: &Prune) -> Result<(), Failure> {
        let Some(informer) = self.wiring.children.get(&prune.gvk) else {
            return Ok(());
        };
        let permit = self.fence(obj)?;
        let api = self.api(informer.kind(), prune.key.namespace.as_deref());
        let dp = DeleteParams {
            preconditions: prune.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        self.shared.metrics.wrote(&self.rule.name, "delete");
        let (kind, ckey) = (&prune.gvk.kind, &prune.key);
        let deleted = fenced(permit.as_ref(), api.delete(&ckey.name, &dp)).await?;
        // The Event is no write for the primary's bucket: its release does
        // not wait for it.
        drop(permit);
        match deleted {
            Ok(_) => {
                tracing::info!(rule = %self.rule.name, child = %ckey, kind = %prune.gvk, "pruned");
                let message = format!("deleted {kind} {ckey}: no longer rendered");
                self.publish(obj, EventType::Normal, "Pruned", &message)
                    .await;
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(Failure::of(&e, &format!("pruning {kind} {ckey}"), true)),
        }
    }

    /// Writes the primary's status, composed from every rule selecting it,
    /// when it differs from the live one (and the kind has one kiln writes).
    async fn write_status(&self, obj: &DynamicObject, part: &Part) -> Result<(), Failure> {
        let kind = self.wiring.primary.kind();
        if self.rule.read_only {
            return Ok(());
        }
        if !writes_status(kind) {
            let uid = obj.metadata.uid.as_deref().unwrap_or_default();
            if kind.gvk.is_custom() && self.shared.no_status.first(&self.rule.name, uid) {
                let message = super::no_status::message(&kind.gvk.kind);
                self.publish(obj, EventType::Warning, super::no_status::REASON, &message)
                    .await;
            }
            return Ok(());
        }
        let gvk = &self.rule.primary.gvk;
        let namespaces = self
            .shared
            .informers
            .running(&crate::rules::namespace_gvk());
        let rules: Vec<Arc<Rule>> = self
            .shared
            .board
            .selecting(gvk, obj)
            .into_iter()
            .filter(|r| !r.read_only)
            .filter(|r| {
                namespace_takes(
                    &r.primary,
                    obj.namespace().as_deref(),
                    namespaces.as_deref(),
                )
            })
            .collect();
        if rules.len() <= 1 {
            let (fields, conditions) = status_names(&self.rule);
            let me = Contributor {
                rule: &self.rule.name,
                fields: &fields,
                conditions: &conditions,
                part: Some(part),
            };
            return self.patch_status(obj, &[me]).await;
        }
        // Rules sharing an object write its status one at a time, each
        // composing every rule's latest part.
        let key = ObjKey::of(obj);
        let writer = self.shared.board.writer(gvk, &key);
        let _turn = writer.lock().await;
        let parts = self.shared.board.put(gvk, &key, &self.rule.name, part);
        let names: Vec<_> = rules.iter().map(|r| status_names(r)).collect();
        let contributors: Vec<Contributor<'_>> = rules
            .iter()
            .zip(&names)
            .map(|(r, (fields, conditions))| Contributor {
                rule: &r.name,
                fields,
                conditions,
                part: parts.get(&r.name),
            })
            .collect();
        self.patch_status(obj, &contributors).await
    }

    /// Applies the status composed from `contributors` unless the object shows it already.
    async fn patch_status(
        &self,
        obj: &DynamicObject,
        contributors: &[Contributor<'_>],
    ) -> Result<(), Failure> {
        let live = obj.data.get("status").cloned().unwrap_or(Value::Null);
        let now = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let owned = owned_status::owned(&obj.metadata, &self.shared.options.field_manager);
        let list = placing::stored(self.wiring.status.conditions_list(), &owned);
        let composed = self.wiring.status.writable(status::compose(
            contributors,
            &live,
            &now,
            obj.metadata.generation,
        ));
        let theirs = placing::theirs(&live, &owned, list);
        let desired = placing::place(composed, &live, list, &theirs);
        self.shared
            .ready
            .record(&self.rule.name, &ObjKey::of(obj), &desired);
        if status::converged(&live, &desired, &owned) {
            return Ok(());
        }
        let permit = self.fence(obj)?;
        let key = ObjKey::of(obj);
        let patch = serde_json::json!({
            "apiVersion": self.rule.primary.gvk.api_version(),
            "kind": self.rule.primary.gvk.kind,
            "metadata": { "name": key.name },
            "status": desired,
        });
        let api = self.api(self.wiring.primary.kind(), key.namespace.as_deref());
        self.shared.metrics.wrote(&self.rule.name, "status");
        let pp = PatchParams::apply(&self.shared.options.field_manager).force();
        let patch = Patch::Apply(&patch);
        let writing = api.patch_status(&key.name, &pp, &patch);
        match fenced(permit.as_ref(), writing).await? {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()), // deleted meanwhile
            Err(e) => Err(Failure::of(&e, "writing status", true).in_status()),
        }
    }

    fn api(&self, kind: &Kind, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) if kind.namespaced => {
                Api::namespaced_with(self.shared.client.clone(), ns, &kind.ar)
            }
            _ => Api::all_with(self.shared.client.clone(), &kind.ar),
        }
    }

    /// Publishes an Event once per distinct reason and message.
    async fn report(&self, obj: &DynamicObject, kind: EventType, reason: &str, message: &str) {
        let said = Some(format!("{reason}: {message}").into_boxed_str());
        {
            let mut states = lock(&self.states);
            let state = states.entry(ObjKey::of(obj)).or_default();
            if state.reported == said {
                return;
            }
            state.reported = said;
        }
        self.publish(obj, kind, reason, message).await;
    }

    async fn publish(&self, obj: &DynamicObject, kind: EventType, reason: &str, message: &str) {
        if !self
            .shared
            .owns(obj.metadata.uid.as_deref().unwrap_or_default())
        {
            return;
        }
        let reference = obj.object_ref(&self.wiring.primary.kind().ar);
        let event = KubeEvent {
            type_: kind,
            reason: reason.to_string(),
            note: Some(event_note(message)),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        let (recorder, client) = (&self.shared.recorder, &self.shared.client);
        if let Err(error) = super::events::publish(recorder, client, &event, &reference).await {
            tracing::warn!(rule = %self.rule.name, %error, "could not publish an Event");
        }
    }
}

/// A write a reconcile is about to make.
enum Written<'a> {
    Child(&'a DesiredChild),
    Decoration(&'a decorate::Decoration),
    /// Keys removed under a child's `replace` fields (replace.rs).
    Strip(&'a Gvk, &'a ObjKey),
}

/// Every write of a plan and its decorations, fingerprinted for the budget.
fn planned_writes<'a>(
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

fn handler(weak: &Weak<RuleController>, f: fn(&RuleController, &Change<'_>)) -> Handler {
    let weak = weak.clone();
    Arc::new(move |change: &Change<'_>| {
        if let Some(this) = weak.upgrade() {
            f(&this, change);
        }
    })
}

/// Why a cache cannot be trusted now (an object it lacks may exist), if it cannot.
fn blindness(informer: &Informer) -> Option<Blind> {
    let kind = informer.kind().gvk.kind.clone();
    if informer.is_forbidden() {
        Some(Blind::Forbidden(kind))
    } else if !informer.is_synced() {
        Some(Blind::Unsynced(kind))
    } else {
        None
    }
}

/// Whether `spec.for.namespaceSelector` (if any) takes `obj`, by the labels
/// of its Namespace in `namespaces` (the shared Namespace cache). A
/// Namespace not in a synced cache takes nothing; its arrival queues the
/// object again. A cache that cannot be trusted (forbidden, not synced)
/// takes everything: the reconcile then waits, saying why, and changes
/// nothing (never "not selected" on missing information).
fn namespace_takes(
    primary: &crate::rules::Primary,
    namespace: Option<&str>,
    namespaces: Option<&Informer>,
) -> bool {
    if primary.namespace_selector.is_none() {
        return true;
    }
    let (Some(namespaces), Some(ns)) = (namespaces, namespace) else {
        return false;
    };
    if blindness(namespaces).is_some() {
        return true;
    }
    let found = namespaces.entry(&ObjKey {
        namespace: None,
        name: ns.to_string(),
    });
    let labels = found.as_ref().map(|n| n.labels());
    primary
        .namespace_refusal(ns, labels.as_ref().map(|l| l as &dyn LabelSource))
        .is_none()
}

/// Who holds a child's name in the cache, unless it is this rule's own
/// child of this primary. The live children are read before the render,
/// the names' holders after it: a child whose create came back through the
/// watch in between is no stranger (a false "already exists" on kiln's own
/// RoleBinding, seen at the demo's start).
fn stranger(found: &DynamicObject, rule: &str, primary_uid: &str) -> Option<String> {
    crate::ownership::holder(&found.metadata, rule, primary_uid)
}

/// The rule's status field names and condition types.
fn status_names(rule: &Rule) -> (Vec<&str>, Vec<&str>) {
    (
        rule.status_fields.iter().map(|(n, _)| n.as_str()).collect(),
        rule.conditions.iter().map(|c| c.type_.as_str()).collect(),
    )
}

/// The cached objects in `namespace` (or in every namespace, with `all`)
/// that `selector` matches, by name (then namespace).
fn matching(
    informer: &Informer,
    namespace: Option<&str>,
    all: bool,
    selector: &LabelSelector,
) -> Vec<Value> {
    informer
        .entries()
        .into_iter()
        .filter(|o| (all || o.namespace() == namespace) && selector.matches(&o.labels()))
        .map(|o| to_json(&o.decode()))
        .collect()
}

fn to_json(obj: &DynamicObject) -> Value {
    serde_json::to_value(obj).unwrap_or(Value::Null)
}

/// An Event's note: the API takes at most 1024 bytes, so longer messages
/// are cut at a character boundary.
fn event_note(message: &str) -> String {
    const MAX: usize = 1024;
    if message.len() <= MAX {
        return message.to_string();
    }
    let mut end = MAX - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// Whether kiln writes conditions to this kind's status: custom resources
/// with a status subresource. Built-in kinds have typed statuses of their own.
pub(super) fn writes_status(kind: &Kind) -> bool {
    kind.has_status && kind.gvk.is_custom()
}

/// A hash of everything but status and bookkeeping metadata.
fn fingerprint(obj: &DynamicObject) -> u64 {
    let mut value = serde_json::to_value(obj).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.remove("status");
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
            meta.remove("managedFields");
        }
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    hasher.finish()
}

/// Whether a reconcile stops before it starts, by whose the primary is
/// (sharded): another replica's is done (that replica reconciles it); one
/// of this replica's buckets while its Lease is late is looked at again
/// shortly, never dropped: nothing else queues it once the Lease is renewed.
fn not_mine(whose: Whose) -> Option<Next> {
    match whose {
        Whose::Mine => None,
        Whose::Others => Some(Next::Done),
        Whose::Unsure => Some(Next::After(crate::shard::UNSURE_RETRY)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::RULE_LABEL;

    #[test]
    fn a_child_cached_since_the_children_were_read_is_no_stranger() {
        let child = |rule: &str, owner: Value, labels: Value| -> DynamicObject {
            let mut all = json!({ RULE_LABEL: rule });
            all.as_object_mut()
                .unwrap()
                .extend(labels.as_object().cloned().unwrap_or_default());
            serde_json::from_value(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "tenant-admins", "namespace": "team-blue",
                    "labels": all, "ownerReferences": owner},
            }))
            .unwrap()
        };
        let owner = |uid: &str| {
            json!([{"apiVersion": "v1", "kind": "Namespace", "name": "team-blue",
                "uid": uid, "controller": true}])
        };
        // kiln's own, by owner reference or (outside children) by label.
        let own = child("tenant", owner("u1"), json!({}));
        assert_eq!(stranger(&own, "tenant", "u1"), None);
        let outside = child("tenant", json!([]), json!({render::OWNER_UID_LABEL: "u1"}));
        assert_eq!(stranger(&outside, "tenant", "u1"), None);
        // Another primary's, another rule's, or nobody's: a stranger.
        assert_eq!(
            stranger(&own, "tenant", "u2").as_deref(),
            Some("controlled by Namespace team-blue")
        );
        assert!(stranger(&own, "other", "u1").is_some());
        let mut foreign = own.clone();
        foreign.metadata.labels = None;
        assert!(stranger(&foreign, "tenant", "u1").is_some());
    }

    #[test]
    fn a_primary_of_a_held_bucket_is_never_dropped_while_the_lease_is_late() {
        // Issue 17: a reconcile (the resync after a take-over, or any event)
        // that ran while the renew was late was done for good, and the
        // primary was never reconciled after the renew.
        assert_eq!(
            not_mine(Whose::Unsure),
            Some(Next::After(crate::shard::UNSURE_RETRY))
        );
        assert_eq!(not_mine(Whose::Others), Some(Next::Done));
        assert_eq!(not_mine(Whose::Mine), None);
    }

    #[test]
    fn a_status_that_keeps_failing_never_raises_the_childrens_retry_count() {
        let mut state = PrimaryState::default();
        let status: Vec<u32> = (0..6).map(|_| state.failed(Stage::Status)).collect();
        assert_eq!(status, [0, 1, 2, 3, 4, 5]);
        // A child fails now: it starts from the first step of its backoff.
        assert_eq!(state.failed(Stage::Children), 0);
        assert_eq!(state.failed(Stage::Children), 1);
        // The status fails again (its children went through): its own count
        // goes on, the children's starts again.
        assert_eq!(state.failed(Stage::Status), 6);
        assert_eq!(state.failed(Stage::Children), 0);
        state.succeeded(std::time::Instant::now());
        assert_eq!(state.failed(Stage::Status), 0);
    }

    #[test]
    fn a_primary_state_is_small() {
        assert!(std::mem::size_of::<PrimaryState>() <= 48);
        // What every primary that wrote within the window holds: jemalloc's
        // 48-byte class (128 with the normalised children and the pause in it).
        assert!(std::mem::size_of::<Rare>() <= 48);
    }

    fn write() -> budget::Write {
        budget::Write::of("ConfigMap w", &json!({"data": {}}))
    }

    #[test]
    fn normalised_children_and_a_pause_are_freed_apart_from_the_window() {
        use std::time::{Duration, Instant};
        let start = Instant::now();
        let mut state = PrimaryState::default();
        let rare = state.rare();
        assert_eq!(rare.window.spend(start, &[write()]), Ok(()));
        rare.rarer().paused = Some((start + Duration::from_secs(5), "fight".into()));
        state.succeeded(start + Duration::from_secs(5));
        let rare = state.rare.as_ref().unwrap();
        assert!(rare.rarer.is_none(), "the ended pause is dropped");
        assert!(!rare.window.is_empty(), "the window's apply is kept");
        assert!(rare.paused().is_none());
    }

    #[test]
    fn the_rarely_used_state_is_freed_once_expired_and_kept_while_in_use() {
        use std::time::{Duration, Instant};
        let start = Instant::now();
        let mut state = PrimaryState::default();
        assert_eq!(state.rare().window.spend(start, &[write()]), Ok(()));
        state.succeeded(start + Duration::from_secs(1));
        assert!(state.rare.is_some(), "an apply within the window is kept");
        state.succeeded(start + budget::WINDOW + Duration::from_secs(1));
        assert!(state.rare.is_none(), "freed once the window is over");

        state.rare().rarer().paused = Some((start + Duration::from_secs(30), "fight".into()));
        state.succeeded(start);
        assert!(state.rare.is_some(), "a pause in force is kept");
        state.succeeded(start + Duration::from_secs(30));
        assert!(state.rare.is_none(), "an ended pause is dropped");
    }

    #[test]
    fn event_notes_fit_the_api_limit_in_bytes_even_with_multi_byte_text() {
        let long = "é".repeat(900); // 1800 bytes
        let note = event_note(&long);
        assert!(note.len() <= 1024, "{}", note.len());
        assert!(note.ends_with('…'));
        assert_eq!(event_note("short"), "short");
    }
}
