//! What every running rule shares: the client, discovery, the informers,
//! the Event recorder, the metrics, the status board, the write fence and
//! the shard scope.

use std::sync::Arc;

use kube::Client;
use kube::runtime::events::Recorder;

use super::{board, no_status, ready_tally};
use crate::engine::cache::crd_watch;
use crate::engine::cache::kinds::Kinds;
use crate::engine::cache::registry::Registry;
use crate::engine::options::Options;
use crate::shard::Whose;

/// What every rule shares.
pub struct Shared {
    /// The API client.
    pub client: Client,
    /// Discovery cache.
    pub kinds: Kinds,
    /// Informers, one per GVK.
    pub informers: Registry,
    /// Kubernetes Events.
    pub recorder: Recorder,
    /// Options.
    pub options: Options,
    /// Prometheus metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Which rules select each primary, and their parts of its status.
    pub board: board::Board,
    /// Each rule's primaries by their `Ready` status (`kiln_primaries`).
    pub ready: ready_tally::ReadyTally,
    /// The primaries told they get no status (no status subresource).
    pub no_status: no_status::Told,
    /// Whether this replica may write right now (its lease is held); unset: always.
    pub fence: std::sync::OnceLock<Fence>,
    /// This replica's share of the primaries, when sharded (`kiln run --shards`).
    pub shard: Option<Arc<crate::shard::scope::Scope>>,
    /// One watch per primary CRD, shared by the rules on it.
    pub crds: crd_watch::CrdWatches,
    /// Rules sending their start-up requests (discovery, the primary's
    /// CRD) at once: at most [`STARTING`]. Each request in flight holds a
    /// connection of its own (HTTP/1.1), kept open a while once done: two
    /// hundred rules starting together opened about two hundred, some
    /// 40 KiB each with their TLS and buffers.
    pub starting: tokio::sync::Semaphore,
    /// The external sources' answers, shared by every rule and primary.
    pub external: crate::external::Fetcher,
}

/// How many rules send their start-up requests at once.
pub(crate) const STARTING: usize = 4;

/// Answers whether this replica may write right now.
pub type Fence = Arc<dyn Fn() -> bool + Send + Sync>;

impl Shared {
    /// Whether a write may be sent now: no fence is set, or it says yes.
    pub fn may_write(&self) -> bool {
        self.fence.get().is_none_or(|f| f())
    }

    /// Whether this replica reconciles the primary with this uid: always,
    /// unless sharded and the primary is another replica's.
    pub fn owns(&self, primary_uid: &str) -> bool {
        self.whose(primary_uid) == Whose::Mine
    }

    /// Who reconciles the primary with this uid: this replica, unless sharded.
    pub fn whose(&self, primary_uid: &str) -> Whose {
        self.shard
            .as_ref()
            .map_or(Whose::Mine, |s| s.shard().whose(primary_uid))
    }

    /// A child is looked up before being written (sharding).
    pub fn looking_up(&self) {
        if let Some(s) = &self.shard {
            s.shard().looking_up();
        }
    }

    /// A reconcile was put off because the shard Lease was late.
    pub fn put_off(&self) {
        if let Some(s) = &self.shard {
            s.shard().putting_off();
        }
    }
}
