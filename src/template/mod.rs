//! Typed templates: a YAML tree whose string scalars are minijinja templates.
//!
//! A scalar that is exactly one `{{ expr }}` keeps the expression's native
//! type (number, bool, list, map, null); any other string with template
//! syntax renders to a string; everything else is copied as is. Nothing is
//! rendered to text and parsed back.
//!
//! Each rule owns one [`TemplateSet`]: every template and expression of the
//! rule is compiled into it once, at validation, under the name of its path in
//! the rule (so errors name that path). Rendering is strict where it
//! matters: writing an undefined value into the output, or an expression
//! that evaluates to undefined, is an error naming the expression. Lookups
//! chain, so `children.db.status.ready | default(false)` and
//! `x.y is defined` work even while `children.db` does not exist yet.
//! Rendering is bounded by fuel, an output budget and the [`limits`] on the
//! values a template builds; each evaluation runs on a big stack of its own,
//! so a runaway template fails for its object, never for the process. Templates
//! have no loader and no functions that reach files, the environment or the
//! network. The one function that is not pure, `random_secret(n)`, works
//! only in a child's template rendered for a child that does not exist yet
//! ([`generate`]). `now()` reads the instant the render was given, not the
//! clock ([`time`]).

mod collections;
pub mod cron;
mod filters;
pub mod generate;
pub mod image;
mod inline_if;
pub mod known;
pub mod limits;
pub mod time;
pub mod tree;
mod undefined;

use std::collections::{BTreeSet, HashMap};
use std::io::Write;

use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, ErrorKind, UndefinedBehavior, Value as JinjaValue};
use serde_json::Value;

pub use tree::{Budget, Piece, Tree};

/// Instructions one template evaluation may execute.
pub const FUEL: u64 = 200_000;
/// Bytes all rendered strings of one primary may add up to.
pub const OUTPUT_BUDGET: usize = 2 * 1024 * 1024;
/// Depth of macro calls, includes and recursive loops (minijinja counts a
/// macro call as 4).
pub const RECURSION_LIMIT: usize = 64;

/// Where a template sits in its rule, e.g. `spec.children[0].template.spec.replicas`.
pub type TemplatePath = String;

/// Name of the variable native-typed expressions are captured in.
const CAPTURE: &str = "__kiln_value";

/// A template that did not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CompileError {
    /// What minijinja said.
    pub message: String,
}

/// A template that failed for one set of inputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct RenderError {
    /// The template's path in its rule.
    pub path: TemplatePath,
    /// What went wrong, e.g. "undefined value: `self.spec.image` is undefined".
    pub message: String,
}

impl RenderError {
    /// An error at `path`.
    pub fn new(path: &str, message: impl Into<String>) -> Self {
        Self {
            path: path.to_string(),
            message: message.into(),
        }
    }
}

/// A handle to one compiled template or expression in a [`TemplateSet`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateId {
    /// Where it is written in its rule.
    path: TemplatePath,
    /// The name its compiled code is kept under: the path of the first
    /// template of the set with the same text.
    name: TemplatePath,
}

impl TemplateId {
    /// The template's path in its rule.
    pub fn path(&self) -> &str {
        &self.path
    }
}

/// The compiled templates of one rule.
pub struct TemplateSet {
    env: Environment<'static>,
    /// The names of the filters registered, for "did you mean" hints.
    filters: &'static [&'static str],
    /// The name each text is compiled under: a text written several times
    /// in a rule (`{{ self.metadata.name }}` in a name, a label and a
    /// selector) is compiled once. minijinja sizes each compiled template
    /// for 256 instructions, about 12 KiB however short it is.
    compiled: HashMap<String, TemplatePath>,
}

impl std::fmt::Debug for TemplateSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemplateSet").finish_non_exhaustive()
    }
}

impl Default for TemplateSet {
    fn default() -> Self {
        Self::new()
    }
}

/// kiln's environment without templates, and its filters' names: built
/// once per process. Each set starts from a clone of it, which shares its
/// tables of filters, tests and functions (minijinja copies them only when
/// one is added to). Built per set, they were about 33 KiB of each rule's
/// heap, more than its templates.
fn base() -> &'static (Environment<'static>, Vec<&'static str>) {
    static BASE: std::sync::OnceLock<(Environment<'static>, Vec<&'static str>)> =
        std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Chainable);
        env.set_formatter(|out, state, value| {
            if value.is_undefined() {
                return Err(minijinja::Error::new(
                    ErrorKind::UndefinedError,
                    "undefined value in output",
                ));
            }
            limits::check(value, "a value written out")?;
            minijinja::escape_formatter(out, state, value)
        });
        env.set_fuel(Some(FUEL));
        env.set_recursion_limit(RECURSION_LIMIT);
        env.set_debug(true);
        // A block scalar's final newline is part of its value, templated or not.
        if let Ok(syntax) = SyntaxConfig::builder().keep_trailing_newline(true).build() {
            env.set_syntax(syntax);
        }
        // Templates render YAML values, not HTML.
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        let filters = filters::register(&mut env);
        env.set_unknown_method_callback(collections::method);
        env.add_function("random_secret", generate::random_secret);
        env.add_function("seeded_string", generate::seeded_string);
        time::register(&mut env);
        (env, filters)
    })
}

impl TemplateSet {
    /// An empty set with kiln's filters, strict undefined and fuel.
    pub fn new() -> Self {
        let (env, filters) = base();
        Self {
            env: env.clone(),
            filters,
            compiled: HashMap::new(),
        }
    }

    /// Compiles a string template (rendered to a string).
    pub fn add_text(&mut self, path: &str, source: &str) -> Result<TemplateId, CompileError> {
        self.add(path, source.to_string(), 0, source.len())
    }

    /// Compiles an expression (evaluated to a native value).
    pub fn add_expr(&mut self, path: &str, expr: &str) -> Result<TemplateId, CompileError> {
        let prefix = format!("{{% set {CAPTURE} = (");
        let wrapped = format!("{prefix}{expr}\n) %}}");
        self.add(path, wrapped, prefix.len(), expr.len())
    }

    /// Adds `source` under `path`; the user's text is `len` bytes starting at
    /// `offset` (expressions are wrapped to capture their value).
    fn add(
        &mut self,
        path: &str,
        source: String,
        offset: usize,
        len: usize,
    ) -> Result<TemplateId, CompileError> {
        if let Some(name) = self.compiled.get(&source) {
            return Ok(TemplateId {
                path: path.to_string(),
                name: name.clone(),
            });
        }
        // Another text compiled at this path keeps its code (templates
        // sharing it may render it): this one gets a name of its own.
        let mut name = path.to_string();
        while self.compiled.values().any(|n| *n == name) {
            name.push('\'');
        }
        let add = |env: &mut Environment<'static>, text: String| {
            env.add_template_owned(name.clone(), text)
        };
        add(&mut self.env, source.clone()).map_err(|e| {
            let kind = e.kind();
            let detail = e.detail().unwrap_or_default();
            let message = match e.range().map(|r| r.start.saturating_sub(offset)) {
                // The parser tripped over the wrapper: the user's text ended early.
                Some(at) if at >= len => format!("{kind}: the expression is incomplete"),
                Some(at) => format!("{kind}: {detail} (at character {})", at + 1),
                None => format!("{kind}: {detail}"),
            };
            CompileError { message }
        })?;
        if let Some(completed) = inline_if::complete(&source) {
            add(&mut self.env, completed).map_err(|e| CompileError {
                message: e.to_string(),
            })?;
        }
        let user = source.get(offset..offset + len).unwrap_or_default();
        for expr in collections::each_literals(user) {
            if let Err(e) = self.env.compile_expression(&expr) {
                let detail = e.detail().unwrap_or_default();
                let message = format!("each: `{expr}` is not an expression: {detail}");
                return Err(CompileError { message });
            }
        }
        self.compiled.insert(source, name.clone());
        Ok(TemplateId {
            path: path.to_string(),
            name,
        })
    }

    /// The variables a template reads, as dotted paths (`self.spec.image`,
    /// `related.credentials`), for checking references at validation.
    pub fn references(&self, id: &TemplateId) -> BTreeSet<String> {
        let Ok(template) = self.env.get_template(&id.name) else {
            return BTreeSet::new();
        };
        // minijinja scopes each branch of an `if` on its own: a variable set
        // in both branches and read after the `if` counts as undeclared.
        let stored = known::stored_locals(&template);
        template
            .undeclared_variables(true)
            .into_iter()
            .filter(|v| !stored.contains(v.split('.').next().unwrap_or(v)))
            .collect()
    }

    /// The paths a template reads of `self` (`self.metadata.name`; a path
    /// cut at `[` or anything but a name ends with it, and a bare `self` is
    /// `self`), found in its source: minijinja does not count `self` among
    /// the variables a template reads.
    pub fn self_paths(&self, id: &TemplateId) -> BTreeSet<String> {
        let Ok(template) = self.env.get_template(&id.name) else {
            return BTreeSet::new();
        };
        let source = template.source();
        let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let mut out = BTreeSet::new();
        for (at, _) in source.match_indices("self") {
            let before = source[..at].chars().next_back();
            if before.is_some_and(|c| is_name(c) || c == '.') {
                continue;
            }
            let rest = &source[at + 4..];
            if rest.chars().next().is_some_and(is_name) {
                continue;
            }
            let len = rest
                .find(|c: char| !(is_name(c) || c == '.'))
                .unwrap_or(rest.len());
            let mut path = format!("self{}", rest[..len].trim_end_matches('.'));
            if rest[len..].starts_with('[') {
                path.push('[');
            }
            out.insert(path);
        }
        out
    }

    /// Renders a string template, charging its length to `budget`.
    pub fn render_text(
        &self,
        id: &TemplateId,
        ctx: &JinjaValue,
        budget: &mut Budget,
    ) -> Result<String, RenderError> {
        let limit = budget.remaining();
        let out = limits::on_render_stack(|| {
            let tmpl = self
                .env
                .get_template(&id.name)
                .map_err(|e| to_render_error(&id.path, "", &e))?;
            let mut out = LimitedWriter {
                buf: Vec::new(),
                limit,
            };
            match tmpl.render_captured_to(ctx.clone(), &mut out) {
                Ok(_) => Ok(Ok(out.buf)),
                Err(_) if out.buf.len() >= out.limit => Ok(Err(())),
                Err(e) => Err(to_render_error(&id.path, tmpl.source(), &e)),
            }
        })?
        .map_err(|()| budget.exhausted(&id.path))?;
        budget.charge(&id.path, out.len())?;
        String::from_utf8(out).map_err(|_| RenderError::new(&id.path, "rendered invalid UTF-8"))
    }

    /// Evaluates an expression to a JSON value.
    pub fn eval(
        &self,
        id: &TemplateId,
        ctx: &JinjaValue,
        budget: &mut Budget,
    ) -> Result<Value, RenderError> {
        let json = limits::on_render_stack(|| {
            let value = self.eval_native(id, ctx)?;
            limits::check(&value, "the result").map_err(|e| to_render_error(&id.path, "", &e))?;
            serde_json::to_value(&value).map_err(|e| {
                RenderError::new(
                    &id.path,
                    format!("result is not representable as JSON: {e}"),
                )
            })
        })?;
        budget.charge(&id.path, approximate_size(&json))?;
        Ok(json)
    }

    /// Evaluates an expression for its truth (`when`, `readyWhen`).
    pub fn eval_bool(&self, id: &TemplateId, ctx: &JinjaValue) -> Result<bool, RenderError> {
        limits::on_render_stack(|| Ok(self.eval_native(id, ctx)?.is_true()))
    }

    fn eval_native(&self, id: &TemplateId, ctx: &JinjaValue) -> Result<JinjaValue, RenderError> {
        let tmpl = self
            .env
            .get_template(&id.name)
            .map_err(|e| to_render_error(&id.path, "", &e))?;
        let captured = tmpl
            .render_captured(ctx.clone())
            .map_err(|e| to_render_error(&id.path, tmpl.source(), &e))?;
        let value = captured
            .state()
            .lookup(CAPTURE)
            .unwrap_or(JinjaValue::UNDEFINED);
        if value.is_undefined() {
            let expr = tmpl
                .source()
                .split_once(" = (")
                .map_or("", |(_, rest)| rest.trim_end_matches("\n) %}").trim());
            return Err(RenderError::new(
                &id.path,
                format!("undefined value: `{expr}` is undefined"),
            ));
        }
        Ok(value)
    }
}

/// Converts a JSON value into a template value.
pub fn to_jinja(value: &Value) -> JinjaValue {
    JinjaValue::from(minijinja::value::Serde(value))
}

fn to_render_error(path: &str, source: &str, e: &minijinja::Error) -> RenderError {
    let message = match (e.kind(), e.detail()) {
        (ErrorKind::OutOfFuel, _) => {
            format!("template ran out of fuel ({FUEL} steps): a loop or recursion too large")
        }
        (ErrorKind::InvalidOperation, Some("recursion limit exceeded")) => format!(
            "recursion limit exceeded: macro calls, includes and recursive loops nest at most {RECURSION_LIMIT} deep (a macro call counts 4)"
        ),
        (ErrorKind::UndefinedError, detail) => undefined::message(source, e.range(), detail),
        (kind, Some(detail)) => format!("{kind}: {detail}"),
        (kind, None) => kind.to_string(),
    };
    RenderError::new(path, message)
}

fn approximate_size(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        Value::Array(a) => a.iter().map(approximate_size).sum::<usize>() + 1,
        Value::Object(m) => {
            m.iter()
                .map(|(k, v)| k.len() + approximate_size(v))
                .sum::<usize>()
                + 1
        }
        _ => 8,
    }
}

/// A writer that refuses to grow past a limit, so a runaway template stops
/// instead of filling memory.
struct LimitedWriter {
    buf: Vec<u8>,
    limit: usize,
}

impl Write for LimitedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > self.limit {
            self.buf.resize(self.limit, 0);
            return Err(std::io::Error::other("output budget exhausted"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! Hostile templates: each must fail with an error naming its limit.
    use super::*;

    fn text(src: &str) -> Result<String, RenderError> {
        text_with(src, serde_json::json!({}))
    }

    fn text_with(src: &str, ctx: serde_json::Value) -> Result<String, RenderError> {
        let mut set = TemplateSet::new();
        let id = set.add_text("t", src).expect("compiles");
        set.render_text(&id, &to_jinja(&ctx), &mut Budget::default())
    }

    fn expr(src: &str) -> Result<Value, RenderError> {
        let mut set = TemplateSet::new();
        let id = set.add_expr("t", src).expect("compiles");
        set.eval(
            &id,
            &to_jinja(&serde_json::json!({})),
            &mut Budget::default(),
        )
    }

    fn fails_with(result: Result<impl std::fmt::Debug, RenderError>, needle: &str) {
        let err = result.expect_err("a hostile template must fail");
        assert!(err.message.contains(needle), "{err}");
    }

    fn eval_with(src: &str, ctx: serde_json::Value) -> Result<Value, RenderError> {
        let mut set = TemplateSet::new();
        let id = set.add_expr("t", src).expect("compiles");
        set.eval(&id, &to_jinja(&ctx), &mut Budget::default())
    }

    #[test]
    fn a_variable_set_in_both_branches_of_an_if_is_declared() {
        let mut set = TemplateSet::new();
        let id = set
            .add_text(
                "t",
                "{% if self.a %}{% set port = 1 %}{% else %}{% set port = 2 %}{% endif %}{{ port }}-{{ related.x }}",
            )
            .unwrap();
        let refs: Vec<String> = set.references(&id).into_iter().collect();
        assert_eq!(refs, ["related.x"]);
    }

    #[test]
    fn an_inline_if_without_else_writes_nothing_when_false() {
        let ctx = serde_json::json!({"xs": ["a", "b", "c"], "f": false});
        let src = "{% for x in xs %}{{ x }}{{ ',' if not loop.last }}{% endfor %}";
        assert_eq!(text_with(src, ctx.clone()).unwrap(), "a,b,c");
        assert_eq!(
            eval_with("'x' if f", ctx.clone()).unwrap(),
            serde_json::json!("")
        );
        assert_eq!(
            eval_with("'x' if not f", ctx).unwrap(),
            serde_json::json!("x")
        );
    }

    #[test]
    fn a_text_written_twice_is_compiled_once_and_each_place_keeps_its_path() {
        let mut set = TemplateSet::new();
        let a = set.add_text("a", "{{ x }}-{{ y }}").unwrap();
        let b = set.add_text("b", "{{ x }}-{{ y }}").unwrap();
        assert_eq!(set.env.templates().count(), 1, "one compiled copy");
        let only_x = to_jinja(&serde_json::json!({"x": 1}));
        let err = set
            .render_text(&b, &only_x, &mut Budget::default())
            .unwrap_err();
        assert_eq!(err.path, "b");
        // Another text at a path already used: both render their own.
        let c = set.add_text("a", "{{ y }}").unwrap();
        let both = to_jinja(&serde_json::json!({"x": 1, "y": 2}));
        let render = |id| set.render_text(id, &both, &mut Budget::default());
        assert_eq!(render(&a).unwrap(), "1-2");
        assert_eq!(render(&b).unwrap(), "1-2");
        assert_eq!(render(&c).unwrap(), "2");
    }

    #[test]
    fn a_template_keeps_its_final_newline() {
        assert_eq!(text("a: {{ 1 }}\nb: 2\n").unwrap(), "a: 1\nb: 2\n");
        assert_eq!(text("{{ 1 }}\n\n").unwrap(), "1\n\n");
        assert_eq!(text("{{ 1 }}").unwrap(), "1");
    }

    #[test]
    fn self_paths_are_found_in_the_source() {
        let mut set = TemplateSet::new();
        let id = set
            .add_text("t", "{{ self.metadata.name }}-{{ self.spec.x | lower }}-{{ myself.a }}-{{ self['k'] }}-{{ self }}")
            .unwrap();
        let paths: Vec<String> = set.self_paths(&id).into_iter().collect();
        assert_eq!(
            paths,
            ["self", "self.metadata.name", "self.spec.x", "self["]
        );
    }

    #[test]
    fn each_builds_a_list_from_a_list_with_an_expression() {
        let ctx = serde_json::json!({"self": {"metadata": {"name": "web"}, "spec": {"ports": [80, 443]}}});
        let got = eval_with(
            "self.spec.ports | each(\"{'name': self.metadata.name ~ '-' ~ index, 'port': item}\")",
            ctx,
        )
        .unwrap();
        assert_eq!(
            got,
            serde_json::json!([{"name": "web-0", "port": 80}, {"name": "web-1", "port": 443}])
        );
        // A broken expression is refused when the rule loads.
        let err = TemplateSet::new()
            .add_expr("t", "[1] | each('item +')")
            .unwrap_err();
        assert!(
            err.message.contains("each: `item +` is not an expression"),
            "{err:?}"
        );
        fails_with(
            expr("range(20000) | list | each('item')"),
            "more than 10000 items",
        );
    }

    #[test]
    fn product_gives_every_combination_in_order() {
        assert_eq!(
            expr("[1, 2] | product(['x', 'y'])").unwrap(),
            serde_json::json!([[1, "x"], [1, "y"], [2, "x"], [2, "y"]])
        );
        assert_eq!(
            expr("['a'] | product([1, 2], [true])").unwrap(),
            serde_json::json!([["a", 1, true], ["a", 2, true]])
        );
        fails_with(
            expr("range(1000) | list | product(range(1000) | list)"),
            "more than 10000 combinations",
        );
    }

    #[test]
    fn hashes_and_quantities() {
        assert_eq!(
            expr("'abc' | sha256('base64')").unwrap(),
            serde_json::json!("ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=")
        );
        assert_eq!(
            expr("'foobar' | fnv1a64").unwrap(),
            serde_json::json!("85944171f73967e8")
        );
        assert_eq!(
            expr("('1Gi' | quantity) > ('512Mi' | quantity)").unwrap(),
            serde_json::json!(true)
        );
        assert_eq!(expr("'250m' | quantity").unwrap(), serde_json::json!(0.25));
        assert_eq!(expr("'2Ki' | quantity").unwrap(), serde_json::json!(2048));
        fails_with(expr("'1Gb' | quantity"), "unknown suffix");
    }

    #[test]
    fn a_filter_that_would_multiply_a_huge_input_fails_before_it_runs() {
        fails_with(
            expr("('x' * 1000000) | replace('x', 'y' * 1000000)"),
            "value too large: the result of `replace`",
        );
        fails_with(
            expr("(['a'] * 100000) | join('z' * 1000000)"),
            "value too large: the result of `join`",
        );
    }

    #[test]
    fn python_style_methods_work_and_stay_bounded() {
        assert_eq!(
            expr("'a.b.c'.split('.')").unwrap(),
            serde_json::json!(["a", "b", "c"])
        );
        assert_eq!(expr("'Web'.upper()").unwrap(), serde_json::json!("WEB"));
        assert_eq!(
            eval_with("m.items() | list", serde_json::json!({"m": {"k": "v"}})).unwrap(),
            serde_json::json!([["k", "v"]])
        );
        fails_with(
            expr("('x' * 1000000).replace('x', 'yyyyy')"),
            "value too large",
        );
        fails_with(expr("'{0}{0}'.format('a')"), "not available");
    }

    #[test]
    fn deep_macro_recursion_hits_the_recursion_limit() {
        fails_with(
            text("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
            "recursion limit exceeded",
        );
    }

    #[test]
    fn a_list_nested_by_a_loop_fails_cleanly() {
        // Nests a list about 140,000 levels deep before fuel runs out: without
        // its own stack, dropping it overflows a 2 MiB (tokio worker) stack.
        let nest = format!("{}ns.x{}", "[".repeat(70), "]".repeat(70));
        let src = format!(
            "{{% set ns = namespace(x=1) %}}{{% for i in range(2000) %}}{{% set ns.x = {nest} %}}{{% endfor %}}"
        );
        fails_with(
            text(&format!("{src}{{{{ ns.x | to_json }}}}")),
            "nested too deeply",
        );
        fails_with(text(&format!("{src}{{{{ ns.x }}}}")), "nested too deeply");
        let src = src.replace("range(2000)", "range(100000)");
        fails_with(text(&src), "out of fuel");
    }

    #[test]
    fn a_huge_string_repeated_in_a_list_fails_before_to_json() {
        fails_with(
            expr(r#"(["x" * 1000000] * 10000) | to_json"#),
            "value too large: the input of `to_json`",
        );
        fails_with(
            expr(r#"(["x" * 1000000] * 10000) | tojson"#),
            "value too large",
        );
        fails_with(
            expr(r#"["x" * 1000000] * 10000"#),
            "value too large: the result",
        );
    }

    #[test]
    fn a_huge_repeated_list_fails_before_list() {
        fails_with(expr("([1] * 100000000) | list"), "value too large");
        fails_with(expr("([1] * 100000000) | join(',')"), "value too large");
        fails_with(
            text("{{ [1] * 100000000 }}"),
            "value too large: a value written out",
        );
    }

    #[test]
    fn huge_ranges_fail() {
        fails_with(
            expr("range(1000000000) | list"),
            "range has too many elements",
        );
        // The largest range is allowed, a filter over it is too.
        assert_eq!(
            expr("range(100000) | list | length").ok(),
            Some(serde_json::json!(100000))
        );
    }

    #[test]
    fn nested_to_json_of_big_lists_fails() {
        fails_with(
            expr("(range(100000) | list) | to_json | to_json | to_json | list"),
            "value too large",
        );
    }

    #[test]
    fn string_concatenation_in_a_loop_fails() {
        // Doubling a string through a namespace, read by a filter each time.
        fails_with(
            text(
                r#"{% set ns = namespace(s="x" * 1000) %}{% for i in range(40) %}{% set ns.s = (ns.s ~ ns.s) | string %}{% endfor %}"#,
            ),
            "value too large: the input of `string`",
        );
    }

    #[test]
    fn many_writes_of_a_big_value_hit_the_work_limit() {
        fails_with(
            text(
                r#"{% set s = "x" * 2000000 %}{% set out %}{% for i in range(1000) %}{{ s }}{% endfor %}{% endset %}{{ out | length }}"#,
            ),
            "work limit exceeded",
        );
    }

    #[test]
    fn filters_still_take_keyword_arguments() {
        assert_eq!(
            expr(r#"{"b": 1, "a": 2} | dictsort(by="value") | map(attribute=0) | join(",")"#),
            Ok(serde_json::json!("b,a"))
        );
        assert_eq!(
            expr(r#"[{"n": 2}, {"n": 1}] | sort(attribute="n") | map(attribute="n") | list"#),
            Ok(serde_json::json!([1, 2]))
        );
    }
}
