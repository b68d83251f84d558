//! The conversion webhook's HTTPS listener: `POST /convert` answers a
//! `ConversionReview`; the serving certificate can be swapped while it
//! runs (each new TLS handshake takes the current one).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

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
use tokio_rustls::TlsAcceptor;

use super::review::{self, Lookup};

/// The path the API server posts reviews to.
pub const PATH: &str = "/convert";

/// Largest review body read (the API server sends a list's objects at once).
const MAX_BODY: usize = 256 * 1024 * 1024;

/// The serving certificate, swappable.
#[derive(Debug, Default)]
pub struct Certificate(RwLock<Option<Arc<CertifiedKey>>>);

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
        if let Ok(mut slot) = self.0.write() {
            *slot = Some(certified);
        }
        Ok(())
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.read().ok()?.clone()
    }
}

/// Binds `addr` and serves conversion in the background with the
/// certificate in `cert`; returns the bound address.
pub async fn spawn(
    addr: SocketAddr,
    cert: Arc<Certificate>,
    lookup: Arc<dyn Lookup + Send + Sync>,
) -> std::io::Result<SocketAddr> {
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, lookup) = (acceptor.clone(), lookup.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = service_fn(move |req| {
                    let lookup = lookup.clone();
                    async move { Ok::<_, Infallible>(handle(req, lookup.as_ref()).await) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Ok(bound)
}

async fn handle(
    req: Request<Incoming>,
    lookup: &(dyn Lookup + Send + Sync),
) -> Response<Full<Bytes>> {
    if req.uri().path() != PATH || req.method() != http::Method::POST {
        return reply(
            StatusCode::NOT_FOUND,
            Bytes::from_static(b"not found: POST /convert"),
        );
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return reply(StatusCode::BAD_REQUEST, Bytes::from(e.to_string())),
    };
    // Converting thousands of objects is CPU work: off the async threads.
    let answer = tokio::task::block_in_place(|| review::answer(&body, lookup));
    match serde_json::to_vec(&answer) {
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
    }
}

fn reply(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r
}
