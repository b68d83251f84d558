//! `RawRule` → [`Rule`]: names, kinds, durations and selectors checked; every
//! template and expression compiled once; every reference to `related.<name>`
//! and `children.<id>` checked against what the rule declares. All problems
//! are collected, none stops the others from being found.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::Value;
use sha2::{Digest, Sha256};

mod history;

use super::load::Document;
use super::names::{dns_label, dns_subdomain};
use super::scope::{Misplaced, placement, well_known_scope};
use super::spec::{
    DurationText, RawChild, RawDecorator, RawFor, RawLabelSelector, RawRule, RawWatch,
};
use super::{
    Backoff, Child, Condition, Decorator, DecoratorTarget, Diagnostic, Gvk, LabelSelector, Need,
    Operator, Primary, Requeue, Requirement, Rule, RuleSet, Watch, WatchTarget, duration,
};
use crate::template::known::{Callable, Unknown};
use crate::template::{Piece, TemplateId, TemplateSet, Tree};
use crate::yaml::{Pos, Step, path_string};

mod adoption;

/// Functions minijinja provides; they show up as variables when analysing templates.
/// The one template function that is not pure (`crate::template::generate`).
const DRAW: &str = "random_secret";

const GLOBALS: &[&str] = &[
    "range",
    "dict",
    "namespace",
    "debug",
    "lipsum",
    "cycler",
    "joiner",
    "loop",
];

/// Fields of a primary's status that the engine owns.
const ENGINE_STATUS_FIELDS: &[&str] = &["observedGeneration", "conditions"];

/// Condition types the engine owns.
const ENGINE_CONDITIONS: &[&str] = &["Ready", "Reconciled", "Waiting"];

/// `crds`: CustomResourceDefinitions to check templates against (rules on
/// kinds they define read only what their schemas declare).
pub(super) fn validate_all(
    docs: Vec<Document>,
    diagnostics: &mut Vec<Diagnostic>,
    crds: &[Value],
) -> RuleSet {
    // Rules on a kind another rule of the set defines are checked against it too.
    let mut crds = crds.to_vec();
    crds.extend(
        docs.iter()
            .filter_map(|d| crate::api::rule::defined_crd(&d.raw)),
    );
    let crds = crds.as_slice();
    let mut rules = Vec::new();
    let mut first_seen: HashMap<String, String> = HashMap::new();
    for doc in docs {
        let name = doc.raw.metadata.name.clone();
        let at = [key("metadata"), key("name")];
        if let Some(first) = first_seen.get(&name) {
            diagnostics.push(doc.diagnostic(
                &at,
                format!("duplicate rule name `{name}` (first defined at {first})"),
            ));
            continue;
        }
        first_seen.insert(name, doc.diagnostic(&at, "").location());
        match Checker::new(&doc, crds).check() {
            Ok(rule) => {
                if let Some(why) = crate::api::rule::defined_twice(&rules, &rule) {
                    diagnostics.push(doc.diagnostic(&[key("spec"), key("api")], why));
                    continue;
                }
                let clashes = status_field_clashes(&rules, &rule);
                for (at, what, other) in &clashes {
                    diagnostics.push(doc.diagnostic(
                        at,
                        format!(
                            "{what} is also written by rule `{other}` on {}: rules sharing a primary kind write status fields and conditions of their own",
                            rule.primary.gvk
                        ),
                    ));
                }
                if clashes.is_empty() {
                    rules.push(Arc::new(rule));
                }
            }
            Err(errs) => diagnostics.extend(errs),
        }
    }
    RuleSet { rules }
}

/// Status fields and condition types `rule` declares that a rule before it
/// on the same primary kind declares too: (where, what, the other rule).
fn status_field_clashes(before: &[Arc<Rule>], rule: &Rule) -> Vec<(Vec<Step>, String, String)> {
    let others = || before.iter().filter(|r| r.primary.gvk == rule.primary.gvk);
    let fields = rule.status_fields.iter().filter_map(|(field, _)| {
        others()
            .find(|r| r.status_fields.iter().any(|(f, _)| f == field))
            .map(|r| {
                let at = vec![key("spec"), key("status"), key("fields"), key(field)];
                (at, format!("status field `{field}`"), r.name.clone())
            })
    });
    let conditions = rule.conditions.iter().enumerate().filter_map(|(i, c)| {
        others()
            .find(|r| r.conditions.iter().any(|o| o.type_ == c.type_))
            .map(|r| {
                let at = vec![
                    key("spec"),
                    key("status"),
                    key("conditions"),
                    Step::Index(i),
                    key("type"),
                ];
                (at, format!("condition `{}`", c.type_), r.name.clone())
            })
    });
    fields.chain(conditions).collect()
}

fn key(k: &str) -> Step {
    Step::Key(k.to_string())
}

struct Checker<'a> {
    doc: &'a Document,
    raw: &'a RawRule,
    set: TemplateSet,
    errors: Vec<Diagnostic>,
    /// The names of `spec.vars`, in order.
    var_names: Vec<String>,
    /// While checking var `i`: only the vars before it may be used.
    var_limit: Option<usize>,
    /// While checking a child: the `children.<id>` and `ready.<id>` it
    /// refers to, each with where.
    child_refs: Option<Vec<ChildRef>>,
    /// Var name → the children it reads (itself or through earlier vars):
    /// a child using the var waits for them as if it read them itself.
    var_children: HashMap<String, Vec<String>>,
    /// Child id → child id it waits for, with where that is said.
    edges: Vec<(String, String, Vec<Step>)>,
    /// CRDs given to check templates against.
    crds: &'a [Value],
    /// Every template compiled, with where it is (for the schema check).
    compiled: Vec<(Vec<Step>, TemplateId)>,
}

/// A reference from a child's templates to another child.
struct ChildRef {
    /// `children` or `ready`.
    root: String,
    /// The id referred to.
    id: String,
    /// Where the reference is.
    at: Vec<Step>,
}

/// What a template may refer to where it stands.
struct Scope<'a> {
    roots: &'a [&'a str],
}

impl<'a> Checker<'a> {
    fn new(doc: &'a Document, crds: &'a [Value]) -> Self {
        let raw = &doc.raw;
        Self {
            doc,
            raw,
            set: TemplateSet::new(),
            errors: Vec::new(),
            var_names: raw.spec.vars.keys().cloned().collect(),
            var_limit: None,
            child_refs: None,
            var_children: HashMap::new(),
            edges: Vec::new(),
            crds,
            compiled: Vec::new(),
        }
    }

    fn error(&mut self, path: &[Step], message: impl Into<String>) {
        self.errors.push(self.doc.diagnostic(path, message));
    }

    fn check(mut self) -> Result<Rule, Vec<Diagnostic>> {
        let raw = self.raw;
        let name = raw.metadata.name.clone();
        if let Err(why) = dns_label(&name) {
            self.error(
                &[key("metadata"), key("name")],
                format!("rule name `{}` {why}", name.escape_debug()),
            );
        }
        let api = self.api();
        let primary = self.primary();
        let watch_names: Vec<String> = raw.spec.watches.iter().map(|w| w.name.clone()).collect();
        let child_ids: Vec<String> = raw.spec.children.iter().map(|c| c.id.clone()).collect();
        let watches = self.watches();
        let vars = self.vars(&watch_names, &child_ids);
        let children = self.children(&watch_names, &child_ids);
        let order = self.order(&children);
        let status_fields = self.status_fields(&watch_names, &child_ids);
        let conditions = self.conditions(&watch_names, &child_ids);
        let decorators = self.decorators(&watch_names, &child_ids);
        let requeue = self.requeue();
        self.schema_references(api.as_ref(), primary.as_ref());
        let requeue_at = self.requeue_at(&watch_names, &child_ids);
        for (at, why) in super::read_only::refusals(&raw.spec) {
            self.error(&at, why);
        }

        let Some(primary) = primary.filter(|_| self.errors.is_empty()) else {
            return Err(self.errors);
        };
        let fingerprint = {
            let canonical = serde_json::to_vec(&self.doc.node.to_json()).unwrap_or_default();
            Sha256::digest(&canonical)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        Ok(Rule {
            name,
            file: self.doc.file.clone(),
            fingerprint,
            primary,
            watches,
            children,
            order,
            vars,
            status_fields,
            conditions,
            requeue,
            requeue_at,
            force_conflicts: raw.spec.apply.force_conflicts,
            decorators,
            ordered_deletion: raw.spec.deletion.as_ref().is_some_and(|d| d.ordered),
            read_only: super::read_only::is_read_only(&raw.spec),
            templates: self.set,
            api: api.map(Arc::new),
        })
    }

    /// `spec.api`, compiled into its CRD.
    fn api(&mut self) -> Option<crate::api::Api> {
        let rule = self.raw;
        let raw = rule.spec.api.as_ref()?;
        if let Some(f) = &rule.spec.for_
            && let Some(why) = crate::api::rule::for_mismatch(raw, f)
        {
            self.error(&[key("spec"), key("for")], why);
        }
        let status = rule.spec.status.as_ref();
        let fields: Vec<String> = status
            .map(|s| s.fields.keys().cloned().collect())
            .unwrap_or_default();
        let at = [key("spec"), key("api")];
        match crate::api::compile(raw, &rule.metadata.name, &fields, &at) {
            Ok(mut api) => {
                api.locate(|at| self.doc.diagnostic(at, "").location());
                Some(api)
            }
            Err(errors) => {
                errors
                    .into_iter()
                    .for_each(|e| self.error(&e.at, e.message));
                None
            }
        }
    }

    /// Every `self.spec...`/`self.status...` a template reads, and every
    /// status field the rule writes, declared by the primary's schema (the
    /// rule's own API, or a CRD given to check against).
    fn schema_references(&mut self, api: Option<&crate::api::Api>, primary: Option<&Primary>) {
        let Some(gvk) = primary.map(|p| &p.gvk) else {
            return;
        };
        let (schema, whose) = match api {
            Some(api) => (api.schema(&gvk.version), format!("{} (spec.api)", gvk.kind)),
            None => {
                let found =
                    crate::api::rule::schema_among(self.crds, &gvk.group, &gvk.version, &gvk.kind);
                let whose = format!("{} ({})", gvk.kind, found.map_or("", |f| f.0));
                (found.map(|f| f.1), whose)
            }
        };
        let Some(schema) = schema.cloned() else {
            return;
        };
        for (at, id) in std::mem::take(&mut self.compiled) {
            for path in self.set.self_paths(&id) {
                if let Err(why) = crate::api::refs::check(&schema, &path, &whose) {
                    self.error(&at, why);
                }
            }
        }
        let rule = self.raw;
        let fields = rule.spec.status.iter().flat_map(|s| s.fields.keys());
        for field in fields {
            let path = format!("self.status.{field}");
            if let Err(why) = crate::api::refs::check(&schema, &path, &whose) {
                let at = [key("spec"), key("status"), key("fields"), key(field)];
                self.error(
                    &at,
                    format!("{why}: the API server would refuse the status kiln writes"),
                );
            }
        }
    }

    /// `spec.for`, or what `spec.api` implies.
    fn for_(&self) -> Option<RawFor> {
        let spec = &self.raw.spec;
        spec.for_
            .clone()
            .or_else(|| spec.api.as_ref().map(crate::api::rule::implied_for))
    }

    fn primary(&mut self) -> Option<Primary> {
        let Some(f) = self.for_() else {
            self.error(
                &[key("spec")],
                "missing field `for` (or `api`, to define the primary kind here)",
            );
            return None;
        };
        let f = &f;
        let base = [key("spec"), key("for")];
        let gvk = self.gvk(&base, &f.api_version, &f.kind);
        for (i, ns) in f.namespaces.iter().enumerate() {
            if let Err(why) = dns_label(ns) {
                self.error(
                    &[key("spec"), key("for"), key("namespaces"), Step::Index(i)],
                    format!("namespace `{ns}` {why}"),
                );
            }
        }
        let at = [key("spec"), key("for"), key("selector")];
        let selector = f.selector.as_ref().map(|sel| self.selector(&at, sel));
        self.exclusions(&f.namespaces, &f.exclude_namespaces);
        let at = [key("spec"), key("for"), key("namespaceSelector")];
        let namespace_selector = f.namespace_selector.as_ref().map(|sel| {
            if gvk.as_ref().and_then(well_known_scope) == Some(false) {
                self.error(&at, format!("{} is cluster-scoped: its objects are in no namespace, so namespaceSelector would take none (select them with `selector`)", f.kind));
            }
            self.selector(&at, sel)
        });
        Some(Primary {
            gvk: gvk?,
            namespaces: f.namespaces.clone(),
            exclude_namespaces: f.exclude_namespaces.clone(),
            selector,
            namespace_selector,
            take_existing: f.take_existing,
        })
    }

    /// `spec.for.excludeNamespaces`: namespace names, none also listed in
    /// `namespaces` (it would take nothing from there).
    fn exclusions(&mut self, included: &[String], excluded: &[String]) {
        for (i, ns) in excluded.iter().enumerate() {
            let at = [
                key("spec"),
                key("for"),
                key("excludeNamespaces"),
                Step::Index(i),
            ];
            if let Err(why) = dns_label(ns) {
                self.error(&at, format!("namespace `{}` {why}", ns.escape_debug()));
            } else if included.contains(ns) {
                self.error(
                    &at,
                    format!("namespace `{ns}` is both in spec.for.namespaces and excluded"),
                );
            }
        }
    }

    fn gvk(&mut self, at: &[Step], api_version: &str, kind: &str) -> Option<Gvk> {
        let with = |k: &str| [at, &[key(k)]].concat();
        let parsed = parse_api_version(api_version);
        if let Err(why) = &parsed {
            self.error(&with("apiVersion"), why.clone());
        }
        let kind_ok = kind.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && kind.chars().all(|c| c.is_ascii_alphanumeric());
        if !kind_ok {
            self.error(&with("kind"), format!("kind `{kind}` must be CamelCase letters and digits, starting upper-case (e.g. `Deployment`)"));
        }
        let (group, version) = parsed.ok()?;
        kind_ok.then(|| Gvk {
            group,
            version,
            kind: kind.to_string(),
        })
    }

    fn selector(&mut self, at: &[Step], sel: &RawLabelSelector) -> LabelSelector {
        let mut match_expressions = Vec::new();
        for (i, req) in sel.match_expressions.iter().enumerate() {
            let here = [at, &[key("matchExpressions"), Step::Index(i)]].concat();
            let operator = match req.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                op => {
                    self.error(
                        &[here.as_slice(), &[key("operator")]].concat(),
                        format!("unknown operator `{op}` (use In, NotIn, Exists or DoesNotExist)"),
                    );
                    continue;
                }
            };
            let takes_values = matches!(operator, Operator::In | Operator::NotIn);
            match (takes_values, req.values.is_empty()) {
                (true, true) => self.error(
                    &here,
                    format!("operator `{}` needs at least one value", req.operator),
                ),
                (false, false) => self.error(
                    &here,
                    format!("operator `{}` takes no values", req.operator),
                ),
                _ => {}
            }
            match_expressions.push(Requirement {
                key: req.key.clone(),
                operator,
                values: req.values.clone(),
            });
        }
        LabelSelector {
            match_labels: sel.match_labels.clone(),
            match_expressions,
        }
    }

    fn watches(&mut self) -> Vec<Watch> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        // A watch is found from the primary alone.
        let scope = Scope {
            roots: &["self", "rule"],
        };
        for (i, w) in self.raw.spec.watches.iter().enumerate() {
            let at = vec![key("spec"), key("watches"), Step::Index(i)];
            let with = |k: &str| [at.as_slice(), &[key(k)]].concat();
            self.unique_identifier(
                &with("name"),
                &mut seen,
                "watch name",
                &w.name,
                "related.<name>",
            );
            let gvk = self.gvk(&at, &w.api_version, &w.kind);
            let target = self.watch_target(&at, w, &scope);
            for (j, ns) in w.allow_namespaces.iter().enumerate() {
                if let Err(why) = dns_label(ns) {
                    let here = [with("allowNamespaces").as_slice(), &[Step::Index(j)]].concat();
                    self.error(&here, format!("namespace `{}` {why}", ns.escape_debug()));
                }
            }
            if let (Some(gvk), Some(target)) = (gvk, target) {
                out.push(Watch {
                    name: w.name.clone(),
                    gvk,
                    target,
                    required: w.required,
                    allow_namespaces: w.allow_namespaces.clone(),
                });
            }
        }
        out
    }

    fn watch_target(
        &mut self,
        at: &[Step],
        w: &RawWatch,
        scope: &Scope<'_>,
    ) -> Option<WatchTarget> {
        match (&w.ref_, &w.selector) {
            (Some(r), None) => {
                let base = [at, &[key("ref")]].concat();
                let name = self.piece(
                    &[base.as_slice(), &[key("name")]].concat(),
                    &r.name,
                    scope,
                    &[],
                    &[],
                );
                let namespace = r
                    .namespace
                    .as_ref()
                    .map(|ns| self.namespace_piece(&base, ns, scope));
                Some(WatchTarget::Ref {
                    name: name?,
                    namespace: namespace.flatten(),
                })
            }
            (None, Some(sel)) => {
                let base = [at, &[key("selector")]].concat();
                if sel.all_namespaces && sel.namespace.is_some() {
                    self.error(
                        &[base.as_slice(), &[key("allNamespaces")]].concat(),
                        "a watch selector looks in one `namespace` or in `allNamespaces`, not both",
                    );
                }
                let expressions = RawLabelSelector {
                    match_labels: Default::default(),
                    match_expressions: sel.match_expressions.clone(),
                };
                let match_expressions = self.selector(&base, &expressions).match_expressions;
                let mut labels = Vec::new();
                for (k, v) in &sel.match_labels {
                    let p = [base.as_slice(), &[key("matchLabels"), key(k)]].concat();
                    if let Some(piece) = self.piece(&p, v, scope, &[], &[]) {
                        labels.push((k.clone(), piece));
                    }
                }
                let namespace = sel
                    .namespace
                    .as_ref()
                    .and_then(|ns| self.namespace_piece(&base, ns, scope));
                Some(WatchTarget::Selector {
                    match_labels: labels,
                    match_expressions,
                    namespace,
                    all_namespaces: sel.all_namespaces,
                })
            }
            (Some(_), Some(_)) => {
                self.error(at, "a watch takes either `ref` or `selector`, not both");
                None
            }
            (None, None) => {
                self.error(
                    at,
                    "a watch needs `ref` (one object by name) or `selector` (objects by label)",
                );
                None
            }
        }
    }

    /// A watch's `namespace` template (found from the primary alone).
    fn namespace_piece(&mut self, base: &[Step], ns: &str, scope: &Scope<'_>) -> Option<Piece> {
        self.piece(&[base, &[key("namespace")]].concat(), ns, scope, &[], &[])
    }

    fn children(&mut self, watches: &[String], ids: &[String]) -> Vec<Child> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, c) in self.raw.spec.children.iter().enumerate() {
            let at = vec![key("spec"), key("children"), Step::Index(i)];
            let with = |k: &str| [at.as_slice(), &[key(k)]].concat();
            self.unique_identifier(&with("id"), &mut seen, "child id", &c.id, "children.<id>");
            self.child_refs = Some(Vec::new());
            let base: &[&str] = &["self", "related", "children", "rule", "vars", "ready"];
            let item: &[&str] = &[
                "self", "related", "children", "rule", "vars", "ready", "item", "index",
            ];
            let roots = if c.for_each.is_some() { item } else { base };
            // Only a child's template may draw a value (kept in the child).
            let drawing: Vec<&str> = roots.iter().copied().chain([DRAW]).collect();
            let scope = Scope { roots: &drawing };
            let plain = Scope { roots: base };
            let when = c
                .when
                .as_ref()
                .and_then(|e| self.expr(&with("when"), e, &plain, watches, ids));
            // A `when` that reads no other child is decided before waiting:
            // a child switched off is left out, not kept waiting.
            let when_first = self
                .child_refs
                .as_ref()
                .is_none_or(|refs| refs.iter().all(|r| r.id == c.id));
            let for_each = c
                .for_each
                .as_ref()
                .and_then(|e| self.expr(&with("forEach"), e, &plain, watches, ids));
            let ready_roots: Vec<&str> = roots.iter().copied().chain(["child"]).collect();
            let on_exists = c
                .ready_when
                .as_deref()
                .is_some_and(crate::readiness::is_exists);
            let ready_when = c.ready_when.as_ref().filter(|_| !on_exists).and_then(|e| {
                self.expr(
                    &with("readyWhen"),
                    e,
                    &Scope {
                        roots: &ready_roots,
                    },
                    watches,
                    ids,
                )
            });
            let template = self.child_template(&with("template"), c, &scope, watches, ids);
            let history = self.history(&at, c, watches, ids);
            if c.outside {
                if c.for_each.is_some() {
                    self.error(
                        &with("outside"),
                        "an `outside` child cannot use `forEach`: its name and namespace come from the primary's identity, not from a list the primary's author writes",
                    );
                }
                if let Some((_, tree)) = &template {
                    self.where_only_from_identity(tree);
                }
            }
            let needs = self.needs(&at, c, ids);
            let adopt_names = self.adopt_names(&at, c);
            let (replace, problems) = super::child_options::check(c);
            for (field, message) in problems {
                self.error(&with(field), message);
            }
            if let Some((gvk, template)) = template {
                out.push(Child {
                    id: c.id.clone(),
                    gvk,
                    when,
                    for_each,
                    template,
                    ready_when,
                    ready_on_exists: on_exists,
                    adopt: c.adopt,
                    adopt_names,
                    update_policy: c.update_policy,
                    recreate: c.recreate,
                    replace,
                    deletion_policy: c.deletion_policy,
                    outside: c.outside,
                    needs,
                    when_first,
                    history,
                });
            }
        }
        out
    }

    fn child_template(
        &mut self,
        at: &[Step],
        c: &RawChild,
        scope: &Scope<'_>,
        watches: &[String],
        ids: &[String],
    ) -> Option<(Gvk, Tree)> {
        let Value::Object(obj) = &c.template else {
            self.error(at, "a child template must be a mapping: a Kubernetes object with apiVersion, kind and metadata");
            return None;
        };
        let with = |k: &str| [at, &[key(k)]].concat();
        let literal = |k: &str| {
            obj.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.contains("{{") && !s.contains("{%"))
        };
        let (api_version, kind) = (literal("apiVersion"), literal("kind"));
        for (field, value) in [("apiVersion", api_version), ("kind", kind)] {
            if value.is_none() {
                let msg = if obj.contains_key(field) {
                    format!(
                        "`{field}` must be a literal string: kiln watches each child kind, so it cannot vary per object"
                    )
                } else {
                    format!("the child template has no `{field}`")
                };
                self.error(
                    &if obj.contains_key(field) {
                        with(field)
                    } else {
                        at.to_vec()
                    },
                    msg,
                );
            }
        }
        let metadata = obj.get("metadata");
        match metadata.and_then(|m| m.get("name")) {
            Some(Value::String(name)) => {
                if c.for_each.is_some() && !name.contains("{{") {
                    self.error(
                        &[at, &[key("metadata"), key("name")]].concat(),
                        "with `forEach`, metadata.name must differ per item (use `item` or `index` in it)",
                    );
                }
            }
            Some(_) => self.error(
                &[at, &[key("metadata"), key("name")]].concat(),
                "metadata.name must be a string",
            ),
            None => {
                let here = if metadata.is_some() {
                    [at, &[key("metadata")]].concat()
                } else {
                    at.to_vec()
                };
                self.error(&here, "the child template has no metadata.name");
            }
        }
        if metadata.and_then(|m| m.get("ownerReferences")).is_some() {
            self.error(
                &[at, &[key("metadata"), key("ownerReferences")]].concat(),
                "kiln sets ownerReferences on children itself; remove them",
            );
        }
        if obj.contains_key("status") {
            self.error(
                &with("status"),
                "a child's status belongs to its own controller; remove `status` from the template",
            );
        }
        let gvk = match (api_version, kind) {
            (Some(v), Some(k)) => self.gvk(at, v, k),
            _ => None,
        };
        if let Some(gvk) = &gvk
            && !c.outside
        {
            self.namespace_escape(at, gvk, metadata);
        }
        let tree = self.tree(at, &c.template, scope, watches, ids)?;
        Some((gvk?, tree))
    }

    /// For a primary of a kind known to be namespaced: children must stay in
    /// its namespace and cannot be cluster-scoped. (For other primaries the
    /// engine checks the same at render time, with discovery.)
    fn namespace_escape(&mut self, at: &[Step], child: &Gvk, metadata: Option<&Value>) {
        let Some(f) = self.for_() else {
            return;
        };
        let Ok((group, version)) = parse_api_version(&f.api_version) else {
            return;
        };
        let primary = Gvk {
            group,
            version,
            kind: f.kind.clone(),
        };
        if well_known_scope(&primary) != Some(true) {
            return;
        }
        // The primary's namespace is not known here: any literal namespace
        // is another one.
        const PRIMARY: &str = "\u{0}the primary's namespace";
        let literal = metadata
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .filter(|ns| !ns.contains("{{"));
        let namespaced = well_known_scope(child).unwrap_or(true);
        match placement(Some(PRIMARY), namespaced, literal) {
            Err(Misplaced::ClusterScopedChild) => self.error(
                &[at, &[key("kind")]].concat(),
                format!("{child} is cluster-scoped; a namespaced primary ({}) cannot own cluster-scoped children", primary.kind),
            ),
            Err(Misplaced::OtherNamespace { child: ns, .. }) => self.error(
                &[at, &[key("metadata"), key("namespace")]].concat(),
                format!(
                    "a namespaced primary ({}) may only own children in its own namespace; remove the literal namespace `{ns}`",
                    primary.kind
                ),
            ),
            _ => {}
        }
    }

    /// An `outside` child's name and namespace decide where kiln writes:
    /// they may come from the primary's identity and the rule, never from
    /// what the primary's author writes in its spec (tenant boundary).
    fn where_only_from_identity(&mut self, tree: &Tree) {
        const IDENTITY: &[&str] = &[
            "self.metadata.name",
            "self.metadata.namespace",
            "self.metadata.uid",
            "rule.name",
        ];
        let ids: Vec<TemplateId> = tree.templates().into_iter().cloned().collect();
        for id in ids {
            let path = id.path().trim_end_matches(" (key)");
            if !(path.ends_with(".template.metadata.name")
                || path.ends_with(".template.metadata.namespace"))
            {
                continue;
            }
            let bad: Vec<String> = self
                .set
                .references(&id)
                .into_iter()
                .chain(self.set.self_paths(&id))
                .filter(|r| !IDENTITY.contains(&r.as_str()))
                .collect();
            if !bad.is_empty() {
                let at = self.steps_of(&id, &[]);
                self.error(
                    &at,
                    format!(
                        "an `outside` child's name and namespace may use only {}, not `{}`: the rule decides where kiln writes, not the primary's author",
                        IDENTITY.iter().map(|r| format!("`{r}`")).collect::<Vec<_>>().join(", "),
                        bad.join("`, `")
                    ),
                );
            }
        }
    }

    fn decorators(&mut self, watches: &[String], ids: &[String]) -> Vec<Decorator> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        let scope = Scope {
            roots: &["self", "related", "children", "rule", "vars", "target"],
        };
        for (i, d) in self.raw.spec.decorate.iter().enumerate() {
            let at = vec![key("spec"), key("decorate"), Step::Index(i)];
            let with = |k: &str| [at.as_slice(), &[key(k)]].concat();
            if !is_identifier(&d.id) {
                self.error(
                    &with("id"),
                    format!("decorator id `{}` must be letters, digits and `_` (it names the field manager `kiln.<rule>.<id>`)", d.id),
                );
            } else if !seen.insert(d.id.clone()) {
                self.error(&with("id"), format!("duplicate decorator id `{}`", d.id));
            } else if let Some(why) = manager_too_long(&self.raw.metadata.name, &d.id) {
                self.error(&with("id"), why);
            }
            let target = match d.target.trim() {
                "self" => Some(DecoratorTarget::Primary),
                t => match t.strip_prefix("related.") {
                    Some(name) if watches.iter().any(|w| w == name) => {
                        Some(DecoratorTarget::Related(name.to_string()))
                    }
                    _ => {
                        let declared = if watches.is_empty() {
                            "none".to_string()
                        } else {
                            watches.join(", ")
                        };
                        self.error(
                            &with("target"),
                            format!(
                                "target `{t}` is neither `self` nor `related.<name>` of a watch in spec.watches (declared: {declared})"
                            ),
                        );
                        None
                    }
                },
            };
            let when = d
                .when
                .as_ref()
                .and_then(|e| self.expr(&with("when"), e, &scope, watches, ids));
            let patch_at = with("patch");
            let Some(map) = d.patch.as_object() else {
                self.error(&patch_at, "the patch must be a map of fields to set");
                continue;
            };
            for field in ["apiVersion", "kind"] {
                if map.contains_key(field) {
                    self.error(
                        &[patch_at.as_slice(), &[key(field)]].concat(),
                        format!("`{field}` is the target's; remove it from the patch"),
                    );
                }
            }
            if let Some(meta) = map.get("metadata").and_then(Value::as_object) {
                for field in ["name", "namespace", "ownerReferences", "managedFields"] {
                    if meta.contains_key(field) {
                        self.error(
                            &[patch_at.as_slice(), &[key("metadata"), key(field)]].concat(),
                            format!("a decorator cannot set `metadata.{field}`; it patches the target as it is"),
                        );
                    }
                }
            }
            let patch = self.tree(&patch_at, &d.patch, &scope, watches, ids);
            let allow_names = self.allow_names(&at, d, target.as_ref());
            if let (Some(target), Some(patch)) = (target, patch) {
                out.push(Decorator {
                    id: d.id.clone(),
                    target,
                    when,
                    patch,
                    force: d.force,
                    allow_names,
                });
            }
        }
        out
    }

    /// The cluster-scoped objects decorator `d` may patch for a namespaced
    /// primary: its `allowNames`, and the watch's name when it is literal.
    /// A watch of a kind known to be cluster-scoped found by a templated
    /// name or a selector, with no `allowNames`, is refused: whoever writes
    /// a primary would choose which cluster-wide object kiln writes.
    fn allow_names(
        &mut self,
        at: &[Step],
        d: &RawDecorator,
        target: Option<&DecoratorTarget>,
    ) -> Vec<String> {
        let mut names = d.allow_names.clone();
        for (j, name) in d.allow_names.iter().enumerate() {
            if let Err(why) = dns_subdomain(name) {
                let here = [at, &[key("allowNames"), Step::Index(j)]].concat();
                self.error(&here, format!("name `{}` {why}", name.escape_debug()));
            }
        }
        let Some(DecoratorTarget::Related(watch)) = target else {
            return names;
        };
        let Some(w) = self.raw.spec.watches.iter().find(|w| &w.name == watch) else {
            return names;
        };
        let literal = w
            .ref_
            .as_ref()
            .map(|r| r.name.as_str())
            .filter(|n| !n.contains("{{") && !n.contains("{%"));
        if let Some(name) = literal {
            names.push(name.to_string());
            return names;
        }
        let cluster_scoped = well_known_scope(&loose_gvk(&w.api_version, &w.kind)) == Some(false);
        let primary_cluster_scoped = self.primary_cluster_scoped();
        if cluster_scoped && !primary_cluster_scoped && names.is_empty() {
            self.error(
                &[at, &[key("target")]].concat(),
                format!(
                    "decorator `{}` patches {} objects (cluster-scoped) found by a name or labels the primary gives: list the names it may patch in `allowNames`",
                    d.id, w.kind
                ),
            );
        }
        names
    }

    fn status_fields(&mut self, watches: &[String], ids: &[String]) -> Vec<(String, Tree)> {
        let Some(status) = &self.raw.spec.status else {
            return Vec::new();
        };
        let scope = Scope {
            roots: &["self", "related", "children", "rule", "vars", "ready"],
        };
        let mut out = Vec::new();
        for (name, value) in &status.fields {
            let at = [key("spec"), key("status"), key("fields"), key(name)];
            if ENGINE_STATUS_FIELDS.contains(&name.as_str()) {
                self.error(
                    &at,
                    format!("status field `{name}` is written by the engine; choose another name"),
                );
                continue;
            }
            if let Some(tree) = self.tree(&at, value, &scope, watches, ids) {
                out.push((name.clone(), tree));
            }
        }
        out
    }

    fn conditions(&mut self, watches: &[String], ids: &[String]) -> Vec<Condition> {
        let Some(status) = &self.raw.spec.status else {
            return Vec::new();
        };
        let scope = Scope {
            roots: &["self", "related", "children", "rule", "vars", "ready"],
        };
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for (i, c) in status.conditions.iter().enumerate() {
            let at = |k: &str| {
                vec![
                    key("spec"),
                    key("status"),
                    key("conditions"),
                    Step::Index(i),
                    key(k),
                ]
            };
            let t = &c.type_;
            if ENGINE_CONDITIONS.contains(&t.as_str()) || t.contains(".kiln.dev/") {
                self.error(
                    &at("type"),
                    format!("condition `{t}` is written by the engine; choose another type"),
                );
            } else if !is_condition_type(t) {
                self.error(
                    &at("type"),
                    format!(
                        "condition type `{}` must be letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit, at most 316 characters",
                        t.escape_debug()
                    ),
                );
            } else if !seen.insert(t.clone()) {
                self.error(&at("type"), format!("duplicate condition `{t}`"));
            }
            let reason = &c.reason;
            if !reason.contains('{') && !is_condition_reason(reason) {
                self.error(
                    &at("reason"),
                    format!(
                        "reason `{}` must be CamelCase: a letter, then letters, digits, `_`, `,` or `:`",
                        reason.escape_debug()
                    ),
                );
            }
            let text = |s: &str| Value::String(s.to_string());
            let status = self.expr(&at("status"), &c.status, &scope, watches, ids);
            let reason = self.tree(&at("reason"), &text(reason), &scope, watches, ids);
            let message = match &c.message {
                Some(m) => self
                    .tree(&at("message"), &text(m), &scope, watches, ids)
                    .map(Some),
                None => Some(None),
            };
            if let (Some(status), Some(reason), Some(message)) = (status, reason, message) {
                out.push(Condition {
                    type_: t.clone(),
                    status,
                    reason,
                    message,
                });
            }
        }
        out
    }

    /// `spec.vars`: each a template that may use the vars before it.
    fn vars(&mut self, watches: &[String], ids: &[String]) -> Vec<(String, Tree)> {
        let scope = Scope {
            roots: &["self", "related", "children", "rule", "vars"],
        };
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, (name, value)) in self.raw.spec.vars.iter().enumerate() {
            let at = [key("spec"), key("vars"), key(name)];
            self.unique_identifier(&at, &mut seen, "var name", name, "vars.<name>");
            self.var_limit = Some(i);
            self.child_refs = Some(Vec::new());
            let tree = self.tree(&at, value, &scope, watches, ids);
            let read = self.child_refs.take().unwrap_or_default();
            self.var_children
                .insert(name.clone(), read.into_iter().map(|r| r.id).collect());
            if let Some(tree) = tree {
                out.push((name.clone(), tree));
            }
        }
        self.var_limit = None;
        out
    }

    /// Why a var being checked may not use `vars.<name>`: itself or a var
    /// written after it (vars are evaluated in order, so no cycle can form).
    fn var_reference(&self, name: Option<&str>) -> Option<String> {
        let limit = self.var_limit?;
        let name = name?;
        let pos = self.var_names.iter().position(|n| n == name)?;
        let current = &self.var_names[limit];
        if pos == limit {
            Some(format!("var `{current}` refers to itself"))
        } else if pos > limit {
            Some(format!(
                "`vars.{name}` is written after `{current}`: a var can use only the vars before it (they are evaluated in order)"
            ))
        } else {
            None
        }
    }

    /// The children a child waits for: those its templates refer to
    /// (`children.<id>`: until it exists; `ready.<id>`: until it is ready)
    /// and those it names in `dependsOn`.
    fn needs(&mut self, at: &[Step], c: &RawChild, ids: &[String]) -> Vec<Need> {
        let mut needs: Vec<Need> = Vec::new();
        let add = |needs: &mut Vec<Need>, id: &str, ready: bool| match needs
            .iter_mut()
            .find(|n| n.id == id)
        {
            Some(n) => n.ready |= ready,
            None => needs.push(Need {
                id: id.to_string(),
                ready,
            }),
        };
        for r in self.child_refs.take().unwrap_or_default() {
            if !ids.contains(&r.id) {
                continue; // reported as undeclared
            }
            if r.id == c.id {
                if r.root == "ready" {
                    self.error(
                        &r.at,
                        format!("child `{}` cannot wait for its own readiness", c.id),
                    );
                }
                continue; // a child reading itself back (random_secret) waits for nothing
            }
            self.edges.push((c.id.clone(), r.id.clone(), r.at));
            add(&mut needs, &r.id, r.root == "ready");
        }
        for (j, d) in c.depends_on.iter().enumerate() {
            let here = [at, &[key("dependsOn"), Step::Index(j), key("id")]].concat();
            if d.id == c.id {
                self.error(&here, format!("child `{}` cannot depend on itself", c.id));
            } else if !ids.contains(&d.id) {
                self.error(
                    &here,
                    format!(
                        "`{}` is not declared in spec.children (declared: {})",
                        d.id,
                        ids.join(", ")
                    ),
                );
            } else {
                self.edges.push((c.id.clone(), d.id.clone(), here));
                add(&mut needs, &d.id, d.ready);
            }
        }
        needs
    }

    /// The order children are rendered in: each after the children it waits
    /// for, otherwise as written. A cycle is refused, spelled out.
    fn order(&mut self, children: &[Child]) -> Vec<usize> {
        let mut order: Vec<usize> = Vec::new();
        while order.len() < children.len() {
            let placed = |id: &str| {
                order
                    .iter()
                    .any(|&k| children.get(k).is_some_and(|c| c.id == id))
            };
            let next = (0..children.len())
                .find(|i| !order.contains(i) && children[*i].needs.iter().all(|n| placed(&n.id)));
            match next {
                Some(i) => order.push(i),
                None => {
                    let left: Vec<usize> =
                        (0..children.len()).filter(|i| !order.contains(i)).collect();
                    self.cycle(children, &left);
                    order.extend(left);
                }
            }
        }
        order
    }

    /// Reports one cycle among `left` (children none of which can go first).
    fn cycle(&mut self, children: &[Child], left: &[usize]) {
        let id_of = |i: usize| children[i].id.clone();
        let mut path: Vec<String> = left.first().map(|&i| id_of(i)).into_iter().collect();
        loop {
            let Some(last) = path.last().cloned() else {
                return;
            };
            // Every child left waits for another child left.
            let Some(next) = children
                .iter()
                .find(|c| c.id == last)
                .and_then(|c| {
                    c.needs
                        .iter()
                        .find(|n| left.iter().any(|&i| children[i].id == n.id))
                })
                .map(|n| n.id.clone())
            else {
                return;
            };
            if let Some(start) = path.iter().position(|p| *p == next) {
                let mut cycle = path.split_off(start);
                cycle.push(next.clone());
                let at = self
                    .edges
                    .iter()
                    .find(|(from, to, _)| *from == last && *to == next)
                    .map(|(_, _, at)| at.clone())
                    .unwrap_or_else(|| vec![key("spec"), key("children")]);
                self.error(
                    &at,
                    format!(
                        "children wait for each other in a cycle: {} (a child waits for the children its templates refer to as `children.<id>` or `ready.<id>`, and for its `dependsOn`)",
                        cycle.join(" → ")
                    ),
                );
                return;
            }
            path.push(next);
        }
    }

    /// Checks a name templates refer to (`related.<name>`, `children.<id>`):
    /// an identifier, not used twice in the rule.
    fn unique_identifier(
        &mut self,
        at: &[Step],
        seen: &mut BTreeSet<String>,
        what: &str,
        name: &str,
        usage: &str,
    ) {
        if !is_identifier(name) {
            self.error(
                at,
                format!(
                    "{what} `{name}` must be letters, digits and `_` (templates write `{usage}`)"
                ),
            );
        } else if !seen.insert(name.to_string()) {
            self.error(at, format!("duplicate {what} `{name}`"));
        }
    }

    fn requeue(&mut self) -> Requeue {
        let r = &self.raw.spec.requeue;
        let d = Requeue::default();
        let at = |k: &str| vec![key("spec"), key("requeue"), key(k)];
        let resync = r
            .resync
            .as_ref()
            .and_then(|s| self.duration(&at("resync"), s));
        let waiting = r
            .waiting
            .as_ref()
            .and_then(|s| self.duration(&at("waiting"), s))
            .unwrap_or(d.waiting);
        if waiting.is_zero() {
            self.error(&at("waiting"), "requeue.waiting must be more than 0");
        }
        let mut on_error = d.on_error;
        if let Some(b) = &r.on_error {
            let at = |k: &str| vec![key("spec"), key("requeue"), key("onError"), key(k)];
            let initial = b
                .initial
                .as_ref()
                .and_then(|s| self.duration(&at("initial"), s))
                .unwrap_or(on_error.initial);
            let max = b
                .max
                .as_ref()
                .and_then(|s| self.duration(&at("max"), s))
                .unwrap_or(on_error.max);
            if initial.is_zero() {
                self.error(&at("initial"), "onError.initial must be more than 0");
            }
            if initial > max {
                self.error(
                    &at("max"),
                    format!("onError.max ({max:?}) is shorter than onError.initial ({initial:?})"),
                );
            }
            on_error = Backoff { initial, max };
        }
        Requeue {
            resync,
            waiting,
            on_error,
        }
    }

    /// `spec.requeue.at`: a template seeing what status sees.
    fn requeue_at(&mut self, watches: &[String], ids: &[String]) -> Option<Tree> {
        let value = self.raw.spec.requeue.at.as_ref()?;
        let at = [key("spec"), key("requeue"), key("at")];
        if !matches!(value, Value::String(_) | Value::Array(_)) {
            self.error(
                &at,
                "requeue.at is a template giving an RFC 3339 time, or a list of them",
            );
            return None;
        }
        let scope = Scope {
            roots: &["self", "related", "children", "rule", "vars", "ready"],
        };
        let tree = self.tree(&at, value, &scope, watches, ids)?;
        // Without templates it is known now: a time, or refused.
        if let Tree::Value(literal) = &tree
            && let Err(why) = crate::template::time::earliest(literal)
        {
            self.error(&at, format!("requeue.at: {why}"));
        }
        Some(tree)
    }

    fn duration(&mut self, at: &[Step], text: &DurationText) -> Option<std::time::Duration> {
        duration::parse(&text.0)
            .map_err(|why| self.error(at, why))
            .ok()
    }

    // --- templates -------------------------------------------------------

    fn piece(
        &mut self,
        at: &[Step],
        s: &str,
        scope: &Scope<'_>,
        watches: &[String],
        ids: &[String],
    ) -> Option<Piece> {
        match Piece::compile(s, at, &path_string(at), &mut self.set) {
            Ok(piece) => {
                if let Some(id) = piece.template() {
                    self.references(at, id, scope, watches, ids);
                }
                Some(piece)
            }
            Err((p, e)) => {
                self.error(&p, format!("template does not compile: {}", e.message));
                None
            }
        }
    }

    fn expr(
        &mut self,
        at: &[Step],
        e: &str,
        scope: &Scope<'_>,
        watches: &[String],
        ids: &[String],
    ) -> Option<TemplateId> {
        let source = e.trim();
        let source = source
            .strip_prefix("{{")
            .and_then(|s| s.strip_suffix("}}"))
            .unwrap_or(source);
        match self.set.add_expr(&path_string(at), source) {
            Ok(id) => {
                self.references(at, &id, scope, watches, ids);
                Some(id)
            }
            Err(err) => {
                self.error(at, format!("expression does not compile: {}", err.message));
                None
            }
        }
    }

    fn tree(
        &mut self,
        at: &[Step],
        value: &Value,
        scope: &Scope<'_>,
        watches: &[String],
        ids: &[String],
    ) -> Option<Tree> {
        let mut errors = Vec::new();
        let mut path = at.to_vec();
        let tree = Tree::compile(value, &mut path, &mut self.set, &mut errors);
        let ok = errors.is_empty();
        for (p, e) in errors {
            self.error(&p, format!("template does not compile: {}", e.message));
        }
        let ids_in_tree: Vec<TemplateId> = tree.templates().into_iter().cloned().collect();
        for id in &ids_in_tree {
            let steps = self.steps_of(id, at);
            self.references(&steps, id, scope, watches, ids);
        }
        ok.then_some(tree)
    }

    /// Finds the YAML path of a compiled template (its name is that path).
    fn steps_of(&self, id: &TemplateId, fallback: &[Step]) -> Vec<Step> {
        let name = id.path().trim_end_matches(" (key)");
        find_path(&self.doc.node, name).unwrap_or_else(|| fallback.to_vec())
    }

    /// Refuses calls of filters, tests and functions kiln does not have,
    /// each at its line and column; returns the unknown functions' names.
    fn unknown_names(&mut self, at: &[Step], id: &TemplateId) -> Vec<String> {
        let mut functions = Vec::new();
        for unknown in self.set.unknown_names(id) {
            let start = self.doc.node.locate(at);
            let pos = pos_in_scalar(&self.doc.text, start, &unknown);
            let diagnostic = Diagnostic::new(
                &self.doc.file,
                &self.doc.text,
                Some(pos),
                path_string(at),
                unknown.to_string(),
            );
            self.errors
                .push(diagnostic.in_rule(&self.raw.metadata.name));
            if unknown.kind == Callable::Function {
                functions.push(unknown.name);
            }
        }
        functions
    }

    fn references(
        &mut self,
        at: &[Step],
        id: &TemplateId,
        scope: &Scope<'_>,
        watches: &[String],
        ids: &[String],
    ) {
        self.compiled.push((at.to_vec(), id.clone()));
        let unknown_functions = self.unknown_names(at, id);
        for var in self.set.references(id) {
            let mut parts = var.split('.');
            let root = parts.next().unwrap_or_default();
            if GLOBALS.contains(&root) || unknown_functions.iter().any(|f| f == root) {
                continue;
            }
            if root == DRAW {
                let path = id.path();
                let message = if !scope.roots.contains(&root) {
                    "random_secret() draws a value only in a child's `template`, where the child keeps it (read it back from `children.<id>`); not here"
                } else if path.ends_with(".metadata.name") || path.ends_with(".metadata.namespace")
                {
                    "random_secret() cannot make a child's name or namespace: a child's name must be the same on every render"
                } else {
                    continue;
                };
                self.error(at, message);
                continue;
            }
            if self.set.is_function(root) {
                continue;
            }
            if root == super::observed::ROOT {
                let here = scope.roots.contains(&"children");
                if let Some(m) = super::observed::problem(here, parts.next(), ids) {
                    self.error(at, m);
                }
                continue;
            }
            if !scope.roots.contains(&root) {
                let allowed: Vec<String> = scope
                    .roots
                    .iter()
                    .filter(|r| **r != DRAW)
                    .map(|r| format!("`{r}`"))
                    .collect();
                self.error(
                    at,
                    format!(
                        "unknown variable `{root}`: here templates can use {}",
                        allowed.join(", ")
                    ),
                );
                continue;
            }
            if root == "vars"
                && let Some(message) = self.var_reference(parts.clone().next())
            {
                self.error(at, message);
                continue;
            }
            let var_names = self.var_names.clone();
            let declared = match root {
                "related" => Some(("spec.watches", watches)),
                "children" | "ready" => Some(("spec.children", ids)),
                "vars" => Some(("spec.vars", var_names.as_slice())),
                _ => None,
            };
            if let (Some(refs), Some(name)) = (&mut self.child_refs, parts.clone().next()) {
                let through_var = self.var_children.get(name).filter(|_| root == "vars");
                let read: Vec<String> = match root {
                    "children" | "ready" => vec![name.to_string()],
                    _ => through_var.cloned().unwrap_or_default(),
                };
                let root = if root == "ready" { "ready" } else { "children" };
                refs.extend(read.into_iter().map(|id| ChildRef {
                    root: root.to_string(),
                    id,
                    at: at.to_vec(),
                }));
            }
            if let (Some((section, names)), Some(name)) = (declared, parts.next())
                && !names.iter().any(|n| n == name)
            {
                let known = if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                };
                self.error(
                    at,
                    format!("`{root}.{name}` is not declared in {section} (declared: {known})"),
                );
            }
        }
    }
}

/// Where in the file a position inside a template is: the template's line
/// is looked for from the scalar's start on (a block scalar's lines follow
/// its indicator; a plain one starts where the scalar does).
fn pos_in_scalar(text: &str, start: Pos, unknown: &Unknown) -> Pos {
    let needle = unknown.line_text.trim();
    if needle.is_empty() {
        return start;
    }
    let lead = unknown.line_text.chars().count() - unknown.line_text.trim_start().chars().count();
    let first = start.line + unknown.line.saturating_sub(1);
    for (n, file_line) in text
        .lines()
        .enumerate()
        .skip(first.saturating_sub(1))
        .take(64)
    {
        let from = if n + 1 == start.line {
            file_line
                .char_indices()
                .nth(start.col.saturating_sub(1))
                .map_or(0, |(i, _)| i)
        } else {
            0
        };
        if let Some(byte) = file_line.get(from..).and_then(|l| l.find(needle)) {
            let col = file_line[..from + byte].chars().count() + unknown.col.saturating_sub(lead);
            return Pos { line: n + 1, col };
        }
    }
    start
}

/// Resolves a rendered path (`spec.children[0].template.metadata.name`) back to steps.
fn find_path(root: &crate::yaml::Node, name: &str) -> Option<Vec<Step>> {
    use crate::yaml::Kind;
    fn walk(node: &crate::yaml::Node, want: &str, path: &mut Vec<Step>) -> bool {
        if path_string(path) == want {
            return true;
        }
        match &node.kind {
            Kind::Map(entries) => entries.iter().any(|e| {
                path.push(Step::Key(e.key.clone()));
                let found = walk(&e.value, want, path);
                if !found {
                    path.pop();
                }
                found
            }),
            Kind::Seq(items) => items.iter().enumerate().any(|(i, n)| {
                path.push(Step::Index(i));
                let found = walk(n, want, path);
                if !found {
                    path.pop();
                }
                found
            }),
            _ => false,
        }
    }
    let mut path = Vec::new();
    walk(root, name, &mut path).then_some(path)
}

/// `group/version` or `version` → (group, version), checked.
pub fn parse_api_version(api_version: &str) -> Result<(String, String), String> {
    if api_version.matches('/').count() > 1 {
        return Err(format!(
            "apiVersion `{api_version}` has more than one `/` (expected `group/version` or `v1`)"
        ));
    }
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    if !super::names::is_version(version) {
        return Err(format!(
            "apiVersion `{api_version}`: version `{version}` is not a Kubernetes version (e.g. `v1`, `v1beta1`, `v2alpha3`)"
        ));
    }
    if api_version.matches('/').count() > 1
        || (!group.is_empty() && dns_subdomain(group).is_err())
        || (group.is_empty() && api_version.contains('/'))
    {
        return Err(format!(
            "apiVersion `{api_version}`: group `{group}` is not a DNS subdomain (e.g. `apps`, `demo.example.com`)"
        ));
    }
    Ok((group.to_string(), version.to_string()))
}

fn is_identifier(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A condition type as Kubernetes takes it (metav1.Condition), without a
/// domain prefix.
fn is_condition_type(t: &str) -> bool {
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    t.len() <= 316
        && t.starts_with(|c: char| c.is_ascii_alphanumeric())
        && t.ends_with(|c: char| c.is_ascii_alphanumeric())
        && t.chars().all(inner)
}

/// A condition reason as Kubernetes takes it (metav1.Condition):
/// `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, at most 1024 characters.
pub fn is_condition_reason(r: &str) -> bool {
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':');
    (1..=1024).contains(&r.len())
        && r.starts_with(|c: char| c.is_ascii_alphabetic())
        && r.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        && r.chars().all(inner)
}

/// `apiVersion` and `kind` as a kind, unchecked (checked elsewhere).
fn loose_gvk(api_version: &str, kind: &str) -> Gvk {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Gvk {
        group: group.to_string(),
        version: version.to_string(),
        kind: kind.to_string(),
    }
}

/// The longest field manager the API server takes.
const MAX_FIELD_MANAGER: usize = 128;

/// Why decorator `id` of rule `rule` cannot be a field manager
/// (`kiln.<rule>.<id>`, with kiln's default field manager), if it cannot.
fn manager_too_long(rule: &str, id: &str) -> Option<String> {
    let manager = format!("kiln.{rule}.{id}");
    (manager.len() > MAX_FIELD_MANAGER).then(|| {
        format!(
            "decorator id `{id}` makes its field manager `kiln.{rule}.<id>` {} characters long; the API server takes at most {MAX_FIELD_MANAGER}",
            manager.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions() {
        assert_eq!(
            parse_api_version("v1").unwrap(),
            (String::new(), "v1".into())
        );
        assert_eq!(
            parse_api_version("apps/v1").unwrap(),
            ("apps".into(), "v1".into())
        );
        assert_eq!(
            parse_api_version("demo.kiln.dev/v1beta2").unwrap(),
            ("demo.kiln.dev".into(), "v1beta2".into())
        );
        for bad in [
            "",
            "1",
            "V1",
            "apps/1",
            "apps/v0",
            "apps/v1gamma1",
            "Apps/v1",
            "a/b/v1",
            "/v1",
            "apps/v1beta",
            "apps_x/v1",
        ] {
            assert!(parse_api_version(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dns_labels() {
        assert!(dns_label("web-1").is_ok());
        for bad in ["", "-a", "a-", "A", "a_b", &"a".repeat(64)] {
            assert!(dns_label(bad).is_err(), "{bad}");
        }
    }
}
