//! A child as the decision knows it: what the caches, the API server or
//! files found of one of the rule's live children, and the key a rendered
//! child takes. A leaf: the plan and the decisions it is made of (history,
//! re-owning, `replace`, the created-once record, deletion) all use it.

use crate::engine::key::ObjKey;
use crate::render::DesiredChild;
use crate::rules::Gvk;

/// A child of this rule for this primary, as the cache holds it. Its object
/// is in [`crate::render::Inputs::observed`], under its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveChild {
    /// The child's id in the rule (its `kiln.dev/child` label).
    pub id: String,
    /// Its kind.
    pub gvk: Gvk,
    /// Its namespace and name.
    pub key: ObjKey,
    /// Its uid (a delete is conditioned on it).
    pub uid: Option<String>,
    /// Whether it is being deleted already.
    pub deleting: bool,
    /// Whether it was left to outlive its primary (`deletionPolicy:
    /// Orphan`: no owner reference): kiln never deletes it.
    pub orphan: bool,
}

/// The key of a desired child.
pub(crate) fn key_of(child: &DesiredChild) -> ObjKey {
    ObjKey {
        namespace: child.namespace.clone(),
        name: child.name.clone(),
    }
}
