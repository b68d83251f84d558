//! One observe step, three sources. Everything a decision reads for one
//! primary (related objects, live children, who holds the names its
//! children take, the caches it cannot trust) is read through [`Source`],
//! which the engine's caches (`kiln run`), the API server (`kiln explain`,
//! `kiln diff`) and files (`kiln render`, `kiln test`) implement. [`read`]
//! walks one reconcile through it: observe, render, look up the names'
//! holders, decide. What a source answers is all that differs between the
//! three; which object is whose and what to do about it is decided here,
//! once.
//!
//! A source's reads are futures: the API server's wait on the network,
//! the caches' and files' are ready at once and are driven without a
//! runtime (`FutureExt::now_or_never`), so a reconcile reads and renders on one stack.

use std::collections::BTreeMap;
use std::future::Future;

use minijinja::Value as JinjaValue;
use serde_json::Value;

use super::placed;
use super::plan::{self, Blind, Known, LiveChild, Observed, Occupants, Plan};
use super::related::{self, Found, Refusal, Target};
use super::status::reasons;
use crate::engine::key::ObjKey;
use crate::ownership::{Mark, Meta};
use crate::render::{self, Inputs, Rendered};
use crate::rules::{Gvk, Rule, Watch};
use crate::template::{Budget, Piece};

/// A live child as a source finds it: what the decision needs of it, and
/// the object templates read (`observed.<id>`).
#[derive(Debug, Clone)]
pub struct Live {
    /// Its id, kind, key, uid and state.
    pub child: LiveChild,
    /// The object.
    pub object: Value,
}

/// Where one reconcile's snapshot is read from.
pub trait Source {
    /// Why a read failed (the caches and files never fail).
    type Error;

    /// The caches that cannot be trusted now: an object they lack may exist.
    fn blind(&self) -> Vec<Blind> {
        Vec::new()
    }

    /// Whether `gvk` is namespaced (`None`: not known).
    fn namespaced(&self, gvk: &Gvk) -> Option<bool>;

    /// Whether `watch`'s kind is namespaced (`None`: the watch is not
    /// read).
    fn watch_scope(&self, watch: &Watch) -> Option<bool> {
        self.namespaced(&watch.gvk)
    }

    /// What `watch` finds at `target`; `None` when this source does not
    /// read the watch (it contributes nothing, not even "missing").
    fn related(
        &self,
        watch: &Watch,
        target: &Target,
    ) -> impl Future<Output = Result<Option<Found>, Self::Error>>;

    /// `rule`'s live children of the primary `uid` at `primary` (the engine
    /// and the API server judge them with [`child_mark`]; files are taken
    /// as the children they are given for).
    fn children(
        &self,
        rule: &Rule,
        primary: &Value,
    ) -> impl Future<Output = Result<Vec<Live>, Self::Error>>;

    /// Who holds `gvk`'s name `at`, unless nobody does or it is `rule`'s
    /// own child of the primary `uid` ([`crate::ownership::holder`]).
    fn holder(
        &self,
        rule: &Rule,
        gvk: &Gvk,
        at: &ObjKey,
        uid: &str,
    ) -> impl Future<Output = Result<Option<String>, Self::Error>>;

    /// Why the rendered children cannot be seen by this source, if they
    /// cannot (the engine refuses children in namespaces it does not watch).
    fn unseen(&self, _rule: &Rule, _rendered: &Rendered) -> Option<String> {
        None
    }

    /// How a missing required object is described to the user.
    fn missing(&self, _watch: &Watch, described: String) -> String {
        described
    }

    /// What `rule`'s hook at `endpoint` answers `request` (Metacontroller's
    /// JSON, [`crate::hook::request`]). A source that does not call hooks
    /// says so (the default).
    fn hook(
        &self,
        _rule: &Rule,
        _endpoint: &crate::rules::hook::Endpoint,
        _request: &Value,
    ) -> impl Future<Output = Result<crate::hook::Called, Self::Error>> {
        async { Ok(crate::hook::Called::NotCalled) }
    }
}

/// One reconcile as read from a source: the snapshot, the plan, and (when
/// asked for) what was rendered.
#[derive(Debug)]
pub struct Reading {
    /// What the plan was decided from.
    pub observed: Observed,
    /// The plan.
    pub plan: Plan,
    /// The children, status and readiness rendered (`None`: nothing was,
    /// or it was not asked for).
    pub rendered: Option<Rendered>,
}

/// Observes the primary in `inputs` through `source` and decides its
/// reconcile. `this` is the primary converted for templates; `keep`
/// keeps what was rendered in the reading.
pub async fn read<S: Source>(
    source: &S,
    rule: &Rule,
    this: &JinjaValue,
    inputs: Inputs,
    known: &Known,
    keep: bool,
) -> Result<Reading, S::Error> {
    let generation = inputs.primary["metadata"]["generation"].as_i64();
    let mut observed = match snapshot(source, rule, this, inputs).await? {
        Ok(observed) => observed,
        Err((observed, refusal)) => {
            let plan = refusal.into_plan(generation);
            return Ok(Reading {
                observed,
                plan,
                rendered: None,
            });
        }
    };
    if let Some((endpoint, request)) = hook_request(rule, &observed) {
        observed.hook = Some(source.hook(rule, endpoint, &request).await?);
    }
    let (plan, rendered) = decide(source, rule, this, &mut observed, known, keep).await?;
    Ok(Reading {
        observed,
        plan,
        rendered,
    })
}

/// The hook a reconcile calls and its request, once the snapshot is
/// complete (no cache blind, no required object missing: a hook is never
/// asked about what kiln cannot see): the finalize hook while the primary
/// goes (none without one), else the sync hook.
pub(crate) fn hook_request<'r>(
    rule: &'r Rule,
    observed: &Observed,
) -> Option<(&'r crate::rules::hook::Endpoint, Value)> {
    if !observed.blind.is_empty() || !observed.missing.is_empty() {
        return None;
    }
    let hook = rule.hook.as_ref()?;
    let inputs = &observed.inputs;
    let finalizing = !inputs.primary["metadata"]["deletionTimestamp"].is_null();
    let endpoint = if finalizing {
        &hook.finalize.as_ref()?.endpoint
    } else {
        hook.sync.as_ref()?
    };
    let request = crate::hook::request(
        rule,
        &inputs.primary,
        &inputs.observed,
        &inputs.related,
        finalizing,
    );
    Some((endpoint, request))
}

/// What a decision reads, but for the names' holders (they need the
/// render, [`decide`]); with what was observed when a watch's reference
/// cannot be rendered, and why.
pub async fn snapshot<S: Source>(
    source: &S,
    rule: &Rule,
    this: &JinjaValue,
    inputs: Inputs,
) -> Result<Result<Observed, (Observed, Refusal)>, S::Error> {
    let mut observed = Observed {
        inputs,
        blind: source.blind(),
        ..Observed::default()
    };
    if !observed.blind.is_empty() {
        return Ok(Ok(observed));
    }
    if let Err(refusal) = gather_related(source, rule, this, &mut observed).await? {
        return Ok(Err((observed, refusal)));
    }
    let live = source.children(rule, &observed.inputs.primary).await?;
    let mut by_id: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for Live { child, object } in live {
        // Every child of the rule is live (a removed id is pruned);
        // templates see those of the ids and kinds the rule has now.
        if let Some(spec) = rule
            .children
            .iter()
            .find(|c| c.id == child.id && c.gvk == child.gvk)
        {
            by_id.entry(spec.id.as_str()).or_default().push(object);
        }
        observed.children.push(child);
    }
    for spec in &rule.children {
        let Some(mut live) = by_id.remove(spec.id.as_str()) else {
            continue;
        };
        let value = if spec.for_each.is_some() || spec.from_hook {
            live.sort_by(|a, b| {
                a["metadata"]["name"]
                    .as_str()
                    .cmp(&b["metadata"]["name"].as_str())
            });
            Value::Array(live)
        } else {
            live.swap_remove(0)
        };
        observed.inputs.observed.insert(spec.id.clone(), value);
    }
    Ok(Ok(observed))
}

/// Renders each watch's reference and reads what it finds, noting the
/// required objects missing and the targets read ([`Observed::targets`]).
async fn gather_related<S: Source>(
    source: &S,
    rule: &Rule,
    this: &JinjaValue,
    observed: &mut Observed,
) -> Result<Result<(), Refusal>, S::Error> {
    if rule.watches.is_empty() {
        return Ok(Ok(()));
    }
    let key = key_of(&observed.inputs.primary);
    let ctx = render::context(rule, this, &observed.inputs);
    let mut budget = Budget::default();
    for watch in &rule.watches {
        let Some(namespaced) = source.watch_scope(watch) else {
            continue;
        };
        let mut text = |piece: &Piece| {
            piece
                .render_string(&rule.templates, &ctx, &mut budget)
                .map_err(|e| Refusal::Template(e.to_string()))
        };
        let target = match related::target(watch, namespaced, &key, &mut text) {
            Ok(target) => target,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let Some(found) = source.related(watch, &target).await? else {
            continue;
        };
        let (value, missing) = related::seen(watch, &target, found);
        observed
            .missing
            .extend(missing.map(|m| source.missing(watch, m)));
        if let Some(value) = value {
            observed.inputs.related.insert(watch.name.clone(), value);
        }
        observed.targets.push((watch.name.clone(), target));
    }
    Ok(Ok(()))
}

/// Renders the reconcile, reads who holds the names its children take and
/// decides; with what was rendered when `keep`.
pub async fn decide<S: Source>(
    source: &S,
    rule: &Rule,
    this: &JinjaValue,
    observed: &mut Observed,
    known: &Known,
    keep: bool,
) -> Result<(Plan, Option<Rendered>), S::Error> {
    let scope_of = |gvk: &Gvk| source.namespaced(gvk);
    let draft = match plan::draft(rule, this, observed, &scope_of) {
        Ok(draft) => draft,
        Err(plan) => return Ok((*plan, None)),
    };
    if let Some(why) = source.unseen(rule, draft.rendered()) {
        let generation = observed.inputs.primary["metadata"]["generation"].as_i64();
        let plan = Plan::refused(reasons::NAMESPACE_NOT_ALLOWED, why, generation);
        return Ok((plan, None));
    }
    let uid = observed.inputs.primary["metadata"]["uid"]
        .as_str()
        .unwrap_or_default();
    let mut occupants = Occupants::new();
    for (gvk, at) in draft.names(rule, observed) {
        if let Some(who) = source.holder(rule, gvk, &at, uid).await? {
            occupants.insert((gvk.clone(), at), who);
        }
    }
    observed.occupants = occupants;
    let rendered = keep.then(|| draft.rendered().clone());
    Ok((draft.decide(rule, observed, known), rendered))
}

/// The mark of an object at `at` when it is `rule`'s child of the primary
/// `uid` whose [`placed::identity`] is `identity`: marked so, and where
/// kiln puts that child (`placed::believed`). The one judgement of "is
/// this kiln's child of this primary?" for the caches and the API server.
pub fn child_mark<M: Meta + ?Sized>(
    rule: &Rule,
    uid: &str,
    identity: &Value,
    meta: &M,
    at: &ObjKey,
) -> Option<Mark> {
    let mark = crate::ownership::read(meta).filter(|m| m.of(&rule.name, uid))?;
    placed::believed(rule, &mark, at, identity).then_some(mark)
}

/// A primary's namespace and name, from its JSON.
fn key_of(primary: &Value) -> ObjKey {
    ObjKey {
        namespace: primary["metadata"]["namespace"]
            .as_str()
            .map(str::to_string),
        name: primary["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    }
}

impl Refusal {
    /// What cannot be read, and why.
    pub fn message(&self) -> &str {
        match self {
            Refusal::Template(m) | Refusal::Namespace(m) => m,
        }
    }

    /// The plan of a reconcile whose watches cannot be read: the failure
    /// on the primary, nothing written to children.
    pub fn into_plan(self, generation: Option<i64>) -> Plan {
        let (reason, message) = match self {
            Refusal::Template(m) => (reasons::TEMPLATE_ERROR, m),
            Refusal::Namespace(m) => (reasons::NAMESPACE_NOT_ALLOWED, m),
        };
        Plan::refused(reason, message, generation)
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use std::cell::RefCell;
    use std::convert::Infallible;

    use serde_json::json;

    use super::*;
    use crate::template::to_jinja;

    const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: app}
spec:
  for: {apiVersion: demo.kiln.dev/v1, kind: App}
  watches:
    - name: settings
      apiVersion: v1
      kind: ConfigMap
      ref: {name: "{{ self.spec.settings }}"}
      required: true
  children:
    - id: config
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
        data: {from: "{{ related.settings.data.value }}"}
    - id: part
      forEach: "['b', 'a']"
      template:
        apiVersion: v1
        kind: Secret
        metadata: {name: "{{ self.metadata.name }}-{{ item }}"}
"#;

    /// A source over objects in memory, answering at once.
    #[derive(Default)]
    struct Memory {
        blind: Vec<Blind>,
        related: Option<Value>,
        live: Vec<Live>,
        holders: Vec<(String, String)>,
        /// The names whose holder was asked for.
        asked: RefCell<Vec<String>>,
    }

    impl Source for Memory {
        type Error = Infallible;

        fn blind(&self) -> Vec<Blind> {
            self.blind.clone()
        }

        fn namespaced(&self, _gvk: &Gvk) -> Option<bool> {
            Some(true)
        }

        async fn related(&self, _w: &Watch, _t: &Target) -> Result<Option<Found>, Infallible> {
            Ok(Some(Found::Named(self.related.clone())))
        }

        async fn children(&self, _rule: &Rule, _primary: &Value) -> Result<Vec<Live>, Infallible> {
            Ok(self.live.clone())
        }

        async fn holder(
            &self,
            _rule: &Rule,
            _gvk: &Gvk,
            at: &ObjKey,
            _uid: &str,
        ) -> Result<Option<String>, Infallible> {
            self.asked.borrow_mut().push(at.name.clone());
            Ok(self
                .holders
                .iter()
                .find(|(n, _)| *n == at.name)
                .map(|(_, w)| w.clone()))
        }
    }

    fn rule() -> Rule {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.yaml");
        std::fs::write(&file, RULE).unwrap();
        let mut set = crate::rules::load(&[file]).unwrap_or_else(|d| panic!("{}", d[0]));
        std::sync::Arc::into_inner(set.rules.remove(0)).unwrap()
    }

    fn primary(settings: &str) -> Value {
        json!({"apiVersion": "demo.kiln.dev/v1", "kind": "App",
            "metadata": {"name": "shop", "namespace": "team", "uid": "u1", "generation": 2},
            "spec": {"settings": settings}})
    }

    fn live(id: &str, kind: &str, name: &str) -> Live {
        Live {
            child: LiveChild {
                id: id.into(),
                gvk: Gvk {
                    group: String::new(),
                    version: "v1".into(),
                    kind: kind.into(),
                },
                key: ObjKey {
                    namespace: Some("team".into()),
                    name: name.into(),
                },
                uid: Some(format!("uid-{name}")),
                deleting: false,
                orphan: false,
            },
            object: json!({"metadata": {"name": name, "namespace": "team"}}),
        }
    }

    fn read_from(source: &Memory, primary: Value) -> Reading {
        let rule = rule();
        let this = to_jinja(&primary);
        let inputs = Inputs {
            primary,
            ..Inputs::default()
        };
        let known = Known::new();
        let reading = read(source, &rule, &this, inputs, &known, true);
        let Ok(reading) = reading
            .now_or_never()
            .expect("a memory source answers at once");
        reading
    }

    #[test]
    fn templates_see_the_children_of_the_ids_the_rule_has_and_prune_sees_them_all() {
        let source = Memory {
            related: Some(json!({"metadata": {"name": "s"}, "data": {"value": "v"}})),
            live: vec![
                live("part", "Secret", "shop-b"),
                live("part", "Secret", "shop-a"),
                live("config", "ConfigMap", "shop"),
                live("gone", "ConfigMap", "shop-old"),
            ],
            ..Memory::default()
        };
        let reading = read_from(&source, primary("s"));
        let observed = &reading.observed.inputs.observed;
        // forEach children in name order; a removed id is live, not seen.
        let parts: Vec<&str> = observed["part"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(parts, ["shop-a", "shop-b"]);
        assert_eq!(observed["config"]["metadata"]["name"], "shop");
        assert!(!observed.contains_key("gone"));
        assert_eq!(reading.observed.children.len(), 4);
        assert_eq!(reading.plan.prune.len(), 1);
        assert_eq!(reading.plan.prune[0].key.name, "shop-old");
        // Where the watch looked is kept for the reverse index.
        let target = Target::Named(ObjKey {
            namespace: Some("team".into()),
            name: "s".into(),
        });
        assert_eq!(reading.observed.targets, [("settings".to_string(), target)]);
        // Every name is this primary's live child: no holder is asked for.
        assert!(source.asked.borrow().is_empty());
    }

    #[test]
    fn a_name_held_by_another_is_asked_for_and_blocks_its_child() {
        let source = Memory {
            related: Some(json!({"metadata": {"name": "s"}, "data": {"value": "v"}})),
            holders: vec![("shop".into(), "not created by kiln".into())],
            ..Memory::default()
        };
        let reading = read_from(&source, primary("s"));
        assert_eq!(*source.asked.borrow(), ["shop", "shop-b", "shop-a"]);
        assert!(reading.plan.apply.iter().all(|c| c.name != "shop"));
        assert_eq!(reading.observed.occupants.len(), 1);
    }

    #[test]
    fn a_blind_cache_or_a_missing_required_object_reads_nothing_further() {
        let blind = Memory {
            blind: vec![Blind::Unsynced("ConfigMap".into())],
            live: vec![live("config", "ConfigMap", "shop")],
            ..Memory::default()
        };
        let reading = read_from(&blind, primary("s"));
        assert!(reading.observed.children.is_empty());
        assert!(reading.plan.apply.is_empty() && reading.plan.prune.is_empty());
        assert!(reading.rendered.is_none());

        let missing = read_from(&Memory::default(), primary("s"));
        assert_eq!(
            missing.observed.missing,
            ["ConfigMap team/s (related.settings)"]
        );
        assert!(missing.plan.apply.is_empty());
    }

    #[test]
    fn a_reference_that_does_not_render_refuses_the_reconcile() {
        let mut p = primary("s");
        p["spec"] = json!({});
        let reading = read_from(&Memory::default(), p);
        assert!(reading.observed.targets.is_empty());
        let super::super::status::Outcome::Failed { reason, .. } = &reading.plan.status.outcome
        else {
            panic!("not refused: {:?}", reading.plan.status.outcome);
        };
        assert_eq!(*reason, reasons::TEMPLATE_ERROR);
    }
}
