use serde_json::{Map, json};

use super::super::plan::{self, Known, Observed, Plan, Verdict};
use super::super::status::{Outcome, reasons};
use crate::hook::{Answer, Called};
use crate::render::{Inputs, well_known_scope};
use crate::rules::{Gvk, Rule, one_rule};

const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: hello}
spec:
  for: {apiVersion: ctl.example.com/v1, kind: HelloWorld}
  status:
    fields:
      greeting: "hi"
  hooks:
    sync: {url: "http://127.0.0.1:9/sync"}
    children:
      - {id: pods, apiVersion: v1, kind: Pod}
      - {id: spaces, apiVersion: v1, kind: Namespace}
"#;

fn primary() -> serde_json::Value {
    json!({"apiVersion": "ctl.example.com/v1", "kind": "HelloWorld",
        "metadata": {"name": "w", "namespace": "team", "uid": "u1", "generation": 2}})
}

fn pod(name: &str, namespace: Option<&str>) -> serde_json::Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "uid": "theirs", "resourceVersion": "9",
            "labels": {"app": "hello", "kiln.dev/owner-uid": "someone-else"},
            "annotations": {"kiln.dev/primary-uid": "someone-else", "other.kiln.dev/x": "y"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"}});
    if let Some(ns) = namespace {
        p["metadata"]["namespace"] = json!(ns);
    }
    p
}

fn plan_of(rule: &Rule, called: Called) -> Plan {
    let observed = Observed {
        inputs: Inputs {
            primary: primary(),
            ..Inputs::default()
        },
        hook: Some(called),
        ..Observed::default()
    };
    let this = crate::template::to_jinja(&observed.inputs.primary);
    let scope = |gvk: &Gvk| well_known_scope(gvk);
    plan::plan(rule, &this, &observed, &Known::new(), &scope)
}

fn answered(children: Vec<serde_json::Value>, status: serde_json::Value) -> Called {
    Called::Answered(Answer {
        status: status.as_object().cloned(),
        children,
        resync_after: None,
        finalized: false,
    })
}

#[test]
fn a_hook_s_children_are_applied_as_the_rule_s_own_marked_and_placed() {
    let rule = one_rule(RULE);
    let status = json!({"replicas": 1, "greeting": "ignored", "conditions": [{"type": "X"}]});
    let plan = plan_of(&rule, answered(vec![pod("w-pod", None)], status));
    assert_eq!(plan.hook_failed, None);
    assert_eq!(plan.apply.len(), 1);
    let child = &plan.apply[0];
    assert_eq!(child.id, "pods");
    assert_eq!(child.namespace.as_deref(), Some("team"));
    let meta = &child.object["metadata"];
    assert_eq!(meta["ownerReferences"][0]["uid"], json!("u1"));
    assert_eq!(meta["labels"]["kiln.dev/child"], json!("pods"));
    assert!(meta.get("uid").is_none() && meta.get("resourceVersion").is_none());
    // A hook's copy of kiln's marks is dropped; its own labels stay.
    assert_eq!(meta["labels"]["app"], json!("hello"));
    assert!(meta["labels"].get("kiln.dev/owner-uid").is_none());
    let annotations = meta["annotations"].as_object().unwrap();
    assert!(
        annotations.keys().all(|k| k == "kiln.dev/applied"),
        "{annotations:?}"
    );
    assert!(child.object.get("status").is_none());
    assert_eq!(plan.children[0].verdict, Verdict::Create);
    // The hook's status joins the rule's fields; the rule's and the
    // engine's own keys are not the hook's to write.
    let fields = plan.status.fields.clone().unwrap_or_default();
    assert_eq!(fields.get("replicas"), Some(&json!(1)));
    assert_eq!(fields.get("greeting"), Some(&json!("hi")));
    assert!(!fields.contains_key("conditions"));
}

#[test]
fn an_answer_with_one_child_kiln_may_not_place_applies_nothing() {
    let rule = one_rule(RULE);
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
    let space = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "evil"}});
    let unnamed = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}});
    let cases = [
        (
            vec![pod("ok", None), secret],
            "a kind spec.hooks.children does not list",
        ),
        (
            vec![pod("ok", None), pod("p", Some("kube-system"))],
            "its primary is in `team`",
        ),
        (vec![space], "cluster-scoped"),
        (vec![pod("p", None), pod("p", None)], "twice"),
        (vec![unnamed], "metadata.name is missing"),
        (vec![json!({"kind": "Pod"})], "no apiVersion and kind"),
    ];
    for (children, why) in cases {
        let plan = plan_of(&rule, answered(children, json!({"replicas": 1})));
        assert!(plan.apply.is_empty() && plan.prune.is_empty(), "{why}");
        let failed = plan.hook_failed.clone().unwrap_or_default();
        assert!(failed.contains(why), "{why}: {failed}");
        match &plan.status.outcome {
            Outcome::Failed { reason, .. } => assert_eq!(*reason, reasons::HOOK_FAILED),
            other => panic!("{other:?}"),
        }
        assert_eq!(plan.status.fields, None, "a refused answer writes no field");
    }
}

#[test]
fn a_failed_call_applies_nothing_and_says_why() {
    let rule = one_rule(RULE);
    let plan = plan_of(&rule, Called::Failed("timed out after 10s".into()));
    assert!(!plan.writes_children());
    assert_eq!(plan.hook_failed.as_deref(), Some("timed out after 10s"));
    let event = plan.event().expect("a Warning");
    assert!(event.warning);
    assert_eq!(event.reason, reasons::HOOK_FAILED);
    // A source that does not call hooks says so, and writes nothing.
    let plan = plan_of(&rule, Called::NotCalled);
    assert!(!plan.writes_children() && plan.hook_failed.is_none());
    assert!(matches!(plan.status.outcome, Outcome::Waiting { .. }));
}

#[test]
fn a_child_the_hook_stops_returning_is_pruned_and_resync_is_honoured() {
    let rule = one_rule(RULE);
    let mut live = pod("old", Some("team"));
    live["metadata"]["uid"] = json!("old-uid");
    live["metadata"]["labels"] = json!({"kiln.dev/rule": "hello", "kiln.dev/child": "pods"});
    let observed = Observed {
        inputs: Inputs {
            primary: primary(),
            observed: Map::from_iter([("pods".to_string(), json!([live]))]),
            ..Inputs::default()
        },
        children: vec![crate::engine::decision::LiveChild {
            id: "pods".into(),
            gvk: Gvk {
                group: String::new(),
                version: "v1".into(),
                kind: "Pod".into(),
            },
            key: crate::engine::key::ObjKey {
                namespace: Some("team".into()),
                name: "old".into(),
            },
            uid: Some("old-uid".into()),
            deleting: false,
            orphan: false,
        }],
        hook: Some(Called::Answered(Answer {
            children: Vec::new(),
            resync_after: Some(std::time::Duration::from_secs(7)),
            ..Answer::default()
        })),
        ..Observed::default()
    };
    let this = crate::template::to_jinja(&observed.inputs.primary);
    let scope = |gvk: &Gvk| well_known_scope(gvk);
    let plan = plan::plan(&rule, &this, &observed, &Known::new(), &scope);
    assert!(plan.apply.is_empty());
    assert_eq!(plan.prune.len(), 1);
    assert_eq!(plan.prune[0].key.name, "old");
    assert_eq!(
        plan.next,
        plan::Next::After(std::time::Duration::from_secs(7))
    );
}

#[test]
fn a_hook_is_not_asked_about_what_kiln_cannot_see() {
    use super::super::observe::hook_request;
    use super::super::plan::Blind;
    let rule = one_rule(RULE);
    let complete = Observed {
        inputs: Inputs {
            primary: primary(),
            ..Inputs::default()
        },
        ..Observed::default()
    };
    let (endpoint, request) = hook_request(&rule, &complete).expect("asked");
    assert_eq!(endpoint.url, "http://127.0.0.1:9/sync");
    assert_eq!(request["finalizing"], json!(false));
    let blind = Observed {
        blind: vec![Blind::Unsynced("v1/Pod".into())],
        ..complete.clone()
    };
    assert!(hook_request(&rule, &blind).is_none(), "a cache not synced");
    let missing = Observed {
        missing: vec!["related.settings".into()],
        ..complete.clone()
    };
    assert!(
        hook_request(&rule, &missing).is_none(),
        "a required object missing"
    );
    // Going, without a finalize hook: nothing to ask.
    let mut going = complete;
    going.inputs.primary["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert!(hook_request(&rule, &going).is_none());
}
