//! One watch and one cache per GVK, shared by every rule that touches the
//! kind. Objects are cached without `managedFields` (but kiln's own), cut
//! to what rules need ([`Projection`]) and held compact ([`Store`]): read
//! them by header with [`Informer::entries`], parsed with
//! [`Informer::get`] and [`Informer::owned_by`]. Changes are handed to
//! every subscribed handler synchronously, in order, so no event is ever
//! dropped; handlers only compute keys and add them to a queue.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};

use super::decode::Incoming;
use super::elsewhere::Elsewhere;
use super::watch_health::WatchHealth;
use crate::request_timeout;
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;

use super::kinds::Kind;
use super::owned_status;
use super::projection::Projection;
use super::store::{Cached, Store};
use crate::engine::key::ObjKey;

mod ingest;

/// How long after a CRD's schema changes its objects are listed again: the
/// API server serves the new schema once its own watch of the CRD has the
/// change, which may come just after kiln's.
pub(crate) const SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// A change to a cached object.
#[derive(Debug)]
pub enum Change<'a> {
    /// Created or updated (also every object of a re-list).
    Applied(&'a Arc<DynamicObject>),
    /// Deleted.
    Deleted(&'a Arc<DynamicObject>),
}

/// A subscriber's callback.
pub(crate) type Handler = Arc<dyn Fn(&Change<'_>) + Send + Sync>;

/// A shared watch + cache for one kind.
pub struct Informer {
    kind: Arc<Kind>,
    store: RwLock<Store>,
    handlers: RwLock<Vec<(u64, Handler)>>,
    next_id: AtomicU64,
    synced_tx: watch::Sender<bool>,
    streams_synced: Mutex<HashSet<usize>>,
    /// Per watch stream: the namespace it watches (`None`: all).
    streams: Vec<Option<String>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Set when the API server answers that the kind does not exist (its CRD
    /// was deleted); cleared by the next event.
    gone: AtomicBool,
    /// Set when the API server refuses the watch (403); cleared by the next event.
    forbidden: AtomicBool,
    /// Per watch stream: its failures, backoff and log rate.
    health: Mutex<Vec<WatchHealth>>,
    /// Objects left out because they cannot be decoded (each reported once).
    undecodable: Mutex<HashSet<ObjKey>>,
    /// Told about each object that cannot be decoded.
    sink: Option<UndecodableSink>,
    /// Which objects the cache keeps (sharding); `None`: all.
    scope: Option<Keep>,
    /// How to (re)start the watch streams.
    apis: Vec<Api<Incoming>>,
    status_manager: String,
    /// The scope epoch the streams were (re)started in, and the last epoch
    /// every stream has listed in.
    epoch: AtomicU64,
    listed_epoch: watch::Sender<u64>,
    /// Set by [`restart`](Informer::restart): the re-list hands on only
    /// the objects that changed, so a new scope costs no reconcile storm.
    quiet_relist: AtomicBool,
    /// What of each object is kept (applied at ingest); only widens.
    projection: Arc<RwLock<Projection>>,
    /// The shard selector to send with lists and watches (sharding, where
    /// the API server serves it); `None`: every object is sent.
    select: std::sync::OnceLock<Select>,
    /// Whether the API server applied the selector on the last list.
    served: Arc<crate::shard::server::Served>,
    /// Objects received that the scope did not keep.
    dropped: AtomicU64,
    /// The names of the objects the scope left out (and not deleted since).
    elsewhere: Mutex<Elsewhere>,
    /// The CRD schema the objects were listed under
    /// ([`schema_is`](Informer::schema_is)), as a fingerprint.
    listed_under: Mutex<Option<u64>>,
}

/// The share of a kind to ask the API server for (its shard selector),
/// asked each time the streams (re)start; `None`: everything (the kind is
/// not selected by its own uid).
pub(crate) type Select =
    Arc<dyn Fn(&crate::rules::Gvk) -> Option<crate::shard::ring::Buckets> + Send + Sync>;

/// Decides whether the cache of a kind keeps an object (a sharded replica
/// keeps only its share); asked at ingest, before the store.
pub(crate) type Keep = Arc<dyn Fn(&crate::rules::Gvk, &DynamicObject) -> bool + Send + Sync>;

/// An object the API server holds but kiln cannot decode (nested past the
/// decoder's limit): left out of the cache, reported once.
#[derive(Debug, Clone)]
pub struct Undecodable {
    /// Its type and metadata (nothing else could be read).
    pub object: DynamicObject,
    /// Its kind.
    pub kind: Arc<Kind>,
    /// The decoder's reason (never the body).
    pub why: Arc<str>,
}

/// Told about each object that cannot be decoded; must not block.
pub(crate) type UndecodableSink = Arc<dyn Fn(&Undecodable) + Send + Sync>;

impl fmt::Debug for Informer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Informer")
            .field("gvk", &self.kind.gvk)
            .finish_non_exhaustive()
    }
}

impl Informer {
    /// An informer that watches nothing yet: `start` adds the watch tasks;
    /// tests feed it events by hand.
    #[cfg(test)]
    fn unstarted(
        kind: Arc<Kind>,
        scopes: Vec<Option<String>>,
        sink: Option<UndecodableSink>,
    ) -> Arc<Self> {
        Self::unstarted_with(kind, scopes, sink, None, Vec::new(), String::new(), 0)
    }

    fn unstarted_with(
        kind: Arc<Kind>,
        scopes: Vec<Option<String>>,
        sink: Option<UndecodableSink>,
        scope: Option<Keep>,
        apis: Vec<Api<Incoming>>,
        status_manager: String,
        epoch: u64,
    ) -> Arc<Self> {
        let (synced_tx, _) = watch::channel(false);
        let (listed_epoch, _) = watch::channel(0);
        let elsewhere = Mutex::new(Elsewhere::new(scopes.len()));
        Arc::new(Self {
            kind,
            store: RwLock::default(),
            handlers: RwLock::default(),
            next_id: AtomicU64::new(1),
            synced_tx,
            streams_synced: Mutex::default(),
            streams: scopes,
            tasks: Mutex::default(),
            gone: AtomicBool::new(false),
            forbidden: AtomicBool::new(false),
            health: Mutex::default(),
            undecodable: Mutex::default(),
            sink,
            scope,
            apis,
            status_manager,
            epoch: AtomicU64::new(epoch),
            listed_epoch,
            quiet_relist: AtomicBool::new(false),
            projection: Arc::new(RwLock::new(Projection::everything())),
            select: std::sync::OnceLock::new(),
            served: Arc::default(),
            dropped: AtomicU64::new(0),
            elsewhere,
            listed_under: Mutex::default(),
        })
    }

    /// Starts watching `kind`: cluster-wide, or in each of `namespaces` for a
    /// namespaced kind when any are given. Managed fields are dropped, but
    /// for the status entries of `status_manager` (kiln's own: they tell which
    /// status fields kiln wrote, so one it stops writing can be removed).
    /// Objects that cannot be decoded are left out and told to `sink` once;
    /// with a `scope`, only the objects it keeps are cached (scope epoch `epoch`);
    /// of each object only what `projection` keeps is cached; with a
    /// `select`, the API server is asked to send only what it selects.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        client: &Client,
        kind: Arc<Kind>,
        namespaces: &[String],
        status_manager: &str,
        sink: Option<UndecodableSink>,
        scope: Option<Keep>,
        select: Option<Select>,
        epoch: u64,
        projection: Projection,
    ) -> Arc<Self> {
        let scopes: Vec<Option<String>> = if kind.namespaced && !namespaces.is_empty() {
            namespaces.iter().cloned().map(Some).collect()
        } else {
            vec![None]
        };
        let apis: Vec<Api<Incoming>> = scopes
            .iter()
            .map(|scope| match scope {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &kind.ar),
                None => Api::all_with(client.clone(), &kind.ar),
            })
            .collect();
        let this = Self::unstarted_with(
            kind,
            scopes,
            sink,
            scope,
            apis,
            status_manager.to_string(),
            epoch,
        );
        *this
            .projection
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = projection;
        if let Some(select) = select {
            let _ = this.select.set(select);
        }
        this.spawn_streams();
        this
    }

    /// Keeps also what `wanted` keeps. When that is more than the cache
    /// holds, the kind is listed again (its watch streams restarted) so the
    /// newly kept fields are read; returns whether it was.
    pub fn widen(self: &Arc<Self>, wanted: &Projection) -> bool {
        {
            let mut current = self
                .projection
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if current.covers(wanted) {
                return false;
            }
            current.union(wanted);
        }
        if self.apis.is_empty() {
            return true;
        }
        // Unsynced until the re-list is in: the cached objects lack the
        // newly kept fields, which must not read as absent.
        self.relist(true);
        true
    }

    /// Drops from `object` (kiln's) what the cache would not keep of it now.
    pub fn project(&self, object: &mut serde_json::Value) {
        self.projection
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .apply(object);
    }

    /// What of each object is kept now.
    pub fn projection(&self) -> Projection {
        self.projection
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Lists and watches again from scratch in scope epoch `epoch` (the
    /// scope changed): the re-list keeps what the scope keeps now, and
    /// objects it no longer keeps leave the cache as if deleted.
    pub fn restart(self: &Arc<Self>, epoch: u64) {
        self.epoch.store(epoch, Ordering::SeqCst);
        self.quiet_relist.store(true, Ordering::SeqCst);
        self.relist(false);
    }

    /// Tells the cache which schema its kind's CRD has now (that of the
    /// version watched; each rule on the kind tells it when it starts and
    /// when the CRD changes). The first schema told is the one the cache
    /// was listed under; a different one means the API server now defaults
    /// and prunes the kind's objects by another schema when it reads them,
    /// while the cache holds them as read before: the cache reads as
    /// unsynced at once and lists again [`SETTLE`] later (when the API
    /// server serves the new schema), handing every object on (a default
    /// the API server adds leaves the resource version as it was). Once
    /// per schema, however many rules tell it.
    pub fn schema_is(self: &Arc<Self>, schema: &Option<serde_json::Value>) {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        serde_json::to_string(schema)
            .unwrap_or_default()
            .hash(&mut hasher);
        let fingerprint = hasher.finish();
        let before = self
            .listed_under
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .replace(fingerprint);
        if before.is_none_or(|b| b == fingerprint) || self.apis.is_empty() {
            return;
        }
        self.synced_tx.send_replace(false);
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(SETTLE).await;
            if let Some(informer) = weak.upgrade() {
                informer.relist(true);
            }
        });
    }

    /// Stops the watch streams and starts them again, from a fresh list;
    /// with `unsync`, the cache reads as unsynced until that list is in.
    fn relist(self: &Arc<Self>, unsync: bool) {
        self.stop();
        self.streams_synced
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        if unsync {
            self.synced_tx.send_replace(false);
        }
        self.spawn_streams();
    }

    /// The last scope epoch in which every stream completed a list.
    pub fn listed_epoch(&self) -> u64 {
        *self.listed_epoch.borrow()
    }

    /// The share of this kind the API server is asked for (sharding);
    /// `None`: every object.
    fn server_share(&self) -> Option<crate::shard::ring::Buckets> {
        self.select.get().and_then(|s| s(&self.kind.gvk))
    }

    /// The API of watch stream `stream`: `api`, or, when the share can be
    /// put as a shard selector, the same through a client that sends it.
    fn stream_api(&self, stream: usize, api: Api<Incoming>) -> Api<Incoming> {
        let Some(share) = self.server_share() else {
            return api;
        };
        let Some(client) =
            crate::shard::server::client(api.clone().into(), share, self.served.clone())
        else {
            return api;
        };
        match &self.streams[stream] {
            Some(ns) => Api::namespaced_with(client, ns, &self.kind.ar),
            None => Api::all_with(client, &self.kind.ar),
        }
    }

    /// Whether the API server filtered the last list by the shard selector
    /// (`None`: no selector sent), and how many objects received the
    /// scope dropped (sharding).
    pub fn shard_filtering(&self) -> (Option<bool>, u64) {
        let sent = self
            .server_share()
            .and_then(crate::shard::server::selector)
            .is_some();
        (
            self.served.get().filter(|_| sent),
            self.dropped.load(Ordering::Relaxed),
        )
    }

    fn spawn_streams(self: &Arc<Self>) {
        let tasks = self
            .apis
            .iter()
            .cloned()
            .enumerate()
            .map(|(stream, api)| {
                let api = self.stream_api(stream, api);
                let weak = Arc::downgrade(self);
                let keep = self.status_manager.clone();
                let projection = self.projection.clone();
                // Any resourceVersion for the list: the watch cache's.
                let config = request_timeout::watch_config().any_semantic();
                tokio::spawn(async move {
                    let events = watcher(api, config).modify(move |o: &mut Incoming| {
                        // kiln's status entry, and its decorators'
                        // (`kiln.<rule>.<id>`): what each set where.
                        // The status entry is cut to what is read of it.
                        o.object.managed_fields_mut().retain_mut(|m| {
                            if owned_status::is_status_entry(m, &keep) {
                                owned_status::trim(m);
                                return true;
                            }
                            m.manager
                                .as_deref()
                                .and_then(|manager| manager.strip_prefix(keep.as_str()))
                                .is_some_and(|rest| rest.starts_with('.'))
                        });
                        if o.undecodable.is_none() {
                            projection
                                .read()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .apply_to(&mut o.object);
                        }
                    });
                    futures::pin_mut!(events);
                    while let Some(event) = events.next().await {
                        let Some(this) = weak.upgrade() else { break };
                        let pause = match event {
                            Ok(event) => {
                                this.gone.store(false, Ordering::Relaxed);
                                this.forbidden.store(false, Ordering::Relaxed);
                                this.accept(stream, event);
                                None
                            }
                            Err(error) => Some(this.failed(stream, &error)),
                        };
                        drop(this);
                        if let Some(pause) = pause {
                            tokio::time::sleep(pause).await;
                        }
                    }
                })
            })
            .collect();
        *self
            .tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = tasks;
    }

    /// A list or watch of `stream` failed: note it, log it (rate-limited,
    /// never a response body) and say how long to wait before the next try.
    fn failed(&self, stream: usize, error: &watcher::Error) -> std::time::Duration {
        match status_code(error) {
            Some(404) => self.gone.store(true, Ordering::Relaxed),
            Some(403) => self.forbidden.store(true, Ordering::Relaxed),
            _ => {}
        }
        let message = error.to_string();
        let verdict = self.health(stream, |h| {
            h.failed(
                std::time::Instant::now(),
                &message,
                crate::engine::backoff::jitter(),
            )
        });
        if let Some(quiet) = verdict.log {
            let gvk = self.kind.gvk.to_string();
            tracing::warn!(%gvk, error = %message, retry_in = ?verdict.retry_in, unlogged_failures = quiet, "watch failed; retrying with backoff");
        }
        verdict.retry_in
    }

    fn health<T>(&self, stream: usize, f: impl FnOnce(&mut WatchHealth) -> T) -> T {
        let mut all = self
            .health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if all.len() <= stream {
            all.resize_with(stream + 1, WatchHealth::default);
        }
        f(&mut all[stream])
    }

    /// Why this kind's watch makes kiln unready, if it does: a list or watch
    /// that has kept failing (the API server down, RBAC, a body that cannot
    /// be read).
    pub fn trouble(&self) -> Option<String> {
        let now = std::time::Instant::now();
        self.health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .find_map(|h| h.trouble(now))
            .map(|why| format!("watch of {}: {why}", self.kind.gvk))
    }

    /// Whether an object named `key` may exist though the cache does not
    /// show it: the cache is not synced, or the API server sends only a
    /// share of the kind, or the scope left out an object of that name
    /// (another replica's), or one of that name cannot be decoded.
    /// Otherwise the cache's "absent" is as good as an unsharded cache's.
    pub fn may_hold_unseen(&self, key: &ObjKey) -> bool {
        if !self.is_synced() || self.server_share().is_some() {
            return true;
        }
        if self
            .undecodable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(key)
        {
            return true;
        }
        self.scope.is_some()
            && self
                .elsewhere
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .may_hold(key.namespace.as_deref(), &key.name)
    }

    /// Whether the API server refuses kiln this watch (RBAC).
    pub fn is_forbidden(&self) -> bool {
        self.forbidden.load(Ordering::Relaxed)
    }

    /// Whether the API server said the kind no longer exists.
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Relaxed)
    }

    /// The kind watched.
    pub fn kind(&self) -> &Arc<Kind> {
        &self.kind
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Store> {
        self.store
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Store> {
        self.store
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Subscribes `handler` to every later change; returns an id for
    /// [`unsubscribe`](Self::unsubscribe). Objects already cached are not
    /// replayed: callers list them with [`list`](Self::list) after subscribing.
    pub fn subscribe(&self, handler: Handler) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.handlers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((id, handler));
        id
    }

    /// Removes a handler.
    pub fn unsubscribe(&self, id: u64) {
        self.handlers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|(i, _)| *i != id);
    }

    /// Waits until the first list of every watch stream is complete.
    pub async fn synced(&self) {
        let mut rx = self.synced_tx.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Whether the first list is complete.
    pub fn is_synced(&self) -> bool {
        *self.synced_tx.borrow()
    }

    /// One cached object (parsed from its compact form).
    pub fn get(&self, key: &ObjKey) -> Option<Arc<DynamicObject>> {
        self.entry(key).map(|c| Arc::new(c.decode()))
    }

    /// One cached object as JSON ([`Cached::to_value`]), parsed once.
    pub fn get_value(&self, key: &ObjKey) -> Option<serde_json::Value> {
        self.entry(key).map(|c| c.to_value())
    }

    /// Every cached object, parsed: for rare paths; filters on names,
    /// labels or uids read [`entries`](Self::entries) and parse only what
    /// they keep.
    pub fn list(&self) -> Vec<Arc<DynamicObject>> {
        self.entries()
            .iter()
            .map(|c| Arc::new(c.decode()))
            .collect()
    }

    /// One cached object in its compact form: its header can be read
    /// without parsing the rest.
    pub fn entry(&self, key: &ObjKey) -> Option<Arc<Cached>> {
        self.read().get(key).cloned()
    }

    /// Every cached object in its compact form: its header can be read
    /// without parsing the rest.
    pub fn entries(&self) -> Vec<Arc<Cached>> {
        self.read().all().cloned().collect()
    }

    /// Cached objects with an owner reference to `uid` (or kiln's owner
    /// label or annotation naming `uid`: `outside` and orphaned children).
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<DynamicObject>> {
        let found = self.owned_entries(uid);
        found.iter().map(|c| Arc::new(c.decode())).collect()
    }

    /// [`owned_by`](Self::owned_by) in the compact form, for callers that
    /// want JSON ([`Cached::to_value`]) or only the header.
    pub fn owned_entries(&self, uid: &str) -> Vec<Arc<Cached>> {
        self.read().owned_by(uid).cloned().collect()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Bytes of the cached objects' compact form: JSON text, namespace, name, labels.
    pub fn bytes(&self) -> usize {
        self.read().bytes()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the watch.
    pub fn stop(&self) {
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain(..)
        {
            task.abort();
        }
    }
}

impl Drop for Informer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The HTTP status of a watch error, when the API server answered.
fn status_code(error: &watcher::Error) -> Option<u16> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(s.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
