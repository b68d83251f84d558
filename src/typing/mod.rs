//! Typed children: each child kind's schema (built-in kinds from the
//! table generated from the API server's OpenAPI documents, CRDs from
//! `spec.api`, a test file's `crds:` or the cluster) and the one typing
//! pass validate, render, test, diff and the engine share
//! ([`shape::shape`], called where a rendered child is finished).

use std::sync::Arc;

use serde_json::Value;

pub mod builtin;
pub mod generate;
pub mod immutable;
pub mod node;
pub mod shape;

pub use node::Node;
pub use shape::{Problem, shape};

/// The schema a child kind is typed by.
#[derive(Debug, Clone, Default)]
pub enum Typing {
    /// Its kind's schema.
    Schema(Arc<Node>),
    /// No schema is known for the kind: its children are applied as
    /// rendered (validation says so once).
    #[default]
    Unchecked,
}

impl Typing {
    /// The schema of `group/version/kind`: a built-in kind's, else a CRD's
    /// among `crds`.
    pub fn of(group: &str, version: &str, kind: &str, crds: &[Value]) -> Self {
        if let Some(node) = builtin::kind(group, version, kind) {
            return Self::Schema(node);
        }
        match schema_among(crds, group, version, kind) {
            Some((_, schema)) => Self::Schema(Arc::new(Node::from_openapi(schema))),
            None => Self::Unchecked,
        }
    }

    /// The schema, when known.
    pub fn node(&self) -> Option<&Node> {
        match self {
            Self::Schema(node) => Some(node),
            Self::Unchecked => None,
        }
    }
}

/// The schema of `group/version` `kind` among CRDs given (`--crd`, a
/// test file's `crds:`, the rules' own APIs), with the CRD's name.
pub fn schema_among<'a>(
    crds: &'a [Value],
    group: &str,
    version: &str,
    kind: &str,
) -> Option<(&'a str, &'a Value)> {
    let crd = crds
        .iter()
        .filter(|c| c["kind"] == "CustomResourceDefinition")
        .find(|c| c["spec"]["group"] == group && c["spec"]["names"]["kind"] == kind)?;
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    Some((name, crate::api::version_schema(crd, version)?))
}

#[cfg(test)]
mod tests;
