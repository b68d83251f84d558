//! Names to addresses. The client asks a [`Resolve`] once per request and
//! connects only to the addresses it checked, so a test can hand out
//! answers that change from one lookup to the next.

use std::io;
use std::net::SocketAddr;

use futures::future::BoxFuture;

/// Looks a host name up.
pub trait Resolve: Send + Sync {
    /// The addresses of `host` (a DNS name or an IP literal) at `port`.
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>>;
}

/// The system's resolver (`getaddrinfo` on a blocking thread, as tokio
/// does).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host, port)).await?;
            Ok(addrs.collect())
        })
    }
}
