//! The rule file as written: serde types that mirror the YAML one to one.
//! These may be wrong in every way the type system allows; `validate` turns
//! them into a [`Rule`](super::Rule) that cannot be.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

/// The only `apiVersion` a rule may have.
pub const API_VERSION: &str = "kiln.dev/v1alpha1";
/// The only `kind` a rule may have.
pub const KIND: &str = "Rule";

/// A Kiln rule: one primary kind, what to render for each of its objects, and
/// how to requeue.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(title = "Kiln Rule")]
pub struct RawRule {
    /// Always `kiln.dev/v1alpha1`.
    pub api_version: String,
    /// Always `Rule`.
    pub kind: String,
    /// The rule's name (unique in a rule set; used in labels and metrics).
    pub metadata: RawMetadata,
    /// What the rule does.
    pub spec: RawSpec,
}

/// Rule metadata.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawMetadata {
    /// A DNS-1123 label: lower-case letters, digits and `-`, at most 63 characters.
    pub name: String,
    /// Free-form labels (not interpreted).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Free-form annotations (not interpreted).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// The body of a rule.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawSpec {
    /// The primary kind: every object of it is reconciled (controller-runtime's `For`).
    /// With `api`, it may be left out: the primary is then the API's kind at
    /// its storage version.
    #[serde(default, rename = "for")]
    pub for_: Option<RawFor>,
    /// The API this rule defines: kiln generates its CustomResourceDefinition
    /// (`kiln crd`), and `kiln run` creates and updates it.
    #[serde(default)]
    pub api: Option<crate::api::spec::RawApi>,
    /// Objects a primary depends on (controller-runtime's `Watches`); templates see them as `related.<name>`.
    #[serde(default)]
    pub watches: Vec<RawWatch>,
    /// Data read from systems outside the cluster over HTTP(S), per primary;
    /// templates see each answer as `external.<name>`. A failed read
    /// changes no child.
    #[serde(default)]
    pub external: Vec<RawExternal>,
    /// Named values, evaluated once per reconcile in the order written;
    /// every template sees them as `vars.<name>`. Each is a template (a
    /// string that is one `{{ expr }}` keeps its type) that may read `self`,
    /// `related`, `children`, `rule` and the vars before it.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, Value>")]
    pub vars: serde_json::Map<String, Value>,
    /// Children rendered and owned for each primary (controller-runtime's `Owns`).
    #[serde(default)]
    pub children: Vec<RawChild>,
    /// Fields written to the primary's status.
    #[serde(default)]
    pub status: Option<RawStatus>,
    /// When to reconcile again.
    #[serde(default)]
    pub requeue: RawRequeue,
    /// How children are applied.
    #[serde(default)]
    pub apply: RawApply,
    /// Partial patches kiln applies to objects it does not own — the
    /// primary itself or related objects — each as a field manager of its
    /// own, removing exactly its fields when it stops applying them.
    #[serde(default)]
    pub decorate: Vec<RawDecorator>,
    /// What happens to the children when a primary is deleted.
    #[serde(default)]
    pub deletion: Option<RawDeletion>,
    /// Events of the rule's own on the primary after a reconcile (as
    /// sample-controller records `Synced`), each when its `when` holds.
    #[serde(default)]
    pub events: Vec<RawEvent>,
    /// A sync and a finalize hook speaking Metacontroller's
    /// CompositeController JSON: what the sync hook returns is applied as
    /// the primary's children and status.
    #[serde(default)]
    pub hooks: Option<RawHooks>,
}

/// `spec.hooks` as written.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawHooks {
    /// Called on every reconcile with Metacontroller's sync request
    /// (`controller`, `parent`, `children`, `related`, `finalizing`); its
    /// answer (`status`, `children`, `resyncAfterSeconds`) is what kiln
    /// applies for the primary.
    #[serde(default)]
    pub sync: Option<RawEndpoint>,
    /// Called while a primary is being deleted (`finalizing: true`), until it
    /// answers `finalized: true`: kiln holds a finalizer on the primary
    /// until then, or until `giveUpAfter`.
    #[serde(default)]
    pub finalize: Option<RawFinalize>,
    /// The kinds the hook may return, each under an id of its own (the id
    /// kiln marks those children with). An answer holding any other kind
    /// is refused whole.
    #[serde(default)]
    pub children: Vec<RawHookChild>,
}

/// Where a hook is, as written.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawEndpoint {
    /// The hook's URL, literal (`http://` or `https://`): kiln POSTs the
    /// request there.
    pub url: String,
    /// How long kiln waits for the answer (default `10s`, at most `60s`).
    #[serde(default)]
    pub timeout: Option<DurationText>,
}

/// The finalize hook, as written.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawFinalize {
    /// The hook's URL, literal (`http://` or `https://`).
    pub url: String,
    /// How long kiln waits for one answer (default `10s`, at most `60s`).
    #[serde(default)]
    pub timeout: Option<DurationText>,
    /// How long after the primary's deletion kiln keeps calling (default
    /// `1h`, at most `168h`); then it gives up, says so in a Warning Event,
    /// and lets go of its finalizer.
    #[serde(default)]
    pub give_up_after: Option<DurationText>,
}

/// A kind the hook may return.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawHookChild {
    /// The id kiln marks these children with; unique among the rule's
    /// children.
    pub id: String,
    /// `group/version` of the kind.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// `Delete` (default): owned by the primary, pruned when the hook stops
    /// returning it. `Orphan`: left behind.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
}

/// An HTTP(S) source read for each primary (`spec.external`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawExternal {
    /// The name templates use: `external.<name>`. Letters, digits and `_`.
    pub name: String,
    /// Where the request goes: `https://host[:port][/path/prefix]`, literal
    /// (no template): a primary's values may fill `path` and `query` below
    /// it, never the destination.
    pub url: String,
    /// `GET` (default) or `POST` (a query API; `body` is sent as JSON).
    #[serde(default)]
    pub method: Option<String>,
    /// Path segments below the URL, each a template rendered per primary
    /// and encoded as one segment (a `/` in a value stays in its segment).
    #[serde(default)]
    pub path: Vec<String>,
    /// Query parameters: name → template.
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    /// Headers, literal (credentials come from `secretRef`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The JSON body of a `POST`: a YAML tree of templates.
    #[serde(default)]
    #[schemars(with = "Option<BTreeMap<String, Value>>")]
    pub body: Option<Value>,
    /// A Secret (literal namespace and name) with the credentials: `token`
    /// (sent as a bearer token) or `username` and `password` (basic), and
    /// `ca.crt` (CAs to trust instead of the system's), `tls.crt` and
    /// `tls.key` (a client certificate).
    #[serde(default)]
    pub secret_ref: Option<RawSecretRef>,
    /// Addresses the source may reach that kiln refuses by default
    /// (loopback, link-local, the API server, cloud metadata): CIDRs
    /// (`10.0.0.5/32`) or host names. An entry opens only addresses inside
    /// it that lie in a refused range it fits in: `0.0.0.0/0` opens nothing.
    #[serde(default)]
    pub allow: Vec<String>,
    /// The longest wait for a whole answer (default `10s`, at most `60s`).
    #[serde(default)]
    pub timeout: Option<DurationText>,
    /// The largest body read, in bytes (default 921600, 900 KiB; at most 8 MiB).
    #[serde(default)]
    pub max_bytes: Option<u64>,
    /// How long an answer is used (and, with `readyWhen`, how often a
    /// waiting primary asks again); every primary making the same request
    /// shares it. Default `30s`.
    #[serde(default)]
    pub interval: Option<DurationText>,
    /// The fewest time between two requests of this source (default `1s`):
    /// its rate limit. A `429` or `503` answer's `Retry-After` holds it
    /// longer.
    #[serde(default)]
    pub min_interval: Option<DurationText>,
    /// An expression on the answer (`external.<name>`, `self`): while it
    /// is false the primary waits (nothing applied or pruned) and asks
    /// again every `interval`.
    #[serde(default)]
    pub ready_when: Option<String>,
    /// Use the last good answer, no older than `maxAge`, when a read fails
    /// (default: a failed read makes the primary wait).
    #[serde(default)]
    pub last_good: Option<RawLastGood>,
}

/// A Secret named literally.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSecretRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// How old a last good answer may be and still be used.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawLastGood {
    /// E.g. `10m`.
    pub max_age: DurationText,
}

/// An Event the rule records on the primary when a reconcile ends.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEvent {
    /// The reason, literal CamelCase, e.g. `Synced`.
    pub reason: String,
    /// `Normal` (default) or `Warning`.
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    /// A template for the message; sees `self`, `rule` and `outcome`.
    pub message: String,
    /// An expression on `self` and `outcome` (`outcome.reconciled`,
    /// `outcome.ready`, `outcome.reason`, `outcome.message`): the Event is
    /// recorded while it holds (default `outcome.reconciled`), once per
    /// generation of the primary and message.
    #[serde(default)]
    pub when: Option<String>,
}

/// A decorator: fields kiln sets on an object it does not own.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawDecorator {
    /// Unique within the rule; the field manager is `kiln.<rule>.<id>`.
    pub id: String,
    /// `self` (the primary) or `related.<watch name>` (the watched object,
    /// or each object of a selector watch).
    pub target: String,
    /// An expression (which may use `target`); the patch applies only while
    /// it is true (default: always). When it turns false, kiln removes its
    /// fields from that object.
    #[serde(default)]
    pub when: Option<String>,
    /// The fields to set, as a YAML tree of templates (labels, annotations,
    /// chosen fields); templates see `target`, the object being decorated.
    /// Its name, namespace, `apiVersion` and `kind` are the target's.
    #[schemars(with = "BTreeMap<String, Value>")]
    pub patch: Value,
    /// Take fields another field manager owns (default `false`: such a
    /// conflict is reported as `Conflict` and their value stays).
    #[serde(default)]
    pub force: bool,
    /// Names (literal) of the cluster-scoped objects the decorator may
    /// patch for a namespaced primary. Whoever writes a primary decides
    /// values, not which cluster-wide object kiln writes: a cluster-scoped
    /// target not listed here is refused for that primary. A target found
    /// by a literal name needs no list.
    #[serde(default)]
    pub allow_names: Vec<String>,
}

/// What happens to the children when a primary is deleted.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawDeletion {
    /// Delete the children in reverse dependency order (a child before the
    /// children it waits for), each gone before the next, holding the
    /// primary with a finalizer meanwhile. Default `false`: the garbage
    /// collector deletes them, in no order, and kiln adds no finalizer.
    #[serde(default)]
    pub ordered: bool,
    /// The name of the finalizer kiln keeps on the primary (a qualified
    /// name, e.g. `finalizers.example.com`). Named, kiln holds it on every
    /// primary it takes, and deletes the children (in reverse dependency
    /// order) before letting go. Default: `<rule>.kiln.dev/ordered-deletion`,
    /// held only with `ordered` or `outside` children.
    #[serde(default)]
    pub finalizer: Option<String>,
}

/// How children are applied (server-side apply).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawApply {
    /// Take over fields another field manager owns (default true). When
    /// false, such a conflict is reported as a `Conflict` condition and the
    /// other manager's value stays.
    #[serde(default = "yes")]
    pub force_conflicts: bool,
}

impl Default for RawApply {
    fn default() -> Self {
        Self {
            force_conflicts: true,
        }
    }
}

fn yes() -> bool {
    true
}

/// The primary kind and which of its objects the rule takes.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawFor {
    /// `group/version`, or `v1` for the core group.
    pub api_version: String,
    /// The kind, e.g. `WebApp`.
    pub kind: String,
    /// Only these namespaces; empty means all.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Never objects in these namespaces (e.g. `kube-system`).
    #[serde(default)]
    pub exclude_namespaces: Vec<String>,
    /// Only objects with these labels.
    #[serde(default)]
    pub selector: Option<RawLabelSelector>,
    /// Only objects in namespaces with these labels (namespaced primaries).
    #[serde(default)]
    pub namespace_selector: Option<RawLabelSelector>,
    /// kiln writes nothing on the primary: no condition, no
    /// `observedGeneration`, no status field, no finalizer, no label or
    /// annotation (for a kind another controller owns). Default `false`.
    #[serde(default)]
    pub read_only: bool,
    /// Whether the rule takes objects created before it was first loaded
    /// (default `true`). `false` (Kyverno's `generateExisting: false`):
    /// only objects whose `metadata.creationTimestamp` is later than the
    /// rule's first load, which kiln records in its own namespace (the
    /// ConfigMap `kiln-since-<rule>`), so a restart or a reload of the rule
    /// never takes older objects.
    #[serde(default = "yes")]
    pub take_existing: bool,
}

/// A Kubernetes label selector.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawLabelSelector {
    /// Labels that must have exactly these values.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    #[serde(default)]
    pub match_expressions: Vec<RawLabelRequirement>,
}

/// One set-based label requirement.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawLabelRequirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values for `In` / `NotIn`.
    #[serde(default)]
    pub values: Vec<String>,
}

/// An object (or a set of objects) a primary depends on.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawWatch {
    /// The name templates use: `related.<name>`. Letters, digits and `_`.
    pub name: String,
    /// `group/version` of the watched kind.
    pub api_version: String,
    /// The watched kind.
    pub kind: String,
    /// One object, by a name rendered per primary. Exactly one of `ref` and `selector`.
    #[serde(default, rename = "ref")]
    pub ref_: Option<RawRef>,
    /// All objects matching labels rendered per primary; templates see a list.
    #[serde(default)]
    pub selector: Option<RawWatchSelector>,
    /// When true, a missing object puts the primary in `Waiting` instead of rendering.
    #[serde(default)]
    pub required: bool,
    /// Namespaces (literal) a templated `namespace` may render to besides
    /// the primary's own. For a namespaced primary, whoever writes it decides
    /// values, not where kiln reads: a templated namespace that renders
    /// anywhere else is refused for that object.
    #[serde(default)]
    pub allow_namespaces: Vec<String>,
}

/// A reference to one object, rendered per primary.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRef {
    /// Template for the object's name.
    pub name: String,
    /// Template for its namespace (default: the primary's; ignored for cluster-scoped kinds).
    #[serde(default)]
    pub namespace: Option<String>,
}

/// Objects chosen by labels, rendered per primary.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawWatchSelector {
    /// Label values (each a template) the objects must have. With no
    /// labels and no expressions, every object is selected.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements (literal), all of which must hold.
    #[serde(default)]
    pub match_expressions: Vec<RawLabelRequirement>,
    /// Template for the namespace to look in (default: the primary's).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Look in every namespace kiln watches (a literal choice of the rule's
    /// author; not with `namespace`).
    #[serde(default)]
    pub all_namespaces: bool,
}

/// A child object rendered for each primary.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawChild {
    /// Unique within the rule; templates see the live child as `children.<id>`.
    pub id: String,
    /// An expression; the child exists only while it is true (default: always).
    #[serde(default)]
    pub when: Option<String>,
    /// An expression giving a list; one child per item, which templates see as
    /// `item` (and its position as `index`). The name must differ per item.
    #[serde(default)]
    pub for_each: Option<String>,
    /// The object: a YAML tree whose string scalars are templates.
    /// `apiVersion` and `kind` must be literal.
    #[schemars(with = "BTreeMap<String, Value>")]
    pub template: Value,
    /// An expression on `child` (the live object); the child counts as ready when true.
    /// `exists`: ready once it exists. Default: judged by its kind
    /// (`crate::readiness`).
    #[serde(default)]
    pub ready_when: Option<String>,
    /// Take over an object that already exists with the child's name and
    /// was not created by kiln for this primary: kiln adds its labels and
    /// owner reference, manages it from then on, and deletes it when it
    /// stops rendering it. Default `false`: such an object is left untouched
    /// and the primary reports `AlreadyExists`.
    #[serde(default)]
    pub adopt: bool,
    /// What `adopt: true` may take over outside the primary's namespace
    /// (an `outside` child, a cluster-scoped one, a cluster-scoped
    /// primary's): literal names, `namespace/name` for a namespaced kind.
    /// Whoever writes a primary decides values, not which existing object
    /// kiln takes over: an object not listed is left alone (`AlreadyExists`).
    /// A child whose name (and namespace) is literal needs no list.
    #[serde(default)]
    pub adopt_names: Vec<String>,
    /// `Always` (default): kiln keeps the child as the rule renders it.
    /// `CreateOnce`: kiln creates the child when it does not exist and never
    /// writes it again once it does (users may change it).
    #[serde(default)]
    pub update_policy: UpdatePolicy,
    /// With `updatePolicy: CreateOnce` only: `false` makes kiln remember
    /// that it created the child (an annotation `<rule>.kiln.dev/created-once`
    /// on the primary), so a child deleted on purpose is not created again
    /// (Kyverno's generate without `synchronize`). Default `true`: a
    /// created-once child that is deleted is created again.
    #[serde(default = "yes")]
    pub recreate: bool,
    /// Field paths (dotted, e.g. `spec.hard`) of maps the child holds
    /// exactly as rendered: keys another writer added under them are
    /// removed (Kyverno's `synchronize`), with a JSON patch conditioned on
    /// the child's `resourceVersion`. Other fields keep server-side apply's
    /// sharing.
    #[serde(default)]
    pub replace: Vec<String>,
    /// `Delete` (default): the child has a controller owner reference to the
    /// primary, goes with it, and is deleted when no longer rendered.
    /// `Orphan`: no owner reference; the child stays when the primary goes
    /// or stops rendering it.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// The child lives outside the primary's namespace: cluster-scoped (a
    /// Namespace), or in a namespace its template names. It is tracked by
    /// kiln's labels instead of an owner reference and deleted by kiln
    /// (through a finalizer on the primary) when the primary goes. Its name
    /// and namespace may use only `self.metadata.name`,
    /// `self.metadata.namespace`, `self.metadata.uid` and `rule.name`: the
    /// rule decides where it goes, not the primary's author.
    #[serde(default)]
    pub outside: bool,
    /// Children this one waits for, besides those its templates refer to
    /// (`children.<id>` waits until it exists, `ready.<id>` until it is
    /// ready). A child waiting for another is not applied yet.
    #[serde(default)]
    pub depends_on: Vec<RawDependency>,
    /// Live children the rule no longer renders that stay, by class (the
    /// finished Jobs of a CronJob): the newest `keep` of each class stay,
    /// the older ones are pruned. A child no class takes is pruned as
    /// usual. Only kiln's own children of this id are ever counted or
    /// deleted.
    #[serde(default)]
    pub history: Vec<RawHistory>,
}

/// A class of a child's history.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHistory {
    /// An expression on `child` (the live object, besides `self`, `vars`,
    /// ...): the no-longer-rendered children it holds for belong to this
    /// class (each to the first class that takes it). Default: every one.
    #[serde(default)]
    pub when: Option<String>,
    /// How many of the class stay, the newest by creation time: an integer,
    /// or an expression giving one (e.g.
    /// `self.spec.successfulJobsHistoryLimit | default(3)`).
    #[schemars(with = "Value")]
    pub keep: Value,
}

/// A child another child waits for.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawDependency {
    /// The id of the child waited for.
    pub id: String,
    /// Wait until it is ready (its `readyWhen` holds), not only until it exists.
    #[serde(default)]
    pub ready: bool,
}

/// When kiln writes a child that exists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum UpdatePolicy {
    /// Apply whatever differs from the rendered child, on every reconcile.
    #[default]
    Always,
    /// Apply only while the child does not exist; never rewrite it.
    CreateOnce,
}

/// What becomes of a child when its primary goes or stops rendering it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    /// Owned by the primary: garbage-collected with it, pruned when no longer rendered.
    #[default]
    Delete,
    /// Left behind: no owner reference, never pruned.
    Orphan,
}

/// What the engine writes to the primary's status.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawStatus {
    /// Field name -> template. `observedGeneration` and `conditions` belong to the engine.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, Value>")]
    pub fields: serde_json::Map<String, Value>,
    /// Conditions of the rule's own (e.g. `Available`, `Progressing`,
    /// `Degraded`), written next to the engine's; the primary's CRD must
    /// declare `status.conditions`.
    #[serde(default)]
    pub conditions: Vec<RawCondition>,
}

/// A condition the rule declares; its `lastTransitionTime` moves only when
/// its status does.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCondition {
    /// The condition type, literal: letters, digits, `-`, `_` and `.`, e.g.
    /// `Available`. `Ready`, `Reconciled` and `Waiting` are the engine's.
    #[serde(rename = "type")]
    pub type_: String,
    /// An expression (like `when`): true or false, or the text `True`,
    /// `False` or `Unknown`.
    pub status: String,
    /// A template for the reason: CamelCase, e.g. `MinimumReplicasAvailable`.
    pub reason: String,
    /// A template for the message (default empty).
    #[serde(default)]
    pub message: Option<String>,
}

/// Requeue policy (controller-runtime's `Result{RequeueAfter}`), as durations
/// like `30s`, `5m`, `1h30m`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawRequeue {
    /// Reconcile again this long after a success, even without a change (default: never).
    #[serde(default)]
    pub resync: Option<DurationText>,
    /// Retry this often while a required dependency is missing or a child is not ready (default `5s`).
    #[serde(default)]
    pub waiting: Option<DurationText>,
    /// Exponential backoff for transient errors, per object.
    #[serde(default)]
    pub on_error: Option<RawBackoff>,
    /// A template giving the instant to reconcile again at (RFC 3339), a
    /// list of them (the earliest counts), or null/empty for none; e.g.
    /// `"{{ cron_next(self.spec.schedule, now()) }}"`.
    #[serde(default)]
    pub at: Option<Value>,
}

/// A duration as written (`30s`, `5m`, `1h30m`). A bare number is taken in
/// only so that validation can refuse it with a useful message.
#[derive(Debug, Clone, JsonSchema)]
pub struct DurationText(pub String);

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(Self(s)),
            Value::Number(n) => Ok(Self(n.to_string())),
            other => Err(serde::de::Error::custom(format!(
                "expected a duration like `30s` or `5m`, found {other}"
            ))),
        }
    }
}

/// Exponential backoff bounds.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBackoff {
    /// First delay (default `1s`).
    #[serde(default)]
    pub initial: Option<DurationText>,
    /// Largest delay (default `5m`).
    #[serde(default)]
    pub max: Option<DurationText>,
}

/// The JSON Schema of a rule document, pretty-printed (what `kiln schema`
/// prints and `rules/rule.schema.json` holds).
pub fn json_schema() -> String {
    let schema = schemars::schema_for!(RawRule);
    serde_json::to_string_pretty(&schema).unwrap_or_default()
}
