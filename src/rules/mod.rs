//! Rules: the `kiln.dev/v1alpha1` rule format, loaded from files and
//! validated into compiled [`Rule`]s. Every problem is reported at once, each
//! at its file, line and column with its path inside the rule.
//!
//! ```text
//! paths ─read_sources─▶ Source ─parse─▶ Document (RawRule + YAML tree)
//!       ─validate─▶ Rule (GVKs checked, templates compiled, durations parsed)
//! ```

mod child_options;
pub mod diagnostic;
pub mod duration;
pub mod external;
pub mod history;
pub mod hook;
pub mod load;
pub mod names;
pub mod observed;
pub mod reach;
pub mod read_only;
pub mod scope;
pub mod spec;
mod validate;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use diagnostic::Diagnostic;
pub use spec::{DeletionPolicy, UpdatePolicy};
pub use validate::is_condition_reason;

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

/// The API groups with a dot that kube-apiserver serves itself (the
/// groups without a dot, such as the core group, `apps` and `batch`, are
/// all built in), as listed by `kubectl api-versions` on Kubernetes 1.36.
pub const BUILT_IN_GROUPS: [&str; 18] = [
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

impl Gvk {
    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether the kind is not one of Kubernetes' built-in kinds by its
    /// group: a group with a dot (the API server requires one of a CRD, so
    /// the core group, `apps` and `batch` are built in) but those the API
    /// server itself serves ([`BUILT_IN_GROUPS`]). Groups such as
    /// `gateway.networking.k8s.io` are custom. Only a custom kind's CRD is
    /// read. Whether kiln writes a kind's status is decided from what the
    /// API server serves (`engine::decision::status_writes`); this answers
    /// where no CustomResourceDefinition says (an aggregated API, or offline).
    pub fn is_custom(&self) -> bool {
        self.group.contains('.') && !BUILT_IN_GROUPS.contains(&self.group.as_str())
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
    /// Never these namespaces.
    pub exclude_namespaces: Vec<String>,
    /// Only objects matching this selector.
    pub selector: Option<LabelSelector>,
    /// Only objects in namespaces whose labels match this selector.
    pub namespace_selector: Option<LabelSelector>,
    /// Whether objects created before the rule was first loaded are taken
    /// (`spec.for.takeExisting`; see `engine::runtime::since`).
    pub take_existing: bool,
}

/// The core `Namespace` kind (watched for `spec.for.namespaceSelector`).
pub fn namespace_gvk() -> Gvk {
    Gvk {
        group: String::new(),
        version: "v1".into(),
        kind: "Namespace".into(),
    }
}

impl Primary {
    /// Whether the rule takes an object in `namespace` with these labels.
    pub fn selects<L: LabelSource + ?Sized>(&self, namespace: Option<&str>, labels: &L) -> bool {
        self.refusal(namespace, labels).is_none()
    }

    /// Why `spec.for.namespaceSelector` does not take an object in a
    /// namespace with these labels (`None` for labels: the Namespace is not
    /// known, so nothing is taken); `None` when it does.
    pub fn namespace_refusal(
        &self,
        namespace: &str,
        labels: Option<&dyn LabelSource>,
    ) -> Option<String> {
        let selector = self.namespace_selector.as_ref()?;
        match labels {
            None => Some(format!(
                "its namespace ({namespace}) is not known (yet), so spec.for.namespaceSelector cannot be checked"
            )),
            Some(l) if !selector.matches(l) => Some(format!(
                "the labels of its namespace ({namespace}) {l:?} do not match spec.for.namespaceSelector"
            )),
            Some(_) => None,
        }
    }

    /// Why the rule does not take an object in `namespace` with these
    /// labels; `None` when it does. (Not `namespaceSelector`: see
    /// [`Primary::namespace_refusal`].)
    pub fn refusal<L: LabelSource + ?Sized>(
        &self,
        namespace: Option<&str>,
        labels: &L,
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
        if let Some(ns) = namespace.filter(|ns| self.exclude_namespaces.iter().any(|n| n == ns)) {
            return Some(format!(
                "its namespace ({ns}) is in spec.for.excludeNamespaces"
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

/// Labels an object has, wherever they are kept: a map, or a cached
/// object's compact form (`engine::cache::cached::Labels`).
pub trait LabelSource: std::fmt::Debug {
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelSource for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
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
    pub fn matches<L: LabelSource + ?Sized>(&self, labels: &L) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.label(k) == Some(v.as_str()))
            && self.match_expressions.iter().all(|req| {
                let value = labels.label(&req.key);
                match req.operator {
                    Operator::In => value.is_some_and(|v| req.values.iter().any(|x| x == v)),
                    Operator::NotIn => value.is_none_or(|v| !req.values.iter().any(|x| x == v)),
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
        /// Set-based requirements (literal).
        match_expressions: Vec<Requirement>,
        /// Namespace template; `None` means the primary's namespace.
        namespace: Option<Piece>,
        /// Every namespace kiln watches (then `namespace` is `None`).
        all_namespaces: bool,
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
    /// `readyWhen: exists`: ready once it exists, whatever its kind. Without
    /// either, a live child is judged by its kind ([`crate::readiness`]).
    pub ready_on_exists: bool,
    /// Whether an existing object with the child's name is taken over.
    pub adopt: bool,
    /// What it may take over outside the primary's namespace (`name` or
    /// `namespace/name`): its `adoptNames`, and its own name when literal.
    pub adopt_names: Vec<String>,
    /// Whether a child that exists is written again.
    pub update_policy: UpdatePolicy,
    /// Whether a created-once child that is gone is created again (else
    /// kiln remembers it: `engine::decision::remember`).
    pub recreate: bool,
    /// Maps held exactly as rendered, each a path of keys (`engine::decision::replace`).
    pub replace: Vec<Vec<String>>,
    /// Whether the child goes with its primary and is pruned.
    pub deletion_policy: DeletionPolicy,
    /// Whether it lives outside the primary's namespace (tracked by labels,
    /// cleaned up through a finalizer).
    pub outside: bool,
    /// Other children this one waits for, from its references and `dependsOn`.
    pub needs: Vec<Need>,
    /// Whether `when` reads no other child, so is decided before waiting.
    pub when_first: bool,
    /// Which children no longer rendered stay (`history`).
    pub history: Vec<history::HistoryClass>,
    /// Its kind's schema, which every rendered child is shaped to.
    pub typing: crate::typing::Typing,
    /// Where each templated value is written in the rule's file, by its
    /// path in the object, for the messages of the typing pass.
    pub typed_at: Vec<(Vec<crate::yaml::Step>, crate::yaml::Pos)>,
    /// Returned by the rule's sync hook (`spec.hooks.children`), not
    /// rendered: any number of objects of its kind, none from a template.
    pub from_hook: bool,
}

impl Child {
    /// A kind the rule's hook may return (`spec.hooks.children`): owned (or
    /// orphaned), in the primary's namespace, any number of them.
    pub fn from_hook(id: String, gvk: Gvk, deletion_policy: DeletionPolicy) -> Self {
        // Typed like a rendered child of its kind.
        let typing = crate::typing::Typing::of(&gvk.group, &gvk.version, &gvk.kind, &[]);
        // `metadata` with no name or namespace: `engine::placed` then finds
        // such a child only in its primary's namespace (or cluster-scoped).
        let template = Tree::Value(serde_json::json!({
            "apiVersion": gvk.api_version(),
            "kind": gvk.kind,
            "metadata": {},
        }));
        Self {
            id,
            gvk,
            when: None,
            for_each: None,
            template,
            ready_when: None,
            ready_on_exists: false,
            adopt: false,
            adopt_names: Vec::new(),
            update_policy: UpdatePolicy::Always,
            recreate: true,
            replace: Vec::new(),
            deletion_policy,
            outside: false,
            needs: Vec::new(),
            when_first: true,
            history: Vec::new(),
            from_hook: true,
            typing,
            typed_at: Vec::new(),
        }
    }
}

/// What a decorator patches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecoratorTarget {
    /// The primary itself.
    Primary,
    /// The object (or each object) of this watch.
    Related(String),
}

/// Fields kiln sets on an object it does not own (`spec.decorate`).
#[derive(Debug, Clone)]
pub struct Decorator {
    /// Unique within the rule.
    pub id: String,
    /// What it patches.
    pub target: DecoratorTarget,
    /// Patch only while this is true of the target.
    pub when: Option<TemplateId>,
    /// The partial object.
    pub patch: Tree,
    /// Whether fields other managers own are taken.
    pub force: bool,
    /// The cluster-scoped objects it may patch for a namespaced primary
    /// (`allowNames`, and the watch's name when literal).
    pub allow_names: Vec<String>,
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

/// A condition a rule declares (`spec.status.conditions`).
#[derive(Debug)]
pub struct Condition {
    /// Its type, e.g. `Available`.
    pub type_: String,
    /// An expression giving true/false or `True`/`False`/`Unknown`.
    pub status: TemplateId,
    /// The reason (a template).
    pub reason: Tree,
    /// The message (a template), if any.
    pub message: Option<Tree>,
}

/// An Event a rule records on the primary (`spec.events`).
#[derive(Debug)]
pub struct RuleEvent {
    /// CamelCase, literal.
    pub reason: String,
    /// A Warning (else Normal).
    pub warning: bool,
    /// The message (a template).
    pub message: Tree,
    /// When it is recorded (an expression).
    pub when: TemplateId,
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
    /// Sources outside the cluster (`spec.external`).
    pub external: Vec<external::External>,
    /// Children.
    pub children: Vec<Child>,
    /// Indexes into `children` in the order they are rendered and applied:
    /// every child after the children it waits for, otherwise as written.
    pub order: Vec<usize>,
    /// Named values (`vars.<name>`), in the order they are evaluated.
    pub vars: Vec<(String, Tree)>,
    /// Status fields, in order.
    pub status_fields: Vec<(String, Tree)>,
    /// The rule's own conditions, in order.
    pub conditions: Vec<Condition>,
    /// Requeue policy.
    pub requeue: Requeue,
    /// `spec.requeue.at`: the instant (per primary) to reconcile again at.
    pub requeue_at: Option<Tree>,
    /// Whether applies take over fields other managers own.
    pub force_conflicts: bool,
    /// Patches to objects kiln does not own.
    pub decorators: Vec<Decorator>,
    /// Whether children are deleted in reverse dependency order, with a
    /// finalizer on the primary (`spec.deletion.ordered`).
    pub ordered_deletion: bool,
    /// `spec.for.readOnly`: kiln writes nothing on the primary.
    pub read_only: bool,
    /// `spec.deletion.finalizer`: the finalizer's name, when the rule names it.
    pub finalizer: Option<String>,
    /// `spec.events`: Events the rule records on the primary.
    pub events: Vec<RuleEvent>,
    /// The compiled templates every part above refers to.
    pub templates: TemplateSet,
    /// The API the rule defines (`spec.api`): its CRD.
    pub api: Option<Arc<crate::api::Api>>,
    /// What loads but will fail when it runs (`kiln validate` prints them).
    pub warnings: Vec<Diagnostic>,
    /// `spec.hooks`: the sync and finalize hooks.
    pub hook: Option<hook::Hook>,
}

/// A validated set of rules with unique names.
#[derive(Debug, Default, Clone)]
pub struct RuleSet {
    /// The rules, in file order.
    pub rules: Vec<Arc<Rule>>,
}

impl RuleSet {
    /// Whether a rule defines an API with conversions between its
    /// versions (served by the conversion webhook, whose certificates kiln
    /// keeps in a Secret).
    pub fn converts(&self) -> bool {
        self.rules
            .iter()
            .filter_map(|r| r.api.as_ref())
            .any(|a| a.conversions.is_some())
    }

    /// The rule with this name.
    pub fn get(&self, name: &str) -> Option<&Arc<Rule>> {
        self.rules.iter().find(|r| r.name == name)
    }

    /// This set with every rule that is unchanged in `old` (same name, file
    /// and content) taken from `old`: a reload then holds one compiled copy
    /// of an unchanged rule, not the running one and a new one beside it.
    #[must_use]
    pub fn reusing(mut self, old: &RuleSet) -> Self {
        let old: HashMap<&str, &Arc<Rule>> =
            old.rules.iter().map(|r| (r.name.as_str(), r)).collect();
        for rule in &mut self.rules {
            if let Some(o) = old.get(rule.name.as_str())
                && o.fingerprint == rule.fingerprint
                && o.file == rule.file
            {
                *rule = Arc::clone(o);
            }
        }
        self
    }
}

/// Loads and validates every rule under `paths`. Either every rule is valid
/// and the set is returned, or every problem found is.
pub fn load(paths: &[PathBuf]) -> Result<RuleSet, Vec<Diagnostic>> {
    load_against(paths, &[])
}

/// Like [`load`], with CustomResourceDefinitions whose schemas the
/// templates of rules on their kinds are checked against.
pub fn load_against(
    paths: &[PathBuf],
    crds: &[serde_json::Value],
) -> Result<RuleSet, Vec<Diagnostic>> {
    let (sources, diagnostics) = load::read_sources(paths);
    validate_sources(&sources, diagnostics, crds)
}

/// Parses and validates rules from texts already read (a ConfigMap's keys, say).
pub fn load_sources(sources: Vec<load::Source>) -> Result<RuleSet, Vec<Diagnostic>> {
    validate_sources(&sources, Vec::new(), &[])
}

/// Like [`load_sources`], for sources read next to files that could not be
/// read at all: those problems are reported first, with everything else.
pub fn load_sources_with(
    sources: Vec<load::Source>,
    read_errors: Vec<Diagnostic>,
) -> Result<RuleSet, Vec<Diagnostic>> {
    validate_sources(&sources, read_errors, &[])
}

fn validate_sources(
    sources: &[load::Source],
    mut diagnostics: Vec<Diagnostic>,
    crds: &[serde_json::Value],
) -> Result<RuleSet, Vec<Diagnostic>> {
    let mut docs = Vec::new();
    for source in sources {
        let (d, errs) = load::parse(source);
        docs.extend(d);
        diagnostics.extend(errs);
    }
    let set = validate::validate_all(docs, &mut diagnostics, crds);
    if diagnostics.is_empty() {
        Ok(set)
    } else {
        Err(diagnostics)
    }
}

/// The one valid rule in `text` (unit tests; panics on a diagnostic).
#[cfg(test)]
pub(crate) fn one_rule(text: &str) -> Rule {
    let source = load::Source {
        file: "rule.yaml".into(),
        text: text.to_string(),
    };
    let mut set = load_sources(vec![source]).unwrap_or_else(|d| panic!("{}", d[0]));
    Arc::into_inner(set.rules.remove(0)).unwrap_or_else(|| panic!("one rule"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_excluded_namespace_is_never_selected_and_says_why() {
        let primary = Primary {
            gvk: Gvk {
                group: "demo.kiln.dev".into(),
                version: "v1".into(),
                kind: "App".into(),
            },
            namespaces: Vec::new(),
            exclude_namespaces: vec!["kube-system".into()],
            selector: None,
            namespace_selector: None,
            take_existing: true,
        };
        let labels = BTreeMap::new();
        assert!(primary.selects(Some("team"), &labels));
        assert!(
            primary.selects(None, &labels),
            "cluster-scoped: no namespace to exclude"
        );
        assert_eq!(
            primary.refusal(Some("kube-system"), &labels).as_deref(),
            Some("its namespace (kube-system) is in spec.for.excludeNamespaces")
        );
    }

    #[test]
    fn a_namespace_selector_takes_only_namespaces_it_matches_and_never_an_unknown_one() {
        let primary = Primary {
            gvk: namespace_gvk(),
            namespaces: Vec::new(),
            exclude_namespaces: Vec::new(),
            selector: None,
            namespace_selector: Some(LabelSelector {
                match_labels: [("team".to_string(), "a".to_string())].into(),
                match_expressions: Vec::new(),
            }),
            take_existing: true,
        };
        let team_a: BTreeMap<String, String> = [("team".to_string(), "a".to_string())].into();
        assert_eq!(primary.namespace_refusal("ns", Some(&team_a)), None);
        assert!(
            primary
                .namespace_refusal("ns", Some(&BTreeMap::new()))
                .is_some()
        );
        assert!(
            primary
                .namespace_refusal("ns", None)
                .unwrap()
                .contains("not known"),
            "never act on missing information"
        );
    }
}
