//! One rule, running: the handlers that turn cache changes into queued
//! primaries, the workers, and the reconcile of one primary.
//!
//! ```text
//! primary / child / related change ─▶ queue (key = primary) ─▶ worker ─▶ reconcile
//! reconcile: cache reads ─▶ render (pure) ─▶ apply what differs ─▶ prune ─▶ status ─▶ next
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event as KubeEvent, EventType};
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;
use tracing::Instrument;

use super::Shared;
use super::backoff::{self, Failures};
use super::diff::satisfied;
use super::informer::{Change, Handler, Informer, ObjKey};
use super::kinds::Kind;
use super::queue::Queue;
use super::reverse::{Reverse, SelectorRef};
use super::status::{self, Outcome, reasons};
use crate::metrics;
use crate::render::{self, CHILD_LABEL, Inputs, RULE_LABEL};
use crate::rules::{Gvk, LabelSelector, Rule, WatchTarget};
use crate::template::Budget;

/// What to do with a primary after a reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing until something changes.
    Done,
    /// Reconcile again after this long.
    After(Duration),
}

/// A reconcile that failed in a way worth retrying with backoff.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Transient(String);

/// Kinds and informers a rule uses.
pub struct Wiring {
    /// The primary kind.
    pub primary: Arc<Informer>,
    /// Child kinds.
    pub children: HashMap<Gvk, Arc<Informer>>,
    /// Watch name → informer of the watched kind.
    pub related: HashMap<String, Arc<Informer>>,
}

/// A running rule.
pub struct RuleController {
    rule: Arc<Rule>,
    shared: Arc<Shared>,
    wiring: Wiring,
    queue: Queue<ObjKey>,
    reverse: Mutex<Reverse>,
    failures: Failures<ObjKey>,
    /// Fingerprint of each primary's spec and metadata, so status-only
    /// updates do not re-render.
    seen: Mutex<HashMap<ObjKey, u64>>,
    /// The last condition reported per primary, so Events are not repeated.
    reported: Mutex<HashMap<ObjKey, String>>,
    subscriptions: Mutex<Vec<(Arc<Informer>, u64)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RuleController {
    /// Wires the rule to its informers and subscribes its handlers.
    pub fn new(rule: Arc<Rule>, shared: Arc<Shared>, wiring: Wiring) -> Arc<Self> {
        let this = Arc::new(Self {
            rule,
            shared,
            wiring,
            queue: Queue::default(),
            reverse: Mutex::default(),
            failures: Failures::default(),
            seen: Mutex::default(),
            reported: Mutex::default(),
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

    /// Queues every primary the rule selects (start-up, resync, rule change).
    pub fn enqueue_all(&self) {
        for obj in self.wiring.primary.list() {
            if self.selects(&obj) {
                self.enqueue(ObjKey::of(&obj));
            }
        }
    }

    /// Runs `workers` workers until the queue shuts down. The workers live in
    /// a `JoinSet`, so cancelling this future (a rule aborted because the
    /// lease was lost) cancels every one of them.
    pub async fn run_workers(self: &Arc<Self>, workers: usize) {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..workers.max(1) {
            let this = self.clone();
            tasks.spawn(async move { this.work().await });
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Deletes every child this rule made, for every primary (used when a
    /// rule is removed with pruning on).
    pub async fn delete_all_children(&self) {
        for (gvk, informer) in &self.wiring.children {
            for child in informer.list() {
                if child.labels().get(RULE_LABEL) != Some(&self.rule.name) {
                    continue;
                }
                let key = ObjKey::of(&child);
                let api = self.api(informer.kind(), key.namespace.as_deref());
                match api.delete(&key.name, &DeleteParams::background()).await {
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
        for (informer, id) in lock(&self.subscriptions).drain(..) {
            informer.unsubscribe(id);
        }
    }

    async fn work(self: Arc<Self>) {
        let m = &self.shared.metrics;
        let controller = metrics::controller(&self.rule.name);
        let queue = metrics::queue(&self.rule.name);
        while let Some((key, waited)) = self.queue.next().await {
            m.queue_duration
                .get_or_create(&queue)
                .observe(waited.as_secs_f64());
            m.queue_depth
                .get_or_create(&queue)
                .set(self.queue.len() as i64);
            m.active_workers.get_or_create(&controller).inc();
            let started = std::time::Instant::now();
            let span = tracing::info_span!("reconcile", rule = %self.rule.name, object = %key);
            let result = self.reconcile(&key).instrument(span).await;
            m.reconcile_time
                .get_or_create(&controller)
                .observe(started.elapsed().as_secs_f64());
            m.active_workers.get_or_create(&controller).dec();
            let outcome = match result {
                Ok(Next::After(delay)) => {
                    self.failures.reset(&key);
                    self.queue.add_after(key.clone(), delay);
                    "requeue_after"
                }
                Ok(Next::Done) => {
                    self.failures.reset(&key);
                    "success"
                }
                Err(Transient(error)) => {
                    let attempt = self.failures.record(&key);
                    let delay =
                        backoff::delay(self.rule.requeue.on_error, attempt, backoff::jitter());
                    tracing::warn!(rule = %self.rule.name, object = %key, %error, retry_in = ?delay, "reconcile failed");
                    self.queue.add_after(key.clone(), delay);
                    m.reconcile_errors.get_or_create(&controller).inc();
                    m.queue_retries.get_or_create(&queue).inc();
                    "error"
                }
            };
            let labels = metrics::labels2(("controller", &self.rule.name), ("result", outcome));
            m.reconcile_total.get_or_create(&labels).inc();
            self.queue.done(&key);
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
                if !self.selects(obj) {
                    return;
                }
                let key = ObjKey::of(obj);
                let print = fingerprint(obj);
                if lock(&self.seen).insert(key.clone(), print) != Some(print) {
                    self.enqueue(key);
                }
            }
            Change::Deleted(obj) => {
                let key = ObjKey::of(obj);
                lock(&self.seen).remove(&key);
                lock(&self.reported).remove(&key);
                lock(&self.reverse).forget(&key);
                self.failures.reset(&key);
            }
        }
    }

    fn on_child(&self, change: &Change<'_>) {
        let (Change::Applied(obj) | Change::Deleted(obj)) = change;
        if obj.labels().get(RULE_LABEL) != Some(&self.rule.name) {
            return;
        }
        let gvk = &self.rule.primary.gvk;
        let namespaced = self.wiring.primary.kind().namespaced;
        for owner in obj.owner_references() {
            if owner.controller == Some(true)
                && owner.kind == gvk.kind
                && owner.api_version == gvk.api_version()
            {
                let namespace = if namespaced { obj.namespace() } else { None };
                self.enqueue(ObjKey {
                    namespace,
                    name: owner.name.clone(),
                });
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

    fn selects(&self, obj: &DynamicObject) -> bool {
        let p = &self.rule.primary;
        let ns_ok =
            p.namespaces.is_empty() || obj.namespace().is_some_and(|ns| p.namespaces.contains(&ns));
        ns_ok
            && p.selector
                .as_ref()
                .is_none_or(|s| matches_selector(s, obj.labels()))
    }

    // --- reconcile ---------------------------------------------------------

    /// Reconciles one primary.
    pub async fn reconcile(&self, key: &ObjKey) -> Result<Next, Transient> {
        let Some(obj) = self.wiring.primary.get(key) else {
            return Ok(Next::Done);
        };
        if !self.selects(&obj) || obj.metadata.deletion_timestamp.is_some() {
            return Ok(Next::Done);
        }
        self.shared
            .stats
            .reconciles
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let primary = serde_json::to_value(&*obj).map_err(|e| Transient(e.to_string()))?;
        let mut inputs = Inputs {
            primary,
            ..Inputs::default()
        };

        // Related objects, and the reverse index that finds us when they change.
        let missing = match self.gather_related(key, &mut inputs) {
            Ok(missing) => missing,
            Err(message) => {
                return self
                    .fail(&obj, reasons::TEMPLATE_ERROR, message, Next::Done)
                    .await;
            }
        };
        if !missing.is_empty() {
            self.write_status(
                &obj,
                &Outcome::Waiting {
                    missing: missing.clone(),
                },
                &serde_json::Map::new(),
            )
            .await?;
            self.report(
                &obj,
                EventType::Normal,
                reasons::DEPENDENCY_MISSING,
                &format!("waiting for {}", missing.join(", ")),
            )
            .await;
            return Ok(Next::After(self.rule.requeue.waiting));
        }

        // Live children, by child id.
        let uid = obj.uid().unwrap_or_default();
        let mut owned: Vec<(Gvk, Arc<DynamicObject>)> = Vec::new();
        for (gvk, informer) in &self.wiring.children {
            for child in informer.owned_by(&uid) {
                if child.labels().get(RULE_LABEL) == Some(&self.rule.name) {
                    owned.push((gvk.clone(), child));
                }
            }
        }
        for child in &self.rule.children {
            let live: Vec<Value> = owned
                .iter()
                .filter(|(gvk, o)| {
                    gvk == &child.gvk && o.labels().get(CHILD_LABEL) == Some(&child.id)
                })
                .filter_map(|(_, o)| serde_json::to_value(&**o).ok())
                .collect();
            let value = match (child.for_each.is_some(), live.len()) {
                (true, _) => Value::Array(live),
                (false, 0) => continue,
                (false, _) => live.into_iter().next().unwrap_or(Value::Null),
            };
            inputs.observed.insert(child.id.clone(), value);
        }

        // Render: pure.
        let kinds = &self.shared.kinds;
        let scope_of = |gvk: &Gvk| kinds.namespaced(gvk);
        let rendered = match render::render(&self.rule, &inputs, &scope_of) {
            Ok(r) => r,
            Err(e) => {
                return self
                    .fail(&obj, reasons::TEMPLATE_ERROR, e.to_string(), Next::Done)
                    .await;
            }
        };

        // Apply what differs.
        let pp = PatchParams::apply(&self.shared.options.field_manager);
        let pp = if self.rule.force_conflicts {
            pp.force()
        } else {
            pp
        };
        for child in &rendered.children {
            let Some(informer) = self.wiring.children.get(&child.gvk) else {
                continue;
            };
            let ckey = rendered_key(&child.object);
            let live = informer.get(&ckey);
            if live.as_ref().is_some_and(|l| {
                serde_json::to_value(&**l).is_ok_and(|l| satisfied(&l, &child.object))
            }) {
                continue;
            }
            let api = self.api(informer.kind(), ckey.namespace.as_deref());
            self.shared
                .stats
                .applies
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let applied = api
                .patch(&ckey.name, &pp, &Patch::Apply(&child.object))
                .await;
            let result = if applied.is_ok() { "success" } else { "error" };
            let labels = metrics::labels2(("rule", &self.rule.name), ("result", result));
            self.shared.metrics.apply_total.get_or_create(&labels).inc();
            if let Err(e) = applied {
                let (reason, message, next) = classify(
                    &e,
                    &child.gvk,
                    &ckey,
                    self.rule.requeue.on_error.max,
                    self.rule.force_conflicts,
                );
                return match next {
                    Some(next) => self.fail(&obj, reason, message, next).await,
                    None => {
                        self.write_status(
                            &obj,
                            &Outcome::Failed {
                                reason,
                                message: message.clone(),
                            },
                            &serde_json::Map::new(),
                        )
                        .await
                        .ok();
                        Err(Transient(message))
                    }
                };
            }
        }

        // Prune children this rule no longer renders, only after every apply succeeded.
        let desired: HashSet<(Gvk, ObjKey)> = rendered
            .children
            .iter()
            .map(|c| (c.gvk.clone(), rendered_key(&c.object)))
            .collect();
        for (gvk, child) in &owned {
            let ckey = ObjKey::of(child);
            if desired.contains(&(gvk.clone(), ckey.clone()))
                || child.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            let Some(informer) = self.wiring.children.get(gvk) else {
                continue;
            };
            let api = self.api(informer.kind(), ckey.namespace.as_deref());
            let dp = DeleteParams {
                preconditions: child.uid().map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::background()
            };
            self.shared
                .stats
                .deletes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match api.delete(&ckey.name, &dp).await {
                Ok(_) => {
                    tracing::info!(rule = %self.rule.name, child = %ckey, kind = %gvk, "pruned");
                    self.publish(
                        &obj,
                        EventType::Normal,
                        "Pruned",
                        &format!("deleted {} {ckey}: no longer rendered", gvk.kind),
                    )
                    .await;
                }
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(e) => return Err(Transient(format!("pruning {} {ckey}: {e}", gvk.kind))),
            }
        }

        // Status.
        let not_ready: Vec<String> = rendered
            .readiness
            .iter()
            .filter(|r| !r.ready)
            .map(|r| format!("{}/{}", r.id, r.name))
            .collect();
        let waiting_on_children = !not_ready.is_empty();
        self.write_status(&obj, &Outcome::Applied { not_ready }, &rendered.status)
            .await?;
        lock(&self.reported).remove(key);
        Ok(if waiting_on_children {
            Next::After(self.rule.requeue.waiting)
        } else {
            self.rule.requeue.resync.map_or(Next::Done, Next::After)
        })
    }

    /// Renders each watch's reference, records it in the reverse index and
    /// reads the related objects from the cache. Returns the required ones missing.
    fn gather_related(&self, key: &ObjKey, inputs: &mut Inputs) -> Result<Vec<String>, String> {
        let ctx = render::context(&self.rule, inputs);
        let set = &self.rule.templates;
        let mut budget = Budget::default();
        let primary_ns = key.namespace.clone();
        let mut refs = Vec::new();
        let mut selectors = Vec::new();
        let mut missing = Vec::new();
        for watch in &self.rule.watches {
            let Some(informer) = self.wiring.related.get(&watch.name) else {
                continue;
            };
            let namespaced = informer.kind().namespaced;
            let namespace_of = |ns: &Option<crate::template::Piece>,
                                budget: &mut Budget|
             -> Result<Option<String>, String> {
                if !namespaced {
                    return Ok(None);
                }
                match ns {
                    Some(piece) => piece
                        .render_string(set, &ctx, budget)
                        .map(Some)
                        .map_err(|e| e.to_string()),
                    None => Ok(primary_ns.clone()),
                }
            };
            match &watch.target {
                WatchTarget::Ref { name, namespace } => {
                    let name = name
                        .render_string(set, &ctx, &mut budget)
                        .map_err(|e| e.to_string())?;
                    let target = ObjKey {
                        namespace: namespace_of(namespace, &mut budget)?,
                        name,
                    };
                    refs.push((watch.name.clone(), target.clone()));
                    match informer.get(&target) {
                        Some(o) => {
                            inputs.related.insert(
                                watch.name.clone(),
                                serde_json::to_value(&*o).map_err(|e| e.to_string())?,
                            );
                        }
                        None if watch.required => missing.push(format!(
                            "{} {target} (related.{})",
                            watch.gvk.kind, watch.name
                        )),
                        None => {}
                    }
                }
                WatchTarget::Selector {
                    match_labels,
                    namespace,
                } => {
                    let mut labels = BTreeMap::new();
                    for (k, piece) in match_labels {
                        labels.insert(
                            k.clone(),
                            piece
                                .render_string(set, &ctx, &mut budget)
                                .map_err(|e| e.to_string())?,
                        );
                    }
                    let ns = namespace_of(namespace, &mut budget)?;
                    let mut found: Vec<Value> = informer
                        .list()
                        .into_iter()
                        .filter(|o| {
                            o.namespace() == ns
                                && labels.iter().all(|(k, v)| o.labels().get(k) == Some(v))
                        })
                        .filter_map(|o| serde_json::to_value(&*o).ok())
                        .collect();
                    found.sort_by(|a, b| {
                        a["metadata"]["name"]
                            .as_str()
                            .cmp(&b["metadata"]["name"].as_str())
                    });
                    if found.is_empty() && watch.required {
                        missing.push(format!(
                            "{} with labels {labels:?} (related.{})",
                            watch.gvk.kind, watch.name
                        ));
                    }
                    inputs
                        .related
                        .insert(watch.name.clone(), Value::Array(found));
                    selectors.push(SelectorRef {
                        watch: watch.name.clone(),
                        namespace: ns,
                        labels,
                    });
                }
            }
        }
        lock(&self.reverse).set(key, refs, selectors);
        Ok(missing)
    }

    fn api(&self, kind: &Kind, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) if kind.namespaced => {
                Api::namespaced_with(self.shared.client.clone(), ns, &kind.ar)
            }
            _ => Api::all_with(self.shared.client.clone(), &kind.ar),
        }
    }

    /// A failure that is not retried hot: condition, Event, then `next`.
    async fn fail(
        &self,
        obj: &DynamicObject,
        reason: &'static str,
        message: String,
        next: Next,
    ) -> Result<Next, Transient> {
        tracing::warn!(rule = %self.rule.name, object = %ObjKey::of(obj), reason, %message, "reconcile failed");
        self.write_status(
            obj,
            &Outcome::Failed {
                reason,
                message: message.clone(),
            },
            &serde_json::Map::new(),
        )
        .await?;
        self.report(obj, EventType::Warning, reason, &message).await;
        Ok(next)
    }

    /// Writes the status when it differs from the live one (and the primary has one kiln may write).
    async fn write_status(
        &self,
        obj: &DynamicObject,
        outcome: &Outcome,
        fields: &serde_json::Map<String, Value>,
    ) -> Result<(), Transient> {
        let kind = self.wiring.primary.kind();
        if !writes_status(kind) {
            return Ok(());
        }
        let live = obj.data.get("status").cloned().unwrap_or(Value::Null);
        let now = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let names: Vec<&str> = self
            .rule
            .status_fields
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        let desired = status::status(
            outcome,
            &live,
            fields,
            &names,
            &now,
            obj.metadata.generation,
        );
        if satisfied(&live, &desired) {
            return Ok(());
        }
        let key = ObjKey::of(obj);
        let patch = serde_json::json!({
            "apiVersion": self.rule.primary.gvk.api_version(),
            "kind": self.rule.primary.gvk.kind,
            "metadata": { "name": key.name },
            "status": desired,
        });
        let api = self.api(kind, key.namespace.as_deref());
        self.shared
            .stats
            .status_writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pp = PatchParams::apply(&self.shared.options.field_manager).force();
        match api
            .patch_status(&key.name, &pp, &Patch::Apply(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()), // deleted meanwhile
            Err(e) => Err(Transient(format!("writing status: {e}"))),
        }
    }

    /// Publishes an Event once per distinct reason and message.
    async fn report(&self, obj: &DynamicObject, kind: EventType, reason: &str, message: &str) {
        let key = ObjKey::of(obj);
        let said = format!("{reason}: {message}");
        if lock(&self.reported).insert(key, said.clone()) == Some(said) {
            return;
        }
        self.publish(obj, kind, reason, message).await;
    }

    async fn publish(&self, obj: &DynamicObject, kind: EventType, reason: &str, message: &str) {
        let reference = obj.object_ref(&self.wiring.primary.kind().ar);
        let event = KubeEvent {
            type_: kind,
            reason: reason.to_string(),
            note: Some(message.chars().take(1000).collect()),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        if let Err(error) = self.shared.recorder.publish(&event, &reference).await {
            tracing::warn!(rule = %self.rule.name, %error, "could not publish an Event");
        }
    }
}

fn handler(weak: &Weak<RuleController>, f: fn(&RuleController, &Change<'_>)) -> Handler {
    let weak = weak.clone();
    Arc::new(move |change: &Change<'_>| {
        if let Some(this) = weak.upgrade() {
            f(&this, change);
        }
    })
}

/// Whether kiln writes conditions to this kind's status: custom resources
/// with a status subresource. Built-in kinds have typed statuses of their own.
fn writes_status(kind: &Kind) -> bool {
    let g = &kind.gvk.group;
    kind.has_status && g.contains('.') && !g.ends_with(".k8s.io")
}

/// Sorts an API error into condition reason, message, and whether it is
/// permanent (`Some(next)`) or retried with backoff (`None`).
fn classify(
    e: &kube::Error,
    gvk: &Gvk,
    key: &ObjKey,
    slow_retry: Duration,
    forced: bool,
) -> (&'static str, String, Option<Next>) {
    let what = format!("applying {} {key}", gvk.kind);
    match e {
        // Without force, server-side apply answers 409 when another manager
        // owns a field: a standing disagreement, not a transient error.
        kube::Error::Api(s) if s.code == 409 && !forced => (
            reasons::CONFLICT,
            format!("{what}: {}", s.message),
            Some(Next::After(slow_retry)),
        ),
        kube::Error::Api(s) if s.code == 403 => (
            reasons::FORBIDDEN,
            format!("{what}: forbidden: {}", s.message),
            Some(Next::After(slow_retry)),
        ),
        // Server-side apply reports a value of the wrong type for the schema
        // as a 500 "failed to create typed patch object": as permanent as a 422.
        kube::Error::Api(s)
            if s.code == 422
                || s.code == 400
                || (s.code == 500 && s.message.contains("failed to create typed patch object")) =>
        {
            (
                reasons::INVALID,
                format!("{what}: {}", s.message),
                Some(Next::Done),
            )
        }
        kube::Error::Api(s) => (
            reasons::APPLY_FAILED,
            format!("{what}: {} (HTTP {})", s.message, s.code),
            None,
        ),
        other => (reasons::APPLY_FAILED, format!("{what}: {other}"), None),
    }
}

/// The namespace and name of a rendered child (render guarantees the name,
/// and sets the namespace of namespaced kinds).
fn rendered_key(object: &Value) -> ObjKey {
    let meta = &object["metadata"];
    ObjKey {
        namespace: meta["namespace"].as_str().map(str::to_string),
        name: meta["name"].as_str().unwrap_or_default().to_string(),
    }
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

/// Whether labels satisfy a label selector.
pub fn matches_selector(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    selector
        .match_labels
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
        && selector.match_expressions.iter().all(|req| {
            let value = labels.get(&req.key);
            match req.operator.as_str() {
                "In" => value.is_some_and(|v| req.values.contains(v)),
                "NotIn" => value.is_none_or(|v| !req.values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}
