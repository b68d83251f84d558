//! Rules: the `kiln.dev/v1alpha1` rule format, loaded from files and
//! validated into compiled [`Rule`]s. Every problem is reported at once, each
//! at its file, line and column with its path inside the rule.
//!
//! ```text
//! paths ─read_sources─▶ Source ─parse─▶ Document (RawRule + YAML tree)
//!       ─validate─▶ Rule (GVKs checked, templates compiled, durations parsed)
//! ```

pub mod diagnostic;
pub mod duration;
pub mod load;
pub mod names;
pub mod scope;
pub mod spec;
mod validate;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use diagnostic::Diagnostic;

use crate::template::{Piece, TemplateId, TemplateSet, Tree};

/// A group, version and kind, checked for syntax.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvk {
    /// API group; empty for the core group.
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
}

impl Gvk {
    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl std::fmt::Display for Gvk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version(), self.kind)
    }
}

/// The primary kind of a rule and which of its objects it takes.
#[derive(Debug, Clone)]
pub struct Primary {
    /// The kind.
    pub gvk: Gvk,
    /// Only these namespaces (empty: all).
    pub namespaces: Vec<String>,
    /// Only objects matching this selector.
    pub selector: Option<LabelSelector>,
}

impl Primary {
    /// Whether the rule takes an object in `namespace` with these labels.
    pub fn selects(&self, namespace: Option<&str>, labels: &BTreeMap<String, String>) -> bool {
        self.refusal(namespace, labels).is_none()
    }

    /// Why the rule does not take an object in `namespace` with these
    /// labels; `None` when it does.
    pub fn refusal(
        &self,
        namespace: Option<&str>,
        labels: &BTreeMap<String, String>,
    ) -> Option<String> {
        let in_namespace = self.namespaces.is_empty()
            || namespace.is_some_and(|ns| self.namespaces.iter().any(|n| n == ns));
        if !in_namespace {
            return Some(format!(
                "its namespace ({}) is not in spec.for.namespaces ({})",
                namespace.unwrap_or("none"),
                self.namespaces.join(", ")
            ));
        }
        match &self.selector {
            Some(s) if !s.matches(labels) => Some(format!(
                "its labels {labels:?} do not match spec.for.selector"
            )),
            _ => None,
        }
    }
}

/// A label selector, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector {
    /// Labels that must have exactly these values.
    pub match_labels: BTreeMap<String, String>,
    /// Further requirements, all of which must hold.
    pub match_expressions: Vec<Requirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// How the label is tested.
    pub operator: Operator,
    /// Values for `In` and `NotIn`.
    pub values: Vec<String>,
}

/// A label selector operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// The label has one of the values.
    In,
    /// The label is absent or has none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl LabelSelector {
    /// Whether labels satisfy the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|req| {
                let value = labels.get(&req.key);
                match req.operator {
                    Operator::In => value.is_some_and(|v| req.values.contains(v)),
                    Operator::NotIn => value.is_none_or(|v| !req.values.contains(v)),
                    Operator::Exists => value.is_some(),
                    Operator::DoesNotExist => value.is_none(),
                }
            })
    }
}

/// How a watched object is found for a primary.
#[derive(Debug, Clone)]
pub enum WatchTarget {
    /// One object by name (and namespace).
    Ref {
        /// Name template.
        name: Piece,
        /// Namespace template; `None` means the primary's namespace.
        namespace: Option<Piece>,
    },
    /// Every object with these labels; templates see a list.
    Selector {
        /// Label key and value template.
        match_labels: Vec<(String, Piece)>,
        /// Namespace template; `None` means the primary's namespace.
        namespace: Option<Piece>,
    },
}

/// An object (or set of objects) a primary depends on.
#[derive(Debug, Clone)]
pub struct Watch {
    /// The name templates use (`related.<name>`).
    pub name: String,
    /// The watched kind.
    pub gvk: Gvk,
    /// How to find it.
    pub target: WatchTarget,
    /// Whether its absence makes the primary wait.
    pub required: bool,
    /// Namespaces a templated namespace may render to, besides the primary's.
    pub allow_namespaces: Vec<String>,
}

/// A child rendered for each primary.
#[derive(Debug, Clone)]
pub struct Child {
    /// Unique within the rule.
    pub id: String,
    /// The child's kind (literal in the template).
    pub gvk: Gvk,
    /// Render only when this is true.
    pub when: Option<TemplateId>,
    /// One child per item of this list.
    pub for_each: Option<TemplateId>,
    /// The object.
    pub template: Tree,
    /// Ready when this is true of the live child.
    pub ready_when: Option<TemplateId>,
    /// Whether an existing object with the child's name is taken over.
    pub adopt: bool,
    /// Other children this one waits for, from its references and `dependsOn`.
    pub needs: Vec<Need>,
    /// Whether `when` reads no other child, so is decided before waiting.
    pub when_first: bool,
}

/// A child another child waits for before it is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    /// The id of the child waited for.
    pub id: String,
    /// Whether it must be ready, not only exist.
    pub ready: bool,
}

/// Exponential backoff bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// First delay.
    pub initial: Duration,
    /// Largest delay.
    pub max: Duration,
}

/// When to reconcile again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requeue {
    /// After a success, even without a change.
    pub resync: Option<Duration>,
    /// While waiting on a dependency or a child.
    pub waiting: Duration,
    /// After a transient error.
    pub on_error: Backoff,
}

impl Default for Requeue {
    fn default() -> Self {
        Self {
            resync: None,
            waiting: Duration::from_secs(5),
            on_error: Backoff {
                initial: Duration::from_secs(1),
                max: Duration::from_secs(300),
            },
        }
    }
}

/// A validated rule with every template compiled.
#[derive(Debug)]
pub struct Rule {
    /// Unique in a rule set.
    pub name: String,
    /// The file it came from.
    pub file: PathBuf,
    /// SHA-256 of the rule's content, to tell changed rules from unchanged ones.
    pub fingerprint: String,
    /// The primary kind.
    pub primary: Primary,
    /// Dependencies.
    pub watches: Vec<Watch>,
    /// Children.
    pub children: Vec<Child>,
    /// Indexes into `children` in the order they are rendered and applied:
    /// every child after the children it waits for, otherwise as written.
    pub order: Vec<usize>,
    /// Named values (`vars.<name>`), in the order they are evaluated.
    pub vars: Vec<(String, Tree)>,
    /// Status fields, in order.
    pub status_fields: Vec<(String, Tree)>,
    /// Requeue policy.
    pub requeue: Requeue,
    /// Whether applies take over fields other managers own.
    pub force_conflicts: bool,
    /// Whether children are deleted in reverse dependency order, with a
    /// finalizer on the primary (`spec.deletion.ordered`).
    pub ordered_deletion: bool,
    /// The compiled templates every part above refers to.
    pub templates: TemplateSet,
}

/// A validated set of rules with unique names.
#[derive(Debug, Default, Clone)]
pub struct RuleSet {
    /// The rules, in file order.
    pub rules: Vec<Arc<Rule>>,
}

impl RuleSet {
    /// The rule with this name.
    pub fn get(&self, name: &str) -> Option<&Arc<Rule>> {
        self.rules.iter().find(|r| r.name == name)
    }
}

/// Loads and validates every rule under `paths`. Either every rule is valid
/// and the set is returned, or every problem found is.
pub fn load(paths: &[PathBuf]) -> Result<RuleSet, Vec<Diagnostic>> {
    let (sources, diagnostics) = load::read_sources(paths);
    validate_sources(&sources, diagnostics)
}

/// Parses and validates rules from texts already read (a ConfigMap's keys, say).
pub fn load_sources(sources: Vec<load::Source>) -> Result<RuleSet, Vec<Diagnostic>> {
    validate_sources(&sources, Vec::new())
}

/// Like [`load_sources`], for sources read next to files that could not be
/// read at all: those problems are reported first, with everything else.
pub fn load_sources_with(
    sources: Vec<load::Source>,
    read_errors: Vec<Diagnostic>,
) -> Result<RuleSet, Vec<Diagnostic>> {
    validate_sources(&sources, read_errors)
}

fn validate_sources(
    sources: &[load::Source],
    mut diagnostics: Vec<Diagnostic>,
) -> Result<RuleSet, Vec<Diagnostic>> {
    let mut docs = Vec::new();
    for source in sources {
        let (d, errs) = load::parse(source);
        docs.extend(d);
        diagnostics.extend(errs);
    }
    let set = validate::validate_all(docs, &mut diagnostics);
    if diagnostics.is_empty() {
        Ok(set)
    } else {
        Err(diagnostics)
    }
}
