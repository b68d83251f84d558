//! Several replicas sharing the primaries (`kiln run --shards`), on
//! Kubernetes' own mechanisms: one Lease per replica, a deterministic ring
//! over the live Leases, and a handover published in the Leases themselves.
//!
//! - [`ring`]: a primary's bucket (FNV-1a of its uid) and which member a
//!   bucket goes to (rendezvous hashing).
//! - [`handover`]: per round, which buckets to release, claim and activate.
//! - [`member`]: the loop that renews this replica's Lease and runs the rounds.
//! - [`scope`]: which objects the caches keep (the ingest filter).
//! - [`server`]: the API server's sharded list and watch (KEP-5866).
//!
//! [`Shard`] is what the engine sees: the write guard ([`Shard::permit`])
//! and the cache scope.

pub mod handover;
pub mod member;
pub mod ring;
pub mod scope;
pub mod server;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;

use ring::{BUCKETS, Buckets};

/// This replica's share, as the engine sees it.
#[derive(Debug)]
pub struct Shard {
    /// Buckets this replica writes for.
    active: AtomicU64,
    /// Buckets the caches keep (active, listed or assigned).
    interest: AtomicU64,
    /// Per bucket: writes in flight.
    in_flight: [AtomicU32; BUCKETS as usize],
    /// When the Lease was last renewed (sent), on the monotonic clock.
    renewed: Mutex<Option<Instant>>,
    /// Writes stop this long after the last renew (the renew deadline).
    deadline: Duration,
    /// Members seen live at the last round.
    members: AtomicU64,
    /// Buckets assigned at the last round.
    assigned: AtomicU64,
    /// What it counts, in the process's metrics.
    counters: Counters,
}

/// The counters of a shard member: `kiln_shard_*_total`.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// Buckets taken over (activated) since start.
    handovers_in: Counter,
    /// Buckets handed away (released) since start.
    handovers_out: Counter,
    /// Times the caches were listed again for a new share.
    rescopes: Counter,
    /// Reconciles put off because the Lease was late ([`Whose::Unsure`]).
    put_off: Counter,
    /// Children looked up on the API server before their first write: a
    /// cache left out an object of their name.
    lookups: Counter,
}

impl Counters {
    /// The counters registered in `metrics`.
    pub fn of(metrics: &crate::metrics::Metrics) -> Self {
        let direction = |d| {
            metrics
                .shard_handovers
                .get_or_create(&crate::metrics::label("direction", d))
                .clone()
        };
        Self {
            handovers_in: direction("in"),
            handovers_out: direction("out"),
            rescopes: metrics.shard_rescopes.clone(),
            put_off: metrics.shard_put_off.clone(),
            lookups: metrics.shard_lookups.clone(),
        }
    }
}

/// Who reconciles a primary, as this replica knows it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    /// This replica: it holds the primary's bucket and its Lease is fresh.
    Mine,
    /// Another replica: this one does not hold the primary's bucket.
    Others,
    /// This replica holds the bucket but its Lease is not fresh right now
    /// (a renew late, by a slow round or a slow API server, or a pause).
    /// It may not write, and must not forget the primary either: the
    /// Lease may be renewed a moment later, and nothing else queues the
    /// primary again then (a renew activates no bucket); if the Lease is
    /// lost instead, the next round releases the bucket.
    Unsure,
}

/// How long a primary whose owner is [`Whose::Unsure`] waits before it is
/// looked at again: about one retry period of the rounds.
pub const UNSURE_RETRY: Duration = Duration::from_secs(1);

impl Whose {
    /// From whether this replica holds the bucket and whether its Lease is fresh.
    pub fn of(held: bool, fresh: bool) -> Self {
        match (held, fresh) {
            (false, _) => Self::Others,
            (true, true) => Self::Mine,
            (true, false) => Self::Unsure,
        }
    }
}

/// A write in flight for one bucket; the bucket is not released while one is.
#[derive(Debug)]
pub struct Permit {
    shard: Arc<Shard>,
    bucket: u32,
}

impl Permit {
    /// Runs `write` while this replica's Lease stays fresh (a renewal
    /// during the write extends it). A write still unanswered when the
    /// Lease goes stale is given up: dropped, so a request not sent yet
    /// (waiting for a connection) is never sent, and the bucket's release
    /// waits no longer for it. `None` when given up.
    pub async fn fenced<F: Future>(&self, write: F) -> Option<F::Output> {
        tokio::select! {
            biased;
            out = write => Some(out),
            () = self.shard.stale() => None,
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.shard.in_flight[self.bucket as usize].fetch_sub(1, Ordering::SeqCst);
    }
}

impl Shard {
    /// A member holding nothing yet; its writes stop `deadline` after its
    /// last renew.
    pub fn new(deadline: Duration) -> Arc<Self> {
        Self::counting(deadline, Counters::default())
    }

    /// As [`new`](Self::new), counting in `counters`.
    pub fn counting(deadline: Duration, counters: Counters) -> Arc<Self> {
        Arc::new(Self {
            active: AtomicU64::new(0),
            interest: AtomicU64::new(0),
            in_flight: std::array::from_fn(|_| AtomicU32::new(0)),
            renewed: Mutex::new(None),
            deadline,
            members: AtomicU64::new(0),
            assigned: AtomicU64::new(0),
            counters,
        })
    }

    /// Whether the Lease is fresh: renewed less than the renew deadline ago,
    /// by this process's monotonic clock (which runs on while the process is
    /// paused, so a replica waking from SIGSTOP is refused at once).
    pub fn lease_fresh(&self) -> bool {
        let last = *self.renewed.lock().unwrap_or_else(PoisonError::into_inner);
        crate::lease::held(last, Instant::now(), self.deadline)
    }

    /// Resolves once the Lease is not fresh: at once, or when the renew
    /// deadline passes with no renewal meanwhile.
    pub async fn stale(&self) {
        loop {
            let last = *self.renewed.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(last) = last else { return };
            let until = last + self.deadline;
            if Instant::now() >= until {
                return;
            }
            tokio::time::sleep_until(until).await;
        }
    }

    /// Whether this replica reconciles the primary with this uid now.
    pub fn owns(&self, uid: &str) -> bool {
        self.whose(uid) == Whose::Mine
    }

    /// Who reconciles the primary with this uid, as this replica knows now.
    pub fn whose(&self, uid: &str) -> Whose {
        let held = ring::contains(self.active.load(Ordering::SeqCst), ring::bucket_of(uid));
        Whose::of(held, self.lease_fresh())
    }

    /// A permit to write for the primary with this uid, or `None` when this
    /// replica may not: its Lease is not fresh, or it does not hold the
    /// primary's bucket. Hold the permit until the write has returned.
    pub fn permit(self: &Arc<Self>, uid: &str) -> Option<Permit> {
        let bucket = ring::bucket_of(uid);
        if !self.owns(uid) {
            return None;
        }
        self.in_flight[bucket as usize].fetch_add(1, Ordering::SeqCst);
        let permit = Permit {
            shard: self.clone(),
            bucket,
        };
        // Released meanwhile: the releaser may have seen no write in flight.
        self.owns(uid).then_some(permit)
    }

    /// Whether the cache keeps objects of the primary with this uid.
    pub fn interested(&self, uid: &str) -> bool {
        ring::contains(self.interest.load(Ordering::SeqCst), ring::bucket_of(uid))
    }

    /// Whether this replica runs the cluster-wide singletons (the rules
    /// ConfigMap's Warning Events): the one holding bucket 0.
    pub fn singleton(&self) -> bool {
        ring::contains(self.active.load(Ordering::SeqCst), 0) && self.lease_fresh()
    }

    /// The buckets this replica writes for.
    pub fn active(&self) -> Buckets {
        self.active.load(Ordering::SeqCst)
    }

    /// The buckets the caches keep.
    pub fn interest(&self) -> Buckets {
        self.interest.load(Ordering::SeqCst)
    }

    /// Live members at the last round.
    pub fn members(&self) -> u64 {
        self.members.load(Ordering::Relaxed)
    }

    /// Buckets received and handed away since start.
    pub fn handovers(&self) -> (u64, u64) {
        (
            self.counters.handovers_in.get(),
            self.counters.handovers_out.get(),
        )
    }

    /// Times the caches were listed again for a new share (or after the
    /// Lease was lost) since start.
    pub fn rescopes(&self) -> u64 {
        self.counters.rescopes.get()
    }

    /// Reconciles put off since start because the Lease was late
    /// ([`Whose::Unsure`]).
    pub fn put_off(&self) -> u64 {
        self.counters.put_off.get()
    }

    /// A reconcile was put off: the Lease was late.
    pub fn putting_off(&self) {
        self.counters.put_off.inc();
    }

    /// Children looked up on the API server before being written, since
    /// start (a cache left out an object of their name).
    pub fn lookups(&self) -> u64 {
        self.counters.lookups.get()
    }

    /// A child is looked up before being written.
    pub fn looking_up(&self) {
        self.counters.lookups.inc();
    }

    fn rescoped(&self) {
        self.counters.rescopes.inc();
    }

    /// Ready: the Lease is fresh and the buckets held are those assigned.
    pub fn readiness(&self) -> Result<(), String> {
        if !self.lease_fresh() {
            return Err("shard: this replica's Lease is not renewed".into());
        }
        let (active, assigned) = (self.active(), self.assigned.load(Ordering::SeqCst));
        if active != assigned {
            return Err(format!(
                "shard: handing over ({} buckets held, {} assigned)",
                active.count_ones(),
                assigned.count_ones()
            ));
        }
        Ok(())
    }

    /// Stops writing for `buckets` and waits until no write for them is in flight.
    pub async fn release(&self, buckets: Buckets) {
        if buckets == 0 {
            return;
        }
        self.active.fetch_and(!buckets, Ordering::SeqCst);
        self.counters
            .handovers_out
            .inc_by(u64::from(buckets.count_ones()));
        while ring::members_of(buckets)
            .any(|b| self.in_flight[b as usize].load(Ordering::SeqCst) > 0)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn activate(&self, buckets: Buckets) {
        self.active.fetch_or(buckets, Ordering::SeqCst);
        self.counters
            .handovers_in
            .inc_by(u64::from(buckets.count_ones()));
    }

    fn set_interest(&self, buckets: Buckets) {
        self.interest.store(buckets, Ordering::SeqCst);
    }

    fn renewed_at(&self, at: Option<Instant>) {
        *self.renewed.lock().unwrap_or_else(PoisonError::into_inner) = at;
    }

    fn saw(&self, members: usize, assigned: Buckets) {
        self.members.store(members as u64, Ordering::Relaxed);
        self.assigned.store(assigned, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid_in(bucket: u32) -> String {
        (0..)
            .map(|i| format!("uid-{i}"))
            .find(|u| ring::bucket_of(u) == bucket)
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn writes_need_a_fresh_lease_and_the_bucket() {
        let shard = Shard::new(Duration::from_secs(10));
        let (a, b) = (uid_in(3), uid_in(5));
        assert!(shard.permit(&a).is_none(), "nothing held yet");
        shard.activate(1 << 3);
        assert!(shard.permit(&a).is_none(), "never renewed");
        shard.renewed_at(Some(Instant::now()));
        assert!(shard.permit(&a).is_some());
        assert!(shard.permit(&b).is_none(), "another bucket");
        shard.renewed_at(Some(Instant::now() - Duration::from_secs(11)));
        assert!(shard.permit(&a).is_none(), "paused past the renew deadline");
    }

    #[tokio::test]
    async fn a_held_bucket_with_a_late_renew_is_unsure_not_another_replica_s() {
        let shard = Shard::new(Duration::from_secs(10));
        let (a, b) = (uid_in(3), uid_in(5));
        shard.activate(1 << 3);
        shard.renewed_at(Some(Instant::now()));
        assert_eq!(
            (shard.whose(&a), shard.whose(&b)),
            (Whose::Mine, Whose::Others)
        );
        // The renew is late: the bucket is still held, nobody else has it.
        shard.renewed_at(Some(Instant::now() - Duration::from_secs(11)));
        assert_eq!(shard.whose(&a), Whose::Unsure);
        assert!(!shard.owns(&a), "no write while unsure");
        assert_eq!(shard.whose(&b), Whose::Others);
        // Renewed again: the same primary is this replica's once more.
        shard.renewed_at(Some(Instant::now()));
        assert_eq!(shard.whose(&a), Whose::Mine);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_unanswered_when_the_lease_goes_stale_is_given_up() {
        let shard = Shard::new(Duration::from_secs(10));
        shard.renewed_at(Some(Instant::now()));
        shard.activate(1 << 3);
        let permit = shard.permit(&uid_in(3)).unwrap();
        // Answered in time, renewals meanwhile included.
        let quick = permit.fenced(async {
            tokio::time::sleep(Duration::from_secs(8)).await;
            7
        });
        assert_eq!(quick.await, Some(7));
        shard.renewed_at(Some(Instant::now()));
        let s = shard.clone();
        let renewing = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(9)).await;
            s.renewed_at(Some(Instant::now()));
        });
        let slow = permit.fenced(async {
            tokio::time::sleep(Duration::from_secs(15)).await;
            8
        });
        assert_eq!(slow.await, Some(8), "the Lease was renewed during it");
        renewing.await.unwrap();
        // A write that hangs: the Lease is renewed 9 s in, then no more.
        let started = Instant::now();
        let hung = permit.fenced(std::future::pending::<()>());
        assert_eq!(hung.await, None);
        assert_eq!(started.elapsed(), Duration::from_secs(4));
        // And its bucket's release no longer waits for it.
        let s = shard.clone();
        let releasing = tokio::spawn(async move { s.release(1 << 3).await });
        drop(permit);
        tokio::time::timeout(Duration::from_secs(1), releasing)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_release_waits_for_the_writes_in_flight() {
        let shard = Shard::new(Duration::from_secs(10));
        shard.renewed_at(Some(Instant::now()));
        shard.activate(1 << 3);
        let permit = shard.permit(&uid_in(3));
        assert!(permit.is_some());
        let s = shard.clone();
        let releasing = tokio::spawn(async move { s.release(1 << 3).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !releasing.is_finished(),
            "released while a write is in flight"
        );
        assert!(
            shard.permit(&uid_in(3)).is_none(),
            "no new write once releasing"
        );
        drop(permit);
        tokio::time::timeout(Duration::from_secs(2), releasing)
            .await
            .unwrap()
            .unwrap();
    }
}
