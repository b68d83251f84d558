//! Leader election on a `coordination.k8s.io` Lease, the way client-go does
//! it: every retry period, read the Lease; take it when it is free or its
//! holder has not renewed it for a whole lease duration (measured on this
//! replica's clock, from when the record last changed); write with the
//! Lease's resourceVersion, so two replicas never both win. The leader
//! renews every retry period and stands down at once when it sees another
//! holder, or when it has not renewed within the renew deadline (shorter than
//! the lease duration, so it stops before anyone else may start). On shutdown
//! it releases the Lease so a standby takes over without waiting.

use std::time::Duration;

use crate::gate::{self, Warrant};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;

/// Lease timing, controller-runtime's defaults.
#[derive(Debug, Clone)]
pub struct Timing {
    /// How long a Lease is valid without renewal (15s).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stands down (10s).
    pub renew_deadline: Duration,
    /// How often everyone reads the Lease (2s).
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timing {
    /// Checks the ordering client-go requires: retry < renew deadline < lease duration.
    pub fn check(&self) -> Result<(), String> {
        if self.retry_period.is_zero()
            || self.retry_period >= self.renew_deadline
            || self.renew_deadline >= self.lease_duration
        {
            return Err(format!(
                "leader election needs retry period < renew deadline < lease duration (got {:?}, {:?}, {:?})",
                self.retry_period, self.renew_deadline, self.lease_duration
            ));
        }
        Ok(())
    }
}

/// What the holder fields of a Lease say, for change detection.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: Option<String>,
    renew: Option<String>,
    transitions: Option<i32>,
}

impl Record {
    fn of(spec: Option<&LeaseSpec>) -> Self {
        Self {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            renew: spec
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| t.0.to_string()),
            transitions: spec.and_then(|s| s.lease_transitions),
        }
    }
}

/// The decision, pure: may `me` take (or keep) a Lease whose record was
/// last seen changing at `observed`, held for `duration`?
pub fn may_take(
    holder: Option<&str>,
    me: &str,
    observed: Instant,
    duration: Duration,
    now: Instant,
) -> bool {
    match holder {
        None => true,
        Some(h) if h == me => true,
        Some(_) => now.duration_since(observed) >= duration,
    }
}

/// One replica's view of the election.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    observed: Option<(Record, Instant)>,
    last_renew: Option<Instant>,
    /// `last_renew`, shared with the write fence.
    renewed: std::sync::Arc<std::sync::Mutex<Option<Instant>>>,
}

/// Whether this replica may write now: it renewed the Lease less than
/// `deadline` ago (the renew deadline, shorter than the lease duration, so
/// no other replica can hold the Lease yet). Measured on the monotonic
/// clock, which goes on while the process is paused: a replica that wakes
/// from a pause longer than that is refused at once.
pub fn held(last_renew: Option<Instant>, now: Instant, deadline: Duration) -> bool {
    last_renew.is_some_and(|t| now.saturating_duration_since(t) < deadline)
}

/// Why holding the Lease ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// Another replica holds it now.
    TakenBy(String),
    /// Renewal failed for longer than the renew deadline.
    RenewDeadline,
}

impl Elector {
    /// An elector for Lease `namespace/name` as `identity`.
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: Timing,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.to_string(),
            timing,
            observed: None,
            last_renew: None,
            renewed: std::sync::Arc::default(),
        }
    }

    /// A check, usable from any thread, that this replica holds the Lease
    /// right now (see [`held`]); the engine asks it before every write.
    pub fn fence(&self) -> std::sync::Arc<dyn Fn() -> bool + Send + Sync> {
        let renewed = self.renewed.clone();
        let deadline = self.timing.renew_deadline;
        std::sync::Arc::new(move || {
            let last = *renewed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            held(last, Instant::now(), deadline)
        })
    }

    fn set_renewed(&mut self, at: Option<Instant>) {
        self.last_renew = at;
        *self
            .renewed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = at;
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&mut self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => return,
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(lease = %self.name, %error, "reading the lease failed; retrying")
                }
            }
            tokio::time::sleep(self.timing.retry_period).await;
        }
    }

    /// Renews the Lease until it is lost; resolves with why.
    pub async fn hold(&mut self) -> Lost {
        loop {
            tokio::time::sleep(self.timing.retry_period).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => continue,
                Ok(false) => {
                    let holder = self
                        .observed
                        .as_ref()
                        .and_then(|(r, _)| r.holder.clone())
                        .unwrap_or_default();
                    return Lost::TakenBy(holder);
                }
                Err(error) => {
                    tracing::warn!(lease = %self.name, %error, "renewing the lease failed; retrying")
                }
            }
            if self
                .last_renew
                .is_none_or(|t| t.elapsed() >= self.timing.renew_deadline)
            {
                return Lost::RenewDeadline;
            }
        }
    }

    /// Gives the Lease up (holder cleared, 1-second duration) if this replica holds it.
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        let pp = PostParams::default();
        gate::replace(&self.api, &self.name, &pp, &lease, Warrant::OwnState).await?;
        self.set_renewed(None);
        Ok(())
    }

    /// One round of client-go's `tryAcquireOrRenew`.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        // The Lease is held from when the write was sent, not from when its
        // answer is read: an answer read after a pause (SIGSTOP, a starved
        // process) must not make a Lease another replica took meanwhile
        // look fresh.
        let sent = Instant::now();
        let now = k8s_openapi::jiff::Timestamp::now();
        let duration_secs = i32::try_from(self.timing.lease_duration.as_secs()).unwrap_or(15);
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration_secs),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            let pp = PostParams::default();
            return match gate::create(&self.api, &pp, &lease, Warrant::OwnState).await {
                Ok(created) => Ok(self.won(created.spec.as_ref(), sent)),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let record = Record::of(lease.spec.as_ref());
        let observed_at = match &self.observed {
            Some((seen, at)) if *seen == record => *at,
            _ => Instant::now(),
        };
        self.observed = Some((record.clone(), observed_at));
        let held_for = lease
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .map_or(self.timing.lease_duration, |s| {
                Duration::from_secs(u64::try_from(s).unwrap_or(0))
            });
        if !may_take(
            record.holder.as_deref(),
            &self.identity,
            observed_at,
            held_for,
            Instant::now(),
        ) {
            return Ok(false);
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            spec.holder_identity = Some(self.identity.clone());
        }
        spec.lease_duration_seconds = Some(duration_secs);
        spec.renew_time = Some(MicroTime(now));
        // The resourceVersion read above makes this a compare-and-swap.
        let pp = PostParams::default();
        match gate::replace(&self.api, &self.name, &pp, &lease, Warrant::OwnState).await {
            Ok(updated) => Ok(self.won(updated.spec.as_ref(), sent)),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn won(&mut self, spec: Option<&LeaseSpec>, sent: Instant) -> bool {
        self.observed = Some((Record::of(spec), Instant::now()));
        self.set_renewed(Some(sent));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_may_write_only_while_its_last_renew_is_fresh() {
        let t0 = Instant::now();
        let deadline = Duration::from_secs(10);
        assert!(!held(None, t0, deadline), "never renewed: not held");
        assert!(held(Some(t0), t0 + Duration::from_secs(9), deadline));
        // Paused (SIGSTOP) for 22 s: on waking, not held, before any renew.
        assert!(!held(Some(t0), t0 + Duration::from_secs(22), deadline));
        assert!(!held(Some(t0), t0 + deadline, deadline));
    }

    #[test]
    fn a_lease_is_taken_when_free_ours_or_unrenewed_for_its_duration() {
        let t0 = Instant::now();
        let d = Duration::from_secs(15);
        assert!(may_take(None, "me", t0, d, t0));
        assert!(may_take(Some("me"), "me", t0, d, t0));
        assert!(!may_take(
            Some("other"),
            "me",
            t0,
            d,
            t0 + Duration::from_secs(14)
        ));
        assert!(may_take(
            Some("other"),
            "me",
            t0,
            d,
            t0 + Duration::from_secs(15)
        ));
    }

    #[test]
    fn timings_must_nest() {
        assert!(Timing::default().check().is_ok());
        let bad = Timing {
            renew_deadline: Duration::from_secs(20),
            ..Timing::default()
        };
        assert!(bad.check().is_err());
        let bad = Timing {
            retry_period: Duration::ZERO,
            ..Timing::default()
        };
        assert!(bad.check().is_err());
    }
}
