//! External sources (`spec.external`): data a rule reads from systems
//! outside the cluster, per primary, through the guarded client
//! ([`crate::egress`]).
//!
//! - [`asked`]: a source's request rendered for one primary (the cache key).
//! - [`cache`]: answers shared by every primary making the same request,
//!   failures beside them (never in their place), each source's rate limit.
//! - [`fetcher`]: one request in flight per rendered request, credentials
//!   from the rule's Secret, metrics.
//! - [`api_server`]: the API server's addresses, refused to every source.
//! - [`answer`]: what a reconcile gets: a fresh answer, a last good one, or
//!   a failure.
//! - [`credentials`]: the Secret's token, user and password, CA and client
//!   certificate.
//! - [`egress`]: the addresses and ports a rule set's sources reach.
//! - [`metrics`]: per-source requests, hits, bytes and latency.

pub mod answer;
pub mod api_server;
pub mod asked;
pub mod cache;
pub mod credentials;
pub mod egress;
pub mod fetcher;
pub mod metrics;

pub use answer::{Answer, State};
pub use fetcher::Fetcher;

#[cfg(test)]
mod tests;
