//! What kiln's caches hold at convergence, read from its own metrics
//! (`kiln_cached_objects`, `kiln_cached_bytes`): for the sharded contender,
//! whether each replica's caches hold its share, beside one kiln's.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A free local address for a contender's metrics endpoint (a port no
/// outgoing connection takes meanwhile: see `kiln::controlplane::free_port`).
pub fn free_address() -> anyhow::Result<SocketAddr> {
    let port = kiln::controlplane::free_port()?;
    Ok(SocketAddr::from(([127, 0, 0, 1], port)))
}

/// Objects and bytes in one kiln's caches, summed over its kinds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cached {
    /// `kiln_cached_objects`, every kind.
    pub objects: u64,
    /// `kiln_cached_bytes`, every kind.
    pub bytes: u64,
}

/// Reads `addr`'s `/metrics`.
pub async fn cached(addr: SocketAddr) -> anyhow::Result<Cached> {
    Ok(parse(&text(addr).await?))
}

/// `addr`'s `/metrics`, the exposition text.
pub async fn text(addr: SocketAddr) -> anyhow::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: kiln\r\nConnection: close\r\n\r\n")
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no HTTP response from {addr}"))?;
    anyhow::ensure!(head.starts_with("HTTP/1.1 200"), "{addr}: {head}");
    Ok(body.to_string())
}

/// Sums the two families over their labels in a Prometheus text exposition.
fn parse(text: &str) -> Cached {
    let mut out = Cached::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or_default();
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        match name {
            "kiln_cached_objects" => out.objects += value as u64,
            "kiln_cached_bytes" => out.bytes += value as u64,
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_families_are_summed_over_kinds_and_nothing_else_counts() {
        let text = "# HELP kiln_cached_objects Objects held in the cache per kind\n\
            # TYPE kiln_cached_objects gauge\n\
            kiln_cached_objects{gvk=\"apps/v1/Deployment\"} 1000\n\
            kiln_cached_objects{gvk=\"v1/Secret\"} 1\n\
            kiln_cached_bytes{gvk=\"apps/v1/Deployment\"} 250000\n\
            kiln_cached_bytes{gvk=\"v1/Secret\"} 120\n\
            kiln_cached_objects_other 7\n\
            kiln_reconciles_total{rule=\"webapp\"} 3000\n";
        assert_eq!(
            parse(text),
            Cached {
                objects: 1001,
                bytes: 250_120
            }
        );
    }
}
