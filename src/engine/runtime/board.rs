//! Which rules select each primary, and each rule's latest part of its
//! status, so that rules sharing an object compose one status (see
//! `status.rs`) instead of overwriting each other's.
//!
//! Parts are kept only for kinds that more than one rule takes as primary:
//! with one rule, its part is the whole status and nothing needs keeping.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kube::ResourceExt;
use kube::api::DynamicObject;

use crate::engine::decision::existing::Since;
use crate::engine::decision::status::Part;
use crate::engine::key::ObjKey;
use crate::rules::{Gvk, Rule};

type Object = (Gvk, ObjKey);

#[derive(Default)]
struct Inner {
    /// Rules running, per primary kind.
    rules: HashMap<Gvk, Vec<Arc<Rule>>>,
    /// Rule name → the instant it takes primaries from
    /// (`takeExisting: false`: since.rs).
    since: HashMap<String, Since>,
    /// Rule name → its part, per object shared by several rules.
    parts: HashMap<Object, BTreeMap<String, Part>>,
    /// Serialises status writes to one object shared by several rules.
    locks: HashMap<Object, Arc<tokio::sync::Mutex<()>>>,
}

/// Every rule's part of every shared primary's status.
#[derive(Default)]
pub struct Board {
    inner: Mutex<Inner>,
}

impl Board {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A rule starts taking its primary kind, those created after `since`
    /// only when given.
    pub fn register(&self, rule: &Arc<Rule>, since: Option<Since>) {
        let mut inner = self.lock();
        match since {
            Some(at) => inner.since.insert(rule.name.clone(), at),
            None => inner.since.remove(&rule.name),
        };
        let rules = inner.rules.entry(rule.primary.gvk.clone()).or_default();
        rules.retain(|r| r.name != rule.name);
        rules.push(rule.clone());
        rules.sort_by(|a, b| a.name.cmp(&b.name));
    }

    /// A rule stops: its parts go with it.
    pub fn unregister(&self, rule: &Rule) {
        let mut inner = self.lock();
        let gvk = &rule.primary.gvk;
        if let Some(rules) = inner.rules.get_mut(gvk) {
            rules.retain(|r| !std::ptr::eq(Arc::as_ptr(r), rule));
        }
        // A version swapped in under the same name keeps its own.
        let running = inner.rules.values().flatten().any(|r| r.name == rule.name);
        if !running {
            inner.since.remove(&rule.name);
        }
        inner.parts.retain(|(g, _), parts| {
            if g == gvk {
                parts.remove(&rule.name);
            }
            !parts.is_empty()
        });
    }

    /// The rules running that select `obj`, by name.
    pub fn selecting(&self, gvk: &Gvk, obj: &DynamicObject) -> Vec<Arc<Rule>> {
        let namespace = obj.namespace();
        let created = obj.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let inner = self.lock();
        let uid = obj.metadata.uid.as_deref().unwrap_or_default();
        let since = |r: &Rule| inner.since.get(&r.name);
        inner
            .rules
            .get(gvk)
            .map(|rules| {
                rules
                    .iter()
                    .filter(|r| r.primary.selects(namespace.as_deref(), obj.labels()))
                    .filter(|r| crate::engine::decision::existing::takes(since(r), created, uid))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Records `rule`'s part for an object, and returns every part known for it.
    pub fn put(&self, gvk: &Gvk, key: &ObjKey, rule: &str, part: &Part) -> BTreeMap<String, Part> {
        let mut inner = self.lock();
        let parts = inner.parts.entry((gvk.clone(), key.clone())).or_default();
        parts.insert(rule.to_string(), part.clone());
        parts.clone()
    }

    /// The lock that serialises status writes to one shared object.
    pub fn writer(&self, gvk: &Gvk, key: &ObjKey) -> Arc<tokio::sync::Mutex<()>> {
        self.lock()
            .locks
            .entry((gvk.clone(), key.clone()))
            .or_default()
            .clone()
    }

    /// The object was deleted.
    pub fn forget(&self, gvk: &Gvk, key: &ObjKey) {
        let mut inner = self.lock();
        let object = (gvk.clone(), key.clone());
        inner.parts.remove(&object);
        inner.locks.remove(&object);
    }
}
