//! Connecting: the destination's host is resolved once, every address is
//! checked ([`super::address`]), and the connection goes to a checked
//! address itself, never to the name again. One refused address refuses
//! the request: a name that answers both a public and a private address
//! is a name someone is steering.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;

use super::address::{AddressPolicy, AllowList};
use super::destination::Destination;
use super::error::Error;
use super::resolve::Resolve;

/// The addresses `destination` may be connected to, in the resolver's
/// order.
pub async fn checked_addresses(
    resolver: &dyn Resolve,
    policy: &AddressPolicy,
    destination: &Destination,
    allow: &AllowList,
) -> Result<Vec<SocketAddr>, Error> {
    let host = destination.host();
    let addrs = resolver
        .resolve(host, destination.port())
        .await
        .map_err(|source| Error::Resolve {
            host: host.to_string(),
            source,
        })?;
    if addrs.is_empty() {
        return Err(Error::NoAddress {
            host: host.to_string(),
        });
    }
    for addr in &addrs {
        policy
            .check(host, addr.ip(), allow)
            .map_err(|refusal| Error::Refused {
                host: host.to_string(),
                refusal,
            })?;
    }
    Ok(addrs)
}

/// A TCP connection to the first of `addrs` that accepts one.
pub async fn connect(host: &str, addrs: &[SocketAddr]) -> Result<TcpStream, Error> {
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(Error::Connect {
        host: host.to_string(),
        source: last.unwrap_or_else(|| std::io::Error::other("no address")),
    })
}

/// The TLS session over `tcp`, checked against `config`'s roots for the
/// destination's host.
pub async fn handshake(
    config: Arc<rustls::ClientConfig>,
    host: &str,
    tcp: TcpStream,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Error> {
    let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|_| {
        Error::TlsSettings(format!("`{host}` cannot be checked against a certificate"))
    })?;
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|source| Error::Tls {
            host: host.to_string(),
            source,
        })
}
