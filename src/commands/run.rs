//! `kiln run`: the operator.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use kiln::engine::{Engine, Options};
use kiln::lease;
use kiln::metrics::Metrics;
use kiln::reload::{
    self, Checker, CurrentRules, Files, Follower, Loader, Refusal, ReloadOptions, RuleResources,
    RuleSource, RulesConfigMap, Saved, StatusWriter, Teller,
};
use kiln::request_timeout;
use kiln::serve::{self, Probe};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::oneshot;

use crate::cli::{ElectionArgs, ReloadArgs, RunArgs};

/// Loads the rules, serves metrics and probes, and runs (reloading rules as
/// they change, and only while leading when leader election is on) until a
/// signal; then shuts down gracefully.
pub fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let election = &args.election;
    let lease = if election.leader_elect || election.shards {
        Some(lease_timing(election)?)
    } else {
        None
    };
    let conversion = conversion_settings(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = client(
            args.client.kubeconfig.as_deref(),
            args.client.context.as_deref(),
            args.client.request_timeout.0,
        )
        .await?;
        let (mut source, status) = rule_source(args, &client);
        let metrics = Arc::new(Metrics::new());
        let probe = Arc::new(RunProbe::new(metrics.clone()));
        let saved = saved_rules(args, &client);
        let last = saved.read(&source_name(args)).await;
        let first = source.first().await;
        let (mut loader, resumed) = match first_loader(args, &client, &probe, first, &last)? {
            Ok(started) => started,
            Err(refusal) => return Ok(first_load_refused(&refusal, &last)),
        };
        loader = with_status(loader, &client, &probe, status);
        loader = keeping(loader, args, &client, &probe, (saved, &last));
        let active = Active {
            client: client.clone(),
            options: with_egress(engine_options(args)).await,
            scope: None,
            rules: loader.rules(),
            metrics,
            prune_on_rule_removal: args.reload.prune_on_rule_removal,
        };
        let serving = Serving {
            metrics: args.serving.metrics_bind_address.0,
            health: args.serving.health_probe_bind_address.0,
            conversion,
        };
        let webhook = serving.start(&probe, &client, &active).await?;
        if let Some(first) = resumed {
            // Started on the saved set: the source's rules are accepted over
            // it, rule by rule, before any engine starts.
            loader.settle(first).await;
        }
        // One loader for the whole process, leading or not: the current
        // rules are the last accepted ones whenever an engine starts.
        let loading = tokio::spawn(loader.run(source, std::future::pending()));
        let (stop_rx, signals) = stop_on_signal(webhook);
        match lease {
            None => {
                probe.leader.set(1);
                active.run_until(&probe, stop_rx).await;
            }
            Some(times) if election.shards => {
                run_sharded(election, client, times, active, &probe, stop_rx).await?;
            }
            Some(times) => {
                run_with_election(election, client, times, active, &probe, stop_rx).await?;
            }
        }
        loading.abort();
        // Stopped by a signal: the webhook's drain ends within its grace.
        if tokio::time::timeout(WEBHOOK_DRAIN + Duration::from_secs(1), signals)
            .await
            .is_err()
        {
            tracing::warn!("the conversion webhook did not stop in time");
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The conversion webhook's settings (`None`: not served), pointing the
/// CRDs kiln owns as its own field manager's.
fn conversion_settings(args: &RunArgs) -> anyhow::Result<Option<kiln::api::webhook::Settings>> {
    let mut conversion = super::webhook::settings(&args.conversion, own_namespace())?;
    if let Some(settings) = &mut conversion {
        settings.crd_manager = kiln::api::install::manager_of(&args.engine.field_manager);
    }
    Ok(conversion)
}

/// Waits for a shutdown signal in the background: then tells the engine to
/// stop and drains the conversion webhook (no new connection, the reviews in
/// flight answered: the API server's list with them).
fn stop_on_signal(
    webhook: Option<kiln::api::webhook::Webhook>,
) -> (
    oneshot::Receiver<()>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let signals = tokio::spawn(async move {
        let result = super::shutdown_signal().await;
        let _ = stop_tx.send(());
        if let Some(serving) = webhook {
            if serving.drain(WEBHOOK_DRAIN).await {
                tracing::info!("the conversion webhook answered every review in flight");
            } else {
                tracing::warn!(grace = ?WEBHOOK_DRAIN, "reviews still in flight when the conversion webhook stopped");
            }
        }
        result
    });
    (stop_rx, signals)
}

/// What the first load found in the source, when the loader started on
/// the saved set instead: accepted over it once the webhook serves.
type Resumed = Option<Result<reload::Version, String>>;

/// The loader of the first rules: on the accepted set saved in the cluster
/// when there is one (the source's version is then accepted over it), else
/// on the source's version (`Ok(Err)` when it is refused: nothing to run).
/// It checks each later version against the cluster.
fn first_loader(
    args: &RunArgs,
    client: &Client,
    probe: &Arc<RunProbe>,
    first: Result<reload::Version, reload::source::SourceError>,
    last: &Result<Option<reload::Accepted>, reload::saved::SavedError>,
) -> anyhow::Result<Result<(Loader, Resumed), Refusal>> {
    let teller = || Teller::new(client, args.source.rules_configmap.clone(), probe.speaks());
    let mut options = reload_options(&args.reload);
    options.serves_conversion = args.conversion.conversion_addr.0.is_some();
    // Deleting every Rule resource is a choice, not a vanished file.
    options.allow_empty |= args.source.rules_from_cluster;
    let checker = || {
        Checker::new(client.clone(), args.engine.namespaces.clone())
            .installing_as(&kiln::api::install::manager_of(&args.engine.field_manager))
    };
    let metrics = probe.metrics.clone();
    if let Ok(Some(saved)) = last {
        match Loader::resume(saved.clone(), options.clone(), metrics.clone(), teller()) {
            Ok(loader) => {
                let first = first.map_err(|e| e.to_string());
                return Ok(Ok((loader.checking(checker()), Some(first))));
            }
            Err(refusal) => {
                for d in refusal.diagnostics() {
                    tracing::warn!(location = %d.location(), "{}", d.message);
                }
                tracing::warn!("the saved accepted rules no longer compile: not used");
            }
        }
    }
    let first = first?;
    Ok(Loader::first(first, options, metrics, teller()).map(|l| (l.checking(checker()), None)))
}

/// The loader, writing the status of the Rule resources when they are the
/// source (`status`).
fn with_status(
    loader: Loader,
    client: &Client,
    probe: &Arc<RunProbe>,
    status: Option<StatusWriter>,
) -> Loader {
    match status {
        Some(status) => {
            let census = probe.census(loader.rules());
            let status = status.counting(census).telling(client, probe.speaks());
            loader.reporting(status)
        }
        None => loader,
    }
}

/// The loader, saving each accepted set in `saved` (holding `last` now)
/// and letting go of the finalizers it owes while this replica runs the
/// engine, and installing the CRDs a reload needs only then.
fn keeping(
    loader: Loader,
    args: &RunArgs,
    client: &Client,
    probe: &Arc<RunProbe>,
    (saved, last): (
        Saved,
        &Result<Option<reload::Accepted>, reload::saved::SavedError>,
    ),
) -> Loader {
    let releaser = reload::release::Releaser::new(client.clone(), args.engine.namespaces.clone());
    loader
        .saving(saved, source_name(args), probe.speaks(), last)
        .releasing(releaser)
        .leading(probe.leads())
}

/// Where the accepted rules are saved: beside the Lease, named after it.
fn saved_rules(args: &RunArgs, client: &Client) -> Saved {
    let (namespace, _) = lease_place(&args.election);
    Saved::new(client.clone(), &namespace, &args.election.leader_elect_id)
}

/// The rule source and the namespaces it runs on, as the saved set names
/// them: a set saved from another source, or checked for other namespaces
/// (permissions, kinds), is not run.
fn source_name(args: &RunArgs) -> String {
    let source = match (&args.source.rules[..], &args.source.rules_configmap) {
        _ if args.source.rules_from_cluster => "rules.kiln.dev".to_string(),
        ([], Some((ns, name))) => format!("configmap {ns}/{name}"),
        _ => "files".to_string(),
    };
    let mut namespaces = args.engine.namespaces.clone();
    namespaces.sort();
    match namespaces.as_slice() {
        [] => source,
        some => format!("{source} in namespaces {}", some.join(",")),
    }
}

/// The engine's settings from the command line.
fn engine_options(args: &RunArgs) -> Options {
    Options {
        field_manager: args.engine.field_manager.clone(),
        namespaces: args.engine.namespaces.clone(),
        concurrency: args.engine.concurrency,
        shutdown_grace: args.engine.shutdown_timeout,
        state_namespace: lease_place(&args.election).0,
        crd_manager: Some(kiln::api::install::manager_of(&args.engine.field_manager)),
        ..Options::default()
    }
}

/// `options` with external sources and hooks refused the cluster's API
/// server.
async fn with_egress(options: Options) -> Options {
    let api_server = kiln::external::api_server::addresses().await;
    Options {
        egress: kiln::egress::Client::new(kiln::egress::AddressPolicy::new(api_server)),
        ..options
    }
}

/// What a `kiln run` process serves besides the engine, each when asked for.
struct Serving {
    /// `/metrics`.
    metrics: Option<SocketAddr>,
    /// `/healthz` and `/readyz`.
    health: Option<SocketAddr>,
    /// The CRD conversion webhook.
    conversion: Option<kiln::api::webhook::Settings>,
}

impl Serving {
    /// Binds every listener asked for and starts serving; the conversion
    /// webhook's handle, to drain it at shutdown.
    async fn start(
        self,
        probe: &Arc<RunProbe>,
        client: &Client,
        active: &Active,
    ) -> anyhow::Result<Option<kiln::api::webhook::Webhook>> {
        for (what, addr) in [("metrics", self.metrics), ("health probes", self.health)] {
            if let Some(addr) = addr {
                let bound = bind(addr, probe.clone())
                    .await
                    .with_context(|| format!("serving {what} on {addr}"))?;
                tracing::info!(%bound, "serving {what}");
            }
        }
        let Some(settings) = self.conversion else {
            return Ok(None);
        };
        let (rules, metrics) = (active.rules.clone(), active.metrics.clone());
        let serving = kiln::api::webhook::start(client.clone(), settings, rules, metrics)
            .await
            .context("serving the conversion webhook")?;
        Ok(Some(serving))
    }
}

/// Where the rules are read from: the Rule resources, else the files, else
/// the ConfigMap through the API; with the Rule resources, their status writer.
fn rule_source(args: &RunArgs, client: &Client) -> (Box<dyn RuleSource>, Option<StatusWriter>) {
    if args.source.rules_from_cluster {
        let source = RuleResources::new(client.clone());
        let status = StatusWriter::new(client.clone(), source.offered());
        return (Box::new(source), Some(status));
    }
    let source: Box<dyn RuleSource> = match (&args.source.rules[..], &args.source.rules_configmap) {
        ([], Some((ns, name))) => Box::new(RulesConfigMap::new(client.clone(), ns, name)),
        (paths, _) => Box::new(Files::new(paths.to_vec(), RELOAD_DEBOUNCE, RELOAD_POLL)),
    };
    (source, None)
}

/// How long the conversion webhook answers the reviews in flight after a
/// shutdown signal.
const WEBHOOK_DRAIN: Duration = Duration::from_secs(10);

/// A burst of file events is one reload once quiet this long.
const RELOAD_DEBOUNCE: Duration = Duration::from_millis(300);
/// Rule files are read again this often even without events.
const RELOAD_POLL: Duration = Duration::from_secs(10);

/// Everything needed to (re)start the engine when this replica leads.
struct Active {
    client: Client,
    options: Options,
    /// This replica's share, when sharded.
    scope: Option<Arc<kiln::shard::scope::Scope>>,
    /// The last good rules: every engine start reads them.
    rules: CurrentRules,
    /// The process's metrics, which every engine counts in.
    metrics: Arc<Metrics>,
    prune_on_rule_removal: bool,
}

impl Active {
    /// Runs the engine until `stop` resolves, then stops it gracefully.
    async fn run_until(&self, probe: &RunProbe, stop: impl Future<Output = impl Sized>) {
        let (engine, following, stop_following) = self.start(probe, None);
        stop.await;
        tracing::info!("shutting down: letting in-flight reconciles finish");
        let _ = stop_following.send(());
        let _ = following.await;
        engine.shutdown().await;
        probe.set_engine(None);
    }

    /// Starts the engine on the current rules (every write checked by
    /// `fence`, when given), following their changes.
    fn start(
        &self,
        probe: &RunProbe,
        fence: Option<kiln::engine::Fence>,
    ) -> (
        Arc<Engine>,
        tokio::task::JoinHandle<()>,
        oneshot::Sender<()>,
    ) {
        let engine = Arc::new(Engine::sharded(
            self.client.clone(),
            self.options.clone(),
            self.scope.clone(),
            self.metrics.clone(),
        ));
        if let Some(fence) = fence {
            engine.set_fence(fence);
        }
        // A rule defining an API starts once the loader has installed its
        // CRD again for this engine (and never when it is refused).
        let follower = Follower::start(engine.clone(), &self.rules, self.prune_on_rule_removal);
        probe.set_engine(Some(engine.clone()));
        let names: Vec<&str> = follower
            .running()
            .rules
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        tracing::info!(rules = ?names, version = kiln::version::KILN, "kiln running");
        let (tx, rx) = oneshot::channel::<()>();
        let following = tokio::spawn(follower.run(async move {
            let _ = rx.await;
        }));
        (engine, following, tx)
    }
}

/// Leads or waits: runs the engine only while holding the Lease; stops
/// writing at once when the Lease is lost; releases it on shutdown so a
/// standby takes over without waiting for it to expire.
async fn run_with_election(
    args: &ElectionArgs,
    client: Client,
    timing: lease::Timing,
    active: Active,
    probe: &RunProbe,
    mut stop: oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    let (namespace, identity) = lease_place(args);
    let mut elector =
        lease::Elector::new(client, &namespace, &args.leader_elect_id, &identity, timing);
    tracing::info!(lease = %format!("{namespace}/{}", args.leader_elect_id), %identity, "waiting to lead");
    loop {
        tokio::select! {
            _ = &mut stop => break,
            () = elector.acquire() => {}
        }
        tracing::info!(%identity, "leading");
        probe.leader.set(1);
        // No write unless the Lease is known held right now.
        let (engine, following, stop_following) = active.start(probe, Some(elector.fence()));
        let lost = tokio::select! {
            _ = &mut stop => None,
            lost = elector.hold() => Some(lost),
        };
        let _ = stop_following.send(());
        if let Some(why) = lost {
            // Another replica may already be writing: stop at once.
            tracing::error!(%identity, ?why, "lost the lease: stopping every rule now");
            following.abort();
            engine.abort();
            probe.leader.set(0);
            probe.set_engine(None);
            continue;
        }
        let _ = following.await;
        engine.shutdown().await;
        probe.set_engine(None);
        break;
    }
    probe.leader.set(0);
    match elector.release().await {
        Ok(()) => tracing::info!("released the lease"),
        Err(error) => {
            tracing::warn!(%error, "could not release the lease; a standby takes over when it expires")
        }
    }
    Ok(())
}

/// Shares the primaries with the other members of the shard group: joins
/// (its own Lease), runs the engine on its share from the start, hands
/// buckets over as members come and go, and on shutdown stops writing,
/// leaves the group (so the others take over at once), then stops.
async fn run_sharded(
    args: &ElectionArgs,
    client: Client,
    timing: lease::Timing,
    mut active: Active,
    probe: &RunProbe,
    mut stop: oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    use kiln::shard::{Shard, member::Member, scope::Scope};
    let (namespace, _) = lease_place(args);
    let identity = shard_identity(args);
    // `--shard-identity` is checked as it is parsed; `$POD_NAME` or the
    // hostname here, rather than retrying a join the API server refuses.
    kiln::rules::names::dns_subdomain(&identity).map_err(|why| {
        anyhow::anyhow!(
            "the shard identity `{identity}` ($POD_NAME, else hostname and pid) \
             cannot name a Lease: it {why}; set --shard-identity"
        )
    })?;
    let shard = Shard::counting(
        timing.renew_deadline,
        kiln::shard::Counters::of(&active.metrics),
    );
    let retry = timing.retry_period;
    let mut member = Member::new(
        client,
        &namespace,
        &args.shard_group,
        &identity,
        timing,
        shard.clone(),
    );
    loop {
        match member.join().await {
            Ok(()) => break,
            Err(error) => tracing::warn!(%error, "joining the shard group failed; retrying"),
        }
        tokio::select! {
            _ = &mut stop => return Ok(()),
            () = tokio::time::sleep(retry) => {}
        }
    }
    tracing::info!(group = %args.shard_group, lease = %format!("{namespace}/{identity}"), "joined the shard group");
    active.scope = Some(Arc::new(Scope::new(shard.clone())));
    probe.set_shard(Some(shard));
    probe.leader.set(1);
    let (engine, following, stop_following) = active.start(probe, None);
    let (left_tx, left_rx) = oneshot::channel::<()>();
    let caches: Arc<dyn kiln::shard::member::Caches> = Arc::new(EngineCaches(engine.clone()));
    let membership = tokio::spawn(member.run(caches, async move {
        let _ = left_rx.await;
    }));
    let _ = (&mut stop).await;
    tracing::info!(
        "shutting down: handing the share over, then letting in-flight reconciles finish"
    );
    let _ = left_tx.send(());
    let _ = membership.await;
    let _ = stop_following.send(());
    let _ = following.await;
    engine.shutdown().await;
    probe.set_engine(None);
    probe.leader.set(0);
    Ok(())
}

/// The engine's caches, as the shard handover sees them.
struct EngineCaches(Arc<Engine>);

impl kiln::shard::member::Caches for EngineCaches {
    fn rescope(&self) -> u64 {
        self.0.informers().rescope()
    }

    fn covered_since(&self, epoch: u64) -> bool {
        self.0.informers().covered_since(epoch)
    }

    fn resync(&self) {
        self.0.resync_all();
    }
}

fn lease_timing(args: &ElectionArgs) -> anyhow::Result<lease::Timing> {
    let timing = lease::Timing {
        lease_duration: args.leader_elect_lease_duration,
        renew_deadline: args.leader_elect_renew_deadline,
        retry_period: args.leader_elect_retry_period,
    };
    timing.check().map_err(|e| anyhow::anyhow!(e))?;
    Ok(timing)
}

/// The namespace of the Leases and this replica's identity.
fn lease_place(args: &ElectionArgs) -> (String, String) {
    let namespace = args
        .leader_elect_namespace
        .clone()
        .unwrap_or_else(own_namespace);
    (namespace, identity())
}

fn own_namespace() -> String {
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "default".to_string())
}

/// A shard member's identity: `--shard-identity`, else `$POD_NAME` (unique
/// in the cluster's namespace, and stable across a container's restarts),
/// else the hostname and the pid. Leader election keeps the pid in it
/// either way.
fn shard_identity(args: &ElectionArgs) -> String {
    args.shard_identity
        .clone()
        .or_else(|| std::env::var("POD_NAME").ok().filter(|n| !n.is_empty()))
        .unwrap_or_else(identity)
}

fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| {
            std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|_| "kiln".to_string());
    format!("{host}-{}", std::process::id())
}

fn reload_options(args: &ReloadArgs) -> ReloadOptions {
    ReloadOptions {
        prune_on_rule_removal: args.prune_on_rule_removal,
        allow_empty: args.allow_empty_rules,
        ..ReloadOptions::default()
    }
}

/// What `/metrics` and `/readyz` report while running.
struct RunProbe {
    engine: Mutex<Option<Arc<Engine>>>,
    shard: Mutex<Option<Arc<kiln::shard::Shard>>>,
    metrics: Arc<Metrics>,
    /// `kiln_leader`.
    leader: prometheus_client::metrics::gauge::Gauge,
}

impl RunProbe {
    fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            engine: Mutex::default(),
            shard: Mutex::default(),
            leader: metrics.leader.clone(),
            metrics,
        }
    }

    /// Whether this replica speaks for the group (Events about the rules):
    /// while it runs an engine that runs the singletons.
    fn speaks(self: &Arc<Self>) -> reload::tell::Speaks {
        let probe = Arc::downgrade(self);
        Arc::new(move || {
            probe
                .upgrade()
                .and_then(|p| p.engine())
                .is_some_and(|e| e.runs_singletons())
        })
    }

    /// Whether this replica runs an engine (leads, or is a shard member):
    /// it writes the CRDs a reload needs; a standby writes none.
    fn leads(self: &Arc<Self>) -> reload::tell::Speaks {
        let probe = Arc::downgrade(self);
        Arc::new(move || probe.upgrade().and_then(|p| p.engine()).is_some())
    }

    /// Each running rule's primaries and children, while this replica runs
    /// the engine on every primary (not sharded: a member sees its share).
    fn census(self: &Arc<Self>, rules: CurrentRules) -> reload::census::Census {
        let probe = Arc::downgrade(self);
        Arc::new(move || {
            let probe = probe.upgrade()?;
            if probe.shard().is_some() {
                return None;
            }
            let engine = probe.engine()?;
            let names: Vec<String> = rules.get().rules.iter().map(|r| r.name.clone()).collect();
            Some(reload::census::count(&engine, &names))
        })
    }

    fn set_engine(&self, engine: Option<Arc<Engine>>) {
        *self
            .engine
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = engine;
    }

    fn set_shard(&self, shard: Option<Arc<kiln::shard::Shard>>) {
        *self
            .shard
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = shard;
    }

    fn shard(&self) -> Option<Arc<kiln::shard::Shard>> {
        self.shard
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn engine(&self) -> Option<Arc<Engine>> {
        self.engine
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Probe for RunProbe {
    fn metrics(&self) -> String {
        let engine = self.engine();
        let m = &self.metrics;
        match &engine {
            // The sampled gauges (watches, cached objects) brought up to date.
            Some(e) => drop(e.metrics()),
            None => {
                m.watches.set(0);
            }
        }
        if let Some(shard) = self.shard() {
            m.shard_members
                .set(i64::try_from(shard.members()).unwrap_or(i64::MAX));
            m.shard_buckets.set(i64::from(shard.active().count_ones()));
            let owned = engine.as_ref().map_or(0, |e| e.primaries_owned());
            m.shard_primaries
                .set(i64::try_from(owned).unwrap_or(i64::MAX));
        }
        m.encode()
    }

    fn ready(&self) -> Result<(), String> {
        if let Some(shard) = self.shard() {
            shard.readiness()?;
        }
        match self.engine() {
            // A standby is ready: it is doing its job, which is to wait.
            None => Ok(()),
            Some(e) => e.readiness(),
        }
    }
}

async fn bind(addr: SocketAddr, probe: Arc<RunProbe>) -> std::io::Result<SocketAddr> {
    serve::spawn(addr, probe).await
}

/// Nothing valid to run and no accepted set saved: kiln does not start.
fn first_load_refused(
    refusal: &Refusal,
    last: &Result<Option<reload::Accepted>, reload::saved::SavedError>,
) -> ExitCode {
    match refusal {
        Refusal::Empty => eprintln!("{}", reload::empty_set()),
        Refusal::Invalid(diagnostics) => {
            for d in diagnostics {
                eprintln!("{d}");
            }
            eprintln!(
                "error: the rules are invalid ({} problems); nothing was started",
                diagnostics.len()
            );
        }
    }
    match last {
        Ok(_) => eprintln!("error: no accepted rules are saved in the cluster to run instead"),
        Err(error) => {
            eprintln!("error: the accepted rules saved in the cluster could not be read: {error}")
        }
    }
    ExitCode::from(1)
}

/// `--request-timeout`'s default, for commands without the flag.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(70);

/// A client for the cluster in `kubeconfig` (or in-cluster, `$KUBECONFIG`,
/// `~/.kube/config`), at `context` (or the current one), giving up a
/// request (not a watch) unanswered after `request_timeout`.
pub async fn client(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
    request_timeout: Option<Duration>,
) -> anyhow::Result<Client> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = match (kubeconfig, context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options).await?,
        (None, None) => kube::Config::infer()
            .await
            .context("no cluster configured (in-cluster, $KUBECONFIG or ~/.kube/config)")?,
    };
    Ok(request_timeout::client(config, request_timeout)?)
}
