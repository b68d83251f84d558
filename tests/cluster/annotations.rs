//! Per-object control by annotation on the primary:
//! `kiln.dev/reconcile: suspended` and `kiln.dev/reconcile-requested-at`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::scene::{Scene, condition, configmap, widget_at};
use crate::support::{counts, edit, eventually, rule_from_yaml};

const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: annotated}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: config
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-config"}
        data: {team: "{{ self.spec.team }}"}
"#;

fn widget(name: &str, team: &str) -> Value {
    json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
           "metadata": {"name": name}, "spec": {"team": team}})
}

fn rv(obj: &Value) -> String {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A user's merge patch of Widget `name`; returns it as stored.
async fn edit_widget(scene: &Scene, name: &str, patch: Value) -> Value {
    let kind = ("test.kiln.dev/v1", "Widget");
    edit(&scene.client, kind, Some(scene.ns()), name, patch).await
}

async fn annotate(scene: &Scene, name: &str, key: &str, value: Value) -> Value {
    edit_widget(
        scene,
        name,
        json!({"metadata": {"annotations": {key: value}}}),
    )
    .await
}

async fn team(scene: &Scene, name: &str, team: &str) -> Value {
    edit_widget(scene, name, json!({"spec": {"team": team}})).await
}

/// A namespace of its own with the rule running.
async fn scene(prefix: &str) -> Scene {
    let scene = Scene::new(prefix).await.with_widgets().await;
    scene.running(&[rule_from_yaml(RULE)]).await
}

/// Waits until Widget `name` is `Ready=True` at its current generation.
async fn ready_now(scene: &Scene, name: &str) {
    let what = format!("{name} to be ready at its generation");
    scene
        .until(&what, widget_at(name), |w| {
            condition(w, "Ready")["observedGeneration"] == w["metadata"]["generation"]
                && condition(w, "Ready")["status"] == "True"
        })
        .await;
}

#[tokio::test]
async fn a_suspended_primary_gets_no_write_while_its_neighbours_converge_and_catches_up_on_resume()
{
    let scene = scene("suspend").await;
    scene.apply(widget("a", "red")).await;
    scene.apply(widget("b", "red")).await;
    scene.ready("a").await;
    scene.ready("b").await;

    annotate(&scene, "a", "kiln.dev/reconcile", json!("suspended")).await;
    let child_before = scene.get("v1", "ConfigMap", "a-config").await.unwrap();
    let a_after_edit = team(&scene, "a", "blue").await;
    team(&scene, "b", "blue").await;
    scene
        .until("b's child to follow", configmap("b-config"), |c| {
            c["data"]["team"] == "blue"
        })
        .await;
    ready_now(&scene, "b").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let a_now = scene.get("test.kiln.dev/v1", "Widget", "a").await.unwrap();
    let child_now = scene.get("v1", "ConfigMap", "a-config").await.unwrap();
    assert_eq!(
        rv(&a_now),
        rv(&a_after_edit),
        "kiln wrote the suspended primary"
    );
    assert_eq!(
        rv(&child_now),
        rv(&child_before),
        "kiln wrote a suspended child"
    );
    assert_eq!(child_now["data"]["team"], "red");

    annotate(&scene, "a", "kiln.dev/reconcile", Value::Null).await;
    scene
        .until("a's child to catch up", configmap("a-config"), |c| {
            c["data"]["team"] == "blue"
        })
        .await;
    ready_now(&scene, "a").await;
    scene.end().await;
}

#[tokio::test]
async fn a_new_requested_at_value_reconciles_the_primary_at_once() {
    let scene = scene("requested").await;
    scene.apply(widget("a", "red")).await;
    scene.ready("a").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for value in ["1", "2"] {
        let before = counts::reconciles(scene.engine());
        annotate(&scene, "a", "kiln.dev/reconcile-requested-at", json!(value)).await;
        eventually(
            "a reconcile on the new value",
            crate::support::PATIENCE,
            || async { (counts::reconciles(scene.engine()) > before).then_some(()) },
        )
        .await;
    }
    scene.end().await;
}
