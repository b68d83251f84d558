//! The offline half of a reconcile, shared by `kiln render` and `kiln test`:
//! the rules that take an object, its defaults, the snapshot filled from
//! files, and the engine's own plan over it.

use kiln::engine::decision::plan::{self, LiveChild, Observed, Plan};
use kiln::engine::decision::status;
use kiln::engine::key::ObjKey;
use kiln::ownership;
use kiln::render::{self, Inputs, Rendered};
use kiln::rules::{Rule, RuleSet};
use serde_json::Value;

/// The rules whose primary kind is the object's (only `only`, if given).
pub fn matching<'a>(set: &'a RuleSet, primary: &Value, only: Option<&str>) -> Vec<&'a Rule> {
    let api_version = primary["apiVersion"].as_str().unwrap_or_default();
    let kind = primary["kind"].as_str().unwrap_or_default();
    set.rules
        .iter()
        .map(AsRef::as_ref)
        .filter(|r| only.is_none_or(|n| r.name == n))
        .filter(|r| r.primary.gvk.api_version() == api_version && r.primary.gvk.kind == kind)
        .collect()
}

/// Fills in the defaults of the primary's schema, as the API server does
/// before anyone reads the object: a rule that defines its API uses its
/// own, otherwise the CRDs given.
pub fn apply_defaults(matching: &[&Rule], crds: &[Value], primary: &mut Value) {
    let schema = matching.iter().find_map(|r| {
        let gvk = &r.primary.gvk;
        match &r.api {
            Some(api) => api.schema(&gvk.version).cloned(),
            None => kiln::api::rule::schema_among(crds, &gvk.group, &gvk.version, &gvk.kind)
                .map(|(_, schema)| schema.clone()),
        }
    });
    if let Some(schema) = schema {
        kiln::api::defaults::apply(&schema, primary);
    }
}

/// `inputs` with an empty list for each selector watch not given, as the
/// engine gives one that selects nothing.
pub fn with_empty_selections(rule: &Rule, inputs: &Inputs) -> Inputs {
    let mut inputs = inputs.clone();
    for watch in &rule.watches {
        if matches!(watch.target, kiln::rules::WatchTarget::Selector { .. }) {
            inputs
                .related
                .entry(watch.name.clone())
                .or_insert_with(|| Value::Array(Vec::new()));
        }
    }
    inputs
}

/// The engine's plan for one rule over the objects given (`inputs` as
/// [`with_empty_selections`] leaves them): the rendered children and the
/// plan, or the plan of a render that failed. Offline no object holds a
/// name: the decision sees none.
pub fn decide(rule: &Rule, inputs: &Inputs) -> Result<(Rendered, Plan), Box<Plan>> {
    let mut observed = observed_from_files(rule, inputs);
    observed.missing = render::missing_required(rule, inputs)
        .iter()
        .map(|w| format!("related.{w} (pass --related {w}=FILE)"))
        .collect();
    let this = kiln::template::to_jinja(&inputs.primary);
    let draft = plan::draft(rule, &this, &observed, &render::well_known_scope)?;
    let rendered = draft.rendered().clone();
    let plan = draft.decide(rule, &observed, &plan::Known::new());
    Ok((rendered, plan))
}

/// The snapshot a decision reads, from the objects given: the primary,
/// related objects and observed children (each taken as this primary's
/// child of its id, in the primary's namespace unless it names one).
fn observed_from_files(rule: &Rule, inputs: &Inputs) -> Observed {
    let namespace = inputs.primary["metadata"]["namespace"].as_str();
    let mut children = Vec::new();
    for (id, value) in &inputs.observed {
        let Some(spec) = rule.children.iter().find(|c| &c.id == id) else {
            continue;
        };
        let items = match value {
            Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        for o in items {
            let meta = &o["metadata"];
            let namespaced = render::well_known_scope(&spec.gvk).unwrap_or(true);
            let at = meta["namespace"]
                .as_str()
                .or(namespace)
                .filter(|_| namespaced);
            children.push(LiveChild {
                id: id.clone(),
                gvk: spec.gvk.clone(),
                key: ObjKey {
                    namespace: at.map(str::to_string),
                    name: meta["name"].as_str().unwrap_or_default().to_string(),
                },
                uid: meta["uid"].as_str().map(str::to_string),
                deleting: !meta["deletionTimestamp"].is_null(),
                orphan: ownership::read(meta).is_some_and(|m| m.orphaned()),
            });
        }
    }
    Observed {
        inputs: inputs.clone(),
        children,
        ..Observed::default()
    }
}

/// The status patch the engine applies for the plan: the engine's own
/// composition of this rule's part (fields, conditions, `observedGeneration`).
pub fn status_patch(rule: &Rule, primary: &Value, plan: &Plan) -> Value {
    let fields: Vec<&str> = rule.status_fields.iter().map(|(n, _)| n.as_str()).collect();
    let conditions: Vec<&str> = rule.conditions.iter().map(|c| c.type_.as_str()).collect();
    let me = status::Contributor {
        rule: &rule.name,
        fields: &fields,
        conditions: &conditions,
        part: Some(&plan.status),
    };
    let generation = primary["metadata"]["generation"].as_i64();
    let status = status::compose(&[me], &primary["status"], "<now>", generation);
    let mut meta = serde_json::Map::new();
    meta.insert("name".into(), primary["metadata"]["name"].clone());
    if let Some(ns) = primary["metadata"]["namespace"].as_str() {
        meta.insert("namespace".into(), Value::String(ns.to_string()));
    }
    serde_json::json!({
        "apiVersion": rule.primary.gvk.api_version(),
        "kind": rule.primary.gvk.kind,
        "metadata": meta,
        "status": status,
    })
}
