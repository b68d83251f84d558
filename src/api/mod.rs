//! Rules that define their own API: `spec.api` (KRO's SimpleSchema) → the
//! CustomResourceDefinition kiln generates, prints (`kiln crd`) and applies
//! (`kiln run`); the schema checks templates read (`self.spec.<path>`),
//! fills in defaults for `kiln render`, and tells which CRD changes would
//! break stored objects. Pure except two rooms: [`install`] applies the
//! CRDs and `webhook` serves their conversion; everything else makes no API
//! call.
//!
//! ```text
//! spec.api ─compile─▶ Api (CRD JSON) ─▶ refs::check   (templates vs schema)
//!                                     ─▶ defaults::apply (render)
//!                                     ─▶ compat::breaking (old CRD × new CRD)
//! ```

pub mod compat;
pub mod convert;
pub mod crd;
pub mod defaults;
pub mod install;
mod markers;
pub mod provenance;
pub mod refs;
pub mod roundtrip;
pub mod rule;
pub mod served;
pub mod served_at;
mod simple;
pub mod spec;
pub mod webhook;

use serde_json::Value;

use crate::yaml::Step;

pub use crd::{Api, compile};

/// A problem in `spec.api`, at a path inside the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SchemaError {
    /// Where, inside the rule (e.g. `spec.api.versions[0].schema.spec.title`).
    pub at: Vec<Step>,
    /// What is wrong.
    pub message: String,
}

/// The `openAPIV3Schema` of `version` in a CRD.
pub fn version_schema<'a>(crd: &'a Value, version: &str) -> Option<&'a Value> {
    crd["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == version)
        .map(|v| &v["schema"]["openAPIV3Schema"])
        .filter(|s| s.is_object())
}

/// `` `a`, `b`, `c` `` (names in a message).
fn quoted<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    items
        .into_iter()
        .map(|i| format!("`{}`", i.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}
