//! The offline half of a reconcile, shared by `kiln render` and `kiln test`:
//! the rules that take an object, its defaults, the snapshot filled from
//! files, and the engine's own plan over it.

use futures::FutureExt;
use std::convert::Infallible;

use kiln::engine::ObjKey;
use kiln::engine::decision::{
    self, Contributor, Found, Known, Live, LiveChild, Outcome, Plan, Source, StatusSchema,
    StatusWrites, Target, Verdict,
};
use kiln::ownership;
use kiln::render::{self, Inputs, Rendered};
use kiln::rules::{Gvk, Rule, RuleSet, Watch};
use serde_json::Value;

/// The rules whose primary kind is the object's, at any version (only
/// `only`, if given): each reads it at its own version ([`read_by`]).
pub fn matching<'a>(set: &'a RuleSet, primary: &Value, only: Option<&str>) -> Vec<&'a Rule> {
    let api_version = primary["apiVersion"].as_str().unwrap_or_default();
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = primary["kind"].as_str().unwrap_or_default();
    set.rules
        .iter()
        .map(AsRef::as_ref)
        .filter(|r| only.is_none_or(|n| r.name == n))
        .filter(|r| r.primary.gvk.group == group && r.primary.gvk.kind == kind)
        .collect()
}

/// The primary as `rule` reads it, as the API server serves it: at the
/// rule's version (converted from the version it is given at through the
/// API's own conversions, or a CRD's `strategy: None`), with the schema's
/// defaults filled in, as the API server fills them before anyone reads
/// the object. The schema is the API's of the rule that defines it,
/// otherwise the CRDs given.
pub fn read_by(set: &RuleSet, rule: &Rule, crds: &[Value], given: &Value) -> Result<Value, String> {
    let gvk = &rule.primary.gvk;
    let defined = set
        .rules
        .iter()
        .filter_map(|r| r.api.as_ref())
        .find(|a| a.group == gvk.group && a.kind == gvk.kind);
    let crd = match defined {
        Some(api) => Some((&api.crd, api.conversions.as_deref())),
        None => primary_crd_among(gvk, crds).map(|c| (c, None)),
    };
    match crd {
        Some((crd, conversions)) => {
            kiln::api::served_at::served_at(crd, conversions, given, &gvk.version)
                .map_err(|e| e.to_string())
        }
        None if given["apiVersion"] == gvk.api_version().as_str() => Ok(given.clone()),
        None => Err(format!(
            "rule `{}` reads {} at {}: give its CustomResourceDefinition (--crd FILE, or `crds:` in a test file) to convert it as the API server does",
            rule.name,
            given["apiVersion"].as_str().unwrap_or_default(),
            gvk.api_version()
        )),
    }
}

/// `inputs` as the engine reads them: an empty list for each selector
/// watch not given, as the engine gives one that selects nothing, and each
/// Secret given with `stringData` as the API server stores it.
pub fn with_empty_selections(rule: &Rule, inputs: &Inputs) -> Inputs {
    let mut inputs = inputs.clone();
    for given in inputs
        .related
        .values_mut()
        .chain(inputs.observed.values_mut())
    {
        match given {
            Value::Array(items) => items.iter_mut().for_each(stored_secret),
            one => stored_secret(one),
        }
    }
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

/// A Secret as the API server stores it: each `stringData` key moved to
/// `data`, base64-encoded (over a `data` key of the same name), as a
/// written sample Secret would be read back.
fn stored_secret(object: &mut Value) {
    use base64::Engine as _;
    if object["kind"] != "Secret" || object["apiVersion"] != "v1" {
        return;
    }
    let Some(Value::Object(strings)) = object.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    if !object["data"].is_object() {
        object["data"] = Value::Object(serde_json::Map::new());
    }
    for (key, value) in strings {
        let text = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_string);
        let encoded = base64::engine::general_purpose::STANDARD.encode(text);
        object["data"][key] = Value::String(encoded);
    }
}

/// The engine's plan for one rule over the objects given (`inputs` as
/// [`with_empty_selections`] leaves them), read through [`Files`]: the
/// rendered children and the plan, or the plan of a render that failed.
pub fn decide(rule: &Rule, inputs: &Inputs) -> Decided {
    let this = kiln::template::to_jinja(&inputs.primary);
    let source = Files { inputs };
    let known = Known::new();
    let read = decision::read(&source, rule, &this, inputs.clone(), &known, true);
    let Some(Ok(reading)) = read.now_or_never() else {
        let why = "the files given were not read at once".to_string();
        return Err(Box::new(Plan::refused(
            decision::reasons::INVALID,
            why,
            None,
        )));
    };
    match reading.rendered {
        Some(rendered) => Ok((rendered, reading.plan)),
        None => Err(Box::new(reading.plan)),
    }
}

/// What [`decide`] gives: the rendered children and the plan, or the plan
/// of a render that failed.
pub type Decided = Result<(Rendered, Plan), Box<Plan>>;

/// [`decide`], with each child a waiting child waits for, when no observed
/// object was given for it, read as rendered, so the children after it
/// render as they will once it exists; returns the ids read so. The plan
/// still says what they are: not there yet (created, not ready).
pub fn decide_reading_rendered(rule: &Rule, inputs: &Inputs) -> (Decided, Vec<String>) {
    let mut inputs = inputs.clone();
    let mut filled: Vec<String> = Vec::new();
    loop {
        let mut result = decide(rule, &inputs);
        let Ok((rendered, plan)) = &mut result else {
            return (result, filled);
        };
        let more = waited_for(rule, rendered, &inputs);
        if more.is_empty() {
            not_there(rendered, plan, &filled);
            return (result, filled);
        }
        for (id, value) in more {
            inputs.observed.insert(id.clone(), value);
            filled.push(id);
        }
    }
}

/// The rendered children a waiting child waits for that no observed object
/// gives: each id with its rendered form (a list for a `forEach` child).
fn waited_for(rule: &Rule, rendered: &Rendered, inputs: &Inputs) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = Vec::new();
    for w in &rendered.waiting {
        let Some(waiting) = rule.children.iter().find(|c| c.id == w.id) else {
            continue;
        };
        for need in &waiting.needs {
            let Some(spec) = rule.children.iter().find(|c| c.id == need.id) else {
                continue;
            };
            if inputs.observed.contains_key(&spec.id) || out.iter().any(|(id, _)| *id == spec.id) {
                continue;
            }
            let mut items: Vec<Value> = rendered
                .children
                .iter()
                .filter(|c| c.id == spec.id)
                .map(|c| c.object.clone())
                .collect();
            let value = match spec.for_each {
                Some(_) => Value::Array(items),
                None if items.is_empty() => continue,
                None => items.swap_remove(0),
            };
            out.push((spec.id.clone(), value));
        }
    }
    out
}

/// Marks the children read as rendered as what they are: not there yet,
/// so created and not ready.
fn not_there(rendered: &Rendered, plan: &mut Plan, filled: &[String]) {
    if filled.is_empty() {
        return;
    }
    for v in plan.children.iter_mut().filter(|v| filled.contains(&v.id)) {
        v.verdict = Verdict::Create;
        v.ready = Some(false);
    }
    for c in rendered.children.iter().filter(|c| filled.contains(&c.id)) {
        if !plan.apply.iter().any(|a| a.id == c.id && a.name == c.name) {
            plan.apply.push(c.clone());
        }
    }
    if let Outcome::Applied { not_ready, .. } = &mut plan.status.outcome {
        *not_ready = rendered
            .readiness
            .iter()
            .filter(|r| !r.ready || filled.contains(&r.id))
            .map(|r| format!("{}/{}", r.id, r.name))
            .collect();
    }
}

/// Files: the objects given on the command line. A related object is what
/// its watch finds wherever it looks; an observed one is this primary's
/// child of its id, in the primary's namespace unless it names one. No
/// other object holds a name.
struct Files<'a> {
    inputs: &'a Inputs,
}

impl Source for Files<'_> {
    type Error = Infallible;

    fn namespaced(&self, gvk: &Gvk) -> Option<bool> {
        render::well_known_scope(gvk)
    }

    /// A watched kind not known offline is taken as namespaced: the object
    /// given is found wherever the watch looks.
    fn watch_scope(&self, watch: &Watch) -> Option<bool> {
        Some(render::well_known_scope(&watch.gvk).unwrap_or(true))
    }

    async fn related(&self, watch: &Watch, target: &Target) -> Result<Option<Found>, Infallible> {
        let given = self
            .inputs
            .related
            .get(&watch.name)
            .filter(|v| !v.is_null());
        Ok(Some(match target {
            Target::Named(_) => Found::Named(given.cloned()),
            Target::Selected { .. } => Found::Selected(match given {
                Some(Value::Array(items)) => items.clone(),
                Some(one) => vec![one.clone()],
                None => Vec::new(),
            }),
        }))
    }

    async fn children(&self, rule: &Rule, primary: &Value) -> Result<Vec<Live>, Infallible> {
        let namespace = primary["metadata"]["namespace"].as_str();
        let mut live = Vec::new();
        for (id, value) in &self.inputs.observed {
            let Some(spec) = rule.children.iter().find(|c| &c.id == id) else {
                continue;
            };
            let items = match value {
                Value::Array(items) => items.iter().collect(),
                one => vec![one],
            };
            let namespaced = render::well_known_scope(&spec.gvk).unwrap_or(true);
            for o in items {
                let meta = &o["metadata"];
                let at = meta["namespace"]
                    .as_str()
                    .or(namespace)
                    .filter(|_| namespaced);
                let child = LiveChild {
                    id: id.clone(),
                    gvk: spec.gvk.clone(),
                    key: ObjKey {
                        namespace: at.map(str::to_string),
                        name: meta["name"].as_str().unwrap_or_default().to_string(),
                    },
                    uid: meta["uid"].as_str().map(str::to_string),
                    deleting: !meta["deletionTimestamp"].is_null(),
                    orphan: ownership::read(meta).is_some_and(|m| m.orphaned()),
                };
                live.push(Live {
                    child,
                    object: o.clone(),
                });
            }
        }
        Ok(live)
    }

    async fn holder(
        &self,
        _rule: &Rule,
        _gvk: &Gvk,
        _at: &ObjKey,
        _uid: &str,
    ) -> Result<Option<String>, Infallible> {
        Ok(None)
    }

    /// The engine's words for the object (kind, name or labels, and the
    /// watch: what its condition says, and what a user searches for), and
    /// how to give it offline.
    fn missing(&self, watch: &Watch, described: String) -> String {
        let w = &watch.name;
        let how = format!(
            "related.{w}: not given; pass --related {w}=FILE, or give it under `related:` in a test case"
        );
        match described.strip_suffix(&format!(" (related.{w})")) {
            Some(object) => format!("{object} ({how})"),
            None => format!("{described} ({how})"),
        }
    }

    /// The answer the case recorded; no network.
    async fn hook(
        &self,
        _rule: &Rule,
        _endpoint: &kiln::rules::hook::Endpoint,
        _request: &Value,
    ) -> Result<kiln::hook::Called, Infallible> {
        Ok(self
            .inputs
            .hook
            .clone()
            .unwrap_or(kiln::hook::Called::NotCalled))
    }
}

/// The primary kind's CustomResourceDefinition as the files tell it: the
/// one the rule defines, else one of the CRDs given.
fn primary_crd<'a>(rule: &'a Rule, crds: &'a [Value]) -> Option<&'a Value> {
    if let Some(api) = &rule.api {
        return Some(&api.crd);
    }
    primary_crd_among(&rule.primary.gvk, crds)
}

/// The CustomResourceDefinition of `gvk`'s kind among the CRDs given.
fn primary_crd_among<'a>(gvk: &Gvk, crds: &'a [Value]) -> Option<&'a Value> {
    crds.iter()
        .filter(|c| c["kind"] == "CustomResourceDefinition")
        .find(|c| c["spec"]["group"] == gvk.group && c["spec"]["names"]["kind"] == gvk.kind)
}

/// What the engine may write to the primary's status, decided as the engine
/// decides it ([`decision::status_writes`]) from the CRD the files give:
/// `None` when it writes no status at all. Without a CRD, a kind a CRD may
/// define is shown as a custom resource whose schema keeps everything
/// (`known` is then false: render says so).
pub fn status_schema(rule: &Rule, crds: &[Value]) -> StatusView {
    let gvk = &rule.primary.gvk;
    let Some(crd) = primary_crd(rule, crds) else {
        return StatusView {
            schema: gvk.may_be_crd().then(StatusSchema::open),
            known: !gvk.may_be_crd(),
        };
    };
    let subresource = crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["name"] == gvk.version.as_str()))
        .is_some_and(|v| v.pointer("/subresources/status").is_some());
    let schema = match decision::status_writes(gvk, subresource, true) {
        StatusWrites::Yes => StatusSchema::from_crd(crd, &gvk.version).ok(),
        StatusWrites::NoSubresource | StatusWrites::Builtin => None,
    };
    StatusView {
        schema,
        known: true,
    }
}

/// What [`status_schema`] found.
pub struct StatusView {
    /// What the engine may write (`None`: no status at all).
    pub schema: Option<StatusSchema>,
    /// Whether that comes from the primary's CRD (or the kind is built in).
    pub known: bool,
}

/// The status patch the engine applies for the plan: the engine's own
/// composition of this rule's part (fields, conditions, `observedGeneration`),
/// cut to what the primary's status schema declares, as the engine cuts it.
pub fn status_patch(rule: &Rule, primary: &Value, plan: &Plan, schema: &StatusSchema) -> Value {
    let fields: Vec<&str> = rule.status_fields.iter().map(|(n, _)| n.as_str()).collect();
    let conditions: Vec<&str> = rule.conditions.iter().map(|c| c.type_.as_str()).collect();
    let me = Contributor {
        rule: &rule.name,
        fields: &fields,
        conditions: &conditions,
        part: Some(&plan.status),
    };
    let generation = primary["metadata"]["generation"].as_i64();
    let status = schema.writable(decision::compose_status(
        &[me],
        &primary["status"],
        "<now>",
        generation,
    ));
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
