//! `spec.api` → the CustomResourceDefinition: names checked, each version's
//! SimpleSchema compiled, the status schema generated from what the rule
//! writes, printer columns (`Ready` and `Age` by default).

use serde_json::{Map, Value, json};

use std::sync::Arc;

use super::SchemaError;
use super::convert::Conversions;
use super::simple::{Compiler, Types};
use super::spec::{RawApi, RawApiSchema, RawApiVersion};
use crate::rules::Gvk;
use crate::rules::names::{dns_label, dns_subdomain, is_version};
use crate::yaml::Step;

/// The annotation on a generated CRD naming the rule that defines it.
pub const RULE_ANNOTATION: &str = "kiln.dev/rule";

/// An API a rule defines, compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct Api {
    /// The CustomResourceDefinition, as `kiln crd` prints it and `kiln run` applies it.
    pub crd: Value,
    /// The API group.
    pub group: String,
    /// The kind.
    pub kind: String,
    /// The resource name.
    pub plural: String,
    /// The version objects are stored in (the rule's primary version).
    pub storage_version: String,
    /// Whether a CRD change that breaks stored objects may be applied.
    pub allow_breaking_changes: bool,
    /// Whether a CRD of this name that kiln did not create may be taken over.
    pub adopt: bool,
    /// How objects convert between its versions (when it has several).
    pub conversions: Option<Arc<Conversions>>,
}

impl Api {
    /// The CRD's name, `<plural>.<group>`.
    pub fn name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }

    /// The `openAPIV3Schema` of a version.
    pub fn schema(&self, version: &str) -> Option<&Value> {
        super::version_schema(&self.crd, version)
    }

    /// Whether its CRD carries CEL rules (`x-kubernetes-validations`, from
    /// `validations`, a schema's `validation` or an `immutable` marker),
    /// which only the API server evaluates.
    pub fn has_cel_rules(&self) -> bool {
        fn any(v: &Value) -> bool {
            match v {
                Value::Object(o) => o
                    .iter()
                    .any(|(k, v)| k == "x-kubernetes-validations" || any(v)),
                Value::Array(a) => a.iter().any(any),
                _ => false,
            }
        }
        any(&self.crd["spec"]["versions"])
    }

    /// Records where its conversion templates are written (`file:line:col`
    /// by path in the rule), for the messages of a conversion that fails.
    pub fn locate(&mut self, locate: impl Fn(&[Step]) -> String) {
        if let Some(c) = self.conversions.as_mut().and_then(Arc::get_mut) {
            c.locate(locate);
        }
    }
}

fn key(k: &str) -> Step {
    Step::Key(k.to_string())
}

struct Errors(Vec<SchemaError>);

impl Errors {
    fn push(&mut self, at: &[Step], message: impl Into<String>) {
        self.0.push(SchemaError {
            at: at.to_vec(),
            message: message.into(),
        });
    }
}

/// Compiles `spec.api` (written at `at`) of rule `rule`, whose
/// `spec.status.fields` are `status_fields`.
pub fn compile(
    raw: &RawApi,
    rule: &str,
    status_fields: &[String],
    at: &[Step],
) -> Result<Api, Vec<SchemaError>> {
    let mut errors = Errors(Vec::new());
    names(raw, at, &mut errors);
    let plural = plural_of(raw);
    let storage = storage_version(raw, at, &mut errors);
    let validations_at = [at, &[key("validations")]].concat();
    let placed =
        super::validations::compile(&raw.validations, &validations_at).unwrap_or_else(|problems| {
            errors.0.extend(problems);
            Vec::new()
        });
    let mut versions = Vec::new();
    for (i, v) in raw.versions.iter().enumerate() {
        let here = [at, &[key("versions"), Step::Index(i)]].concat();
        let mut v = version(v, raw, status_fields, &here, &mut errors);
        super::validations::add(&placed, &mut v["schema"]["openAPIV3Schema"]);
        versions.push(v);
    }
    let (Some(storage), true) = (storage, errors.0.is_empty()) else {
        return Err(errors.0);
    };
    let conversions = super::convert::compile(raw, &storage, at)?;
    let mut names = json!({
        "kind": raw.kind,
        "listKind": format!("{}List", raw.kind),
        "plural": plural,
        "singular": raw.kind.to_lowercase(),
    });
    if !raw.short_names.is_empty() {
        names["shortNames"] = json!(raw.short_names);
    }
    if !raw.categories.is_empty() {
        names["categories"] = json!(raw.categories);
    }
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": format!("{plural}.{}", raw.group),
            "annotations": {RULE_ANNOTATION: rule},
        },
        "spec": {
            "group": raw.group,
            "names": names,
            "scope": raw.scope.as_str(),
            "versions": versions,
        },
    });
    if let Some(c) = &conversions {
        let problems = super::roundtrip::check(raw, &crd, c, at);
        if !problems.is_empty() {
            return Err(problems);
        }
    }
    Ok(Api {
        crd,
        group: raw.group.clone(),
        kind: raw.kind.clone(),
        plural,
        storage_version: storage,
        allow_breaking_changes: raw.allow_breaking_changes,
        adopt: raw.adopt,
        conversions: conversions.map(Arc::new),
    })
}

/// The resource name of `raw`: given, or derived from the kind.
pub(crate) fn plural_of(raw: &RawApi) -> String {
    raw.plural.clone().unwrap_or_else(|| {
        crate::rbac::guess_plural(&Gvk {
            group: raw.group.clone(),
            version: String::new(),
            kind: raw.kind.clone(),
        })
    })
}

/// The group, kind, plural, short names and categories.
fn names(raw: &RawApi, at: &[Step], errors: &mut Errors) {
    let group_at = [at, &[key("group")]].concat();
    if let Err(why) = dns_subdomain(&raw.group) {
        errors.push(&group_at, format!("group `{}` {why}", raw.group));
    } else if !raw.group.contains('.') {
        errors.push(
            &group_at,
            format!(
                "group `{}` needs a dot (e.g. `{}.example.com`): CRDs are named `<plural>.<group>`",
                raw.group, raw.group
            ),
        );
    } else if raw.group == "kiln.dev" {
        errors.push(
            &group_at,
            "group `kiln.dev` is kiln's own (its Rule resources); use a domain of your own",
        );
    } else if reserved(&raw.group) {
        errors.push(
            &group_at,
            format!(
                "group `{}` is reserved for the Kubernetes project; use a domain of your own",
                raw.group
            ),
        );
    }
    let kind_ok = raw
        .kind
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_uppercase())
        && raw.kind.chars().all(|c| c.is_ascii_alphanumeric());
    if !kind_ok {
        errors.push(
            &[at, &[key("kind")]].concat(),
            format!(
                "kind `{}` must be CamelCase: a capital letter, then letters and digits",
                raw.kind
            ),
        );
    }
    if let Some(plural) = &raw.plural
        && let Err(why) = dns_label(plural)
    {
        errors.push(
            &[at, &[key("plural")]].concat(),
            format!("plural `{plural}` {why}"),
        );
    }
    for (field, list) in [
        ("shortNames", &raw.short_names),
        ("categories", &raw.categories),
    ] {
        for (i, name) in list.iter().enumerate() {
            if let Err(why) = dns_label(name) {
                errors.push(
                    &[at, &[key(field), Step::Index(i)]].concat(),
                    format!("`{name}` {why}"),
                );
            }
        }
    }
}

/// Whether `group` is the Kubernetes project's: `k8s.io`, `kubernetes.io`
/// or a subdomain of either.
fn reserved(group: &str) -> bool {
    ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|d| group == *d || group.strip_suffix(d).is_some_and(|g| g.ends_with('.')))
}

/// The one storage version (none when the versions are wrong).
fn storage_version(raw: &RawApi, at: &[Step], errors: &mut Errors) -> Option<String> {
    let versions_at = [at, &[key("versions")]].concat();
    if raw.versions.is_empty() {
        errors.push(&versions_at, "an API needs at least one version");
        return None;
    }
    let single = raw.versions.len() == 1;
    let mut seen = Vec::new();
    for (i, v) in raw.versions.iter().enumerate() {
        let name_at = [at, &[key("versions"), Step::Index(i), key("name")]].concat();
        if !is_version(&v.name) {
            errors.push(
                &name_at,
                format!(
                    "version `{}` is not a Kubernetes version (e.g. `v1`, `v1beta1`, `v2alpha3`)",
                    v.name
                ),
            );
        } else if seen.contains(&&v.name) {
            errors.push(&name_at, format!("version `{}` is listed twice", v.name));
        }
        seen.push(&v.name);
    }
    let storage: Vec<&RawApiVersion> = raw
        .versions
        .iter()
        .filter(|v| v.storage.unwrap_or(single))
        .collect();
    if !raw.versions.iter().any(|v| v.served) {
        errors.push(
            &versions_at,
            "no version is served: set `served: true` on one",
        );
    }
    match storage.as_slice() {
        [one] => Some(one.name.clone()),
        [] => {
            errors.push(
                &versions_at,
                "no version has `storage: true`: exactly one version is the storage version",
            );
            None
        }
        many => {
            let names: Vec<&str> = many.iter().map(|v| v.name.as_str()).collect();
            errors.push(
                &versions_at,
                format!(
                    "{} all have `storage: true`: exactly one version is the storage version",
                    names.join(", ")
                ),
            );
            None
        }
    }
}

/// One entry of the CRD's `versions`.
fn version(
    v: &RawApiVersion,
    raw: &RawApi,
    status_fields: &[String],
    at: &[Step],
    errors: &mut Errors,
) -> Value {
    let schema_at = [at, &[key("schema")]].concat();
    let openapi = object_schema(&v.schema, status_fields, &schema_at, errors);
    let columns = printer_columns(&v.schema, &schema_at, errors);
    json!({
        "name": v.name,
        "served": v.served,
        "storage": v.storage.unwrap_or(raw.versions.len() == 1),
        "subresources": {"status": {}},
        "additionalPrinterColumns": columns,
        "schema": {"openAPIV3Schema": openapi},
    })
}

/// The whole object's schema: `spec` and `status`.
fn object_schema(
    s: &RawApiSchema,
    status_fields: &[String],
    at: &[Step],
    errors: &mut Errors,
) -> Value {
    let types_at = [at, &[key("types")]].concat();
    let mut compiler = Compiler::new(Types::new(&s.types, types_at));
    compiler.check_types();
    let mut spec = compiler.object(&[at, &[key("spec")]].concat(), &s.spec);
    let status = match &s.status {
        Some(fields) => {
            let mut status = compiler.object(&[at, &[key("status")]].concat(), fields);
            engine_status(&mut status);
            status
        }
        None => generated_status(status_fields),
    };
    errors.0.extend(compiler.finish());
    let mut rules = Vec::new();
    for (i, v) in s.validation.iter().enumerate() {
        let here = [at, &[key("validation"), Step::Index(i)]].concat();
        if let Err(why) = super::cel::check(&v.expression) {
            errors.push(&[here.as_slice(), &[key("expression")]].concat(), why);
        }
        if v.message.trim().is_empty() {
            errors.push(
                &[here.as_slice(), &[key("message")]].concat(),
                "a validation needs a message: it is what a refused user reads",
            );
        }
        rules.push(json!({"rule": v.expression, "message": v.message}));
    }
    if !rules.is_empty() {
        spec["x-kubernetes-validations"] = Value::Array(rules);
    }
    let mut root = json!({
        "type": "object",
        "properties": {"spec": spec, "status": status},
    });
    // A spec with required fields must be there; one without gets `{}` so
    // its defaults apply to an object written without a spec.
    if root["properties"]["spec"].get("required").is_some() {
        root["required"] = json!(["spec"]);
    } else {
        root["properties"]["spec"]["default"] = json!({});
    }
    root
}

/// The status the engine writes: the rule's fields (any value), its
/// conditions and `observedGeneration`.
fn generated_status(fields: &[String]) -> Value {
    let mut properties = Map::new();
    for f in fields {
        properties.insert(
            f.clone(),
            json!({"x-kubernetes-preserve-unknown-fields": true}),
        );
    }
    let mut status = json!({"type": "object", "properties": properties});
    engine_status(&mut status);
    status
}

/// Adds `observedGeneration` and `conditions` to a status schema that lacks them.
fn engine_status(status: &mut Value) {
    let Some(props) = status["properties"].as_object_mut() else {
        return;
    };
    props
        .entry("observedGeneration")
        .or_insert_with(|| json!({"type": "integer", "format": "int64"}));
    props.entry("conditions").or_insert_with(|| {
        json!({
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
            "items": {
                "type": "object",
                "required": ["type", "status"],
                "properties": {
                    "type": {"type": "string"},
                    "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                    "reason": {"type": "string"},
                    "message": {"type": "string"},
                    "lastTransitionTime": {"type": "string", "format": "date-time"},
                    "observedGeneration": {"type": "integer", "format": "int64"},
                },
            },
        })
    });
}

/// The printer columns: as written, or `Ready` and `Age`.
fn printer_columns(s: &RawApiSchema, at: &[Step], errors: &mut Errors) -> Value {
    let Some(columns) = &s.additional_printer_columns else {
        return json!([
            {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]);
    };
    let mut out = Vec::new();
    for (i, c) in columns.iter().enumerate() {
        let here = [at, &[key("additionalPrinterColumns"), Step::Index(i)]].concat();
        const TYPES: [&str; 5] = ["string", "integer", "number", "boolean", "date"];
        if !TYPES.contains(&c.type_.as_str()) {
            errors.push(
                &[here.as_slice(), &[key("type")]].concat(),
                format!(
                    "column type `{}` is not one of {}",
                    c.type_,
                    TYPES.join(", ")
                ),
            );
        }
        if !c.json_path.starts_with('.') {
            errors.push(
                &[here.as_slice(), &[key("jsonPath")]].concat(),
                format!(
                    "jsonPath `{}` must start with `.` (e.g. `.spec.title`)",
                    c.json_path
                ),
            );
        }
        let mut col = json!({"name": c.name, "type": c.type_, "jsonPath": c.json_path});
        if let Some(d) = &c.description {
            col["description"] = json!(d);
        }
        if let Some(p) = c.priority {
            col["priority"] = json!(p);
        }
        out.push(col);
    }
    Value::Array(out)
}
