//! Status written per the primary's schema: CRDs as kubebuilder
//! and Metacontroller publish them declare only their own status fields, and
//! server-side apply refuses a whole status holding one undeclared field.

use std::sync::Arc;
use std::time::Duration;

use kiln::engine::{Engine, Options, RuleState};
use serde_json::json;

use crate::support::scene::{CONVERGE, Scene, condition};
use crate::support::{self, WriteCounter, eventually, rule_from_yaml};

const PORTED: &str = "tests/fixtures/crds-ported";

fn nodepool(name: &str) -> (&'static str, &'static str, &str) {
    ("infra.ported.kiln.dev/v1", "NodePool", name)
}

/// An engine on the scene's namespace that starts `rule` without waiting
/// for it to run (it may be refused), with its writes counted.
async fn starting(scene: &Scene, rule: Arc<kiln::rules::Rule>) -> (Arc<Engine>, WriteCounter) {
    let (client, writes) = support::counting_client().await;
    let options = Options {
        namespaces: vec![scene.ns().to_string()],
        kind_retry: Duration::from_millis(200),
        ..Options::default()
    };
    let engine = Arc::new(Engine::new(client, options));
    engine.start(rule);
    (engine, writes)
}

const NODES: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: nodes}
spec:
  for: {apiVersion: infra.ported.kiln.dev/v1, kind: NodePool}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
        data: {count: "{{ self.spec.nodes | length | string }}"}
  status:
    fields:
      nodes: "{{ self.spec.nodes | sort }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubebuilder_crd_whose_status_has_only_its_own_fields_gets_them_written() {
    let scene = Scene::new("ported-kb").await.with_crds(PORTED).await;
    scene
        .apply(
            json!({"apiVersion": "infra.ported.kiln.dev/v1", "kind": "NodePool",
            "metadata": {"name": "pool"}, "spec": {"nodes": ["b", "a"]}}),
        )
        .await;
    let scene = scene.running(&[rule_from_yaml(NODES)]).await;
    let pool = scene
        .until("the rule's status field", nodepool("pool"), |p| {
            p["status"]["nodes"] == json!(["a", "b"])
        })
        .await;
    assert!(pool["status"].get("conditions").is_none(), "{pool}");
    assert!(pool["status"].get("observedGeneration").is_none(), "{pool}");
    assert_eq!(
        scene.writes_during_resync("nodes", 1).await,
        0,
        "steady state writes nothing"
    );
    scene.end().await;
}

const BLUE_GREEN: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: bluegreen}
spec:
  for: {apiVersion: ctl.ported.kiln.dev/v1, kind: BlueGreenDeployment}
  children:
    - id: active
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-{{ self.spec.color }}"}
        data: {replicas: "{{ self.spec.replicas | string }}"}
  status:
    fields:
      activeColor: "{{ self.spec.color }}"
      activeReplicas: "{{ self.spec.replicas }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metacontroller_crd_whose_status_has_only_its_own_fields_gets_them_written() {
    let scene = Scene::new("ported-mc").await.with_crds(PORTED).await;
    scene
        .apply(
            json!({"apiVersion": "ctl.ported.kiln.dev/v1", "kind": "BlueGreenDeployment",
            "metadata": {"name": "web"}, "spec": {"color": "blue", "replicas": 2}}),
        )
        .await;
    let scene = scene.running(&[rule_from_yaml(BLUE_GREEN)]).await;
    let at = ("ctl.ported.kiln.dev/v1", "BlueGreenDeployment", "web");
    scene
        .until("the rule's status fields", at, |b| {
            b["status"] == json!({"activeColor": "blue", "activeReplicas": 2})
        })
        .await;
    scene
        .apply(
            json!({"apiVersion": "ctl.ported.kiln.dev/v1", "kind": "BlueGreenDeployment",
            "metadata": {"name": "web"}, "spec": {"color": "green", "replicas": 3}}),
        )
        .await;
    scene
        .until("the status to follow the spec", at, |b| {
            b["status"] == json!({"activeColor": "green", "activeReplicas": 3})
        })
        .await;
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_status_field_the_schema_lacks_refuses_the_rule_by_name() {
    let scene = Scene::new("ported-refused").await.with_crds(PORTED).await;
    scene
        .apply(
            json!({"apiVersion": "infra.ported.kiln.dev/v1", "kind": "NodePool",
            "metadata": {"name": "pool"}, "spec": {"nodes": ["a"]}}),
        )
        .await;
    let rule = rule_from_yaml(&format!(
        "{}    conditions:\n      - {{type: Available, status: \"true\", reason: Up}}\n",
        NODES.replace(
            "      nodes:",
            "      url: \"http://{{ self.metadata.name }}\"\n      summary: {count: 1}\n      nodes:",
        )
    ));
    let (engine, writes) = starting(&scene, rule).await;
    let why = eventually("the rule to be refused", CONVERGE, || async {
        match engine.state("nodes") {
            Some(RuleState::Refused(why)) => Some(why),
            _ => None,
        }
    })
    .await;
    assert!(
        why.contains("`status.url`")
            && why.contains("`status.summary`")
            && why.contains("`status.conditions`")
            && !why.contains("`status.nodes`")
            && why.contains("nodepools.infra.ported.kiln.dev"),
        "{why}"
    );
    let metrics = engine.metrics().encode();
    assert!(
        metrics.contains("kiln_rule_refused{rule=\"nodes\"} 1"),
        "{metrics}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(writes.get(), 0, "a refused rule writes nothing");
    assert!(scene.get("v1", "ConfigMap", "pool").await.is_none());
    engine.shutdown().await;
    scene.end().await;
}

fn memcached(name: &str) -> (&'static str, &'static str, &str) {
    ("cache.ported.kiln.dev/v1alpha1", "Memcached", name)
}

const MEMCACHED: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: memcached}
spec:
  for: {apiVersion: cache.ported.kiln.dev/v1alpha1, kind: Memcached}
  children:
    - id: config
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
        data: {size: "{{ self.spec.size | string }}"}
"#;

const MEMCACHED_CONDITIONS: &str = r#"
  status:
    conditions:
      - type: Available
        status: children.config is defined
        reason: "{{ 'ConfigPresent' if children.config is defined else 'ConfigMissing' }}"
        message: "{{ self.spec.size }} instance(s) configured"
      - type: Degraded
        status: self.spec.size > 2
        reason: "{{ 'TooLarge' if self.spec.size > 2 else 'AsExpected' }}"
"#;

fn memcached_object(size: i64) -> serde_json::Value {
    json!({"apiVersion": "cache.ported.kiln.dev/v1alpha1", "kind": "Memcached",
        "metadata": {"name": "cache"}, "spec": {"size": size}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_declaring_only_conditions_gets_the_engines_conditions() {
    let scene = Scene::new("ported-conds").await.with_crds(PORTED).await;
    scene.apply(memcached_object(1)).await;
    let scene = scene.running(&[rule_from_yaml(MEMCACHED)]).await;
    let m = scene
        .until("the engine's conditions", memcached("cache"), |m| {
            condition(m, "Ready")["status"] == "True"
                && condition(m, "Reconciled")["status"] == "True"
        })
        .await;
    assert_eq!(condition(&m, "Waiting")["status"], "False", "{m}");
    assert!(m["status"].get("observedGeneration").is_none(), "{m}");
    assert_eq!(scene.writes_during_resync("memcached", 1).await, 0);
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_conditions_are_written_with_the_engines_and_move_only_on_a_change() {
    let scene = Scene::new("rule-conds").await.with_crds(PORTED).await;
    scene.apply(memcached_object(1)).await;
    let rule = rule_from_yaml(&format!("{MEMCACHED}{MEMCACHED_CONDITIONS}"));
    let scene = scene.running(&[rule]).await;
    let m = scene
        .until(
            "the rule's and the engine's conditions",
            memcached("cache"),
            |m| {
                condition(m, "Available")["status"] == "True"
                    && condition(m, "Ready")["status"] == "True"
            },
        )
        .await;
    let available = condition(&m, "Available").clone();
    assert_eq!(available["reason"], "ConfigPresent", "{m}");
    assert_eq!(available["message"], "1 instance(s) configured", "{m}");
    let degraded = condition(&m, "Degraded");
    assert_eq!(
        (&degraded["status"], &degraded["reason"]),
        (&json!("False"), &json!("AsExpected")),
        "{m}"
    );
    assert_eq!(scene.writes_during_resync("memcached", 1).await, 0);

    tokio::time::sleep(Duration::from_millis(1100)).await; // a new second for the new transition
    scene.apply(memcached_object(3)).await;
    let m = scene
        .until("Degraded to turn True", memcached("cache"), |m| {
            condition(m, "Degraded")["status"] == "True"
                && condition(m, "Available")["message"] == "3 instance(s) configured"
        })
        .await;
    assert_eq!(condition(&m, "Degraded")["reason"], "TooLarge");
    assert_eq!(
        condition(&m, "Available")["lastTransitionTime"],
        available["lastTransitionTime"],
        "Available stayed True: its transition time stays"
    );
    assert_ne!(
        condition(&m, "Degraded")["lastTransitionTime"],
        available["lastTransitionTime"],
        "Degraded flipped: its transition time moved"
    );
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_condition_the_rule_stops_declaring_leaves_the_object() {
    let scene = Scene::new("rule-conds-gone").await.with_crds(PORTED).await;
    scene.apply(memcached_object(1)).await;
    let rule = rule_from_yaml(&format!("{MEMCACHED}{MEMCACHED_CONDITIONS}"));
    let scene = scene.running(&[rule]).await;
    scene
        .until("both rule conditions", memcached("cache"), |m| {
            condition(m, "Available")["status"] == "True" && !condition(m, "Degraded").is_null()
        })
        .await;
    let without_degraded = MEMCACHED_CONDITIONS
        .split("      - type: Degraded")
        .next()
        .unwrap();
    scene
        .engine()
        .replace(rule_from_yaml(&format!("{MEMCACHED}{without_degraded}")))
        .await;
    let m = scene
        .until("Degraded to leave", memcached("cache"), |m| {
            condition(m, "Degraded").is_null()
        })
        .await;
    assert_eq!(condition(&m, "Available")["status"], "True", "{m}");
    assert_eq!(condition(&m, "Ready")["status"], "True", "{m}");
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_on_a_crd_without_conditions_is_still_a_warning_event() {
    let scene = Scene::new("ported-event").await.with_crds(PORTED).await;
    scene
        .apply(
            json!({"apiVersion": "infra.ported.kiln.dev/v1", "kind": "NodePool",
            "metadata": {"name": "pool"}, "spec": {}}),
        )
        .await;
    let scene = scene.running(&[rule_from_yaml(NODES)]).await;
    eventually("a TemplateError Event", CONVERGE, || async {
        let hits = support::events_about(&scene.client, scene.ns(), "pool", "TemplateError").await;
        (!hits.is_empty()).then_some(())
    })
    .await;
    let metrics = scene.engine().metrics().encode();
    assert!(
        metrics.contains("kiln_reconcile_failures_total{rule=\"nodes\",reason=\"TemplateError\"}"),
        "{metrics}"
    );
    let pool = scene
        .get("infra.ported.kiln.dev/v1", "NodePool", "pool")
        .await
        .unwrap();
    assert!(pool["status"].get("conditions").is_none(), "{pool}");
    scene.end().await;
}

/// A CRD of this test's own (it is edited), whose status declares `fields`.
fn gadget_crd(fields: &[&str]) -> serde_json::Value {
    let properties: serde_json::Map<String, serde_json::Value> = fields
        .iter()
        .map(|f| ((*f).to_string(), json!({"type": "string"})))
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.changing.kiln.dev"},
        "spec": {
            "group": "changing.kiln.dev", "scope": "Namespaced",
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "properties": properties},
                }}}}],
        },
    })
}

const GADGETS: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: gadgets}
spec:
  for: {apiVersion: changing.kiln.dev/v1, kind: Gadget}
  status:
    fields:
      color: "{{ self.spec.color }}"
      size: "{{ self.spec.size }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_edited_in_place_is_checked_again() {
    let scene = Scene::new("crd-edit").await;
    support::apply(&scene.client, gadget_crd(&["color"]), None).await;
    support::wait_for_kind(
        &scene.client,
        &kube::core::GroupVersionKind::gvk("changing.kiln.dev", "v1", "Gadget"),
        CONVERGE,
    )
    .await;
    scene
        .apply(
            json!({"apiVersion": "changing.kiln.dev/v1", "kind": "Gadget",
            "metadata": {"name": "g"}, "spec": {"color": "red", "size": "L"}}),
        )
        .await;
    let (engine, _writes) = starting(&scene, rule_from_yaml(GADGETS)).await;
    let state = |want: fn(&RuleState) -> bool| {
        let engine = engine.clone();
        async move {
            eventually("the rule's state", CONVERGE, || async {
                engine.state("gadgets").filter(want)
            })
            .await
        }
    };
    let refused = state(|s| matches!(s, RuleState::Refused(_))).await;
    assert!(
        format!("{refused:?}").contains("`status.size`"),
        "{refused:?}"
    );

    // The CRD gains the field: the rule starts and writes it.
    support::apply(&scene.client, gadget_crd(&["color", "size"]), None).await;
    scene
        .until("the status", ("changing.kiln.dev/v1", "Gadget", "g"), |g| {
            g["status"] == json!({"color": "red", "size": "L"})
        })
        .await;

    // The CRD loses it again while the rule runs: the rule is refused again.
    support::apply(&scene.client, gadget_crd(&["color"]), None).await;
    state(|s| matches!(s, RuleState::Refused(_))).await;
    engine.shutdown().await;
    scene.end().await;
}

/// Another controller adds a condition of its own (the CRD's conditions are
/// a list map keyed by type, as controller-gen publishes them): kiln's are
/// compared by type, so it costs no writes. Before, the lists' lengths
/// differed and every resync wrote the status again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_condition_another_controller_adds_costs_no_writes() {
    let scene = Scene::new("other-cond").await.with_crds(PORTED).await;
    scene.apply(memcached_object(1)).await;
    let scene = scene.running(&[rule_from_yaml(MEMCACHED)]).await;
    scene
        .until("ready", memcached("cache"), |m| {
            condition(m, "Ready")["status"] == "True"
        })
        .await;
    let api = scene
        .api("cache.ported.kiln.dev/v1alpha1", "Memcached")
        .await;
    let theirs = json!({"apiVersion": "cache.ported.kiln.dev/v1alpha1", "kind": "Memcached",
        "metadata": {"name": "cache"},
        "status": {"conditions": [{"type": "Scaled", "status": "True", "reason": "Done",
                   "message": "scaled", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    api.patch_status(
        "cache",
        &kube::api::PatchParams::apply("other-controller"),
        &kube::api::Patch::Apply(&theirs),
    )
    .await
    .unwrap();
    scene
        .until("both controllers' conditions", memcached("cache"), |m| {
            condition(m, "Scaled")["status"] == "True" && condition(m, "Ready")["status"] == "True"
        })
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(scene.writes_during_resync("memcached", 1).await, 0);
    let m = scene
        .get("cache.ported.kiln.dev/v1alpha1", "Memcached", "cache")
        .await
        .unwrap();
    assert_eq!(condition(&m, "Scaled")["message"], "scaled", "theirs stays");
    scene.end().await;
}

/// A CRD of this test's own (it is upgraded), `Gizmo`, whose status
/// declares `fields`.
fn gizmo_crd(fields: &[&str]) -> serde_json::Value {
    let mut crd = gadget_crd(fields);
    crd["metadata"]["name"] = json!("gizmos.refused.kiln.dev");
    crd["spec"]["group"] = json!("refused.kiln.dev");
    crd["spec"]["names"] = json!({"kind": "Gizmo", "plural": "gizmos", "singular": "gizmo"});
    crd
}

const GIZMOS: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: gizmos}
spec:
  for: {apiVersion: refused.kiln.dev/v1, kind: Gizmo}
  deletion: {ordered: true}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
        data: {color: "{{ self.spec.color }}"}
  status:
    fields:
      color: "{{ self.spec.color }}"
"#;

/// A CRD upgraded so it no longer declares the rule's status field refuses
/// the rule, but a primary deleted meanwhile still goes: its children are
/// deleted and the rule's finalizer let go (deleting needs no status).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_rule_keeps_its_finalizer() {
    let scene = Scene::new("refused-teardown").await;
    support::apply(&scene.client, gizmo_crd(&["color"]), None).await;
    support::wait_for_kind(
        &scene.client,
        &kube::core::GroupVersionKind::gvk("refused.kiln.dev", "v1", "Gizmo"),
        CONVERGE,
    )
    .await;
    let gizmo = ("refused.kiln.dev/v1", "Gizmo", "g");
    scene
        .apply(json!({"apiVersion": "refused.kiln.dev/v1", "kind": "Gizmo",
            "metadata": {"name": "g"}, "spec": {"color": "red"}}))
        .await;
    let (engine, _writes) = starting(&scene, rule_from_yaml(GIZMOS)).await;
    scene
        .until("the child", ("v1", "ConfigMap", "g"), |c| {
            c["data"]["color"] == "red"
        })
        .await;
    scene
        .until("the finalizer", gizmo, |g| {
            g["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty())
        })
        .await;

    // The CRD is upgraded without the status field: the rule is refused.
    support::apply(&scene.client, gizmo_crd(&["size"]), None).await;
    eventually("the rule to be refused", CONVERGE, || async {
        matches!(engine.state("gizmos"), Some(RuleState::Refused(_))).then_some(())
    })
    .await;

    // The primary is deleted: its child goes, then the primary itself.
    let api = scene.api("refused.kiln.dev/v1", "Gizmo").await;
    api.delete("g", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    eventually("the primary gone", CONVERGE, || async {
        scene
            .get("refused.kiln.dev/v1", "Gizmo", "g")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(scene.get("v1", "ConfigMap", "g").await.is_none());
    assert!(matches!(
        engine.state("gizmos"),
        Some(RuleState::Refused(_))
    ));
    engine.shutdown().await;
    scene.end().await;
}
