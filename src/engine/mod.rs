//! The engine: controller-runtime's Manager with the Reconcile function
//! replaced by rules. Each rule runs as a [`controller::RuleController`] over
//! shared informers (one watch per GVK, however many rules use it).
//!
//! A rule whose kinds are not served yet (a CRD not installed) waits and
//! starts by itself once discovery finds them.

pub mod adoption;
pub mod backoff;
pub mod board;
pub mod budget;
pub mod cached;
pub mod claims;
pub mod controller;
pub mod crd_watch;
pub mod decode;
pub mod decorate;
pub mod diff;
pub mod elsewhere;
pub mod events;
pub mod failure;
pub mod history;
pub mod informer;
pub mod kinds;
pub mod no_status;
pub mod owned_status;
pub mod placed;
pub mod placing;
pub mod plan;
pub mod projection;
pub mod queue;
pub mod ready_tally;
pub mod related;
pub mod remember;
pub mod reown;
pub mod replace;
pub mod reverse;
pub mod schema;
pub mod since;
pub mod status;
pub mod store;
pub mod suspend;
pub mod touch;
pub mod undecodable;
pub mod unwatched;
pub mod watch_health;
pub mod workers;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::watch;

use crate::rules::{Gvk, Rule, RuleSet};
use crate::shard::Whose;
use controller::{RuleController, Wiring};
use informer::Registry;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kinds::{KindError, Kinds};
use projection::Projection;
use schema::{SchemaError, StatusSchema};

/// How the engine runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Server-side apply field manager.
    pub field_manager: String,
    /// Watch only these namespaces (empty: all).
    pub namespaces: Vec<String>,
    /// Workers per rule.
    pub concurrency: usize,
    /// How often a rule waiting for its kinds asks discovery again.
    pub kind_retry: Duration,
    /// How long in-flight reconciles may take to finish on shutdown.
    pub shutdown_grace: Duration,
    /// Cache of each child and watched kind only what rules set and read
    /// (issue 16); on unless `KILN_CACHE_PROJECTION=0` (for debugging:
    /// whole objects in the cache).
    pub project_cache: bool,
    /// kiln's own namespace, where it keeps what tenants may not write
    /// (the first load of a rule with `takeExisting: false`: `since.rs`).
    pub state_namespace: String,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            field_manager: "kiln".to_string(),
            namespaces: Vec::new(),
            concurrency: 4,
            kind_retry: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(30),
            project_cache: std::env::var_os("KILN_CACHE_PROJECTION").is_none_or(|v| v != "0"),
            state_namespace: since::own_namespace(),
        }
    }
}

/// What every rule shares.
pub struct Shared {
    /// The API client.
    pub client: Client,
    /// Discovery cache.
    pub kinds: Kinds,
    /// Informers, one per GVK.
    pub informers: Registry,
    /// Kubernetes Events.
    pub recorder: Recorder,
    /// Options.
    pub options: Options,
    /// Prometheus metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Which rules select each primary, and their parts of its status.
    pub board: board::Board,
    /// Each rule's primaries by their `Ready` status (`kiln_primaries`).
    pub ready: ready_tally::ReadyTally,
    /// The primaries told they get no status (no status subresource).
    pub no_status: no_status::Told,
    /// Whether this replica may write right now (its lease is held); unset: always.
    pub fence: std::sync::OnceLock<Fence>,
    /// This replica's share of the primaries, when sharded (`kiln run --shards`).
    pub shard: Option<Arc<crate::shard::scope::Scope>>,
    /// One watch per primary CRD, shared by the rules on it.
    pub crds: crd_watch::CrdWatches,
}

/// Answers whether this replica may write right now.
pub type Fence = Arc<dyn Fn() -> bool + Send + Sync>;

impl Shared {
    /// Whether a write may be sent now: no fence is set, or it says yes.
    pub fn may_write(&self) -> bool {
        self.fence.get().is_none_or(|f| f())
    }

    /// Whether this replica reconciles the primary with this uid: always,
    /// unless sharded and the primary is another replica's.
    pub fn owns(&self, primary_uid: &str) -> bool {
        self.whose(primary_uid) == Whose::Mine
    }

    /// Who reconciles the primary with this uid: this replica, unless sharded.
    pub fn whose(&self, primary_uid: &str) -> Whose {
        self.shard
            .as_ref()
            .map_or(Whose::Mine, |s| s.shard().whose(primary_uid))
    }

    /// A child is looked up before being written (sharding).
    pub fn looking_up(&self) {
        if let Some(s) = &self.shard {
            s.shard().looking_up();
        }
    }

    /// A reconcile was put off because the shard Lease was late.
    pub fn put_off(&self) {
        if let Some(s) = &self.shard {
            s.shard().putting_off();
        }
    }
}

/// The state of one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleState {
    /// Resolving kinds and filling caches.
    Syncing,
    /// Waiting for kinds the API server does not serve yet.
    WaitingForKinds(Vec<String>),
    /// Running.
    Running,
    /// Refused: the rule cannot run against the kinds as served (a status
    /// field the primary's schema does not declare). Checked again every
    /// `kind_retry`, so fixing the CRD starts the rule.
    Refused(String),
}

struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    state: Arc<Mutex<RuleState>>,
    controller: Arc<Mutex<Option<Arc<RuleController>>>>,
}

/// The engine.
pub struct Engine {
    shared: Arc<Shared>,
    rules: Mutex<HashMap<String, Running>>,
}

impl Engine {
    /// An engine with no rules yet.
    pub fn new(client: Client, options: Options) -> Self {
        Self::sharded(client, options, None, Arc::default())
    }

    /// An engine that reconciles, caches and writes only `shard`'s share of
    /// the primaries (`None`: all of them), counting in `metrics` (the
    /// process's: an engine started again counts on).
    pub fn sharded(
        client: Client,
        options: Options,
        shard: Option<Arc<crate::shard::scope::Scope>>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        let reporter = Reporter {
            controller: "kiln".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let recorder = Recorder::new(client.clone(), reporter);
        let sink = undecodable::sink(recorder.clone(), metrics.clone());
        let mut informers = Registry::keeping_status_of(&options.field_manager)
            .reporting_to(sink)
            .projecting(options.project_cache);
        if let Some(scope) = &shard {
            let (keep, select) = (scope.clone(), scope.clone());
            informers = informers.scoped(
                Arc::new(move |gvk, obj| keep.keeps(gvk, obj)),
                Arc::new(move |gvk| select.server_share(gvk)),
            );
        }
        let shared = Arc::new(Shared {
            kinds: Kinds::new(client.clone()),
            informers,
            recorder,
            client,
            options,
            metrics,
            board: board::Board::default(),
            ready: ready_tally::ReadyTally::default(),
            no_status: no_status::Told::default(),
            fence: std::sync::OnceLock::new(),
            shard,
            crds: crd_watch::CrdWatches::default(),
        });
        Self {
            shared,
            rules: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        self.rules
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts every rule of `set`.
    pub fn start_all(&self, set: &RuleSet) {
        if let Some(scope) = &self.shared.shard {
            for rule in &set.rules {
                scope.set_rule(rule);
            }
        }
        for rule in &set.rules {
            self.start(rule.clone());
        }
    }

    /// Starts one rule (replacing a running rule of the same name).
    pub fn start(&self, rule: Arc<Rule>) {
        if let Some(scope) = &self.shared.shard
            && scope.set_rule(&rule)
        {
            // A kind changed roles (now read by a rule, say): list it in full.
            self.shared.informers.rescope();
        }
        let (stop, stop_rx) = watch::channel(false);
        let state = Arc::new(Mutex::new(RuleState::Syncing));
        let controller = Arc::new(Mutex::new(None));
        let task = tokio::spawn(run_rule(
            rule.clone(),
            self.shared.clone(),
            stop_rx,
            state.clone(),
            controller.clone(),
        ));
        if let Some(old) = self.lock().insert(
            rule.name.clone(),
            Running {
                stop,
                task,
                state,
                controller,
            },
        ) {
            let _ = old.stop.send(true);
        }
    }

    /// Stops one rule; its children stay. Other rules on the same primary
    /// kind reconcile their objects again, so the status parts of the rule
    /// that stopped leave the objects they shared.
    pub async fn stop(&self, name: &str) {
        // A kind may be sharded now; its cache, fuller than it needs to be,
        // is not listed again for that.
        if let Some(scope) = &self.shared.shard {
            scope.remove_rule(name);
        }
        let running = self.lock().remove(name);
        if let Some(r) = running {
            let gvk = self.controller_of(&r).map(|c| c.rule().primary.gvk.clone());
            let _ = r.stop.send(true);
            let _ = tokio::time::timeout(self.shared.options.shutdown_grace, r.task).await;
            let others: Vec<Arc<RuleController>> = self
                .lock()
                .values()
                .filter_map(|o| self.controller_of(o))
                .filter(|c| Some(&c.rule().primary.gvk) == gvk.as_ref())
                .collect();
            for c in others {
                c.enqueue_all();
            }
        }
    }

    /// Makes every write of the engine conditional on `fence` (leader election).
    pub fn set_fence(&self, fence: Fence) {
        let _ = self.shared.fence.set(fence);
    }

    fn controller_of(&self, running: &Running) -> Option<Arc<RuleController>> {
        running
            .controller
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Swaps a running rule for a new version: the old one stops (in-flight
    /// reconciles finish), the new one starts on the same informers (they
    /// linger, so nothing is re-listed) and reconciles every primary once.
    pub async fn replace(&self, rule: Arc<Rule>) {
        self.stop(&rule.name).await;
        self.start(rule);
    }

    /// Stops a rule; with `prune`, deletes every child it made first.
    pub async fn remove(&self, name: &str, prune: bool) {
        let controller = self.controller(name);
        self.stop(name).await;
        if let Some(c) = controller {
            // A finalizer of a rule that no longer runs would hold its
            // primaries forever.
            c.release().await;
            if prune {
                c.delete_all_children().await;
            }
        }
    }

    /// How many times a watch was started for `gvk` (a re-list is not a start).
    pub fn watch_starts(&self, gvk: &Gvk) -> u64 {
        self.shared.informers.starts(gvk)
    }

    /// Stops every rule at once, in-flight reconciles included (the lease was
    /// lost: another replica may already be writing).
    pub fn abort(&self) {
        for (_, running) in self.lock().drain() {
            // No queue hands out another key, and the task (with its workers)
            // is cancelled at its next await.
            if let Some(c) = running
                .controller
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
            {
                c.shutdown();
            }
            running.task.abort();
        }
    }

    /// Stops every rule, letting in-flight reconciles finish (bounded),
    /// then every watch, lingering ones included.
    pub async fn shutdown(&self) {
        let names: Vec<String> = self.lock().keys().cloned().collect();
        for name in names {
            self.stop(&name).await;
        }
        self.shared.informers.stop_all();
    }

    /// Queues every primary of a rule (a forced resync).
    pub fn resync(&self, name: &str) {
        if let Some(c) = self.controller(name) {
            c.enqueue_all();
        }
    }

    /// The running controller of a rule, once its kinds are served.
    pub fn controller(&self, name: &str) -> Option<Arc<RuleController>> {
        self.lock().get(name).and_then(|r| self.controller_of(r))
    }

    /// The state of a rule.
    pub fn state(&self, name: &str) -> Option<RuleState> {
        self.lock().get(name).map(|r| {
            r.state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone()
        })
    }

    /// Watches running: one per GVK.
    pub fn watches(&self) -> usize {
        self.shared.informers.watches()
    }

    /// The metrics, with the gauges that are sampled (watches, cached
    /// objects) brought up to date.
    pub fn metrics(&self) -> Arc<crate::metrics::Metrics> {
        let m = &self.shared.metrics;
        m.watches.set(self.watches() as i64);
        for (gvk, count, bytes) in self.shared.informers.cached() {
            let label = crate::metrics::label("gvk", &gvk.to_string());
            m.cached_objects.get_or_create(&label).set(count as i64);
            m.cached_bytes
                .get_or_create(&label)
                .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        for (rule, counts) in self.shared.ready.counts() {
            for (status, n) in ready_tally::STATUSES.iter().zip(counts) {
                let labels = crate::metrics::labels2(("rule", &rule), ("ready", status));
                m.primaries.get_or_create(&labels).set(n);
            }
        }
        if self.shared.shard.is_some() {
            for (gvk, served, dropped) in self.shared.informers.shard_filtering() {
                let label = crate::metrics::label("gvk", &gvk.to_string());
                if let Some(served) = served {
                    m.shard_server_filtered
                        .get_or_create(&label)
                        .set(i64::from(served));
                }
                let c = m.shard_dropped.get_or_create(&label);
                c.inc_by(dropped.saturating_sub(c.get()));
            }
        }
        m.clone()
    }

    /// Objects cached per GVK, and the bytes of their compact form (JSON text, namespace, name, labels).
    pub fn cached(&self) -> Vec<(Gvk, usize, usize)> {
        self.shared.informers.cached()
    }

    /// Whether kiln does its job: every rule is past start-up (running, or
    /// waiting for a kind that is not served, which no restart would fix)
    /// and no watch has kept failing (the API server down, a list refused);
    /// otherwise why not.
    pub fn readiness(&self) -> Result<(), String> {
        let starting: Vec<String> = self
            .lock()
            .iter()
            .filter(|(_, r)| {
                matches!(
                    *r.state
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner),
                    RuleState::Syncing
                )
            })
            .map(|(name, _)| name.clone())
            .collect();
        if !starting.is_empty() {
            return Err(format!(
                "rules starting, caches not synced yet: {}",
                starting.join(", ")
            ));
        }
        match self.shared.informers.trouble() {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }

    /// Whether this replica runs the cluster-wide singletons (the rules
    /// ConfigMap's Warning Events): always, unless sharded and another
    /// member holds bucket 0.
    pub fn runs_singletons(&self) -> bool {
        self.shared
            .shard
            .as_ref()
            .is_none_or(|s| s.shard().singleton())
    }

    /// Queues every primary of every rule (a sharded replica took over buckets).
    pub fn resync_all(&self) {
        let controllers: Vec<Arc<RuleController>> = self
            .lock()
            .values()
            .filter_map(|r| self.controller_of(r))
            .collect();
        for c in controllers {
            c.enqueue_all();
        }
    }

    /// Primaries this replica reconciles (sharded: its share), over every
    /// primary kind.
    pub fn primaries_owned(&self) -> usize {
        let mut kinds: HashMap<Gvk, Arc<informer::Informer>> = HashMap::new();
        for r in self.lock().values() {
            if let Some(c) = self.controller_of(r) {
                kinds
                    .entry(c.rule().primary.gvk.clone())
                    .or_insert_with(|| c.primaries().clone());
            }
        }
        kinds
            .values()
            .flat_map(|i| i.entries())
            .filter(|o| {
                self.shared
                    .owns(&o.uid().map(ToString::to_string).unwrap_or_default())
            })
            .count()
    }

    /// The informers (sharding re-scopes them).
    pub fn informers(&self) -> &Registry {
        &self.shared.informers
    }

    /// Whether [`readiness`](Self::readiness) is fine.
    pub fn ready(&self) -> bool {
        self.readiness().is_ok()
    }
}

/// Every GVK a rule touches, primary first.
pub(crate) fn kinds_of(rule: &Rule) -> Vec<Gvk> {
    let mut out = vec![rule.primary.gvk.clone()];
    for gvk in rule
        .children
        .iter()
        .map(|c| &c.gvk)
        .chain(rule.watches.iter().map(|w| &w.gvk))
        .chain(
            rule.primary
                .namespace_selector
                .as_ref()
                .map(|_| crate::rules::namespace_gvk())
                .as_ref(),
        )
    {
        if !out.contains(gvk) {
            out.push(gvk.clone());
        }
    }
    out
}

async fn run_rule(
    rule: Arc<Rule>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    state: Arc<Mutex<RuleState>>,
    slot: Arc<Mutex<Option<Arc<RuleController>>>>,
) {
    let waiting = shared
        .metrics
        .waiting_for_kinds
        .get_or_create(&crate::metrics::label("rule", &rule.name))
        .clone();
    let refused = shared
        .metrics
        .rule_refused
        .get_or_create(&crate::metrics::label("rule", &rule.name))
        .clone();
    let set_state = |s: RuleState| {
        waiting.set(i64::from(matches!(s, RuleState::WaitingForKinds(_))));
        refused.set(i64::from(matches!(s, RuleState::Refused(_))));
        *state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = s
    };
    loop {
        // Resolve every kind; wait (and say so) while any is not served.
        let (kinds, schema) = loop {
            let mut resolved = Vec::new();
            let mut missing = Vec::new();
            for gvk in kinds_of(&rule) {
                match shared.kinds.resolve(&gvk).await {
                    Ok(kind) => resolved.push(kind),
                    Err(KindError::NotServed(gvk)) => missing.push(gvk.to_string()),
                    Err(error) => {
                        tracing::warn!(rule = %rule.name, %error, "discovery failed");
                        missing.push(gvk.to_string());
                    }
                }
            }
            if missing.is_empty() {
                match status_schema(&rule, &shared.client, &resolved[0]).await {
                    Ok(schema) => {
                        if let Some(why) =
                            unwatched::refusal(&rule, &shared.options.namespaces, &resolved)
                        {
                            tracing::error!(rule = %rule.name, error = %why, "rule refused: it writes where kiln does not watch");
                            set_state(RuleState::Refused(why.clone()));
                            break (resolved, Schema::refused(why));
                        }
                        set_state(RuleState::Syncing);
                        break (resolved, schema);
                    }
                    Err(SchemaRead::Refused(why)) => {
                        tracing::error!(rule = %rule.name, error = %why, "rule refused: its status does not fit the primary's schema; it only tears down primaries being deleted");
                        set_state(RuleState::Refused(why.to_string()));
                        break (resolved, Schema::refused(why.to_string()));
                    }
                    Err(SchemaRead::Failed(error)) => {
                        tracing::warn!(rule = %rule.name, %error, "reading the primary's CustomResourceDefinition failed; the rule waits for it");
                    }
                }
                tokio::select! {
                    () = tokio::time::sleep(shared.options.kind_retry) => {}
                    _ = stop.changed() => return,
                }
                continue;
            }
            tracing::warn!(rule = %rule.name, kinds = ?missing, "waiting for kinds the API server does not serve yet");
            set_state(RuleState::WaitingForKinds(missing));
            tokio::select! {
                () = tokio::time::sleep(shared.options.kind_retry) => {}
                _ = stop.changed() => return,
            }
        };
        match run_resolved(&rule, &shared, &kinds, schema, &mut stop, &set_state, &slot).await {
            Ended::Stopped => return,
            Ended::SchemaChanged => {
                tracing::info!(rule = %rule.name, "the primary's CustomResourceDefinition changed its status schema; the rule checks it again");
            }
            Ended::KindGone(gvk) => {
                tracing::warn!(rule = %rule.name, kind = %gvk, "a kind stopped being served; the rule waits for it again");
                for kind in &kinds {
                    shared.kinds.forget(&kind.gvk);
                }
                set_state(RuleState::WaitingForKinds(vec![gvk.to_string()]));
            }
        }
    }
}

/// Why the primary's status schema did not let the rule start.
pub(crate) enum SchemaRead {
    /// The rule writes status the schema does not declare.
    Refused(SchemaError),
    /// The CRD could not be read (kiln may not, say): tried again, never
    /// guessed.
    Failed(kube::Error),
}

/// The status schema of the rule's primary kind, checked against the rule's
/// status fields and conditions. Only custom resources whose status kiln
/// writes have one to read (their CRD, read on every (re)discovery of the
/// kind); for anything else, and for a kind that is not a CRD (an
/// aggregated API), anything goes. A CRD that cannot be read (forbidden,
/// say) is not taken as open: the caller tries again.
pub(crate) async fn status_schema(
    rule: &Rule,
    client: &Client,
    primary: &kinds::Kind,
) -> Result<Schema, SchemaRead> {
    if !controller::writes_status(primary) {
        if primary.gvk.is_custom() {
            tracing::warn!(rule = %rule.name, kind = %primary.gvk, "the primary's kind has no status subresource: kiln writes no status (no conditions, no fields) on its objects");
        }
        return Ok(Schema::open());
    }
    let name = format!("{}.{}", primary.ar.plural, primary.gvk.group);
    let crd = match crds(client).get(&name).await {
        Ok(crd) => serde_json::to_value(&crd).unwrap_or_default(),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            tracing::warn!(rule = %rule.name, crd = %name, "the primary kind has no CustomResourceDefinition (an aggregated API?); its status schema is not checked");
            return Ok(Schema::open());
        }
        Err(e) => return Err(SchemaRead::Failed(e)),
    };
    let version = &primary.gvk.version;
    let status = StatusSchema::from_crd(&crd, version).map_err(SchemaRead::Refused)?;
    status
        .check(
            &name,
            version,
            &rule.status_fields,
            !rule.conditions.is_empty(),
        )
        .map_err(SchemaRead::Refused)?;
    Ok(Schema {
        status,
        crd: Some((name, version.clone())),
        refused: None,
    })
}

/// Whether a rule refused for `why` is now refused for another reason or
/// not at all (a CRD that cannot be read now changes nothing).
async fn refusal_changed(
    rule: &Rule,
    shared: &Shared,
    kinds: &[Arc<kinds::Kind>],
    why: &str,
) -> bool {
    match status_schema(rule, &shared.client, &kinds[0]).await {
        Err(SchemaRead::Refused(now)) => now.to_string() != why,
        Err(SchemaRead::Failed(_)) => false,
        Ok(_) => {
            unwatched::refusal(rule, &shared.options.namespaces, kinds).as_deref() != Some(why)
        }
    }
}

fn crds(client: &Client) -> kube::Api<CustomResourceDefinition> {
    kube::Api::all(client.clone())
}

/// The primary's status schema, and the CRD (name, version) it was read from.
pub(crate) struct Schema {
    status: StatusSchema,
    crd: Option<(String, String)>,
    /// Why the rule is refused, if it is: it then only tears down the
    /// primaries being deleted, and checks the schema again every
    /// `kind_retry`.
    refused: Option<String>,
}

impl Schema {
    fn open() -> Self {
        Self {
            status: StatusSchema::open(),
            crd: None,
            refused: None,
        }
    }

    fn refused(why: String) -> Self {
        Self {
            refused: Some(why),
            ..Self::open()
        }
    }
}

/// Returns once the status schema of the CRD differs from `current` (the
/// CRD was edited in place), watching that one CRD; never without a CRD.
async fn schema_change(shared: &Shared, crd: Option<(String, String)>, current: StatusSchema) {
    let Some((name, version)) = crd else {
        return std::future::pending().await;
    };
    let mut crd = shared.crds.subscribe(&shared.client, &name);
    while let Some(json) = crd.next().await {
        if StatusSchema::from_crd(&json, &version).ok().as_ref() != Some(&current) {
            return;
        }
    }
    std::future::pending().await
}

enum Ended {
    Stopped,
    KindGone(Gvk),
    /// The primary's CRD was edited: its status schema is read and checked again.
    SchemaChanged,
}

async fn run_resolved(
    rule: &Arc<Rule>,
    shared: &Arc<Shared>,
    kinds: &[Arc<kinds::Kind>],
    schema: Schema,
    stop: &mut watch::Receiver<bool>,
    set_state: &(dyn Fn(RuleState) + Sync),
    slot: &Arc<Mutex<Option<Arc<RuleController>>>>,
) -> Ended {
    let namespaces = &shared.options.namespaces;
    let mut acquired: Vec<Arc<informer::Informer>> = Vec::new();
    let wanted = projection::of_rule(rule);
    let everything = Projection::everything();
    let mut informer = |gvk: &Gvk| {
        let kind = kinds.iter().find(|k| &k.gvk == gvk)?.clone();
        let keep = wanted
            .iter()
            .find(|(g, _)| g == gvk)
            .map_or(&everything, |(_, p)| p);
        let i = shared
            .informers
            .acquire(&shared.client, &kind, namespaces, keep);
        acquired.push(i.clone());
        Some(i)
    };
    let primary = informer(&rule.primary.gvk);
    let mut children = HashMap::new();
    for child in &rule.children {
        if !children.contains_key(&child.gvk)
            && let Some(i) = informer(&child.gvk)
        {
            children.insert(child.gvk.clone(), i);
        }
    }
    let mut related = HashMap::new();
    for watch in &rule.watches {
        if let Some(i) = informer(&watch.gvk) {
            related.insert(watch.name.clone(), i);
        }
    }
    let namespaces_of_primaries = rule
        .primary
        .namespace_selector
        .as_ref()
        .and_then(|_| informer(&crate::rules::namespace_gvk()));
    let release = |acquired: &[Arc<informer::Informer>]| {
        for i in acquired {
            shared.informers.release(&i.kind().gvk);
        }
    };
    let Some(primary) = primary else {
        release(&acquired);
        return Ended::Stopped;
    };
    let Some(since) = since::resolve(rule, shared, stop).await else {
        release(&acquired);
        return Ended::Stopped;
    };
    let wiring = Wiring {
        since,
        primary: primary.clone(),
        children,
        related,
        status: Arc::new(schema.status.clone()),
        namespaces: namespaces_of_primaries,
        refused: schema.refused.is_some(),
    };
    let refused = schema.refused;
    let changed = schema_change(shared, schema.crd, schema.status);
    tokio::pin!(changed);
    let controller = RuleController::new(rule.clone(), shared.clone(), wiring);
    let gone = |acquired: &[Arc<informer::Informer>]| {
        acquired
            .iter()
            .find(|i| i.is_gone())
            .map(|i| i.kind().gvk.clone())
    };

    for i in &acquired {
        loop {
            tokio::select! {
                () = i.synced() => break,
                () = tokio::time::sleep(shared.options.kind_retry) => {
                    if let Some(gvk) = gone(&acquired) {
                        controller.shutdown();
                        release(&acquired);
                        return Ended::KindGone(gvk);
                    }
                    if i.is_forbidden() {
                        // Start anyway: writes of this kind will fail with a
                        // Forbidden condition on the primaries, which says
                        // more than a rule stuck starting.
                        tracing::error!(rule = %rule.name, kind = %i.kind().gvk, "kiln may not list and watch this kind (RBAC); its cache stays empty");
                        break;
                    }
                }
                _ = stop.changed() => {
                    controller.shutdown();
                    release(&acquired);
                    return Ended::Stopped;
                }
            }
        }
    }
    *slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(controller.clone());
    match &refused {
        None => {
            set_state(RuleState::Running);
            tracing::info!(rule = %rule.name, primary = %rule.primary.gvk, "rule running");
        }
        Some(why) => set_state(RuleState::Refused(why.clone())),
    }
    controller.enqueue_all();

    let mut workers = AbortOnDrop(Some({
        let c = controller.clone();
        let n = shared.options.concurrency;
        tokio::spawn(async move { c.run_workers(n).await })
    }));
    let ended = loop {
        tokio::select! {
            _ = stop.changed() => break Ended::Stopped,
            () = &mut changed => break Ended::SchemaChanged,
            () = tokio::time::sleep(shared.options.kind_retry) => {
                if let Some(gvk) = gone(&acquired) {
                    break Ended::KindGone(gvk);
                }
                if let Some(why) = &refused
                    && refusal_changed(rule, shared, kinds, why).await
                {
                    break Ended::SchemaChanged;
                }
            }
        }
    };
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    controller.shutdown();
    // Awaited through the guard: if this task is aborted meanwhile, the
    // guard still aborts the workers.
    if let Some(handle) = workers.0.as_mut() {
        let _ = tokio::time::timeout(shared.options.shutdown_grace, handle).await;
    }
    release(&acquired);
    tracing::info!(rule = %rule.name, "rule stopped");
    ended
}

/// Aborts a task when dropped: a rule task aborted (lease lost) takes its
/// workers with it.
struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.abort();
        }
    }
}
