//! One watch and one cache per GVK, shared by every rule that touches the
//! kind. Objects are cached without `managedFields` (but kiln's own), cut
//! to what rules need ([`Projection`]) and held compact ([`Store`]): read
//! them by header with [`Informer::entries`], parsed with
//! [`Informer::get`] and [`Informer::owned_by`]. Changes are handed to
//! every subscribed handler synchronously, in order, so no event is ever
//! dropped; handlers only compute keys and add them to a queue.

use std::collections::{HashMap, HashSet};
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

/// A change to a cached object.
#[derive(Debug)]
pub enum Change<'a> {
    /// Created or updated (also every object of a re-list).
    Applied(&'a Arc<DynamicObject>),
    /// Deleted.
    Deleted(&'a Arc<DynamicObject>),
}

/// A subscriber's callback.
pub type Handler = Arc<dyn Fn(&Change<'_>) + Send + Sync>;

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
}

/// The share of a kind to ask the API server for (its shard selector),
/// asked each time the streams (re)start; `None`: everything (the kind is
/// not selected by its own uid).
pub type Select =
    Arc<dyn Fn(&crate::rules::Gvk) -> Option<crate::shard::ring::Buckets> + Send + Sync>;

/// Decides whether the cache of a kind keeps an object (a sharded replica
/// keeps only its share); asked at ingest, before the store.
pub type Keep = Arc<dyn Fn(&crate::rules::Gvk, &DynamicObject) -> bool + Send + Sync>;

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
pub type UndecodableSink = Arc<dyn Fn(&Undecodable) + Send + Sync>;

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

    /// Takes one event: objects that cannot be decoded are set apart (and
    /// told once), the rest is cached and handed on.
    fn accept(&self, stream: usize, event: Event<Incoming>) {
        if matches!(event, Event::InitDone | Event::Apply(_) | Event::Delete(_)) {
            self.health(stream, WatchHealth::progressed);
        }
        // A name stays noted as left out until its object is in the store
        // (an update now kept, a list complete), so a reader never finds
        // it in neither.
        let event = match event {
            Event::Init => {
                self.noting(|e| e.listing(stream));
                Event::Init
            }
            Event::InitDone => {
                self.handle(stream, Event::InitDone);
                self.noting(|e| e.listed(stream));
                return;
            }
            Event::InitApply(o) => match self.decoded(stream, o) {
                Some(o) => Event::InitApply(o),
                None => return,
            },
            Event::Apply(o) => {
                if let Some(o) = self.decoded(stream, o) {
                    // Kept: its name's note (if any) goes once it is stored.
                    let print = self.scope.as_ref().map(|_| {
                        self.elsewhere
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .print(
                                o.metadata.namespace.as_deref(),
                                o.metadata.name.as_deref().unwrap_or_default(),
                            )
                    });
                    self.handle(stream, Event::Apply(o));
                    if let Some(print) = print {
                        self.noting(|e| e.forget(stream, print));
                    }
                }
                return;
            }
            Event::Delete(o) => {
                self.forget_undecodable(&o.object);
                let meta = &o.object.metadata;
                self.noting(|e| {
                    e.not_left_out(
                        stream,
                        meta.namespace.as_deref(),
                        meta.name.as_deref().unwrap_or_default(),
                    );
                });
                Event::Delete(o.object)
            }
        };
        self.handle(stream, event);
    }

    /// The object, when it decoded; otherwise it leaves the cache (it can no
    /// longer be read) and is reported, once per object.
    fn decoded(&self, stream: usize, incoming: Incoming) -> Option<DynamicObject> {
        let Some(why) = incoming.undecodable else {
            self.forget_undecodable(&incoming.object);
            return self.in_scope(stream, incoming.object);
        };
        let object = incoming.object;
        let key = ObjKey::of(&object);
        // Set apart before it leaves the store: a reader asking whether an
        // object of its name may exist never finds it in neither.
        let first = self
            .undecodable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key.clone());
        let removed = self.write().remove(&key);
        if let Some(old) = removed {
            self.emit(&Change::Deleted(&Arc::new(old.decode())));
        }
        if first && let Some(sink) = &self.sink {
            sink(&Undecodable {
                object,
                kind: self.kind.clone(),
                why,
            });
        }
        None
    }

    /// The object, when the scope keeps it; otherwise it leaves the cache
    /// (a sharded replica keeps only its share).
    fn in_scope(&self, stream: usize, object: DynamicObject) -> Option<DynamicObject> {
        let Some(keep) = &self.scope else {
            return Some(object);
        };
        if keep(&self.kind.gvk, &object) {
            // Its note, if any, goes once it is stored (see `accept`).
            return Some(object);
        }
        let ns = object.metadata.namespace.as_deref();
        let name = object.metadata.name.as_deref().unwrap_or_default();
        self.noting(|e| e.left_out(stream, ns, name));
        self.dropped.fetch_add(1, Ordering::Relaxed);
        let removed = self.write().remove(&ObjKey::of(&object));
        if let Some(old) = removed {
            self.emit(&Change::Deleted(&Arc::new(old.decode())));
        }
        None
    }

    /// Notes what the scope left out (sharded caches only).
    fn noting(&self, f: impl FnOnce(&mut Elsewhere)) {
        if self.scope.is_some() {
            f(&mut self
                .elsewhere
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner));
        }
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

    fn forget_undecodable(&self, object: &DynamicObject) {
        self.undecodable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&ObjKey::of(object));
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

    fn handle(&self, stream: usize, event: Event<DynamicObject>) {
        match event {
            Event::Init => self.write().begin_relist(stream),
            Event::InitApply(obj) => {
                let obj = Arc::new(Cached::new(obj));
                self.write().relisted(stream, obj);
            }
            Event::InitDone => {
                let listed = self.write().end_relist(stream);
                // Objects this stream had that the re-list no longer shows were deleted meanwhile.
                let vanished: Vec<ObjKey> = {
                    let store = self.read();
                    store
                        .all()
                        .filter(|o| {
                            self.streams[stream].is_none()
                                || o.namespace() == self.streams[stream].as_deref()
                        })
                        .filter(|o| listed.get(o.namespace(), o.name()).is_none())
                        .map(|o| o.key())
                        .collect()
                };
                for key in vanished {
                    let removed = self.write().remove(&key);
                    if let Some(obj) = removed {
                        self.emit(&Change::Deleted(&Arc::new(obj.decode())));
                    }
                }
                let quiet = self.quiet_relist.load(Ordering::SeqCst);
                for obj in listed {
                    let old = self.write().insert(obj.clone());
                    let unchanged = quiet && old.is_some_and(|o| o.same_version(&obj));
                    if !unchanged {
                        self.emit(&Change::Applied(&Arc::new(obj.decode())));
                    }
                }
                let mut done = self
                    .streams_synced
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                done.insert(stream);
                if done.len() == self.streams.len() {
                    self.quiet_relist.store(false, Ordering::SeqCst);
                    self.synced_tx.send_replace(true);
                    self.listed_epoch
                        .send_replace(self.epoch.load(Ordering::SeqCst));
                }
            }
            Event::Apply(mut obj) => {
                let cached = Arc::new(Cached::of(&mut obj));
                let old = self.write().insert(cached.clone());
                if !self.unchanged(old.as_deref(), &cached) {
                    self.emit(&Change::Applied(&Arc::new(obj)));
                }
            }
            Event::Delete(obj) => {
                let key = ObjKey::of(&obj);
                let removed = self.write().remove(&key).map_or(obj, |o| o.decode());
                self.emit(&Change::Deleted(&Arc::new(removed)));
            }
        }
    }

    /// Whether an update changed nothing kept: with a projection, a change
    /// to dropped fields only moves the resource version, and wakes no one.
    fn unchanged(&self, old: Option<&Cached>, new: &Cached) -> bool {
        let Some(old) = old else { return false };
        if self
            .projection
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_everything()
        {
            return false;
        }
        old.same_but_version(new)
    }

    fn emit(&self, change: &Change<'_>) {
        let handlers: Vec<Handler> = self
            .handlers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(_, h)| h.clone())
            .collect();
        for handler in handlers {
            handler(change);
        }
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
        let found = self.read().get(key).cloned();
        found.map(|c| Arc::new(c.decode()))
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
        let found: Vec<Arc<Cached>> = self.read().owned_by(uid).cloned().collect();
        found.iter().map(|c| Arc::new(c.decode())).collect()
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

/// How long an informer no rule uses is kept before it stops, so that a rule
/// swapped by a reload finds its caches warm instead of re-listing.
pub const LINGER: std::time::Duration = std::time::Duration::from_secs(60);

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
    /// Whether informers keep only what rules set and read (issue 16);
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use kube::core::{ApiResource, GroupVersionKind};
    use serde_json::json;

    use super::*;
    use crate::rules::Gvk;

    /// An informer with no watch task, fed events by hand.
    fn informer() -> Arc<Informer> {
        let gvk = Gvk {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "ConfigMap"),
            "configmaps",
        );
        let kind = Arc::new(Kind {
            gvk,
            ar,
            namespaced: true,
            has_status: false,
        });
        Informer::unstarted(kind, vec![None], None)
    }

    fn cm(name: &str, owner: Option<&str>) -> DynamicObject {
        let mut meta = json!({"name": name, "namespace": "ns"});
        if let Some(uid) = owner {
            meta["ownerReferences"] =
                json!([{"apiVersion": "v1", "kind": "X", "name": "o", "uid": uid}]);
        }
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}))
            .unwrap()
    }

    /// Subscribes to `i`: each change as `+name` or `-name`, in order.
    fn record(i: &Informer) -> Arc<StdMutex<Vec<String>>> {
        let seen = Arc::new(StdMutex::new(Vec::new()));
        let log = seen.clone();
        i.subscribe(Arc::new(move |c: &Change<'_>| {
            let entry = match c {
                Change::Applied(o) => format!("+{}", o.name_any()),
                Change::Deleted(o) => format!("-{}", o.name_any()),
            };
            log.lock().unwrap().push(entry);
        }));
        seen
    }

    #[test]
    fn a_relist_after_410_emits_the_deletions_it_missed_and_fixes_the_owner_index() {
        let i = informer();
        let seen = record(&i);
        // First list: a and b, both owned by u1.
        i.handle(0, Event::Init);
        i.handle(0, Event::InitApply(cm("a", Some("u1"))));
        i.handle(0, Event::InitApply(cm("b", Some("u1"))));
        i.handle(0, Event::InitDone);
        assert!(i.is_synced());
        assert_eq!(i.owned_by("u1").len(), 2);
        // The watch expires (410 Gone); meanwhile b was deleted and c created.
        // The watcher re-lists: kiln must notice b's deletion it never saw.
        seen.lock().unwrap().clear();
        i.handle(0, Event::Init);
        i.handle(0, Event::InitApply(cm("a", Some("u1"))));
        i.handle(0, Event::InitApply(cm("c", Some("u2"))));
        i.handle(0, Event::InitDone);
        let mut events = seen.lock().unwrap().clone();
        events.sort();
        assert_eq!(events, ["+a", "+c", "-b"]);
        let mut names: Vec<String> = i.list().iter().map(|o| o.name_any()).collect();
        names.sort();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(i.owned_by("u1").len(), 1);
        assert_eq!(i.owned_by("u2").len(), 1);
        // Ordinary events after the re-list keep working.
        i.handle(0, Event::Delete(cm("a", Some("u1"))));
        assert!(i.owned_by("u1").is_empty());
        assert!(
            i.get(&ObjKey {
                namespace: Some("ns".into()),
                name: "a".into()
            })
            .is_none()
        );
    }

    /// What the watch sends: a decoded object.
    fn incoming(o: DynamicObject) -> Incoming {
        Incoming {
            object: o,
            undecodable: None,
        }
    }

    #[test]
    fn a_scoped_cache_notes_the_names_it_left_out_until_they_go() {
        let plain = informer();
        let keep: Keep = Arc::new(|_, o: &DynamicObject| {
            o.owner_references()
                .first()
                .is_none_or(|r| r.uid != "theirs")
        });
        let i = Informer::unstarted_with(
            plain.kind.clone(),
            vec![None],
            None,
            Some(keep),
            Vec::new(),
            String::new(),
            0,
        );
        let key = |name: &str| ObjKey {
            namespace: Some("ns".into()),
            name: name.into(),
        };
        i.accept(0, Event::Init);
        i.accept(0, Event::InitApply(incoming(cm("mine", Some("ours")))));
        i.accept(0, Event::InitApply(incoming(cm("other", Some("theirs")))));
        assert!(
            i.may_hold_unseen(&key("free")),
            "unsynced: nothing is known absent"
        );
        i.accept(0, Event::InitDone);
        assert!(!i.may_hold_unseen(&key("free")));
        assert!(i.may_hold_unseen(&key("other")), "left out, so maybe there");
        assert!(i.entry(&key("other")).is_none());
        // It becomes this replica's: cached, no longer noted; the note
        // goes only once it is stored, so no reader finds it in neither.
        let seen = Arc::new(StdMutex::new(Vec::new()));
        let (log, reader) = (seen.clone(), i.clone());
        let id = i.subscribe(Arc::new(move |c: &Change<'_>| {
            if let Change::Applied(o) = c {
                let k = ObjKey::of(o);
                log.lock()
                    .unwrap()
                    .push((reader.entry(&k).is_some(), reader.may_hold_unseen(&k)));
            }
        }));
        i.accept(0, Event::Apply(incoming(cm("other", Some("ours")))));
        assert_eq!(*seen.lock().unwrap(), [(true, true)], "stored, still noted");
        i.unsubscribe(id);
        assert!(!i.may_hold_unseen(&key("other")));
        // And another replica's again, then deleted.
        i.accept(0, Event::Apply(incoming(cm("other", Some("theirs")))));
        assert!(i.may_hold_unseen(&key("other")));
        i.accept(0, Event::Delete(incoming(cm("other", Some("theirs")))));
        assert!(!i.may_hold_unseen(&key("other")));
        // An unscoped cache notes nothing: it holds every object.
        plain.accept(0, Event::Init);
        plain.accept(0, Event::InitApply(incoming(cm("x", Some("theirs")))));
        plain.accept(0, Event::InitDone);
        assert!(!plain.may_hold_unseen(&key("y")));
        assert!(plain.elsewhere.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_rescope_relist_hands_on_only_what_changed_and_marks_its_epoch() {
        let i = informer();
        i.handle(0, Event::Init);
        i.handle(0, Event::InitApply(cm("a", Some("u1"))));
        i.handle(0, Event::InitApply(cm("b", Some("u1"))));
        i.handle(0, Event::InitDone);
        assert_eq!(i.listed_epoch(), 0);
        let seen = record(&i);
        // The share changed: b is out of scope now, c came in, a is as it was.
        i.restart(1);
        i.handle(0, Event::Init);
        i.handle(0, Event::InitApply(cm("a", Some("u1"))));
        i.handle(0, Event::InitApply(cm("c", Some("u2"))));
        i.handle(0, Event::InitDone);
        let mut events = seen.lock().unwrap().clone();
        events.sort();
        assert_eq!(events, ["+c", "-b"], "an unchanged object queued work");
        assert_eq!(i.listed_epoch(), 1);
        // A later re-list (a 410) hands everything on again.
        seen.lock().unwrap().clear();
        i.handle(0, Event::Init);
        i.handle(0, Event::InitApply(cm("a", Some("u1"))));
        i.handle(0, Event::InitApply(cm("c", Some("u2"))));
        i.handle(0, Event::InitDone);
        assert_eq!(seen.lock().unwrap().len(), 2);
    }
}
