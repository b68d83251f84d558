//! Which changes from one CRD to the next would break the objects already
//! stored: a version removed or no longer served, the scope changed, a
//! field removed, a type changed, a map made a fixed object (or an object a
//! map whose values do not fit its fields), a required field added without a
//! default, a bound tightened (a higher minimum, a lower maximum, a new or
//! changed pattern, fewer enum values, and the storage moved
//! to a version that cannot hold what objects stored at another version
//! carry. Pure: old × new → the list, empty when the new CRD accepts, and
//! keeps, every object the old one did. A new CEL rule is not breaking
//! (the API server ratchets it) but is reported apart: [`tightened`].

use std::fmt;

use serde_json::{Value, json};

use super::Api;
use super::convert::Conversions;
use super::roundtrip;
/// One change that could refuse, or lose data of, objects written under the old CRD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breaking {
    /// The version it is in (empty for the whole CRD).
    pub version: String,
    /// The field, dotted from the object's root (`spec.replicas`; `[]` for
    /// a list's items, `*` for a map's values); empty for the version itself.
    pub field: String,
    /// What changed.
    pub change: String,
}

impl fmt::Display for Breaking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.version.is_empty(), self.field.is_empty()) {
            (true, _) => write!(f, "{}", self.change),
            (false, true) => write!(f, "version {}: {}", self.version, self.change),
            (false, false) => write!(f, "{} `{}`: {}", self.version, self.field, self.change),
        }
    }
}

/// The breaking changes from `old` (a CustomResourceDefinition: the one in
/// the cluster, or as committed) to the one the API `new` defines: what
/// [`changes`] finds version by version, and what objects stored at each
/// version of `old` lose once `new` stores them elsewhere ([`moved`]).
pub fn breaking(old: &Value, new: &Api) -> Vec<Breaking> {
    let mut out = changes(old, &new.crd);
    out.extend(moved(old, new));
    out
}

/// The breaking changes from `old` to `new` (two
/// CustomResourceDefinitions), each version compared with itself.
pub fn changes(old: &Value, new: &Value) -> Vec<Breaking> {
    compare(old, new).0
}

/// The CEL rules (`x-kubernetes-validations`) `new` has and `old` had not
/// (a rule whose expression changed counts as new). Not breaking: since
/// Kubernetes 1.30 the API server ratchets them, so an object stored before
/// is still read, and updated as long as the update leaves the value the
/// rule sits on (the spec, the object, a field) as it was; but a stored
/// object may not satisfy them, so `kiln diff`, `kiln crd --check` and a
/// reload say so.
pub fn tightened(old: &Value, new: &Value) -> Vec<Breaking> {
    compare(old, new).1
}

/// The breaking changes, and the rules added.
fn compare(old: &Value, new: &Value) -> (Vec<Breaking>, Vec<Breaking>) {
    let mut out = Vec::new();
    let mut rules = Vec::new();
    let (old_scope, new_scope) = (&old["spec"]["scope"], &new["spec"]["scope"]);
    if old_scope != new_scope {
        out.push(Breaking {
            version: String::new(),
            field: String::new(),
            change: format!("the scope changed from {old_scope} to {new_scope}"),
        });
    }
    let versions = |crd: &Value| {
        crd["spec"]["versions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let new_versions = versions(new);
    for old_v in versions(old) {
        let name = old_v["name"].as_str().unwrap_or_default().to_string();
        let Some(new_v) = new_versions.iter().find(|v| v["name"] == old_v["name"]) else {
            let what = if old_v["storage"] == true {
                "the storage version was removed (objects stored in it could not be read)"
            } else {
                "the version was removed"
            };
            out.push(at_version(&name, what));
            continue;
        };
        if old_v["served"] == true && new_v["served"] != true {
            out.push(at_version(&name, "the version is no longer served"));
        }
        let schema = |v: &Value| v["schema"]["openAPIV3Schema"].clone();
        let mut diff = Diff {
            version: &name,
            out: &mut out,
            rules: &mut rules,
        };
        diff.node(&schema(&old_v), &schema(new_v), "");
    }
    (out, rules)
}

/// What objects stored at each version of `old` but the new storage version
/// would lose once the API `new` stores them there (at their next write).
fn moved(old: &Value, new: &Api) -> Vec<Breaking> {
    match new.conversions.as_deref() {
        Some(conversions) => moved_through(old, &new.crd, conversions),
        // One version: a stored version it lacks is named by `changes`.
        None => Vec::new(),
    }
}

/// [`moved`], with the new CRD and its conversions: an object of each
/// stored version's old schema (every field, then only the required ones),
/// defaulted by the new schema of its version as the API server reads it,
/// is converted with the new templates to the new storage version, pruned
/// to that version's schema as the API server stores it, and converted
/// back. A field that does not come back is lost.
fn moved_through(old: &Value, new: &Value, conversions: &Conversions) -> Vec<Breaking> {
    let storage = conversions.storage();
    let Some(stored) = super::version_schema(new, storage) else {
        return Vec::new();
    };
    let (group, kind) = (
        new["spec"]["group"].as_str().unwrap_or_default(),
        new["spec"]["names"]["kind"].as_str().unwrap_or_default(),
    );
    let mut out = Vec::new();
    for version in stored_versions(old).iter().filter(|v| *v != storage) {
        // A version removed is named by `changes`.
        let (Some(was), Some(now)) = (
            super::version_schema(old, version),
            super::version_schema(new, version),
        ) else {
            continue;
        };
        let samples = [true, false]
            .into_iter()
            .flat_map(|every| roundtrip::samples(&was["properties"]["spec"], every));
        for spec in samples {
            let fields = json!({"spec": spec});
            let mut object = roundtrip::object(group, kind, version, &fields);
            super::defaults::apply(now, &mut object);
            let change = match roundtrip::lost(conversions, &object, stored, now) {
                Ok(lost) if lost.is_empty() => continue,
                Ok(lost) => format!(
                    "objects stored at {version} lose {} once {storage} stores them (at their next write)",
                    lost.join(", ")
                ),
                Err(e) => format!("objects stored at {version} cannot be stored at {storage}: {e}"),
            };
            out.push(at_version(version, &change));
            break;
        }
    }
    out
}

/// The versions objects of `crd` may be stored at: its storage version and
/// those its status records (`status.storedVersions`).
fn stored_versions(crd: &Value) -> Vec<String> {
    let mut out: Vec<String> = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"] == true)
        .filter_map(|v| v["name"].as_str().map(str::to_string))
        .collect();
    for v in crd["status"]["storedVersions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(v) = v.as_str().filter(|v| !out.iter().any(|o| o == v)) {
            out.push(v.to_string());
        }
    }
    out
}

/// Whether an object schema keeps fields it does not declare.
fn keeps(s: &Value) -> bool {
    s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
}

/// The schema of a map's values (`additionalProperties`), when `s` is a map.
fn values(s: &Value) -> Option<&Value> {
    match s.get("additionalProperties") {
        Some(v @ Value::Object(_)) => Some(v),
        Some(Value::Bool(true)) => Some(&ANY),
        _ => None,
    }
}

/// The schema of any value.
static ANY: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| json!({"x-kubernetes-preserve-unknown-fields": true}));

fn at_version(version: &str, change: &str) -> Breaking {
    Breaking {
        version: version.to_string(),
        field: String::new(),
        change: change.to_string(),
    }
}

struct Diff<'a> {
    version: &'a str,
    out: &'a mut Vec<Breaking>,
    /// The CEL rules added (not breaking: see [`tightened`]).
    rules: &'a mut Vec<Breaking>,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl Diff<'_> {
    fn push(&mut self, field: &str, change: String) {
        self.out.push(Breaking {
            version: self.version.to_string(),
            field: field.to_string(),
            change,
        });
    }

    fn node(&mut self, old: &Value, new: &Value, path: &str) {
        let ty = |s: &Value| s.get("type").and_then(Value::as_str).map(str::to_string);
        if let (Some(a), Some(b)) = (ty(old), ty(new))
            && a != b
        {
            self.push(path, format!("the type changed from {a} to {b}"));
            return;
        }
        let (old_map, new_map) = (values(old), values(new));
        if keeps(old) && !keeps(new) && !new_map.is_some_and(keeps) {
            self.push(
                path,
                "it no longer keeps fields its schema does not declare".into(),
            );
        }
        self.map_or_object(old, new, path);
        let open = keeps(new) || new_map.is_some();
        self.properties(old, new, path, open);
        self.bounds(old, new, path);
        if let (Some(a), Some(b)) = (old.get("items"), new.get("items")) {
            self.node(a, b, &format!("{path}[]"));
        }
        if let (Some(a), Some(b)) = (old_map, new_map) {
            self.node(a, b, &join(path, "*"));
        }
    }

    /// A map (`additionalProperties`) made an object with fixed fields
    /// (`properties`), or the other way round. The API server prunes the
    /// keys a fixed object does not declare, for good (restoring the map
    /// does not bring them back); each key a map held, now a field, and each
    /// field an object held, now a key, must fit its new schema.
    fn map_or_object(&mut self, old: &Value, new: &Value, path: &str) {
        let props = |s: &Value| s.get("properties").and_then(Value::as_object).cloned();
        match (values(old), values(new)) {
            (Some(was), None) => {
                let fields = props(new).unwrap_or_default();
                if !keeps(new) {
                    let kept = if fields.is_empty() {
                        "every stored key is pruned".to_string()
                    } else {
                        let names = fields.keys().map(|k| format!("`{k}`"));
                        format!(
                            "every stored key but {} is pruned",
                            names.collect::<Vec<_>>().join(", ")
                        )
                    };
                    self.push(
                        path,
                        format!("a map became an object with fixed fields: {kept}, for good"),
                    );
                }
                for (name, now) in &fields {
                    self.node(was, now, &join(path, name));
                }
            }
            (None, Some(now)) => {
                for (name, was) in props(old).unwrap_or_default() {
                    self.node(&was, now, &join(path, &name));
                }
            }
            _ => {}
        }
    }

    fn properties(&mut self, old: &Value, new: &Value, path: &str, open: bool) {
        let empty = serde_json::Map::new();
        let props = |s: &Value| s.get("properties").and_then(Value::as_object).cloned();
        let (old_p, new_p) = (
            props(old).unwrap_or_default(),
            props(new).unwrap_or_default(),
        );
        for (name, old_s) in &old_p {
            match new_p.get(name) {
                Some(new_s) => self.node(old_s, new_s, &join(path, name)),
                None if !open => self.push(&join(path, name), "the field was removed".into()),
                None => {}
            }
        }
        let required = |s: &Value| -> Vec<String> {
            s.get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        let was = required(old);
        let defaulted = |p: &serde_json::Map<String, Value>, name: &str| {
            p.get(name)
                .or_else(|| empty.get(name))
                .is_some_and(|s| s.get("default").is_some())
        };
        for name in required(new) {
            let change = match (was.contains(&name), defaulted(&new_p, &name)) {
                (false, false) => "the field became required without a default",
                // Objects stored before the field existed hold no value:
                // the default filled it in as they were read.
                (true, false) if defaulted(&old_p, &name) => {
                    "the required field lost its default: objects stored without it read without it and can no longer be updated"
                }
                _ => continue,
            };
            self.push(&join(path, &name), change.into());
        }
    }

    fn bounds(&mut self, old: &Value, new: &Value, path: &str) {
        let num = |s: &Value, k: &str| s.get(k).and_then(Value::as_f64);
        for k in ["minimum", "minLength", "minItems"] {
            match (num(old, k), num(new, k)) {
                (Some(a), Some(b)) if b > a => {
                    self.push(path, format!("{k} raised from {a} to {b}"))
                }
                // A length or a count is never below 0.
                (None, Some(b)) if k == "minimum" || b > 0.0 => {
                    self.push(path, format!("{k} {b} added"))
                }
                _ => {}
            }
        }
        for k in ["maximum", "maxLength", "maxItems"] {
            match (num(old, k), num(new, k)) {
                (Some(a), Some(b)) if b < a => {
                    self.push(path, format!("{k} lowered from {a} to {b}"))
                }
                (None, Some(b)) => self.push(path, format!("{k} {b} added")),
                _ => {}
            }
        }
        match (old.get("pattern"), new.get("pattern")) {
            (a, Some(b)) if a != Some(b) => self.push(path, format!("pattern {b} added")),
            _ => {}
        }
        match (
            old.get("enum").and_then(Value::as_array),
            new.get("enum").and_then(Value::as_array),
        ) {
            (None, Some(_)) => self.push(path, "an enum was added".into()),
            (Some(a), Some(b)) => {
                let gone: Vec<String> = a
                    .iter()
                    .filter(|v| !b.contains(v))
                    .map(Value::to_string)
                    .collect();
                if !gone.is_empty() {
                    self.push(path, format!("enum value(s) {} removed", gone.join(", ")));
                }
            }
            _ => {}
        }
        let rules = |s: &Value| -> Vec<Value> {
            s.get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .map(|r| r.iter().map(|v| v["rule"].clone()).collect())
                .unwrap_or_default()
        };
        let before = rules(old);
        for rule in rules(new).into_iter().filter(|r| !before.contains(r)) {
            self.rules.push(Breaking {
                version: self.version.to_string(),
                field: path.to_string(),
                change: format!("validation rule {rule} added"),
            });
        }
        let list = |s: &Value| s.get("x-kubernetes-list-type").cloned();
        if list(old) != list(new) && list(new).is_some_and(|t| t != "atomic") {
            self.push(
                path,
                format!("list type changed to {}", list(new).unwrap_or_default()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(spec: Value) -> Value {
        json!({"spec": {"scope": "Namespaced", "versions": [{
            "name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}},
        }]}})
    }

    fn changes(old: Value, new: Value) -> Vec<String> {
        super::changes(&crd(old), &crd(new))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn the_same_crd_or_a_looser_one_breaks_nothing() {
        let s = json!({"type": "object", "required": ["a"], "properties": {
            "a": {"type": "integer", "minimum": 1, "maximum": 5},
            "b": {"type": "string", "enum": ["x", "y"]},
        }});
        assert!(changes(s.clone(), s.clone()).is_empty());
        let looser = json!({"type": "object", "properties": {
            "a": {"type": "integer", "minimum": 0, "maximum": 9},
            "b": {"type": "string", "enum": ["x", "y", "z"]},
            "c": {"type": "string"},
            "d": {"type": "string", "default": "k"},
        }, "required": ["d"]});
        assert!(
            changes(s, looser).is_empty(),
            "added fields, looser bounds, required with default"
        );
    }

    #[test]
    fn each_kind_of_breaking_change_is_named_with_its_field() {
        let old = json!({"type": "object", "properties": {
            "gone": {"type": "string"},
            "retyped": {"type": "string"},
            "n": {"type": "integer", "minimum": 1, "maximum": 5},
            "s": {"type": "string", "enum": ["x", "y"]},
            "pages": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}}}},
        }});
        let new = json!({"type": "object", "required": ["must"], "properties": {
            "retyped": {"type": "integer"},
            "n": {"type": "integer", "minimum": 2, "maximum": 4},
            "s": {"type": "string", "enum": ["x"], "pattern": "^x$"},
            "pages": {"type": "array", "items": {"type": "object", "properties": {}}},
            "must": {"type": "string"},
        }, "x-kubernetes-validations": [{"rule": "self.n < 3"}]});
        assert_eq!(
            changes(old.clone(), new.clone()),
            [
                "v1 `spec.gone`: the field was removed",
                "v1 `spec.retyped`: the type changed from string to integer",
                "v1 `spec.n`: minimum raised from 1 to 2",
                "v1 `spec.n`: maximum lowered from 5 to 4",
                "v1 `spec.s`: pattern \"^x$\" added",
                "v1 `spec.s`: enum value(s) \"y\" removed",
                "v1 `spec.pages[].path`: the field was removed",
                "v1 `spec.must`: the field became required without a default",
            ]
        );
        let crd = |s: Value| {
            json!({"spec": {"versions": [{"name": "v1",
            "schema": {"openAPIV3Schema": {"properties": {"spec": s}}}}]}})
        };
        let added: Vec<String> = tightened(&crd(old), &crd(new))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(added, ["v1 `spec`: validation rule \"self.n < 3\" added"]);
    }

    #[test]
    fn a_required_field_losing_its_default_breaks_and_a_zero_lower_bound_does_not() {
        let old = json!({"type": "object", "required": ["n", "m"], "properties": {
            "n": {"type": "integer", "default": 3},
            "m": {"type": "integer", "default": 3},
            "s": {"type": "string"},
            "l": {"type": "array", "items": {"type": "string"}},
        }});
        let new = json!({"type": "object", "required": ["n", "m"], "properties": {
            "n": {"type": "integer"},
            "m": {"type": "integer", "default": 5},
            "s": {"type": "string", "minLength": 0},
            "l": {"type": "array", "items": {"type": "string"}, "minItems": 0},
        }});
        assert_eq!(
            changes(old, new),
            [
                "v1 `spec.n`: the required field lost its default: objects stored without it read without it and can no longer be updated"
            ]
        );
    }

    #[test]
    fn removing_the_storage_version_or_changing_scope_breaks() {
        let old = json!({"spec": {"scope": "Namespaced", "versions": [
            {"name": "v1", "served": true, "storage": true},
            {"name": "v2", "served": true, "storage": false},
        ]}});
        let new = json!({"spec": {"scope": "Cluster", "versions": [
            {"name": "v2", "served": false, "storage": true},
        ]}});
        let text: Vec<String> = super::changes(&old, &new)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            text,
            [
                "the scope changed from \"Namespaced\" to \"Cluster\"",
                "version v1: the storage version was removed (objects stored in it could not be read)",
                "version v2: the version is no longer served",
            ]
        );
    }

    #[test]
    fn a_map_made_an_object_with_fixed_fields_breaks_and_its_keys_must_fit() {
        let map = json!({"type": "object", "properties": {
            "env": {"type": "object", "additionalProperties": {"type": "string"}},
        }});
        let fixed = json!({"type": "object", "properties": {
            "env": {"type": "object", "properties": {"A": {"type": "integer"}}},
        }});
        assert_eq!(
            changes(map.clone(), fixed),
            [
                "v1 `spec.env`: a map became an object with fixed fields: every stored key but `A` is pruned, for good",
                "v1 `spec.env.A`: the type changed from string to integer",
            ]
        );
        let free = json!({"type": "object", "properties": {
            "env": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {"A": {"type": "string"}}},
        }});
        assert!(
            changes(map, free).is_empty(),
            "an object that keeps unknown fields keeps every key"
        );
    }

    #[test]
    fn an_object_made_a_map_breaks_where_its_fields_do_not_fit_the_values() {
        let object = json!({"type": "object", "properties": {"site": {"type": "object", "properties": {
            "host": {"type": "string"}, "port": {"type": "integer"},
        }}}});
        let strings = json!({"type": "object", "properties": {
            "site": {"type": "object", "additionalProperties": {"type": "string"}},
        }});
        assert_eq!(
            changes(object.clone(), strings),
            ["v1 `spec.site.port`: the type changed from integer to string"]
        );
        let anything = json!({"type": "object", "properties": {
            "site": {"type": "object", "additionalProperties": {"x-kubernetes-preserve-unknown-fields": true}},
        }});
        assert!(changes(object, anything).is_empty());
    }

    /// A CRD of `Site` in `g.example.com` with `versions`: (name, storage, spec's schema).
    fn crd_of(versions: &[(&str, bool, Value)]) -> Value {
        let versions: Vec<Value> = versions
            .iter()
            .map(|(name, storage, spec)| json!({
                "name": name, "served": true, "storage": storage,
                "schema": {"openAPIV3Schema": {"type": "object", "required": ["spec"], "properties": {"spec": spec}}},
            }))
            .collect();
        json!({"spec": {"group": "g.example.com", "names": {"kind": "Site"},
                        "scope": "Namespaced", "versions": versions}})
    }

    fn strings(names: &[&str]) -> Value {
        let props: serde_json::Map<String, Value> = names
            .iter()
            .map(|n| (n.to_string(), json!({"type": "string"})))
            .collect();
        json!({"type": "object", "required": names, "properties": props})
    }

    /// `spec.api` with v1 (`title`, `color`) and v2 storing (`v2_fields`),
    /// v1 converted by `to` and `from` (YAML of `spec`).
    fn moved_to_v2(v2_fields: &str, to: &str, from: &str) -> super::super::spec::RawApi {
        serde_norway::from_str(&format!(
            "group: g.example.com\nkind: Site\nversions:\n  - name: v1\n    schema:\n      spec: {{title: string | required=true, color: string | required=true}}\n    conversion:\n      toStorage: {{spec: {to}}}\n      fromStorage: {{spec: {from}}}\n  - name: v2\n    storage: true\n    schema:\n      spec: {v2_fields}\n"
        ))
        .unwrap()
    }

    #[test]
    fn a_storage_move_to_a_version_lacking_a_field_loses_it_from_stored_objects() {
        let old = crd_of(&[("v1", true, strings(&["title", "color"]))]);
        // v2 has no `color` and the templates do not carry it (an API
        // compiled without round-trip checks, as an older kiln did).
        let raw = moved_to_v2(
            "{title: string | required=true}",
            "{title: \"{{ self.spec.title }}\"}",
            "{title: \"{{ self.spec.title }}\"}",
        );
        let conversions = super::super::convert::compile(&raw, "v2", &[])
            .unwrap()
            .unwrap();
        let new = crd_of(&[
            ("v1", false, strings(&["title", "color"])),
            ("v2", true, strings(&["title"])),
        ]);
        assert!(
            super::changes(&old, &new).is_empty(),
            "v1 itself kept every field"
        );
        let text: Vec<String> = moved_through(&old, &new, &conversions)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            text,
            [
                "version v1: objects stored at v1 lose spec.color (\"sample\" became absent) once v2 stores them (at their next write)"
            ]
        );
    }

    #[test]
    fn a_storage_move_to_a_version_declaring_fewer_fields_of_an_open_object_loses_the_others() {
        let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        let fixed = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let spec = |color: &Value| {
            json!({"type": "object", "required": ["title"], "properties": {
                "title": {"type": "string"}, "color": color,
            }})
        };
        let old = crd_of(&[("v1", true, spec(&open))]);
        let copy = "{title: \"{{ self.spec.title }}\", color: \"{{ self.spec.color if self.spec.color is defined else none }}\"}";
        let raw = moved_to_v2("{title: string | required=true}", copy, copy);
        let conversions = super::super::convert::compile(&raw, "v2", &[])
            .unwrap()
            .unwrap();
        let new = crd_of(&[("v1", false, spec(&open)), ("v2", true, spec(&fixed))]);
        let text: Vec<String> = moved_through(&old, &new, &conversions)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            text,
            [
                "version v1: objects stored at v1 lose spec.color.undeclared (\"sample\" became absent) once v2 stores them (at their next write)"
            ]
        );
    }

    #[test]
    fn a_storage_move_whose_conversions_carry_every_field_breaks_nothing() {
        let old = crd_of(&[("v1", true, strings(&["title", "color"]))]);
        let raw = moved_to_v2(
            "{title: string | required=true, tint: string | required=true}",
            "{title: \"{{ self.spec.title }}\", tint: \"{{ self.spec.color }}\"}",
            "{title: \"{{ self.spec.title }}\", color: \"{{ self.spec.tint }}\"}",
        );
        let api = super::super::compile(&raw, "sites", &[], &[]).unwrap();
        assert_eq!(api.storage_version, "v2");
        assert!(
            breaking(&old, &api).is_empty(),
            "{:?}",
            breaking(&old, &api)
        );
    }
}
