//! The fetcher against a server of the test's own on loopback: one request
//! for every primary making it, a cache hit well under a millisecond, a
//! failure that never replaces the good answer, a slow source that does
//! not hold up another.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;

use super::asked;
use super::{Fetcher, State};
use crate::egress::{AddressPolicy, Client};
use crate::rules::Rule;

/// Counts requests; `/slow` waits, `/fail` answers 500 once `failing`.
struct Server {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    failing: Arc<std::sync::atomic::AtomicBool>,
}

async fn server() -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (r, f) = (requests.clone(), failing.clone());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (r, f) = (r.clone(), f.clone());
            let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let (r, f) = (r.clone(), f.clone());
                async move {
                    r.fetch_add(1, Ordering::SeqCst);
                    if req.uri().path().ends_with("/slow") {
                        tokio::time::sleep(Duration::from_secs(5)).await;
                    }
                    let status = if f.load(Ordering::SeqCst) { 500 } else { 200 };
                    let body = Bytes::from(json!({"state": "Available"}).to_string());
                    Ok::<_, Infallible>(
                        http::Response::builder()
                            .status(status)
                            .body(Full::new(body))
                            .unwrap(),
                    )
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Server {
        addr,
        requests,
        failing,
    }
}

fn rule(addr: SocketAddr, interval: &str, extra: &str) -> Rule {
    crate::rules::one_rule(&format!(
        r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: r}}
spec:
  for: {{apiVersion: v1, kind: ConfigMap}}
  external:
    - name: vpc
      url: http://127.0.0.1:{port}/v1
      path: ["{{{{ self.data.vpc }}}}"]
      allow: [127.0.0.1/32]
      interval: {interval}
      timeout: 1s
{extra}
    - name: other
      url: http://127.0.0.1:{port}/v1
      path: [fast]
      allow: [127.0.0.1/32]
"#,
        port = addr.port()
    ))
}

fn fetcher() -> Arc<Fetcher> {
    let client = Client::new(AddressPolicy::new([]));
    Arc::new(Fetcher::new(client, None, Default::default()))
}

async fn answer(f: &Fetcher, rule: &Rule, vpc: &str, source: usize) -> State {
    let this = crate::template::to_jinja(&json!({"data": {"vpc": vpc}}));
    let mut all = asked::all(rule, &this);
    let one = all.swap_remove(source);
    f.answers(rule, vec![one]).await.remove(0).state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_primaries_making_one_request_make_it_once_and_a_hit_is_cheap() {
    let s = server().await;
    let rule = Arc::new(rule(s.addr, "1h", ""));
    let f = fetcher();
    let tasks: Vec<_> = (0..1000)
        .map(|_| {
            let (f, rule) = (f.clone(), rule.clone());
            tokio::spawn(async move { answer(&f, &rule, "vpc-1", 0).await })
        })
        .collect();
    for t in tasks {
        assert!(matches!(t.await.unwrap(), State::Fresh { .. }));
    }
    assert_eq!(s.requests.load(Ordering::SeqCst), 1);

    let started = Instant::now();
    for _ in 0..1000 {
        answer(&f, &rule, "vpc-1", 0).await;
    }
    let per_hit = started.elapsed() / 1000;
    eprintln!("a cache hit: {per_hit:?} (1000 in a row, debug build)");
    assert!(
        per_hit < Duration::from_millis(1),
        "{per_hit:?} per cache hit"
    );
    assert_eq!(s.requests.load(Ordering::SeqCst), 1);
    // Another primary's own request is its own.
    answer(&f, &rule, "vpc-2", 0).await;
    assert_eq!(s.requests.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_is_never_data_and_the_good_answer_stays_for_last_good_only() {
    let s = server().await;
    let strict = rule(s.addr, "1s", "");
    let f = fetcher();
    assert!(matches!(
        answer(&f, &strict, "vpc-1", 0).await,
        State::Fresh { .. }
    ));
    s.failing.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    match answer(&f, &strict, "vpc-1", 0).await {
        State::Failed { error, .. } => assert!(error.contains("answered 500"), "{error}"),
        other => panic!("a failure became {other:?}"),
    }
    // Held: no new request until the backoff ends, still a failure.
    let asked = s.requests.load(Ordering::SeqCst);
    assert!(matches!(
        answer(&f, &strict, "vpc-1", 0).await,
        State::Failed { .. }
    ));
    assert_eq!(s.requests.load(Ordering::SeqCst), asked);

    let lenient = rule(s.addr, "1s", "      lastGood: {maxAge: 1h}\n");
    let f = fetcher();
    s.failing.store(false, Ordering::SeqCst);
    answer(&f, &lenient, "vpc-1", 0).await;
    s.failing.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    match answer(&f, &lenient, "vpc-1", 0).await {
        State::Stale { value, error, .. } => {
            assert_eq!(value, json!({"state": "Available"}));
            assert!(error.contains("answered 500"), "{error}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_source_holds_up_no_other() {
    let s = server().await;
    let rule = Arc::new(rule(s.addr, "1h", ""));
    let f = fetcher();
    let (f2, rule2) = (f.clone(), rule.clone());
    let slow = tokio::spawn(async move { answer(&f2, &rule2, "slow", 0).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    assert!(matches!(
        answer(&f, &rule, "x", 1).await,
        State::Fresh { .. }
    ));
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(slow.await.unwrap(), State::Failed { .. }),
        "timed out, an error"
    );
}
