//! The typing pass: a rendered object shaped to its kind's schema. A value
//! takes its field's type when that loses nothing (an integer into a string
//! field becomes `"2"`, `"3"` into an integer field becomes `3`); anything
//! else, and a field the kind does not have, is a [`Problem`].

use std::sync::Arc;

use serde_json::{Number, Value};

use super::builtin;
use super::node::{Node, Ty};
use crate::template::tree::is_template;
use crate::yaml::{Step, path_string};

/// What cannot be shaped, and where in the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The field.
    pub path: Vec<Step>,
    /// What is wrong with it.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", path_string(&self.path), self.message)
    }
}

/// A node with its named schema looked up.
pub(super) enum Resolved<'a> {
    /// The node itself.
    Here(&'a Node),
    /// The named schema it refers to.
    Named(Arc<Node>),
}

impl std::ops::Deref for Resolved<'_> {
    type Target = Node;
    fn deref(&self) -> &Node {
        match self {
            Self::Here(node) => node,
            Self::Named(node) => node,
        }
    }
}

/// `node`, or the named schema it refers to (`None` when the table lacks
/// it: such a field takes any value).
pub(super) fn resolved(node: &Node) -> Option<Resolved<'_>> {
    match &node.reference {
        Some(name) => builtin::def(name).map(Resolved::Named),
        None => Some(Resolved::Here(node)),
    }
}

/// What a field takes, in the large.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// A map.
    Map,
    /// A list.
    List,
    /// A scalar of this type.
    Scalar(Ty),
    /// Anything.
    Any,
}

/// What a field of schema `node` (looked up) takes.
fn takes(node: &Node) -> Takes {
    let object = !node.properties.is_empty() || node.additional.is_some();
    match node.ty {
        Some(Ty::Object) => Takes::Map,
        None if object => Takes::Map,
        Some(Ty::Array) => Takes::List,
        Some(ty) => Takes::Scalar(ty),
        None => Takes::Any,
    }
}

/// What the field at `path` of an object of schema `node` takes (`None`:
/// the kind has no such field).
pub fn takes_at(node: &Node, path: &[Step]) -> Option<Takes> {
    fn go(node: &Node, path: &[Step]) -> Option<Takes> {
        let node = resolved(node)?;
        let Some((step, rest)) = path.split_first() else {
            return Some(takes(&node));
        };
        let next = match step {
            Step::Key(k) => node.properties.get(k).or(node.additional.as_deref()),
            Step::Index(_) => node.items.as_deref(),
        };
        match next {
            Some(next) => go(next, rest),
            None if node.preserve_unknown || node.properties.is_empty() => Some(Takes::Any),
            None => None,
        }
    }
    match path.split_first() {
        Some((Step::Key(k), rest)) if k == "metadata" => {
            go(&*builtin::def(builtin::OBJECT_META)?, rest)
        }
        Some((Step::Key(k), [])) if k == "apiVersion" || k == "kind" => {
            Some(Takes::Scalar(Ty::String))
        }
        _ => go(node, path),
    }
}

/// What a JSON value is, for messages.
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// Shapes a whole object (`apiVersion`, `kind` and `metadata` are every
/// object's) to `node`, its kind's schema. Returns every problem.
pub fn shape(object: &mut Value, node: &Node) -> Vec<Problem> {
    let mut shaper = Shaper::default();
    shaper.object(object, node);
    shaper.problems
}

/// A template typed before it renders: the problems of its literal part,
/// and what each templated value's field takes, by its path.
#[derive(Debug, Default)]
pub struct Template {
    /// Problems of the literal part.
    pub problems: Vec<Problem>,
    /// Each templated string value, with what its field takes.
    pub templated: Vec<(Vec<Step>, Takes)>,
}

/// Types a child template (whose string scalars and keys may be
/// templates, left for the render) by its kind's schema `node`.
pub fn template(template: &Value, node: &Node) -> Template {
    let mut shaper = Shaper {
        problems: Vec::new(),
        templated: Some(Vec::new()),
    };
    shaper.object(&mut template.clone(), node);
    Template {
        problems: shaper.problems,
        templated: shaper.templated.unwrap_or_default(),
    }
}

/// One walk of the typing pass.
#[derive(Default)]
struct Shaper {
    problems: Vec<Problem>,
    /// For a template: where templated values go (`None` when shaping a
    /// rendered object).
    templated: Option<Vec<(Vec<Step>, Takes)>>,
}

impl Shaper {
    fn object(&mut self, object: &mut Value, node: &Node) {
        let Some(map) = object.as_object_mut() else {
            return;
        };
        let node = resolved(node);
        let meta = builtin::def(builtin::OBJECT_META);
        for (key, value) in map.iter_mut() {
            let mut path = vec![Step::Key(key.clone())];
            match key.as_str() {
                "apiVersion" | "kind" => {}
                "metadata" => {
                    if let Some(meta) = &meta {
                        self.walk(value, meta, &mut path);
                    }
                }
                _ => {
                    if let Some(node) = &node {
                        self.field(value, node, key, &mut path);
                    }
                }
            }
        }
    }

    fn problem(&mut self, path: &[Step], message: String) {
        self.problems.push(Problem {
            path: path.to_vec(),
            message,
        });
    }

    /// One field of an object of schema `parent`.
    fn field(&mut self, value: &mut Value, parent: &Node, key: &str, path: &mut Vec<Step>) {
        if self.templated.is_some() && is_template(key) {
            return;
        }
        if let Some(node) = parent.properties.get(key) {
            return self.walk(value, node, path);
        }
        if let Some(node) = &parent.additional {
            return self.walk(value, node, path);
        }
        if parent.preserve_unknown
            || (parent.embedded && ["apiVersion", "kind", "metadata"].contains(&key))
        {
            return;
        }
        let names = parent.properties.keys();
        let hint = crate::template::known::closest(key, names)
            .map(|h| format!(" (did you mean `{h}`?)"))
            .unwrap_or_default();
        self.problem(
            path,
            format!(
                "unknown field `{key}`{hint}: the API server refuses a field its kind does not have"
            ),
        );
    }

    /// Shapes `value` to `node`.
    fn walk(&mut self, value: &mut Value, node: &Node, path: &mut Vec<Step>) {
        if value.is_null() {
            return;
        }
        let Some(node) = resolved(node) else {
            return;
        };
        if let (Some(templated), Value::String(s)) = (&mut self.templated, &*value)
            && is_template(s)
        {
            templated.push((path.clone(), takes(&node)));
            return;
        }
        match takes(&node) {
            Takes::Map if !node.properties.is_empty() || node.additional.is_some() => {
                let Some(map) = value.as_object_mut() else {
                    let got = kind_of(value);
                    return self.problem(path, format!("expected a map, got {got}"));
                };
                for (key, v) in map.iter_mut() {
                    path.push(Step::Key(key.clone()));
                    self.field(v, &node, key, path);
                    path.pop();
                }
            }
            Takes::Map => {
                if !value.is_object() && node.ty == Some(Ty::Object) {
                    let got = kind_of(value);
                    self.problem(path, format!("expected a map, got {got}"));
                }
            }
            Takes::List => {
                let Some(items) = value.as_array_mut() else {
                    let got = kind_of(value);
                    return self.problem(path, format!("expected a list, got {got}"));
                };
                let Some(of) = &node.items else {
                    return;
                };
                for (i, item) in items.iter_mut().enumerate() {
                    path.push(Step::Index(i));
                    self.walk(item, of, path);
                    path.pop();
                }
            }
            Takes::Scalar(ty) => {
                if let Err(message) = coerce(value, ty, node.format.as_deref()) {
                    self.problem(path, message);
                }
            }
            Takes::Any => {}
        }
    }
}

/// An integer written the one way it writes itself.
fn integer(s: &str) -> Option<i64> {
    s.parse::<i64>().ok().filter(|n| n.to_string() == s)
}

/// A number written the one way it writes itself.
fn number(s: &str) -> Option<Number> {
    if let Some(n) = integer(s) {
        return Some(n.into());
    }
    let f = s.parse::<f64>().ok()?;
    Number::from_f64(f).filter(|n| n.to_string() == s)
}

/// A whole float as an integer.
fn whole(n: &Number) -> Option<i64> {
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    let f = n.as_f64()?;
    #[allow(
        clippy::cast_possible_truncation,
        reason = "checked to be whole and in range"
    )]
    (f.fract() == 0.0 && f.abs() < 9.0e15).then_some(f as i64)
}

/// `value` as `ty`, when nothing is lost.
pub fn coerce(value: &mut Value, ty: Ty, format: Option<&str>) -> Result<(), String> {
    let shown = |v: &Value| match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    let new = match (ty, &*value) {
        (Ty::String, Value::String(_)) | (Ty::Boolean, Value::Bool(_)) => return Ok(()),
        (Ty::Quantity, Value::String(_) | Value::Number(_)) => return Ok(()),
        (Ty::IntOrString, Value::String(_)) => return Ok(()),
        (Ty::Number, Value::Number(_)) => return Ok(()),
        (Ty::String, Value::Number(_) | Value::Bool(_)) => Value::String(value.to_string()),
        (Ty::Integer | Ty::IntOrString, Value::Number(n)) => match whole(n) {
            Some(i) => Value::from(i),
            None => {
                return Err(format!(
                    "expected an integer, got {n}: it would lose its fraction"
                ));
            }
        },
        (Ty::Integer, Value::String(s)) => match integer(s) {
            Some(i) => Value::from(i),
            None => {
                return Err(format!(
                    "expected an integer, got the string {}",
                    shown(value)
                ));
            }
        },
        (Ty::Number, Value::String(s)) => match number(s) {
            Some(n) => Value::Number(n),
            None => {
                return Err(format!(
                    "expected a number, got the string {}",
                    shown(value)
                ));
            }
        },
        (Ty::Boolean, Value::String(s)) if s == "true" || s == "false" => Value::Bool(s == "true"),
        (ty, v) => {
            let want = match ty {
                Ty::String => "a string",
                Ty::Integer => "an integer",
                Ty::Number => "a number",
                Ty::Boolean => "a boolean",
                Ty::IntOrString => "an integer or a string",
                Ty::Quantity => "a quantity (a string or a number)",
                Ty::Object | Ty::Array => return Ok(()),
            };
            return Err(format!("expected {want}, got {} {}", kind_of(v), shown(v)));
        }
    };
    if format == Some("int32")
        && let Some(i) = new.as_i64()
        && i32::try_from(i).is_err()
    {
        return Err(format!("{i} does not fit in a 32-bit integer"));
    }
    *value = new;
    Ok(())
}
