//! What goes wrong with a request. Every failure is an error, never data: a
//! non-2xx answer, a redirect, a timeout, an oversize or undecodable body.
//! No message quotes a credential, a header value or the body.

use std::time::Duration;

use super::address::Refusal;
use super::destination::DestinationError;

/// Why a request gave no answer to use.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The destination, a path segment or a parameter is refused.
    #[error("invalid request")]
    Destination(#[from] DestinationError),
    /// A header the rule names is not allowed or not valid.
    #[error(
        "header `{0}` cannot be sent: credentials come from a Secret, and Host, Content-Length, Connection and Transfer-Encoding are kiln's"
    )]
    Header(String),
    /// The host name did not resolve.
    #[error("cannot resolve {host}")]
    Resolve {
        /// The destination's host.
        host: String,
        /// The resolver's error.
        #[source]
        source: std::io::Error,
    },
    /// The host resolved to no address.
    #[error("{host} resolves to no address")]
    NoAddress {
        /// The destination's host.
        host: String,
    },
    /// An address the host resolved to is refused.
    #[error("{host} is refused")]
    Refused {
        /// The destination's host.
        host: String,
        /// The address and why.
        #[source]
        refusal: Refusal,
    },
    /// No address accepted a connection.
    #[error("cannot connect to {host}")]
    Connect {
        /// The destination's host.
        host: String,
        /// The last connection error.
        #[source]
        source: std::io::Error,
    },
    /// The CA bundle or client certificate cannot be used.
    #[error("TLS settings: {0}")]
    TlsSettings(String),
    /// The TLS handshake failed (an untrusted certificate, among others).
    #[error("TLS handshake with {host} failed")]
    Tls {
        /// The destination's host.
        host: String,
        /// The handshake's error.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP exchange failed (a closed connection, a malformed answer).
    #[error("HTTP exchange failed")]
    Http(#[source] hyper::Error),
    /// No whole answer within the timeout.
    #[error("no answer within {}s", .0.as_secs_f64())]
    Timeout(Duration),
    /// A redirect: never followed.
    #[error("answered {status} (a redirect{}); redirects are not followed", .to_host.as_deref().map(|h| format!(" to {h}")).unwrap_or_default())]
    Redirect {
        /// The status code.
        status: u16,
        /// The host the redirect names, if any (not its path or query).
        to_host: Option<String>,
    },
    /// A status other than 2xx.
    #[error("answered {status}")]
    Status {
        /// The status code.
        status: u16,
        /// What `Retry-After` asked (429 and 503), bounded.
        retry_after: Option<Duration>,
    },
    /// The body exceeds the limit.
    #[error("the answer is larger than {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// The body is not JSON.
    #[error("the answer is not JSON ({0})")]
    Undecodable(String),
}

impl Error {
    /// A short, bounded name of the failure, for metrics and reasons.
    pub fn class(&self) -> &'static str {
        match self {
            Error::Destination(_) | Error::Header(_) | Error::TlsSettings(_) => "invalid",
            Error::Resolve { .. } | Error::NoAddress { .. } => "resolve",
            Error::Refused { .. } => "refused",
            Error::Connect { .. } => "connect",
            Error::Tls { .. } => "tls",
            Error::Http(_) => "http",
            Error::Timeout(_) => "timeout",
            Error::Redirect { .. } => "redirect",
            Error::Status { status, .. } if *status == 429 => "throttled",
            Error::Status { status, .. } if *status >= 500 => "status_5xx",
            Error::Status { .. } => "status_4xx",
            Error::TooLarge { .. } => "oversize",
            Error::Undecodable(_) => "undecodable",
        }
    }

    /// How long the server asked to be left alone, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}
