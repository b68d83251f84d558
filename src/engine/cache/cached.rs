//! One cached object in a compact form.
//!
//! A `serde_json::Value` tree with `preserve_order` holds an `IndexMap` per
//! JSON object, and a typed `ObjectMeta` a map node per label set and a
//! string per field: about 8 KiB per object for 2 KiB of JSON (measured
//! with heaptrack on the bench). A [`Cached`] object is instead two
//! allocations: a fixed record (uid and resource version as numbers when
//! they are the usual UUID and decimal, the owner uids it is indexed
//! under) and one string holding its namespace, name and labels (what
//! filters and indexes read, without parsing) followed by the rest of the
//! object as compact JSON, parsed only when the object is read
//! ([`Cached::decode`], which puts the fields kept apart back). At the
//! bench's N=3000, the headers of the earlier form (a `String` per field, a
//! `BTreeMap` node per label set, boxed owner uids) cost about 1 KiB per
//! object on top of its JSON. An owned object adds one slice holding its
//! owner references and the uids it is indexed under together (a child's
//! reference and owner label name the same uid, held once), and the record
//! with its `Arc` fits 128 bytes: in jemalloc's size classes a child took
//! 160 + 32 + 64 bytes for record, owner uids and owner references, and
//! takes 128 + 64.
//!
//! Pure data, no API calls.

use std::collections::BTreeMap;
use std::fmt;

use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;
use kube::core::{ObjectMeta, TypeMeta};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::engine::key::ObjKey;

/// One cached object: namespace, name, labels, uid and resource version
/// apart (read without parsing), the rest as compact JSON.
#[derive(Clone, PartialEq)]
pub struct Cached {
    /// Namespace, name, labels ([`Labels`]' encoding), then the JSON text.
    packed: Box<str>,
    /// Where in `packed` the namespace ends, the name, the labels.
    ends: [u32; 3],
    /// Whether it has a namespace (an empty one is still one).
    namespaced: bool,
    /// Whether `metadata.name` was set (the key's name is `generateName`
    /// otherwise, left in the text).
    named: bool,
    /// Whether `metadata.ownerReferences` was set (an empty list is still one).
    referenced: bool,
    /// `metadata.uid`.
    uid: Option<Uid>,
    /// `metadata.resourceVersion`.
    resource_version: Option<Version>,
    /// `metadata.ownerReferences` in order, then the other uids it is
    /// indexed under (see [`owners`]): one allocation for both, the uid of
    /// a reference not held twice.
    owners: Box<[Owner]>,
    /// `apiVersion` and `kind`, shared with every object of the kind.
    types: Option<Arc<TypeMeta>>,
}

impl fmt::Debug for Cached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cached")
            .field("key", &self.key())
            .field("uid", &self.uid)
            .field("resource_version", &self.resource_version)
            .field("labels", &self.labels())
            .field("owners", &self.owners().collect::<Vec<_>>())
            .field("text", &self.text())
            .finish()
    }
}

impl Cached {
    /// The compact form of `object`.
    pub fn new(mut object: DynamicObject) -> Self {
        Self::of(&mut object)
    }

    /// The compact form of `object`, which is left as it was: the fields
    /// kept apart from the text are lent and put back, so the caller keeps
    /// the object without a deep copy.
    pub fn of(object: &mut DynamicObject) -> Self {
        // Owners first: kiln's owner label is one of them.
        let owners = owners(&object.metadata);
        let types = object.types.take();
        let meta = &mut object.metadata;
        let lent = Lent {
            types,
            owner_references: meta.owner_references.take(),
            name: meta.name.take(),
            namespace: meta.namespace.take(),
            uid: meta.uid.take(),
            resource_version: meta.resource_version.take(),
            labels: meta.labels.take(),
        };
        // The key's name is `generateName` for an object without a name
        // (as `ObjKey::of` has it), left in the text.
        let generated = meta.generate_name.take();
        let name = lent
            .name
            .as_deref()
            .or(generated.as_deref())
            .unwrap_or_default();
        let namespace = lent.namespace.as_deref().unwrap_or_default();
        let labels = lent.labels.as_ref();
        meta.generate_name.clone_from(&generated);
        let text = compact(&*object);
        let mut packed = String::with_capacity(
            namespace.len() + name.len() + labels.map_or(0, Labels::encoded_len) + text.len(),
        );
        packed.push_str(namespace);
        let namespace_end = offset(&packed);
        packed.push_str(name);
        let name_end = offset(&packed);
        if let Some(labels) = labels {
            Labels::encode(labels, &mut packed);
        }
        let labels_end = offset(&packed);
        packed.push_str(&text);
        let cached = Self {
            packed: packed.into_boxed_str(),
            ends: [namespace_end, name_end, labels_end],
            namespaced: lent.namespace.is_some(),
            named: lent.name.is_some(),
            referenced: lent.owner_references.is_some(),
            uid: lent.uid.as_deref().map(Uid::new),
            resource_version: lent.resource_version.as_deref().map(Version::new),
            owners,
            types: lent.types.as_ref().map(shared),
        };
        lent.put_back(object);
        cached
    }

    /// The part of `packed` from the end of part `from` (its start for
    /// none) to the end of part `to` (its end for none).
    fn part(&self, from: Option<usize>, to: Option<usize>) -> &str {
        let end = |i: Option<usize>, none: usize| {
            i.and_then(|i| self.ends.get(i))
                .map_or(none, |e| *e as usize)
        };
        let range = end(from, 0)..end(to, self.packed.len());
        self.packed.get(range).unwrap_or_default()
    }

    /// Its namespace (`None`: cluster-scoped).
    pub fn namespace(&self) -> Option<&str> {
        self.namespaced.then(|| self.part(None, Some(0)))
    }

    /// Its name (`generateName` when it has none).
    pub fn name(&self) -> &str {
        self.part(Some(0), Some(1))
    }

    /// Its namespace and name.
    pub fn key(&self) -> ObjKey {
        ObjKey {
            namespace: self.namespace().map(str::to_string),
            name: self.name().to_string(),
        }
    }

    /// Whether its key is `namespace`/`name`.
    pub fn is(&self, namespace: Option<&str>, name: &str) -> bool {
        self.name() == name && self.namespace() == namespace
    }

    /// `metadata.labels` (none: empty).
    pub fn labels(&self) -> Labels<'_> {
        Labels(self.part(Some(1), Some(2)))
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> Option<&Uid> {
        self.uid.as_ref()
    }

    /// The uids it is indexed under, each once: its owner references',
    /// the primary named by kiln's owner label or by an orphaned child's
    /// annotation.
    pub fn owners(&self) -> impl Iterator<Item = &Uid> + '_ {
        self.owners_at().map(|(_, uid)| uid)
    }

    /// [`owners`](Self::owners), each with where it sits: what
    /// [`owner_at`](Self::owner_at) takes.
    pub fn owners_at(&self) -> impl Iterator<Item = (u32, &Uid)> + '_ {
        self.owners
            .iter()
            .enumerate()
            .filter(|(i, o)| !self.owners[..*i].iter().any(|p| p.uid == o.uid))
            .map(|(i, o)| (u32::try_from(i).unwrap_or(u32::MAX), &o.uid))
    }

    /// The owner uid at `at` (from [`owners_at`](Self::owners_at)).
    pub fn owner_at(&self, at: u32) -> Option<&Uid> {
        self.owners.get(at as usize).map(|o| &o.uid)
    }

    /// Whether `other` has the same resource version.
    pub fn same_version(&self, other: &Cached) -> bool {
        self.resource_version == other.resource_version
    }

    /// The JSON text (the object without the fields kept apart).
    fn text(&self) -> &str {
        self.part(Some(2), None)
    }

    /// Bytes held for the object's strings (its JSON text, namespace, name
    /// and labels).
    pub fn bytes(&self) -> usize {
        self.packed.len()
    }

    /// The whole object again (what the informer kept of it).
    pub fn decode(&self) -> DynamicObject {
        let mut object: DynamicObject = parse(self.text()).unwrap_or_else(|| DynamicObject {
            types: None,
            metadata: ObjectMeta::default(),
            data: Value::Null,
        });
        object.types = self.types.as_deref().cloned();
        let meta = &mut object.metadata;
        meta.owner_references = self.referenced.then(|| {
            self.owners
                .iter()
                .filter_map(|o| o.reference.as_ref().map(|r| r.to_reference(&o.uid)))
                .collect()
        });
        if self.named {
            meta.name = Some(self.name().to_string());
        }
        meta.namespace = self.namespace().map(str::to_string);
        meta.uid = self.uid.as_ref().map(Uid::to_string);
        meta.resource_version = self.resource_version.as_ref().map(Version::to_string);
        let labels = self.labels();
        if !labels.is_empty() {
            meta.labels = Some(labels.to_map());
        }
        object
    }

    /// The whole object again as JSON: what `serde_json::to_value` gives of
    /// [`decode`](Self::decode), key order included, without going
    /// through a `DynamicObject` (whose flattened fields are slow to
    /// deserialize). For the reads that want JSON: live children, related
    /// objects.
    pub fn to_value(&self) -> Value {
        let Some(Value::Object(mut rest)) = parse::<Value>(self.text()) else {
            return serde_json::to_value(self.decode()).unwrap_or(Value::Null);
        };
        let Some(Value::Object(mut meta)) = rest.shift_remove("metadata") else {
            return serde_json::to_value(self.decode()).unwrap_or(Value::Null);
        };
        if self.referenced {
            let references: Vec<Value> = self
                .owners
                .iter()
                .filter_map(|o| o.reference.as_ref().map(|r| r.to_reference(&o.uid)))
                .filter_map(|r| serde_json::to_value(r).ok())
                .collect();
            meta.insert("ownerReferences".into(), Value::Array(references));
        }
        if self.named {
            meta.insert("name".into(), self.name().into());
        }
        if let Some(namespace) = self.namespace() {
            meta.insert("namespace".into(), namespace.into());
        }
        if let Some(uid) = &self.uid {
            meta.insert("uid".into(), uid.to_string().into());
        }
        if let Some(version) = &self.resource_version {
            meta.insert("resourceVersion".into(), version.to_string().into());
        }
        let labels = self.labels();
        if !labels.is_empty() {
            let labels = labels.iter().map(|(k, v)| (k.to_string(), v.into()));
            meta.insert("labels".into(), Value::Object(labels.collect()));
        }
        // `ObjectMeta` serializes its fields in name order.
        meta.sort_keys();
        let mut object = serde_json::Map::with_capacity(rest.len() + 3);
        if let Some(types) = &self.types {
            object.insert("apiVersion".into(), types.api_version.clone().into());
            object.insert("kind".into(), types.kind.clone().into());
        }
        object.insert("metadata".into(), Value::Object(meta));
        object.extend(rest);
        Value::Object(object)
    }

    /// Whether its `metadata.resourceVersion` is `version`.
    pub fn is_version(&self, version: &str) -> bool {
        self.resource_version.as_ref() == Some(&Version::new(version))
    }

    /// Whether `other` holds the same thing but for its resource version.
    pub fn same_but_version(&self, other: &Cached) -> bool {
        self.packed == other.packed
            && self.ends == other.ends
            && self.namespaced == other.namespaced
            && self.named == other.named
            && self.referenced == other.referenced
            && self.uid == other.uid
            && self.types == other.types
            && self.owners == other.owners
    }
}

/// The fields of an object's metadata kept apart from its text, taken out
/// while the rest is written as JSON.
struct Lent {
    types: Option<TypeMeta>,
    owner_references: Option<Vec<OwnerReference>>,
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
}

impl Lent {
    fn put_back(self, object: &mut DynamicObject) {
        object.types = self.types;
        let meta = &mut object.metadata;
        meta.owner_references = self.owner_references;
        meta.name = self.name;
        meta.namespace = self.namespace;
        meta.uid = self.uid;
        meta.resource_version = self.resource_version;
        meta.labels = self.labels;
    }
}

/// A uid an object is indexed under, with the rest of the owner reference
/// it comes from (none: kiln's owner label or an orphan's annotation).
#[derive(Clone, PartialEq)]
struct Owner {
    uid: Uid,
    reference: Option<OwnerRef>,
}

/// An owner reference but for its uid, its `apiVersion` and `kind` shared.
#[derive(Clone, PartialEq)]
struct OwnerRef {
    types: Arc<TypeMeta>,
    name: Box<str>,
    controller: Option<bool>,
    block_owner_deletion: Option<bool>,
}

impl Owner {
    /// The owner a reference names, the reference with it.
    fn referenced_by(r: &OwnerReference) -> Self {
        Self {
            uid: Uid::new(&r.uid),
            reference: Some(OwnerRef {
                types: shared(&TypeMeta {
                    api_version: r.api_version.clone(),
                    kind: r.kind.clone(),
                }),
                name: r.name.as_str().into(),
                controller: r.controller,
                block_owner_deletion: r.block_owner_deletion,
            }),
        }
    }
}

impl OwnerRef {
    fn to_reference(&self, uid: &Uid) -> OwnerReference {
        OwnerReference {
            api_version: self.types.api_version.clone(),
            kind: self.types.kind.clone(),
            name: self.name.to_string(),
            uid: uid.to_string(),
            controller: self.controller,
            block_owner_deletion: self.block_owner_deletion,
        }
    }
}

/// `types` shared: one `Arc` per `apiVersion` and `kind` in use (the
/// kinds kiln caches and their owners' kinds), dropped from the set once
/// no cached object holds it (checked whenever the set has doubled).
fn shared(types: &TypeMeta) -> Arc<TypeMeta> {
    static SHARED: LazyLock<Mutex<(HashSet<Arc<TypeMeta>>, usize)>> = LazyLock::new(Mutex::default);
    let mut guard = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    let (set, purged_at) = &mut *guard;
    if let Some(found) = set.get(types) {
        return found.clone();
    }
    if set.len() >= 2 * (*purged_at).max(16) {
        set.retain(|t| Arc::strong_count(t) > 1);
        *purged_at = set.len();
    }
    let new = Arc::new(types.clone());
    set.insert(new.clone());
    new
}

/// Where `packed` ends now, as an offset (objects are far below 4 GiB: the
/// API server takes requests of a few MiB).
fn offset(packed: &str) -> u32 {
    u32::try_from(packed.len()).unwrap_or(u32::MAX)
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

/// Its owner references (each in full, in order), then the primary kiln's
/// mark names (`ownership::read`) unless a reference has it: an `outside`
/// child, which can have no owner reference, or an orphaned child.
fn owners(meta: &ObjectMeta) -> Box<[Owner]> {
    let mut owners: Vec<Owner> = meta
        .owner_references
        .iter()
        .flatten()
        .map(Owner::referenced_by)
        .collect();
    if let Some(mark) = crate::ownership::read(meta) {
        let uid = Uid::new(&mark.uid);
        if !owners.iter().any(|o| o.uid == uid) {
            owners.push(Owner {
                uid,
                reference: None,
            });
        }
    }
    owners.into_boxed_slice()
}

/// An object's uid: 16 bytes when it is a UUID as the API server writes
/// them (lowercase, hyphenated), its text otherwise.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Uid {
    /// A canonical UUID.
    Uuid([u8; 16]),
    /// Anything else, as it was.
    Other(Box<str>),
}

impl Uid {
    /// The uid `text`.
    pub fn new(text: &str) -> Self {
        parse_uuid(text).map_or_else(|| Self::Other(text.into()), Self::Uuid)
    }
}

/// The 16 bytes of a lowercase hyphenated UUID (8-4-4-4-12 hex digits);
/// `None` for anything else, which then keeps its text (so every uid
/// prints back exactly as it came).
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let text = text.as_bytes();
    if text.len() != 36 {
        return None;
    }
    let mut bytes = [0u8; 16];
    let mut digits = text
        .iter()
        .enumerate()
        .filter(|(i, _)| !matches!(i, 8 | 13 | 18 | 23));
    if [8, 13, 18, 23].iter().any(|i| text[*i] != b'-') {
        return None;
    }
    for byte in &mut bytes {
        let (Some((_, high)), Some((_, low))) = (digits.next(), digits.next()) else {
            return None;
        };
        *byte = hex(*high)? << 4 | hex(*low)?;
    }
    Some(bytes)
}

/// A lowercase hex digit's value.
fn hex(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Other(text) => f.write_str(text),
            Self::Uuid(bytes) => {
                for (i, byte) in bytes.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Debug for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

/// A resource version: a number when it is a decimal one (etcd's
/// revisions are), its text otherwise (it is opaque to clients).
#[derive(Clone, PartialEq, Eq)]
enum Version {
    Number(u64),
    Other(Box<str>),
}

impl Version {
    fn new(text: &str) -> Self {
        let canonical = !text.is_empty()
            && text.bytes().all(|b| b.is_ascii_digit())
            && (text == "0" || !text.starts_with('0'));
        match text.parse() {
            Ok(n) if canonical => Self::Number(n),
            _ => Self::Other(text.into()),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::Other(text) => f.write_str(text),
        }
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

/// A cached object's labels, read in place: each key and value is written
/// as its length in bytes, `:`, then the text (sorted by key, as a
/// `BTreeMap` gives them), so any text at all reads back as it was.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Labels<'a>(&'a str);

impl<'a> Labels<'a> {
    fn encoded_len(labels: &BTreeMap<String, String>) -> usize {
        let one = |text: &str| decimal_digits(text.len()) + 1 + text.len();
        labels.iter().map(|(k, v)| one(k) + one(v)).sum()
    }

    fn encode(labels: &BTreeMap<String, String>, out: &mut String) {
        use std::fmt::Write;
        for text in labels.iter().flat_map(|(k, v)| [k, v]) {
            let _ = write!(out, "{}:{text}", text.len());
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every label, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let mut rest = self.0;
        let mut next = move || {
            let (len, after) = rest.split_once(':')?;
            let text = after.get(..len.parse().ok()?)?;
            rest = &after[text.len()..];
            Some(text)
        };
        std::iter::from_fn(move || Some((next()?, next()?)))
    }

    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The labels as a map.
    pub fn to_map(self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// How many digits `n` has in decimal.
fn decimal_digits(mut n: usize) -> usize {
    let mut digits = 1;
    while n >= 10 {
        n /= 10;
        digits += 1;
    }
    digits
}

impl fmt::Debug for Labels<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl crate::rules::LabelSource for Labels<'_> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

#[cfg(test)]
mod tests;
