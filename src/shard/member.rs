//! One member of a shard group: its own Lease (name = identity, labelled
//! with the group, the buckets it lists in an annotation), renewed every
//! retry period; each renewal is a round of the handover ([`super::handover`]).
//!
//! Another member's Lease is live while its record keeps changing: it is
//! judged dead once unchanged for its lease duration on *this* replica's
//! clock (as client-go's leader election does), or at once when released
//! (holder cleared). The Leases are read with a quorum list, never a cache.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;

use super::Shard;
use super::handover::{self, Round};
use super::ring::{self, Buckets};
use crate::gate::{self, Warrant};
use crate::lease::Timing;

/// The label naming a Lease's shard group.
pub const GROUP_LABEL: &str = "kiln.dev/shard-group";
/// The annotation listing the buckets a member claims or holds.
pub const BUCKETS_ANNOTATION: &str = "kiln.dev/shard-buckets";

/// The caches the handover waits for before it claims a bucket.
pub trait Caches: Send + Sync {
    /// Lists every cache again under the current interest; returns an epoch
    /// for [`covered_since`](Self::covered_since).
    fn rescope(&self) -> u64;
    /// Whether every cache has listed since `epoch` began.
    fn covered_since(&self, epoch: u64) -> bool;
    /// Queues every primary again (buckets were activated).
    fn resync(&self);
}

/// A member's loop state.
pub struct Member {
    api: Api<Lease>,
    group: String,
    identity: String,
    timing: Timing,
    shard: Arc<Shard>,
    /// Other Leases: their record and when this replica saw it change.
    seen: HashMap<String, (String, Instant)>,
    /// What this member's Lease lists on the server.
    listed: Buckets,
    /// The interest and the epoch of its rescope, and what it covers.
    interest_epoch: u64,
    covered: Buckets,
    resource_version: Option<String>,
}

/// What the Leases of the group say, for this member.
#[derive(Debug, PartialEq, Eq)]
struct View {
    /// Live members, this one included.
    members: Vec<String>,
    /// What the other live members list.
    others: Buckets,
}

impl Member {
    /// A member of `group` in `namespace` as `identity`.
    pub fn new(
        client: Client,
        namespace: &str,
        group: &str,
        identity: &str,
        timing: Timing,
        shard: Arc<Shard>,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            group: group.to_string(),
            identity: identity.to_string(),
            timing,
            shard,
            seen: HashMap::new(),
            listed: 0,
            interest_epoch: 0,
            covered: 0,
            resource_version: None,
        }
    }

    /// Creates (or takes back, listing nothing) this member's Lease and sets
    /// the caches' interest to this member's first assignment, so the
    /// engine's first lists already hold its share.
    pub async fn join(&mut self) -> Result<(), kube::Error> {
        let sent = Instant::now();
        self.write(0).await?;
        self.shard.renewed_at(Some(sent));
        // Replicas started together each see few others at first: the view
        // is read again until it holds still for a retry period, so that
        // the first lists already hold only this replica's share.
        let mut view = self.view().await?;
        for _ in 0..3 {
            tokio::time::sleep(self.timing.retry_period).await;
            let sent = Instant::now();
            self.write(0).await?;
            self.shard.renewed_at(Some(sent));
            let again = self.view().await?;
            let settled = again.members == view.members;
            view = again;
            if settled {
                break;
            }
        }
        let assigned = ring::assigned(&self.identity, &view.members);
        self.shard.saw(view.members.len(), assigned);
        self.shard.set_interest(assigned);
        Ok(())
    }

    /// Runs rounds every retry period until `stop` resolves, then leaves:
    /// stops writing, waits for writes in flight, and releases the Lease so
    /// the others take its buckets without waiting for it to expire.
    pub async fn run(mut self, caches: Arc<dyn Caches>, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            if let Err(error) = self.round(caches.as_ref()).await {
                tracing::warn!(lease = %self.identity, %error, "shard round failed; retrying");
            }
            tokio::select! {
                () = &mut stop => break,
                () = tokio::time::sleep(self.timing.retry_period) => {}
            }
        }
        self.shard.release(self.shard.active()).await;
        match self.leave().await {
            Ok(()) => tracing::info!(lease = %self.identity, "left the shard group"),
            Err(error) => {
                tracing::warn!(%error, "could not release the shard Lease; the others take over when it expires")
            }
        }
    }

    /// One round: read the group, release, activate, claim, renew.
    async fn round(&mut self, caches: &dyn Caches) -> Result<(), kube::Error> {
        if !self.shard.lease_fresh() && (self.shard.active() != 0 || self.listed != 0) {
            // Past the renew deadline (paused, or the API server away):
            // others may have taken everything; start again from nothing.
            tracing::warn!(lease = %self.identity, "shard Lease not renewed in time: starting again with no bucket");
            self.shard.release(self.shard.active()).await;
            self.listed = 0;
            // The caches may be as old as the pause: nothing is claimed
            // again before every cache has listed anew.
            self.covered = 0;
            self.interest_epoch = caches.rescope();
            self.shard.rescoped();
        }
        let view = self.view().await?;
        let assigned = ring::assigned(&self.identity, &view.members);
        self.shard.saw(view.members.len(), assigned);
        if caches.covered_since(self.interest_epoch) {
            self.covered = self.shard.interest();
        }
        let step = handover::step(Round {
            assigned,
            listed: self.listed,
            active: self.shard.active(),
            others: view.others,
            covered: self.covered & self.shard.interest(),
        });
        self.shard.release(step.release).await;
        if step.activate != 0 {
            self.shard.activate(step.activate);
            tracing::info!(lease = %self.identity, buckets = step.activate.count_ones(), "took over buckets");
            caches.resync();
        }
        if step.interest != self.shard.interest() {
            // Grown: the caches list what they lacked; shrunk: they drop
            // what left (a re-list queues only what changed).
            self.shard.set_interest(step.interest);
            self.covered &= step.interest;
            self.interest_epoch = caches.rescope();
            self.shard.rescoped();
        }
        let sent = Instant::now();
        self.write(step.listed).await?;
        self.shard.renewed_at(Some(sent));
        self.listed = step.listed;
        Ok(())
    }

    /// The live members and what the others list, from a quorum read
    /// given up after the renew deadline.
    async fn view(&mut self) -> Result<View, kube::Error> {
        let limit = self.timing.renew_deadline;
        bounded(limit, self.read_view()).await
    }

    async fn read_view(&mut self) -> Result<View, kube::Error> {
        let leases = self
            .api
            .list(&ListParams::default().labels(&format!("{GROUP_LABEL}={}", self.group)))
            .await?;
        let now = Instant::now();
        let mut members = vec![self.identity.clone()];
        let mut others = 0;
        let mut seen = HashMap::new();
        for lease in leases.items {
            let Some(name) = lease.metadata.name.clone() else {
                continue;
            };
            if name == self.identity {
                continue;
            }
            let spec = lease.spec.unwrap_or_default();
            let record = format!(
                "{:?}/{:?}/{:?}",
                spec.holder_identity,
                spec.renew_time.as_ref().map(|t| t.0.to_string()),
                lease
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(BUCKETS_ANNOTATION)),
            );
            let since = match self.seen.get(&name) {
                Some((old, at)) if *old == record => *at,
                _ => now,
            };
            let duration = spec
                .lease_duration_seconds
                .map_or(self.timing.lease_duration, |s| {
                    Duration::from_secs(u64::try_from(s).unwrap_or(0))
                });
            let held = spec
                .holder_identity
                .as_deref()
                .is_some_and(|h| !h.is_empty());
            if held && now.duration_since(since) < duration {
                members.push(name.clone());
                others |= parse(
                    lease
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(BUCKETS_ANNOTATION))
                        .map_or("", String::as_str),
                );
            }
            seen.insert(name, (record, since));
        }
        self.seen = seen;
        members.sort();
        Ok(View { members, others })
    }

    /// Writes this member's Lease: held by it, renewed now, listing
    /// `listed`; given up after the renew deadline.
    async fn write(&mut self, listed: Buckets) -> Result<(), kube::Error> {
        let limit = self.timing.renew_deadline;
        bounded(limit, self.write_lease(listed)).await
    }

    async fn write_lease(&mut self, listed: Buckets) -> Result<(), kube::Error> {
        let lease = self.lease(Some(self.identity.clone()), listed);
        let pp = PostParams::default();
        let written = match &self.resource_version {
            Some(_) => {
                gate::replace(&self.api, &self.identity, &pp, &lease, Warrant::OwnState).await
            }
            None => match gate::create(&self.api, &pp, &lease, Warrant::OwnState).await {
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    // Ours from before (same identity): take it back, listing nothing.
                    let old = self.api.get(&self.identity).await?;
                    self.resource_version = old.metadata.resource_version;
                    let lease = self.lease(Some(self.identity.clone()), 0);
                    gate::replace(&self.api, &self.identity, &pp, &lease, Warrant::OwnState).await
                }
                other => other,
            },
        };
        match written {
            Ok(l) => {
                self.resource_version = l.metadata.resource_version;
                Ok(())
            }
            Err(e) => {
                // Read again next time (someone may have edited it).
                if let Ok(l) = self.api.get(&self.identity).await {
                    self.resource_version = l.metadata.resource_version;
                }
                Err(e)
            }
        }
    }

    async fn leave(&mut self) -> Result<(), kube::Error> {
        let mut lease = self.lease(None, 0);
        if let Some(spec) = lease.spec.as_mut() {
            spec.lease_duration_seconds = Some(1);
        }
        let pp = PostParams::default();
        let release = gate::replace(&self.api, &self.identity, &pp, &lease, Warrant::OwnState);
        bounded(self.timing.renew_deadline, release).await?;
        self.shard.renewed_at(None);
        Ok(())
    }

    fn lease(&self, holder: Option<String>, listed: Buckets) -> Lease {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let secs = i32::try_from(self.timing.lease_duration.as_secs()).unwrap_or(15);
        Lease {
            metadata: ObjectMeta {
                name: Some(self.identity.clone()),
                resource_version: self.resource_version.clone(),
                labels: Some([(GROUP_LABEL.to_string(), self.group.clone())].into()),
                annotations: Some([(BUCKETS_ANNOTATION.to_string(), format(listed))].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder,
                lease_duration_seconds: Some(secs),
                renew_time: Some(now),
                ..LeaseSpec::default()
            }),
        }
    }
}

/// `request`, given up after `limit`. A request stuck on a connection
/// that died (a replica paused past its Lease can wake with one in flight)
/// must not stop the rounds for good, and a Lease read or written later
/// than the renew deadline is of no use anyway.
async fn bounded<T>(
    limit: Duration,
    request: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    tokio::time::timeout(limit, request)
        .await
        .unwrap_or_else(|elapsed| Err(kube::Error::Service(Box::new(elapsed))))
}

/// Buckets as the annotation writes them: hexadecimal bits.
pub fn format(set: Buckets) -> String {
    format!("{set:016x}")
}

/// Buckets from the annotation; anything unreadable lists every bucket, so
/// a damaged Lease blocks claims instead of letting two members hold one.
pub fn parse(text: &str) -> Buckets {
    if text.is_empty() {
        return 0;
    }
    u64::from_str_radix(text, 16).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_request_that_hangs_is_given_up_after_the_limit() {
        let hung = bounded(
            Duration::from_secs(3),
            std::future::pending::<Result<(), kube::Error>>(),
        );
        assert!(matches!(hung.await, Err(kube::Error::Service(_))));
        let quick = bounded(Duration::from_secs(3), async { Ok::<_, kube::Error>(7) });
        assert_eq!(quick.await.unwrap(), 7);
    }

    #[test]
    fn the_annotation_round_trips_and_damage_blocks_claims() {
        for set in [0, 1, 0x8000_0000_0000_0001, u64::MAX] {
            assert_eq!(parse(&format(set)), set);
        }
        assert_eq!(parse(""), 0);
        assert_eq!(parse("zz"), u64::MAX);
    }
}
