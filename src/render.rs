//! Rendering one rule for one primary: a pure function of the rule, the
//! primary, its related objects and its live children. The engine and
//! `kiln render` call the same function, so what `kiln render` prints is what
//! the engine applies.

use minijinja::Value as JinjaValue;
use serde_json::{Map, Value, json};

use crate::rules::{Gvk, Rule};
use crate::template::generate::{self, Draw};
use crate::template::{Budget, RenderError, to_jinja};

pub mod history;

/// Label every child carries.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY: &str = "kiln";
/// Label naming the rule that rendered a child.
pub const RULE_LABEL: &str = "kiln.dev/rule";
/// Label naming the child's id in its rule.
pub const CHILD_LABEL: &str = "kiln.dev/child";
/// Label holding the uid of the primary an `outside` child belongs to (it
/// can carry no owner reference).
pub const OWNER_UID_LABEL: &str = "kiln.dev/owner-uid";
/// Annotation naming that primary, for people.
pub const OWNER_ANNOTATION: &str = "kiln.dev/owner";
/// Annotation holding a hash of everything kiln applied to a child. A child
/// whose annotation differs from the hash of what the rule renders now is
/// applied again, in full, so server-side apply removes every field kiln set
/// before and no longer renders (a label, a key, an env var, a port).
pub const APPLIED_ANNOTATION: &str = "kiln.dev/applied";
/// Annotation naming the uid of the primary an orphaned child
/// (`deletionPolicy: Orphan`) was rendered for, in place of an owner
/// reference: the garbage collector leaves it, kiln still finds it.
pub const PRIMARY_UID_ANNOTATION: &str = "kiln.dev/primary-uid";
/// Annotation naming that primary (its name; its namespace is the child's
/// for a namespaced primary).
pub const PRIMARY_NAME_ANNOTATION: &str = "kiln.dev/primary-name";
/// Most children one `forEach` may render.
pub const MAX_FOR_EACH: usize = 1000;

/// What rendering needs besides the rule.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// The primary object.
    pub primary: Value,
    /// Watch name → the related object (or list, for a selector). Absent when not found.
    pub related: Map<String, Value>,
    /// Child id → the live child (or list of live children, for `forEach`). Absent when not found.
    pub observed: Map<String, Value>,
    /// What `random_secret(n)` gives for a child that does not exist yet.
    pub draw: Draw,
    /// The instant `now()` gives: set once per reconcile (or by
    /// `kiln render --now`); unset, each render reads the clock once.
    pub now: Option<jiff::Timestamp>,
}

/// Whether a kind is namespaced. The engine answers from discovery; without a
/// cluster, [`well_known_scope`] answers for built-in kinds.
pub type ScopeOf<'a> = &'a dyn Fn(&Gvk) -> Option<bool>;

/// A child as it should be applied.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredChild {
    /// The child's id in the rule.
    pub id: String,
    /// Its kind.
    pub gvk: Gvk,
    /// Its namespace (`None` for cluster-scoped kinds).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// The object, with namespace, labels, owner reference and the
    /// [`APPLIED_ANNOTATION`] set.
    pub object: Value,
    /// The values `random_secret` drew for it (only when it does not exist
    /// yet): kept out of every message, and the engine creates such a child
    /// only after checking that it really does not exist.
    pub generated: Vec<String>,
}

/// Readiness of one rendered child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildReadiness {
    /// The child's id.
    pub id: String,
    /// The child's name.
    pub name: String,
    /// Whether it exists and its `readyWhen` holds.
    pub ready: bool,
}

/// A child not rendered yet because it waits for other children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildWait {
    /// The child's id.
    pub id: String,
    /// What it waits for, for humans: "`service` to exist", "`db` to be ready".
    pub waits_for: Vec<String>,
}

/// Everything a reconcile applies for one primary.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// Children to apply: each after the children it waits for, otherwise
    /// in rule order.
    pub children: Vec<DesiredChild>,
    /// Readiness of each child, from the live objects given.
    pub readiness: Vec<ChildReadiness>,
    /// Children not rendered because they wait for other children: the
    /// engine neither applies nor prunes them this time.
    pub waiting: Vec<ChildWait>,
    /// The rule's status fields.
    pub status: Map<String, Value>,
    /// The rule's own conditions.
    pub conditions: Vec<RuleCondition>,
    /// When `spec.requeue.at` asks to reconcile again.
    pub wake: Option<Wake>,
    /// The live children no longer rendered, filed in their `history` classes.
    pub history: Vec<history::Filed>,
}

/// A reconcile asked for at an instant (`spec.requeue.at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wake {
    /// The instant.
    pub at: jiff::Timestamp,
    /// How long after the render's `now()` that is (at least a second).
    pub after: std::time::Duration,
}

/// One of the rule's own conditions, rendered (its transition time is the
/// engine's to keep).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleCondition {
    /// Its type.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// CamelCase.
    pub reason: String,
    /// For humans.
    pub message: String,
}

impl Rendered {
    /// True when every child exists and is ready.
    pub fn all_ready(&self) -> bool {
        self.waiting.is_empty() && self.readiness.iter().all(|r| r.ready)
    }
}

/// Why rendering failed for this primary. Each is permanent for the inputs
/// given: retried when something changes, not in a hot loop.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderFailure {
    /// A template failed.
    #[error("{0}")]
    Template(#[from] RenderError),
    /// A rendered child's name or namespace is not one the API server
    /// takes; it never becomes part of a request.
    #[error("child `{id}`: {message}")]
    Name {
        /// The child's id.
        id: String,
        /// What is wrong.
        message: String,
    },
    /// A rendered child is not acceptable.
    #[error("child `{id}`: {message}")]
    Child {
        /// The child's id.
        id: String,
        /// What is wrong.
        message: String,
    },
}

impl RenderFailure {
    fn child(id: &str, message: impl Into<String>) -> Self {
        Self::Child {
            id: id.to_string(),
            message: message.into(),
        }
    }
}

/// Watches marked `required` whose object is missing from `inputs`.
pub fn missing_required<'r>(rule: &'r Rule, inputs: &Inputs) -> Vec<&'r str> {
    rule.watches
        .iter()
        .filter(|w| w.required && inputs.related.get(&w.name).is_none_or(Value::is_null))
        .map(|w| w.name.as_str())
        .collect()
}

/// The template context for a primary. `this` is the primary already
/// converted for templates ([`to_jinja`]), so a reconcile converts it once for
/// both its watch references and its render.
pub fn context(rule: &Rule, this: &JinjaValue, inputs: &Inputs) -> JinjaValue {
    context_with(rule, this, inputs, &inputs.observed, now_of(inputs))
}

/// The instant `now()` gives for `inputs`.
fn now_of(inputs: &Inputs) -> jiff::Timestamp {
    inputs.now.unwrap_or_else(crate::template::time::current)
}

/// [`context`], with `children` and the instant as given.
fn context_with(
    rule: &Rule,
    this: &JinjaValue,
    inputs: &Inputs,
    children: &Map<String, Value>,
    now: jiff::Timestamp,
) -> JinjaValue {
    minijinja::context! {
        self => this.clone(),
        related => JinjaValue::from(minijinja::value::Serde(&inputs.related)),
        children => JinjaValue::from(minijinja::value::Serde(children)),
        observed => JinjaValue::from(minijinja::value::Serde(&inputs.observed)),
        rule => minijinja::context! { name => rule.name.clone() },
        __kiln_now => now.to_string(),
    }
}

/// `base` with the rule's `vars` and the readiness of the children so far.
fn with_vars(base: &JinjaValue, vars: &JinjaValue, ready: &Map<String, Value>) -> JinjaValue {
    minijinja::context! {
        vars => vars.clone(),
        ready => JinjaValue::from(minijinja::value::Serde(ready)),
        ..base.clone()
    }
}

/// Evaluates `spec.vars` in order, each seeing the ones before it.
pub fn eval_vars(
    rule: &Rule,
    base: &JinjaValue,
    budget: &mut Budget,
) -> Result<JinjaValue, RenderFailure> {
    let mut vars = Map::new();
    for (name, tree) in &rule.vars {
        let ctx = minijinja::context! {
            vars => JinjaValue::from(minijinja::value::Serde(&vars)),
            ..base.clone()
        };
        let value = tree.render(&rule.templates, &ctx, budget)?;
        vars.insert(name.clone(), value);
    }
    Ok(JinjaValue::from(minijinja::value::Serde(&vars)))
}

/// `children` with `object` added as the child `id` (appended to the list of
/// a `forEach` child).
fn with_child(
    children: &Map<String, Value>,
    id: &str,
    listed: bool,
    object: &Value,
) -> Map<String, Value> {
    let mut out = children.clone();
    if listed {
        let list = out.entry(id).or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(items) = list {
            items.push(object.clone());
        }
    } else {
        out.insert(id.to_string(), object.clone());
    }
    out
}

/// Renders every child and the status of one primary.
pub fn render(
    rule: &Rule,
    inputs: &Inputs,
    scope_of: ScopeOf<'_>,
) -> Result<Rendered, RenderFailure> {
    render_with(rule, &to_jinja(&inputs.primary), inputs, scope_of)
}

/// [`render`], with the primary already converted for templates.
pub fn render_with(
    rule: &Rule,
    this: &JinjaValue,
    inputs: &Inputs,
    scope_of: ScopeOf<'_>,
) -> Result<Rendered, RenderFailure> {
    // One stack switch for the whole render instead of one per template.
    crate::template::limits::render_stack(|| render_on_stack(rule, this, inputs, scope_of))
}

fn render_on_stack(
    rule: &Rule,
    this: &JinjaValue,
    inputs: &Inputs,
    scope_of: ScopeOf<'_>,
) -> Result<Rendered, RenderFailure> {
    let now = now_of(inputs);
    let live_ctx = context_with(rule, this, inputs, &inputs.observed, now);
    let set = &rule.templates;
    let mut budget = Budget::default();
    let vars = eval_vars(rule, &live_ctx, &mut budget)?;
    // Children as later children see them: the live ones, plus each child
    // created with values drawn now (so a template can key a hash with a
    // generated key on the first render too). Copied only once a value is
    // drawn: at steady state nothing is copied.
    let mut seen: Option<Map<String, Value>> = None;
    let mut base = live_ctx.clone();
    let owner = Owner::of(&inputs.primary, &rule.primary.gvk);
    let mut children = Vec::new();
    let mut readiness = Vec::new();
    // Per child id: `ready.<id>`, whether all of it is there to be read,
    // and the children left out (by `when`, or because what they wait for is).
    let mut ready = Map::new();
    let mut present: Vec<&str> = Vec::new();
    let mut left_out: Vec<&str> = Vec::new();
    let mut waiting = Vec::new();

    for child in rule.order.iter().filter_map(|&i| rule.children.get(i)) {
        ready.insert(child.id.clone(), Value::Bool(false));
        let switched_off = |ctx: &JinjaValue| match &child.when {
            Some(when) => set.eval_bool(when, ctx).map(|on| !on),
            None => Ok(false),
        };
        if child
            .needs
            .iter()
            .any(|n| left_out.contains(&n.id.as_str()))
            || (child.when_first && switched_off(&with_vars(&base, &vars, &ready))?)
        {
            left_out.push(&child.id);
            continue;
        }
        let waits_for: Vec<String> = child
            .needs
            .iter()
            .filter(|n| {
                if n.ready {
                    ready.get(&n.id) != Some(&Value::Bool(true))
                } else {
                    !present.contains(&n.id.as_str())
                }
            })
            .map(|n| {
                let what = if n.ready { "be ready" } else { "exist" };
                format!("`{}` to {what}", n.id)
            })
            .collect();
        if !waits_for.is_empty() {
            waiting.push(ChildWait {
                id: child.id.clone(),
                waits_for,
            });
            continue;
        }
        let ctx = with_vars(&base, &vars, &ready);
        if !child.when_first && switched_off(&ctx)? {
            left_out.push(&child.id);
            continue;
        }
        let items: Vec<(JinjaValue, Option<Value>)> = match &child.for_each {
            None => vec![(ctx.clone(), None)],
            Some(list) => {
                let value = set.eval(list, &ctx, &mut budget)?;
                let Value::Array(items) = value else {
                    return Err(RenderFailure::child(
                        &child.id,
                        format!(
                            "forEach must give a list, got {}",
                            crate::template::tree::kind_of(&value)
                        ),
                    ));
                };
                if items.len() > MAX_FOR_EACH {
                    return Err(RenderFailure::child(
                        &child.id,
                        format!(
                            "forEach gave {} items; at most {MAX_FOR_EACH} are allowed",
                            items.len()
                        ),
                    ));
                }
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, item)| {
                        let c = minijinja::context! { item => to_jinja(&item), index => i, ..ctx.clone() };
                        (c, Some(item))
                    })
                    .collect()
            }
        };
        let mut drew = false;
        let (mut all_there, mut all_ready) = (true, true);
        for (item_ctx, item) in items {
            let (object, generated) = generate::drawing(inputs.draw, || {
                child.template.render(set, &item_ctx, &mut budget)
            });
            let (object, namespace, name) = finish_child(rule, child, object?, &owner, scope_of)?;
            let live = observed_named(inputs.observed.get(&child.id), &name);
            if !generated.is_empty() {
                if live.is_some() {
                    return Err(draws_again(&child.id, &name, "exists"));
                }
                // Rendered again as if it existed, it must read its values
                // back, or the next reconcile would fail (or draw again).
                let listed = child.for_each.is_some();
                let before = seen.as_ref().unwrap_or(&inputs.observed);
                let as_live = with_child(before, &child.id, listed, &object);
                let again_base = context_with(rule, this, inputs, &as_live, now);
                let again_base = with_vars(&again_base, &vars, &ready);
                let again_ctx = match &item {
                    None => again_base,
                    Some(item) => {
                        let index = item_ctx.get_attr("index").unwrap_or_default();
                        minijinja::context! { item => to_jinja(item), index => index, ..again_base }
                    }
                };
                let (again, more) = generate::drawing(inputs.draw, || {
                    child.template.render(set, &again_ctx, &mut budget)
                });
                again?;
                if !more.is_empty() {
                    return Err(draws_again(&child.id, &name, "will exist"));
                }
                seen = Some(as_live);
                drew = true;
            }
            let ready_now = match (live, &child.ready_when) {
                (None, _) => false,
                (Some(_), None) if child.ready_on_exists => true,
                (Some(live), None) => crate::readiness::judge(&child.gvk, live).is_ok(),
                (Some(live), Some(expr)) => {
                    let c = minijinja::context! { child => to_jinja(live), ..item_ctx.clone() };
                    set.eval_bool(expr, &c)?
                }
            };
            all_there &= live.is_some() || !generated.is_empty();
            all_ready &= ready_now;
            readiness.push(ChildReadiness {
                id: child.id.clone(),
                name: name.clone(),
                ready: ready_now,
            });
            if children.iter().any(|c: &DesiredChild| {
                c.gvk == child.gvk && c.name == name && c.namespace == namespace
            }) {
                return Err(RenderFailure::child(
                    &child.id,
                    format!("renders `{name}` twice; names must differ per item"),
                ));
            }
            children.push(DesiredChild {
                id: child.id.clone(),
                gvk: child.gvk.clone(),
                namespace,
                name,
                object,
                generated,
            });
        }
        if drew && let Some(seen) = &seen {
            base = context_with(rule, this, inputs, seen, now);
        }
        ready.insert(child.id.clone(), Value::Bool(all_ready));
        if all_there {
            present.push(&child.id);
        }
    }

    // Status sees the live children of a `forEach` in the order it renders
    // them (KRO keeps list order); templates before it see them by name.
    let ordered = match in_rendered_order(rule, &inputs.observed, &children) {
        Some(observed) => minijinja::context! {
            children => JinjaValue::from(minijinja::value::Serde(&observed)),
            ..live_ctx.clone()
        },
        None => live_ctx.clone(),
    };
    let status_ctx = with_vars(&ordered, &vars, &ready);
    let mut status = Map::new();
    for (name, tree) in &rule.status_fields {
        // A field that renders `none` is left out: a schema refuses `null`
        // (and with it the whole status), and a field kiln wrote before
        // leaves the object when kiln no longer sends it.
        let value = tree.render(set, &status_ctx, &mut budget)?;
        if !value.is_null() {
            status.insert(name.clone(), value);
        }
    }
    let mut conditions = Vec::new();
    for c in &rule.conditions {
        conditions.push(render_condition(c, set, &status_ctx, &mut budget)?);
    }
    let wake = match &rule.requeue_at {
        Some(tree) => wake_at(&tree.render(set, &status_ctx, &mut budget)?, now)?,
        None => None,
    };
    let history = history::file(
        rule,
        set,
        &status_ctx,
        &inputs.observed,
        &children,
        &mut budget,
    )?;
    Ok(Rendered {
        children,
        readiness,
        waiting,
        status,
        conditions,
        wake,
        history,
    })
}

/// The [`Wake`] a rendered `spec.requeue.at` asks for.
fn wake_at(value: &Value, now: jiff::Timestamp) -> Result<Option<Wake>, RenderFailure> {
    use crate::template::time;
    let at = time::earliest(value).map_err(|why| RenderError::new("spec.requeue.at", why))?;
    Ok(at.map(|at| Wake {
        at,
        after: time::wait_until(now, at),
    }))
}

/// Renders one of the rule's conditions: its status from a boolean or the
/// text `True`/`False`/`Unknown`, a CamelCase reason, a message.
fn render_condition(
    c: &crate::rules::Condition,
    set: &crate::template::TemplateSet,
    ctx: &JinjaValue,
    budget: &mut Budget,
) -> Result<RuleCondition, RenderError> {
    let path = c.status.path();
    let status = match set.eval(&c.status, ctx, budget)? {
        Value::Bool(true) => "True",
        Value::Bool(false) => "False",
        Value::String(s) if s == "True" => "True",
        Value::String(s) if s == "False" => "False",
        Value::String(s) if s == "Unknown" => "Unknown",
        other => {
            return Err(RenderError::new(
                path,
                format!(
                    "a condition's status must be true, false, `True`, `False` or `Unknown`, got {other}"
                ),
            ));
        }
    };
    let text = |tree: &crate::template::Tree, budget: &mut Budget| -> Result<String, RenderError> {
        match tree.render(set, ctx, budget)? {
            Value::String(s) => Ok(s),
            v @ (Value::Number(_) | Value::Bool(_)) => Ok(v.to_string()),
            other => Err(RenderError::new(
                path,
                format!("expected text, got {other}"),
            )),
        }
    };
    let reason = text(&c.reason, budget)?;
    if !crate::rules::is_condition_reason(&reason) {
        return Err(RenderError::new(
            path,
            format!(
                "condition `{}`: reason `{}` is not CamelCase (a letter, then letters, digits, `_`, `,` or `:`)",
                c.type_,
                reason.escape_debug()
            ),
        ));
    }
    let message = match &c.message {
        Some(m) => text(m, budget)?,
        None => String::new(),
    };
    Ok(RuleCondition {
        type_: c.type_.clone(),
        status,
        reason,
        message,
    })
}

/// A child whose template draws a value while the child exists (or, checked
/// on its first render, would draw again once it exists).
fn draws_again(id: &str, name: &str, when: &str) -> RenderFailure {
    RenderFailure::child(
        id,
        format!(
            "random_secret() draws a new value for `{name}`, which {when}: a generated value is drawn once, \
             when the child does not exist yet, and then read back from it, e.g. \
             `{{{{ children.{id}.data.password if children.{id} is defined else random_secret(32) | b64encode }}}}`"
        ),
    )
}

/// The live children of each `forEach` in the order rendered (those no
/// longer rendered last, by name), when that differs from the order given.
fn in_rendered_order(
    rule: &Rule,
    observed: &Map<String, Value>,
    rendered: &[DesiredChild],
) -> Option<Map<String, Value>> {
    let mut out: Option<Map<String, Value>> = None;
    for child in rule.children.iter().filter(|c| c.for_each.is_some()) {
        let Some(Value::Array(live)) = observed.get(&child.id) else {
            continue;
        };
        let position = |o: &Value| {
            rendered
                .iter()
                .filter(|d| d.id == child.id)
                .position(|d| o["metadata"]["name"] == d.name.as_str())
                .unwrap_or(usize::MAX)
        };
        let mut sorted = live.clone();
        sorted.sort_by_key(|o| position(o));
        if &sorted != live {
            out.get_or_insert_with(|| observed.clone())
                .insert(child.id.clone(), Value::Array(sorted));
        }
    }
    out
}

/// The live child with this name: the object itself, or the match in a list.
pub fn observed_named<'a>(observed: Option<&'a Value>, name: &str) -> Option<&'a Value> {
    match observed? {
        Value::Array(items) => items.iter().find(|o| o["metadata"]["name"] == name),
        Value::Null => None,
        one if one["metadata"]["name"] == name => Some(one),
        _ => None,
    }
}

/// The primary, as its children's marks name it.
struct Owner {
    namespace: Option<String>,
    name: String,
    /// Empty when the primary has none (a file given to `kiln render`).
    uid: String,
    api_version: String,
    kind: String,
}

impl Owner {
    fn of(primary: &Value, gvk: &Gvk) -> Self {
        let meta = &primary["metadata"];
        Self {
            namespace: meta["namespace"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            name: meta["name"].as_str().unwrap_or_default().to_string(),
            uid: meta["uid"].as_str().unwrap_or_default().to_string(),
            api_version: gvk.api_version(),
            kind: gvk.kind.clone(),
        }
    }

    /// The mark of its child `id` of `rule`, placed as the rule says.
    fn mark(&self, rule: &Rule, child: &crate::rules::Child) -> crate::ownership::Mark {
        use crate::ownership::Placement;
        let placement = if child.deletion_policy == crate::rules::DeletionPolicy::Orphan {
            Placement::Orphaned
        } else if child.outside {
            Placement::Outside {
                api_version: self.api_version.clone(),
                kind: self.kind.clone(),
                namespace: self.namespace.clone(),
            }
        } else {
            Placement::Owned {
                api_version: self.api_version.clone(),
                kind: self.kind.clone(),
            }
        };
        crate::ownership::Mark {
            rule: rule.name.clone(),
            child: child.id.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            placement,
        }
    }
}

/// Checks a rendered child and adds what kiln owns: namespace, labels, owner,
/// and the hash of it all. Returns the object, its namespace and its name.
fn finish_child(
    rule: &Rule,
    child: &crate::rules::Child,
    mut object: Value,
    owner: &Owner,
    scope_of: ScopeOf<'_>,
) -> Result<(Value, Option<String>, String), RenderFailure> {
    let (id, gvk) = (child.id.as_str(), &child.gvk);
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return Err(RenderFailure::child(id, "metadata must render to a map"));
    };
    match meta.get("name") {
        Some(Value::String(n)) if !n.is_empty() => {}
        Some(other) => {
            return Err(RenderFailure::child(
                id,
                format!("metadata.name rendered to {other}, not a non-empty string"),
            ));
        }
        None => return Err(RenderFailure::child(id, "metadata.name is missing")),
    }
    let namespaced = scope_of(gvk).unwrap_or(true);
    let rendered_ns = meta
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    use crate::rules::scope::{Misplaced, placement};
    let outside = child.outside;
    // An `outside` child goes where its template says (its name and
    // namespace come from the primary's identity only, checked at load).
    let here = if outside && rendered_ns.is_some() {
        rendered_ns.as_deref()
    } else {
        owner.namespace.as_deref()
    };
    let placed = placement(here, namespaced, rendered_ns.as_deref())
        .or_else(|m| match m {
            Misplaced::ClusterScopedChild if outside => Ok(None),
            m => Err(m),
        })
        .map_err(|m| {
            let message = match m {
                Misplaced::OtherNamespace { child, primary } => format!(
                    "would be created in namespace `{child}`, but its primary is in `{primary}`: a namespaced primary may only own children in its own namespace"
                ),
                Misplaced::ClusterScopedChild => format!(
                    "{gvk} is cluster-scoped; a namespaced primary cannot own cluster-scoped children"
                ),
                Misplaced::NamespaceMissing => {
                    format!("{gvk} is namespaced and the primary is not: set metadata.namespace")
                }
                Misplaced::NamespaceOnClusterScoped => {
                    format!("{gvk} is cluster-scoped: remove metadata.namespace")
                }
            };
            RenderFailure::child(id, message)
        })?;
    if let Some(ns) = placed {
        meta.insert("namespace".into(), Value::String(ns));
    }
    crate::ownership::stamp(meta, &owner.mark(rule, child))
        .map_err(|e| RenderFailure::child(id, e.to_string()))?;
    let namespace = meta
        .get("namespace")
        .and_then(Value::as_str)
        .map(str::to_string);
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    check_names(id, gvk, namespace.as_deref(), &name)?;
    stamp(&mut object).map_err(|message| RenderFailure::child(id, message))?;
    Ok((object, namespace, name))
}

/// Refuses a name or namespace the API server would not take, before it
/// becomes part of a URL.
fn check_names(
    id: &str,
    gvk: &Gvk,
    namespace: Option<&str>,
    name: &str,
) -> Result<(), RenderFailure> {
    use crate::rules::names::{dns_label, object_name, shown};
    let refuse = |what: &str, value: &str, why: String| RenderFailure::Name {
        id: id.to_string(),
        message: format!("{what} `{}` is not valid: it {why}", shown(value)),
    };
    if let Some(ns) = namespace {
        dns_label(ns).map_err(|why| refuse("metadata.namespace", ns, why))?;
    }
    object_name(gvk, name).map_err(|why| refuse("metadata.name", name, why))
}

/// Sets [`APPLIED_ANNOTATION`] to a hash of the object without it.
fn stamp(object: &mut Value) -> Result<(), &'static str> {
    use sha2::Digest;
    let annotations = object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .map(|m| m.entry("annotations").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
        .ok_or("metadata.annotations must render to a map")?;
    annotations.remove(APPLIED_ANNOTATION);
    if annotations.is_empty() {
        // Keep the object as rendered: no empty map the template did not ask for.
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("annotations");
        }
    }
    let digest = sha2::Sha256::digest(object.to_string().as_bytes());
    let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    object["metadata"]
        .as_object_mut()
        .ok_or("metadata must render to a map")?
        .entry("annotations")
        .or_insert_with(|| json!({}))[APPLIED_ANNOTATION] = Value::String(hash);
    Ok(())
}

pub use crate::rules::scope::well_known_scope;

#[cfg(test)]
mod tests;
