//! Ingest: each object a list or watch delivers, decoded, checked against
//! this replica's scope, projected, stored, and handed to every subscribed
//! handler as a [`Change`].

use super::*;

impl Informer {
    /// Takes one event: objects that cannot be decoded are set apart (and
    /// told once), the rest is cached and handed on.
    pub(super) fn accept(&self, stream: usize, event: Event<Incoming>) {
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
    pub(super) fn decoded(&self, stream: usize, incoming: Incoming) -> Option<DynamicObject> {
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
    pub(super) fn in_scope(&self, stream: usize, object: DynamicObject) -> Option<DynamicObject> {
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
    pub(super) fn noting(&self, f: impl FnOnce(&mut Elsewhere)) {
        if self.scope.is_some() {
            f(&mut self
                .elsewhere
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner));
        }
    }

    pub(super) fn forget_undecodable(&self, object: &DynamicObject) {
        self.undecodable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&ObjKey::of(object));
    }

    pub(super) fn handle(&self, stream: usize, event: Event<DynamicObject>) {
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
    pub(super) fn unchanged(&self, old: Option<&Cached>, new: &Cached) -> bool {
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

    pub(super) fn emit(&self, change: &Change<'_>) {
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
}
