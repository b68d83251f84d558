//! A compiled template tree: the shape of a YAML value with every templated
//! string (and templated map key) replaced by a handle to compiled code.

use minijinja::Value as JinjaValue;
use serde_json::{Map, Value};

use super::{CompileError, OUTPUT_BUDGET, RenderError, TemplateId, TemplateSet};
use crate::yaml::{Step, path_string};

/// One string position: copied, evaluated natively, or rendered as text.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// No template syntax: copied as is.
    Literal(String),
    /// Exactly one `{{ expr }}`: the expression's value, with its own type.
    Expr(TemplateId),
    /// Anything else with template syntax: rendered to a string.
    Text(TemplateId),
}

/// A value to render.
#[derive(Debug, Clone, PartialEq)]
pub enum Tree {
    /// A subtree with no templates in it, copied as is.
    Value(Value),
    /// A templated string.
    Str(Piece),
    /// A sequence with templates somewhere inside.
    Seq(Vec<Tree>),
    /// A mapping with templates somewhere inside (keys included).
    Map(Vec<(Piece, Tree)>),
}

/// Whether a string holds template syntax, and which kind.
enum Shape<'a> {
    Literal,
    /// Starts with `{{` and ends with `}}`: one expression if the inside
    /// compiles as one (`{{ a }}-{{ b }}` does not; `{{ {"k": {}} }}` does).
    MaybeExpr(&'a str),
    Text,
}

/// Whether a string holds template syntax (an expression, a statement or
/// a comment).
pub fn is_template(s: &str) -> bool {
    s.contains("{{") || s.contains("{%") || s.contains("{#")
}

fn shape(s: &str) -> Shape<'_> {
    if !is_template(s) {
        return Shape::Literal;
    }
    if let Some(inner) = s.strip_prefix("{{").and_then(|r| r.strip_suffix("}}")) {
        let inner = inner.strip_prefix(['-', '+']).unwrap_or(inner);
        let inner = inner.strip_suffix('-').unwrap_or(inner);
        let blocks = ["{%", "%}", "{#", "#}"].iter().any(|t| inner.contains(t));
        if !blocks && !inner.trim().is_empty() {
            return Shape::MaybeExpr(inner.trim());
        }
    }
    Shape::Text
}

/// A compile error at a path inside the compiled value.
pub type PathError = (Vec<Step>, CompileError);

impl Piece {
    /// Compiles one string found at `path`.
    pub fn compile(
        s: &str,
        path: &[Step],
        name: &str,
        set: &mut TemplateSet,
    ) -> Result<Self, PathError> {
        let result = match shape(s) {
            Shape::Literal => return Ok(Self::Literal(s.to_string())),
            Shape::MaybeExpr(expr) => match set.add_expr(name, expr) {
                Ok(id) => Ok(Self::Expr(id)),
                Err(_) => set.add_text(name, s).map(Self::Text),
            },
            Shape::Text => set.add_text(name, s).map(Self::Text),
        };
        result.map_err(|e| (path.to_vec(), e))
    }

    /// Renders to a JSON value (`Expr` keeps its type).
    pub fn render(
        &self,
        set: &TemplateSet,
        ctx: &JinjaValue,
        budget: &mut Budget,
    ) -> Result<Value, RenderError> {
        match self {
            Self::Literal(s) => Ok(Value::String(s.clone())),
            Self::Expr(id) => set.eval(id, ctx, budget),
            Self::Text(id) => set.render_text(id, ctx, budget).map(Value::String),
        }
    }

    /// Renders to a string (for names, namespaces and map keys): scalars are
    /// written out, lists and maps are an error.
    pub fn render_string(
        &self,
        set: &TemplateSet,
        ctx: &JinjaValue,
        budget: &mut Budget,
    ) -> Result<String, RenderError> {
        match self.render(set, ctx, budget)? {
            Value::String(s) => Ok(s),
            v @ (Value::Number(_) | Value::Bool(_)) => Ok(v.to_string()),
            other => Err(RenderError::new(
                self.template().map_or("", TemplateId::path),
                format!("expected a string, got {}", kind_of(&other)),
            )),
        }
    }

    /// The compiled template, if any.
    pub fn template(&self) -> Option<&TemplateId> {
        match self {
            Self::Literal(_) => None,
            Self::Expr(id) | Self::Text(id) => Some(id),
        }
    }
}

impl Tree {
    /// Compiles a value whose string scalars may be templates. `path` is
    /// where the value sits in the rule; every problem is collected.
    pub fn compile(
        value: &Value,
        path: &mut Vec<Step>,
        set: &mut TemplateSet,
        errors: &mut Vec<PathError>,
    ) -> Self {
        match value {
            Value::String(s) => match Piece::compile(s, path, &path_string(path), set) {
                Ok(Piece::Literal(s)) => Self::Value(Value::String(s)),
                Ok(piece) => Self::Str(piece),
                Err(e) => {
                    errors.push(e);
                    Self::Value(Value::Null)
                }
            },
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    path.push(Step::Index(i));
                    out.push(Self::compile(item, path, set, errors));
                    path.pop();
                }
                if out.iter().all(|t| matches!(t, Self::Value(_))) {
                    return Self::Value(value.clone());
                }
                Self::Seq(out)
            }
            Value::Object(map) => {
                let mut out = Vec::with_capacity(map.len());
                for (k, v) in map {
                    path.push(Step::Key(k.clone()));
                    let name = format!("{} (key)", path_string(path));
                    let key = Piece::compile(k, path, &name, set).unwrap_or_else(|e| {
                        errors.push(e);
                        Piece::Literal(k.clone())
                    });
                    out.push((key, Self::compile(v, path, set, errors)));
                    path.pop();
                }
                if out
                    .iter()
                    .all(|(k, v)| matches!(k, Piece::Literal(_)) && matches!(v, Self::Value(_)))
                {
                    return Self::Value(value.clone());
                }
                Self::Map(out)
            }
            other => Self::Value(other.clone()),
        }
    }

    /// Renders the tree against a context.
    pub fn render(
        &self,
        set: &TemplateSet,
        ctx: &JinjaValue,
        budget: &mut Budget,
    ) -> Result<Value, RenderError> {
        match self {
            Self::Value(v) => Ok(v.clone()),
            Self::Str(piece) => piece.render(set, ctx, budget),
            Self::Seq(items) => items
                .iter()
                .map(|t| t.render(set, ctx, budget))
                .collect::<Result<_, _>>()
                .map(Value::Array),
            Self::Map(entries) => {
                let mut map = Map::with_capacity(entries.len());
                for (k, v) in entries {
                    let key = k.render_string(set, ctx, budget)?;
                    let value = v.render(set, ctx, budget)?;
                    if map.insert(key.clone(), value).is_some() {
                        let at = k.template().map_or("", TemplateId::path);
                        return Err(RenderError::new(at, format!("two keys render to `{key}`")));
                    }
                }
                Ok(Value::Object(map))
            }
        }
    }

    /// Every compiled template in the tree, in document order.
    pub fn templates(&self) -> Vec<&TemplateId> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a TemplateId>) {
        match self {
            Self::Value(_) => {}
            Self::Str(p) => out.extend(p.template()),
            Self::Seq(items) => items.iter().for_each(|t| t.collect(out)),
            Self::Map(entries) => entries.iter().for_each(|(k, v)| {
                out.extend(k.template());
                v.collect(out);
            }),
        }
    }

    /// The literal value at a key of a mapping tree, if it is literal there.
    pub fn literal_at(&self, key: &str) -> Option<&Value> {
        match self {
            Self::Value(Value::Object(m)) => m.get(key),
            Self::Map(entries) => entries.iter().find_map(|(k, v)| match (k, v) {
                (Piece::Literal(k), Self::Value(v)) if k == key => Some(v),
                _ => None,
            }),
            _ => None,
        }
    }
}

/// `value` without the fields that rendered none: a field left out (in
/// maps at any depth; an item of a list stays, as its place counts).
pub fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

/// The name of a JSON value's type, for messages.
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

/// How many bytes of rendered strings one primary may still produce.
#[derive(Debug, Clone)]
pub struct Budget {
    used: usize,
    limit: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            used: 0,
            limit: OUTPUT_BUDGET,
        }
    }
}

impl Budget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self { used: 0, limit }
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.limit.saturating_sub(self.used)
    }

    /// Spends `n` bytes, failing once the budget is exceeded.
    pub fn charge(&mut self, path: &str, n: usize) -> Result<(), RenderError> {
        self.used = self.used.saturating_add(n);
        if self.used > self.limit {
            Err(self.exhausted(path))
        } else {
            Ok(())
        }
    }

    /// The error for an exhausted budget.
    pub fn exhausted(&self, path: &str) -> RenderError {
        RenderError::new(
            path,
            format!("rendered output exceeds the limit of {} bytes", self.limit),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn compile(v: Value) -> (Tree, TemplateSet) {
        let mut set = TemplateSet::new();
        let mut errors = Vec::new();
        let tree = Tree::compile(&v, &mut Vec::new(), &mut set, &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        (tree, set)
    }

    fn render(template: Value, ctx: Value) -> Result<Value, RenderError> {
        let (tree, set) = compile(template);
        tree.render(&set, &super::super::to_jinja(&ctx), &mut Budget::default())
    }

    #[test]
    fn a_lone_expression_keeps_its_native_type() {
        let ctx = json!({"self": {"spec": {
            "replicas": 3, "ratio": 0.5, "on": true, "tags": ["a", "b"], "cfg": {"k": "v"}, "none": null, "name": "web"
        }}});
        let cases = [
            ("{{ self.spec.replicas }}", json!(3)),
            ("{{ self.spec.ratio }}", json!(0.5)),
            ("{{ self.spec.on }}", json!(true)),
            ("{{ self.spec.tags }}", json!(["a", "b"])),
            ("{{ self.spec.cfg }}", json!({"k": "v"})),
            ("{{ self.spec.none }}", json!(null)),
            ("{{ self.spec.replicas + 1 }}", json!(4)),
            ("{{- self.spec.replicas -}}", json!(3)),
            ("{{ self.spec.name }}", json!("web")),
            ("{{ self.spec.replicas | string }}", json!("3")),
            (r#"{{ {"a": {"b": 1}}["a"] }}"#, json!({"b": 1})),
        ];
        for (template, want) in cases {
            assert_eq!(
                render(json!(template), ctx.clone()).unwrap(),
                want,
                "{template}"
            );
        }
    }

    #[test]
    fn mixed_strings_stay_strings() {
        let ctx = json!({"self": {"spec": {"replicas": 3, "name": "web"}}});
        for (template, want) in [
            ("r{{ self.spec.replicas }}", "r3"),
            ("{{ self.spec.replicas }} ", "3 "),
            ("{{ self.spec.name }}-{{ self.spec.replicas }}", "web-3"),
            ("{{ self.spec.name }}{{ self.spec.replicas }}", "web3"),
            ("{% if self.spec.replicas > 1 %}many{% endif %}", "many"),
            ("plain", "plain"),
        ] {
            assert_eq!(
                render(json!(template), ctx.clone()).unwrap(),
                json!(want),
                "{template}"
            );
        }
    }

    #[test]
    fn nested_trees_and_templated_keys() {
        let ctx = json!({"self": {"metadata": {"name": "web"}, "spec": {"port": 80}}});
        let out = render(
            json!({"metadata": {"name": "{{ self.metadata.name }}-svc", "labels": {"app": "x"}},
                   "spec": {"ports": [{"port": "{{ self.spec.port }}"}]},
                   "data": {"{{ self.metadata.name }}.conf": "yes"}}),
            ctx,
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"name": "web-svc", "labels": {"app": "x"}},
                   "spec": {"ports": [{"port": 80}]}, "data": {"web.conf": "yes"}})
        );
    }

    #[test]
    fn undefined_is_an_error_that_names_the_path_unless_defaulted() {
        let ctx = json!({"self": {"spec": {}}});
        let err = render(json!({"a": "{{ self.spec.image.tag }}"}), ctx.clone()).unwrap_err();
        assert_eq!(err.path, "a");
        assert_eq!(
            err.message,
            "undefined value: `self.spec.image.tag` is undefined"
        );
        let err = render(json!({"b": "image-{{ self.spec.image }}"}), ctx.clone()).unwrap_err();
        assert_eq!(err.path, "b");
        assert_eq!(
            err.message,
            "undefined value: `self.spec.image` is undefined"
        );
        assert_eq!(
            render(
                json!("{{ self.spec.image | default('nginx') }}"),
                ctx.clone()
            )
            .unwrap(),
            json!("nginx")
        );
        // Lookups chain, so a child that does not exist yet can be defaulted.
        let chained = json!("{{ children.db.status.ready | default(false) }}");
        assert_eq!(
            render(chained, json!({"children": {}})).unwrap(),
            json!(false)
        );
        let test = json!("{{ 'yes' if children.db.status is defined else 'no' }}");
        assert_eq!(render(test, json!({"children": {}})).unwrap(), json!("no"));
    }

    #[test]
    fn runaway_templates_stop_cleanly() {
        let err = render(
            json!("{% for i in range(100000) %}{% for j in range(100) %}{% endfor %}{% endfor %}"),
            json!({}),
        )
        .unwrap_err();
        assert!(err.message.contains("ran out of fuel"), "{}", err.message);
        let (tree, set) = compile(json!("{{ 'x' * 5000 }}"));
        let err = tree
            .render(
                &set,
                &super::super::to_jinja(&json!({})),
                &mut Budget::new(1000),
            )
            .unwrap_err();
        assert!(
            err.message.contains("exceeds the limit of 1000 bytes"),
            "{}",
            err.message
        );
        let (tree, set) = compile(json!("text {{ 'x' * 5000 }}"));
        let err = tree
            .render(
                &set,
                &super::super::to_jinja(&json!({})),
                &mut Budget::new(1000),
            )
            .unwrap_err();
        assert!(err.message.contains("exceeds the limit"), "{}", err.message);
    }

    #[test]
    fn templates_cannot_reach_outside_their_context() {
        for probe in [
            "{% include '/etc/passwd' %}",
            "{{ env }}",
            "{{ self.__class__ }}",
        ] {
            assert!(
                render(json!(probe), json!({"self": {}})).is_err(),
                "{probe} rendered"
            );
        }
    }

    #[test]
    fn compile_errors_point_into_the_expression() {
        let mut set = TemplateSet::new();
        let mut errors = Vec::new();
        Tree::compile(
            &json!({"a": ["{{ self.spec. }}"]}),
            &mut Vec::new(),
            &mut set,
            &mut errors,
        );
        assert_eq!(errors.len(), 1);
        assert_eq!(path_string(&errors[0].0), "a[0]");
        assert!(
            errors[0].1.message.starts_with("syntax error"),
            "{}",
            errors[0].1.message
        );
    }
}
