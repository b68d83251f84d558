//! `bench conversion`: the cost of serving a rule-defined API at a version
//! that does not store. `kiln run` serves the conversion webhook for the
//! API of `rules/webapp-api.yaml` (its rule reconciling nothing, so only
//! conversion runs); N WebApps are stored at `v1`, then listed at `v1`
//! (no conversion) and at `v1alpha1` in turns. Kiln's own metrics
//! (`kiln_conversion_*`, read from its `/metrics` before and after each
//! list) tell how many ConversionReviews of how many objects each list
//! took and how long kiln took to answer them. Twice: with the API
//! server's watch cache (its default: each version's cache holds its
//! objects converted, so a list converts nothing) and without it
//! (`--watch-cache=false`: every list reads etcd and converts each
//! object). Prints the p50/p99 of each list, the ratio of the medians,
//! the reviews per list, the p50/p99 per review as kiln served them, and
//! of converting one ConversionReview of the N objects in process (kiln's
//! templates alone, no TLS or API server).

use std::net::SocketAddr;
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
use crate::scrape;

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
    /// The API server's watch cache: `on` (its default), `off`, or `both`
    /// (one control plane each, in turn).
    #[arg(long, default_value = "both", value_parser = ["on", "off", "both"])]
    watch_cache: String,
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
    let rule = rule_text()?;
    std::fs::write(args.out.join("rule.yaml"), &rule)?;
    let caches: &[bool] = match args.watch_cache.as_str() {
        "on" => &[true],
        "off" => &[false],
        _ => &[true, false],
    };
    let mut text = format!(
        "N={n}, {lists} lists at each version, kiln {kiln}\n",
        n = args.n,
        lists = args.lists,
        kiln = args.kiln.display(),
    );
    for &cached in caches {
        text.push_str(&phase(&args, cached).await?);
    }
    std::fs::write(args.out.join("conversion.md"), &text)?;
    println!("{text}");
    Ok(())
}

/// One control plane (with or without the watch cache), one kiln, N
/// WebApps, the lists; the phase's section of the report.
async fn phase(args: &Args, watch_cache: bool) -> anyhow::Result<String> {
    let binaries = Binaries::locate(&Binaries::default_source())?;
    let mut options = Options::new(binaries);
    if !watch_cache {
        options.apiserver_args.push("--watch-cache=false".into());
    }
    let control_plane = ControlPlane::start(options).await?;
    let admin = control_plane.client().await?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let tag = if watch_cache { "cached" } else { "uncached" };
    let kubeconfig = args.out.join(format!("kubeconfig-{tag}"));
    std::fs::write(&kubeconfig, control_plane.kubeconfig_yaml())?;
    let port = kiln::controlplane::free_port()?;
    let metrics = scrape::free_address()?;
    let log = std::fs::File::create(args.out.join(format!("kiln-{tag}.log")))?;
    let addr = format!("127.0.0.1:{port}");
    let mut kiln = tokio::process::Command::new(&args.kiln)
        .args(["run", "--rules"])
        .arg(args.out.join("rule.yaml"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--metrics-bind-address", &metrics.to_string()])
        .args(["--health-probe-bind-address", "0"])
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
    let before = Served::read(metrics).await?;
    create(&admin, args.n).await?;
    let created = Served::read(metrics).await?.since(&before);
    let lists = lists(&admin, metrics, args.n, args.lists).await?;
    let reviews = if watch_cache {
        Some(
            reviews(
                &admin,
                &std::fs::read_to_string(args.out.join("rule.yaml"))?,
                args.lists,
            )
            .await?,
        )
    } else {
        None
    };
    let _ = kiln.kill().await;
    Ok(report(
        args.n,
        watch_cache,
        &created,
        &lists,
        reviews.as_deref(),
    ))
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), |v| format!("{v:.1} ms"))
}

/// The phase's section: the lists, the reviews they took, kiln's time per
/// review, the ratio.
fn report(
    n: usize,
    watch_cache: bool,
    created: &Served,
    lists: &Lists,
    in_process: Option<&[f64]>,
) -> String {
    let p = |v: &[f64], q: f64| percentile(v, q);
    let title = if watch_cache {
        "watch cache on (the API server's default)"
    } else {
        "watch cache off (`--watch-cache=false`: each list reads etcd)"
    };
    let per_list = |s: &[Served]| {
        let reviews: Vec<f64> = s.iter().map(|d| d.reviews).collect();
        let objects: Vec<f64> = s.iter().map(|d| d.objects).collect();
        format!(
            "{:.0} / {:.0}",
            p(&reviews, 50.0).unwrap_or(0.0),
            p(&objects, 50.0).unwrap_or(0.0)
        )
    };
    let during = lists
        .converted_served
        .iter()
        .fold(Served::default(), |a, d| a.plus(d));
    let mut text = format!(
        "\n### {title}\n\n| | p50 | p99 | reviews / objects converted per list (median) |\n|---|---|---|---|\n\
         | list at v1 (storage) | {} | {} | {} |\n\
         | list at v1alpha1 (converted by kiln) | {} | {} | {} |\n",
        ms(p(&lists.stored, 50.0)),
        ms(p(&lists.stored, 99.0)),
        per_list(&lists.stored_served),
        ms(p(&lists.converted, 50.0)),
        ms(p(&lists.converted, 99.0)),
        per_list(&lists.converted_served),
    );
    for (what, served) in [
        ("during the lists at v1alpha1", &during),
        (
            &*format!("while the {n} WebApps were created at v1"),
            created,
        ),
    ] {
        text.push_str(&format!(
            "| one ConversionReview as kiln served it, {what} ({:.0} reviews of {:.1} objects each on average) | {} | {} | |\n",
            served.reviews,
            if served.reviews > 0.0 { served.objects / served.reviews } else { 0.0 },
            ms(served.quantile(0.5).map(|s| s * 1000.0)),
            ms(served.quantile(0.99).map(|s| s * 1000.0)),
        ));
    }
    if let Some(r) = in_process {
        text.push_str(&format!(
            "| one ConversionReview of {n} objects, in the driver's process | {} | {} | |\n",
            ms(p(r, 50.0)),
            ms(p(r, 99.0)),
        ));
    }
    let ratio = match (p(&lists.converted, 50.0), p(&lists.stored, 50.0)) {
        (Some(c), Some(s)) => format!("{:.2}", c / s),
        _ => "—".into(),
    };
    text.push_str(&format!(
        "\nratio of the lists' medians (v1alpha1 / v1): {ratio}; failed reviews: {:.0}\n",
        during.failures + created.failures
    ));
    text
}

/// Waits until the CRD is pointed at kiln's webhook.
async fn converting(admin: &Client) -> anyhow::Result<()> {
    let crds = Api::<CustomResourceDefinition>::all(admin.clone());
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        // Pointed at the webhook, and served at both versions (a CRD just
        // created answers 404 for a moment).
        if let Ok(Some(crd)) = crds.get_opt(&format!("webapps.{GROUP}")).await
            && crd.spec.conversion.is_some_and(|c| c.strategy == "Webhook")
            && webapps(admin, "v1")
                .list(&ListParams::default())
                .await
                .is_ok()
            && webapps(admin, "v1alpha1")
                .list(&ListParams::default())
                .await
                .is_ok()
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

/// The lists' milliseconds and what kiln served during each.
#[derive(Default)]
struct Lists {
    stored: Vec<f64>,
    converted: Vec<f64>,
    stored_served: Vec<Served>,
    converted_served: Vec<Served>,
}

/// Each list at v1 and at v1alpha1, taken in turns, with kiln's metrics
/// read before and after each.
async fn lists(
    admin: &Client,
    metrics: SocketAddr,
    n: usize,
    times: usize,
) -> anyhow::Result<Lists> {
    let (v1, alpha) = (webapps(admin, "v1"), webapps(admin, "v1alpha1"));
    let mut out = Lists::default();
    for i in 0..=times {
        for (api, converted) in [(&v1, false), (&alpha, true)] {
            let before = Served::read(metrics).await?;
            let started = Instant::now();
            let list = api.list(&ListParams::default()).await?;
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            let served = Served::read(metrics).await?.since(&before);
            if list.items.len() != n {
                bail!("listed {} WebApps, expected {n}", list.items.len());
            }
            // The first round warms caches and connections.
            if i == 0 {
                continue;
            }
            if converted {
                out.converted.push(ms);
                out.converted_served.push(served);
            } else {
                out.stored.push(ms);
                out.stored_served.push(served);
            }
        }
    }
    Ok(out)
}

/// What kiln's conversion metrics say: reviews, failed ones, objects, and
/// the duration histogram (cumulative count per upper bound, seconds).
#[derive(Debug, Clone, Default, PartialEq)]
struct Served {
    reviews: f64,
    failures: f64,
    objects: f64,
    buckets: Vec<(f64, f64)>,
}

impl Served {
    async fn read(addr: SocketAddr) -> anyhow::Result<Self> {
        Ok(Self::parse(&scrape::text(addr).await?))
    }

    /// Sums the `kiln_conversion_*` families over their CRDs.
    fn parse(text: &str) -> Self {
        let mut out = Self::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            match name {
                "kiln_conversion_reviews_total" => {
                    out.reviews += value;
                    if labels.contains("result=\"failure\"") {
                        out.failures += value;
                    }
                }
                "kiln_conversion_objects_total" => out.objects += value,
                "kiln_conversion_duration_seconds_bucket" => {
                    let le = labels
                        .split("le=\"")
                        .nth(1)
                        .and_then(|r| r.split('"').next())
                        .and_then(|v| v.parse::<f64>().ok());
                    if let Some(le) = le {
                        match out.buckets.iter_mut().find(|(b, _)| *b == le) {
                            Some((_, c)) => *c += value,
                            None => out.buckets.push((le, value)),
                        }
                    }
                }
                _ => {}
            }
        }
        out.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        out
    }

    /// What was served since `before`.
    fn since(&self, before: &Self) -> Self {
        self.combine(before, -1.0)
    }

    fn plus(&self, other: &Self) -> Self {
        self.combine(other, 1.0)
    }

    fn combine(&self, other: &Self, sign: f64) -> Self {
        let count =
            |b: &[(f64, f64)], le: f64| b.iter().find(|(x, _)| *x == le).map_or(0.0, |(_, c)| *c);
        let mut les: Vec<f64> = self
            .buckets
            .iter()
            .chain(&other.buckets)
            .map(|(le, _)| *le)
            .collect();
        les.sort_by(f64::total_cmp);
        les.dedup();
        Self {
            reviews: self.reviews + sign * other.reviews,
            failures: self.failures + sign * other.failures,
            objects: self.objects + sign * other.objects,
            buckets: les
                .into_iter()
                .map(|le| {
                    (
                        le,
                        count(&self.buckets, le) + sign * count(&other.buckets, le),
                    )
                })
                .collect(),
        }
    }

    /// The `q` quantile of the review durations (seconds), interpolated
    /// within the bucket that holds it, as Prometheus' histogram_quantile.
    fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.buckets.last()?.1;
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let mut below = (0.0, 0.0);
        for &(le, count) in &self.buckets {
            if count >= rank {
                if le.is_infinite() {
                    return Some(below.0);
                }
                let within = (rank - below.1) / (count - below.1).max(f64::MIN_POSITIVE);
                return Some(below.0 + (le - below.0) * within);
            }
            below = (le, count);
        }
        None
    }
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
        if !answer.ok {
            bail!(
                "the review failed: {}",
                String::from_utf8_lossy(&answer.json)
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_objects_and_durations_are_read_from_kilns_metrics() {
        let text = "# TYPE kiln_conversion_reviews counter\n\
            kiln_conversion_reviews_total{crd=\"webapps.x\",result=\"success\"} 4\n\
            kiln_conversion_reviews_total{crd=\"webapps.x\",result=\"failure\"} 1\n\
            kiln_conversion_objects_total{crd=\"webapps.x\"} 3004\n\
            kiln_conversion_duration_seconds_bucket{le=\"0.001\",crd=\"webapps.x\"} 2\n\
            kiln_conversion_duration_seconds_bucket{le=\"0.002\",crd=\"webapps.x\"} 4\n\
            kiln_conversion_duration_seconds_bucket{le=\"+Inf\",crd=\"webapps.x\"} 5\n";
        let now = Served::parse(text);
        assert_eq!((now.reviews, now.failures, now.objects), (5.0, 1.0, 3004.0));
        let p50 = now.quantile(0.5).unwrap();
        assert!((p50 - 0.001_25).abs() < 1e-12, "{p50}");
        let delta = now.since(&Served::parse(&text.replace("} 4\n", "} 2\n")));
        assert_eq!(delta.reviews, 2.0);
        assert_eq!(delta.buckets[1], (0.002, 2.0));
    }
}
