//! The client against a server of the test's own on loopback (opened by an
//! explicit allow entry), and against resolvers whose answers change.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;

use super::*;

/// Answers by path: `/ok`, `/echo`, `/500`, `/429`, `/slow`, `/big`,
/// `/chunked-big`, `/redirect`, `/notjson`.
async fn handle(
    req: http::Request<hyper::body::Incoming>,
) -> Result<http::Response<Full<Bytes>>, Infallible> {
    let mut res = http::Response::builder();
    let body: Bytes = match req.uri().path() {
        "/ok" | "/v1/vpcs/vpc-1" => Bytes::from_static(br#"{"state":"available"}"#),
        "/echo" | "/v1/echo" => {
            let auth = req
                .headers()
                .get("authorization")
                .map(|v| v.to_str().unwrap_or("?").to_string());
            let target = req.uri().to_string();
            let host = req
                .headers()
                .get("host")
                .map(|v| v.to_str().unwrap_or("?").to_string());
            Bytes::from(json!({"auth": auth, "target": target, "host": host}).to_string())
        }
        "/500" => {
            res = res.status(500);
            Bytes::from_static(br#"{"state":"available"}"#)
        }
        "/429" => {
            res = res.status(429).header("retry-after", "7");
            Bytes::new()
        }
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Bytes::from_static(b"{}")
        }
        "/big" => Bytes::from(format!("\"{}\"", "x".repeat(2 * 1024 * 1024))),
        "/redirect" => {
            res = res
                .status(302)
                .header("location", "http://169.254.169.254/latest?token=s3cr3t");
            Bytes::new()
        }
        "/notjson" => Bytes::from_static(b"<html>hello</html>"),
        _ => {
            res = res.status(404);
            Bytes::new()
        }
    };
    Ok(res.body(Full::new(body)).unwrap())
}

/// A server on 127.0.0.1 with an ephemeral port.
async fn server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service_fn(handle))
                    .await;
            });
        }
    });
    addr
}

/// Hands out one scripted answer per lookup and counts lookups.
struct Scripted {
    answers: Mutex<VecDeque<Vec<IpAddr>>>,
    lookups: AtomicUsize,
}

impl Scripted {
    fn new(answers: &[&[&str]]) -> Arc<Self> {
        Arc::new(Self {
            answers: Mutex::new(
                answers
                    .iter()
                    .map(|a| a.iter().map(|ip| ip.parse().unwrap()).collect())
                    .collect(),
            ),
            lookups: AtomicUsize::new(0),
        })
    }
}

impl Resolve for Scripted {
    fn resolve<'a>(&'a self, _: &'a str, port: u16) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        let answer = self.answers.lock().unwrap().pop_front().unwrap_or_default();
        Box::pin(async move {
            Ok(answer
                .into_iter()
                .map(|ip| SocketAddr::new(ip, port))
                .collect())
        })
    }
}

fn request(url: &str, path: &[&str]) -> Request {
    let mut r = Request::new(Method::Get, Arc::new(Destination::parse(url).unwrap()));
    r.path = path.iter().map(|s| s.to_string()).collect();
    r.allow.cidrs = vec!["127.0.0.1/32".parse().unwrap()];
    r
}

async fn get(addr: SocketAddr, path: &str) -> Result<Response, Error> {
    let client = Client::new(AddressPolicy::new([]));
    client
        .send(&request(
            &format!("http://127.0.0.1:{}", addr.port()),
            &[path],
        ))
        .await
}

#[tokio::test]
async fn a_2xx_json_answer_is_data() {
    let addr = server().await;
    let got = get(addr, "ok").await.unwrap();
    assert_eq!(got.json().unwrap(), json!({"state": "available"}));
}

#[tokio::test]
async fn every_failure_is_an_error_never_data() {
    let addr = server().await;
    assert!(matches!(
        get(addr, "500").await,
        Err(Error::Status {
            status: 500,
            retry_after: None
        })
    ));
    let throttled = get(addr, "429").await.unwrap_err();
    assert_eq!(
        (throttled.class(), throttled.retry_after()),
        ("throttled", Some(Duration::from_secs(7)))
    );
    assert!(matches!(
        get(addr, "big").await,
        Err(Error::TooLarge {
            limit: Limits::DEFAULT_MAX_BODY
        })
    ));
    assert!(matches!(
        get(addr, "nowhere").await,
        Err(Error::Status { status: 404, .. })
    ));
    let undecodable = get(addr, "notjson").await.unwrap().json().unwrap_err();
    assert!(!undecodable.to_string().contains("hello"), "{undecodable}");
}

#[tokio::test]
async fn a_redirect_is_not_followed_and_its_query_not_shown() {
    let addr = server().await;
    let err = get(addr, "redirect").await.unwrap_err();
    assert!(
        matches!(&err, Error::Redirect { status: 302, to_host: Some(h) } if h == "169.254.169.254"),
        "{err:?}"
    );
    assert!(!err.to_string().contains("s3cr3t"), "{err}");
}

#[tokio::test]
async fn a_slow_server_times_out_within_the_limit() {
    let addr = server().await;
    let mut r = request(&format!("http://127.0.0.1:{}", addr.port()), &["slow"]);
    r.limits = Limits::bounded(Duration::from_millis(300), 1024);
    let started = std::time::Instant::now();
    let err = Client::new(AddressPolicy::new([]))
        .send(&r)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn loopback_is_refused_without_an_allow_entry() {
    let addr = server().await;
    let mut r = request(&format!("http://127.0.0.1:{}", addr.port()), &["ok"]);
    r.allow = AllowList::default();
    let err = Client::new(AddressPolicy::new([]))
        .send(&r)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Refused {
                refusal: Refusal {
                    class: Class::Loopback,
                    ..
                },
                ..
            }
        ),
        "{err:?}"
    );
    let wide = AllowList {
        cidrs: vec!["0.0.0.0/0".parse().unwrap()],
        hosts: vec![],
    };
    r.allow = wide;
    assert!(Client::new(AddressPolicy::new([])).send(&r).await.is_err());
}

#[tokio::test]
async fn the_api_server_is_refused_even_when_loopback_is_open_for_tests() {
    let addr = server().await;
    let mut r = request(&format!("http://127.0.0.1:{}", addr.port()), &["ok"]);
    r.allow = AllowList::default();
    let tests = AddressPolicy::new(["127.0.0.1".parse().unwrap()]).allowing_loopback_for_tests();
    let err = Client::new(tests).send(&r).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Refused {
                refusal: Refusal {
                    class: Class::ApiServer,
                    ..
                },
                ..
            }
        ),
        "{err:?}"
    );
    let open = AddressPolicy::new([]).allowing_loopback_for_tests();
    assert!(Client::new(open).send(&r).await.is_ok());
}

#[tokio::test]
async fn the_checked_answer_is_the_one_dialled() {
    let addr = server().await;
    // A name that answers an allowed address, then (were it asked again)
    // one that is not: the client asks once and dials what it checked.
    let rebinding = Scripted::new(&[&["127.0.0.1"], &["169.254.169.254"]]);
    let client = Client::with_resolver(AddressPolicy::new([]), rebinding.clone());
    let r = request(&format!("http://vpc.example:{}", addr.port()), &["ok"]);
    assert!(client.send(&r).await.is_ok());
    assert_eq!(rebinding.lookups.load(Ordering::SeqCst), 1);

    // The other way round: refused on the first answer, whatever follows.
    let rebinding = Scripted::new(&[&["169.254.169.254"], &["127.0.0.1"]]);
    let client = Client::with_resolver(AddressPolicy::new([]), rebinding.clone());
    assert!(matches!(client.send(&r).await, Err(Error::Refused { .. })));
    assert_eq!(rebinding.lookups.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn one_refused_address_among_several_refuses_the_request() {
    let addr = server().await;
    for answer in [
        &["127.0.0.1", "::ffff:169.254.169.254"][..],
        &["127.0.0.1", "fd00:ec2::254"][..],
        &["127.0.0.1", "::ffff:127.0.0.2"][..],
    ] {
        let client = Client::with_resolver(AddressPolicy::new([]), Scripted::new(&[answer]));
        let r = request(&format!("http://vpc.example:{}", addr.port()), &["ok"]);
        assert!(
            matches!(client.send(&r).await, Err(Error::Refused { .. })),
            "{answer:?}"
        );
    }
}

#[tokio::test]
async fn credentials_go_in_the_header_only_and_a_tenant_value_stays_one_segment() {
    let addr = server().await;
    let client = Client::new(AddressPolicy::new([]));
    let mut r = request(&format!("http://127.0.0.1:{}/v1", addr.port()), &["echo"]);
    let plain = client.send(&r).await.unwrap().json().unwrap();
    assert_eq!(
        plain["auth"],
        json!(null),
        "no credential unless the rule names one"
    );
    r.auth = Auth::Bearer(SecretBytes::new("tok-123"));
    let got = client.send(&r).await.unwrap().json().unwrap();
    assert_eq!(got["auth"], json!("Bearer tok-123"));
    assert!(!format!("{r:?}").contains("tok-123"));

    r.path = vec!["echo/../../admin?x=1".into()];
    let err = client.send(&r).await.unwrap_err();
    assert!(matches!(err, Error::Status { status: 404, .. }), "{err:?}");
    r.headers = vec![("Authorization".into(), "Bearer other".into())];
    assert!(matches!(client.send(&r).await, Err(Error::Header(_))));
    r.headers = vec![("X-Trace".into(), "a\r\nHost: evil".into())];
    assert!(matches!(client.send(&r).await, Err(Error::Header(_))));
}
