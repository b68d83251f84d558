//! `spec.api` as written: serde types that mirror the YAML. The schemas are
//! kept as YAML trees in KRO's SimpleSchema syntax; [`super::compile`]
//! turns them into a CustomResourceDefinition.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// An API the rule defines: one kind, its names and its versions.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawApi {
    /// The API group, a DNS subdomain with a dot, e.g. `sites.example.com`.
    pub group: String,
    /// The kind, CamelCase, e.g. `StaticSite`.
    pub kind: String,
    /// The resource name (default: the kind in lower case, in the plural).
    #[serde(default)]
    pub plural: Option<String>,
    /// `Namespaced` (default) or `Cluster`.
    #[serde(default)]
    pub scope: ApiScope,
    /// Short names for kubectl, e.g. `[site]`.
    #[serde(default)]
    pub short_names: Vec<String>,
    /// Categories for kubectl, e.g. `[all]`.
    #[serde(default)]
    pub categories: Vec<String>,
    /// The versions; exactly one is the storage version.
    pub versions: Vec<RawApiVersion>,
    /// Let `kiln run` apply a new CRD that would break objects stored under
    /// the old one (a field removed, a type changed, a required field added
    /// without a default, a bound tightened, a version removed). Default
    /// `false`: such a change is refused and the last good rules keep running.
    #[serde(default)]
    pub allow_breaking_changes: bool,
    /// Take over a CustomResourceDefinition of this name that kiln did not
    /// create (another operator's, another kiln's, or one applied by hand).
    /// Default `false`: kiln writes no CRD it did not create, and such a rule
    /// is refused with the CRD's field managers named. Adopted only when the
    /// new CRD breaks no object stored under the existing one
    /// (`allowBreakingChanges` does not apply); from then on the CRD is
    /// kiln's. Kiln's own CRDs (`rules.kiln.dev`) are never adopted.
    #[serde(default)]
    pub adopt: bool,
    /// CEL rules on the whole object (`self` is the object: `self.spec`,
    /// `self.metadata.name`; `oldSelf` the object before an update), checked
    /// by the API server on every write of every version. One that reads only
    /// `self.spec.…` is placed on `spec`, so an update that leaves the spec
    /// alone is not checked again (the API server's ratcheting).
    #[serde(default)]
    pub validations: Vec<RawObjectValidation>,
}

/// A CEL rule on the whole object, placed into the CRD's
/// `x-kubernetes-validations`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawObjectValidation {
    /// The CEL expression, true when the object is valid.
    pub expression: String,
    /// What the API server answers when it is false (one line).
    pub message: String,
    /// A CEL expression giving the message instead (a string); `message`
    /// is answered when it fails.
    #[serde(default)]
    pub message_expression: Option<String>,
    /// `FieldValueInvalid` (the API server's default), `FieldValueForbidden`,
    /// `FieldValueRequired` or `FieldValueDuplicate`.
    #[serde(default)]
    pub reason: Option<String>,
    /// The field the refusal names, from the object's root, e.g.
    /// `.spec.schedule`.
    #[serde(default)]
    pub field_path: Option<String>,
}

/// Whether the kind's objects live in namespaces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum ApiScope {
    /// Each object is in a namespace.
    #[default]
    Namespaced,
    /// Objects are in no namespace.
    Cluster,
}

impl ApiScope {
    /// As a CRD writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Namespaced => "Namespaced",
            Self::Cluster => "Cluster",
        }
    }
}

/// One version of the API.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawApiVersion {
    /// `v1`, `v1alpha1`, `v2beta3`...
    pub name: String,
    /// Whether the API server serves it (default `true`).
    #[serde(default = "yes")]
    pub served: bool,
    /// Whether objects are stored in it (default: `true` when it is the
    /// only version).
    #[serde(default)]
    pub storage: Option<bool>,
    /// Its schema.
    pub schema: RawApiSchema,
    /// How an object of this version becomes the storage version and back
    /// (every version but the storage one has it).
    #[serde(default)]
    pub conversion: Option<RawConversion>,
    /// Objects of this version (their `spec`, and `status` if any), checked
    /// by `kiln validate` to survive a round trip through the storage version.
    #[serde(default)]
    #[schemars(with = "Vec<BTreeMap<String, Value>>")]
    pub examples: Vec<Value>,
}

/// Two templates converting an object of one version to the storage version
/// and back. Each renders the object's fields but `apiVersion`, `kind` and
/// `metadata` (which pass through unchanged): `spec`, and `status` (when not
/// rendered, it passes through as it is). `self` is the object in the
/// version converted from.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawConversion {
    /// This version → the storage version (`self` is at this version).
    #[schemars(with = "BTreeMap<String, Value>")]
    pub to_storage: Value,
    /// The storage version → this version (`self` is at the storage version).
    #[schemars(with = "BTreeMap<String, Value>")]
    pub from_storage: Value,
}

fn yes() -> bool {
    true
}

/// A version's schema, in SimpleSchema syntax (`name: string | required=true`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawApiSchema {
    /// The fields of `spec`: `field: type | markers`, or a mapping for a
    /// nested object. Types: `string`, `integer`, `boolean`, `float`,
    /// `object`, `[]T`, `map[string]T` and names from `types`. Markers:
    /// `required`, `default`, `description`, `enum`, `minimum`, `maximum`,
    /// `pattern`, `minLength`, `maxLength`, `minItems`, `maxItems`,
    /// `uniqueItems`, `immutable`, `validation`, `listType`, `listMapKey`.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, Value>")]
    pub spec: Map<String, Value>,
    /// The fields of `status` (default: generated from `spec.status`: its
    /// fields, `conditions` and `observedGeneration`).
    #[serde(default)]
    #[schemars(with = "Option<BTreeMap<String, Value>>")]
    pub status: Option<Map<String, Value>>,
    /// Named types the fields may use.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, Value>")]
    pub types: Map<String, Value>,
    /// CEL rules on `spec` (`self` is the spec), each refused with its message.
    #[serde(default)]
    pub validation: Vec<RawValidation>,
    /// Columns `kubectl get` shows (default: `Ready` and `Age`).
    #[serde(default)]
    pub additional_printer_columns: Option<Vec<RawPrinterColumn>>,
}

/// A CEL rule the API server checks on every write.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawValidation {
    /// The CEL expression, true when the object is valid (`self` is the spec;
    /// `oldSelf` the spec before an update).
    pub expression: String,
    /// What the API server answers when it is false.
    pub message: String,
}

/// A column of `kubectl get`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawPrinterColumn {
    /// The column's header.
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    #[serde(rename = "type")]
    pub type_: String,
    /// A JSONPath into the object, e.g. `.spec.title`.
    pub json_path: String,
    /// What the column shows.
    #[serde(default)]
    pub description: Option<String>,
    /// 0 (default) shows it always, more only with `-o wide`.
    #[serde(default)]
    pub priority: Option<i32>,
}
