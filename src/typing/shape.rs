//! The typing pass: a rendered object shaped to its kind's schema. A value
//! takes its field's type when that loses nothing (an integer into a string
//! field becomes `"2"`, `"3"` into an integer field becomes `3`); anything
//! else, and a field the kind does not have, is a [`Problem`].

use std::sync::Arc;

use serde_json::{Number, Value};

use super::builtin;
use super::node::{Node, Ty};
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

/// What the field at `path` of an object of schema `node` takes (`None`:
/// the kind has no such field).
pub fn takes_at(node: &Node, path: &[Step]) -> Option<Takes> {
    fn go(node: &Node, path: &[Step]) -> Option<Takes> {
        let node = resolved(node)?;
        let Some((step, rest)) = path.split_first() else {
            let object = !node.properties.is_empty() || node.additional.is_some();
            return Some(match node.ty {
                Some(Ty::Object) => Takes::Map,
                None if object => Takes::Map,
                Some(Ty::Array) => Takes::List,
                Some(ty) => Takes::Scalar(ty),
                None => Takes::Any,
            });
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
    let mut problems = Vec::new();
    let Some(map) = object.as_object_mut() else {
        return problems;
    };
    let node = resolved(node);
    let meta = builtin::def(builtin::OBJECT_META);
    for (key, value) in map.iter_mut() {
        let mut path = vec![Step::Key(key.clone())];
        match key.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                if let Some(meta) = &meta {
                    walk(value, meta, &mut path, &mut problems);
                }
            }
            _ => {
                if let Some(node) = &node {
                    field(value, node, key, &mut path, &mut problems);
                }
            }
        }
    }
    problems
}

/// One field of an object of schema `parent`.
fn field(
    value: &mut Value,
    parent: &Node,
    key: &str,
    path: &mut Vec<Step>,
    out: &mut Vec<Problem>,
) {
    if let Some(node) = parent.properties.get(key) {
        return walk(value, node, path, out);
    }
    if let Some(node) = &parent.additional {
        return walk(value, node, path, out);
    }
    if parent.preserve_unknown
        || (parent.embedded && ["apiVersion", "kind", "metadata"].contains(&key))
    {
        return;
    }
    let hint = crate::template::known::closest(key, parent.properties.keys().map(String::as_str))
        .map(|h| format!(" (did you mean `{h}`?)"))
        .unwrap_or_default();
    out.push(Problem {
        path: path.clone(),
        message: format!(
            "unknown field `{key}`{hint}: the API server refuses a field its kind does not have"
        ),
    });
}

/// Shapes `value` to `node`.
pub(super) fn walk(value: &mut Value, node: &Node, path: &mut Vec<Step>, out: &mut Vec<Problem>) {
    if value.is_null() {
        return;
    }
    let Some(node) = resolved(node) else {
        return;
    };
    let object = !node.properties.is_empty() || node.additional.is_some();
    match node.ty {
        Some(Ty::Object) | None if object => {
            let Some(map) = value.as_object_mut() else {
                return out.push(Problem {
                    path: path.clone(),
                    message: format!("expected a map, got {}", kind_of(value)),
                });
            };
            for (key, v) in map.iter_mut() {
                path.push(Step::Key(key.clone()));
                field(v, &node, key, path, out);
                path.pop();
            }
        }
        Some(Ty::Array) => {
            let Some(items) = value.as_array_mut() else {
                return out.push(Problem {
                    path: path.clone(),
                    message: format!("expected a list, got {}", kind_of(value)),
                });
            };
            let Some(of) = &node.items else {
                return;
            };
            for (i, item) in items.iter_mut().enumerate() {
                path.push(Step::Index(i));
                walk(item, of, path, out);
                path.pop();
            }
        }
        Some(ty) if ty != Ty::Object => {
            if let Err(message) = coerce(value, ty, node.format.as_deref()) {
                out.push(Problem {
                    path: path.clone(),
                    message,
                });
            }
        }
        _ => {
            if !value.is_object() && node.ty == Some(Ty::Object) {
                out.push(Problem {
                    path: path.clone(),
                    message: format!("expected a map, got {}", kind_of(value)),
                });
            }
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
