//! SimpleSchema (KRO's compact schema syntax) → an OpenAPI v3 structural
//! schema. A field is written `type | marker=value ...`:
//!
//! ```yaml
//! title: string | required=true description="Shown in the header"
//! replicas: integer | default=1 minimum=1 maximum=10
//! pages: "[]Page"
//! labels: "map[string]string"
//! tls:                       # a nested object
//!   enabled: boolean | default=false
//! ```
//!
//! Types: `string`, `integer`, `boolean`, `float`, `object` (anything),
//! `[]T`, `map[string]T` and the names of `types`. Every problem is
//! collected with the path of the field it is about.

use serde_json::{Map, Value, json};

use super::SchemaError;
use super::markers::{self, Marker};
use crate::yaml::Step;

/// Named types (`types`), expanded where they are used.
pub struct Types<'a> {
    defs: &'a Map<String, Value>,
    /// Where `types` is, for errors inside a definition.
    at: Vec<Step>,
}

impl<'a> Types<'a> {
    /// The named types of a schema, written at `at`.
    pub fn new(defs: &'a Map<String, Value>, at: Vec<Step>) -> Self {
        Self { defs, at }
    }
}

/// Compiles SimpleSchema trees, collecting problems.
pub struct Compiler<'a> {
    types: Types<'a>,
    /// Type names being expanded (for cycles).
    stack: Vec<String>,
    /// Cycles reported, each as its sorted members (reported once).
    cycles: Vec<Vec<String>>,
    /// Schema nodes made so far, and how deep the current one is.
    nodes: usize,
    depth: usize,
    /// Whether the limits were reported.
    too_big: bool,
    errors: Vec<SchemaError>,
}

/// Most schema nodes one version's schema may expand to.
const MAX_NODES: usize = 10_000;
/// Deepest nesting of fields, lists, maps and named types (in steps of the
/// expansion: a list of a named type's field is three).
const MAX_DEPTH: usize = 96;

const SCALARS: [&str; 5] = ["string", "integer", "boolean", "float", "object"];

impl<'a> Compiler<'a> {
    /// A compiler that knows these named types.
    pub fn new(types: Types<'a>) -> Self {
        Self {
            types,
            stack: Vec::new(),
            cycles: Vec::new(),
            nodes: 0,
            depth: 0,
            too_big: false,
            errors: Vec::new(),
        }
    }

    fn error(&mut self, at: &[Step], message: impl Into<String>) {
        self.errors.push(SchemaError {
            at: at.to_vec(),
            message: message.into(),
        });
    }

    /// Checks every named type once, even those nothing uses (a cycle or a
    /// typo in one is a problem wherever it is).
    pub fn check_types(&mut self) {
        let names: Vec<String> = self.types.defs.keys().cloned().collect();
        for name in names {
            if !is_type_name(&name) {
                let at = [self.types.at.as_slice(), &[Step::Key(name.clone())]].concat();
                self.error(
                    &at,
                    format!("type name `{name}` must start with a letter and hold only letters and digits"),
                );
                continue;
            }
            let at = self.types.at.clone();
            self.named_checked(&name, &at);
        }
    }

    /// The problems found, each once (a named type used in several places
    /// would repeat the problems inside it).
    pub fn finish(self) -> Vec<SchemaError> {
        let mut out: Vec<SchemaError> = Vec::new();
        for e in self.errors {
            if !out.contains(&e) {
                out.push(e);
            }
        }
        out
    }

    /// An object whose fields are the keys of `fields`.
    pub fn object(&mut self, at: &[Step], fields: &Map<String, Value>) -> Value {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for (name, value) in fields {
            let here = [at, &[Step::Key(name.clone())]].concat();
            let (schema, is_required) = self.field(&here, value);
            if is_required {
                required.push(Value::String(name.clone()));
            }
            properties.insert(name.clone(), schema);
        }
        // As KRO: an object without required fields whose fields have
        // defaults defaults to `{}`, so an object written without it gets
        // it, with those defaults.
        let defaulted = properties.values().any(|p| p.get("default").is_some());
        let mut out = json!({"type": "object", "properties": properties});
        if !required.is_empty() {
            out["required"] = Value::Array(required);
        } else if defaulted {
            out["default"] = json!({});
        }
        out
    }

    /// One field: a nested object (a mapping) or `type | markers`; and
    /// whether it is required.
    fn field(&mut self, at: &[Step], value: &Value) -> (Value, bool) {
        if !self.enter(at) {
            return (json!({}), false);
        }
        let out = self.field_here(at, value);
        self.depth -= 1;
        out
    }

    /// Counts one more schema node, one level deeper; false (reported once)
    /// when the schema grows past the limits: named types used in each
    /// other can expand exponentially, and `[][][]…` nests without end.
    fn enter(&mut self, at: &[Step]) -> bool {
        if self.nodes >= MAX_NODES || self.depth >= MAX_DEPTH {
            if !self.too_big {
                self.too_big = true;
                self.error(
                    at,
                    format!("the schema is too big: at most {MAX_NODES} fields and types once named types are expanded, nested at most {MAX_DEPTH} levels deep"),
                );
            }
            return false;
        }
        self.nodes += 1;
        self.depth += 1;
        true
    }

    fn field_here(&mut self, at: &[Step], value: &Value) -> (Value, bool) {
        match value {
            Value::Object(fields) => (self.object(at, fields), false),
            Value::String(text) => self.typed(at, text),
            other => {
                self.error(
                    at,
                    format!(
                        "expected a type (e.g. `string | required=true`) or a mapping of fields, found {}",
                        describe(other)
                    ),
                );
                (json!({}), false)
            }
        }
    }

    /// `type | markers`.
    fn typed(&mut self, at: &[Step], text: &str) -> (Value, bool) {
        let (ty, marks) = match text.split_once('|') {
            Some((ty, marks)) => (ty.trim(), marks.trim()),
            None => (text.trim(), ""),
        };
        let mut schema = self.type_expr(at, ty);
        let parsed = match markers::parse(marks) {
            Ok(m) => m,
            Err(e) => {
                self.error(at, e);
                return (schema, false);
            }
        };
        let mut required = false;
        for marker in parsed {
            if let Marker::Required(r) = marker {
                required = r;
                continue;
            }
            if let Err(e) = markers::apply(&mut schema, &marker) {
                self.error(at, e);
            }
        }
        if let Err(e) = markers::check_default(&schema).and_then(|()| markers::check_list(&schema))
        {
            self.error(at, e);
        }
        (schema, required || self.required_type(ty))
    }

    /// A type expression: a scalar, `[]T`, `map[string]T` or a type name.
    fn type_expr(&mut self, at: &[Step], ty: &str) -> Value {
        if !self.enter(at) {
            return json!({});
        }
        let out = self.type_here(at, ty);
        self.depth -= 1;
        out
    }

    fn type_here(&mut self, at: &[Step], ty: &str) -> Value {
        if let Some(item) = ty.strip_prefix("[]") {
            return json!({"type": "array", "items": self.type_expr(at, item.trim())});
        }
        if let Some(rest) = ty.strip_prefix("map[") {
            let Some((key, value)) = rest.split_once(']') else {
                self.error(at, format!("`{ty}`: expected `map[string]T`"));
                return json!({});
            };
            if key.trim() != "string" {
                self.error(
                    at,
                    format!("`{ty}`: map keys are always strings; write `map[string]{value}`"),
                );
            }
            return json!({"type": "object", "additionalProperties": self.type_expr(at, value.trim())});
        }
        match ty {
            "string" | "integer" | "boolean" => json!({"type": ty}),
            "float" => json!({"type": "number"}),
            "object" => json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            name if self.types.defs.contains_key(name) => self.named_checked(name, at),
            _ => {
                let known = SCALARS
                    .iter()
                    .copied()
                    .chain(self.types.defs.keys().map(String::as_str));
                let message = format!(
                    "unknown type `{ty}`: expected {}, `[]T` or `map[string]T`",
                    super::quoted(known)
                );
                self.error(at, message);
                json!({})
            }
        }
    }

    /// Whether `ty` names a type written `T | required=true`: a field of
    /// it is required, as in KRO.
    fn required_type(&self, ty: &str) -> bool {
        let Some(Value::String(def)) = self.types.defs.get(ty) else {
            return false;
        };
        def.split_once('|')
            .and_then(|(_, marks)| markers::parse(marks).ok())
            .is_some_and(|m| m.contains(&Marker::Required(true)))
    }

    /// A named type, expanded; a cycle is an error at the use that closes it.
    fn named_checked(&mut self, name: &str, at: &[Step]) -> Value {
        if let Some(i) = self.stack.iter().position(|n| n == name) {
            let mut cycle = self.stack[i..].to_vec();
            let mut members = cycle.clone();
            members.sort();
            if self.cycles.contains(&members) {
                return json!({});
            }
            self.cycles.push(members);
            cycle.push(name.to_string());
            self.error(
                at,
                format!(
                    "types refer to each other in a cycle ({}); a schema must be finite",
                    cycle.join(" → ")
                ),
            );
            return json!({});
        }
        self.named(name)
    }

    fn named(&mut self, name: &str) -> Value {
        let Some(def) = self.types.defs.get(name) else {
            return json!({});
        };
        let def = def.clone();
        let here = [self.types.at.as_slice(), &[Step::Key(name.to_string())]].concat();
        self.stack.push(name.to_string());
        let (schema, _) = self.field(&here, &def);
        self.stack.pop();
        schema
    }
}

fn is_type_name(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric())
        && !SCALARS.contains(&name)
}

/// What a YAML value is, for messages.
pub fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(spec: Value, types: Value) -> Vec<SchemaError> {
        let types = types.as_object().cloned().unwrap_or_default();
        let mut c = Compiler::new(Types::new(&types, vec![Step::Key("types".into())]));
        c.check_types();
        c.object(&[Step::Key("spec".into())], spec.as_object().unwrap());
        c.finish()
    }

    #[test]
    fn types_that_expand_exponentially_are_refused_not_expanded() {
        let mut types = serde_json::Map::new();
        for i in 0..40 {
            types.insert(
                format!("T{i}"),
                json!({"a": format!("T{}", i + 1), "b": format!("T{}", i + 1)}),
            );
        }
        types.insert("T40".into(), json!({"leaf": "string"}));
        let errors = compile(json!({"root": "T0"}), Value::Object(types));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].message.starts_with("the schema is too big"),
            "{errors:?}"
        );
    }

    #[test]
    fn lists_nested_without_end_are_refused_without_recursing_as_deep() {
        let ty = format!("{}string", "[]".repeat(100_000));
        let errors = compile(json!({"deep": ty}), json!({}));
        assert_eq!(errors.len(), 1);
        assert!(errors[0].message.starts_with("the schema is too big"));
    }

    #[test]
    fn nested_objects_lists_maps_and_types_compile() {
        let errors = compile(
            json!({"a": {"b": "[]map[string]P | maxItems=3"}}),
            json!({"P": {"q": "integer | default=1"}}),
        );
        assert!(errors.is_empty(), "{errors:?}");
    }
}
