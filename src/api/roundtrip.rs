//! What `kiln validate` checks of an API's conversions: the templates read
//! only fields their source version declares, and a round trip (a version →
//! the storage version, pruned to its schema as the API server stores it →
//! back) keeps every field the version declares, for the version's
//! `examples` and for objects generated from its schema: an object written
//! at any version is stored without losing a field. [`super::compat`] asks
//! the same of objects stored under the previous CRD.

use serde_json::{Map, Value, json};

use super::SchemaError;
use super::convert::Conversions;
use super::refs;
use super::spec::RawApi;
use crate::yaml::Step;

fn key(k: &str) -> Step {
    Step::Key(k.to_string())
}

/// Every problem of `conversions` of the API `raw` (written at `at`),
/// whose CRD is `crd`.
pub fn check(
    raw: &RawApi,
    crd: &Value,
    conversions: &Conversions,
    at: &[Step],
) -> Vec<SchemaError> {
    let mut errors = references(raw, crd, conversions);
    let storage = conversions.storage();
    let Some(stored) = super::version_schema(crd, storage) else {
        return errors;
    };
    for (i, v) in raw.versions.iter().enumerate() {
        if v.name == storage {
            continue;
        }
        let Some(schema) = super::version_schema(crd, &v.name) else {
            continue;
        };
        let here = [at, &[key("versions"), Step::Index(i)]].concat();
        let at_version = |fields: &Value| object(&raw.group, &raw.kind, &v.name, fields);
        for (j, example) in v.examples.iter().enumerate() {
            let example_at = [here.as_slice(), &[key("examples"), Step::Index(j)]].concat();
            let what = format!("example {j}");
            errors.extend(round_trip(
                conversions,
                &at_version(example),
                stored,
                schema,
                &what,
                &example_at,
            ));
        }
        let conversion_at = [here.as_slice(), &[key("conversion")]].concat();
        for (every, which) in [(true, "every field"), (false, "only its required fields")] {
            let what = format!("a {} object with {which}", v.name);
            let failed = samples(&schema["properties"]["spec"], every)
                .into_iter()
                .find_map(|spec| {
                    let generated = json!({"spec": spec});
                    round_trip(
                        conversions,
                        &at_version(&generated),
                        stored,
                        schema,
                        &what,
                        &conversion_at,
                    )
                });
            errors.extend(failed);
        }
    }
    errors
}

/// Each `self.*` a conversion template reads, declared by the schema of
/// the version it reads.
fn references(raw: &RawApi, crd: &Value, conversions: &Conversions) -> Vec<SchemaError> {
    let mut errors = Vec::new();
    for v in &raw.versions {
        let Some(schema) = super::version_schema(crd, &v.name) else {
            continue;
        };
        let whose = format!("{} {}", raw.kind, v.name);
        for (template, path) in conversions.self_paths_reading(&v.name) {
            if let Err(why) = refs::check(schema, &path, &whose) {
                let at = conversions.steps_of(&template).unwrap_or_default().to_vec();
                errors.push(SchemaError { at, message: why });
            }
        }
    }
    errors
}

/// An object of `kind` at `version` of `group` with `fields` (`spec`, `status`).
pub fn object(group: &str, kind: &str, version: &str, fields: &Value) -> Value {
    let mut o = json!({
        "apiVersion": format!("{group}/{version}"),
        "kind": kind,
        "metadata": {"name": "example", "namespace": "default"},
    });
    if let (Some(o), Some(fields)) = (o.as_object_mut(), fields.as_object()) {
        o.extend(fields.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    o
}

/// `object` → the storage version, pruned to `stored_schema` as the API
/// server stores it → back: the failure, or a problem naming every field
/// `declared` (the schema of `object`'s version) declares that did not come
/// back the same.
fn round_trip(
    conversions: &Conversions,
    object: &Value,
    stored_schema: &Value,
    declared: &Value,
    what: &str,
    at: &[Step],
) -> Option<SchemaError> {
    let fail = |message: String| {
        Some(SchemaError {
            at: at.to_vec(),
            message,
        })
    };
    let lost = match lost(conversions, object, stored_schema, declared) {
        Ok(lost) if lost.is_empty() => return None,
        Ok(lost) => lost,
        Err(e) => return fail(format!("{what}: {e}")),
    };
    let version = version_of(object);
    let storage = conversions.storage();
    fail(format!(
        "{what}: a round trip {version} → {storage} → {version} does not keep {}: objects written at {version} are stored at {storage} without it",
        lost.join(", ")
    ))
}

fn version_of(object: &Value) -> &str {
    let version = object["apiVersion"].as_str().unwrap_or_default();
    version.rsplit('/').next().unwrap_or_default()
}

/// What `object` loses through the storage version of `conversions`:
/// converted to it, pruned to `stored_schema` (as the API server stores
/// it), converted back; each field of `spec` and `status` that `declared`
/// declares and that did not come back the same, as `path (value became
/// what)`.
pub fn lost(
    conversions: &Conversions,
    object: &Value,
    stored_schema: &Value,
    declared: &Value,
) -> Result<Vec<String>, super::convert::ConvertError> {
    let version = version_of(object);
    let stored = conversions.convert(object, conversions.storage())?;
    let back = conversions.convert(&prune_object(&stored, stored_schema), version)?;
    let mut lost = Vec::new();
    for (path, value) in leaves(object) {
        if !["spec", "status"].iter().any(|p| path.starts_with(p)) {
            continue;
        }
        if refs::check(declared, &format!("self.{path}"), "").is_err() {
            continue;
        }
        let came_back = lookup(&back, &path);
        if came_back != Some(&value) {
            let now = came_back.map_or("absent".to_string(), ToString::to_string);
            lost.push(format!("{path} ({value} became {now})"));
        }
    }
    Ok(lost)
}

/// An object as the API server keeps it under `schema` (its whole
/// `openAPIV3Schema`): `apiVersion`, `kind` and `metadata` as they are,
/// every other field pruned to what the schema declares.
pub(super) fn prune_object(object: &Value, schema: &Value) -> Value {
    let mut out = prune(object, schema);
    if let (Some(out), Some(object)) = (out.as_object_mut(), object.as_object()) {
        for k in ["apiVersion", "kind", "metadata"] {
            if let Some(v) = object.get(k) {
                out.insert(k.into(), v.clone());
            }
        }
    }
    out
}

/// `value` pruned to `schema`: an object keeps the fields its schema
/// declares (all of them when it keeps unknown fields or is a map), each
/// pruned to its own schema; a list's items are pruned to the items'.
fn prune(value: &Value, schema: &Value) -> Value {
    match value {
        Value::Object(fields) => {
            let keeps = schema.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
            let declared = schema["properties"].as_object();
            let values = schema.get("additionalProperties");
            let mut out = Map::new();
            for (k, v) in fields {
                let inner = match (declared.and_then(|d| d.get(k)), values) {
                    (Some(s), _) => prune(v, s),
                    (None, Some(s @ Value::Object(_))) => prune(v, s),
                    (None, Some(Value::Bool(true))) => v.clone(),
                    _ if keeps => v.clone(),
                    _ => continue,
                };
                out.insert(k.clone(), inner);
            }
            Value::Object(out)
        }
        Value::Array(items) => match schema.get("items") {
            Some(s) => Value::Array(items.iter().map(|i| prune(i, s)).collect()),
            None => value.clone(),
        },
        other => other.clone(),
    }
}

/// Every leaf (scalar or list) of an object's fields, by dotted path.
fn leaves(object: &Value) -> Vec<(String, Value)> {
    fn walk(v: &Value, path: &str, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, v) in m {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(v, &p, out);
                }
            }
            other => out.push((path.to_string(), other.clone())),
        }
    }
    let mut out = Vec::new();
    walk(object, "", &mut out);
    out
}

fn lookup<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

/// At most this many objects per schema are generated (one per value of
/// its longest enum)...
const MAX_SAMPLES: usize = 64;

/// ...and fewer for a large schema: at most about this many fields in all
/// (each object is converted twice and compared field by field).
const MAX_SAMPLED_FIELDS: usize = 20_000;

/// Objects that fit `schema`, as the API server would hold them (defaults
/// filled in): with `every`, every declared field, and a field it does not
/// declare in each object that keeps such fields; else only the required
/// ones and those with a default. One object per value of the longest enum
/// (each enum takes its values in turn, booleans `true` then `false`), so
/// that a template that loses one value is seen; and one whose values are
/// zero, empty or false where the schema allows it (`0`, `""`, `[]`), so
/// that a template that takes them for absent (`x or 1`) is seen.
pub fn samples(schema: &Value, every: bool) -> Vec<Value> {
    let affordable = (MAX_SAMPLED_FIELDS / fields(schema).max(1)).max(2);
    let n = variants(schema).clamp(1, MAX_SAMPLES.min(affordable));
    let mut out: Vec<Value> = (0..n).map(|i| sample(schema, every, i)).collect();
    let zero = zeroed(&out[0], schema);
    if !out.contains(&zero) {
        out.push(zero);
    }
    out
}

/// `value` (a sample of `schema`) with each number, string, boolean and
/// list that has no default or enum made zero, empty or false, where the
/// schema's bounds allow it.
fn zeroed(value: &Value, schema: &Value) -> Value {
    if !value.is_object() && (schema.get("default").is_some() || schema.get("enum").is_some()) {
        return value.clone();
    }
    let bound = |k: &str| schema.get(k).and_then(Value::as_f64);
    let allows_zero =
        bound("minimum").is_none_or(|m| m <= 0.0) && bound("maximum").is_none_or(|m| m >= 0.0);
    let none_required = |k: &str| bound(k).is_none_or(|m| m <= 0.0);
    match value {
        Value::Object(fields) => {
            let inner = |k: &String| {
                schema["properties"]
                    .get(k)
                    .or_else(|| schema.get("additionalProperties").filter(|v| v.is_object()))
            };
            let fields = fields.iter().map(|(k, v)| {
                let v = inner(k).map_or_else(|| v.clone(), |s| zeroed(v, s));
                (k.clone(), v)
            });
            Value::Object(fields.collect())
        }
        Value::Array(_) if none_required("minItems") => json!([]),
        Value::Number(n) if allows_zero => match n.is_f64() {
            true => json!(0.0),
            false => json!(0),
        },
        Value::String(_) if none_required("minLength") && schema.get("pattern").is_none() => {
            json!("")
        }
        Value::Bool(_) => json!(false),
        other => other.clone(),
    }
}

/// How many values the longest enum (or a boolean: 2) of `schema` has.
fn variants(schema: &Value) -> usize {
    let own = match schema["enum"].as_array() {
        Some(values) => values.len(),
        None if schema["type"] == "boolean" => 2,
        None => 1,
    };
    let props = schema["properties"].as_object().into_iter().flatten();
    let inner = props
        .map(|(_, v)| v)
        .chain(schema.get("items"))
        .chain(schema.get("additionalProperties").filter(|v| v.is_object()));
    inner.map(variants).fold(own, usize::max)
}

/// How many fields, list items and map values `schema` declares, nested.
fn fields(schema: &Value) -> usize {
    let props = schema["properties"].as_object().into_iter().flatten();
    let inner = props
        .map(|(_, v)| v)
        .chain(schema.get("items"))
        .chain(schema.get("additionalProperties").filter(|v| v.is_object()));
    inner.map(|s| 1 + fields(s)).sum()
}

/// The `i`-th sample of `schema` (see [`samples`]).
fn sample(schema: &Value, every: bool, i: usize) -> Value {
    if schema["type"] == "object" {
        return sample_object(schema, every, i);
    }
    if let Some(d) = schema.get("default") {
        return d.clone();
    }
    if let Some(values) = schema["enum"].as_array().filter(|e| !e.is_empty()) {
        return values[i % values.len()].clone();
    }
    let bound = |k: &str| schema.get(k).and_then(Value::as_f64);
    let within = |v: f64| {
        v.max(bound("minimum").unwrap_or(f64::MIN))
            .min(bound("maximum").unwrap_or(f64::MAX))
    };
    match schema["type"].as_str() {
        Some("string") => {
            let min = bound("minLength").unwrap_or(0.0) as usize;
            let max = bound("maxLength").map_or(usize::MAX, |m| m as usize);
            let mut s = "sample".to_string();
            while s.len() < min {
                s.push('a');
            }
            s.truncate(max);
            Value::String(s)
        }
        Some("integer") => json!(within(1.0) as i64),
        Some("number") => json!(within(1.5)),
        Some("boolean") => json!(i.is_multiple_of(2)),
        Some("array") => json!([sample(&schema["items"], every, i)]),
        _ => json!("sample"),
    }
}

/// The name of a field `schema` does not declare.
fn undeclared(schema: &Value) -> String {
    let mut name = "undeclared".to_string();
    while schema["properties"].get(&name).is_some() {
        name.push('_');
    }
    name
}

fn sample_object(schema: &Value, every: bool, i: usize) -> Value {
    let mut out = Map::new();
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(props) = schema["properties"].as_object() {
        for (k, v) in props {
            if every || required.contains(&k.as_str()) || v.get("default").is_some() {
                out.insert(k.clone(), sample(v, every, i));
            }
        }
    } else if let Some(values @ Value::Object(_)) = schema.get("additionalProperties")
        && every
    {
        out.insert("key".into(), sample(values, every, i));
    }
    if every && schema.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true)) {
        out.insert(undeclared(schema), json!("sample"));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_fits_its_schema() {
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string", "minLength": 8, "maxLength": 9},
            "n": {"type": "integer", "minimum": 3},
            "theme": {"type": "string", "enum": ["dark", "light"]},
            "size": {"type": "integer", "default": 7},
            "tags": {"type": "array", "items": {"type": "string"}},
            "env": {"type": "object", "additionalProperties": {"type": "boolean"}},
        }});
        let schema = json!({"type": "object", "required": ["name"], "default": {}, "properties": schema["properties"]});
        assert_eq!(
            sample(&schema, true, 0),
            json!({"name": "sampleaa", "n": 3, "theme": "dark", "size": 7, "tags": ["sample"], "env": {"key": true}})
        );
        assert_eq!(
            sample(&schema, false, 0),
            json!({"name": "sampleaa", "size": 7})
        );
    }

    #[test]
    fn samples_take_every_enum_value_and_boolean_and_an_undeclared_field() {
        let schema = json!({"type": "object", "properties": {
            "size": {"type": "string", "enum": ["s", "m", "l"]},
            "on": {"type": "boolean"},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        }});
        assert_eq!(
            samples(&schema, true),
            [
                json!({"size": "s", "on": true, "extra": {"undeclared": "sample"}}),
                json!({"size": "m", "on": false, "extra": {"undeclared": "sample"}}),
                json!({"size": "l", "on": true, "extra": {"undeclared": "sample"}}),
                json!({"size": "s", "on": false, "extra": {"undeclared": "sample"}}),
            ]
        );
        assert_eq!(samples(&schema, false), [json!({}), json!({}), json!({})]);
        let zero = json!({"type": "object", "properties": {
            "n": {"type": "integer", "minimum": 0},
            "m": {"type": "integer", "minimum": 1},
            "f": {"type": "number"},
            "s": {"type": "string"},
            "p": {"type": "string", "pattern": "^x"},
            "l": {"type": "array", "items": {"type": "string"}},
            "d": {"type": "integer", "default": 7},
            "on": {"type": "boolean"},
        }, "default": {}});
        assert_eq!(
            samples(&zero, true).last(),
            Some(
                &json!({"n": 0, "m": 1, "f": 0.0, "s": "", "p": "sample", "l": [], "d": 7, "on": false})
            )
        );
        let many: Vec<Value> = (0..1000).map(|i| json!(i)).collect();
        let huge =
            json!({"type": "object", "properties": {"n": {"type": "integer", "enum": many}}});
        assert_eq!(samples(&huge, true).len(), MAX_SAMPLES);
        let mut wide = huge.clone();
        for i in 0..5000 {
            wide["properties"][format!("f{i}")] = json!({"type": "integer"});
        }
        assert_eq!(
            samples(&wide, true).len(),
            3 + 1,
            "3 enum values and the zero object"
        );
    }

    #[test]
    fn pruning_keeps_what_the_schema_declares_as_the_api_server_stores_it() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string"},
            "env": {"type": "object", "additionalProperties": {"type": "object", "properties": {"v": {"type": "string"}}}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "list": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}},
        }});
        let value = json!({
            "a": "x", "gone": 1,
            "env": {"K": {"v": "1", "w": "2"}},
            "free": {"any": {"thing": true}},
            "list": [{"n": 1, "m": 2}],
        });
        assert_eq!(
            prune(&value, &schema),
            json!({
                "a": "x",
                "env": {"K": {"v": "1"}},
                "free": {"any": {"thing": true}},
                "list": [{"n": 1}],
            })
        );
    }

    #[test]
    fn leaves_are_scalars_and_lists() {
        let o = json!({"spec": {"a": 1, "b": {"c": [1, 2]}, "e": {}}});
        let paths: Vec<String> = leaves(&o).into_iter().map(|(p, _)| p).collect();
        assert_eq!(paths, ["spec.a", "spec.b.c", "spec.e"]);
    }

    #[test]
    fn validate_tries_empty_lists_through_the_conversion_templates() {
        let rule = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: apps}
spec:
  for: {apiVersion: demo.kiln.dev/v1, kind: App}
  api:
    group: demo.kiln.dev
    kind: App
    versions:
      - name: v1alpha1
        schema: {spec: {ports: "[]integer | required=true"}}
        conversion:
          toStorage: {spec: {port: "{{ self.spec.ports[0] }}"}}
          fromStorage: {spec: {ports: ["{{ self.spec.port }}"]}}
      - name: v1
        storage: true
        schema: {spec: {port: integer}}
  children:
    - id: cm
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-app"}
"#;
        let refused = crate::rules::load_sources(vec![crate::rules::load::Source {
            file: "rule.yaml".into(),
            text: rule.into(),
        }])
        .unwrap_err();
        let messages: Vec<&str> = refused.iter().map(|d| d.message.as_str()).collect();
        assert!(
            messages
                .iter()
                .any(|m| m.contains("a v1alpha1 object with every field")),
            "{messages:?}"
        );
    }
}
