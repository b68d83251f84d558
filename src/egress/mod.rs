//! Requests kiln makes to systems outside the cluster, guarded: the
//! destination is the rule author's literal text (a tenant's values only
//! fill path segments and query parameters below it), every address it
//! resolves to is checked when connecting and the connection goes to that
//! checked address, redirects are never followed, the exchange has a
//! timeout and the body a size limit, credentials come from a Secret and
//! never show in a message, and every failure is an error, never data.
//! kiln's own ServiceAccount token is never sent: this client reads no
//! token and shares nothing with the kube client.
//!
//! - [`destination`]: the literal destination and what may fill it.
//! - [`address`]: which resolved addresses may be connected to.
//! - [`cidr`]: address ranges, and IPv6 forms read as the IPv4 they carry.
//! - [`resolve`]: names to addresses (injectable for tests).
//! - [`dial`]: resolve once, check every address, connect to a checked one.
//! - [`tls`]: CA bundle and client certificate as a rustls configuration.
//! - [`secret`]: credentials, redacted in every message.
//! - [`request`]: one request and its bounds.
//! - [`client`]: the exchange.
//! - [`retry_after`]: the `Retry-After` of a throttled answer.
//! - [`error`]: what goes wrong, by class.

pub mod address;
pub mod cidr;
pub mod client;
pub mod destination;
pub mod dial;
pub mod error;
pub mod request;
pub mod resolve;
pub mod retry_after;
pub mod secret;
pub mod tls;

pub use address::{AddressPolicy, AllowList, Class, Refusal};
pub use cidr::Cidr;
pub use client::{Client, Response};
pub use destination::{Destination, DestinationError, Scheme};
pub use error::Error;
pub use request::{Limits, Method, Request, Tls};
pub use resolve::{Resolve, SystemResolver};
pub use secret::{Auth, ClientIdentity, SecretBytes};

#[cfg(test)]
mod tests;
