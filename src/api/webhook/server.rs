//! The conversion webhook's HTTPS listener: `POST /convert` answers a
//! `ConversionReview` (each counted and timed in the `kiln_conversion_*`
//! metrics); the serving certificate can be swapped while it runs (each new
//! TLS handshake takes the current one); drained on shutdown (no new
//! connection, the reviews in flight answered). Bounded ([`Bounds`]): a
//! connection limit, deadlines for the handshake, the headers (an idle
//! connection is closed) and each request, the largest review read (413
//! above it, before reading when its length is declared) and the memory
//! the reviews in flight hold together.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::crypto::ring::{default_provider, sign::any_supported_type};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;

use super::body::{self, Budget};
use super::review::{self, Lookup};
use crate::listener::{self, Acceptor, Exchange, Limits};
use crate::metrics::Metrics;

/// The path the API server posts reviews to.
pub const PATH: &str = "/convert";

/// What the webhook's listener admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Connections, deadlines.
    pub limits: Limits,
    /// The largest review body read; larger ones are answered 413.
    pub max_body: usize,
    /// The review bodies read at once, all connections together (at least
    /// `max_body`, so the largest review can be read).
    pub budget: usize,
}

/// The largest review body read: 32 MiB. The API server refuses a request
/// body over 3 MiB (`MaxRequestBodyBytes`, `k8s.io/apiserver`'s server
/// config) and etcd an object over 1.5 MiB (`--max-request-bytes`), so a
/// review of any one object a client can write or read fits ten times
/// over; a review of a list (the API server's watch cache fills in pages
/// of 10,000 objects) fits with objects of up to 3 KiB each.
pub const MAX_BODY: usize = 32 * 1024 * 1024;

impl Default for Bounds {
    fn default() -> Self {
        Self {
            limits: Limits {
                connections: 64,
                handshake: Duration::from_secs(10),
                header: Duration::from_secs(30),
                request: Duration::from_secs(60),
            },
            max_body: MAX_BODY,
            budget: MAX_BODY,
        }
    }
}

/// The serving certificate, swappable; `ready` turns true once one is set.
#[derive(Debug)]
pub struct Certificate {
    current: RwLock<Option<Arc<CertifiedKey>>>,
    ready: watch::Sender<bool>,
}

impl Default for Certificate {
    fn default() -> Self {
        Self {
            current: RwLock::new(None),
            ready: watch::channel(false).0,
        }
    }
}

/// A certificate or key that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("the webhook's certificate or key does not parse: {0}")]
pub struct BadCertificate(String);

impl Certificate {
    /// Serves `cert_pem` (chain) with `key_pem` from the next handshake on.
    pub fn set(&self, cert_pem: &str, key_pem: &str) -> Result<(), BadCertificate> {
        let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| BadCertificate(e.to_string()))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| BadCertificate(e.to_string()))?;
        let key = any_supported_type(&key).map_err(|e| BadCertificate(e.to_string()))?;
        let certified = Arc::new(CertifiedKey::new(chain, key));
        if let Ok(mut slot) = self.current.write() {
            *slot = Some(certified);
        }
        self.ready.send_replace(true);
        Ok(())
    }

    /// Resolves once a certificate is set.
    async fn set_once(&self) {
        let mut ready = self.ready.subscribe();
        let _ = ready.wait_for(|r| *r).await;
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok()?.clone()
    }
}

/// A listener serving conversion: [`Serving::drain`] stops it.
#[derive(Debug)]
pub struct Serving {
    /// Where it listens.
    pub bound: SocketAddr,
    stop: watch::Sender<bool>,
    /// Closed once the accept loop and every connection have ended (each
    /// holds a sender).
    ended: mpsc::Receiver<()>,
}

impl Serving {
    /// Stops accepting connections, lets every review in flight finish
    /// (each answer from now on closes its connection; a connection still
    /// open a moment later is closed once idle) and waits for them, at most
    /// `grace`; whether all finished in time.
    pub async fn drain(mut self, grace: Duration) -> bool {
        let _ = self.stop.send(true);
        tokio::time::timeout(grace, async { while self.ended.recv().await.is_some() {} })
            .await
            .is_ok()
    }
}

/// Once told to stop, how long a connection is still served, each answer
/// closing it (so the API server does not send a review on a connection
/// being closed), before it is closed as soon as it is idle.
const SETTLE: Duration = Duration::from_secs(1);

/// Bodies up to this size are converted on the async thread that read
/// them; larger ones (a list's objects) are CPU work that moves off it.
const INLINE_BODY: usize = 64 * 1024;

/// What every connection of one listener shares.
#[derive(Clone)]
struct Shared {
    acceptor: TlsAcceptor,
    lookup: Arc<dyn Lookup + Send + Sync>,
    metrics: Arc<Metrics>,
    bounds: Bounds,
    budget: Budget,
}

/// Binds `addr` and serves conversion in the background with the
/// certificate in `cert` within `bounds`, counting each review in `metrics`.
pub async fn spawn(
    addr: SocketAddr,
    bounds: Bounds,
    cert: Arc<Certificate>,
    lookup: Arc<dyn Lookup + Send + Sync>,
    metrics: Arc<Metrics>,
) -> std::io::Result<Serving> {
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_no_client_auth()
        .with_cert_resolver(cert.clone());
    let shared = Shared {
        acceptor: TlsAcceptor::from(Arc::new(config)),
        lookup,
        metrics,
        bounds,
        budget: Budget::new(bounds.budget.max(bounds.max_body)),
    };
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let acceptor = Acceptor::new(listener, &bounds.limits);
    let (stop, stopped) = watch::channel(false);
    let (alive, ended) = mpsc::channel::<()>(1);
    tokio::spawn(async move {
        let mut stopping = stopped.clone();
        // No handshake without a certificate: connections wait in the
        // backlog until the keeper sets the first one (a replica starting
        // makes no review fail).
        tokio::select! {
            () = cert.set_once() => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
        drop(cert);
        loop {
            let accepted = tokio::select! {
                accepted = acceptor.next() => accepted,
                _ = stopping.wait_for(|s| *s) => break,
            };
            // Answers are small writes: send them at once.
            let _ = accepted.stream.set_nodelay(true);
            let (shared, alive, stopped) = (shared.clone(), alive.clone(), stopped.clone());
            tokio::spawn(serve_connection(accepted, shared, alive, stopped));
        }
        // The listener closes here: new connections are refused.
    });
    Ok(Serving { bound, stop, ended })
}

/// Serves one accepted connection: the TLS handshake, then reviews until
/// the client closes it, a deadline passes or the listener drains
/// (`stopped`).
async fn serve_connection(
    accepted: listener::Accepted,
    shared: Shared,
    alive: mpsc::Sender<()>,
    mut stopped: watch::Receiver<bool>,
) {
    let (_alive, slot) = (alive, accepted.slot);
    let limits = shared.bounds.limits;
    let handshake = shared.acceptor.accept(accepted.stream);
    let Ok(Ok(tls)) = tokio::time::timeout(limits.handshake, handshake).await else {
        return;
    };
    let exchange = slot.exchange();
    let draining = stopped.clone();
    let on = exchange.clone();
    let service = service_fn(move |req| {
        let (shared, exchange, draining) = (shared.clone(), on.clone(), draining.clone());
        async move {
            exchange.start();
            let mut response = handle(req, &shared, &exchange).await;
            exchange.done();
            if *draining.borrow() {
                // The client opens its next connection elsewhere.
                response.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
            }
            Ok::<_, Infallible>(response)
        }
    });
    let conn = listener::http1(&limits).serve_connection(TokioIo::new(tls), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        // A request not answered in time: the connection is dropped.
        () = exchange.overdue(limits.request) => {}
        // Its slot is wanted by a new connection, and it is in no request.
        () = slot.evicted() => {}
        () = async {
            until_stopped(&mut stopped).await;
            tokio::time::sleep(SETTLE).await;
        } => {
            // Still open after SETTLE of answers that close it: idle (closed
            // now) or a review in flight (answered, then closed).
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(limits.request, conn).await;
        }
    }
}

/// Resolves once the listener is told to stop (never if it is dropped
/// without being told).
async fn until_stopped(stopped: &mut watch::Receiver<bool>) {
    if stopped.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn handle(
    req: Request<Incoming>,
    shared: &Shared,
    exchange: &Exchange,
) -> Response<Full<Bytes>> {
    if req.uri().path() != PATH || req.method() != http::Method::POST {
        return reply(
            StatusCode::NOT_FOUND,
            Bytes::from_static(b"not found: POST /convert"),
        );
    }
    let started = Instant::now();
    let body = match body::read(req.into_body(), shared.bounds.max_body, &shared.budget).await {
        Ok(read) => read,
        Err(refused) => {
            shared
                .metrics
                .converted(None, false, 0, started.elapsed().as_secs_f64());
            return reply(refused.status(), Bytes::from(refused.to_string()));
        }
    };
    exchange.received();
    // The bytes read stay charged until the answer made of them is written.
    if let Some(charge) = body.charge {
        exchange.hold(charge);
    }
    let bytes = body.bytes;
    let lookup = shared.lookup.as_ref();
    let answer = || review::answer(&bytes, lookup);
    // Converting thousands of objects is CPU work: off the async threads.
    let answer = if bytes.len() <= INLINE_BODY {
        answer()
    } else {
        tokio::task::block_in_place(answer)
    };
    drop(bytes);
    let mut response = reply(StatusCode::OK, Bytes::from(answer.json));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    shared.metrics.converted(
        answer.crd.as_deref(),
        answer.ok,
        answer.objects,
        started.elapsed().as_secs_f64(),
    );
    response
}

fn reply(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::convert::Conversions;
    use rustls::pki_types::ServerName;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Takes its time over each lookup: a review in flight.
    struct Slow;
    impl Lookup for Slow {
        fn conversions(&self, _: &str, _: &str) -> Option<Arc<Conversions>> {
            std::thread::sleep(Duration::from_millis(800));
            None
        }
    }

    /// A review large enough to be converted off the async threads (as a
    /// list's is), so the listener can be told to stop meanwhile.
    fn review() -> String {
        let padding = "x".repeat(INLINE_BODY);
        format!(
            r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{{"uid":"r1","desiredAPIVersion":"demo.kiln.dev/v1","objects":[{{"apiVersion":"demo.kiln.dev/v1alpha1","kind":"WebApp","metadata":{{"name":"a","annotations":{{"pad":"{padding}"}}}}}}]}}}}"#
        )
    }

    async fn connect(
        bound: SocketAddr,
        ca: &str,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
            .unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(bound).await?;
        let name = ServerName::try_from("127.0.0.1").unwrap();
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
    }

    /// A listener serving `lookup` within `bounds`, and its CA.
    async fn listening(
        bounds: Bounds,
        lookup: Arc<dyn Lookup + Send + Sync>,
        metrics: Arc<Metrics>,
    ) -> (Serving, String) {
        let hosts = vec!["127.0.0.1".to_string()];
        let m = super::super::certs::issue(
            &hosts,
            Duration::from_secs(600),
            std::time::SystemTime::now(),
            None,
        )
        .unwrap();
        let cert = Arc::new(Certificate::default());
        cert.set(&m.cert, &m.key).unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        let serving = spawn(addr, bounds, cert, lookup, metrics).await.unwrap();
        (serving, m.ca)
    }

    /// Converts nothing, at once.
    struct Nothing;
    impl Lookup for Nothing {
        fn conversions(&self, _: &str, _: &str) -> Option<Arc<Conversions>> {
            None
        }
    }

    /// Generous: the machine may be loaded; never what a test asserts on.
    const DEADLINE: Duration = Duration::from_secs(120);

    /// Short deadlines, a small body bound.
    fn tight() -> Bounds {
        Bounds {
            limits: Limits {
                connections: 2,
                handshake: Duration::from_secs(1),
                header: Duration::from_secs(1),
                request: Duration::from_secs(2),
            },
            max_body: 64 * 1024,
            budget: 64 * 1024,
        }
    }

    /// Reads until the server closes the connection (or fails it); what it
    /// sent.
    async fn until_closed(stream: &mut (impl AsyncReadExt + Unpin)) -> String {
        let mut out = Vec::new();
        let read = tokio::time::timeout(DEADLINE, stream.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "the server closed the connection");
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_oversized_review_gets_413_at_once() {
        let (serving, ca) = listening(Bounds::default(), Arc::new(Nothing), Arc::default()).await;
        // Declared over the bound: answered before a byte of it is sent.
        let mut tls = connect(serving.bound, &ca).await.unwrap();
        let request = format!(
            "POST /convert HTTP/1.1\r\nHost: kiln\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        tls.write_all(request.as_bytes()).await.unwrap();
        tls.flush().await.unwrap();
        let response = until_closed(&mut tls).await;
        assert!(response.starts_with("HTTP/1.1 413"), "{response}");
        // Streamed (chunked) past the bound: cut off as it crosses it.
        let (serving, ca) = listening(tight(), Arc::new(Nothing), Arc::default()).await;
        let mut tls = connect(serving.bound, &ca).await.unwrap();
        let chunk = "x".repeat(64 * 1024 + 1);
        let request = format!(
            "POST /convert HTTP/1.1\r\nHost: kiln\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n",
            chunk.len()
        );
        tls.write_all(request.as_bytes()).await.unwrap();
        tls.flush().await.unwrap();
        let response = until_closed(&mut tls).await;
        assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_webhook_connections_are_closed() {
        let (serving, ca) = listening(tight(), Arc::new(Nothing), Arc::default()).await;
        // No TLS handshake.
        let mut tcp = tokio::net::TcpStream::connect(serving.bound).await.unwrap();
        until_closed(&mut tcp).await;
        // A handshake, then nothing.
        let mut tls = connect(serving.bound, &ca).await.unwrap();
        until_closed(&mut tls).await;
        // A review answered, then nothing.
        let mut tls = connect(serving.bound, &ca).await.unwrap();
        let review = r#"{"request":{"uid":"r1","desiredAPIVersion":"a.b/v1","objects":[]}}"#;
        let request = format!(
            "POST /convert HTTP/1.1\r\nHost: kiln\r\nContent-Length: {}\r\n\r\n{review}",
            review.len()
        );
        tls.write_all(request.as_bytes()).await.unwrap();
        tls.flush().await.unwrap();
        let response = until_closed(&mut tls).await;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        // Headers sent, the body never finished.
        let mut tls = connect(serving.bound, &ca).await.unwrap();
        let request = "POST /convert HTTP/1.1\r\nHost: kiln\r\nContent-Length: 100\r\n\r\n{";
        tls.write_all(request.as_bytes()).await.unwrap();
        tls.flush().await.unwrap();
        until_closed(&mut tls).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_over_the_limit_takes_the_place_of_the_oldest_idle_one() {
        let mut bounds = tight();
        bounds.limits.header = DEADLINE;
        bounds.limits.handshake = DEADLINE;
        let (serving, ca) = listening(bounds, Arc::new(Nothing), Arc::default()).await;
        let mut first = connect(serving.bound, &ca).await.unwrap();
        let _second = connect(serving.bound, &ca).await.unwrap();
        // Both slots held by idle connections: a third is served, the
        // oldest idle one closed for it.
        let third = tokio::time::timeout(DEADLINE, connect(serving.bound, &ca)).await;
        assert!(matches!(third, Ok(Ok(_))), "a third connection is served");
        until_closed(&mut first).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_review_is_answered_while_every_slot_holds_a_body_never_finished() {
        // No deadline closes a connection while the test waits.
        let mut bounds = tight();
        bounds.limits.header = 2 * DEADLINE;
        bounds.limits.handshake = 2 * DEADLINE;
        bounds.limits.request = 2 * DEADLINE;
        let (serving, ca) = listening(bounds, Arc::new(Nothing), Arc::default()).await;
        // Every slot on a request whose body never comes: the server is
        // reading it once it asks for it (`100 Continue`).
        let mut held = Vec::new();
        for _ in 0..bounds.limits.connections {
            let mut tls = connect(serving.bound, &ca).await.unwrap();
            let request = "POST /convert HTTP/1.1\r\nHost: kiln\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n";
            tls.write_all(request.as_bytes()).await.unwrap();
            tls.flush().await.unwrap();
            let mut head = [0u8; 25];
            tls.read_exact(&mut head).await.unwrap();
            assert!(head.starts_with(b"HTTP/1.1 100"), "{head:?}");
            tls.write_all(b"{").await.unwrap();
            tls.flush().await.unwrap();
            held.push(tls);
        }
        // The API server's review is answered all the same: the oldest of
        // them makes room for it.
        let answered = async {
            let mut tls = connect(serving.bound, &ca).await.unwrap();
            let review = r#"{"request":{"uid":"r1","desiredAPIVersion":"a.b/v1","objects":[]}}"#;
            let request = format!(
                "POST /convert HTTP/1.1\r\nHost: kiln\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{review}",
                review.len()
            );
            tls.write_all(request.as_bytes()).await.unwrap();
            tls.flush().await.unwrap();
            until_closed(&mut tls).await
        };
        let response = tokio::time::timeout(DEADLINE, answered).await;
        assert!(
            response
                .as_ref()
                .is_ok_and(|r| r.starts_with("HTTP/1.1 200")),
            "{response:?}"
        );
        until_closed(&mut held[0]).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn metrics_keep_answering_while_every_slot_is_held() {
        let metrics = crate::serve::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), Arc::new(Up))
            .await
            .unwrap();
        // Every slot of the metrics port held by idle connections, and the
        // webhook's port flooded too.
        let (serving, _) = listening(tight(), Arc::new(Nothing), Arc::default()).await;
        let mut held = Vec::new();
        for _ in 0..crate::serve::LIMITS.connections + 8 {
            held.push(tokio::net::TcpStream::connect(metrics).await.unwrap());
            held.push(tokio::net::TcpStream::connect(serving.bound).await.unwrap());
        }
        let scraped = tokio::time::timeout(DEADLINE, scrape(metrics)).await;
        assert!(scraped.is_ok_and(|s| s.contains("kiln_up 1")));
    }

    struct Up;
    impl crate::serve::Probe for Up {
        fn metrics(&self) -> String {
            "kiln_up 1\n".into()
        }
        fn ready(&self) -> Result<(), String> {
            Ok(())
        }
    }

    async fn scrape(addr: SocketAddr) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        until_closed(&mut s).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_drained_listener_answers_the_review_in_flight_then_refuses_connections() {
        let metrics = Arc::new(Metrics::new());
        let (serving, ca) = listening(Bounds::default(), Arc::new(Slow), metrics.clone()).await;
        let bound = serving.bound;
        let mut tls = connect(bound, &ca).await.unwrap();
        let review = review();
        let request = format!(
            "POST /convert HTTP/1.1\r\nHost: kiln\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{review}",
            review.len()
        );
        tls.write_all(request.as_bytes()).await.unwrap();
        tls.flush().await.unwrap();
        // The review is in flight (its lookup takes 800 ms) when the
        // listener is told to stop.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let drained = tokio::spawn(serving.drain(Duration::from_secs(10)));
        let mut response = String::new();
        tls.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(
            response.to_ascii_lowercase().contains("connection: close"),
            "{response}"
        );
        assert!(response.contains("\"uid\":\"r1\""), "{response}");
        assert!(drained.await.unwrap(), "drained within the grace");
        assert!(
            tokio::net::TcpStream::connect(bound).await.is_err(),
            "no new connection once drained"
        );
        let text = metrics.encode();
        assert!(
            text.contains("kiln_conversion_reviews_total{result=\"failure\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kiln_conversion_duration_seconds_count{} 1"),
            "{text}"
        );
    }
}
