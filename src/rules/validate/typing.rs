//! Each child's template against its kind's schema (`crate::typing`):
//! fields the kind does not have, literals that cannot take their field's
//! type, values read from the primary's spec that cannot either, and
//! immutable fields a template may change (a warning).

use super::*;
use crate::template::tree::is_template;
use crate::typing::shape::{Takes, takes_at};
use crate::typing::{Node, Typing};

/// The paths of the values that are one expression (`{{ expr }}`, which
/// keeps its type), as compiled.
fn expressions(tree: &Tree, path: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match tree {
        Tree::Str(Piece::Expr(_)) => out.push(path.clone()),
        Tree::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(Step::Index(i));
                expressions(item, path, out);
                path.pop();
            }
        }
        Tree::Map(entries) => {
            for (k, v) in entries {
                if let Piece::Literal(k) = k {
                    path.push(key(k));
                    expressions(v, path, out);
                    path.pop();
                }
            }
        }
        Tree::Value(_) | Tree::Str(_) => {}
    }
}

/// The expression of a template that is one `{{ expr }}`.
fn whole_expression(s: &str) -> &str {
    let inner = s.trim();
    let inner = inner.strip_prefix("{{").unwrap_or(inner);
    let inner = inner.strip_suffix("}}").unwrap_or(inner);
    inner.trim_matches(['-', '+']).trim()
}

/// `self.spec.a.b` → `spec`, `a`, `b`.
fn self_path(expr: &str) -> Option<Vec<Step>> {
    let rest = expr.strip_prefix("self.")?;
    let simple =
        |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let parts: Vec<&str> = rest.split('.').collect();
    parts
        .iter()
        .all(|p| simple(p))
        .then(|| parts.iter().map(|p| key(p)).collect())
}

fn takes(t: Takes) -> &'static str {
    match t {
        Takes::Map => "a map",
        Takes::List => "a list",
        Takes::Scalar(Ty::Boolean) => "a boolean",
        Takes::Scalar(Ty::String) => "a string",
        Takes::Scalar(Ty::Quantity) => "a quantity",
        Takes::Scalar(Ty::IntOrString) => "an integer or a string",
        Takes::Scalar(Ty::Integer) => "an integer",
        Takes::Scalar(_) => "a number",
        Takes::Any => "anything",
    }
}

use crate::typing::node::Ty;

/// Why a value of shape `from` cannot go into a field taking `to`.
fn mismatch(from: Takes, to: Takes) -> bool {
    let numeric = |t: Ty| matches!(t, Ty::Integer | Ty::Number | Ty::IntOrString | Ty::Quantity);
    match (from, to) {
        (Takes::Any, _) | (_, Takes::Any) => false,
        (Takes::Scalar(a), Takes::Scalar(b)) => {
            (a == Ty::Boolean && numeric(b))
                || (numeric(a) && a != Ty::IntOrString && b == Ty::Boolean)
        }
        (a, b) => std::mem::discriminant(&a) != std::mem::discriminant(&b),
    }
}

/// What a template may read that changes while its primary lives.
const CHANGING: &[&str] = &[
    "self.spec",
    "self.status",
    "self.metadata.labels",
    "self.metadata.annotations",
    "related",
    "children",
    "vars",
    "item",
    "ready",
    "now(",
];

fn may_change(v: &Value) -> bool {
    let text = |s: &str| is_template(s) && CHANGING.iter().any(|w| s.contains(w));
    match v {
        Value::String(s) => text(s),
        Value::Array(items) => items.iter().any(may_change),
        Value::Object(map) => map.iter().any(|(k, v)| text(k) || may_change(v)),
        _ => false,
    }
}

/// The value at `path` in `value`.
fn at_path_text<'v>(value: &'v Value, path: &[Step]) -> &'v str {
    at(value, path).and_then(Value::as_str).unwrap_or_default()
}

/// The value at `path` in `value`.
fn at<'v>(value: &'v Value, path: &[Step]) -> Option<&'v Value> {
    path.iter().try_fold(value, |v, step| match step {
        Step::Key(k) => v.get(k),
        Step::Index(i) => v.get(i),
    })
}

impl Checker<'_> {
    /// Types every child's template by its kind's schema; records on each
    /// child its schema and where its templated values are written.
    pub(super) fn type_children(&mut self, children: &mut [Child], primary: Option<&Value>) {
        let primary = primary.map(Node::from_openapi);
        let raw = self.raw;
        for (i, c) in raw.spec.children.iter().enumerate() {
            let Some(child) = children.iter_mut().find(|ch| ch.id == c.id) else {
                continue;
            };
            let g = &child.gvk;
            let typing = Typing::of(&g.group, &g.version, &g.kind, self.crds);
            let Some(node) = typing.node() else {
                continue;
            };
            let at = vec![
                key("spec"),
                key("children"),
                Step::Index(i),
                key("template"),
            ];
            let typed = crate::typing::shape::template(&c.template, node);
            let mut exprs = Vec::new();
            expressions(&child.template, &mut Vec::new(), &mut exprs);
            self.type_template(
                &at,
                &c.template,
                node,
                primary.as_ref(),
                (&typed, &exprs),
                g,
            );
            child.typed_at = typed
                .templated
                .into_iter()
                .map(|(path, _)| {
                    let pos = self.doc.node.locate(&[at.as_slice(), &path].concat());
                    (path, pos)
                })
                .collect();
            child.typing = typing;
        }
    }

    fn type_template(
        &mut self,
        at: &[Step],
        template: &Value,
        node: &Node,
        primary: Option<&Node>,
        (typed, exprs): (&crate::typing::shape::Template, &[Vec<Step>]),
        gvk: &Gvk,
    ) {
        // metadata that is no map is said already (`child_metadata`).
        for p in typed
            .problems
            .iter()
            .filter(|p| p.path != [key("metadata")])
        {
            self.error(&[at, &p.path].concat(), format!("{gvk}: {}", p.message));
        }
        for (path, to) in &typed.templated {
            let to = *to;
            let field = || path_string(path);
            if !exprs.contains(path) {
                if matches!(to, Takes::Map | Takes::List) {
                    let why = format!(
                        "{gvk}: `{}` takes {}, but this template renders text: write the {} in YAML, with templates in its values",
                        field(),
                        takes(to),
                        if to == Takes::Map { "map" } else { "list" }
                    );
                    self.error(&[at, path].concat(), why);
                }
                continue;
            }
            let text = at_path_text(template, path);
            let expr = whole_expression(text);
            let from = self_path(expr)
                .zip(primary)
                .and_then(|(p, n)| takes_at(n, &p));
            if let Some(from) = from.filter(|f| mismatch(*f, to)) {
                let fix = match (from, to) {
                    (Takes::Map | Takes::List, Takes::Scalar(Ty::String)) => {
                        format!(": write it as text with `{{{{ {expr} | tojson }}}}`")
                    }
                    _ => String::new(),
                };
                let why = format!(
                    "{gvk}: `{}` takes {}, but `{expr}` is {} in the primary's schema{fix}",
                    field(),
                    takes(to),
                    takes(from)
                );
                self.error(&[at, path].concat(), why);
            }
        }
        for (path, value) in crate::typing::immutable::fields(node, template) {
            if may_change(value) {
                let why = format!(
                    "{gvk}: `{}` is immutable, and its template reads values that can change: the API server will refuse every change of it (recreate the child to change it)",
                    path_string(&path)
                );
                self.warnings
                    .push(self.doc.diagnostic(&[at, &path].concat(), why).as_warning());
            }
        }
    }
}
