//! `RawRule` → [`Rule`]: names, kinds, durations and selectors checked; every
//! template and expression compiled once; every reference to `related.<name>`
//! and `children.<id>` checked against what the rule declares. All problems
//! are collected, none stops the others from being found.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::load::Document;
use super::names::{dns_label, dns_subdomain};
use super::scope::{Misplaced, placement, well_known_scope};
use super::spec::{
    DurationText, RawChild, RawDecorator, RawFor, RawLabelSelector, RawRule, RawWatch,
};
use super::{
    Backoff, Child, Condition, Decorator, DecoratorTarget, Diagnostic, Gvk, LabelSelector, Need,
    Operator, Primary, Requeue, Requirement, Rule, RuleEvent, RuleSet, Watch, WatchTarget,
    duration,
};
use crate::template::known::{Callable, Unknown};
use crate::template::{Piece, TemplateId, TemplateSet, Tree};
use crate::yaml::{Pos, Step, path_string};

mod adoption;
mod children;
mod decorators;
mod events;
mod external;
mod history;
mod hooks;
mod kinds;
mod order;
mod requeue;
mod status;
mod templates;
mod typing;
mod watches;

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
                if let Some(why) = finalizer_twice(&rules, &rule) {
                    let at = [key("spec"), key("deletion"), key("finalizer")];
                    diagnostics.push(doc.diagnostic(&at, why));
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
    /// The names of `spec.external`.
    external_names: Vec<String>,
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
    /// What loads but will fail when it runs.
    warnings: Vec<Diagnostic>,
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
            external_names: raw.spec.external.iter().map(|e| e.name.clone()).collect(),
            var_limit: None,
            child_refs: None,
            var_children: HashMap::new(),
            edges: Vec::new(),
            crds,
            compiled: Vec::new(),
            warnings: Vec::new(),
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
        let external = self.externals();
        let vars = self.vars(&watch_names, &child_ids);
        let mut children = self.children(&watch_names, &child_ids);
        let order = self.order(&children);
        // A hook's children come after the rendered ones: they are not
        // rendered, so not in `order`.
        let (hook, hooked) = self.hooks(&child_ids);
        children.extend(hooked);
        let status_fields = self.status_fields(&watch_names, &child_ids);
        let conditions = self.conditions(&watch_names, &child_ids);
        let decorators = self.decorators(&watch_names, &child_ids);
        let requeue = self.requeue();
        self.schema_references(api.as_ref(), primary.as_ref());
        let primary_schema = self.primary_schema(api.as_ref(), primary.as_ref());
        self.type_children(&mut children, primary_schema.as_ref().map(|s| &s.0));
        let requeue_at = self.requeue_at(&watch_names, &child_ids);
        let events = self.events();
        let finalizer = self.finalizer();
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
            external,
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
            finalizer,
            events,
            templates: self.set,
            api: api.map(Arc::new),
            warnings: self.warnings,
            hook,
        })
    }

    // --- templates -------------------------------------------------------
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

/// Why `rule` may not name its finalizer: a rule before it on the same
/// kind names the same one (each would take the other's hold for its own,
/// and tear down while the other still holds the primary).
fn finalizer_twice(before: &[Arc<Rule>], rule: &Rule) -> Option<String> {
    let name = rule.finalizer.as_deref()?;
    let other = before.iter().find(|r| {
        r.finalizer.as_deref() == Some(name)
            && r.primary.gvk.group == rule.primary.gvk.group
            && r.primary.gvk.kind == rule.primary.gvk.kind
    })?;
    Some(format!(
        "finalizer `{name}` is already named by rule `{}` on {}: each rule holds a finalizer of its own",
        other.name, rule.primary.gvk.kind
    ))
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
