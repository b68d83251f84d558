//! Free TCP ports for what a local control plane (and its tests) start on
//! loopback: etcd, kube-apiserver, and kiln's own probe and metrics servers.
//!
//! A port found free by binding port 0 comes from the kernel's ephemeral
//! range, the same range every outgoing connection takes its local port
//! from. Between that probe and the component's own bind, a client
//! connecting to the API server can take the port: a kiln under test failed
//! with "Address already in use" on its health port while hundreds of
//! connections came and went. So ports are picked *below* the ephemeral
//! range, which neither `connect` nor a bind to port 0 hands out, and one
//! process never hands out the same port twice.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::ops::Range;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use super::Error;

/// Where Linux says the ephemeral range is.
const RANGE_FILE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
/// How many ports below the ephemeral range are picked from, at most.
const POOL: u16 = 16_384;
/// The lowest port ever picked (above the privileged ports).
const FLOOR: u16 = 1_024;
/// Below this many ports the pool is too small to pick from at random:
/// the kernel picks (port 0), as before.
const SMALLEST_POOL: u16 = 256;

/// Ports this process handed out already.
static HANDED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A TCP port free on every local address now, outside the ephemeral range
/// when there is room below it, and never handed out before by this process.
pub fn free_port() -> Result<u16, Error> {
    let pool = pool(ephemeral_low());
    if pool.len() < usize::from(SMALLEST_POOL) {
        return kernel_port();
    }
    let mut seed = [0u8; 2];
    getrandom::fill(&mut seed).map_err(|e| {
        Error::io(
            "draw a random port",
            Path::new(RANGE_FILE),
            std::io::Error::other(e.to_string()),
        )
    })?;
    let mut handed = HANDED.lock().unwrap_or_else(PoisonError::into_inner);
    let found = pick(pool, u16::from_le_bytes(seed), |port| {
        !handed.contains(&port) && TcpListener::bind(("0.0.0.0", port)).is_ok()
    });
    match found {
        Some(port) => {
            handed.insert(port);
            Ok(port)
        }
        None => kernel_port(),
    }
}

/// The first port of the ephemeral range (Linux's default when unreadable).
fn ephemeral_low() -> u16 {
    std::fs::read_to_string(RANGE_FILE)
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// The ports picked from, just below the ephemeral range.
fn pool(ephemeral_low: u16) -> Range<u16> {
    let end = ephemeral_low.max(FLOOR);
    end.saturating_sub(POOL).max(FLOOR)..end
}

/// The first port of `pool`, going round from `seed`, that `free` accepts.
fn pick(pool: Range<u16>, seed: u16, mut free: impl FnMut(u16) -> bool) -> Option<u16> {
    let len = pool.end.checked_sub(pool.start).filter(|n| *n > 0)?;
    let start = seed % len;
    (0..len)
        .map(|i| pool.start + (start + i) % len)
        .find(|port| free(*port))
}

/// A port the kernel found free a moment ago (from the ephemeral range).
fn kernel_port() -> Result<u16, Error> {
    let bound = TcpListener::bind(("127.0.0.1", 0)).and_then(|l| l.local_addr());
    bound
        .map(|a| a.port())
        .map_err(|source| Error::io("bind", Path::new("127.0.0.1:0"), source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_lies_below_the_ephemeral_range_and_above_the_privileged_ports() {
        assert_eq!(pool(32_768), 16_384..32_768);
        assert_eq!(pool(10_000), 1_024..10_000);
        assert!(pool(1_024).is_empty());
        assert!(pool(80).is_empty());
    }

    #[test]
    fn a_pick_goes_round_from_the_seed_and_skips_what_is_taken() {
        assert_eq!(pick(100..110, 3, |_| true), Some(103));
        assert_eq!(pick(100..110, 13, |_| true), Some(103));
        assert_eq!(pick(100..110, 8, |p| p != 108 && p != 109), Some(100));
        assert_eq!(pick(100..110, 0, |_| false), None);
        assert_eq!(pick(100..100, 0, |_| true), None);
    }

    #[test]
    fn ports_are_free_outside_the_ephemeral_range_and_never_handed_out_twice() {
        let low = ephemeral_low();
        let ports: Vec<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "a port handed out twice");
        if !pool(low).is_empty() {
            assert!(
                ports.iter().all(|p| *p < low),
                "{ports:?} (range from {low})"
            );
        }
        for port in ports {
            TcpListener::bind(("127.0.0.1", port)).unwrap();
        }
    }
}
