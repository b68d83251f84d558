//! The key every layer of the engine names an object by: a namespace and a
//! name. A leaf module, so the cache, the decision and the runtime share it
//! without importing each other.

use std::fmt;

use kube::ResourceExt;
use kube::api::DynamicObject;

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
