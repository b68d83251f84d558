//! The benchmark driver (`make bench`): the `webapp` workload against kiln,
//! a hand-written kube-rs controller, a hand-written controller-runtime
//! controller and a plain client (the ceiling), one after another, each on a
//! fresh local control plane. What is measured and how: `tests/bench/README.md`.

mod audit;
mod ceiling;
mod cluster;
mod compare;
mod conversion;
mod observe;
mod procstat;
mod report;
mod rules;
mod scrape;
mod sharded;
mod webhook;
mod workload;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use kiln::controlplane::Binaries;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use tokio::process::{Child, Command};

use crate::ceiling::Phase;
use crate::cluster::Cluster;
use crate::observe::Observer;
use crate::report::{Figures, Machine, Report};
use crate::workload::{NAMESPACE, UPDATED_REPLICAS};

#[derive(Parser)]
#[command(about = "Benchmark kiln against hand-written controllers and the API server's ceiling")]
enum Cli {
    /// Runs the benchmark and writes results.md and results.json.
    Run(RunArgs),
    /// The rules axis: kiln, kube-rs and controller-runtime with R rules
    /// over N primaries and ten CRDs, for each R, then the cost of a kind
    /// (`rules.rs`); writes results-rules.md.
    Rules(rules::RulesArgs),
    /// Puts several runs' results.json side by side (one per N) and prints
    /// each contender's peak RSS per N and its cost per primary.
    Compare {
        /// results.json files of `bench run`.
        #[arg(required = true, num_args = 2..)]
        files: Vec<PathBuf>,
    },
    /// Lists N objects of a rule-defined API at the version that stores
    /// and at one kiln converts (`tests/bench/README.md`, "Conversion").
    Conversion(conversion::Args),
    /// One ConversionReview of N objects sent to kiln's webhook within its
    /// bounds (time, peak memory), and oversized ones refused
    /// (`tests/bench/README.md`, "Webhook").
    Webhook(webhook::Args),
    /// The webhook `bench webhook` measures (started by it).
    #[command(hide = true)]
    WebhookServe,
    /// The ceiling contender (started by `run`, one process per phase).
    Ceiling {
        /// Which writes to issue.
        #[arg(long, value_enum)]
        phase: Phase,
        /// Requests in flight at once.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// Server-side apply field manager.
        #[arg(long, default_value = "ceiling")]
        field_manager: String,
    },
}

#[derive(Parser)]
struct RunArgs {
    /// Number of WebApps.
    #[arg(long, default_value_t = 100)]
    n: usize,
    /// Workers per controller, requests in flight for the ceiling.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Resync period given to every controller (default 120 s + N/20 s). It
    /// must exceed the update phase plus the settle time plus the idle
    /// window, so that no resync falls into the idle window.
    #[arg(long)]
    resync_seconds: Option<u64>,
    /// Length of the idle window.
    #[arg(long, default_value_t = 60)]
    idle_seconds: u64,
    /// Contenders to run, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kiln,kiln-sharded,kube-rs,controller-runtime,ceiling"
    )]
    contenders: Vec<Contender>,
    /// Where results.md, results.json and the logs go.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// The kiln binary.
    #[arg(long, default_value = "target/release/kiln")]
    kiln: PathBuf,
    /// The kube-rs controller.
    #[arg(long, default_value = "target/release/examples/bench-kube-rs")]
    kube_rs: PathBuf,
    /// The controller-runtime controller.
    #[arg(long)]
    controller_runtime: Option<PathBuf>,
}

impl RunArgs {
    fn resync(&self) -> u64 {
        self.resync_seconds.unwrap_or(120 + self.n as u64 / 20)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Contender {
    Kiln,
    /// Three `kiln run --shards` replicas (`sharded.rs`).
    KilnSharded,
    KubeRs,
    ControllerRuntime,
    Ceiling,
}

impl Contender {
    fn name(self) -> &'static str {
        match self {
            Self::Kiln => "kiln",
            Self::KilnSharded => "kiln-sharded",
            Self::KubeRs => "kube-rs",
            Self::ControllerRuntime => "controller-runtime",
            Self::Ceiling => "ceiling",
        }
    }
}

/// Time settled after convergence and after the update before measuring on.
const SETTLE: Duration = Duration::from_secs(10);
/// How long past the resync period the resync window stays open.
const RESYNC_SLACK: Duration = Duration::from_secs(30);
/// The namespace a contender watches, alone, for its RSS with no primaries.
const EMPTY_NAMESPACE: &str = "bench-empty";
/// How long it runs there before its RSS is read.
const EMPTY_SETTLE: Duration = Duration::from_secs(15);

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // kube's client logs every 404/500 of the CRD-serving poll.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,kube_client=off")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match Cli::parse() {
            // Interrupted: dropping the run kills the contender (kill_on_drop)
            // and stops the control plane.
            Cli::Run(args) => tokio::select! {
                result = run(args) => result,
                _ = interrupted() => Err(anyhow::anyhow!("interrupted")),
            },
            Cli::Rules(args) => tokio::select! {
                result = rules::run(args) => result,
                _ = interrupted() => Err(anyhow::anyhow!("interrupted")),
            },
            Cli::Compare { files } => compare::run(&files),
            Cli::Conversion(args) => conversion::run(args).await,
            Cli::Webhook(args) => webhook::run(args).await,
            Cli::WebhookServe => webhook::serve().await,
            Cli::Ceiling {
                phase,
                concurrency,
                field_manager,
            } => ceiling::run(phase, concurrency, &field_manager).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let resync = args.resync();
    if resync <= SETTLE.as_secs() + args.idle_seconds + 10 {
        bail!("--resync-seconds must exceed the idle window plus 20 s");
    }
    for (contender, path) in [
        (Contender::Kiln, Some(&args.kiln)),
        (Contender::KubeRs, Some(&args.kube_rs)),
        (
            Contender::ControllerRuntime,
            args.controller_runtime.as_ref(),
        ),
    ] {
        let wanted = args.contenders.contains(&contender)
            || (contender == Contender::Kiln && args.contenders.contains(&Contender::KilnSharded));
        if wanted && !path.is_some_and(|p| p.is_file()) {
            bail!(
                "no binary for {} (have {path:?}); `make bench` builds them all",
                contender.name()
            );
        }
    }
    let binaries = Binaries::locate(&Binaries::default_source())?;
    std::fs::create_dir_all(&args.out)?;
    let mut report = Report {
        n: args.n,
        concurrency: args.concurrency,
        resync_seconds: resync,
        idle_seconds: args.idle_seconds,
        kubernetes: kubernetes_version(),
        machine: Machine::detect(),
        started: k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%d %H:%M UTC")
            .to_string(),
        contenders: Vec::new(),
    };
    for &contender in &args.contenders {
        eprintln!("bench: {} with N={} …", contender.name(), args.n);
        let figures = measure(contender, &args, &binaries)
            .await
            .with_context(|| format!("measuring {}", contender.name()))?;
        eprintln!(
            "bench: {}: converged in {}",
            contender.name(),
            figures
                .convergence_seconds
                .map_or_else(|| "— (did not)".into(), |s| format!("{s:.2} s"))
        );
        report.contenders.push(figures);
    }
    let markdown = report.markdown();
    std::fs::write(args.out.join("results.md"), &markdown)?;
    std::fs::write(
        args.out.join("results.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    println!("{markdown}");
    println!("Results in {}/results.{{md,json}}.\n", args.out.display());
    print!("{}", report.ratios());
    Ok(())
}

fn kubernetes_version() -> String {
    let versions = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/controlplane/versions.env");
    let text = std::fs::read_to_string(versions).unwrap_or_default();
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or("?")
            .trim()
            .to_string()
    };
    format!("{} (etcd {})", get("K8S_VERSION"), get("ETCD_VERSION"))
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Bytes in MiB.
fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The process being measured (none for the ceiling between its phases).
struct Measured {
    child: Option<Child>,
    /// The other replicas of a sharded contender.
    others: Vec<Child>,
    /// CPU and peak RSS of finished ceiling processes.
    finished_cpu: f64,
    finished_rss: u64,
}

impl Measured {
    fn sample(&self) -> procstat::Sample {
        let each = self.replica_samples();
        let live = procstat::Sample {
            cpu_seconds: each.iter().map(|s| s.cpu_seconds).sum(),
            peak_rss_bytes: each.iter().map(|s| s.peak_rss_bytes).sum(),
            file_rss_bytes: each.iter().map(|s| s.file_rss_bytes).sum(),
        };
        procstat::Sample {
            cpu_seconds: live.cpu_seconds + self.finished_cpu,
            peak_rss_bytes: live.peak_rss_bytes.max(self.finished_rss),
            file_rss_bytes: live.file_rss_bytes,
        }
    }

    /// Each live process's figures (one, or a sharded contender's replicas).
    fn replica_samples(&self) -> Vec<procstat::Sample> {
        self.child
            .iter()
            .chain(&self.others)
            .map(|c| {
                c.id()
                    .and_then(|pid| procstat::sample(Some(pid)))
                    .unwrap_or_default()
            })
            .collect()
    }

    /// Fails when the controller exited before it was told to.
    fn check_alive(&mut self, log: &Path) -> anyhow::Result<()> {
        for child in self.child.iter_mut().chain(&mut self.others) {
            if let Some(status) = child.try_wait()? {
                bail!("exited early ({status}); see {}", log.display());
            }
        }
        Ok(())
    }
}

async fn measure(
    contender: Contender,
    args: &RunArgs,
    binaries: &Binaries,
) -> anyhow::Result<Figures> {
    let dir = std::path::absolute(args.out.join("work").join(contender.name()))?;
    let _ = std::fs::remove_dir_all(&dir);
    let cluster = Cluster::start(binaries, &dir, args.n).await?;
    let observer = Observer::start(&cluster.admin, &cluster::webapps());
    let log = dir.join("contender.log");
    let n = args.n;
    let timeout = Duration::from_secs(300 + n as u64 / 2);

    let mut fig = Figures {
        name: contender.name().to_string(),
        ..Figures::default()
    };
    fig.empty_rss_mib = match contender {
        Contender::Kiln | Contender::KubeRs | Contender::ControllerRuntime => {
            Some(empty_rss(contender, args, &cluster, &dir).await?)
        }
        Contender::KilnSharded | Contender::Ceiling => None,
    };
    let wall_start = unix_now();
    let start = Instant::now();
    let (mut children, metrics) = match contender {
        Contender::Ceiling => (Vec::new(), Vec::new()),
        _ => spawn(contender, args, &cluster, &dir, &log, NAMESPACE)?,
    };
    let first = (!children.is_empty()).then(|| children.remove(0));
    let mut measured = Measured {
        child: first,
        others: children,
        finished_cpu: 0.0,
        finished_rss: 0,
    };
    if contender == Contender::Ceiling {
        run_ceiling(Phase::Converge, args, &cluster, &log, &mut measured).await?;
    }
    let converged = wait(&observer, &mut measured, &log, timeout, |p| p.converged(n)).await?;
    fig.cpu_seconds_convergence = measured.sample().cpu_seconds;
    let wall_converged = unix_now();
    fig.phases.insert("start".into(), wall_start);
    fig.phases.insert("converged".into(), wall_converged);
    fig.converged = converged.is_some();
    fig.convergence_seconds =
        Some(converged.unwrap_or_else(Instant::now) - start).map(|d| d.as_secs_f64());
    // What kiln's caches hold now, each process's own figure.
    for addr in &metrics {
        match scrape::cached(*addr).await {
            Ok(c) => {
                fig.cached_objects.push(c.objects);
                fig.cached_mib.push(mib(c.bytes));
            }
            Err(e) => eprintln!("bench: reading {addr}/metrics: {e}"),
        }
    }

    let mut resync_window = None;
    if fig.converged {
        tokio::time::sleep(SETTLE).await;
        let update_start = Instant::now();
        fig.phases.insert("update".into(), unix_now());
        let changed_at = change_replicas(&cluster, n).await?;
        if contender == Contender::Ceiling {
            run_ceiling(Phase::Update, args, &cluster, &log, &mut measured).await?;
        }
        let updated = wait(&observer, &mut measured, &log, timeout, |p| {
            p.updated == n && p.primaries_changed == n && p.ready == n
        })
        .await?;
        if let Some(done) = updated {
            fig.phases.insert("updated".into(), unix_now());
            fig.update_seconds = Some((done - update_start).as_secs_f64());
            let shown = observer.updated_at();
            let latencies: Vec<f64> = changed_at
                .iter()
                .filter_map(|(name, at)| {
                    let seen = shown.get(name)?;
                    Some(seen.saturating_duration_since(*at).as_secs_f64() * 1000.0)
                })
                .collect();
            fig.update_latency_p50_ms = report::percentile(&latencies, 50.0);
            fig.update_latency_p99_ms = report::percentile(&latencies, 99.0);

            if contender != Contender::Ceiling {
                if done - update_start
                    > Duration::from_secs(args.resync() - args.idle_seconds) - SETTLE * 2
                {
                    eprintln!(
                        "bench: the update took long enough that resyncs may fall in the idle window"
                    );
                }
                tokio::time::sleep(SETTLE).await;
                let before = measured.sample().cpu_seconds;
                fig.phases.insert("idle".into(), unix_now());
                tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
                measured.check_alive(&log)?;
                fig.idle_cpu_seconds = Some(measured.sample().cpu_seconds - before);
                if measured.others.is_empty() {
                    fig.idle_rss_mib = measured
                        .child
                        .as_ref()
                        .and_then(Child::id)
                        .and_then(|pid| procstat::status_bytes(pid, "VmRSS:"))
                        .map(mib);
                }
                let window_start = unix_now();
                fig.phases.insert("resync".into(), window_start);
                let until = done + Duration::from_secs(args.resync()) + RESYNC_SLACK;
                tokio::time::sleep(until.saturating_duration_since(Instant::now())).await;
                measured.check_alive(&log)?;
                resync_window = Some((window_start, unix_now()));
            }
        }
    }

    let last = measured.sample();
    fig.phases.insert("end".into(), unix_now());
    fig.cpu_seconds_total = last.cpu_seconds;
    fig.peak_rss_mib = mib(last.peak_rss_bytes);
    fig.mapped_mib = (last.file_rss_bytes > 0).then(|| mib(last.file_rss_bytes));
    if !measured.others.is_empty() {
        let each = measured.replica_samples();
        fig.replica_peak_rss_mib = each.iter().map(|s| mib(s.peak_rss_bytes)).collect();
        fig.replica_mapped_mib = each.iter().map(|s| mib(s.file_rss_bytes)).collect();
    }
    for child in measured
        .child
        .take()
        .into_iter()
        .chain(measured.others.drain(..))
    {
        stop(child).await;
    }
    drop(observer);
    // The audit log is written synchronously; a moment for the watches the
    // controller just closed to be logged as complete.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let requests = audit::read(&cluster.audit_log)?;
    // From the start: the run with no primaries before it is not counted.
    fig.requests_by_verb = audit::by_verb(&requests, wall_start - 1.0, f64::MAX);
    fig.writes_convergence = audit::writes(&requests, wall_start - 1.0, wall_converged);
    if let Some((from, to)) = resync_window {
        fig.resync_writes = Some(audit::writes(&requests, from, to));
        fig.resync_requests = Some(audit::by_verb(&requests, from, to).values().sum());
    }
    drop(cluster);
    Ok(fig)
}

/// Waits for `done`, failing early if the controller dies.
async fn wait(
    observer: &Observer,
    measured: &mut Measured,
    log: &Path,
    timeout: Duration,
    done: impl Fn(&observe::Progress) -> bool,
) -> anyhow::Result<Option<Instant>> {
    let deadline = Instant::now() + timeout;
    loop {
        let step = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(1));
        if let Some(at) = observer.wait_for(step, &done).await {
            return Ok(Some(at));
        }
        measured.check_alive(log)?;
        if Instant::now() >= deadline {
            eprintln!(
                "bench: gave up after {timeout:?}: {:?}",
                observer.progress()
            );
            return Ok(None);
        }
    }
}

/// RSS (`VmRSS`, MiB) of a one-process contender watching an empty
/// namespace on `cluster`, `EMPTY_SETTLE` after its start.
async fn empty_rss(
    contender: Contender,
    args: &RunArgs,
    cluster: &Cluster,
    dir: &Path,
) -> anyhow::Result<f64> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(cluster.admin.clone());
    if namespaces.get_opt(EMPTY_NAMESPACE).await?.is_none() {
        let ns =
            serde_json::from_value(serde_json::json!({"metadata": {"name": EMPTY_NAMESPACE}}))?;
        namespaces.create(&Default::default(), &ns).await?;
    }
    let log = dir.join("contender-empty.log");
    let (children, _) = spawn(contender, args, cluster, dir, &log, EMPTY_NAMESPACE)?;
    let mut measured = Measured {
        child: children.into_iter().next(),
        others: Vec::new(),
        finished_cpu: 0.0,
        finished_rss: 0,
    };
    tokio::time::sleep(EMPTY_SETTLE).await;
    measured.check_alive(&log)?;
    let rss = measured
        .child
        .as_ref()
        .and_then(Child::id)
        .and_then(|pid| procstat::status_bytes(pid, "VmRSS:"))
        .context("no RSS")?;
    if let Some(child) = measured.child.take() {
        stop(child).await;
    }
    Ok(mib(rss))
}

/// Starts the contender's process(es) watching `namespace`; returns them
/// and, for kiln, each one's metrics address.
fn spawn(
    contender: Contender,
    args: &RunArgs,
    cluster: &Cluster,
    dir: &Path,
    log: &Path,
    namespace: &str,
) -> anyhow::Result<(Vec<Child>, Vec<std::net::SocketAddr>)> {
    let concurrency = args.concurrency.to_string();
    let resync = args.resync().to_string();
    let mut metrics = Vec::new();
    let mut kiln_args = || -> anyhow::Result<Vec<String>> {
        let address = scrape::free_address()?;
        metrics.push(address);
        let rule = dir.join("webapp.yaml");
        std::fs::write(&rule, bench_rule(args.resync())?)?;
        let mut a: Vec<String> = vec!["run".into(), "--rules".into()];
        a.push(rule.to_string_lossy().into_owned());
        a.extend(
            [
                "--namespace",
                namespace,
                "--concurrency",
                &concurrency,
                "--health-probe-bind-address",
                "0",
            ]
            .map(String::from),
        );
        a.extend(["--metrics-bind-address".into(), address.to_string()]);
        Ok(a)
    };
    let commands = match contender {
        Contender::KilnSharded => {
            let each = (0..sharded::REPLICAS)
                .map(|_| kiln_args())
                .collect::<anyhow::Result<Vec<_>>>()?;
            sharded::commands(&args.kiln, each, dir)
        }
        _ => vec![(
            single(contender, args, &mut kiln_args, &resync, namespace)?,
            log.to_path_buf(),
        )],
    };
    let children = commands
        .into_iter()
        .map(|(mut cmd, log)| {
            let out = std::fs::File::create(log)?;
            cmd.env("KUBECONFIG", &cluster.contender_kubeconfig)
                .env_remove("KUBERNETES_SERVICE_HOST")
                .stdin(Stdio::null())
                .stdout(out.try_clone()?)
                .stderr(out)
                .kill_on_drop(true);
            Ok(cmd.spawn()?)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((children, metrics))
}

/// The command of a one-process contender.
fn single(
    contender: Contender,
    args: &RunArgs,
    kiln_args: &mut dyn FnMut() -> anyhow::Result<Vec<String>>,
    resync: &str,
    namespace: &str,
) -> anyhow::Result<Command> {
    let concurrency = args.concurrency.to_string();
    let cmd = match contender {
        Contender::Kiln | Contender::KilnSharded => {
            let mut cmd = Command::new(&args.kiln);
            cmd.args(kiln_args()?);
            cmd
        }
        Contender::KubeRs | Contender::ControllerRuntime => {
            let bin = match contender {
                Contender::KubeRs => Some(&args.kube_rs),
                _ => args.controller_runtime.as_ref(),
            }
            .context("no binary")?;
            let mut cmd = Command::new(bin);
            cmd.args([
                "--namespace",
                namespace,
                "--concurrency",
                &concurrency,
                "--resync-seconds",
                resync,
            ]);
            cmd
        }
        Contender::Ceiling => bail!("the ceiling is not a long-running process"),
    };
    Ok(cmd)
}

/// The benchmark's webapp rule (`tests/bench/webapp.yaml`, the job the
/// hand-written controllers do too) with its resync period.
fn bench_rule(resync_seconds: u64) -> anyhow::Result<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bench/webapp.yaml");
    let text = std::fs::read_to_string(&path)?;
    let shipped = "    resync: 10m\n";
    if !text.contains(shipped) {
        bail!("{} no longer says `{}`", path.display(), shipped.trim());
    }
    Ok(text.replace(shipped, &format!("    resync: {resync_seconds}s\n")))
}

async fn run_ceiling(
    phase: Phase,
    args: &RunArgs,
    cluster: &Cluster,
    log: &Path,
    measured: &mut Measured,
) -> anyhow::Result<()> {
    let phase_arg = match phase {
        Phase::Converge => "converge",
        Phase::Update => "update",
    };
    let output = Command::new(std::env::current_exe()?)
        .args(["ceiling", "--phase", phase_arg, "--concurrency"])
        .arg(args.concurrency.to_string())
        .env("KUBECONFIG", &cluster.contender_kubeconfig)
        .stdin(Stdio::null())
        .output()
        .await?;
    std::fs::write(log, &output.stderr)?;
    if !output.status.success() {
        bail!(
            "the ceiling failed ({}); see {}",
            output.status,
            log.display()
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let figures: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .context("the ceiling printed no figures")?;
    measured.finished_cpu += figures["cpu_seconds"].as_f64().unwrap_or(0.0);
    measured.finished_rss = measured
        .finished_rss
        .max(figures["peak_rss_bytes"].as_u64().unwrap_or(0));
    Ok(())
}

/// Sets `spec.replicas` on every primary; returns when each change was
/// committed.
async fn change_replicas(cluster: &Cluster, n: usize) -> anyhow::Result<HashMap<String, Instant>> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(cluster.admin.clone(), NAMESPACE, &cluster::webapps());
    let patch = serde_json::json!({ "spec": { "replicas": UPDATED_REPLICAS } });
    futures::stream::iter(0..n)
        .map(|i| {
            let (api, patch) = (api.clone(), &patch);
            async move {
                let name = workload::name(i);
                api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await?;
                anyhow::Ok((name, Instant::now()))
            }
        })
        .buffer_unordered(32)
        .try_collect()
        .await
}

/// SIGINT or SIGTERM.
async fn interrupted() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// SIGTERM, then SIGKILL after 15 s.
async fn stop(mut child: Child) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    if tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}
