//! One request as the caller describes it: the literal destination, what a
//! tenant's values may fill below it, and the bounds of the exchange.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::address::AllowList;
use super::destination::Destination;
use super::secret::{Auth, ClientIdentity};

/// The methods a source may use: reads, and POST for query APIs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Method {
    /// GET.
    #[default]
    Get,
    /// POST with a JSON body.
    Post,
}

impl Method {
    /// The method's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// The bounds of one exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    /// The whole exchange: resolve, connect, handshake, answer and body.
    pub timeout: Duration,
    /// The largest body read.
    pub max_body: u64,
}

impl Limits {
    /// The timeout when the rule names none.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
    /// The longest timeout a rule may set: a reconcile waits on it.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
    /// The body limit when the rule names none: what fits in an object.
    pub const DEFAULT_MAX_BODY: u64 = 900 * 1024;
    /// The largest body limit a rule may set.
    pub const MAX_MAX_BODY: u64 = 8 * 1024 * 1024;

    /// `timeout` and `max_body` clamped to their bounds (at least 1 ms, 1
    /// byte).
    pub fn bounded(timeout: Duration, max_body: u64) -> Self {
        Self {
            timeout: timeout.clamp(Duration::from_millis(1), Self::MAX_TIMEOUT),
            max_body: max_body.clamp(1, Self::MAX_MAX_BODY),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout: Self::DEFAULT_TIMEOUT,
            max_body: Self::DEFAULT_MAX_BODY,
        }
    }
}

/// How the server's certificate is checked and how kiln proves itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// CA certificates (PEM) to trust instead of the system's.
    pub ca_bundle: Option<Arc<Vec<u8>>>,
    /// A client certificate (mTLS).
    pub identity: Option<ClientIdentity>,
}

/// One request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// GET or POST.
    pub method: Method,
    /// Where it goes, as the rule author wrote it.
    pub destination: Arc<Destination>,
    /// Path segments below the destination's prefix, each encoded as one.
    pub path: Vec<String>,
    /// Query parameters, encoded.
    pub query: Vec<(String, String)>,
    /// Headers (no credentials: those come from [`Request::auth`]).
    pub headers: Vec<(String, String)>,
    /// The JSON body of a POST.
    pub body: Option<Value>,
    /// Credentials.
    pub auth: Auth,
    /// TLS settings.
    pub tls: Tls,
    /// What the rule author allows beyond the defaults.
    pub allow: AllowList,
    /// Timeout and body limit.
    pub limits: Limits,
}

impl Request {
    /// A request to `destination` and nothing more: no path below it, no
    /// parameters, headers or credentials, the default limits.
    pub fn new(method: Method, destination: Arc<Destination>) -> Self {
        Self {
            method,
            destination,
            path: Vec::new(),
            query: Vec::new(),
            headers: Vec::new(),
            body: None,
            auth: Auth::None,
            tls: Tls::default(),
            allow: AllowList::default(),
            limits: Limits::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_bounded() {
        let l = Limits::bounded(Duration::from_secs(3600), u64::MAX);
        assert_eq!(
            (l.timeout, l.max_body),
            (Limits::MAX_TIMEOUT, Limits::MAX_MAX_BODY)
        );
        let l = Limits::bounded(Duration::ZERO, 0);
        assert_eq!((l.timeout, l.max_body), (Duration::from_millis(1), 1));
    }
}
