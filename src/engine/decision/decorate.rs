//! Decorators: fields kiln sets on objects it does not
//! own — the primary itself, or related objects — each decorator as a field
//! manager of its own (`kiln.<rule>.<id>`), so server-side apply keeps its
//! fields apart from everyone else's: without `force` a field another
//! manager owns is a conflict, never taken; and when the decorator stops
//! applying to an object (its `when` turns false, it leaves the rule), an
//! empty apply as that manager removes exactly the fields it set.
//!
//! Pure: which decorations to apply and which to take back, from the rule,
//! the template context and the objects as cached. The cache keeps the
//! managed-fields entries of kiln's decorator managers (and no others), so
//! "what did this decorator set here" is read from the object itself: it
//! survives restarts of kiln and needs no record of its own.

use std::collections::BTreeSet;

use minijinja::Value as JinjaValue;
use serde_json::{Map, Value, json};

use super::claims::Target;
use super::diff;
use crate::render::Inputs;
use crate::rules::{Decorator, DecoratorTarget, Gvk, Rule};
use crate::template::{Budget, RenderError, to_jinja};

/// One apply as a decorator's field manager.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoration {
    /// The field manager.
    pub manager: String,
    /// The target's kind.
    pub gvk: Gvk,
    /// The target's namespace.
    pub namespace: Option<String>,
    /// The target's name.
    pub name: String,
    /// The apply body: the target's type and name, and the fields to set
    /// (none, to take the decorator's fields back).
    pub body: Value,
    /// Whether fields other managers own are taken.
    pub force: bool,
}

/// What one reconcile does with the rule's decorators.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decorations {
    /// Patches a target does not show yet (or shows with fields the
    /// decorator no longer sets).
    pub apply: Vec<Decoration>,
    /// Empty applies taking back what a decorator no longer sets here.
    pub take_back: Vec<Decoration>,
    /// Every related object decorated (shown or not), as which manager: no
    /// other primary of the rule may decorate it too (claims.rs).
    pub claimed: BTreeSet<Target>,
    /// What is done with each object decorated or taken back from, in
    /// order: what `kiln explain` and `kiln render` print.
    pub verdicts: Vec<Verdict>,
}

/// What a reconcile does with one object a decorator sets fields on (or
/// set fields on before).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The decorator's id.
    pub id: String,
    /// The object's kind.
    pub gvk: Gvk,
    /// Its namespace.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// What is done.
    pub done: Done,
}

/// What is done with one object a decorator sets fields on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// It shows the decorator's fields, set as its manager: nothing to write.
    Applied,
    /// It lacks some: applied (in [`Decorations::apply`]).
    Apply,
    /// The decorator no longer sets fields here: taken back (in
    /// [`Decorations::take_back`]).
    TakeBack,
}

impl Verdict {
    fn on(id: &str, gvk: &Gvk, namespace: Option<&str>, name: &str, done: Done) -> Self {
        Self {
            id: id.to_string(),
            gvk: gvk.clone(),
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
            done,
        }
    }
}

/// The decorations of a reconcile that planned `plan`: decorators patch
/// only once the children went through; while the rule waits or fails,
/// what they set stays as it is. A rule with no decorators (left) still
/// takes back what an earlier version set. The engine, `kiln explain` and
/// `kiln render` all decorate through this.
pub fn of_plan(
    plan: &super::plan::Plan,
    rule: &Rule,
    base: &str,
    ctx: impl FnOnce() -> JinjaValue,
    inputs: &Inputs,
) -> Result<Decorations, String> {
    match plan.status.outcome {
        super::status::Outcome::Applied { .. } => {
            self::plan(rule, base, ctx, inputs).map_err(|e| e.to_string())
        }
        _ => Ok(Decorations::default()),
    }
}

/// The field manager of decorator `id` of `rule` (kiln's own is `base`).
pub(crate) fn manager(base: &str, rule: &str, id: &str) -> String {
    format!("{base}.{rule}.{id}")
}

/// Renders the decorators of `rule` for one primary (`ctx` gives its
/// template context; not asked for when the rule has no decorators) and
/// compares them with the targets as cached.
pub fn plan(
    rule: &Rule,
    base: &str,
    ctx: impl FnOnce() -> JinjaValue,
    inputs: &Inputs,
) -> Result<Decorations, RenderError> {
    let set = &rule.templates;
    let mut budget = Budget::default();
    let mut out = Decorations::default();
    // (target kind, namespace, name, manager) of each decoration rendered.
    let mut wanted: BTreeSet<(String, String, String, String)> = BTreeSet::new();
    let ctx = if rule.decorators.is_empty() {
        JinjaValue::UNDEFINED
    } else {
        with_vars(rule, ctx(), &mut budget)?
    };
    for decorator in &rule.decorators {
        let manager = manager(base, &rule.name, &decorator.id);
        for (gvk, target) in targets(rule, &decorator.target, inputs) {
            let here = minijinja::context! { target => to_jinja(target), ..ctx.clone() };
            if let Some(when) = &decorator.when
                && !set.eval_bool(when, &here)?
            {
                continue;
            }
            if let Some(why) = out_of_bounds(decorator, &inputs.primary, &gvk, target) {
                return Err(RenderError::new(
                    &format!("spec.decorate.{}.allowNames", decorator.id),
                    why,
                ));
            }
            let patch = decorator.patch.render(set, &here, &mut budget)?;
            let Some(fields) = patch.as_object() else {
                return Err(RenderError::new(
                    &format!("spec.decorate.{}.patch", decorator.id),
                    "the patch must render to a map",
                ));
            };
            let (namespace, name) = identity(target);
            if decorator.target != DecoratorTarget::Primary {
                let claim = (gvk.to_string(), namespace.clone(), name.clone());
                out.claimed
                    .insert((claim.0, claim.1, claim.2, manager.clone()));
            }
            wanted.insert((
                gvk.to_string(),
                namespace.clone().unwrap_or_default(),
                name.clone(),
                manager.clone(),
            ));
            let shown = shows(target, &patch, &manager);
            let done = if shown { Done::Applied } else { Done::Apply };
            let verdict = Verdict::on(&decorator.id, &gvk, namespace.as_deref(), &name, done);
            out.verdicts.push(verdict);
            if shown {
                continue;
            }
            out.apply.push(Decoration {
                body: apply_body(&gvk, namespace.as_deref(), &name, uid_of(target), fields),
                manager: manager.clone(),
                gvk,
                namespace,
                name,
                force: decorator.force,
            });
        }
    }
    take_back(rule, base, inputs, &wanted, &mut out);
    Ok(out)
}

/// Every object the rule can see: a manager of this rule on it that
/// rendered nothing for it this time (not in `wanted`) takes its fields back.
fn take_back(
    rule: &Rule,
    base: &str,
    inputs: &Inputs,
    wanted: &BTreeSet<(String, String, String, String)>,
    out: &mut Decorations,
) {
    let prefix = manager(base, &rule.name, "");
    for (gvk, target) in every_target(rule, inputs) {
        let (namespace, name) = identity(target);
        for held in managers(target)
            .into_iter()
            .filter(|m| m.starts_with(&prefix))
        {
            let key = (
                gvk.to_string(),
                namespace.clone().unwrap_or_default(),
                name.clone(),
                held.clone(),
            );
            if wanted.contains(&key) {
                continue;
            }
            let id = held.strip_prefix(&prefix).unwrap_or(&held);
            let verdict = Verdict::on(id, &gvk, namespace.as_deref(), &name, Done::TakeBack);
            out.verdicts.push(verdict);
            out.take_back.push(Decoration {
                body: apply_body(
                    &gvk,
                    namespace.as_deref(),
                    &name,
                    uid_of(target),
                    &Map::new(),
                ),
                manager: held,
                gvk: gvk.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
                force: false,
            });
        }
    }
}

/// `ctx` with the rule's `spec.vars` (`vars.<name>`), evaluated as the
/// children's render evaluates them: decorators read the same values.
fn with_vars(rule: &Rule, ctx: JinjaValue, budget: &mut Budget) -> Result<JinjaValue, RenderError> {
    if rule.vars.is_empty() {
        return Ok(ctx);
    }
    let vars = crate::render::eval_vars(rule, &ctx, budget).map_err(|e| match e {
        crate::render::RenderFailure::Template(e) => e,
        other => RenderError::new("spec.vars", other.to_string()),
    })?;
    Ok(minijinja::context! { vars => vars, ..ctx })
}

/// Why `decorator` may not patch `target` for `primary`, if it may not:
/// for a namespaced primary, a cluster-scoped target must be one the rule
/// names literally (its `allowNames`, or the watch's literal name). Whoever
/// writes a primary decides values, not which cluster-wide object kiln writes.
fn out_of_bounds(
    decorator: &Decorator,
    primary: &Value,
    gvk: &Gvk,
    target: &Value,
) -> Option<String> {
    let (namespace, name) = identity(target);
    let primary_namespaced = primary["metadata"]["namespace"].is_string();
    if decorator.target == DecoratorTarget::Primary
        || namespace.is_some()
        || !primary_namespaced
        || decorator.allow_names.contains(&name)
    {
        return None;
    }
    Some(format!(
        "{} {name} is cluster-scoped and not among the names decorator `{}` may patch (its `allowNames`: {}); the primary decides values, not which cluster-scoped object kiln writes",
        gvk.kind,
        decorator.id,
        if decorator.allow_names.is_empty() {
            "none".to_string()
        } else {
            decorator.allow_names.join(", ")
        }
    ))
}

/// The objects a decorator patches: the primary, or the related object(s).
fn targets<'a>(rule: &Rule, target: &DecoratorTarget, inputs: &'a Inputs) -> Vec<(Gvk, &'a Value)> {
    match target {
        DecoratorTarget::Primary => vec![(rule.primary.gvk.clone(), &inputs.primary)],
        DecoratorTarget::Related(name) => {
            let Some(gvk) = rule
                .watches
                .iter()
                .find(|w| &w.name == name)
                .map(|w| &w.gvk)
            else {
                return Vec::new();
            };
            match inputs.related.get(name) {
                Some(Value::Array(items)) => items.iter().map(|o| (gvk.clone(), o)).collect(),
                Some(one @ Value::Object(_)) => vec![(gvk.clone(), one)],
                _ => Vec::new(),
            }
        }
    }
}

/// The primary and every related object.
fn every_target<'a>(rule: &Rule, inputs: &'a Inputs) -> Vec<(Gvk, &'a Value)> {
    let mut all = targets(rule, &DecoratorTarget::Primary, inputs);
    for w in &rule.watches {
        all.extend(targets(
            rule,
            &DecoratorTarget::Related(w.name.clone()),
            inputs,
        ));
    }
    all
}

/// The uid of an object as cached.
fn uid_of(object: &Value) -> Option<&str> {
    object["metadata"]["uid"].as_str()
}

fn identity(object: &Value) -> (Option<String>, String) {
    let meta = &object["metadata"];
    (
        meta["namespace"].as_str().map(str::to_string),
        meta["name"].as_str().unwrap_or_default().to_string(),
    )
}

/// The body of a server-side apply to the object `gvk` `namespace/name`
/// setting `fields` (which may add to `metadata`).
/// With the `uid` kiln saw, the apply never creates the object: if it is
/// gone meanwhile the API server answers a Conflict ("uid mismatch")
/// instead of creating it, holding nothing but these fields, owned by
/// nobody. (The API server does not record `uid` as a field anyone owns.)
pub(crate) fn apply_body(
    gvk: &Gvk,
    namespace: Option<&str>,
    name: &str,
    uid: Option<&str>,
    fields: &Map<String, Value>,
) -> Value {
    let mut meta = Map::new();
    meta.insert("name".into(), json!(name));
    if let Some(ns) = namespace {
        meta.insert("namespace".into(), json!(ns));
    }
    if let Some(uid) = uid {
        meta.insert("uid".into(), json!(uid));
    }
    if let Some(Value::Object(more)) = fields.get("metadata") {
        meta.extend(more.clone());
    }
    let mut body = Map::new();
    body.insert("apiVersion".into(), json!(gvk.api_version()));
    body.insert("kind".into(), json!(gvk.kind));
    body.insert("metadata".into(), Value::Object(meta));
    body.extend(
        fields
            .iter()
            .filter(|(k, _)| k.as_str() != "metadata")
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    Value::Object(body)
}

/// The managers with a managed-fields entry on `object` (as cached: only
/// kiln's decorator managers are kept).
fn managers(object: &Value) -> Vec<String> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["subresource"].as_str().is_none_or(str::is_empty))
        .filter_map(|m| m["manager"].as_str().map(str::to_string))
        .collect()
}

/// Whether `target` already holds `patch` as `manager` set it: every value
/// in place, and the manager owning exactly the fields the patch sets (a
/// field it no longer sets must be taken back by applying again).
pub(crate) fn shows(target: &Value, patch: &Value, manager: &str) -> bool {
    if !diff::satisfied(target, patch) {
        return false;
    }
    let owned = target["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["manager"] == manager && m["subresource"].as_str().is_none_or(str::is_empty))
        .map(|m| owned_paths(&m["fieldsV1"]));
    owned.is_some_and(|owned| owned == set_paths(patch))
}

/// The leaf paths of a managed-fields set (`f:metadata` → `metadata`), a
/// list counting as one leaf.
pub(crate) fn owned_paths(fields: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo = vec![(String::new(), fields)];
    while let Some((path, node)) = todo.pop() {
        let children: Vec<(&String, &Value)> = node
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.as_str() != ".")
            .collect();
        let is_list = children
            .iter()
            .any(|(k, _)| k.starts_with("k:") || k.starts_with("v:") || k.starts_with("i:"));
        if children.is_empty() || is_list {
            if !path.is_empty() {
                out.insert(path);
            }
            continue;
        }
        for (k, v) in children {
            let step = k.strip_prefix("f:").unwrap_or(k);
            let next = if path.is_empty() {
                step.to_string()
            } else {
                format!("{path}.{step}")
            };
            todo.push((next, v));
        }
    }
    out
}

/// The leaf paths a patch sets, a list or an empty map counting as one leaf.
pub(crate) fn set_paths(patch: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo = vec![(String::new(), patch)];
    while let Some((path, node)) = todo.pop() {
        match node.as_object() {
            Some(map) if !map.is_empty() => {
                for (k, v) in map {
                    let next = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    todo.push((next, v));
                }
            }
            _ => {
                if !path.is_empty() {
                    out.insert(path);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(labels: Value, managed: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": "ns", "labels": labels, "managedFields": managed}})
    }

    fn entry(manager: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": fields})
    }

    #[test]
    fn managed_fields_and_patches_give_the_same_paths() {
        let fields = json!({"f:metadata": {"f:labels": {"f:a": {}, "f:b": {}}},
                            "f:spec": {"f:ports": {"k:{\"port\":80}": {".": {}, "f:port": {}}}}});
        let patch = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"ports": [{"port": 80}]}});
        assert_eq!(owned_paths(&fields), set_paths(&patch));
        assert_eq!(
            set_paths(&patch).into_iter().collect::<Vec<_>>(),
            ["metadata.labels.a", "metadata.labels.b", "spec.ports"]
        );
    }

    #[test]
    fn a_target_shows_a_patch_only_with_its_values_and_exactly_its_fields() {
        let patch = json!({"metadata": {"labels": {"a": "1"}}});
        let m = "kiln.r.d";
        let mine = entry(m, json!({"f:metadata": {"f:labels": {"f:a": {}}}}));
        assert!(shows(
            &pod(json!({"a": "1", "x": "y"}), json!([mine])),
            &patch,
            m
        ));
        // Someone else's value: apply again.
        assert!(!shows(&pod(json!({"a": "2"}), json!([mine])), &patch, m));
        // The value is there, but set by someone else: kiln owns nothing yet.
        let theirs = entry("kubectl", json!({"f:metadata": {"f:labels": {"f:a": {}}}}));
        assert!(!shows(&pod(json!({"a": "1"}), json!([theirs])), &patch, m));
        // kiln still owns a label it no longer sets: apply again to drop it.
        let more = entry(
            m,
            json!({"f:metadata": {"f:labels": {"f:a": {}, "f:old": {}}}}),
        );
        assert!(!shows(
            &pod(json!({"a": "1", "old": "x"}), json!([more])),
            &patch,
            m
        ));
    }
    const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: r}
spec:
  for: {apiVersion: demo.kiln.dev/v1, kind: App}
  watches:
    - name: creds
      apiVersion: v1
      kind: Secret
      ref: {name: creds}
  decorate:
    - id: team
      target: related.creds
      patch:
        metadata:
          labels: {team: "{{ self.spec.team }}"}
  children:
    - id: config
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
"#;

    /// What the decorations of `rule` say of the Secret `creds` with these
    /// labels and managed fields.
    fn verdicts_on(rule: &Rule, labels: Value, managed: Value) -> Vec<(String, Done)> {
        let mut inputs = Inputs {
            primary: json!({"apiVersion": "demo.kiln.dev/v1", "kind": "App",
                "metadata": {"name": "shop", "namespace": "ns"}, "spec": {"team": "blue"}}),
            ..Inputs::default()
        };
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "creds", "namespace": "ns", "labels": labels, "managedFields": managed}});
        inputs.related.insert("creds".into(), secret);
        let this = to_jinja(&inputs.primary);
        let ctx = || crate::render::context(rule, &this, &inputs);
        let decorations = plan(rule, "kiln", ctx, &inputs).unwrap();
        let verdicts = decorations.verdicts.iter();
        verdicts.map(|v| (v.id.clone(), v.done)).collect()
    }

    #[test]
    fn each_object_decorated_has_the_verdict_the_engine_acts_on() {
        let rule = crate::rules::one_rule(RULE);
        let set = entry(
            "kiln.r.team",
            json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
        );
        assert_eq!(
            verdicts_on(&rule, json!({}), json!([])),
            [("team".to_string(), Done::Apply)]
        );
        assert_eq!(
            verdicts_on(&rule, json!({"team": "blue"}), json!([set])),
            [("team".to_string(), Done::Applied)]
        );
        let mut left = crate::rules::one_rule(RULE);
        left.decorators.clear();
        assert_eq!(
            verdicts_on(&left, json!({"team": "blue"}), json!([set])),
            [("team".to_string(), Done::TakeBack)]
        );
    }
}
