//! Each test is one scenario: the world as the cache shows it, and what
//! the plan does about it.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::*;
use crate::engine::decision::deletion::{Finalizing, finalizing, teardown};
use crate::engine::decision::diff::normalized;
use crate::render::{APPLIED_ANNOTATION, well_known_scope};
use crate::rules;
use crate::template::to_jinja;

const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: app}
spec:
  for: {apiVersion: demo.kiln.dev/v1, kind: App}
  watches:
    - name: creds
      apiVersion: v1
      kind: Secret
      ref: {name: "{{ self.spec.secret | default('creds') }}"}
      required: true
  children:
    - id: config
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}", labels: "{{ self.spec.labels | default({}) }}"}
        data: "{{ self.spec.data }}"
    - id: extra
      when: self.spec.extra | default(false)
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-extra"}
      readyWhen: child.data.ready == 'yes'
  status:
    fields:
      size: "{{ self.spec.data | length }}"
  requeue: {resync: 10m, waiting: 5s}
"#;

fn rule() -> Rule {
    rule_from(RULE)
}

fn rule_from(text: &str) -> Rule {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.yaml");
    std::fs::write(&file, text).unwrap();
    let mut set = rules::load(&[file]).unwrap_or_else(|d| panic!("{}", d[0]));
    std::sync::Arc::into_inner(set.rules.remove(0)).unwrap()
}

/// A world: one App primary with `spec`, its Secret present, no children yet.
struct World {
    rule: Rule,
    observed: Observed,
    known: Known,
    /// Objects of other owners in the child kinds' caches: name → owner.
    others: HashMap<String, String>,
}

fn an_app(spec: Value) -> World {
    let mut observed = Observed::default();
    observed.inputs.primary = json!({
        "apiVersion": "demo.kiln.dev/v1", "kind": "App",
        "metadata": {"name": "shop", "namespace": "team", "uid": "u1", "generation": 3},
        "spec": spec,
    });
    observed
        .inputs
        .related
        .insert("creds".into(), json!({"metadata": {"name": "creds"}}));
    World {
        rule: rule(),
        observed,
        known: Known::new(),
        others: HashMap::new(),
    }
}

impl World {
    fn plan(&self) -> Plan {
        let this = to_jinja(&self.observed.inputs.primary);
        let Ok(draft) = draft(&self.rule, &this, &self.observed, &well_known_scope) else {
            return plan(
                &self.rule,
                &this,
                &self.observed,
                &self.known,
                &well_known_scope,
            );
        };
        // The source reads who holds each name the draft takes.
        let mut observed = self.observed.clone();
        observed.occupants = draft
            .names(&self.rule, &self.observed)
            .filter_map(|(gvk, key)| {
                let who = self.others.get(&key.name)?.clone();
                Some(((gvk.clone(), key), who))
            })
            .collect();
        draft.decide(&self.rule, &observed, &self.known)
    }

    /// The children exactly as the current plan would apply them are live.
    fn converged(mut self) -> Self {
        for c in self.plan().apply {
            self = self.with_live(&c.id, c.object);
        }
        self
    }

    fn with_live(mut self, id: &str, object: Value) -> Self {
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        self.observed.children.push(LiveChild {
            id: id.into(),
            gvk: Gvk {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
            },
            key: ObjKey {
                namespace: Some("team".into()),
                name,
            },
            uid: Some(format!("uid-{id}")),
            deleting: false,
            orphan: false,
        });
        self.observed.inputs.observed.insert(id.into(), object);
        self
    }

    /// The rule, with `field` added to child `id` (e.g. `updatePolicy: CreateOnce`).
    fn child_with(mut self, id: &str, field: &str) -> Self {
        let at = format!("    - id: {id}\n");
        let text = RULE.replace(&at, &format!("{at}      {field}\n"));
        self.rule = rule_from(&text);
        self
    }

    fn live_mut(&mut self, id: &str) -> &mut Value {
        self.observed.inputs.observed.get_mut(id).unwrap()
    }

    fn spec(mut self, spec: Value) -> Self {
        self.observed.inputs.primary["spec"] = spec;
        self
    }

    fn without_secret(mut self) -> Self {
        self.observed.inputs.related.clear();
        self.observed
            .missing
            .push("Secret team/creds (related.creds)".into());
        self
    }
}

fn applied_ids(plan: &Plan) -> Vec<&str> {
    plan.apply.iter().map(|c| c.id.as_str()).collect()
}

fn pruned(plan: &Plan) -> Vec<&str> {
    plan.prune.iter().map(|p| p.key.name.as_str()).collect()
}

fn base() -> Value {
    json!({"data": {"owner": "me", "old": "x"}, "labels": {"keep": "yes", "extra": "yes"}})
}

fn verdicts(plan: &Plan) -> Vec<(&str, Verdict)> {
    plan.children
        .iter()
        .map(|c| (c.id.as_str(), c.verdict.clone()))
        .collect()
}

#[test]
fn each_child_has_the_verdict_the_plan_acts_on() {
    let mut spec = base();
    spec["extra"] = json!(true);
    let world = an_app(spec.clone());
    assert_eq!(
        verdicts(&world.plan()),
        [("config", Verdict::Create), ("extra", Verdict::Create)]
    );
    let mut world = world.converged();
    assert_eq!(
        verdicts(&world.plan()),
        [("config", Verdict::Applied), ("extra", Verdict::Applied)]
    );
    world.live_mut("config")["data"]["owner"] = json!("them");
    let plan = world.plan();
    assert_eq!(verdicts(&plan)[0], ("config", Verdict::Change));
    assert_eq!(applied_ids(&plan), ["config"], "what changes is applied");
    let plan = an_app(spec).converged().spec(base()).plan();
    assert_eq!(
        verdicts(&plan),
        [("config", Verdict::Applied), ("extra", Verdict::Prune)]
    );
    let world = an_app(base())
        .child_with("config", "updatePolicy: CreateOnce")
        .converged();
    assert_eq!(
        verdicts(&world.plan()),
        [("config", Verdict::CreatedOnce(false))]
    );
}

#[test]
fn a_suspended_primary_plans_no_write_and_says_so_of_every_live_child() {
    let mut spec = base();
    spec["extra"] = json!(true);
    let mut world = an_app(spec).converged().spec(base());
    world.observed.inputs.primary["metadata"]["annotations"] =
        json!({crate::engine::decision::suspend::RECONCILE: "suspended"});
    let plan = world.plan();
    assert!(plan.suspended);
    assert!(!plan.writes_children());
    assert_eq!(
        verdicts(&plan),
        [
            ("config", Verdict::Suspended),
            ("extra", Verdict::Suspended)
        ]
    );
    assert_eq!(plan.event().unwrap().reason, "Suspended");
}

#[test]
fn an_orphan_no_longer_rendered_is_left_and_a_waiting_child_waits() {
    let mut spec = base();
    spec["extra"] = json!(true);
    let plan = an_app(spec)
        .child_with("extra", "deletionPolicy: Orphan")
        .converged()
        .spec(base())
        .plan();
    assert_eq!(
        verdicts(&plan),
        [("config", Verdict::Applied), ("extra", Verdict::Left)]
    );
    let plan = a_chain().plan();
    assert_eq!(
        verdicts(&plan),
        [
            ("db", Verdict::Create),
            ("app", Verdict::Waits("`db` to exist".into())),
            (
                "web",
                Verdict::Waits("`app` to be ready and `db` to exist".into())
            ),
        ]
    );
}

#[test]
fn the_finalizer_is_added_first_removed_when_unwanted_and_holds_a_teardown() {
    use Finalizing::*;
    // (holds, wants, going) → step
    let table = [
        ((false, Some(true), false), Set(true)),
        ((true, Some(false), false), Set(false)),
        ((true, Some(true), false), Keep),
        ((false, Some(false), false), Keep),
        ((true, Some(true), true), TearDown),
        ((true, Some(false), true), Release),
        ((false, Some(true), true), Stop),
        ((false, Some(false), true), Stop),
        ((true, None, true), Keep),
        ((false, None, false), Keep),
        ((true, None, false), Keep),
    ];
    for ((holds, wants, going), step) in table {
        assert_eq!(
            finalizing(holds, wants, going),
            step,
            "{holds} {wants:?} {going}"
        );
    }
}

#[test]
fn waiting_raises_a_normal_event_a_failure_a_warning_success_none() {
    let waiting = an_app(base()).without_secret().plan().event().unwrap();
    assert!(!waiting.warning);
    assert_eq!(waiting.reason, reasons::DEPENDENCY_MISSING);
    assert_eq!(
        waiting.message,
        "waiting for Secret team/creds (related.creds)"
    );
    let failed = an_app(json!({"labels": {}})).plan().event().unwrap();
    assert!(failed.warning);
    assert_eq!(failed.reason, reasons::TEMPLATE_ERROR);
    assert_eq!(an_app(base()).converged().plan().event(), None);
}

#[test]
fn a_new_primary_applies_its_children() {
    let plan = an_app(base()).plan();
    assert_eq!(applied_ids(&plan), ["config"]);
    assert!(plan.prune.is_empty());
    assert_eq!(
        plan.next,
        Next::After(Duration::from_secs(5)),
        "children not seen yet are not ready: look again after `waiting`"
    );
}

#[test]
fn a_requested_wake_is_the_next_reconcile_when_it_is_sooner() {
    let secs = Duration::from_secs;
    assert_eq!(
        Next::Done.no_later_than(Some(secs(90))),
        Next::After(secs(90))
    );
    assert_eq!(
        Next::After(secs(5)).no_later_than(Some(secs(90))),
        Next::After(secs(5))
    );
    assert_eq!(
        Next::After(secs(600)).no_later_than(Some(secs(90))),
        Next::After(secs(90))
    );
    assert_eq!(Next::Done.no_later_than(None), Next::Done);
}

#[test]
fn converged_children_need_no_write() {
    let plan = an_app(base()).converged().plan();
    assert!(!plan.writes_children());
    assert_eq!(
        plan.status.outcome,
        Outcome::Applied {
            not_ready: vec![],
            waiting: vec![],
            unserved: Vec::new(),
        }
    );
    assert_eq!(plan.status.fields.unwrap()["size"], 2);
}

#[test]
fn extra_fields_added_by_the_server_or_others_are_not_drift() {
    let mut world = an_app(base()).converged();
    let live = world.live_mut("config");
    live["metadata"]["resourceVersion"] = json!("42");
    live["metadata"]["labels"]["someone-else"] = json!("x");
    assert!(!world.plan().writes_children());
}

#[test]
fn a_data_key_the_primary_no_longer_has_is_applied_away() {
    let world = an_app(base())
        .converged()
        .spec(json!({"data": {"owner": "me"}, "labels": {"keep": "yes", "extra": "yes"}}));
    let plan = world.plan();
    assert_eq!(applied_ids(&plan), ["config"]);
    assert!(
        plan.apply[0].object["data"].get("old").is_none(),
        "the full desired object is applied; server-side apply removes `old`"
    );
}

#[test]
fn a_label_the_primary_no_longer_has_is_applied_away() {
    let world = an_app(base())
        .converged()
        .spec(json!({"data": {"owner": "me", "old": "x"}, "labels": {"keep": "yes"}}));
    assert_eq!(applied_ids(&world.plan()), ["config"]);
}

#[test]
fn a_field_someone_changed_is_applied_back() {
    let mut world = an_app(base()).converged();
    world.live_mut("config")["data"]["owner"] = json!("them");
    assert_eq!(applied_ids(&world.plan()), ["config"]);
}

#[test]
fn a_child_someone_deleted_is_applied_again() {
    let mut world = an_app(base()).converged();
    world.observed.children.clear();
    world.observed.inputs.observed.clear();
    assert_eq!(applied_ids(&world.plan()), ["config"]);
}

#[test]
fn a_child_whose_when_turns_false_is_pruned() {
    let mut spec = base();
    spec["extra"] = json!(true);
    let world = an_app(spec).converged();
    assert!(world.plan().prune.is_empty());
    let plan = world.spec(base()).plan();
    assert_eq!(pruned(&plan), ["shop-extra"]);
    assert!(plan.apply.is_empty());
    assert_eq!(plan.prune[0].uid.as_deref(), Some("uid-extra"));
}

#[test]
fn a_child_whose_id_left_the_rule_is_pruned() {
    let world = an_app(base()).converged().with_live(
        "gone",
        json!({"metadata": {"name": "shop-gone", "namespace": "team"}}),
    );
    let plan = world.plan();
    assert_eq!(pruned(&plan), ["shop-gone"]);
    assert!(plan.apply.is_empty());
}

#[test]
fn a_child_already_being_deleted_is_not_deleted_again() {
    let mut spec = base();
    spec["extra"] = json!(true);
    let mut world = an_app(spec).converged().spec(base());
    for c in &mut world.observed.children {
        c.deleting = true;
    }
    assert!(world.plan().prune.is_empty());
}

#[test]
fn a_child_not_ready_yet_makes_the_primary_wait() {
    let mut spec = base();
    spec["extra"] = json!(true);
    let plan = an_app(spec.clone()).converged().plan();
    assert_eq!(
        plan.status.outcome,
        Outcome::Applied {
            not_ready: vec!["extra/shop-extra".into()],
            waiting: vec![],
            unserved: Vec::new(),
        }
    );
    assert_eq!(plan.next, Next::After(Duration::from_secs(5)));
    let mut world = an_app(spec).converged();
    world.live_mut("extra")["data"] = json!({"ready": "yes"});
    let plan = world.plan();
    assert_eq!(plan.next, Next::After(Duration::from_secs(600)));
    assert!(
        !plan.writes_children(),
        "data the rule does not set is someone else's: not drift"
    );
}

#[test]
fn a_missing_required_object_waits_and_writes_nothing_but_status() {
    let plan = an_app(base()).converged().without_secret().plan();
    assert!(!plan.writes_children());
    assert!(matches!(plan.status.outcome, Outcome::Waiting { .. }));
    assert_eq!(plan.status.fields, None, "fields are kept, not rendered");
    assert_eq!(plan.next, Next::After(Duration::from_secs(5)));
}

#[test]
fn a_missing_required_object_never_prunes() {
    let mut spec = base();
    spec["extra"] = json!(true);
    let plan = an_app(spec).converged().without_secret().plan();
    assert!(plan.prune.is_empty());
}

#[test]
fn a_forbidden_cache_is_not_absence_nothing_is_rendered_applied_or_pruned() {
    let mut spec = base();
    spec["extra"] = json!(true);
    let mut world = an_app(spec).converged();
    // The Secret cache is forbidden: it looks empty, and `extra` would
    // still be rendered, but nothing may be concluded from it.
    world.observed.inputs.related.clear();
    world.observed.blind.push(Blind::Forbidden("Secret".into()));
    let plan = world.spec(base()).plan();
    assert!(!plan.writes_children(), "{plan:?}");
    let Outcome::Failed { reason, message } = &plan.status.outcome else {
        panic!("{:?}", plan.status.outcome)
    };
    assert_eq!(*reason, reasons::FORBIDDEN);
    assert!(message.contains("list and watch Secret"), "{message}");
    assert_eq!(plan.next, Next::After(Duration::from_secs(5)));
}

#[test]
fn an_unsynced_cache_waits_without_writes() {
    let mut world = an_app(base()).converged();
    world
        .observed
        .blind
        .push(Blind::Unsynced("ConfigMap".into()));
    let plan = world.plan();
    assert!(!plan.writes_children());
    assert_eq!(
        plan.status.outcome,
        Outcome::Waiting {
            missing: vec!["the ConfigMap cache (not synced yet)".into()]
        }
    );
}

#[test]
fn a_template_error_is_a_condition_without_retry_and_without_writes() {
    let plan = an_app(json!({"labels": {}})).converged().plan();
    assert!(!plan.writes_children());
    assert_eq!(plan.next, Next::Done);
    let Outcome::Failed { reason, message } = &plan.status.outcome else {
        panic!("{:?}", plan.status.outcome)
    };
    assert_eq!(*reason, reasons::TEMPLATE_ERROR);
    assert!(message.contains("self.spec.data"), "{message}");
}

#[test]
fn a_name_that_would_escape_its_url_is_invalid_and_never_sent() {
    let mut world = an_app(base());
    world.observed.inputs.primary["metadata"]["name"] =
        json!("x/../../kube-system/configmaps/evil");
    let plan = world.plan();
    assert!(!plan.writes_children());
    assert_eq!(
        plan.next,
        Next::Done,
        "no retries: permanent for this object"
    );
    let Outcome::Failed { reason, message } = &plan.status.outcome else {
        panic!("{:?}", plan.status.outcome)
    };
    assert_eq!(*reason, reasons::INVALID);
    assert!(
        message.contains("metadata.name `x/../../kube-system"),
        "{message}"
    );
}

#[test]
fn a_name_taken_by_an_object_kiln_did_not_create_is_never_taken_over() {
    let mut spec = base();
    spec["extra"] = json!(true);
    let mut world = an_app(spec).converged();
    world
        .others
        .insert("shop-extra".into(), "not created by kiln".into());
    // The rule's own live child is not a collision with itself.
    assert!(!world.plan().writes_children());
    world.observed.children.retain(|c| c.id != "extra");
    world.observed.inputs.observed.remove("extra");
    let plan = world.plan();
    assert!(!plan.writes_children(), "{plan:?}");
    let Outcome::Failed { reason, message } = &plan.status.outcome else {
        panic!("{:?}", plan.status.outcome)
    };
    assert_eq!(*reason, reasons::ALREADY_EXISTS);
    assert!(
        message.contains("ConfigMap team/shop-extra already exists (not created by kiln)"),
        "{message}"
    );
    assert_eq!(plan.next, Next::After(Duration::from_secs(5)));
}

#[test]
fn a_template_error_never_prunes() {
    let mut spec = base();
    spec["extra"] = json!(true);
    let world = an_app(spec).converged().spec(json!({"extra": false}));
    let plan = world.plan();
    assert!(
        plan.prune.is_empty(),
        "nothing rendered: nothing is known to be unwanted"
    );
}

#[test]
fn a_value_the_server_stores_differently_converges_once_known() {
    let mut world = an_app(base());
    let sent = world.plan().apply.remove(0);
    // The server canonicalises a value (as it does `1000m` → `1`).
    let mut stored = sent.object.clone();
    stored["data"]["owner"] = json!("ME");
    world = world.with_live("config", stored.clone());
    assert_eq!(
        applied_ids(&world.plan()),
        ["config"],
        "unknown: looks like drift"
    );
    let key = (sent.gvk.clone(), key_of(&sent));
    world
        .known
        .insert(key, normalized(&sent.object, &stored).unwrap());
    assert!(!world.plan().writes_children(), "known: converged");
    // A change of what the rule renders is applied even so.
    let world = world.spec(json!({"data": {"owner": "me"}}));
    assert_eq!(applied_ids(&world.plan()), ["config"]);
}

#[test]
fn every_child_carries_the_hash_of_what_was_applied() {
    let a = an_app(base()).plan().apply.remove(0);
    let b = an_app(json!({"data": {"owner": "me"}}))
        .plan()
        .apply
        .remove(0);
    let hash = |c: &DesiredChild| c.object["metadata"]["annotations"][APPLIED_ANNOTATION].clone();
    assert!(hash(&a).is_string());
    assert_ne!(hash(&a), hash(&b));
    assert_eq!(hash(&a), hash(&an_app(base()).plan().apply.remove(0)));
}

#[test]
fn a_created_once_child_is_created_when_missing() {
    let world = an_app(base()).child_with("config", "updatePolicy: CreateOnce");
    assert_eq!(applied_ids(&world.plan()), ["config"]);
}

#[test]
fn a_created_once_child_that_exists_is_never_written_again_even_when_the_template_changes() {
    let world = an_app(base())
        .child_with("config", "updatePolicy: CreateOnce")
        .converged()
        .spec(json!({"data": {"owner": "someone new"}}));
    assert!(!world.plan().writes_children());
}

#[test]
fn a_created_once_child_a_user_edited_is_left_as_the_user_made_it() {
    let mut world = an_app(base())
        .child_with("config", "updatePolicy: CreateOnce")
        .converged();
    world.live_mut("config")["data"]["owner"] = json!("the user");
    assert!(!world.plan().writes_children());
}

#[test]
fn a_created_once_child_someone_deleted_is_created_again() {
    let mut world = an_app(base())
        .child_with("config", "updatePolicy: CreateOnce")
        .converged();
    world.observed.children.clear();
    world.observed.inputs.observed.clear();
    assert_eq!(applied_ids(&world.plan()), ["config"]);
}

#[test]
fn a_created_once_child_still_counts_for_readiness() {
    let mut spec = base();
    spec["extra"] = json!(true);
    let plan = an_app(spec)
        .child_with("extra", "updatePolicy: CreateOnce")
        .converged()
        .plan();
    assert_eq!(
        plan.status.outcome,
        Outcome::Applied {
            not_ready: vec!["extra/shop-extra".into()],
            waiting: Vec::new(),
            unserved: Vec::new(),
        }
    );
}

#[test]
fn a_created_once_child_whose_when_turns_false_is_still_pruned() {
    let mut spec = base();
    spec["extra"] = json!(true);
    let world = an_app(spec)
        .child_with("extra", "updatePolicy: CreateOnce")
        .converged()
        .spec(base());
    assert_eq!(pruned(&world.plan()), ["shop-extra"]);
}

#[test]
fn a_created_once_child_follows_a_changed_deletion_policy_by_its_ownership_only() {
    // Created owned (the default policy), then the rule says Orphan.
    let mut world = an_app(base())
        .child_with("config", "updatePolicy: CreateOnce")
        .converged();
    world.live_mut("config")["data"]["edited"] = json!("by a user");
    assert!(!world.plan().writes_children(), "converged: nothing to do");
    let world = world.child_with(
        "config",
        "updatePolicy: CreateOnce\n      deletionPolicy: Orphan",
    );
    let plan = world.plan();
    assert!(plan.apply.is_empty(), "never applied again");
    assert_eq!(plan.reown.len(), 1);
    assert_eq!(plan.reown[0].key.name, "shop");
    assert!(matches!(
        &plan.reown[0].to,
        crate::engine::decision::reown::Ownership::Orphan { uid, .. } if uid == "u1"
    ));
    // Once the patch landed (no reference, the annotations), nothing more.
    let mut world = world;
    let live = world.live_mut("config");
    live["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    live["metadata"]["annotations"][render::PRIMARY_UID_ANNOTATION] = json!("u1");
    assert!(!world.plan().writes_children());
}

#[test]
fn an_orphan_child_has_no_owner_reference_and_names_its_primary_instead() {
    let plan = an_app(base())
        .child_with("config", "deletionPolicy: Orphan")
        .plan();
    let meta = &plan.apply[0].object["metadata"];
    assert!(meta.get("ownerReferences").is_none(), "{meta}");
    assert_eq!(meta["annotations"][render::PRIMARY_UID_ANNOTATION], "u1");
    assert_eq!(meta["annotations"][render::PRIMARY_NAME_ANNOTATION], "shop");
    assert_eq!(meta["labels"][render::RULE_LABEL], "app", "still kiln's");
}

#[test]
fn an_orphan_child_whose_when_turns_false_is_left_not_pruned() {
    let mut spec = base();
    spec["extra"] = json!(true);
    let world = an_app(spec)
        .child_with("extra", "deletionPolicy: Orphan")
        .converged()
        .spec(base());
    assert!(!world.plan().writes_children());
}

#[test]
fn an_orphan_child_is_still_kept_as_rendered_while_its_primary_selects_it() {
    let mut world = an_app(base())
        .child_with("config", "deletionPolicy: Orphan")
        .converged();
    assert!(!world.plan().writes_children());
    world.live_mut("config")["data"]["owner"] = json!("them");
    assert_eq!(applied_ids(&world.plan()), ["config"]);
}

#[test]
fn a_live_orphan_whose_id_left_the_rule_is_never_pruned() {
    let mut world = an_app(base()).converged().with_live(
        "gone",
        json!({"metadata": {"name": "shop-gone", "namespace": "team"}}),
    );
    world.observed.children.last_mut().unwrap().orphan = true;
    assert!(!world.plan().writes_children());
}

#[test]
fn status_fields_and_generation_come_from_the_render() {
    let plan = an_app(base()).plan();
    let mut fields = Map::new();
    fields.insert("size".into(), json!(2));
    assert_eq!(plan.status.fields, Some(fields));
    assert_eq!(plan.status.generation, Some(3));
    let failed = failed(&plan, reasons::INVALID, "no".into());
    assert_eq!(failed.fields, None, "a failed write claims no new status");
}

/// A ConfigMap `db`; `app` refers to it (waits until it exists), `web`
/// reads `ready.app` (waits until `app` is ready), `opt` is switched by
/// the spec and `after_opt` refers to it.
const CHAIN: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: chain}
spec:
  for: {apiVersion: demo.kiln.dev/v1, kind: App}
  vars:
    base: "{{ self.metadata.name }}"
    db_name: "{{ children.db.metadata.name | default('none') }}"
  children:
    - id: web
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ vars.base }}-web"}
        data: {app_ready: "{{ ready.app }}", db: "{{ vars.db_name }}"}
    - id: app
      readyWhen: child.data.up == 'yes'
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ vars.base }}-app"}
        data: {db: "{{ children.db.metadata.name }}"}
    - id: db
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ vars.base }}-db"}
    - id: opt
      when: self.spec.opt | default(false)
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ vars.base }}-opt"}
    - id: after_opt
      dependsOn: [{id: opt}]
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ vars.base }}-after-opt"}
  status:
    fields:
      appReady: "{{ ready.app }}"
"#;

fn a_chain() -> World {
    let mut world = an_app(json!({}));
    world.rule = rule_from(CHAIN);
    world
}

fn waiting_of(plan: &Plan) -> Vec<String> {
    match &plan.status.outcome {
        Outcome::Applied { waiting, .. } => waiting.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn children_are_rendered_after_the_children_they_refer_to() {
    let rule = rule_from(CHAIN);
    assert_eq!(rule.order, [2, 1, 0, 3, 4]);
    let web = &rule.children[0];
    assert_eq!(
        web.needs,
        [
            rules::Need {
                id: "app".into(),
                ready: true
            },
            rules::Need {
                id: "db".into(),
                ready: false
            }
        ],
        "`web` reads `db` through `vars.db_name`"
    );
}

#[test]
fn a_child_that_refers_to_another_waits_until_it_exists() {
    let world = a_chain();
    let plan = world.plan();
    assert_eq!(applied_ids(&plan), ["db"], "only what waits for nothing");
    assert_eq!(
        waiting_of(&plan),
        [
            "`app` waits for `db` to exist",
            "`web` waits for `app` to be ready and `db` to exist"
        ]
    );
    assert_eq!(plan.next, Next::After(Duration::from_secs(5)));
    assert_eq!(plan.status.fields.unwrap()["appReady"], false);
    // The dependency exists: its dependent is applied, with its value.
    let world = world.converged();
    let plan = world.plan();
    assert_eq!(applied_ids(&plan), ["app"]);
    assert_eq!(plan.apply[0].object["data"]["db"], "shop-db");
    assert_eq!(waiting_of(&plan), ["`web` waits for `app` to be ready"]);
}

#[test]
fn a_child_that_reads_another_s_readiness_waits_until_it_is_ready() {
    let mut world = a_chain().converged().converged();
    assert!(!world.plan().apply.iter().any(|c| c.id == "web"));
    world.live_mut("app")["data"]["up"] = json!("yes");
    let plan = world.plan();
    assert_eq!(applied_ids(&plan), ["web"]);
    // A ConfigMap's data holds strings: the boolean is written as one.
    assert_eq!(plan.apply[0].object["data"]["app_ready"], "true");
    assert_eq!(plan.apply[0].object["data"]["db"], "shop-db");
    assert!(waiting_of(&plan).is_empty());
    assert_eq!(plan.status.fields.unwrap()["appReady"], true);
}

#[test]
fn a_child_waiting_again_is_kept_not_pruned() {
    let mut world = a_chain().converged().converged();
    world.live_mut("app")["data"]["up"] = json!("yes");
    let world = world.converged();
    assert!(!world.plan().writes_children());
    // `app` stops being ready: `web` waits again, but stays as it is.
    let mut world = world;
    world.live_mut("app")["data"]["up"] = json!("no");
    let plan = world.plan();
    assert!(!plan.writes_children(), "{plan:?}");
    assert_eq!(waiting_of(&plan), ["`web` waits for `app` to be ready"]);
}

#[test]
fn ordered_deletion_deletes_a_child_only_once_nothing_live_waits_for_it() {
    let mut world = a_chain().spec(json!({"opt": true})).converged().converged();
    world.live_mut("app")["data"]["up"] = json!("yes");
    let world = world.converged();
    assert_eq!(world.observed.children.len(), 5, "every child is live");
    let rule = &world.rule;
    let mut live = world.observed.children.clone();
    let ids = |p: Vec<Prune>| -> Vec<String> {
        let mut names: Vec<String> = p.into_iter().map(|p| p.key.name).collect();
        names.sort_unstable();
        names
    };
    // `web` waits for `app` and `db`, `app` for `db`, `after_opt` for `opt`.
    assert_eq!(ids(teardown(rule, &live)), ["shop-after-opt", "shop-web"]);
    for c in &mut live {
        if c.id == "web" || c.id == "after_opt" {
            c.deleting = true;
        }
    }
    assert!(
        teardown(rule, &live).is_empty(),
        "nothing more while they are still there (being deleted)"
    );
    live.retain(|c| !c.deleting);
    assert_eq!(ids(teardown(rule, &live)), ["shop-app", "shop-opt"]);
    live.retain(|c| c.id == "db");
    assert_eq!(ids(teardown(rule, &live)), ["shop-db"]);
    assert!(teardown(rule, &[]).is_empty());
}

#[test]
fn a_child_switched_off_is_left_out_not_kept_waiting() {
    let mut world = a_chain();
    world.rule = rule_from(&CHAIN.replace(
            "      dependsOn: [{id: opt}]\n",
            "      dependsOn: [{id: opt}, {id: app, ready: true}]\n      when: self.spec.after | default(true)\n",
        ));
    let world = world.spec(json!({"opt": true})).converged().converged();
    assert!(waiting_of(&world.plan()).contains(&"`after_opt` waits for `app` to be ready".into()));
    let mut world = world;
    world.live_mut("app")["data"]["up"] = json!("yes");
    let world = world.converged();
    assert!(world.plan().apply.is_empty() && waiting_of(&world.plan()).is_empty());
    // `app` is not ready any more and `after_opt` is switched off: it
    // is pruned, not kept as a child waiting.
    let mut world = world.spec(json!({"opt": true, "after": false}));
    world.live_mut("app")["data"]["up"] = json!("no");
    let plan = world.plan();
    assert_eq!(pruned(&plan), ["shop-after-opt"]);
    assert!(!waiting_of(&plan).iter().any(|w| w.contains("after_opt")));
}

#[test]
fn a_child_whose_dependency_is_left_out_is_left_out_too() {
    let world = a_chain();
    assert!(
        !world.plan().apply.iter().any(|c| c.id == "after_opt"),
        "`opt` is off: nothing to wait for, nothing to render"
    );
    let world = world.spec(json!({"opt": true}));
    let plan = world.plan();
    assert!(applied_ids(&plan).contains(&"opt"));
    assert!(waiting_of(&plan).contains(&"`after_opt` waits for `opt` to exist".to_string()));
    let world = world.converged();
    assert!(applied_ids(&world.plan()).contains(&"after_opt"));
    // Switched off again: both are pruned.
    let world = world.converged().spec(json!({}));
    let plan = world.plan();
    let mut gone = pruned(&plan);
    gone.sort_unstable();
    assert_eq!(gone, ["shop-after-opt", "shop-opt"]);
}

#[test]
fn a_secret_value_that_is_also_a_name_the_reader_sees_is_not_redacted() {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut w = an_app(base());
    // The database user is `shop`, the primary's own name; `team` its namespace.
    w.observed.inputs.related.insert(
        "creds".into(),
        json!({"metadata": {"name": "creds"},
            "data": {"user": b64("shop"), "ns": b64("team"), "password": b64("hunter2-pass"),
                "host": b64("vault-db")}}),
    );
    // An object elsewhere named like a value: its name is not public.
    w.observed.inputs.related.insert(
        "other".into(),
        json!({"metadata": {"name": "vault-db", "namespace": "infra"}}),
    );
    let secrets = w.observed.secrets(&w.rule);
    assert!(secrets.contains(&"vault-db".to_string()), "{secrets:?}");
    assert!(secrets.contains(&"hunter2-pass".to_string()), "{secrets:?}");
    assert!(!secrets.contains(&"shop".to_string()), "{secrets:?}");
    assert!(!secrets.contains(&"team".to_string()), "{secrets:?}");
    assert_eq!(
        crate::redact::redact("ConfigMap team/shop: password hunter2-pass", &secrets),
        "ConfigMap team/shop: password [redacted]"
    );
}
