//! `bench conversion`: the cost of serving a rule-defined API at a version
//! that does not store. `kiln run` serves the conversion webhook for the
//! API of `rules/webapp-api.yaml` (its rule reconciling nothing, so only
//! conversion runs); N WebApps are stored at `v1`, then listed at `v1`
//! (no conversion) and at `v1alpha1` (every object through kiln's
//! templates) in turns. Prints the p50/p99 of each list, the ratio of the
//! medians, and the p50/p99 of converting one ConversionReview of the N
//! objects in process (kiln's templates alone, no TLS or API server).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kiln::api::webhook::review::{self, Lookup};
use kiln::controlplane::{Binaries, ControlPlane, Options};
use kube::api::{ApiResource, DynamicObject, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use crate::report::percentile;

const NAMESPACE: &str = "bench-conversion";
const GROUP: &str = "apps.demo.kiln.dev";

/// The options of `bench conversion`.
#[derive(clap::Parser)]
pub struct Args {
    /// Number of WebApps.
    #[arg(long, default_value_t = 3000)]
    n: usize,
    /// Lists at each version (and in-process reviews).
    #[arg(long, default_value_t = 20)]
    lists: usize,
    /// The kiln binary.
    #[arg(long, default_value = "target/release/kiln")]
    kiln: PathBuf,
    /// Where results go (conversion.md) and kiln's log.
    #[arg(long, default_value = "target/bench/conversion")]
    out: PathBuf,
}

fn webapps(client: &Client, version: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: GROUP.into(),
        version: version.into(),
        api_version: format!("{GROUP}/{version}"),
        kind: "WebApp".into(),
        plural: "webapps".into(),
    };
    Api::namespaced_with(client.clone(), NAMESPACE, &ar)
}

/// rules/webapp-api.yaml, reconciling no WebApp (a selector none has).
fn rule_text() -> anyhow::Result<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("rules/webapp-api.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let selected = "spec:\n  for:\n    apiVersion: apps.demo.kiln.dev/v1\n    kind: WebApp\n    selector: {matchLabels: {bench: none}}\n";
    Ok(text.replacen("spec:\n", selected, 1))
}

/// Runs the scenario and prints (and writes) the figures.
pub async fn run(args: Args) -> anyhow::Result<()> {
    if !args.kiln.is_file() {
        bail!(
            "no kiln binary at {}; `cargo build --release --bin kiln`",
            args.kiln.display()
        );
    }
    std::fs::create_dir_all(&args.out)?;
    let binaries = Binaries::locate(&Binaries::default_source())?;
    let control_plane = ControlPlane::start(Options::new(binaries)).await?;
    let admin = control_plane.client().await?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let rule = rule_text()?;
    std::fs::write(args.out.join("rule.yaml"), &rule)?;
    std::fs::write(args.out.join("kubeconfig"), control_plane.kubeconfig_yaml())?;
    let port = kiln::controlplane::free_port()?;
    let log = std::fs::File::create(args.out.join("kiln.log"))?;
    let addr = format!("127.0.0.1:{port}");
    let mut kiln = tokio::process::Command::new(&args.kiln)
        .args(["run", "--rules"])
        .arg(args.out.join("rule.yaml"))
        .arg("--kubeconfig")
        .arg(args.out.join("kubeconfig"))
        .args([
            "--metrics-bind-address",
            "0",
            "--health-probe-bind-address",
            "0",
        ])
        .args([
            "--namespace",
            NAMESPACE,
            "--conversion-namespace",
            NAMESPACE,
        ])
        .args([
            "--conversion-addr",
            &addr,
            "--conversion-url",
            &format!("https://{addr}"),
        ])
        .stderr(log)
        .kill_on_drop(true)
        .spawn()?;
    converting(&admin).await?;
    create(&admin, args.n).await?;
    let (stored, converted) = lists(&admin, args.n, args.lists).await?;
    let reviews = reviews(&admin, &rule, args.lists).await?;
    let _ = kiln.kill().await;
    let p = |v: &[f64], q: f64| percentile(v, q).unwrap_or(f64::NAN);
    let text = format!(
        "N={n}, {lists} lists at each version\n\n| | p50 | p99 |\n|---|---|---|\n| list at v1 (storage) | {:.0} ms | {:.0} ms |\n| list at v1alpha1 (converted by kiln) | {:.0} ms | {:.0} ms |\n| one ConversionReview of {n} objects, in process | {:.0} ms | {:.0} ms |\n\nratio of the lists' medians (v1alpha1 / v1): {:.2}\n",
        p(&stored, 50.0),
        p(&stored, 99.0),
        p(&converted, 50.0),
        p(&converted, 99.0),
        p(&reviews, 50.0),
        p(&reviews, 99.0),
        p(&converted, 50.0) / p(&stored, 50.0),
        n = args.n,
        lists = args.lists,
    );
    std::fs::write(args.out.join("conversion.md"), &text)?;
    println!("{text}");
    Ok(())
}

/// Waits until the CRD is pointed at kiln's webhook.
async fn converting(admin: &Client) -> anyhow::Result<()> {
    let crds = Api::<CustomResourceDefinition>::all(admin.clone());
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Ok(Some(crd)) = crds.get_opt(&format!("webapps.{GROUP}")).await
            && crd.spec.conversion.is_some_and(|c| c.strategy == "Webhook")
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("kiln did not point the CRD at its webhook within 120 s")
}

async fn create(admin: &Client, n: usize) -> anyhow::Result<()> {
    let api = webapps(admin, "v1");
    stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let o: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": format!("{GROUP}/v1"), "kind": "WebApp",
                    "metadata": {"name": format!("app-{i:05}")},
                    "spec": {"image": {"repository": "nginx", "tag": "1.27"}, "replicas": 2, "port": 80},
                }))?;
                api.create(&PostParams::default(), &o).await?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Milliseconds of each list at v1 and at v1alpha1, taken in turns.
async fn lists(admin: &Client, n: usize, times: usize) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let (v1, alpha) = (webapps(admin, "v1"), webapps(admin, "v1alpha1"));
    let mut out = (Vec::new(), Vec::new());
    for i in 0..=times {
        for (api, into) in [(&v1, &mut out.0), (&alpha, &mut out.1)] {
            let started = Instant::now();
            let list = api.list(&ListParams::default()).await?;
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            if list.items.len() != n {
                bail!("listed {} WebApps, expected {n}", list.items.len());
            }
            // The first round warms caches and connections.
            if i > 0 {
                into.push(ms);
            }
        }
    }
    Ok(out)
}

struct Rules(kiln::rules::RuleSet);

impl Lookup for Rules {
    fn conversions(&self, group: &str, kind: &str) -> Option<Arc<kiln::api::convert::Conversions>> {
        let api = self.0.rules.iter().find_map(|r| r.api.as_ref())?;
        (api.group == group && api.kind == kind).then(|| api.conversions.clone())?
    }
}

/// Milliseconds of answering one ConversionReview of every stored WebApp
/// (to v1alpha1) in process, `times` times.
async fn reviews(admin: &Client, rule: &str, times: usize) -> anyhow::Result<Vec<f64>> {
    let set = kiln::rules::load_sources(vec![kiln::rules::load::Source {
        file: "rule.yaml".into(),
        text: rule.to_string(),
    }])
    .map_err(|d| anyhow::anyhow!("{}", d[0]))?;
    let lookup = Rules(set);
    let objects = webapps(admin, "v1")
        .list(&ListParams::default())
        .await?
        .items;
    let body = serde_json::to_vec(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "bench", "desiredAPIVersion": format!("{GROUP}/v1alpha1"), "objects": objects},
    }))?;
    let mut out = Vec::new();
    for _ in 0..times {
        let started = Instant::now();
        let answer = review::answer(&body, &lookup);
        out.push(started.elapsed().as_secs_f64() * 1000.0);
        if answer["response"]["result"]["status"] != "Success" {
            bail!("the review failed: {}", answer["response"]["result"]);
        }
    }
    Ok(out)
}
