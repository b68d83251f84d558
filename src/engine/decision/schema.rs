//! What a primary kind's structural schema lets kiln write to its status.
//! Pure: the CRD comes from the caller.
//!
//! Server-side apply refuses a whole status that holds one field the schema
//! does not declare, so kiln writes only what the schema declares:
//! `observedGeneration` and `conditions` (and, inside each condition, the
//! declared keys) when they are there, and the rule's status fields, which
//! are checked once against the schema before the rule runs: a field the
//! schema lacks refuses the rule instead of silently vanishing.

use serde_json::{Map, Value};

use super::placing::ConditionList;
use crate::rules::Gvk;
use crate::template::{Piece, Tree};

/// The status keys the engine writes.
const ENGINE_KEYS: [&str; 2] = ["observedGeneration", "conditions"];

const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";

/// What kiln does with a kind's status, decided from what the API server
/// serves rather than from the group's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusWrites {
    /// A custom resource with a status subresource: kiln composes and
    /// writes its status.
    Yes,
    /// A custom resource without a status subresource: kiln writes no
    /// status, and says so.
    NoSubresource,
    /// A built-in kind: its status belongs to its own controller.
    Builtin,
}

/// Whether kiln writes the status of `gvk`: `subresource` is whether the
/// API server serves its `/status`, `crd` whether a CustomResourceDefinition
/// defines it. A kind a CRD defines is custom whatever its group (CRDs in
/// `*.k8s.io` groups exist: the Gateway API's, volume snapshots); one no
/// CRD defines is custom only when its group is not Kubernetes' own (an
/// aggregated API).
pub fn status_writes(gvk: &Gvk, subresource: bool, crd: bool) -> StatusWrites {
    match (crd || gvk.is_custom(), subresource) {
        (false, _) => StatusWrites::Builtin,
        (true, true) => StatusWrites::Yes,
        (true, false) => StatusWrites::NoSubresource,
    }
}

/// The schema of a primary's `status`.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusSchema {
    /// The structural schema of `status` (`{}` with preserve-unknown-fields
    /// when anything goes).
    node: Value,
    /// How `conditions` is stored for server-side apply.
    list: ConditionList,
}

/// Why a rule cannot write its status to a kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The CRD does not list the version the rule uses.
    #[error("CustomResourceDefinition {crd} has no version {version}")]
    NoVersion {
        /// The CRD's name.
        crd: String,
        /// The version.
        version: String,
    },
    /// The rule writes status the schema does not declare.
    #[error(
        "the status schema of CustomResourceDefinition {crd} (version {version}) does not declare {}: add them to the CRD's `status` or remove them from the rule",
        .paths.iter().map(|p| format!("`status.{p}`")).collect::<Vec<_>>().join(", ")
    )]
    Undeclared {
        /// The CRD's name.
        crd: String,
        /// The version.
        version: String,
        /// Each undeclared path, dotted (`nodes`, `summary.ready`).
        paths: Vec<String>,
    },
    /// The rule defines the API, and its CRD is not kiln's (any more).
    #[error(
        "CustomResourceDefinition {crd} is not this kiln's (field managers: {managers}): the rule defining it does not run on it"
    )]
    NotKilns {
        /// The CRD's name.
        crd: String,
        /// Its field managers, as `api::provenance::list` names them.
        managers: String,
    },
}

/// Where a key stands in an object schema.
enum Declared<'a> {
    /// Declared, with this schema.
    Yes(&'a Value),
    /// Not declared, but the object keeps unknown fields.
    Open,
    /// Not declared: server-side apply refuses it.
    No,
}

/// The schema of `key` inside the object schema `node`.
fn lookup<'a>(node: &'a Value, key: &str) -> Declared<'a> {
    if let Some(s) = node.get("properties").and_then(|p| p.get(key)) {
        return Declared::Yes(s);
    }
    match node.get("additionalProperties") {
        Some(Value::Bool(true)) => return Declared::Open,
        Some(s @ Value::Object(_)) => return Declared::Yes(s),
        _ => {}
    }
    if node.get(PRESERVE) == Some(&Value::Bool(true)) {
        Declared::Open
    } else {
        Declared::No
    }
}

/// `value` with every key `node` does not declare removed, recursively.
fn prune(value: &Value, node: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter_map(|(k, v)| match lookup(node, k) {
                    Declared::Yes(s) => Some((k.clone(), prune(v, s))),
                    Declared::Open => Some((k.clone(), v.clone())),
                    Declared::No => None,
                })
                .collect(),
        ),
        Value::Array(items) => match node.get("items") {
            Some(s) => Value::Array(items.iter().map(|v| prune(v, s)).collect()),
            None => value.clone(),
        },
        _ => value.clone(),
    }
}

impl StatusSchema {
    /// Anything goes: the schema is not known (not a CRD, or not readable),
    /// or `status` keeps unknown fields.
    pub fn open() -> Self {
        Self {
            node: serde_json::json!({ PRESERVE: true }),
            list: ConditionList::Keyed,
        }
    }

    /// The status schema of `version` in a CustomResourceDefinition (as JSON).
    pub fn from_crd(crd: &Value, version: &str) -> Result<Self, SchemaError> {
        let name = crd["metadata"]["name"].as_str().unwrap_or_default();
        let served = crd["spec"]["versions"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["name"] == version))
            .ok_or_else(|| SchemaError::NoVersion {
                crd: name.to_string(),
                version: version.to_string(),
            })?;
        let Some(root) = served
            .pointer("/schema/openAPIV3Schema")
            .or_else(|| crd.pointer("/spec/validation/openAPIV3Schema"))
        else {
            return Ok(Self::open());
        };
        let node = match lookup(root, "status") {
            Declared::Yes(s) => s.clone(),
            Declared::Open => Self::open().node,
            Declared::No => serde_json::json!({"type": "object"}),
        };
        let list = match lookup(&node, "conditions") {
            Declared::Yes(c) if c["x-kubernetes-list-type"] != "map" => ConditionList::Whole,
            Declared::Open => ConditionList::Whole,
            _ => ConditionList::Keyed,
        };
        Ok(Self { node, list })
    }

    /// How the CRD stores `status.conditions`: a map list keyed by type, or
    /// one atomic field (undeclared lists and kept unknown fields are atomic).
    /// Kinds that are not CRDs key their conditions by type.
    pub fn conditions_list(&self) -> ConditionList {
        self.list
    }

    /// Whether the status declares (or keeps) the top-level key `key`.
    pub fn declares(&self, key: &str) -> bool {
        !matches!(lookup(&self.node, key), Declared::No)
    }

    /// The engine's part of `status` cut to what the schema declares:
    /// `observedGeneration` and `conditions` leave when undeclared, and each
    /// condition keeps only its declared keys. Rule fields stay as they are
    /// (checked by [`check`](Self::check) before the rule runs).
    pub fn writable(&self, status: Value) -> Value {
        let Value::Object(map) = status else {
            return status;
        };
        let out: Map<String, Value> = map
            .into_iter()
            .filter_map(|(k, v)| {
                if !ENGINE_KEYS.contains(&k.as_str()) {
                    return Some((k, v));
                }
                match lookup(&self.node, &k) {
                    Declared::Yes(s) => {
                        let v = prune(&v, s);
                        Some((k, v))
                    }
                    Declared::Open => Some((k, v)),
                    Declared::No => None,
                }
            })
            .collect();
        Value::Object(out)
    }

    /// The paths of the rule's status `fields` (and `conditions`, when the
    /// rule declares conditions of its own) that the schema does not declare:
    /// each field's name, and the literal keys of a literal map under it.
    pub fn undeclared(&self, fields: &[(String, Tree)], rule_conditions: bool) -> Vec<String> {
        let mut out = Vec::new();
        for (name, tree) in fields {
            walk(&self.node, name, tree, name, &mut out);
        }
        if rule_conditions && !self.declares("conditions") {
            out.push("conditions".to_string());
        }
        out
    }

    /// [`undeclared`](Self::undeclared) as an error naming the CRD.
    pub fn check(
        &self,
        crd: &str,
        version: &str,
        fields: &[(String, Tree)],
        rule_conditions: bool,
    ) -> Result<(), SchemaError> {
        let paths = self.undeclared(fields, rule_conditions);
        if paths.is_empty() {
            Ok(())
        } else {
            Err(SchemaError::Undeclared {
                crd: crd.to_string(),
                version: version.to_string(),
                paths,
            })
        }
    }
}

/// Checks `key` (at `path`) under the object schema `node`, and what a
/// literal map under it holds.
fn walk(node: &Value, key: &str, tree: &Tree, path: &str, out: &mut Vec<String>) {
    let schema = match lookup(node, key) {
        Declared::Yes(s) => s,
        Declared::Open => return,
        Declared::No => {
            out.push(path.to_string());
            return;
        }
    };
    match tree {
        Tree::Map(entries) => {
            for (k, sub) in entries {
                if let Piece::Literal(k) = k {
                    walk(schema, k, sub, &format!("{path}.{k}"), out);
                }
            }
        }
        Tree::Value(Value::Object(map)) => {
            for (k, v) in map {
                walk(
                    schema,
                    k,
                    &Tree::Value(v.clone()),
                    &format!("{path}.{k}"),
                    out,
                );
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gvk(group: &str) -> Gvk {
        Gvk {
            group: group.into(),
            version: "v1".into(),
            kind: "Thing".into(),
        }
    }

    #[test]
    fn a_crd_in_a_k8s_io_group_is_custom_and_its_status_written() {
        let gateway = gvk("gateway.networking.k8s.io");
        assert_eq!(status_writes(&gateway, true, true), StatusWrites::Yes);
        assert_eq!(
            status_writes(&gateway, false, true),
            StatusWrites::NoSubresource
        );
    }

    #[test]
    fn a_built_in_kind_is_never_written_and_an_aggregated_api_is() {
        let ingress = gvk("networking.k8s.io");
        assert_eq!(status_writes(&ingress, true, false), StatusWrites::Builtin);
        assert_eq!(status_writes(&gvk(""), true, false), StatusWrites::Builtin);
        assert_eq!(
            status_writes(&gvk("apps"), true, false),
            StatusWrites::Builtin
        );
        let aggregated = gvk("metrics.example.com");
        assert_eq!(status_writes(&aggregated, true, false), StatusWrites::Yes);
    }

    fn crd(status: Option<Value>) -> Value {
        let mut root = json!({"type": "object", "properties": {"spec": {"type": "object"}}});
        if let Some(s) = status {
            root["properties"]["status"] = s;
        }
        json!({
            "metadata": {"name": "things.demo.io"},
            "spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": root}}]},
        })
    }

    fn condition_item() -> Value {
        json!({"type": "object", "properties": {
            "type": {"type": "string"}, "status": {"type": "string"},
            "reason": {"type": "string"}, "message": {"type": "string"},
            "lastTransitionTime": {"type": "string"},
        }})
    }

    fn fields(names: &[(&str, Value)]) -> Vec<(String, Tree)> {
        names
            .iter()
            .map(|(n, v)| ((*n).to_string(), Tree::Value(v.clone())))
            .collect()
    }

    #[test]
    fn what_each_status_schema_declares() {
        let kubebuilder = json!({"type": "object", "properties": {
            "conditions": {"type": "array", "items": condition_item()},
        }});
        let metacontroller = json!({"type": "object", "properties": {
            "nodes": {"type": "array", "items": {"type": "string"}},
        }});
        let cases = [
            // (status schema, observedGeneration, conditions, nodes)
            (Some(kubebuilder), false, true, false),
            (Some(metacontroller), false, false, true),
            (
                Some(json!({"type": "object", PRESERVE: true})),
                true,
                true,
                true,
            ),
            (
                Some(json!({"type": "object", "additionalProperties": true})),
                true,
                true,
                true,
            ),
            (None, false, false, false),
        ];
        for (i, (status, generation, conditions, nodes)) in cases.into_iter().enumerate() {
            let s = StatusSchema::from_crd(&crd(status), "v1").unwrap();
            assert_eq!(s.declares("observedGeneration"), generation, "case {i}");
            assert_eq!(s.declares("conditions"), conditions, "case {i}");
            assert_eq!(s.declares("nodes"), nodes, "case {i}");
        }
    }

    #[test]
    fn a_root_that_keeps_unknown_fields_keeps_any_status() {
        let c = json!({"metadata": {"name": "x.y.z"}, "spec": {"versions": [
            {"name": "v1", "schema": {"openAPIV3Schema": {"type": "object", PRESERVE: true}}},
        ]}});
        assert!(
            StatusSchema::from_crd(&c, "v1")
                .unwrap()
                .declares("anything")
        );
    }

    #[test]
    fn a_version_the_crd_lacks_is_an_error() {
        let e = StatusSchema::from_crd(&crd(None), "v2").unwrap_err();
        assert_eq!(
            e.to_string(),
            "CustomResourceDefinition things.demo.io has no version v2"
        );
    }

    #[test]
    fn the_engine_writes_only_what_is_declared() {
        let status = json!({
            "observedGeneration": 3,
            "conditions": [{"type": "Ready", "status": "True", "reason": "R", "message": "m",
                            "lastTransitionTime": "T", "observedGeneration": 3}],
            "nodes": ["a"],
        });
        let only_nodes = StatusSchema::from_crd(
            &crd(Some(
                json!({"type": "object", "properties": {"nodes": {"type": "array"}}}),
            )),
            "v1",
        )
        .unwrap();
        assert_eq!(only_nodes.writable(status.clone()), json!({"nodes": ["a"]}));

        let conditions_without_generation = StatusSchema::from_crd(
            &crd(Some(json!({"type": "object", "properties": {
                "conditions": {"type": "array", "items": condition_item()},
            }}))),
            "v1",
        )
        .unwrap();
        let w = conditions_without_generation.writable(status.clone());
        assert!(w.get("observedGeneration").is_none());
        assert!(
            w["conditions"][0].get("observedGeneration").is_none(),
            "a condition keeps only its declared keys"
        );
        assert_eq!(w["conditions"][0]["type"], "Ready");
        assert_eq!(w["nodes"], json!(["a"]), "rule fields are checked, not cut");

        assert_eq!(StatusSchema::open().writable(status.clone()), status);
    }

    /// Rule fields, whether the rule declares conditions, the paths undeclared.
    type Case<'a> = (&'a [(&'a str, Value)], bool, &'a [&'a str]);

    #[test]
    fn rule_fields_are_checked_against_the_schema() {
        let s = StatusSchema::from_crd(
            &crd(Some(json!({"type": "object", "properties": {
                "nodes": {"type": "array"},
                "summary": {"type": "object", "properties": {"ready": {"type": "integer"}}},
                "free": {"type": "object", PRESERVE: true},
            }}))),
            "v1",
        )
        .unwrap();
        let cases: [Case<'_>; 6] = [
            (&[("nodes", json!(["a"]))], false, &[]),
            (
                &[("nodes", json!([])), ("url", json!("u"))],
                false,
                &["url"],
            ),
            (&[("summary", json!({"ready": 1}))], false, &[]),
            (
                &[("summary", json!({"ready": 1, "total": 2}))],
                false,
                &["summary.total"],
            ),
            (&[("free", json!({"any": {"thing": 1}}))], false, &[]),
            (&[], true, &["conditions"]),
        ];
        for (i, (given, conditions, expected)) in cases.into_iter().enumerate() {
            assert_eq!(
                s.undeclared(&fields(given), conditions),
                expected,
                "case {i}"
            );
        }
        let e = s
            .check("things.demo.io", "v1", &fields(&[("url", json!(1))]), false)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the status schema of CustomResourceDefinition things.demo.io (version v1) does not declare `status.url`: add them to the CRD's `status` or remove them from the rule"
        );
        assert!(
            StatusSchema::open()
                .undeclared(&fields(&[("url", json!(1))]), true)
                .is_empty()
        );
    }
}
