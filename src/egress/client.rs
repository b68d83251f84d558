//! The guarded client: one request, one connection, checked at every step
//! (the destination, each resolved address, the certificate, the status,
//! the size of the body), within one timeout over the whole exchange.

use base64::Engine as _;
use http::header::{self, HeaderName, HeaderValue};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};

use super::address::AddressPolicy;
use super::destination::Scheme;
use super::dial;
use super::error::Error;
use super::request::{Method, Request};
use super::resolve::{Resolve, SystemResolver};
use super::retry_after;
use super::secret::Auth;
use super::tls;

/// Headers a rule may not set: credentials come from a Secret, the framing
/// is the client's (`kiln validate` refuses them in a rule).
pub const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
];

/// A successful answer (2xx), its body within the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: Bytes,
}

impl Response {
    /// The body as JSON.
    pub fn json(&self) -> Result<Value, Error> {
        serde_json::from_slice(&self.body).map_err(|e| Error::Undecodable(json_error(&e)))
    }
}

/// Where the JSON went wrong, never what it held.
fn json_error(e: &serde_json::Error) -> String {
    format!(
        "{:?} error at line {} column {}",
        e.classify(),
        e.line(),
        e.column()
    )
}

/// The client every source and hook sends through.
#[derive(Clone)]
pub struct Client {
    policy: Arc<AddressPolicy>,
    resolver: Arc<dyn Resolve>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client checking addresses by `policy`, resolving with the system.
    pub fn new(policy: AddressPolicy) -> Self {
        Self::with_resolver(policy, Arc::new(SystemResolver))
    }

    /// A client resolving with `resolver` (tests).
    pub fn with_resolver(policy: AddressPolicy, resolver: Arc<dyn Resolve>) -> Self {
        Self {
            policy: Arc::new(policy),
            resolver,
        }
    }

    /// Sends `request`: its answer if it is a 2xx within the limits, else
    /// the error.
    pub async fn send(&self, request: &Request) -> Result<Response, Error> {
        let prepared = prepare(request)?;
        let timeout = request.limits.timeout;
        match tokio::time::timeout(timeout, self.exchange(request, prepared)).await {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout(timeout)),
        }
    }

    async fn exchange(
        &self,
        request: &Request,
        prepared: http::Request<Full<Bytes>>,
    ) -> Result<Response, Error> {
        let dest = &request.destination;
        let addrs =
            dial::checked_addresses(&*self.resolver, &self.policy, dest, &request.allow).await?;
        let tcp = dial::connect(dest.host(), &addrs).await?;
        let max = request.limits.max_body;
        match dest.scheme() {
            Scheme::Http => exchange(tcp, prepared, max).await,
            Scheme::Https => {
                let config = tls::client_config(&request.tls)?;
                let stream = dial::handshake(config, dest.host(), tcp).await?;
                exchange(stream, prepared, max).await
            }
        }
    }
}

/// The HTTP request `request` describes, every part checked.
fn prepare(request: &Request) -> Result<http::Request<Full<Bytes>>, Error> {
    let dest = &request.destination;
    let target = dest.path_and_query(&request.path, &request.query)?;
    let mut builder = http::Request::builder()
        .method(request.method.as_str())
        .uri(target)
        .header(header::HOST, dest.authority())
        .header(header::CONNECTION, "close")
        .header(header::ACCEPT, "application/json");
    for (name, value) in &request.headers {
        let header_name = HeaderName::try_from(name.as_str())
            .ok()
            .filter(|n| !RESERVED_HEADERS.contains(&n.as_str()))
            .ok_or_else(|| Error::Header(name.clone()))?;
        let value =
            HeaderValue::try_from(value.as_str()).map_err(|_| Error::Header(name.clone()))?;
        builder = builder.header(header_name, value);
    }
    if let Some(value) = authorization(&request.auth) {
        builder = builder.header(header::AUTHORIZATION, value?);
    }
    let body = match (&request.method, &request.body) {
        (Method::Post, Some(body)) => {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
            Bytes::from(serde_json::to_vec(body).map_err(|e| Error::Undecodable(json_error(&e)))?)
        }
        _ => Bytes::new(),
    };
    builder
        .body(Full::new(body))
        .map_err(|_| Error::Header("request line".into()))
}

fn authorization(auth: &Auth) -> Option<Result<HeaderValue, Error>> {
    let text = match auth {
        Auth::None => return None,
        Auth::Bearer(token) => {
            let mut v = b"Bearer ".to_vec();
            v.extend_from_slice(token.expose());
            v
        }
        Auth::Basic { username, password } => {
            let mut pair = username.expose().to_vec();
            pair.push(b':');
            pair.extend_from_slice(password.expose());
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
            .into_bytes()
        }
    };
    Some(
        HeaderValue::from_bytes(&text)
            .map(|mut v| {
                v.set_sensitive(true);
                v
            })
            .map_err(|_| Error::Header("authorization (from the Secret)".into())),
    )
}

/// One HTTP/1.1 exchange over `stream`.
async fn exchange<S>(
    stream: S,
    request: http::Request<Full<Bytes>>,
    max: u64,
) -> Result<Response, Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(Error::Http)?;
    let driver = tokio::spawn(conn);
    let result = async {
        let answer = sender.send_request(request).await.map_err(Error::Http)?;
        let status = answer.status().as_u16();
        if answer.status().is_redirection() {
            let to_host = answer
                .headers()
                .get(header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(location_host);
            return Err(Error::Redirect { status, to_host });
        }
        if !answer.status().is_success() {
            let retry_after = answer
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(retry_after::parse);
            return Err(Error::Status {
                status,
                retry_after,
            });
        }
        let declared = answer
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max) {
            return Err(Error::TooLarge { limit: max });
        }
        let body = read_capped(answer.into_body(), max).await?;
        Ok(Response { status, body })
    }
    .await;
    driver.abort();
    result
}

/// The body, or [`Error::TooLarge`] as soon as it passes `max`.
async fn read_capped(mut body: hyper::body::Incoming, max: u64) -> Result<Bytes, Error> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(Error::Http)?;
        if let Some(data) = frame.data_ref() {
            if out.len() as u64 + data.len() as u64 > max {
                return Err(Error::TooLarge { limit: max });
            }
            out.extend_from_slice(data);
        }
    }
    Ok(Bytes::from(out))
}

/// The host of a `Location` value (absolute URLs only), without the user,
/// port, path or query: what an error may show.
fn location_host(location: &str) -> Option<String> {
    let rest = location.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit('@').next()?;
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => host.split(':').next()?,
    };
    (!host.is_empty()).then(|| host.chars().take(253).collect())
}
