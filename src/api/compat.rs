//! Which changes from one CRD to the next would break the objects already
//! stored: a version removed or no longer served, the scope changed, a
//! field removed, a type changed, a required field added without a
//! default, a bound tightened (a higher minimum, a lower maximum, a new or
//! changed pattern, fewer enum values, a new CEL rule). Pure: old × new →
//! the list, empty when the new CRD accepts every object the old one did.

use std::fmt;

use serde_json::Value;

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

/// The breaking changes from `old` to `new` (two CustomResourceDefinitions).
pub fn breaking(old: &Value, new: &Value) -> Vec<Breaking> {
    let mut out = Vec::new();
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
        };
        diff.node(&schema(&old_v), &schema(new_v), "");
    }
    out
}

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
        let keeps =
            |s: &Value| s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        if keeps(old) && !keeps(new) {
            self.push(
                path,
                "it no longer keeps fields its schema does not declare".into(),
            );
        }
        self.properties(old, new, path, keeps(new));
        self.bounds(old, new, path);
        if let (Some(a), Some(b)) = (old.get("items"), new.get("items")) {
            self.node(a, b, &format!("{path}[]"));
        }
        if let (Some(a @ Value::Object(_)), Some(b @ Value::Object(_))) = (
            old.get("additionalProperties"),
            new.get("additionalProperties"),
        ) {
            self.node(a, b, &join(path, "*"));
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
        for name in required(new) {
            let defaulted = new_p
                .get(&name)
                .or_else(|| empty.get(&name))
                .is_some_and(|s| s.get("default").is_some());
            if !was.contains(&name) && !defaulted {
                self.push(
                    &join(path, &name),
                    "the field became required without a default".into(),
                );
            }
        }
    }

    fn bounds(&mut self, old: &Value, new: &Value, path: &str) {
        let num = |s: &Value, k: &str| s.get(k).and_then(Value::as_f64);
        for k in ["minimum", "minLength", "minItems"] {
            match (num(old, k), num(new, k)) {
                (Some(a), Some(b)) if b > a => {
                    self.push(path, format!("{k} raised from {a} to {b}"))
                }
                (None, Some(b)) => self.push(path, format!("{k} {b} added")),
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
            self.push(path, format!("validation rule {rule} added"));
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
        breaking(&crd(old), &crd(new))
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
            changes(old, new),
            [
                "v1 `spec.gone`: the field was removed",
                "v1 `spec.retyped`: the type changed from string to integer",
                "v1 `spec.n`: minimum raised from 1 to 2",
                "v1 `spec.n`: maximum lowered from 5 to 4",
                "v1 `spec.s`: pattern \"^x$\" added",
                "v1 `spec.s`: enum value(s) \"y\" removed",
                "v1 `spec.pages[].path`: the field was removed",
                "v1 `spec.must`: the field became required without a default",
                "v1 `spec`: validation rule \"self.n < 3\" added",
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
        let text: Vec<String> = breaking(&old, &new)
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
}
