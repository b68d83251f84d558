//! `bench webhook`: what one ConversionReview costs kiln's webhook within
//! its documented bounds, and how an oversized one is refused. A child
//! process (`bench webhook-serve`) serves the webhook exactly as `kiln run`
//! does (`kiln::api::webhook::server::spawn` with its default bounds and
//! the conversions of `rules/webapp-api.yaml`), so its memory is the
//! webhook's alone; this process sends it, over TLS:
//!
//! - a review of N WebApps (`--n`, 10,000 by default) at `v1`, to convert
//!   to `v1alpha1`: the time to the whole answer, and the child's peak RSS
//!   above its RSS just before (its high-water mark reset through
//!   `/proc/<pid>/clear_refs`);
//! - a review declaring a length over the bound (no body sent): the time
//!   to the 413;
//! - a chunked review streaming past the bound: the 413, and the bytes
//!   sent before it.
//!
//! No control plane is needed.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kiln::api::webhook::review::Lookup;
use kiln::api::webhook::server::{self, Bounds, Certificate, MAX_BODY};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::procstat;

const MIB: f64 = 1024.0 * 1024.0;
const GROUP: &str = "apps.demo.kiln.dev";

/// The options of `bench webhook`.
#[derive(clap::Parser)]
pub struct Args {
    /// Objects in the review.
    #[arg(long, default_value_t = 10_000)]
    n: usize,
    /// Reviews of N sent, one after the other.
    #[arg(long, default_value_t = 5)]
    reviews: usize,
}

/// The conversions of `rules/webapp-api.yaml`.
struct Rules(kiln::rules::RuleSet);

impl Lookup for Rules {
    fn conversions(&self, group: &str, kind: &str) -> Option<Arc<kiln::api::convert::Conversions>> {
        let api = self.0.rules.iter().find_map(|r| r.api.as_ref())?;
        (api.group == group && api.kind == kind).then(|| api.conversions.clone())?
    }
}

fn rules() -> anyhow::Result<Rules> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("rules/webapp-api.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let set = kiln::rules::load_sources(vec![kiln::rules::load::Source {
        file: "webapp-api.yaml".into(),
        text,
    }])
    .map_err(|d| anyhow::anyhow!("{}", d[0]))?;
    Ok(Rules(set))
}

/// `bench webhook-serve`: serves the webhook on a port of 127.0.0.1 and
/// prints `{"port": P, "ca": PEM}` on one line; runs until killed.
pub async fn serve() -> anyhow::Result<()> {
    let hosts = vec!["127.0.0.1".to_string()];
    let m = kiln::api::webhook::certs::issue(
        &hosts,
        Duration::from_secs(3600),
        std::time::SystemTime::now(),
        None,
    )?;
    let cert = Arc::new(Certificate::default());
    cert.set(&m.cert, &m.key)?;
    let metrics = Arc::new(kiln::metrics::Metrics::new());
    let addr = SocketAddr::from(([127, 0, 0, 1], 0));
    let serving = server::spawn(addr, Bounds::default(), cert, Arc::new(rules()?), metrics).await?;
    let line = json!({"port": serving.bound.port(), "ca": m.ca});
    let mut out = std::io::stdout();
    writeln!(out, "{line}")?;
    out.flush()?;
    std::future::pending::<()>().await;
    Ok(())
}

/// A WebApp at v1, about 1 KiB of JSON as the API server sends it.
fn webapp(i: usize) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": "WebApp",
        "metadata": {
            "name": format!("webapp-{i:05}"), "namespace": format!("team-{}", i % 50),
            "uid": format!("6f0c1e2a-0000-4000-8000-{i:012}"),
            "resourceVersion": format!("{}", 100_000 + i), "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app.kubernetes.io/name": "shop", "app.kubernetes.io/part-of": "storefront", "team": format!("team-{}", i % 50)},
            "annotations": {"description": "a web application the bench converts from v1 to v1alpha1, as a list would"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": format!("{GROUP}/v1"),
                "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:image": {"f:repository": {}, "f:tag": {}}, "f:replicas": {}, "f:port": {}}}}],
        },
        "spec": {"image": {"repository": "registry.example.com/shop/frontend", "tag": format!("1.{}", i % 100)}, "replicas": 2, "port": 8080},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Converged", "lastTransitionTime": "2026-01-01T00:00:00Z", "message": "every child is ready"}]},
    })
}

fn review(n: usize) -> anyhow::Result<Vec<u8>> {
    let objects: Vec<Value> = (0..n).map(webapp).collect();
    Ok(serde_json::to_vec(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "bench", "desiredAPIVersion": format!("{GROUP}/v1alpha1"), "objects": objects},
    }))?)
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

async fn connect(port: u16, ca: &str) -> anyhow::Result<Tls> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.as_bytes())?)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let name = ServerName::try_from("127.0.0.1")?;
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?)
}

/// Sends `head` then `body`, reads the whole answer (the connection closed
/// after it); the answer and the time from the first byte sent.
async fn exchange(
    port: u16,
    ca: &str,
    head: &str,
    body: &[u8],
) -> anyhow::Result<(Vec<u8>, Duration)> {
    let mut tls = connect(port, ca).await?;
    let started = Instant::now();
    tls.write_all(head.as_bytes()).await?;
    // The server may answer (and close) before the body is all sent.
    let _ = tls.write_all(body).await;
    let _ = tls.flush().await;
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer).await;
    Ok((answer, started.elapsed()))
}

fn post(length: &str) -> String {
    format!(
        "POST /convert HTTP/1.1\r\nHost: kiln\r\nContent-Type: application/json\r\nConnection: close\r\n{length}\r\n"
    )
}

/// Runs the scenario and prints the figures (Markdown).
pub async fn run(args: Args) -> anyhow::Result<()> {
    let mut child = Command::new(std::env::current_exe()?)
        .arg("webhook-serve")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().context("the webhook process has no pid")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first).await?;
    let hello: Value = serde_json::from_str(&first)?;
    let port = u16::try_from(hello["port"].as_u64().unwrap_or_default())?;
    let ca = hello["ca"].as_str().unwrap_or_default().to_string();
    // Warm: TLS, the templates' first use, the allocator's arenas.
    let small = review(10)?;
    exchange(
        port,
        &ca,
        &post(&format!("Content-Length: {}\r\n", small.len())),
        &small,
    )
    .await?;
    let body = review(args.n)?;
    println!(
        "| review | body MiB | answer | time ms | webhook RSS before MiB | peak above it MiB |\n|---|---|---|---|---|---|"
    );
    for i in 0..args.reviews {
        std::fs::write(format!("/proc/{pid}/clear_refs"), "5").context("resetting the peak RSS")?;
        let before = procstat::status_bytes(pid, "VmRSS:").context("the webhook exited")?;
        let head = post(&format!("Content-Length: {}\r\n", body.len()));
        let (answer, took) = exchange(port, &ca, &head, &body).await?;
        let peak = procstat::status_bytes(pid, "VmHWM:").context("the webhook exited")?;
        let text = String::from_utf8_lossy(&answer);
        let json = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let review: Value = serde_json::from_str(json)
            .with_context(|| text.chars().take(300).collect::<String>())?;
        let converted = review["response"]["convertedObjects"]
            .as_array()
            .map_or(0, Vec::len);
        if converted != args.n {
            bail!(
                "{converted} objects converted of {}: {}",
                args.n,
                review["response"]["result"]
            );
        }
        println!(
            "| {} of {} objects | {:.1} | 200, {converted} converted | {} | {:.1} | {:.1} |",
            i + 1,
            args.n,
            body.len() as f64 / MIB,
            took.as_millis(),
            before as f64 / MIB,
            peak.saturating_sub(before) as f64 / MIB,
        );
    }
    drop(body);
    // Declared over the bound, no body sent.
    let (answer, took) = exchange(
        port,
        &ca,
        &post(&format!("Content-Length: {}\r\n", MAX_BODY + 1)),
        &[],
    )
    .await?;
    println!(
        "\nA review declaring {} bytes (the bound + 1), no body sent: `{}` after {} ms.",
        MAX_BODY + 1,
        status_line(&answer),
        took.as_millis()
    );
    // Streamed past the bound.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")?;
    let before = procstat::status_bytes(pid, "VmRSS:").context("the webhook exited")?;
    let chunk = vec![b' '; 1024 * 1024];
    let mut chunked = Vec::new();
    for _ in 0..(MAX_BODY / chunk.len() + 8) {
        chunked.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        chunked.extend_from_slice(&chunk);
        chunked.extend_from_slice(b"\r\n");
    }
    let (answer, took) =
        exchange(port, &ca, &post("Transfer-Encoding: chunked\r\n"), &chunked).await?;
    let peak = procstat::status_bytes(pid, "VmHWM:").context("the webhook exited")?;
    println!(
        "A chunked review of {} MiB (past the bound of {} MiB): `{}` after {} ms; peak RSS {:.1} MiB above before.",
        chunked.len() / (1024 * 1024),
        MAX_BODY / (1024 * 1024),
        status_line(&answer),
        took.as_millis(),
        peak.saturating_sub(before) as f64 / MIB,
    );
    child.kill().await?;
    Ok(())
}

fn status_line(answer: &[u8]) -> String {
    String::from_utf8_lossy(answer)
        .lines()
        .next()
        .unwrap_or("(no answer)")
        .to_string()
}
