//! How a rule's `spec.api` meets the rest of the rule: the primary it
//! implies, and the schema its templates are checked against.

use serde_json::Value;

use super::spec::RawApi;
use std::sync::Arc;

use crate::rules::Rule;
use crate::rules::spec::{RawFor, RawRule};

/// The version objects are stored in, as written (none when the versions
/// do not name exactly one; compiling the API reports that).
pub fn storage_version(api: &RawApi) -> Option<&str> {
    let single = api.versions.len() == 1;
    let mut storage = api.versions.iter().filter(|v| v.storage.unwrap_or(single));
    match (storage.next(), storage.next()) {
        (Some(v), None) => Some(&v.name),
        _ => None,
    }
}

/// `spec.for` as the API implies it: its kind at its storage version.
pub fn implied_for(api: &RawApi) -> RawFor {
    RawFor {
        api_version: format!("{}/{}", api.group, storage_version(api).unwrap_or("v1")),
        kind: api.kind.clone(),
        namespaces: Vec::new(),
        exclude_namespaces: Vec::new(),
        selector: None,
        namespace_selector: None,
        read_only: false,
        take_existing: true,
    }
}

/// Why a `spec.for` written next to `spec.api` does not name the API's kind.
pub fn for_mismatch(api: &RawApi, for_: &RawFor) -> Option<String> {
    let versions: Vec<&str> = api.versions.iter().map(|v| v.name.as_str()).collect();
    let ok = for_.kind == api.kind
        && for_
            .api_version
            .split_once('/')
            .is_some_and(|(g, v)| g == api.group && versions.contains(&v));
    (!ok).then(|| {
        format!(
            "spec.for ({} {}) is not the kind spec.api defines ({} in {}, versions {}); leave spec.for out to take it from spec.api",
            for_.api_version,
            for_.kind,
            api.kind,
            api.group,
            versions.join(", ")
        )
    })
}

/// The schema of `group/version` `kind` among CRDs given to check rules
/// against (`kiln validate --crd FILE`), with the CRD's name.
pub use crate::typing::schema_among;

/// Why `rule` may not define its API: a rule before it defines the same CRD.
pub fn defined_twice(before: &[Arc<Rule>], rule: &Rule) -> Option<String> {
    let name = rule.api.as_ref()?.name();
    let other = before
        .iter()
        .find(|r| r.api.as_ref().is_some_and(|a| a.name() == name))?;
    Some(format!(
        "CustomResourceDefinition {name} is already defined by rule `{}`: one rule defines an API (others may use it with spec.for)",
        other.name
    ))
}

/// The CRD a rule defines, when its `spec.api` compiles (its problems are
/// reported with the rule).
pub fn defined_crd(rule: &RawRule) -> Option<Value> {
    let api = rule.spec.api.as_ref()?;
    let fields: Vec<String> = rule
        .spec
        .status
        .iter()
        .flat_map(|s| s.fields.keys().cloned())
        .collect();
    super::compile(api, &rule.metadata.name, &fields, &[])
        .ok()
        .map(|a| a.crd)
}
