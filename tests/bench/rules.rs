//! The rules axis (`bench rules`, `make bench-rules`): kiln with R rules
//! over N primaries spread across them and across ten CRDs (`App0` …
//! `App9`, the WebApp schema under other names), for each R on a fresh
//! control plane. Rule `rNNN` takes the primaries labelled with its name,
//! of kind `App(NNN mod 10)`, and makes one ConfigMap per primary labelled
//! with the rule and a generation. Measured per R: start-up to converged
//! (every ConfigMap of the first generation), idle RSS, a one-rule edit (the
//! generation of `r000` changed: until its ConfigMaps show it, and the
//! lists and watches kiln sent meanwhile, from the audit log), then ten
//! reloads that change every rule, RSS after them and the peak.

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
use crate::{audit, mib, unix_now};

/// CRDs the rules spread over.
pub const KINDS: usize = 10;
/// Time settled before reading an RSS.
const SETTLE: Duration = Duration::from_secs(10);

/// `bench rules`'s options.
#[derive(clap::Args)]
pub struct RulesArgs {
    /// Rule counts to measure, one fresh control plane each.
    #[arg(long, value_delimiter = ',', default_value = "1,50,200")]
    pub rules: Vec<usize>,
    /// Primaries, spread across the rules.
    #[arg(long, default_value_t = 200)]
    pub n: usize,
    /// Reloads replacing every rule.
    #[arg(long, default_value_t = 10)]
    pub reloads: usize,
    /// Workers per rule.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Where results-rules.md and the logs go.
    #[arg(long, default_value = "target/bench")]
    pub out: PathBuf,
    /// The kiln binary.
    #[arg(long, default_value = "target/release/kiln")]
    pub kiln: PathBuf,
}

/// What one R gave.
#[derive(Debug, Default, Serialize)]
pub struct Row {
    rules: usize,
    kinds: usize,
    startup_s: f64,
    idle_rss_mib: f64,
    edit_s: f64,
    edit_lists: u64,
    edit_watches: u64,
    edit_requests: u64,
    before_reloads_mib: f64,
    after_reloads_mib: f64,
    reload_s: Vec<f64>,
    peak_rss_mib: f64,
}

/// Runs every R and writes `results-rules.md` and `results-rules.json`.
pub async fn run(args: RulesArgs) -> anyhow::Result<()> {
    if !args.kiln.is_file() {
        bail!("no kiln binary at {}", args.kiln.display());
    }
    let binaries = Binaries::locate(&Binaries::default_source())?;
    std::fs::create_dir_all(&args.out)?;
    let mut rows = Vec::new();
    for &r in &args.rules {
        eprintln!("bench rules: R={r}, N={} …", args.n);
        let row = measure(&args, &binaries, r.max(1))
            .await
            .with_context(|| format!("R={r}"))?;
        eprintln!("bench rules: {row:?}");
        rows.push(row);
    }
    let md = markdown(&args, &rows);
    std::fs::write(args.out.join("results-rules.md"), &md)?;
    std::fs::write(
        args.out.join("results-rules.json"),
        serde_json::to_string_pretty(&rows)?,
    )?;
    println!("{md}");
    Ok(())
}

async fn measure(args: &RulesArgs, binaries: &Binaries, r: usize) -> anyhow::Result<Row> {
    let dir = std::path::absolute(args.out.join("work").join(format!("rules-{r}")))?;
    let _ = std::fs::remove_dir_all(&dir);
    let cluster = Cluster::start(binaries, &dir, 0).await?;
    install_crds(&cluster.admin).await?;
    create_primaries(&cluster.admin, args.n, r).await?;
    let rules_dir = dir.join("rules");
    std::fs::create_dir_all(&rules_dir)?;
    for i in 0..r {
        write_rule(&rules_dir, i, "g0")?;
    }
    let mut kiln = start_kiln(args, &cluster, &rules_dir, &dir.join("kiln.log"))?;
    let pid = kiln.id().context("kiln has no pid")?;
    let configmaps: Api<ConfigMap> = Api::namespaced(cluster.admin.clone(), NAMESPACE);
    let timeout = Duration::from_secs(300 + args.n as u64 / 2);
    let mut row = Row {
        rules: r,
        kinds: r.min(KINDS),
        ..Row::default()
    };

    let start = Instant::now();
    wait_for(
        &configmaps,
        "bench.kiln.dev/gen=g0",
        args.n,
        timeout,
        &mut kiln,
    )
    .await?;
    row.startup_s = start.elapsed().as_secs_f64();
    tokio::time::sleep(SETTLE).await;
    row.idle_rss_mib = mib(rss(pid, "VmRSS:")?);

    // One rule edited: its children follow, nobody lists again.
    let of_first = args.n.div_ceil(r);
    let from = unix_now();
    let start = Instant::now();
    write_rule(&rules_dir, 0, "e1")?;
    let selector = "bench.kiln.dev/gen=e1,bench.kiln.dev/rule=r000";
    wait_for(&configmaps, selector, of_first, timeout, &mut kiln).await?;
    row.edit_s = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests = audit::read(&cluster.audit_log)?;
    let verbs = audit::by_verb(&requests, from, unix_now());
    row.edit_lists = verbs.get("list").copied().unwrap_or(0);
    row.edit_watches = verbs.get("watch").copied().unwrap_or(0);
    row.edit_requests = verbs.values().sum();

    // Every rule replaced, again and again.
    tokio::time::sleep(SETTLE).await;
    row.before_reloads_mib = mib(rss(pid, "VmRSS:")?);
    for k in 1..=args.reloads {
        let generation = format!("f{k}");
        let start = Instant::now();
        for i in 0..r {
            write_rule(&rules_dir, i, &generation)?;
        }
        let selector = format!("bench.kiln.dev/gen={generation}");
        wait_for(&configmaps, &selector, args.n, timeout, &mut kiln).await?;
        row.reload_s.push(start.elapsed().as_secs_f64());
    }
    tokio::time::sleep(SETTLE).await;
    row.after_reloads_mib = mib(rss(pid, "VmRSS:")?);
    row.peak_rss_mib = mib(rss(pid, "VmHWM:")?);
    let _ = kiln.kill().await;
    Ok(row)
}

fn start_kiln(
    args: &RulesArgs,
    cluster: &Cluster,
    rules: &Path,
    log: &Path,
) -> anyhow::Result<Child> {
    let out = std::fs::File::create(log)?;
    let metrics = crate::scrape::free_address()?.to_string();
    let concurrency = args.concurrency.to_string();
    let mut cmd = Command::new(&args.kiln);
    cmd.arg("run")
        .arg("--rules")
        .arg(rules)
        .args(["--namespace", NAMESPACE, "--concurrency", &concurrency])
        .args(["--health-probe-bind-address", "0"])
        .args(["--metrics-bind-address", &metrics])
        .env("KUBECONFIG", &cluster.contender_kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .kill_on_drop(true);
    Ok(cmd.spawn()?)
}

/// A field in bytes (`VmRSS:`, `VmHWM:`) of `/proc/<pid>/status`.
fn rss(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no {field} for {pid}"))?;
    Ok(kib * 1024)
}

/// Waits until `count` ConfigMaps match `selector`.
async fn wait_for(
    api: &Api<ConfigMap>,
    selector: &str,
    count: usize,
    timeout: Duration,
    kiln: &mut Child,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let list = api
            .list_metadata(&ListParams::default().labels(selector))
            .await?;
        if list.items.len() >= count {
            return Ok(());
        }
        if let Some(status) = kiln.try_wait()? {
            bail!("kiln exited ({status})");
        }
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

/// Writes rule `i` (replacing the file in one rename, as a ConfigMap
/// mount does) with its children labelled `generation`.
fn write_rule(dir: &Path, i: usize, generation: &str) -> anyhow::Result<()> {
    let name = format!("r{i:03}");
    let k = i % KINDS;
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

fn markdown(args: &RulesArgs, rows: &[Row]) -> String {
    let mut md = format!(
        "kiln with R rules over N = {} primaries spread across them and across {} CRDs \
         (one ConfigMap child each), concurrency {}, {} reloads replacing every rule, {}.\n\n",
        args.n,
        KINDS,
        args.concurrency,
        args.reloads,
        k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC"),
    );
    md.push_str(
        "| rules | kinds | start-up to converged s | idle RSS MiB | one-rule edit s | lists / watches / requests in the edit | RSS before reloads MiB | after reloads MiB | slowest reload s | peak RSS MiB |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let slowest = r.reload_s.iter().copied().fold(0.0, f64::max);
        md.push_str(&format!(
            "| {} | {} | {:.2} | {:.1} | {:.2} | {} / {} / {} | {:.1} | {:.1} | {:.2} | {:.1} |\n",
            r.rules,
            r.kinds,
            r.startup_s,
            r.idle_rss_mib,
            r.edit_s,
            r.edit_lists,
            r.edit_watches,
            r.edit_requests,
            r.before_reloads_mib,
            r.after_reloads_mib,
            slowest,
            r.peak_rss_mib,
        ));
    }
    if let (Some(a), Some(b)) = (rows.first(), rows.last())
        && b.rules > a.rules
    {
        let per_rule = (b.idle_rss_mib - a.idle_rss_mib) * 1024.0 / (b.rules - a.rules) as f64;
        md.push_str(&format!(
            "\nIdle RSS per rule, R={} to R={}: {per_rule:.1} KiB (the kinds grow from {} to {} on the way).\n",
            a.rules, b.rules, a.kinds, b.kinds
        ));
    }
    md
}
