//! One rule, running: the handlers that turn cache changes into queued
//! primaries, the workers, and the executor of each reconcile's plan.
//!
//! ```text
//! primary / child / related change ─▶ queue (key = primary) ─▶ worker ─▶ reconcile
//! reconcile: observe (cache reads) ─▶ plan (pure, plan.rs) ─▶ apply ─▶ prune ─▶ status ─▶ next
//! ```

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, Weak};

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::{Api, Resource, ResourceExt};
use minijinja::Value as JinjaValue;
use serde_json::{Value, json};
use tracing::Instrument;

use super::queue::Queue;
use super::shared::Shared;
use super::unwatched;

mod execute;
mod finalizer;
mod handlers;
mod hook;
mod observe;
mod state;
mod told;
mod writes;

use crate::engine::backoff;
use crate::engine::cache::informer::{Change, Handler, Informer};
use crate::engine::cache::kinds::Kind;
use crate::engine::cache::owned_status;
use crate::engine::cache::reverse::{Reverse, SelectorRef};
use crate::engine::decision::budget;
use crate::engine::decision::claims::Claims;
use crate::engine::decision::decorate::{self, Decorations};
use crate::engine::decision::deletion::{self, Finalizing};
use crate::engine::decision::diff;
use crate::engine::decision::failure::{Category, Failure, Stage};
use crate::engine::decision::placed;
use crate::engine::decision::placing;
pub(super) use crate::engine::decision::plan::Next;
use crate::engine::decision::plan::{self, Blind, Known, LiveChild, Plan, Prune};
use crate::engine::decision::related::{Found, Target};
use crate::engine::decision::reown::{self, Reown};
use crate::engine::decision::schema::{StatusSchema, StatusWrites};
use crate::engine::decision::status::{self, Contributor, Part};
use crate::engine::decision::touch::Touch;
use crate::engine::key::ObjKey;
use crate::metrics;
use crate::render::{self, DesiredChild};
use crate::rules::{Gvk, LabelSelector, LabelSource, Rule};
use crate::shard::Whose;
use crate::template::to_jinja;
use handlers::{handler, matching, namespace_takes};
use observe::{blindness, status_names};
use state::PrimaryState;
use writes::fingerprint;

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
    /// Whether kiln writes the primary's status at all.
    pub writes_status: StatusWrites,
    /// Namespaces, when the rule selects primaries by their namespace's labels.
    pub namespaces: Option<Arc<Informer>>,
    /// The rule is refused (its status does not fit the primary's schema):
    /// it only tears down the primaries being deleted, as deleting
    /// children and letting go of its finalizer needs no status.
    pub refused: bool,
    /// Only primaries created after this are taken (`takeExisting: false`).
    pub since: Option<crate::engine::decision::existing::Since>,
    /// Child kinds not served: their children wait (the rule starts over
    /// once one is served).
    pub unserved: Vec<Gvk>,
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
    /// Per primary, per rule Event: what was last told (`told.rs`).
    told: Mutex<HashMap<ObjKey, Vec<Option<u64>>>>,
    /// When each primary's hook was last asked (rules with hooks only).
    asked: Mutex<HashMap<ObjKey, std::time::Instant>>,
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
            shared.board.register(&rule, wiring.since.clone());
        }
        let this = Arc::new(Self {
            rule,
            shared,
            wiring,
            queue: Queue::default(),
            reverse: Mutex::default(),
            states: Mutex::default(),
            claims: Mutex::default(),
            told: Mutex::default(),
            subscriptions: Mutex::default(),
            asked: Mutex::default(),
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
        if crate::engine::decision::suspend::suspended_meta(&obj.metadata) {
            let message = crate::engine::decision::suspend::message();
            let reason = crate::engine::decision::suspend::REASON;
            self.report(&obj, EventType::Normal, reason, &message).await;
            return Ok(Next::Done);
        }
        let holds = self.holds(&obj);
        let selected = self.selects(obj.namespace().as_deref(), obj.labels())
            && crate::engine::decision::existing::takes(
                self.wiring.since.as_ref(),
                obj.metadata.creation_timestamp.as_ref().map(|t| t.0),
                obj.metadata.uid.as_deref().unwrap_or_default(),
            );
        let wanted = deletion::needed(&self.rule) && selected;
        // Never act on missing information: while the Namespace cache cannot
        // be trusted, whether the rule takes the primary is unknown, so its
        // finalizer stays as it is and the reconcile below (blind) says why.
        let unsure = selected && self.namespaces_blind().is_some();
        let wanted = (!unsure).then_some(wanted);
        let going = obj.metadata.deletion_timestamp.is_some();
        match deletion::finalizing(holds, wanted, going) {
            Finalizing::TearDown => return self.finalize(key, &obj).await,
            Finalizing::Release => return self.hold(&obj, false).await.map(|()| Next::Done),
            Finalizing::Stop => return Ok(Next::Done),
            Finalizing::Set(hold) => self.hold(&obj, hold).await?,
            Finalizing::Keep => {}
        }
        if !selected {
            return Ok(Next::Done);
        }
        self.sync(key, &obj).await.map(|(next, _)| next)
    }

    /// Observes, asks the rule's hook, plans and carries the plan out;
    /// with whether the finalize hook answered `finalized: true`.
    async fn sync(&self, key: &ObjKey, obj: &DynamicObject) -> Result<(Next, bool), Failure> {
        if let Some(wait) = self.too_soon(key) {
            return Ok((Next::After(wait), false));
        }
        let primary = serde_json::to_value(obj)
            .map_err(|e| Failure::new(Category::Transient, e.to_string()))?;
        // Converted for templates once, for the watch references and the render.
        let this = to_jinja(&primary);
        // The external sources first: their requests render from the
        // primary alone, and their answers are shared (a cache per source).
        let asked = crate::template::limits::render_stack(|| {
            crate::external::asked::all(&self.rule, &this)
        });
        let answers = self.shared.external.answers(&self.rule, asked).await;
        let called = self.call_hook(obj, &primary, &this).await;
        // Reading the watches and rendering run on one big stack (template limits).
        let decided = crate::template::limits::render_stack(|| {
            self.decide(key, obj, primary, &this, called, answers)
        })?;
        let observe::Decided {
            plan,
            secrets,
            decorations,
        } = decided;
        let next = self.execute(obj, &plan, &decorations, &secrets).await?;
        Ok((next, plan.finalized))
    }
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
    use super::observe::stranger;
    use super::state::Rare;
    use super::writes::event_note;
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
        // A reconcile (the resync after a take-over, or any event) that runs
        // while the renew is late is put off, not done for good: the primary
        // is reconciled after the renew.
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
