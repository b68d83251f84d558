//! The informer's store: every cached object in a compact form (issue 16).
//!
//! A `serde_json::Value` tree with `preserve_order` holds an `IndexMap` per
//! JSON object, and a typed `ObjectMeta` a map node per label set and a
//! string per field: about 8 KiB per object for 2 KiB of JSON (measured
//! with heaptrack on the bench). The store keeps instead a small typed
//! [`Header`] (key, uid, resource version, labels, the owner uids it is
//! indexed under: what filters and indexes read) and the whole object as
//! compact JSON text, parsed only when an object is read
//! ([`Cached::decode`]). Filters run on the header without parsing; the
//! engine parses the few objects a reconcile reads (its primary, that
//! primary's children, the related objects it names).
//!
//! Pure data structure, no API calls.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use kube::api::DynamicObject;
use kube::core::ObjectMeta;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::informer::ObjKey;

/// One cached object: what filters and indexes read, typed; the whole
/// object (but its resource version) as compact JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Cached {
    header: Header,
    /// The object as the informer kept it, without its resource version
    /// (in the header), as compact JSON.
    text: Box<str>,
}

/// What is read of a cached object without parsing it.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// Its namespace and name.
    pub key: ObjKey,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `metadata.labels` (none: empty).
    pub labels: BTreeMap<String, String>,
    /// The uids it is indexed under (see [`owners`]).
    owners: Box<[String]>,
}

impl Cached {
    /// The compact form of `object`.
    pub fn new(mut object: DynamicObject) -> Self {
        Self::of(&mut object)
    }

    /// The compact form of `object`, which is left as it was: its resource
    /// version and labels (kept in the header, not the text) are lent and
    /// put back, so the caller keeps the object without a deep copy.
    pub fn of(object: &mut DynamicObject) -> Self {
        // Owners first: kiln's owner label is one of them.
        let owners = owners(&object.metadata).collect();
        let resource_version = object.metadata.resource_version.take();
        let labels = object.metadata.labels.take();
        let text = compact(&*object).into_boxed_str();
        object
            .metadata
            .resource_version
            .clone_from(&resource_version);
        object.metadata.labels.clone_from(&labels);
        let header = Header {
            key: ObjKey::of(object),
            uid: object.metadata.uid.clone(),
            resource_version,
            labels: labels.unwrap_or_default(),
            owners,
        };
        Self { text, header }
    }

    /// What filters and indexes read.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Its namespace and name.
    pub fn key(&self) -> &ObjKey {
        &self.header.key
    }

    /// The whole object again (what the informer kept of it).
    pub fn decode(&self) -> DynamicObject {
        let mut object: DynamicObject = parse(&self.text).unwrap_or_else(|| DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some(self.header.key.name.clone()),
                namespace: self.header.key.namespace.clone(),
                uid: self.header.uid.clone(),
                ..ObjectMeta::default()
            },
            data: Value::Null,
        });
        object
            .metadata
            .resource_version
            .clone_from(&self.header.resource_version);
        if !self.header.labels.is_empty() {
            object.metadata.labels = Some(self.header.labels.clone());
        }
        object
    }

    /// Whether `other` holds the same thing but for its resource version.
    pub fn same_but_version(&self, other: &Cached) -> bool {
        self.text == other.text
            && self.header.labels == other.header.labels
            && self.header.uid == other.header.uid
    }
}

/// Compact JSON of something that serializes (a `Value`, metadata): cannot
/// fail for these types.
fn compact<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Parses JSON this module wrote. It came from an object serde_json
/// decoded (so within its nesting limit) and parses back; were it ever not
/// to, the failure is logged and `None` returned.
fn parse<T: DeserializeOwned>(text: &str) -> Option<T> {
    serde_json::from_str(text)
        .inspect_err(|error| {
            tracing::error!(%error, "a cached object did not parse back; only its metadata is read");
        })
        .ok()
}

/// The cached objects of one informer, indexed by key and by owner uid.
#[derive(Default)]
pub struct Store {
    objects: HashMap<ObjKey, Arc<Cached>>,
    /// Owner uid → keys of the objects it owns.
    owned: HashMap<String, HashSet<ObjKey>>,
    /// Objects of a re-list in progress, per watch stream.
    relist: HashMap<usize, HashMap<ObjKey, Arc<Cached>>>,
    /// Bytes of JSON text held by `objects`.
    bytes: usize,
}

impl Store {
    /// Caches `obj`; returns what it replaces.
    pub fn insert(&mut self, obj: Arc<Cached>) -> Option<Arc<Cached>> {
        let key = obj.key().clone();
        for owner in &obj.header.owners {
            self.owned
                .entry(owner.clone())
                .or_default()
                .insert(key.clone());
        }
        self.bytes += obj.text.len();
        let old = self.objects.insert(key.clone(), obj);
        if let Some(old) = &old {
            self.bytes -= old.text.len();
            self.unindex(&old.header.owners, &key, false);
        }
        old
    }

    /// Drops the object at `key`; returns it.
    pub fn remove(&mut self, key: &ObjKey) -> Option<Arc<Cached>> {
        let old = self.objects.remove(key)?;
        self.bytes -= old.text.len();
        self.unindex(&old.header.owners, key, true);
        Some(old)
    }

    fn unindex(&mut self, old: &[String], key: &ObjKey, all: bool) {
        let current: &[String] = match self.objects.get(key) {
            Some(o) if !all => &o.header.owners,
            _ => &[],
        };
        for owner in old {
            if current.contains(owner) {
                continue;
            }
            if let Some(set) = self.owned.get_mut(owner) {
                set.remove(key);
                if set.is_empty() {
                    self.owned.remove(owner);
                }
            }
        }
    }

    /// The object at `key`.
    pub fn get(&self, key: &ObjKey) -> Option<&Arc<Cached>> {
        self.objects.get(key)
    }

    /// Every object.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Cached>> {
        self.objects.values()
    }

    /// Every key.
    pub fn keys(&self) -> impl Iterator<Item = &ObjKey> {
        self.objects.keys()
    }

    /// The objects indexed under owner `uid`.
    pub fn owned_by(&self, uid: &str) -> impl Iterator<Item = &Arc<Cached>> {
        self.owned
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|k| self.objects.get(k))
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Bytes of the cached objects' JSON text (their headers not counted).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// A re-list of `stream` begins: what it lists is gathered apart.
    pub fn begin_relist(&mut self, stream: usize) {
        self.relist.insert(stream, HashMap::new());
    }

    /// One object of the re-list of `stream`.
    pub fn relisted(&mut self, stream: usize, obj: Arc<Cached>) {
        self.relist
            .entry(stream)
            .or_default()
            .insert(obj.key().clone(), obj);
    }

    /// The re-list of `stream` is complete: what it listed.
    pub fn end_relist(&mut self, stream: usize) -> HashMap<ObjKey, Arc<Cached>> {
        self.relist.remove(&stream).unwrap_or_default()
    }
}

/// The uids an object is indexed under: its owner references', the primary
/// named by kiln's owner label (an `outside` child, which can have no owner
/// reference), and the primary an orphaned kiln child names.
fn owners(meta: &ObjectMeta) -> impl Iterator<Item = String> + '_ {
    meta.owner_references
        .iter()
        .flatten()
        .map(|r| r.uid.clone())
        .chain(
            meta.labels
                .as_ref()
                .and_then(|l| l.get(crate::render::OWNER_UID_LABEL))
                .cloned(),
        )
        .chain(
            meta.annotations
                .as_ref()
                .and_then(|a| a.get(crate::render::PRIMARY_UID_ANNOTATION))
                .cloned(),
        )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "ns", "uid": "d1", "resourceVersion": "7",
                "labels": {"kiln.dev/rule": "webapp"},
                "ownerReferences": [{"apiVersion": "demo.kiln.dev/v1", "kind": "WebApp", "name": "w", "uid": "u1", "controller": true}],
                "managedFields": [{"manager": "kiln", "operation": "Apply", "subresource": "status",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:ready": {}}}}]
            },
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "app", "image": "x"}]}}},
            "status": {"readyReplicas": 1}
        }))
        .unwrap()
    }

    #[test]
    fn caching_a_borrowed_object_leaves_it_as_it_was_and_caches_the_same() {
        let mut obj = deployment();
        let cached = Cached::of(&mut obj);
        assert_eq!(obj, deployment());
        assert_eq!(cached, Cached::new(deployment()));
    }

    #[test]
    fn an_object_decodes_back_to_what_was_cached() {
        let obj = deployment();
        let cached = Cached::new(obj.clone());
        let back = cached.decode();
        assert_eq!(back.metadata, obj.metadata);
        assert_eq!(back.data, obj.data);
        assert_eq!(back.types, obj.types);
        assert_eq!(cached.header().uid.as_deref(), Some("d1"));
        assert_eq!(cached.header().labels["kiln.dev/rule"], "webapp");
        assert_eq!(
            *cached.key(),
            ObjKey {
                namespace: Some("ns".into()),
                name: "web".into()
            }
        );
    }

    #[test]
    fn only_a_new_resource_version_is_the_same_but_version() {
        let a = Cached::new(deployment());
        let mut moved = deployment();
        moved.metadata.resource_version = Some("8".into());
        assert!(a.same_but_version(&Cached::new(moved.clone())));
        moved.data["status"]["readyReplicas"] = json!(2);
        assert!(!a.same_but_version(&Cached::new(moved)));
        let mut relabelled = deployment();
        relabelled
            .metadata
            .labels
            .get_or_insert_default()
            .insert("x".into(), "y".into());
        assert!(!a.same_but_version(&Cached::new(relabelled)));
    }

    #[test]
    fn the_owner_index_follows_inserts_updates_and_removals() {
        let mut store = Store::default();
        store.insert(Arc::new(Cached::new(deployment())));
        assert_eq!(store.owned_by("u1").count(), 1);
        let bytes = store.bytes();
        assert!(bytes > 0);
        let mut moved = deployment();
        moved.metadata.owner_references.as_mut().unwrap()[0].uid = "u2".into();
        store.insert(Arc::new(Cached::new(moved)));
        assert_eq!(store.owned_by("u1").count(), 0);
        assert_eq!(store.owned_by("u2").count(), 1);
        assert_eq!(store.bytes(), bytes, "one object, of the same size");
        // An `outside` child: kiln's owner label names its primary.
        let mut outside = deployment();
        outside.metadata.owner_references = None;
        outside
            .metadata
            .labels
            .get_or_insert_default()
            .insert(crate::render::OWNER_UID_LABEL.into(), "u3".into());
        store.insert(Arc::new(Cached::new(outside)));
        assert_eq!(store.owned_by("u3").count(), 1);
        assert_eq!(store.owned_by("u2").count(), 0);
        let key = store.keys().next().unwrap().clone();
        store.remove(&key);
        assert_eq!(store.owned_by("u3").count(), 0);
        assert!(store.is_empty());
        assert_eq!(store.bytes(), 0);
    }
}
