//! A TCP proxy in front of the API server that can make every connection
//! open through it go silent at once, as a peer that vanished without a
//! word does (a node gone, a NAT or load balancer that dropped the
//! connection's state): the sockets stay open and carry nothing more,
//! either way. Connections made afterwards work. Dropped, it closes every
//! connection and refuses new ones: an API server gone.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// The proxy; stops (and drops every connection) when dropped.
pub struct StallingProxy {
    /// Where it listens, on 127.0.0.1.
    pub port: u16,
    /// Connections of an earlier generation carry nothing.
    generation: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl StallingProxy {
    /// A proxy to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Self {
        let port = super::free_port();
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let generation = Arc::new(AtomicU64::new(0));
        let current = generation.clone();
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let born = current.load(Ordering::SeqCst);
                let current = current.clone();
                connections.spawn(async move {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let live = move || current.load(Ordering::SeqCst) == born;
                    tokio::join!(pipe(cr, sw, live.clone()), pipe(sr, cw, live));
                });
            }
        });
        Self {
            port,
            generation,
            task,
        }
    }

    /// Every connection open now goes silent for good.
    pub fn stall(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

/// The port of the test cluster's API server on 127.0.0.1.
pub fn api_server_port() -> u16 {
    super::kubeconfig_yaml()
        .split("https://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|port| port.parse().ok())
        .expect("the test cluster's API server port")
}

/// The test cluster's admin kubeconfig, reaching the API server through
/// `port` on 127.0.0.1 (a proxy's).
pub fn kubeconfig_through(port: u16) -> String {
    super::kubeconfig_yaml().replace(
        &format!("https://127.0.0.1:{}", api_server_port()),
        &format!("https://127.0.0.1:{port}"),
    )
}

impl Drop for StallingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to` while `live` says so; then holds both open, silent.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    live: impl Fn() -> bool,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !live() {
            // Gone silent: what arrives is never passed on, and nothing closes.
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
