//! Prometheus metrics. Controller and work-queue metrics use
//! controller-runtime's names and labels (`controller=<rule>`), so existing
//! dashboards work; kiln's own start with `kiln_`. Labels are bounded: rule
//! names, kinds, fixed results — never error text.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// controller-runtime's reconcile-time buckets (seconds).
const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

fn histogram() -> Histogram {
    Histogram::new(RECONCILE_BUCKETS.iter().copied())
}

/// Conversion reviews take from tens of microseconds (one object) to
/// seconds (thousands): 100 µs × 1.5ⁿ up to about 13 s, fine enough to read
/// a p50 and a p99 from.
fn conversion_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        1e-4, 1.5, 30,
    ))
}

fn queue_histogram() -> Histogram {
    // client-go's ExponentialBuckets(10e-9, 10, 12).
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        1e-8, 10.0, 12,
    ))
}

/// Every metric kiln exports.
pub struct Metrics {
    registry: Registry,
    /// `controller_runtime_reconcile_total{controller,result}`
    pub reconcile_total: Family<Labels, Counter>,
    /// `controller_runtime_reconcile_errors_total{controller}`
    pub reconcile_errors: Family<Labels, Counter>,
    /// `controller_runtime_reconcile_time_seconds{controller}`
    pub reconcile_time: Family<Labels, Histogram, fn() -> Histogram>,
    /// `controller_runtime_active_workers{controller}`
    pub active_workers: Family<Labels, Gauge>,
    /// `workqueue_depth{name,controller}`
    pub queue_depth: Family<Labels, Gauge>,
    /// `workqueue_adds_total{name,controller}`
    pub queue_adds: Family<Labels, Counter>,
    /// `workqueue_queue_duration_seconds{name,controller}`
    pub queue_duration: Family<Labels, Histogram, fn() -> Histogram>,
    /// `workqueue_retries_total{name,controller}`
    pub queue_retries: Family<Labels, Counter>,
    /// `kiln_apply_total{rule,result}`: server-side applies of children, by
    /// their answer.
    pub apply_total: Family<Labels, Counter>,
    /// `kiln_writes_total{rule,verb}`: every write sent, as it is sent:
    /// `apply` (children and decorations), `patch` (owner references taken
    /// back), `status`, `delete` (pruning).
    pub writes: Family<Labels, Counter>,
    /// `kiln_write_budget_exhausted_total{rule}`: a primary's children were
    /// rewritten too often (a fight with another controller), writes paused.
    pub budget_exhausted: Family<Labels, Counter>,
    /// `kiln_hook_requests_total{rule,result}`: calls of a rule's hook, by
    /// result (`ok`, or the egress error's class: `timeout`, `status`, ...).
    pub hook_requests: Family<Labels, Counter>,
    /// `kiln_hook_duration_seconds{rule}`: how long a hook took to answer.
    pub hook_duration: Family<Labels, Histogram, fn() -> Histogram>,
    /// `kiln_undecodable_objects_total{gvk}`: objects left out of the cache
    /// because they cannot be decoded (each counted once).
    pub undecodable: Family<Labels, Counter>,
    /// `kiln_reconcile_failures_total{rule,reason}`: reconciles that ended
    /// failed, by condition reason (visible even where the primary's schema
    /// has no conditions).
    pub reconcile_failures: Family<Labels, Counter>,
    /// `kiln_watches`
    pub watches: Gauge,
    /// `kiln_cached_objects{gvk}`
    pub cached_objects: Family<Labels, Gauge>,
    /// `kiln_cached_bytes{gvk}`: the cached objects' compact form (JSON text, namespace, name, labels).
    pub cached_bytes: Family<Labels, Gauge>,
    /// `kiln_rule_waiting_for_kinds{rule}`: 1 while a rule waits for a CRD.
    pub waiting_for_kinds: Family<Labels, Gauge>,
    /// `kiln_rule_refused{rule}`: 1 while a rule is refused (its status does not fit the primary's schema).
    pub rule_refused: Family<Labels, Gauge>,
    /// `kiln_rule_edit_refused{rule}`: 1 while a rule's latest version is
    /// refused on reload (invalid, or the cluster does not let it run) and
    /// its last good version, if any, keeps running.
    pub rule_edit_refused: Family<Labels, Gauge>,
    /// `kiln_primaries{rule,ready}`: primaries of a rule by their `Ready` condition's status.
    pub primaries: Family<Labels, Gauge>,
    /// `kiln_rules_loaded`
    pub rules_loaded: Gauge,
    /// `kiln_rules_reload_total{result="success"|"error"|"refused"}`:
    /// `error`, invalid; `refused`, valid but the cluster does not let it
    /// run (counted once per distinct answer while it waits).
    pub reload_total: Family<Labels, Counter>,
    /// `kiln_rules_pending`: 1 while a valid rule set waits for the cluster
    /// to let it run (the last good set keeps running meanwhile).
    pub rules_pending: Gauge,
    /// `kiln_rules_last_good_load_timestamp_seconds`
    pub last_good_load: Gauge<f64, AtomicU64>,
    /// `kiln_leader` (1 while this replica leads or runs without election).
    pub leader: Gauge,
    /// `kiln_shard_members`: live members of the shard group (sharded runs).
    pub shard_members: Gauge,
    /// `kiln_shard_buckets`: buckets (of 64) this replica holds.
    pub shard_buckets: Gauge,
    /// `kiln_shard_primaries`: primaries in this replica's share.
    pub shard_primaries: Gauge,
    /// `kiln_shard_handovers_total{direction="in"|"out"}`: buckets taken over and handed away.
    pub shard_handovers: Family<Labels, Counter>,
    /// `kiln_shard_server_filtered{gvk}`: 1 when the API server applied the
    /// shard selector on the last list of the kind (KEP-5866), 0 when it
    /// ignored it (kiln's filter at ingest did the work).
    pub shard_server_filtered: Family<Labels, Gauge>,
    /// `kiln_shard_dropped_objects_total{gvk}`: objects received that are
    /// not in this replica's share (dropped at ingest).
    pub shard_dropped: Family<Labels, Counter>,
    /// `kiln_shard_rescopes_total`: times the caches were listed again for
    /// a new share, or after this replica's Lease was lost.
    pub shard_rescopes: Counter,
    /// `kiln_shard_put_off_reconciles_total`: reconciles of a primary in a
    /// bucket this replica holds, put off (and retried) because its Lease
    /// renew was late.
    pub shard_put_off: Counter,
    /// `kiln_shard_lookups_total`: children looked up on the API server
    /// before being written, because the cache left out (as another
    /// replica's) an object of their name.
    pub shard_lookups: Counter,
    /// `kiln_conversion_reviews_total{crd,result}`: ConversionReviews the
    /// webhook answered, by CRD (left out when the request names none kiln
    /// knows) and result (`success`, `failure`).
    pub conversion_reviews: Family<Labels, Counter>,
    /// `kiln_conversion_objects_total{crd}`: objects those reviews carried.
    pub conversion_objects: Family<Labels, Counter>,
    /// `kiln_conversion_duration_seconds{crd}`: from a review's request
    /// headers to its answer ready to send.
    pub conversion_duration: Family<Labels, Histogram, fn() -> Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// `kiln_rules_reload_total{result}` so far (`success`, `error` or `refused`).
    pub fn reloads(&self, result: &str) -> u64 {
        self.reload_total
            .get_or_create(&label("result", result))
            .get()
    }

    /// All metrics, registered.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let m = Self {
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_time: Family::new_with_constructor(histogram),
            active_workers: Family::default(),
            queue_depth: Family::default(),
            queue_adds: Family::default(),
            queue_duration: Family::new_with_constructor(queue_histogram),
            queue_retries: Family::default(),
            apply_total: Family::default(),
            writes: Family::default(),
            budget_exhausted: Family::default(),
            hook_requests: Family::default(),
            hook_duration: Family::new_with_constructor(histogram),
            undecodable: Family::default(),
            watches: Gauge::default(),
            cached_objects: Family::default(),
            cached_bytes: Family::default(),
            waiting_for_kinds: Family::default(),
            rule_refused: Family::default(),
            rule_edit_refused: Family::default(),
            primaries: Family::default(),
            reconcile_failures: Family::default(),
            rules_loaded: Gauge::default(),
            reload_total: Family::default(),
            rules_pending: Gauge::default(),
            last_good_load: Gauge::default(),
            leader: Gauge::default(),
            shard_members: Gauge::default(),
            shard_buckets: Gauge::default(),
            shard_primaries: Gauge::default(),
            shard_handovers: Family::default(),
            shard_server_filtered: Family::default(),
            shard_dropped: Family::default(),
            shard_rescopes: Counter::default(),
            shard_put_off: Counter::default(),
            shard_lookups: Counter::default(),
            conversion_reviews: Family::default(),
            conversion_objects: Family::default(),
            conversion_duration: Family::new_with_constructor(conversion_histogram),
            registry: Registry::default(),
        };
        m.register_controller_runtime(&mut registry);
        m.register_writes(&mut registry);
        m.register_cache(&mut registry);
        m.register_hooks(&mut registry);
        m.register_rules(&mut registry);
        m.register_election(&mut registry);
        m.register_conversion(&mut registry);
        Self { registry, ..m }
    }

    /// controller-runtime's reconcile and work-queue metrics, under its names.
    fn register_controller_runtime(&self, registry: &mut Registry) {
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            self.reconcile_total.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            self.reconcile_errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            self.reconcile_time.clone(),
        );
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            self.active_workers.clone(),
        );
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            self.queue_depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            self.queue_adds.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            self.queue_duration.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            self.queue_retries.clone(),
        );
    }

    /// What reconciles send to the API server.
    fn register_writes(&self, registry: &mut Registry) {
        registry.register(
            "kiln_apply",
            "Server-side applies of children per rule and result",
            self.apply_total.clone(),
        );
        registry.register(
            "kiln_writes",
            "Writes sent to the API server per rule and verb (apply, patch, status, delete)",
            self.writes.clone(),
        );
        registry.register(
            "kiln_write_budget_exhausted",
            "Times a primary's children were rewritten too often and kiln paused its writes",
            self.budget_exhausted.clone(),
        );
    }

    /// The calls of rules' hooks.
    fn register_hooks(&self, registry: &mut Registry) {
        registry.register(
            "kiln_hook_requests",
            "Calls of a rule's hook per rule and result (ok, or the error's class)",
            self.hook_requests.clone(),
        );
        registry.register(
            "kiln_hook_duration_seconds",
            "How long a rule's hook took to answer (or fail)",
            self.hook_duration.clone(),
        );
    }

    /// What the caches hold and leave out.
    fn register_cache(&self, registry: &mut Registry) {
        registry.register(
            "kiln_undecodable_objects",
            "Objects kiln cannot decode (too deeply nested), left out of its cache",
            self.undecodable.clone(),
        );
        registry.register(
            "kiln_watches",
            "Watches running (one per kind, shared by all rules)",
            self.watches.clone(),
        );
        registry.register(
            "kiln_cached_objects",
            "Objects held in the cache per kind",
            self.cached_objects.clone(),
        );
        registry.register(
            "kiln_cached_bytes",
            "Bytes of the cached objects' strings per kind: compact JSON text, namespace, name and labels (the fixed record of each object not counted)",
            self.cached_bytes.clone(),
        );
    }

    /// How each rule is doing (waiting, failing, refused, its primaries) and
    /// how the rule set loads.
    fn register_rules(&self, registry: &mut Registry) {
        registry.register(
            "kiln_rule_waiting_for_kinds",
            "1 while a rule waits for kinds the API server does not serve",
            self.waiting_for_kinds.clone(),
        );
        registry.register(
            "kiln_reconcile_failures",
            "Reconciles that ended failed, by condition reason",
            self.reconcile_failures.clone(),
        );
        registry.register(
            "kiln_rule_refused",
            "1 while a rule is refused because the primary's status schema does not declare what it writes",
            self.rule_refused.clone(),
        );
        registry.register(
            "kiln_rule_edit_refused",
            "1 while a rule's latest version is refused on reload (its last good version keeps running)",
            self.rule_edit_refused.clone(),
        );
        registry.register(
            "kiln_primaries",
            "Primaries of each rule by the status of their Ready condition (True, False, Unknown), as kiln last composed it",
            self.primaries.clone(),
        );
        registry.register(
            "kiln_rules_loaded",
            "Rules in the running rule set",
            self.rules_loaded.clone(),
        );
        registry.register(
            "kiln_rules_reload",
            "Rule set reloads per result",
            self.reload_total.clone(),
        );
        registry.register(
            "kiln_rules_pending",
            "1 while a valid rule set waits for the cluster to let it run (kinds, status schema, permissions)",
            self.rules_pending.clone(),
        );
        registry.register(
            "kiln_rules_last_good_load_timestamp_seconds",
            "Unix time of the last rule set that loaded",
            self.last_good_load.clone(),
        );
    }

    /// What the CRD conversion webhook answers.
    fn register_conversion(&self, registry: &mut Registry) {
        registry.register(
            "kiln_conversion_reviews",
            "ConversionReviews the conversion webhook answered, per CRD and result",
            self.conversion_reviews.clone(),
        );
        registry.register(
            "kiln_conversion_objects",
            "Objects in the ConversionReviews the conversion webhook answered, per CRD",
            self.conversion_objects.clone(),
        );
        registry.register(
            "kiln_conversion_duration_seconds",
            "Time from a ConversionReview's request headers to its answer, per CRD",
            self.conversion_duration.clone(),
        );
    }

    /// Leadership and the shard group.
    fn register_election(&self, registry: &mut Registry) {
        registry.register(
            "kiln_leader",
            "1 while this replica is the leader (or runs without leader election)",
            self.leader.clone(),
        );
        registry.register(
            "kiln_shard_members",
            "Live members of the shard group, this replica included (0 unless sharded)",
            self.shard_members.clone(),
        );
        registry.register(
            "kiln_shard_buckets",
            "Buckets (of 64) this replica holds (0 unless sharded)",
            self.shard_buckets.clone(),
        );
        registry.register(
            "kiln_shard_primaries",
            "Primaries in this replica's share (0 unless sharded)",
            self.shard_primaries.clone(),
        );
        registry.register(
            "kiln_shard_handovers",
            "Buckets this replica took over (in) and handed away (out)",
            self.shard_handovers.clone(),
        );
        registry.register(
            "kiln_shard_server_filtered",
            "1 when the API server applied the shard selector on the kind's last list (KEP-5866), 0 when it ignored it",
            self.shard_server_filtered.clone(),
        );
        registry.register(
            "kiln_shard_dropped_objects",
            "Objects received that are not in this replica's share, dropped at ingest",
            self.shard_dropped.clone(),
        );
        registry.register(
            "kiln_shard_rescopes",
            "Times the caches were listed again for a new share, or after the Lease was lost",
            self.shard_rescopes.clone(),
        );
        registry.register(
            "kiln_shard_put_off_reconciles",
            "Reconciles of a primary in a bucket this replica holds, put off and retried because its Lease renew was late",
            self.shard_put_off.clone(),
        );
        registry.register(
            "kiln_shard_lookups",
            "Children looked up on the API server before being written, because the cache left out (as another replica's) an object of their name",
            self.shard_lookups.clone(),
        );
    }

    /// A hook of `rule` was called: its `result` and how long it took.
    pub fn hook_called(&self, rule: &str, result: &str, took: std::time::Duration) {
        self.hook_requests
            .get_or_create(&labels2(("rule", rule), ("result", result)))
            .inc();
        self.hook_duration
            .get_or_create(&label("rule", rule))
            .observe(took.as_secs_f64());
    }

    /// A write of `verb` is sent for `rule` (`kiln_writes_total`).
    pub fn wrote(&self, rule: &str, verb: &str) {
        self.writes
            .get_or_create(&labels2(("rule", rule), ("verb", verb)))
            .inc();
    }

    /// One ConversionReview answered: of `objects` objects of the CRD `crd`
    /// (none when the request named no kind kiln converts), in `seconds`.
    pub fn converted(&self, crd: Option<&str>, ok: bool, objects: usize, seconds: f64) {
        let crd: Labels = crd.map(|c| label("crd", c)).unwrap_or_default();
        let result = if ok { "success" } else { "failure" };
        let mut with_result = crd.clone();
        with_result.push(("result", result.to_string()));
        self.conversion_reviews.get_or_create(&with_result).inc();
        self.conversion_objects
            .get_or_create(&crd)
            .inc_by(u64::try_from(objects).unwrap_or(u64::MAX));
        self.conversion_duration
            .get_or_create(&crd)
            .observe(seconds);
    }

    /// Times one reconcile of the rule with these `controller` labels:
    /// counted as an active worker until dropped, then observed in
    /// `controller_runtime_reconcile_time_seconds` (also when the
    /// reconcile is cancelled).
    pub fn reconcile_timer(&self, controller: &Labels) -> ReconcileTimer {
        let active = self.active_workers.get_or_create(controller).clone();
        active.inc();
        ReconcileTimer {
            time: self.reconcile_time.get_or_create(controller).clone(),
            active,
            started: std::time::Instant::now(),
        }
    }

    /// The exposition text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// One reconcile being timed: see [`Metrics::reconcile_timer`].
pub struct ReconcileTimer {
    time: Histogram,
    active: Gauge,
    started: std::time::Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.time.observe(self.started.elapsed().as_secs_f64());
        self.active.dec();
    }
}

/// `controller=<rule>` labels.
pub fn controller(rule: &str) -> Labels {
    vec![("controller", rule.to_string())]
}

/// `name=<rule>,controller=<rule>` labels (work-queue metrics).
pub fn queue(rule: &str) -> Labels {
    vec![("name", rule.to_string()), ("controller", rule.to_string())]
}

/// One label.
pub fn label(key: &'static str, value: &str) -> Labels {
    vec![(key, value.to_string())]
}

/// Two labels.
pub fn labels2(a: (&'static str, &str), b: (&'static str, &str)) -> Labels {
    vec![(a.0, a.1.to_string()), (b.0, b.1.to_string())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_controller_runtime_names() {
        let m = Metrics::new();
        m.reconcile_total
            .get_or_create(&labels2(("controller", "webapp"), ("result", "success")))
            .inc();
        m.reconcile_time
            .get_or_create(&controller("webapp"))
            .observe(0.02);
        m.queue_depth.get_or_create(&queue("webapp")).set(3);
        m.rules_loaded.set(4);
        let text = m.encode();
        for want in [
            "controller_runtime_reconcile_total{controller=\"webapp\",result=\"success\"} 1",
            "controller_runtime_reconcile_time_seconds_bucket{le=\"0.025\",controller=\"webapp\"} 1",
            "workqueue_depth{name=\"webapp\",controller=\"webapp\"} 3",
            "kiln_rules_loaded 4",
        ] {
            assert!(text.contains(want), "missing `{want}` in:\n{text}");
        }
    }

    #[test]
    fn a_reconcile_is_an_active_worker_until_its_timer_drops() {
        let m = Metrics::new();
        let timer = m.reconcile_timer(&controller("webapp"));
        assert!(
            m.encode()
                .contains("controller_runtime_active_workers{controller=\"webapp\"} 1")
        );
        drop(timer);
        let text = m.encode();
        assert!(text.contains("controller_runtime_active_workers{controller=\"webapp\"} 0"));
        assert!(
            text.contains(
                "controller_runtime_reconcile_time_seconds_count{controller=\"webapp\"} 1"
            ),
            "{text}"
        );
        m.wrote("webapp", "status");
        assert!(
            m.encode()
                .contains("kiln_writes_total{rule=\"webapp\",verb=\"status\"} 1")
        );
    }
}
