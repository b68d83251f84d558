//! The registry of informers: one per GVK, acquired and released by the
//! rules that use it, kept a while after the last one lets go
//! ([`LINGER`]), and shared settings (scope, projection, shard filter).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use kube::Client;

use super::informer::{Informer, Keep, Select, UndecodableSink};
use super::kinds::Kind;
use super::projection::Projection;

/// How long an informer no rule uses is kept before it stops, so that a rule
/// swapped by a reload finds its caches warm instead of re-listing.
pub(crate) const LINGER: std::time::Duration = std::time::Duration::from_secs(60);

struct Entry {
    informer: Arc<Informer>,
    users: usize,
    idle_since: Option<std::time::Instant>,
}

/// All informers, one per GVK, reference-counted by the rules using them.
#[derive(Default)]
pub struct Registry {
    entries: Mutex<HashMap<crate::rules::Gvk, Entry>>,
    starts: Mutex<HashMap<crate::rules::Gvk, u64>>,
    status_manager: String,
    sink: Option<UndecodableSink>,
    /// Which objects the caches keep (sharding).
    scope: Option<Keep>,
    /// The shard selector sent with lists and watches (sharding).
    select: Option<Select>,
    /// The scope epoch: bumped each time the scope changes.
    epoch: AtomicU64,
    /// Whether informers keep only what rules set and read;
    /// otherwise whole objects.
    project: bool,
}

impl Registry {
    /// A registry whose informers keep the status managed fields of `manager`.
    pub fn keeping_status_of(manager: &str) -> Self {
        Self {
            status_manager: manager.to_string(),
            ..Self::default()
        }
    }

    /// Objects that cannot be decoded are told to `sink`.
    #[must_use]
    pub fn reporting_to(self, sink: UndecodableSink) -> Self {
        Self {
            sink: Some(sink),
            ..self
        }
    }

    /// Informers keep of each object only what the rules using its kind set
    /// and read (see [`Projection`]), when `project` is true.
    #[must_use]
    pub fn projecting(self, project: bool) -> Self {
        Self { project, ..self }
    }

    /// The caches keep only what `scope` keeps (a sharded replica), and
    /// the API server is asked to send only what `select` selects.
    #[must_use]
    pub fn scoped(self, scope: Keep, select: Select) -> Self {
        Self {
            scope: Some(scope),
            select: Some(select),
            ..self
        }
    }

    /// Per kind with a shard selector: whether the API server applied it on
    /// the last list, and how many objects received the scope dropped.
    pub fn shard_filtering(&self) -> Vec<(crate::rules::Gvk, Option<bool>, u64)> {
        self.lock()
            .iter()
            .map(|(gvk, e)| {
                let (served, dropped) = e.informer.shard_filtering();
                (gvk.clone(), served, dropped)
            })
            .collect()
    }

    /// The scope changed: every informer lists again under it. Returns the
    /// new epoch, for [`covered_since`](Self::covered_since).
    pub fn rescope(&self) -> u64 {
        let entries = self.lock();
        let epoch = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        for entry in entries.values() {
            entry.informer.restart(epoch);
        }
        epoch
    }

    /// Whether every informer a rule uses has listed in scope epoch `epoch`
    /// or later.
    pub fn covered_since(&self, epoch: u64) -> bool {
        self.lock()
            .values()
            .filter(|e| e.users > 0)
            .all(|e| e.informer.listed_epoch() >= epoch && e.informer.is_synced())
    }

    /// Why some watch makes kiln unready, if one does.
    pub fn trouble(&self) -> Option<String> {
        self.lock()
            .values()
            .filter(|e| e.users > 0)
            .find_map(|e| e.informer.trouble())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<crate::rules::Gvk, Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The informer for `kind`, started on first use, keeping at least what
    /// `wanted` keeps (when projecting): a running informer that keeps less
    /// lists its kind again.
    pub fn acquire(
        &self,
        client: &Client,
        kind: &Arc<Kind>,
        namespaces: &[String],
        wanted: &Projection,
    ) -> Arc<Informer> {
        self.sweep();
        let wanted = if self.project {
            wanted.clone()
        } else {
            Projection::everything()
        };
        let mut entries = self.lock();
        let entry = entries.entry(kind.gvk.clone()).or_insert_with(|| {
            *self
                .starts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(kind.gvk.clone())
                .or_insert(0) += 1;
            Entry {
                informer: Informer::start(
                    client,
                    kind.clone(),
                    namespaces,
                    &self.status_manager,
                    self.sink.clone(),
                    self.scope.clone(),
                    self.select.clone(),
                    self.epoch.load(Ordering::SeqCst),
                    wanted.clone(),
                ),
                users: 0,
                idle_since: None,
            }
        });
        entry.informer.widen(&wanted);
        entry.users += 1;
        entry.idle_since = None;
        entry.informer.clone()
    }

    /// Gives up one use of the informer for `gvk`; once unused for
    /// [`LINGER`] it stops.
    pub fn release(&self, gvk: &crate::rules::Gvk) {
        if let Some(entry) = self.lock().get_mut(gvk) {
            entry.users = entry.users.saturating_sub(1);
            if entry.users == 0 {
                entry.idle_since = Some(std::time::Instant::now());
            }
        }
        self.sweep();
    }

    /// Stops informers unused for longer than [`LINGER`], and those whose
    /// kind is gone (a deleted CRD: a later rule must not inherit the dead watch).
    pub fn sweep(&self) {
        self.lock().retain(|_, e| {
            let idle_too_long = e.idle_since.is_some_and(|t| t.elapsed() >= LINGER);
            let dead = e.users == 0 && e.informer.is_gone();
            if idle_too_long || dead {
                e.informer.stop();
            }
            !(idle_too_long || dead)
        });
    }

    /// Stops every informer, used or lingering (the engine shuts down: no
    /// watch outlives it to fail against a cluster that is going away).
    pub fn stop_all(&self) {
        for (_, e) in self.lock().drain() {
            e.informer.stop();
        }
    }

    /// The informer for `gvk`, when a rule uses it now.
    pub fn running(&self, gvk: &crate::rules::Gvk) -> Option<Arc<Informer>> {
        self.lock()
            .get(gvk)
            .filter(|e| e.users > 0)
            .map(|e| e.informer.clone())
    }

    /// How many watches run (one per GVK, whatever the number of rules).
    pub fn watches(&self) -> usize {
        self.lock().values().filter(|e| e.users > 0).count()
    }

    /// How many times a watch was started for `gvk`.
    pub fn starts(&self, gvk: &crate::rules::Gvk) -> u64 {
        self.starts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(gvk)
            .copied()
            .unwrap_or(0)
    }

    /// Objects cached per GVK, and the bytes of their compact form (JSON text, namespace, name, labels).
    pub fn cached(&self) -> Vec<(crate::rules::Gvk, usize, usize)> {
        self.lock()
            .iter()
            .map(|(gvk, e)| (gvk.clone(), e.informer.len(), e.informer.bytes()))
            .collect()
    }
}
