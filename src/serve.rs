//! The HTTP endpoints a platform team scrapes and probes: `/metrics`
//! (Prometheus text), `/healthz` (the process answers) and `/readyz` (rules
//! loaded and caches synced). Each listens where it is told; either may be
//! switched off. Bounded like every port kiln listens on
//! ([`crate::listener`], [`LIMITS`]): a flood of connections on the
//! webhook's port never takes these, and these answer at most
//! [`LIMITS`]`.connections` at once.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::listener::{self, Acceptor, Limits};

/// What the metrics and health listeners admit: a scrape or a probe is one
/// small GET, answered at once.
pub const LIMITS: Limits = Limits {
    connections: 32,
    handshake: Duration::from_secs(10),
    header: Duration::from_secs(10),
    request: Duration::from_secs(30),
};

/// What the endpoints report.
pub trait Probe: Send + Sync + 'static {
    /// The Prometheus exposition text.
    fn metrics(&self) -> String;
    /// Whether kiln is ready to do its job.
    fn ready(&self) -> Result<(), String>;
}

/// Binds `addr` and serves in the background; returns the bound address
/// (useful with port 0).
pub async fn spawn(addr: SocketAddr, probe: Arc<dyn Probe>) -> std::io::Result<SocketAddr> {
    spawn_within(addr, LIMITS, probe).await
}

/// [`spawn`] within `limits`.
pub async fn spawn_within(
    addr: SocketAddr,
    limits: Limits,
    probe: Arc<dyn Probe>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let acceptor = Acceptor::new(listener, &limits);
    tokio::spawn(async move {
        loop {
            let accepted = acceptor.next().await;
            let probe = probe.clone();
            tokio::spawn(async move {
                let slot = accepted.slot;
                let exchange = slot.exchange();
                let on = exchange.clone();
                let service = service_fn(move |req| {
                    on.start();
                    on.received();
                    let response = route(&req, probe.as_ref());
                    on.done();
                    async move { Ok::<_, Infallible>(response) }
                });
                let conn = listener::http1(&limits)
                    .serve_connection(TokioIo::new(accepted.stream), service);
                tokio::select! {
                    _ = conn => {}
                    () = exchange.overdue(limits.request) => {}
                    () = slot.evicted() => {}
                }
            });
        }
    });
    Ok(bound)
}

fn route(req: &Request<Incoming>, probe: &dyn Probe) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match req.uri().path() {
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            probe.metrics(),
        ),
        "/healthz" | "/livez" => (StatusCode::OK, "text/plain", "ok".to_string()),
        "/readyz" => match probe.ready() {
            Ok(()) => (StatusCode::OK, "text/plain", "ok".to_string()),
            Err(why) => (StatusCode::SERVICE_UNAVAILABLE, "text/plain", why),
        },
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /metrics, /healthz or /readyz".to_string(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = http::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    response
}

/// Parses a bind address the controller-runtime way: `:8080` means every
/// interface, `0` switches the endpoint off.
pub fn parse_bind(s: &str) -> Result<Option<SocketAddr>, String> {
    match s {
        "0" | "" => Ok(None),
        s if s.starts_with(':') => format!("0.0.0.0{s}")
            .parse()
            .map(Some)
            .map_err(|e| format!("`{s}`: {e}")),
        s => s
            .parse()
            .map(Some)
            .map_err(|e| format!("`{s}`: {e} (expected HOST:PORT, :PORT or 0)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(bool);
    impl Probe for Fixed {
        fn metrics(&self) -> String {
            "kiln_rules_loaded 1\n".into()
        }
        fn ready(&self) -> Result<(), String> {
            if self.0 {
                Ok(())
            } else {
                Err("rule webapp: caches not synced".into())
            }
        }
    }

    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let code = out[9..12].parse().unwrap();
        (
            code,
            out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string(),
        )
    }

    #[tokio::test]
    async fn serves_metrics_health_and_readiness() {
        let ready = spawn("127.0.0.1:0".parse().unwrap(), Arc::new(Fixed(true)))
            .await
            .unwrap();
        assert_eq!(get(ready, "/healthz").await, (200, "ok".into()));
        assert_eq!(get(ready, "/readyz").await, (200, "ok".into()));
        assert_eq!(
            get(ready, "/metrics").await,
            (200, "kiln_rules_loaded 1\n".into())
        );
        assert_eq!(get(ready, "/nope").await.0, 404);
        let not_ready = spawn("127.0.0.1:0".parse().unwrap(), Arc::new(Fixed(false)))
            .await
            .unwrap();
        assert_eq!(
            get(not_ready, "/readyz").await,
            (503, "rule webapp: caches not synced".into())
        );
        assert_eq!(get(not_ready, "/healthz").await.0, 200);
    }

    #[test]
    fn bind_addresses() {
        assert_eq!(parse_bind("0").unwrap(), None);
        assert_eq!(
            parse_bind(":8080").unwrap(),
            Some("0.0.0.0:8080".parse().unwrap())
        );
        assert_eq!(
            parse_bind("127.0.0.1:9").unwrap(),
            Some("127.0.0.1:9".parse().unwrap())
        );
        assert!(parse_bind("localhost").is_err());
    }
}
