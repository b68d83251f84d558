//! What every port kiln listens on admits: a bounded number of
//! connections, a deadline for each step of a request, and an accept loop
//! that backs off when the process is out of descriptors instead of
//! spinning. At the limit, a new connection takes the place of the oldest
//! one not at work on a request (idle, still sending its headers, or still
//! sending its body), so holding every slot open keeps no one else out. The metrics and health endpoints ([`crate::serve`]) and the
//! conversion webhook (`api::webhook::server`) are served through it; each
//! has its own [`Limits`], so a flood on one port never takes another's
//! connections.

use std::io;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper_util::rt::TokioTimer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The bounds of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; further ones wait in the kernel's
    /// backlog until one closes.
    pub connections: usize,
    /// From accept until the TLS handshake is done (TLS listeners).
    pub handshake: Duration,
    /// From the connection's start, or the end of its previous answer,
    /// until a request's headers are read: an idle keep-alive connection is
    /// closed after this long.
    pub header: Duration,
    /// From a request's headers until its answer is written (body read,
    /// work done, answer sent): a connection still on it is closed.
    pub request: Duration,
}

/// How long the accept loop waits after the process ran out of
/// descriptors (or memory) before it accepts again: the connections being
/// served have this long to close some.
pub const BACKOFF: Duration = Duration::from_millis(100);

/// The largest request headers read (the read buffer of a connection).
const MAX_HEADER_BUFFER: usize = 64 * 1024;

/// A connection slot and the stream accepted in it.
pub struct Accepted {
    /// The connection.
    pub stream: TcpStream,
    /// Its slot among [`Limits::connections`]; dropped when it closes.
    pub slot: Slot,
}

/// A connection's place among its listener's: its share of the limit, the
/// request it is on, and the signal that evicts it to make room.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    live: Arc<Live>,
}

struct Live {
    exchange: Exchange,
    evict: Notify,
    opened: Instant,
}

impl Slot {
    /// The request the connection is on: the service starts and ends each.
    pub fn exchange(&self) -> Exchange {
        self.live.exchange.clone()
    }

    /// Resolves once the listener evicts this connection (at the limit,
    /// for a new one, while this one is at work on no request): close it
    /// then.
    pub async fn evicted(&self) {
        self.live.evict.notified().await;
    }
}

/// Hands out accepted connections within a listener's connection limit.
pub struct Acceptor {
    listener: TcpListener,
    slots: Arc<Semaphore>,
    live: Mutex<Vec<Weak<Live>>>,
    /// How long a new connection waits for a slot when none can be freed.
    wait: Duration,
}

impl Acceptor {
    /// Accepts on `listener` at most `limits.connections` at once.
    pub fn new(listener: TcpListener, limits: &Limits) -> Self {
        Self {
            listener,
            slots: Arc::new(Semaphore::new(limits.connections.max(1))),
            live: Mutex::new(Vec::new()),
            wait: limits.header,
        }
    }

    /// The next connection, in a slot. At the limit, the oldest connection
    /// at work on no request is evicted for it; when every one is, it
    /// waits for a slot at most a header deadline (then it is closed). An
    /// accept that fails for want of descriptors or memory is tried again
    /// after [`BACKOFF`]; one that fails for the connection alone at once.
    pub async fn next(&self) -> Accepted {
        loop {
            let stream = match self.listener.accept().await {
                Ok((stream, _)) => stream,
                Err(error) => {
                    if let Some(wait) = after_error(&error) {
                        tracing::warn!(%error, "accepting a connection failed; backing off");
                        tokio::time::sleep(wait).await;
                    }
                    continue;
                }
            };
            let permit = match self.slots.clone().try_acquire_owned() {
                Ok(permit) => permit,
                Err(_) => {
                    self.evict_one();
                    let freed = self.slots.clone().acquire_owned();
                    match tokio::time::timeout(self.wait, freed).await {
                        Ok(Ok(permit)) => permit,
                        _ => continue,
                    }
                }
            };
            let live = Arc::new(Live {
                exchange: Exchange::default(),
                evict: Notify::new(),
                opened: Instant::now(),
            });
            let mut all = self.live.lock().unwrap_or_else(PoisonError::into_inner);
            all.retain(|l| l.strong_count() > 0);
            all.push(Arc::downgrade(&live));
            return Accepted {
                stream,
                slot: Slot {
                    _permit: permit,
                    live,
                },
            };
        }
    }

    /// Tells the oldest connection at work on no request to close.
    fn evict_one(&self) {
        let mut all = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|l| l.strong_count() > 0);
        let oldest = all
            .iter()
            .enumerate()
            .filter_map(|(i, l)| Some((i, l.upgrade()?)))
            .filter(|(_, l)| !l.exchange.busy())
            .min_by_key(|(_, l)| l.opened);
        if let Some((i, live)) = oldest {
            live.evict.notify_one();
            all.remove(i);
        }
    }
}

/// How long to wait after a failed accept: [`BACKOFF`] when the process
/// (or system) is out of a resource, `None` when only that connection
/// failed.
pub fn after_error(error: &io::Error) -> Option<Duration> {
    use io::ErrorKind as K;
    match error.kind() {
        K::ConnectionAborted | K::ConnectionReset | K::Interrupted | K::WouldBlock => None,
        // EMFILE, ENFILE, ENOBUFS, ENOMEM and anything unexpected.
        _ => Some(BACKOFF),
    }
}

/// An HTTP/1 server for one connection with `limits`' header deadline
/// (which also closes idle keep-alive connections).
pub fn http1(limits: &Limits) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header)
        .max_buf_size(MAX_HEADER_BUFFER);
    builder
}

/// The request a connection is on, and what it holds meanwhile; shared by
/// the service (which starts each request) and the connection's
/// [`Exchange::overdue`] watch.
#[derive(Clone, Default)]
pub struct Exchange(Arc<Mutex<Current>>);

#[derive(Default)]
struct Current {
    /// When the request now served started.
    since: Option<Instant>,
    /// Whether that request is at work: received whole, not answered yet.
    /// One still sending its body is not: a client that never finishes it
    /// holds its slot only until the listener needs it.
    busy: bool,
    /// Memory charged for it, held until the next request starts or the
    /// connection closes (its answer is written by then).
    charge: Option<OwnedSemaphorePermit>,
}

impl Exchange {
    /// A new request starts: the previous one's answer has been written
    /// (HTTP/1 reads the next request only then), so its charge is freed.
    /// It is at work once [`Exchange::received`].
    pub fn start(&self) {
        let mut current = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *current = Current {
            since: Some(Instant::now()),
            busy: false,
            charge: None,
        };
    }

    /// The request is received whole (its body read): at work until
    /// [`Exchange::done`], its connection is not evicted.
    pub fn received(&self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).busy = true;
    }

    /// The request is answered (its answer handed to be written).
    pub fn done(&self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).busy = false;
    }

    fn busy(&self) -> bool {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).busy
    }

    /// Holds `charge` until the next request or the connection's end.
    pub fn hold(&self, charge: OwnedSemaphorePermit) {
        let mut current = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        current.charge = Some(charge);
    }

    fn since(&self) -> Option<Instant> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).since
    }

    /// Resolves once one request has taken longer than `limit` (its
    /// connection is then closed); never while requests keep within it.
    pub async fn overdue(&self, limit: Duration) {
        loop {
            let since = self.since();
            let Some(since) = since else {
                tokio::time::sleep(limit).await;
                continue;
            };
            tokio::time::sleep_until(since + limit).await;
            if self.since() == Some(since) && since.elapsed() >= limit {
                // Still on the same request (or the same answer idle
                // since, which the header deadline would have closed).
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_descriptors_backs_off_and_a_reset_connection_does_not() {
        let emfile = io::Error::from_raw_os_error(24);
        let enfile = io::Error::from_raw_os_error(23);
        assert_eq!(after_error(&emfile), Some(BACKOFF));
        assert_eq!(after_error(&enfile), Some(BACKOFF));
        let reset = io::Error::from(io::ErrorKind::ConnectionAborted);
        assert_eq!(after_error(&reset), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_past_its_deadline_is_overdue_and_a_new_one_is_not() {
        let exchange = Exchange::default();
        exchange.start();
        let limit = Duration::from_secs(10);
        tokio::time::timeout(Duration::from_secs(11), exchange.overdue(limit))
            .await
            .expect("a request started 10 s ago is overdue");
        exchange.start();
        let renewed = exchange.clone();
        let overdue = tokio::spawn(async move { renewed.overdue(limit).await });
        tokio::time::sleep(Duration::from_secs(6)).await;
        exchange.start();
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert!(!overdue.is_finished(), "each request gets its own deadline");
    }
}
