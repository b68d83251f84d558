//! Rendering one rule for one primary: a pure function of the rule, the
//! primary, its related objects and its live children. The engine and
//! `kiln render` call the same function, so what `kiln render` prints is what
//! the engine applies.

use minijinja::Value as JinjaValue;
use serde_json::{Map, Value};

use crate::rules::{Child, Gvk, Rule};
use crate::template::generate::{self, Draw};
use crate::template::{Budget, RenderError, to_jinja};

mod condition;
pub mod events;
pub(crate) mod finish;
pub mod history;

use condition::{render_condition, wake_at};
use finish::{Owner, finish_child};

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
/// What a child of a kind not served waits for, after the kind's name.
pub const UNSERVED: &str = "to be served (its CustomResourceDefinition installed)";
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
    /// External source name → its answer (`spec.external`). Absent when not read.
    pub external: Map<String, Value>,
    /// What `random_secret(n)` gives for a child that does not exist yet.
    pub draw: Draw,
    /// The instant `now()` gives: set once per reconcile (or by
    /// `kiln render --now`); unset, each render reads the clock once.
    pub now: Option<jiff::Timestamp>,
    /// Child kinds the API server does not serve (yet): their children wait.
    pub unserved: Vec<Gvk>,
    /// A hook's answer recorded for `kiln test` (`None`: none given).
    pub hook: Option<crate::hook::Called>,
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
    /// The instant is always after the render's `now()`.
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
    /// A rendered child cannot be shaped to its kind's schema
    /// ([`crate::typing`]): the API server would refuse it.
    #[error("child `{id}`: {message}")]
    Typed {
        /// The child's id.
        id: String,
        /// What cannot be shaped, and where its template is.
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

/// The template context for a primary. `this` is the primary already
/// converted for templates ([`to_jinja`]), so a reconcile converts it once for
/// both its watch references and its render.
pub fn context(rule: &Rule, this: &JinjaValue, inputs: &Inputs) -> JinjaValue {
    context_with(rule, this, inputs, None, now_of(inputs))
}

/// The instant `now()` gives for `inputs`.
fn now_of(inputs: &Inputs) -> jiff::Timestamp {
    inputs.now.unwrap_or_else(crate::template::time::current)
}

/// [`context`], with the instant as given and `children` when they are
/// not the live ones (`None`: `children` and `observed` are one value,
/// converted once).
fn context_with(
    rule: &Rule,
    this: &JinjaValue,
    inputs: &Inputs,
    children: Option<&Map<String, Value>>,
    now: jiff::Timestamp,
) -> JinjaValue {
    let observed = JinjaValue::from(minijinja::value::Serde(&inputs.observed));
    let children = children.map_or_else(
        || observed.clone(),
        |c| JinjaValue::from(minijinja::value::Serde(c)),
    );
    minijinja::context! {
        self => this.clone(),
        related => JinjaValue::from(minijinja::value::Serde(&inputs.related)),
        external => JinjaValue::from(minijinja::value::Serde(&inputs.external)),
        children => children,
        observed => observed,
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
    let mut walk = Walk::start(rule, this, inputs, scope_of)?;
    for child in rule.order.iter().filter_map(|&i| rule.children.get(i)) {
        walk.child(child)?;
    }
    walk.finish()
}

/// What stays the same through one render.
struct Frame<'a> {
    rule: &'a Rule,
    this: &'a JinjaValue,
    inputs: &'a Inputs,
    scope_of: ScopeOf<'a>,
    now: jiff::Timestamp,
    owner: Owner,
    /// The context with the live children.
    live: JinjaValue,
    /// The rule's `vars`, evaluated.
    vars: JinjaValue,
}

impl Frame<'_> {
    /// The context with `children` as the children.
    fn with_children(&self, children: &Map<String, Value>) -> JinjaValue {
        context_with(self.rule, self.this, self.inputs, Some(children), self.now)
    }
}

/// A render going through the rule's children in order: what is rendered so
/// far, and what the children after see of it.
struct Walk<'a> {
    frame: Frame<'a>,
    budget: Budget,
    /// Children as later children see them: the live ones, plus each child
    /// created with values drawn now (so a template can key a hash with a
    /// generated key on the first render too). Copied only once a value is
    /// drawn: at steady state nothing is copied.
    seen: Option<Map<String, Value>>,
    /// The context of the next child, before `vars` and `ready`.
    base: JinjaValue,
    children: Vec<DesiredChild>,
    readiness: Vec<ChildReadiness>,
    waiting: Vec<ChildWait>,
    /// Per child id: `ready.<id>`.
    ready: Map<String, Value>,
    /// The children all of which are there to be read.
    present: Vec<&'a str>,
    /// The children left out (by `when`, or because what they wait for is).
    left_out: Vec<&'a str>,
}

/// What one rendered item of a child adds to the child's readiness.
struct ItemDone {
    /// It drew values (it does not exist yet).
    drew: bool,
    /// It exists, or is created now with values drawn.
    there: bool,
    ready: bool,
}

impl<'a> Walk<'a> {
    /// Before the first child: the rule's `vars` evaluated.
    fn start(
        rule: &'a Rule,
        this: &'a JinjaValue,
        inputs: &'a Inputs,
        scope_of: ScopeOf<'a>,
    ) -> Result<Self, RenderFailure> {
        let now = now_of(inputs);
        let live = context_with(rule, this, inputs, None, now);
        let mut budget = Budget::default();
        let vars = eval_vars(rule, &live, &mut budget)?;
        Ok(Self {
            base: live.clone(),
            frame: Frame {
                rule,
                this,
                inputs,
                scope_of,
                now,
                owner: Owner::of(&inputs.primary, &rule.primary.gvk),
                live,
                vars,
            },
            budget,
            seen: None,
            children: Vec::new(),
            readiness: Vec::new(),
            waiting: Vec::new(),
            ready: Map::new(),
            present: Vec::new(),
            left_out: Vec::new(),
        })
    }

    /// The context of the next child.
    fn context(&self) -> JinjaValue {
        with_vars(&self.base, &self.frame.vars, &self.ready)
    }

    /// Whether `child`'s `when` is false in `ctx`.
    fn switched_off(&self, child: &Child, ctx: &JinjaValue) -> Result<bool, RenderFailure> {
        match &child.when {
            Some(when) => Ok(!self.frame.rule.templates.eval_bool(when, ctx)?),
            None => Ok(false),
        }
    }

    /// Renders `child` (each item of its `forEach`), or leaves it out, or
    /// records what it waits for.
    fn child(&mut self, child: &'a Child) -> Result<(), RenderFailure> {
        self.ready.insert(child.id.clone(), Value::Bool(false));
        let after_left_out = child
            .needs
            .iter()
            .any(|n| self.left_out.contains(&n.id.as_str()));
        if after_left_out || (child.when_first && self.switched_off(child, &self.context())?) {
            self.left_out.push(&child.id);
            return Ok(());
        }
        let waits_for = self.waits_for(child);
        if !waits_for.is_empty() {
            self.waiting.push(ChildWait {
                id: child.id.clone(),
                waits_for,
            });
            return Ok(());
        }
        let ctx = self.context();
        if !child.when_first && self.switched_off(child, &ctx)? {
            self.left_out.push(&child.id);
            return Ok(());
        }
        let items = items_of(child, &self.frame.rule.templates, &ctx, &mut self.budget)?;
        let (mut drew, mut all_there, mut all_ready) = (false, true, true);
        for (item_ctx, item) in items {
            let done = self.item(child, &item_ctx, item.as_ref())?;
            drew |= done.drew;
            all_there &= done.there;
            all_ready &= done.ready;
        }
        if drew && let Some(seen) = &self.seen {
            self.base = self.frame.with_children(seen);
        }
        self.ready.insert(child.id.clone(), Value::Bool(all_ready));
        if all_there {
            self.present.push(&child.id);
        }
        Ok(())
    }

    /// What `child` waits for, for humans: its kind to be served, and
    /// among the children before it "`service` to exist", "`db` to be ready".
    fn waits_for(&self, child: &Child) -> Vec<String> {
        let kind = self.frame.inputs.unserved.contains(&child.gvk);
        let kind = kind.then(|| format!("{} {UNSERVED}", child.gvk));
        kind.into_iter()
            .chain(
                child
                    .needs
                    .iter()
                    .filter(|n| {
                        if n.ready {
                            self.ready.get(&n.id) != Some(&Value::Bool(true))
                        } else {
                            !self.present.contains(&n.id.as_str())
                        }
                    })
                    .map(|n| {
                        let what = if n.ready { "be ready" } else { "exist" };
                        format!("`{}` to {what}", n.id)
                    }),
            )
            .collect()
    }

    /// Renders one item of `child` (the child itself, without `forEach`).
    fn item(
        &mut self,
        child: &Child,
        item_ctx: &JinjaValue,
        item: Option<&Value>,
    ) -> Result<ItemDone, RenderFailure> {
        let (rule, inputs) = (self.frame.rule, self.frame.inputs);
        let (object, generated) = generate::drawing(inputs.draw, || {
            child
                .template
                .render(&rule.templates, item_ctx, &mut self.budget)
        });
        // A field rendering `none` is left out, as in status and conversion.
        let object = crate::template::tree::without_nulls(object?);
        let (object, namespace, name) =
            finish_child(rule, child, object, &self.frame.owner, self.frame.scope_of)?;
        let live = observed_named(inputs.observed.get(&child.id), &name);
        let drew = !generated.is_empty();
        if drew {
            if live.is_some() {
                return Err(draws_again(&child.id, &name, "exists"));
            }
            self.reads_back(child, &name, &object, item_ctx, item)?;
        }
        let ready = is_ready(child, live, item_ctx, &rule.templates)?;
        self.readiness.push(ChildReadiness {
            id: child.id.clone(),
            name: name.clone(),
            ready,
        });
        if self.children.iter().any(|c: &DesiredChild| {
            c.gvk == child.gvk && c.name == name && c.namespace == namespace
        }) {
            return Err(RenderFailure::child(
                &child.id,
                format!("renders `{name}` twice; names must differ per item"),
            ));
        }
        self.children.push(DesiredChild {
            id: child.id.clone(),
            gvk: child.gvk.clone(),
            namespace,
            name,
            object,
            generated,
        });
        Ok(ItemDone {
            drew,
            there: live.is_some() || drew,
            ready,
        })
    }

    /// A child that draws values now, rendered again as if it existed,
    /// must read its values back, or the next reconcile would fail (or
    /// draw again). The children after see it as live.
    fn reads_back(
        &mut self,
        child: &Child,
        name: &str,
        object: &Value,
        item_ctx: &JinjaValue,
        item: Option<&Value>,
    ) -> Result<(), RenderFailure> {
        let frame = &self.frame;
        let before = self.seen.as_ref().unwrap_or(&frame.inputs.observed);
        let as_live = with_child(before, &child.id, child.for_each.is_some(), object);
        let again_base = with_vars(&frame.with_children(&as_live), &frame.vars, &self.ready);
        let again_ctx = match item {
            None => again_base,
            Some(item) => {
                let index = item_ctx.get_attr("index").unwrap_or_default();
                minijinja::context! { item => to_jinja(item), index => index, ..again_base }
            }
        };
        let (again, more) = generate::drawing(frame.inputs.draw, || {
            child
                .template
                .render(&frame.rule.templates, &again_ctx, &mut self.budget)
        });
        again?;
        if !more.is_empty() {
            return Err(draws_again(&child.id, name, "will exist"));
        }
        self.seen = Some(as_live);
        Ok(())
    }

    /// Once every child is rendered: the status, the rule's conditions, the
    /// wake and the history.
    fn finish(mut self) -> Result<Rendered, RenderFailure> {
        let frame = &self.frame;
        let (rule, set) = (frame.rule, &frame.rule.templates);
        let observed = &frame.inputs.observed;
        // Status sees the live children of a `forEach` in the order it renders
        // them (KRO keeps list order); templates before it see them by name.
        let ordered = match in_rendered_order(rule, observed, &self.children) {
            Some(observed) => minijinja::context! {
                children => JinjaValue::from(minijinja::value::Serde(&observed)),
                ..frame.live.clone()
            },
            None => frame.live.clone(),
        };
        let status_ctx = with_vars(&ordered, &frame.vars, &self.ready);
        let budget = &mut self.budget;
        let mut status = Map::new();
        for (name, tree) in &rule.status_fields {
            // A field that renders `none` is left out: a schema refuses `null`
            // (and with it the whole status), and a field kiln wrote before
            // leaves the object when kiln no longer sends it.
            let value = tree.render(set, &status_ctx, budget)?;
            if !value.is_null() {
                status.insert(name.clone(), value);
            }
        }
        let mut conditions = Vec::new();
        for c in &rule.conditions {
            conditions.push(render_condition(c, set, &status_ctx, budget)?);
        }
        let wake = match &rule.requeue_at {
            Some(tree) => wake_at(&tree.render(set, &status_ctx, budget)?, frame.now)?,
            None => None,
        };
        let history = history::file(rule, set, &status_ctx, observed, &self.children, budget)?;
        Ok(Rendered {
            children: self.children,
            readiness: self.readiness,
            waiting: self.waiting,
            status,
            conditions,
            wake,
            history,
        })
    }
}

/// The contexts `child` renders in: `ctx`, or one per item of its `forEach`
/// (with `item` and `index`), each with the item.
fn items_of(
    child: &Child,
    set: &crate::template::TemplateSet,
    ctx: &JinjaValue,
    budget: &mut Budget,
) -> Result<Vec<(JinjaValue, Option<Value>)>, RenderFailure> {
    let Some(list) = &child.for_each else {
        return Ok(vec![(ctx.clone(), None)]);
    };
    let value = set.eval(list, ctx, budget)?;
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
    Ok(items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let c = minijinja::context! { item => to_jinja(&item), index => i, ..ctx.clone() };
            (c, Some(item))
        })
        .collect())
}

/// Whether a child is ready: it exists, and its `readyWhen` holds (without
/// one: it exists, or its kind says it is ready).
fn is_ready(
    child: &Child,
    live: Option<&Value>,
    item_ctx: &JinjaValue,
    set: &crate::template::TemplateSet,
) -> Result<bool, RenderFailure> {
    Ok(match (live, &child.ready_when) {
        (None, _) => false,
        (Some(_), None) if child.ready_on_exists => true,
        (Some(live), None) => crate::readiness::judge(&child.gvk, live).is_ok(),
        (Some(live), Some(expr)) => {
            let c = minijinja::context! { child => to_jinja(live), ..item_ctx.clone() };
            set.eval_bool(expr, &c)?
        }
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

pub use crate::rules::scope::well_known_scope;

#[cfg(test)]
mod tests;
