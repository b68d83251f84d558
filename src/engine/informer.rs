//! One watch and one cache per GVK, shared by every rule that touches the
//! kind. Objects are cached without `managedFields`. Changes are handed to
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
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;

use super::kinds::Kind;

/// A namespace and a name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey {
    /// The namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl ObjKey {
    /// The key of an object.
    pub fn of(obj: &DynamicObject) -> Self {
        Self {
            namespace: obj.namespace(),
            name: obj.name_any(),
        }
    }
}

impl fmt::Display for ObjKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

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

#[derive(Default)]
struct Store {
    objects: HashMap<ObjKey, Arc<DynamicObject>>,
    /// Owner uid → keys of the objects it owns.
    owned: HashMap<String, HashSet<ObjKey>>,
    /// Objects of a re-list in progress, per watch stream.
    relist: HashMap<usize, HashMap<ObjKey, Arc<DynamicObject>>>,
}

impl Store {
    fn insert(&mut self, obj: Arc<DynamicObject>) -> Option<Arc<DynamicObject>> {
        let key = ObjKey::of(&obj);
        for owner in obj.owner_references() {
            self.owned
                .entry(owner.uid.clone())
                .or_default()
                .insert(key.clone());
        }
        let old = self.objects.insert(key.clone(), obj);
        if let Some(old) = &old {
            self.unindex(old, &key, false);
        }
        old
    }

    fn remove(&mut self, key: &ObjKey) -> Option<Arc<DynamicObject>> {
        let old = self.objects.remove(key)?;
        self.unindex(&old, key, true);
        Some(old)
    }

    fn unindex(&mut self, old: &DynamicObject, key: &ObjKey, all: bool) {
        let current: HashSet<String> = if all {
            HashSet::new()
        } else {
            self.objects
                .get(key)
                .map(|o| o.owner_references().iter().map(|r| r.uid.clone()).collect())
                .unwrap_or_default()
        };
        for owner in old.owner_references() {
            if current.contains(&owner.uid) {
                continue;
            }
            if let Some(set) = self.owned.get_mut(&owner.uid) {
                set.remove(key);
                if set.is_empty() {
                    self.owned.remove(&owner.uid);
                }
            }
        }
    }
}

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
}

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
    fn unstarted(kind: Arc<Kind>, scopes: Vec<Option<String>>) -> Arc<Self> {
        let (synced_tx, _) = watch::channel(false);
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
        })
    }

    /// Starts watching `kind`: cluster-wide, or in each of `namespaces` for a
    /// namespaced kind when any are given. Managed fields are dropped, but
    /// for the status entries of `status_manager` (kiln's own: they tell which
    /// status fields kiln wrote, so one it stops writing can be removed).
    pub fn start(
        client: &Client,
        kind: Arc<Kind>,
        namespaces: &[String],
        status_manager: &str,
    ) -> Arc<Self> {
        let scopes: Vec<Option<String>> = if kind.namespaced && !namespaces.is_empty() {
            namespaces.iter().cloned().map(Some).collect()
        } else {
            vec![None]
        };
        let apis: Vec<Api<DynamicObject>> = scopes
            .iter()
            .map(|scope| match scope {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &kind.ar),
                None => Api::all_with(client.clone(), &kind.ar),
            })
            .collect();
        let this = Self::unstarted(kind, scopes);
        let tasks = apis
            .into_iter()
            .enumerate()
            .map(|(stream, api)| {
                let weak = Arc::downgrade(&this);
                let gvk = this.kind.gvk.to_string();
                let keep = status_manager.to_string();
                tokio::spawn(async move {
                    let events = watcher(api, watcher::Config::default().any_semantic())
                        .default_backoff()
                        .modify(move |o: &mut DynamicObject| {
                            o.managed_fields_mut().retain(|m| {
                                m.manager.as_deref() == Some(keep.as_str())
                                    && m.subresource.as_deref() == Some("status")
                            });
                        });
                    futures::pin_mut!(events);
                    while let Some(event) = events.next().await {
                        let Some(this) = weak.upgrade() else { break };
                        match event {
                            Ok(event) => {
                                this.gone.store(false, Ordering::Relaxed);
                                this.forbidden.store(false, Ordering::Relaxed);
                                this.handle(stream, event);
                            }
                            Err(error) => {
                                if status_code(&error) == Some(404) {
                                    this.gone.store(true, Ordering::Relaxed);
                                }
                                if status_code(&error) == Some(403) {
                                    this.forbidden.store(true, Ordering::Relaxed);
                                }
                                tracing::warn!(%gvk, %error, "watch failed; retrying with backoff");
                            }
                        }
                    }
                })
            })
            .collect();
        *this
            .tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = tasks;
        this
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
            Event::Init => {
                self.write().relist.insert(stream, HashMap::new());
            }
            Event::InitApply(obj) => {
                let obj = Arc::new(obj);
                self.write()
                    .relist
                    .entry(stream)
                    .or_default()
                    .insert(ObjKey::of(&obj), obj);
            }
            Event::InitDone => {
                let listed = self.write().relist.remove(&stream).unwrap_or_default();
                // Objects this stream had that the re-list no longer shows were deleted meanwhile.
                let vanished: Vec<ObjKey> = {
                    let store = self.read();
                    store
                        .objects
                        .keys()
                        .filter(|k| {
                            self.streams[stream].is_none() || k.namespace == self.streams[stream]
                        })
                        .filter(|k| !listed.contains_key(*k))
                        .cloned()
                        .collect()
                };
                for key in vanished {
                    let removed = self.write().remove(&key);
                    if let Some(obj) = removed {
                        self.emit(&Change::Deleted(&obj));
                    }
                }
                for (_, obj) in listed {
                    self.write().insert(obj.clone());
                    self.emit(&Change::Applied(&obj));
                }
                let mut done = self
                    .streams_synced
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                done.insert(stream);
                if done.len() == self.streams.len() {
                    self.synced_tx.send_replace(true);
                }
            }
            Event::Apply(obj) => {
                let obj = Arc::new(obj);
                self.write().insert(obj.clone());
                self.emit(&Change::Applied(&obj));
            }
            Event::Delete(obj) => {
                let key = ObjKey::of(&obj);
                let removed = self.write().remove(&key).unwrap_or_else(|| Arc::new(obj));
                self.emit(&Change::Deleted(&removed));
            }
        }
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

    /// One cached object.
    pub fn get(&self, key: &ObjKey) -> Option<Arc<DynamicObject>> {
        self.read().objects.get(key).cloned()
    }

    /// Every cached object.
    pub fn list(&self) -> Vec<Arc<DynamicObject>> {
        self.read().objects.values().cloned().collect()
    }

    /// Cached objects with an owner reference to `uid`.
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<DynamicObject>> {
        let store = self.read();
        store
            .owned
            .get(uid)
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| store.objects.get(k).cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.read().objects.len()
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
}

impl Registry {
    /// A registry whose informers keep the status managed fields of `manager`.
    pub fn keeping_status_of(manager: &str) -> Self {
        Self {
            status_manager: manager.to_string(),
            ..Self::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<crate::rules::Gvk, Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The informer for `kind`, started on first use.
    pub fn acquire(
        &self,
        client: &Client,
        kind: &Arc<Kind>,
        namespaces: &[String],
    ) -> Arc<Informer> {
        self.sweep();
        let mut entries = self.lock();
        let entry = entries.entry(kind.gvk.clone()).or_insert_with(|| {
            *self
                .starts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(kind.gvk.clone())
                .or_insert(0) += 1;
            Entry {
                informer: Informer::start(client, kind.clone(), namespaces, &self.status_manager),
                users: 0,
                idle_since: None,
            }
        });
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

    /// Objects cached per GVK.
    pub fn cached(&self) -> Vec<(crate::rules::Gvk, usize)> {
        self.lock()
            .iter()
            .map(|(gvk, e)| (gvk.clone(), e.informer.len()))
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
        Informer::unstarted(kind, vec![None])
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

    #[test]
    fn a_relist_after_410_emits_the_deletions_it_missed_and_fixes_the_owner_index() {
        let i = informer();
        let seen = Arc::new(StdMutex::new(Vec::new()));
        let log = seen.clone();
        i.subscribe(Arc::new(move |c: &Change<'_>| {
            let entry = match c {
                Change::Applied(o) => format!("+{}", o.name_any()),
                Change::Deleted(o) => format!("-{}", o.name_any()),
            };
            log.lock().unwrap().push(entry);
        }));
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
}
