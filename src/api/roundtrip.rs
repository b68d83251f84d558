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
            let generated = json!({"spec": sample(&schema["properties"]["spec"], every)});
            let what = format!("a {} object with {which}", v.name);
            errors.extend(round_trip(
                conversions,
                &at_version(&generated),
                stored,
                schema,
                &what,
                &conversion_at,
            ));
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
fn prune_object(object: &Value, schema: &Value) -> Value {
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

/// An object that fits `schema`, as the API server would hold it
/// (defaults filled in): defaults and enums where given, else a value of
/// the type within its bounds; with `every`, every declared field, else
/// only the required ones and those with a default.
pub fn sample(schema: &Value, every: bool) -> Value {
    if schema["type"] == "object" {
        return sample_object(schema, every);
    }
    if let Some(d) = schema.get("default") {
        return d.clone();
    }
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
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
        Some("boolean") => json!(true),
        Some("array") => json!([sample(&schema["items"], every)]),
        _ => json!("sample"),
    }
}

fn sample_object(schema: &Value, every: bool) -> Value {
    let mut out = Map::new();
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(props) = schema["properties"].as_object() {
        for (k, v) in props {
            if every || required.contains(&k.as_str()) || v.get("default").is_some() {
                out.insert(k.clone(), sample(v, every));
            }
        }
    } else if let Some(values @ Value::Object(_)) = schema.get("additionalProperties")
        && every
    {
        out.insert("key".into(), sample(values, every));
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
            sample(&schema, true),
            json!({"name": "sampleaa", "n": 3, "theme": "dark", "size": 7, "tags": ["sample"], "env": {"key": true}})
        );
        assert_eq!(
            sample(&schema, false),
            json!({"name": "sampleaa", "size": 7})
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
}
