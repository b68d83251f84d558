//! Readiness by kind: a Deployment child without `readyWhen` keeps its
//! primary `Ready=False` until its rollout is complete. The test control
//! plane runs no deployment controller (and has no node), so the test plays
//! it, writing the Deployment's status as that controller would.

use serde_json::json;

use crate::support::counts::total;
use crate::support::rule_from_yaml;
use crate::support::scene::{Scene, condition, widget_at};

const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: rollout}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: app
      template:
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: "{{ self.metadata.name }}"}
        spec:
          replicas: "{{ self.spec.replicas }}"
          selector: {matchLabels: {app: "{{ self.metadata.name }}"}}
          template:
            metadata: {labels: {app: "{{ self.metadata.name }}"}}
            spec: {containers: [{name: app, image: "registry.invalid/app:1"}]}
    - id: note
      readyWhen: exists
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-note"}
"#;

fn widget(replicas: i64) -> serde_json::Value {
    json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"replicas": replicas}})
}

/// Writes the Deployment's status as the deployment controller would.
async fn rollout(scene: &Scene, status: serde_json::Value) {
    let d = scene.get("apps/v1", "Deployment", "w").await.unwrap();
    let mut status = status;
    status["observedGeneration"] = d["metadata"]["generation"].clone();
    let body = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "w"}, "status": status});
    scene
        .api("apps/v1", "Deployment")
        .await
        .patch_status(
            "w",
            &kube::api::PatchParams::apply("test-deployment-controller").force(),
            &kube::api::Patch::Apply(&body),
        )
        .await
        .unwrap();
}

/// Waits until Widget `w` is `Ready=False` naming the Deployment only.
async fn not_ready(scene: &Scene, what: &str) {
    let w = scene
        .until(what, widget_at("w"), |w| {
            condition(w, "Ready")["status"] == "False"
                && condition(w, "Ready")["message"] == "not ready: app/w"
        })
        .await;
    assert_eq!(condition(&w, "Ready")["reason"], "ChildrenNotReady", "{w}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_child_is_ready_only_once_its_rollout_is_complete() {
    let scene = Scene::new("readiness").await.with_widgets().await;
    scene.apply(widget(2)).await;
    let scene = scene.running(&[rule_from_yaml(RULE)]).await;
    // Created, no status yet; the ConfigMap (`readyWhen: exists`) is ready.
    not_ready(&scene, "Ready=False before any rollout").await;
    // The gauge counts it not ready, by rule and status only.
    let primaries = |ready: &str| {
        total(
            scene.engine(),
            "kiln_primaries",
            &[("rule", "rollout"), ("ready", ready)],
        )
    };
    assert_eq!((primaries("False"), primaries("True")), (1, 0));
    // Updated, one replica of two available.
    rollout(
        &scene,
        json!({"replicas": 2, "updatedReplicas": 2, "readyReplicas": 1, "availableReplicas": 1}),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    not_ready(&scene, "Ready=False with one of two available").await;
    // The rollout completes.
    rollout(
        &scene,
        json!({"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2}),
    )
    .await;
    scene.ready("w").await;
    assert_eq!((primaries("False"), primaries("True")), (1 - 1, 1));
    // A new generation the controller has not observed yet: not ready again.
    scene.apply(widget(3)).await;
    not_ready(&scene, "Ready=False until the new generation is observed").await;
    let d = scene.get("apps/v1", "Deployment", "w").await.unwrap();
    assert_eq!(d["spec"]["replicas"], 3);
    scene.end().await;
}
