//! The conversion webhook's HTTPS listener: `POST /convert` answers a
//! `ConversionReview` (each counted and timed in the `kiln_conversion_*`
//! metrics); the serving certificate can be swapped while it runs (each new
//! TLS handshake takes the current one); drained on shutdown (no new
//! connection, the reviews in flight answered).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
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

use super::review::{self, Lookup};
use crate::metrics::Metrics;

/// The path the API server posts reviews to.
pub const PATH: &str = "/convert";

/// Largest review body read (the API server sends a list's objects at once).
const MAX_BODY: usize = 256 * 1024 * 1024;

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

    /// Turns true once [`Serving::drain`] starts.
    pub(crate) fn draining(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }
}

/// Once told to stop, how long a connection is still served, each answer
/// closing it (so the API server does not send a review on a connection
/// being closed), before it is closed as soon as it is idle.
const SETTLE: Duration = Duration::from_secs(1);

/// Bodies up to this size are converted on the async thread that read
/// them; larger ones (a list's objects) are CPU work that moves off it.
const INLINE_BODY: usize = 64 * 1024;

/// Binds `addr` and serves conversion in the background with the
/// certificate in `cert`, counting each review in `metrics`.
pub async fn spawn(
    addr: SocketAddr,
    cert: Arc<Certificate>,
    lookup: Arc<dyn Lookup + Send + Sync>,
    metrics: Arc<Metrics>,
) -> std::io::Result<Serving> {
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_no_client_auth()
        .with_cert_resolver(cert.clone());
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(addr).await?;
    let first = cert.clone();
    let bound = listener.local_addr()?;
    let (stop, stopped) = watch::channel(false);
    let (alive, ended) = mpsc::channel::<()>(1);
    tokio::spawn(async move {
        let mut stopping = stopped.clone();
        // No handshake without a certificate: connections wait in the
        // backlog until the keeper sets the first one (a replica starting
        // makes no review fail).
        tokio::select! {
            () = first.set_once() => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
        drop(first);
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stopping.wait_for(|s| *s) => break,
            };
            let Ok((stream, _)) = accepted else {
                continue;
            };
            // Answers are small writes: send them at once.
            let _ = stream.set_nodelay(true);
            let (acceptor, lookup, metrics) = (acceptor.clone(), lookup.clone(), metrics.clone());
            let (alive, stopped) = (alive.clone(), stopped.clone());
            tokio::spawn(serve_connection(
                stream, acceptor, lookup, metrics, alive, stopped,
            ));
        }
        // The listener closes here: new connections are refused.
    });
    Ok(Serving { bound, stop, ended })
}

/// Serves one accepted connection: the TLS handshake, then reviews until
/// the client closes it or the listener drains (`stopped`).
async fn serve_connection(
    stream: tokio::net::TcpStream,
    acceptor: TlsAcceptor,
    lookup: Arc<dyn Lookup + Send + Sync>,
    metrics: Arc<Metrics>,
    alive: mpsc::Sender<()>,
    mut stopped: watch::Receiver<bool>,
) {
    let _alive = alive;
    let Ok(tls) = acceptor.accept(stream).await else {
        return;
    };
    let draining = stopped.clone();
    let service = service_fn(move |req| {
        let (lookup, metrics) = (lookup.clone(), metrics.clone());
        let draining = draining.clone();
        async move {
            let mut response = handle(req, lookup.as_ref(), &metrics).await;
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
    let conn = http1::Builder::new().serve_connection(TokioIo::new(tls), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        () = async {
            until_stopped(&mut stopped).await;
            tokio::time::sleep(SETTLE).await;
        } => {
            // Still open after SETTLE of answers that close it: idle (closed
            // now) or a review in flight (answered, then closed).
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
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
    lookup: &(dyn Lookup + Send + Sync),
    metrics: &Metrics,
) -> Response<Full<Bytes>> {
    if req.uri().path() != PATH || req.method() != http::Method::POST {
        return reply(
            StatusCode::NOT_FOUND,
            Bytes::from_static(b"not found: POST /convert"),
        );
    }
    let started = Instant::now();
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return reply(StatusCode::BAD_REQUEST, Bytes::from(e.to_string())),
    };
    let answer = || {
        let answer = review::answer(&body, lookup);
        (serde_json::to_vec(&answer.review), answer)
    };
    // Converting thousands of objects is CPU work: off the async threads.
    let (json, answer) = if body.len() <= INLINE_BODY {
        answer()
    } else {
        tokio::task::block_in_place(answer)
    };
    let response = match json {
        Ok(json) => {
            let mut r = reply(StatusCode::OK, Bytes::from(json));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(e) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            Bytes::from(e.to_string()),
        ),
    };
    metrics.converted(
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_drained_listener_answers_the_review_in_flight_then_refuses_connections() {
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
        let metrics = Arc::new(Metrics::new());
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        let serving = spawn(addr, cert, Arc::new(Slow), metrics.clone())
            .await
            .unwrap();
        let bound = serving.bound;
        let mut tls = connect(bound, &m.ca).await.unwrap();
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
