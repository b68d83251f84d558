//! The engine: every running rule, started, swapped and stopped by name,
//! over informers shared between them; what `kiln run` and tests drive.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::watch;

use super::controller::RuleController;
use super::shared::{Fence, Shared};
use super::start::{RuleState, run_rule};
use super::{board, no_status, ready_tally};
use crate::engine::cache::crd_watch;
use crate::engine::cache::kinds::Kinds;
use crate::engine::cache::undecodable;
use crate::engine::cache::{informer, registry::Registry};
use crate::engine::decision::deletion;
use crate::engine::options::Options;
use crate::rules::{Gvk, Rule, RuleSet};

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
        let egress = options.egress.clone();
        let external =
            crate::external::Fetcher::new(egress, Some(client.clone()), metrics.external.clone());
        let shared = Arc::new(Shared {
            external,
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
            starting: tokio::sync::Semaphore::new(super::shared::STARTING),
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
    ///
    /// A new version on another primary kind (its group or kind renamed)
    /// no longer selects the old version's primaries: the old version lets
    /// go of its finalizer on each, as when the rule is removed, or deleting
    /// one (and the old CRD) would hang. Its children stay, as they do when
    /// a rule is removed: an edit of a rule deletes nothing.
    pub async fn replace(&self, rule: Arc<Rule>) {
        let old = self.controller(&rule.name);
        self.stop(&rule.name).await;
        // Another kind, or another finalizer name: the new version would
        // never remove the old one's finalizer.
        let let_go = |c: &Arc<RuleController>| {
            !same_kind(&c.rule().primary.gvk, &rule.primary.gvk)
                || deletion::finalizer(c.rule()) != deletion::finalizer(&rule)
        };
        if let Some(old) = old.filter(let_go) {
            old.release().await;
        }
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
        // Its series leave /metrics: a renamed rule is not counted twice.
        self.shared.ready.removed(name);
        self.shared.metrics.forget_rule(name);
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
        self.shared.crds.stop_all();
    }

    /// Stops every rule, letting in-flight reconciles finish (bounded),
    /// then every watch (the CRD watches too), lingering ones included.
    pub async fn shutdown(&self) {
        let names: Vec<String> = self.lock().keys().cloned().collect();
        for name in names {
            self.stop(&name).await;
        }
        self.shared.informers.stop_all();
        self.shared.crds.stop_all();
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

/// Whether two primaries' kinds name the same objects (any version).
fn same_kind(a: &Gvk, b: &Gvk) -> bool {
    a.group == b.group && a.kind == b.kind
}
