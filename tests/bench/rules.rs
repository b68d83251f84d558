//! The rules axis (`bench rules`, `make bench-rules`): kiln with R rules
//! over N primaries spread across them and across ten CRDs (`App0` …
//! `App9`, the WebApp schema under other names), and beside it the same job
//! written by hand with kube-rs and with controller-runtime (one controller
//! per kind, in one process), for each R and contender on a fresh control
//! plane. Rule `rNNN` takes the primaries labelled with its name, of kind
//! `App(NNN mod 10)`, and makes one ConfigMap per primary labelled with the
//! rule and a generation. Measured per R: start-up to converged (every
//! ConfigMap of the first generation) and its requests, idle RSS, a one-rule
//! edit (the generation of `r000` changed: until its ConfigMaps show it, and
//! the lists, watches and requests sent meanwhile, from the audit log; for
//! the hand-written controllers a restart with the new generation in their
//! flags), then, for kiln, ten reloads that change every rule, RSS after
//! them and the peak. Then what one more kind costs: 10 rules over one kind
//! against 10 rules over ten, with no primaries.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kiln::controlplane::Binaries;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::{Api, Client};
use serde::Serialize;
use tokio::process::{Child, Command};

use crate::cluster::Cluster;
use crate::workload::NAMESPACE;
use crate::{Contender, audit, mib, unix_now};

/// CRDs the rules spread over.
pub const KINDS: usize = 10;
/// Time settled before reading an RSS.
const SETTLE: Duration = Duration::from_secs(10);
/// Rules in the cost-per-kind measurement.
const KIND_PROBE_RULES: usize = 10;
/// How long a contender with no primaries runs before its RSS is read.
const KIND_PROBE_IDLE: Duration = Duration::from_secs(20);
/// The hand-written controllers' resync period (kiln's rules keep their
/// default); longer than any run, so no resync falls into one.
const RESYNC_SECONDS: &str = "3600";

/// `bench rules`'s options.
#[derive(clap::Args)]
pub struct RulesArgs {
    /// Rule counts to measure, one fresh control plane each.
    #[arg(long, value_delimiter = ',', default_value = "1,50,200")]
    pub rules: Vec<usize>,
    /// Primaries, spread across the rules.
    #[arg(long, default_value_t = 200)]
    pub n: usize,
    /// Reloads replacing every rule (kiln).
    #[arg(long, default_value_t = 10)]
    pub reloads: usize,
    /// Workers per rule (kiln), per kind (the hand-written controllers).
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Contenders, for each R in this order: kiln, kube-rs, controller-runtime.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kiln,kube-rs,controller-runtime"
    )]
    pub contenders: Vec<Contender>,
    /// Leaves out the cost-per-kind measurement.
    #[arg(long)]
    pub no_kind_cost: bool,
    /// Where results-rules.md and the logs go.
    #[arg(long, default_value = "target/bench")]
    pub out: PathBuf,
    /// The kiln binary.
    #[arg(long, default_value = "target/release/kiln")]
    pub kiln: PathBuf,
    /// The kube-rs controller of the rules axis.
    #[arg(long, default_value = "target/release/examples/bench-kube-rs-rules")]
    pub kube_rs: PathBuf,
    /// The controller-runtime controller.
    #[arg(long)]
    pub controller_runtime: Option<PathBuf>,
}

impl RulesArgs {
    fn binary(&self, contender: Contender) -> anyhow::Result<&Path> {
        let path = match contender {
            Contender::Kiln => Some(self.kiln.as_path()),
            Contender::KubeRs => Some(self.kube_rs.as_path()),
            Contender::ControllerRuntime => self.controller_runtime.as_deref(),
            other => bail!("{} is not a contender on the rules axis", other.name()),
        };
        match path {
            Some(p) if p.is_file() => Ok(p),
            _ => bail!(
                "no binary for {} (have {path:?}); `make bench-rules` builds them all",
                contender.name()
            ),
        }
    }
}

/// What one R gave one contender. The reload figures are kiln's alone.
#[derive(Debug, Default, Serialize)]
pub struct Row {
    contender: String,
    rules: usize,
    kinds: usize,
    startup_s: f64,
    /// From the start until 10 s after convergence (the echoes of the
    /// contender's own writes included).
    startup_requests: u64,
    idle_rss_mib: f64,
    edit_s: f64,
    edit_lists: u64,
    edit_watches: u64,
    edit_requests: u64,
    before_reloads_mib: Option<f64>,
    after_reloads_mib: Option<f64>,
    reload_s: Vec<f64>,
    peak_rss_mib: f64,
}

/// What one more watched kind costs one contender.
#[derive(Debug, Default, Serialize)]
pub struct KindCost {
    contender: String,
    one_kind_mib: f64,
    ten_kinds_mib: f64,
}

impl KindCost {
    fn per_kind_kib(&self) -> f64 {
        (self.ten_kinds_mib - self.one_kind_mib) * 1024.0 / (KINDS - 1) as f64
    }
}

/// Runs every R and contender and writes `results-rules.md` and
/// `results-rules.json`.
pub async fn run(args: RulesArgs) -> anyhow::Result<()> {
    for &c in &args.contenders {
        args.binary(c)?;
    }
    let binaries = Binaries::locate(&Binaries::default_source())?;
    std::fs::create_dir_all(&args.out)?;
    let mut rows = Vec::new();
    for &r in &args.rules {
        for &c in &args.contenders {
            eprintln!("bench rules: {} with R={r}, N={} …", c.name(), args.n);
            let row = measure(&args, &binaries, c, r.max(1))
                .await
                .with_context(|| format!("{} at R={r}", c.name()))?;
            eprintln!("bench rules: {row:?}");
            rows.push(row);
        }
    }
    let mut kinds = Vec::new();
    if !args.no_kind_cost {
        for &c in &args.contenders {
            eprintln!("bench rules: {}: cost per kind …", c.name());
            let cost = kind_cost(&args, &binaries, c)
                .await
                .with_context(|| format!("{}: cost per kind", c.name()))?;
            eprintln!("bench rules: {cost:?}");
            kinds.push(cost);
        }
    }
    let md = markdown(&args, &rows, &kinds);
    std::fs::write(args.out.join("results-rules.md"), &md)?;
    std::fs::write(
        args.out.join("results-rules.json"),
        serde_json::to_string_pretty(&serde_json::json!({ "rows": rows, "kinds": kinds }))?,
    )?;
    println!("{md}");
    Ok(())
}

/// Which rules a contender runs: rule `i` of `rules` on kind `App(i mod
/// kinds)`, its children labelled with `generation` (or `edited`'s for
/// `r000` once set).
struct Job {
    rules: usize,
    kinds: usize,
    generation: String,
    edited: Option<String>,
}

/// One contender's process on one control plane, restarted by a
/// hand-written contender's edit.
struct Running {
    contender: Contender,
    binary: PathBuf,
    concurrency: usize,
    dir: PathBuf,
    kubeconfig: PathBuf,
    child: Option<Child>,
    pid: u32,
    starts: usize,
    /// The largest `VmHWM` of processes already stopped.
    stopped_peak: u64,
}

impl Running {
    /// Starts the contender doing `job` (for kiln: writes its rules first).
    fn start(
        args: &RulesArgs,
        contender: Contender,
        cluster: &Cluster,
        dir: &Path,
        job: &Job,
    ) -> anyhow::Result<Self> {
        let mut running = Self {
            contender,
            binary: args.binary(contender)?.to_path_buf(),
            concurrency: args.concurrency,
            dir: dir.to_path_buf(),
            kubeconfig: cluster.contender_kubeconfig.clone(),
            child: None,
            pid: 0,
            starts: 0,
            stopped_peak: 0,
        };
        if contender == Contender::Kiln {
            let rules = running.rules_dir();
            let _ = std::fs::remove_dir_all(&rules);
            std::fs::create_dir_all(&rules)?;
            for i in 0..job.rules {
                write_rule(&rules, i, job.kinds, &job.generation)?;
            }
        }
        running.spawn(job)?;
        Ok(running)
    }

    fn rules_dir(&self) -> PathBuf {
        self.dir.join("rules")
    }

    fn spawn(&mut self, job: &Job) -> anyhow::Result<()> {
        self.starts += 1;
        let log = self
            .dir
            .join(format!("{}-{}.log", self.contender.name(), self.starts));
        let out = std::fs::File::create(&log)?;
        let concurrency = self.concurrency.to_string();
        let mut cmd = Command::new(&self.binary);
        if self.contender == Contender::Kiln {
            let metrics = crate::scrape::free_address()?.to_string();
            cmd.arg("run")
                .arg("--rules")
                .arg(self.rules_dir())
                .args(["--namespace", NAMESPACE, "--concurrency", &concurrency])
                .args(["--health-probe-bind-address", "0"])
                .args(["--metrics-bind-address", &metrics]);
        } else {
            cmd.args(["--namespace", NAMESPACE, "--concurrency", &concurrency])
                .args(["--resync-seconds", RESYNC_SECONDS])
                .args(["--rules", &job.rules.to_string()])
                .args(["--kinds", &job.kinds.to_string()])
                .args(["--generation", &job.generation]);
            if let Some(g) = &job.edited {
                cmd.arg("--generation-of").arg(format!("r000={g}"));
            }
        }
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true);
        let child = cmd.spawn()?;
        self.pid = child.id().context("no pid")?;
        self.child = Some(child);
        Ok(())
    }

    /// Rule `r000`'s children get generation `g`: kiln reloads the rule's
    /// file; a hand-written controller is restarted with it in its flags.
    async fn edit(&mut self, job: &mut Job, g: &str) -> anyhow::Result<()> {
        job.edited = Some(g.to_string());
        if self.contender == Contender::Kiln {
            return write_rule(&self.rules_dir(), 0, job.kinds, g);
        }
        self.stopped_peak = self.stopped_peak.max(self.peak()?);
        if let Some(old) = self.child.take() {
            crate::stop(old).await;
        }
        self.spawn(job)
    }

    fn rss(&self) -> anyhow::Result<u64> {
        rss(self.pid, "VmRSS:")
    }

    /// `VmHWM` of the running process.
    fn peak(&self) -> anyhow::Result<u64> {
        rss(self.pid, "VmHWM:")
    }

    /// Fails when the process exited before it was told to.
    fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self
            .child
            .as_mut()
            .map(Child::try_wait)
            .transpose()?
            .flatten()
        {
            bail!(
                "{} exited ({status}); see its log in {}",
                self.contender.name(),
                self.dir.display()
            );
        }
        Ok(())
    }

    /// Stops the process; returns the largest `VmHWM` of every process it ran.
    async fn stop(mut self) -> u64 {
        let peak = self.peak().unwrap_or(0).max(self.stopped_peak);
        if let Some(child) = self.child.take() {
            crate::stop(child).await;
        }
        peak
    }
}

/// A fresh control plane with the ten CRDs, its files in `work/<name>`.
async fn fresh_cluster(
    args: &RulesArgs,
    binaries: &Binaries,
    name: &str,
) -> anyhow::Result<(PathBuf, Cluster)> {
    let dir = std::path::absolute(args.out.join("work").join(name))?;
    let _ = std::fs::remove_dir_all(&dir);
    let cluster = Cluster::start(binaries, &dir, 0).await?;
    install_crds(&cluster.admin).await?;
    Ok((dir, cluster))
}

async fn measure(
    args: &RulesArgs,
    binaries: &Binaries,
    contender: Contender,
    r: usize,
) -> anyhow::Result<Row> {
    let (dir, cluster) =
        fresh_cluster(args, binaries, &format!("rules-{r}-{}", contender.name())).await?;
    create_primaries(&cluster.admin, args.n, r).await?;
    let mut job = Job {
        rules: r,
        kinds: KINDS,
        generation: "g0".into(),
        edited: None,
    };
    let configmaps: Api<ConfigMap> = Api::namespaced(cluster.admin.clone(), NAMESPACE);
    let timeout = Duration::from_secs(300 + args.n as u64 / 2);
    let mut row = Row {
        contender: contender.name().into(),
        rules: r,
        kinds: r.min(KINDS),
        ..Row::default()
    };

    let from = unix_now();
    let start = Instant::now();
    let mut running = Running::start(args, contender, &cluster, &dir, &job)?;
    wait_for(
        &configmaps,
        "bench.kiln.dev/gen=g0",
        args.n,
        timeout,
        &mut running,
    )
    .await?;
    row.startup_s = start.elapsed().as_secs_f64();
    tokio::time::sleep(SETTLE).await;
    row.idle_rss_mib = mib(running.rss()?);

    // One rule edited: its children follow; kiln lists nothing again.
    let of_first = args.n.div_ceil(r);
    let edit_from = unix_now();
    let start = Instant::now();
    running.edit(&mut job, "e1").await?;
    let selector = "bench.kiln.dev/gen=e1,bench.kiln.dev/rule=r000";
    wait_for(&configmaps, selector, of_first, timeout, &mut running).await?;
    row.edit_s = start.elapsed().as_secs_f64();
    // What the edit set off, until things settled.
    tokio::time::sleep(SETTLE).await;
    let requests = audit::read(&cluster.audit_log)?;
    row.startup_requests = audit::by_verb(&requests, from - 1.0, edit_from)
        .values()
        .sum();
    let verbs = audit::by_verb(&requests, edit_from, unix_now());
    row.edit_lists = verbs.get("list").copied().unwrap_or(0);
    row.edit_watches = verbs.get("watch").copied().unwrap_or(0);
    row.edit_requests = verbs.values().sum();

    // Every rule replaced, again and again (kiln: a hand-written controller
    // would restart each time, as in the edit).
    if contender == Contender::Kiln {
        row.before_reloads_mib = Some(mib(running.rss()?));
        for k in 1..=args.reloads {
            let generation = format!("f{k}");
            let start = Instant::now();
            for i in 0..r {
                write_rule(&running.rules_dir(), i, job.kinds, &generation)?;
            }
            let selector = format!("bench.kiln.dev/gen={generation}");
            wait_for(&configmaps, &selector, args.n, timeout, &mut running).await?;
            row.reload_s.push(start.elapsed().as_secs_f64());
        }
        tokio::time::sleep(SETTLE).await;
        row.after_reloads_mib = Some(mib(running.rss()?));
    }
    row.peak_rss_mib = mib(running.stop().await);
    Ok(row)
}

/// Idle RSS with `KIND_PROBE_RULES` rules over one kind, then over ten, no
/// primaries: the difference is nine more watched kinds.
async fn kind_cost(
    args: &RulesArgs,
    binaries: &Binaries,
    contender: Contender,
) -> anyhow::Result<KindCost> {
    let (dir, cluster) =
        fresh_cluster(args, binaries, &format!("kinds-{}", contender.name())).await?;
    let mut idle = Vec::new();
    for kinds in [1, KINDS] {
        let job = Job {
            rules: KIND_PROBE_RULES,
            kinds,
            generation: "g0".into(),
            edited: None,
        };
        let mut running = Running::start(args, contender, &cluster, &dir, &job)?;
        tokio::time::sleep(KIND_PROBE_IDLE).await;
        running.check_alive()?;
        idle.push(mib(running.rss()?));
        running.stop().await;
    }
    Ok(KindCost {
        contender: contender.name().into(),
        one_kind_mib: idle[0],
        ten_kinds_mib: idle[1],
    })
}

/// A field in bytes (`VmRSS:`, `VmHWM:`) of `/proc/<pid>/status`.
fn rss(pid: u32, field: &str) -> anyhow::Result<u64> {
    crate::procstat::status_bytes(pid, field).with_context(|| format!("no {field} for {pid}"))
}

/// Waits until `count` ConfigMaps match `selector`.
async fn wait_for(
    api: &Api<ConfigMap>,
    selector: &str,
    count: usize,
    timeout: Duration,
    running: &mut Running,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let list = api
            .list_metadata(&ListParams::default().labels(selector))
            .await?;
        if list.items.len() >= count {
            return Ok(());
        }
        running.check_alive()?;
        if Instant::now() > deadline {
            bail!(
                "{selector}: {} of {count} after {timeout:?}",
                list.items.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn kind(k: usize) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("bench.kiln.dev", "v1", &format!("App{k}")),
        &format!("app{k}s"),
    )
}

/// `App0` … `App9`: the WebApp CRD under other names.
async fn install_crds(admin: &Client) -> anyhow::Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/webapp/crd.yaml");
    let text = std::fs::read_to_string(&path)?;
    let api: Api<CustomResourceDefinition> = Api::all(admin.clone());
    for k in 0..KINDS {
        let renamed = text
            .replace("webapps.demo.kiln.dev", &format!("app{k}s.bench.kiln.dev"))
            .replace("group: demo.kiln.dev", "group: bench.kiln.dev")
            .replace("kind: WebApp", &format!("kind: App{k}"))
            .replace("plural: webapps", &format!("plural: app{k}s"))
            .replace("singular: webapp", &format!("singular: app{k}"))
            .replace("shortNames: [wa]", &format!("shortNames: [a{k}]"));
        let crd: CustomResourceDefinition = serde_norway::from_str(&renamed)?;
        api.create(&PostParams::default(), &crd).await?;
    }
    for k in 0..KINDS {
        let served: Api<DynamicObject> = Api::namespaced_with(admin.clone(), NAMESPACE, &kind(k));
        let deadline = Instant::now() + Duration::from_secs(30);
        while served.list(&ListParams::default().limit(1)).await.is_err() {
            if Instant::now() > deadline {
                bail!("App{k} was not served within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Primary `i` belongs to rule `i mod r`, of kind `App((i mod r) mod 10)`.
async fn create_primaries(admin: &Client, n: usize, r: usize) -> anyhow::Result<()> {
    futures::stream::iter(0..n)
        .map(|i| {
            let rule = i % r;
            let api: Api<DynamicObject> =
                Api::namespaced_with(admin.clone(), NAMESPACE, &kind(rule % KINDS));
            async move {
                let mut value = crate::workload::webapp(i);
                value["apiVersion"] = "bench.kiln.dev/v1".into();
                value["kind"] = format!("App{}", rule % KINDS).into();
                value["metadata"]["labels"] =
                    serde_json::json!({"bench.kiln.dev/rule": format!("r{rule:03}")});
                let obj: DynamicObject = serde_json::from_value(value)?;
                api.create(&PostParams::default(), &obj).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<()>()
        .await
}

/// Writes rule `i`, on kind `App(i mod kinds)` (replacing the file in one
/// rename, as a ConfigMap mount does) with its children labelled
/// `generation`.
fn write_rule(dir: &Path, i: usize, kinds: usize, generation: &str) -> anyhow::Result<()> {
    let name = format!("r{i:03}");
    let k = i % kinds;
    let text = format!(
        r#"apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata:
  name: {name}
spec:
  for:
    apiVersion: bench.kiln.dev/v1
    kind: App{k}
    selector:
      matchLabels:
        bench.kiln.dev/rule: {name}
  children:
    - id: config
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: "{{{{ self.metadata.name }}}}-config"
          labels:
            bench.kiln.dev/rule: {name}
            bench.kiln.dev/gen: {generation}
        data: "{{{{ self.spec.config | default({{}}) }}}}"
  status:
    fields:
      config{i:03}: "{{{{ self.metadata.name }}}}-config"
"#
    );
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, dir.join(format!("{name}.yaml")))?;
    Ok(())
}

fn markdown(args: &RulesArgs, rows: &[Row], kinds: &[KindCost]) -> String {
    let mut md = format!(
        "R rules over N = {} primaries spread across them and across {} CRDs \
         (one ConfigMap child each), concurrency {}, {} reloads replacing every rule (kiln), {}.\n\n",
        args.n,
        KINDS,
        args.concurrency,
        args.reloads,
        k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC"),
    );
    md.push_str(
        "| rules | kinds | contender | start-up to converged s | requests, start-up + 10 s | idle RSS MiB | one-rule edit s | lists / watches / requests in the edit | RSS before reloads MiB | after reloads MiB | slowest reload s | peak RSS MiB |\n\
         |---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let or_dash = |v: Option<f64>, precision: usize| {
        v.map_or_else(|| "—".to_string(), |v| format!("{v:.precision$}"))
    };
    for r in rows {
        let slowest = r.reload_s.iter().copied().reduce(f64::max);
        md.push_str(&format!(
            "| {} | {} | {} | {:.2} | {} | {:.1} | {:.2} | {} / {} / {} | {} | {} | {} | {:.1} |\n",
            r.rules,
            r.kinds,
            r.contender,
            r.startup_s,
            r.startup_requests,
            r.idle_rss_mib,
            r.edit_s,
            r.edit_lists,
            r.edit_watches,
            r.edit_requests,
            or_dash(r.before_reloads_mib, 1),
            or_dash(r.after_reloads_mib, 1),
            or_dash(slowest, 2),
            r.peak_rss_mib,
        ));
    }
    md.push('\n');
    for c in &args.contenders {
        let of: Vec<&Row> = rows.iter().filter(|r| r.contender == c.name()).collect();
        if let (Some(a), Some(b)) = (of.first(), of.last())
            && b.rules > a.rules
        {
            let per_rule = (b.idle_rss_mib - a.idle_rss_mib) * 1024.0 / (b.rules - a.rules) as f64;
            md.push_str(&format!(
                "{}: idle RSS per rule, R={} to R={}: {per_rule:.1} KiB (the kinds grow from {} to {} on the way).\n",
                c.name(),
                a.rules,
                b.rules,
                a.kinds,
                b.kinds
            ));
        }
    }
    if args.contenders.iter().any(|c| *c != Contender::Kiln) {
        md.push_str(
            "\nThe hand-written controllers run one controller per kind in one process; a rule's \
             generation is in their flags, so their one-rule edit is a restart with the new \
             generation (from SIGTERM until the rule's ConfigMaps show it), and reloads of every \
             rule are not run (each would be the same restart). The requests in an edit are those \
             until 10 s after it took effect.\n",
        );
    }
    if !kinds.is_empty() {
        md.push_str(&format!(
            "\nCost per kind: idle RSS {} s after start with {KIND_PROBE_RULES} rules over one kind, \
             then over {KINDS} kinds, no primaries; per kind = the difference / {}.\n\n\
             | contender | 1 kind MiB | {KINDS} kinds MiB | per kind KiB |\n|---|---:|---:|---:|\n",
            KIND_PROBE_IDLE.as_secs(),
            KINDS - 1
        ));
        for k in kinds {
            md.push_str(&format!(
                "| {} | {:.1} | {:.1} | {:.0} |\n",
                k.contender,
                k.one_kind_mib,
                k.ten_kinds_mib,
                k.per_kind_kib()
            ));
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: RulesArgs,
    }

    fn row(contender: Contender, rules: usize, idle: f64, reloads: bool) -> Row {
        Row {
            contender: contender.name().into(),
            rules,
            kinds: rules.min(KINDS),
            idle_rss_mib: idle,
            before_reloads_mib: reloads.then_some(idle),
            after_reloads_mib: reloads.then_some(idle),
            reload_s: if reloads { vec![1.0, 2.5] } else { vec![] },
            ..Row::default()
        }
    }

    #[test]
    fn the_table_gives_each_contender_its_cost_per_rule_and_kind() {
        let args = Cli::parse_from(["bench", "--rules", "1,11"]).args;
        let rows = [
            row(Contender::Kiln, 1, 20.0, true),
            row(Contender::KubeRs, 1, 30.0, false),
            row(Contender::Kiln, 11, 21.0, true),
            row(Contender::KubeRs, 11, 40.0, false),
        ];
        let kinds = [KindCost {
            contender: "kiln".into(),
            one_kind_mib: 17.0,
            ten_kinds_mib: 18.0,
        }];
        let md = markdown(&args, &rows, &kinds);
        assert!(
            md.contains("kiln: idle RSS per rule, R=1 to R=11: 102.4 KiB"),
            "{md}"
        );
        assert!(
            md.contains("kube-rs: idle RSS per rule, R=1 to R=11: 1024.0 KiB"),
            "{md}"
        );
        // Reloads are kiln's alone.
        assert!(md.contains("| 20.0 | 20.0 | 2.50 |"), "{md}");
        assert!(md.contains("| — | — | — |"), "{md}");
        assert!(md.contains("| kiln | 17.0 | 18.0 | 114 |"), "{md}");
    }

    #[test]
    fn a_rule_is_on_its_kind_modulo_the_kinds() {
        let dir = std::env::temp_dir().join(format!("bench-rules-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_rule(&dir, 13, 10, "g0").unwrap();
        write_rule(&dir, 14, 1, "e1").unwrap();
        let r013 = std::fs::read_to_string(dir.join("r013.yaml")).unwrap();
        let r014 = std::fs::read_to_string(dir.join("r014.yaml")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(r013.contains("kind: App3") && r013.contains("bench.kiln.dev/gen: g0"));
        assert!(r014.contains("kind: App0") && r014.contains("bench.kiln.dev/gen: e1"));
    }
}
