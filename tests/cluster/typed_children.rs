//! Typed children: a rendered child is shaped to its kind's schema before
//! it is applied. A value that takes its field's type without loss is
//! applied in that type; one that cannot is a condition and an Event on its
//! primary, and the other primaries of the rule still converge.

use serde_json::{Value, json};

use crate::support::scene::{Scene, condition, configmap, widget_at};
use crate::support::{self, eventually, rule_from_yaml};

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
           "metadata": {"name": name}, "spec": spec})
}

/// The mistake three authors made: an integer into a ConfigMap's data.
const REPLICAS_IN_DATA: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: replicas-in-data}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: config
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-config"}
        data: {replicas: "{{ self.spec.replicas }}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_integer_rendered_into_a_configmap_value_is_applied_as_its_text() {
    let scene = Scene::new("typed-data").await.with_widgets().await;
    let scene = scene.running(&[rule_from_yaml(REPLICAS_IN_DATA)]).await;
    scene.apply(widget("w", json!({"replicas": 2}))).await;
    scene.ready("w").await;
    let config = scene
        .until("the ConfigMap", configmap("w-config"), |_| true)
        .await;
    assert_eq!(config["data"]["replicas"], "2");
    scene.end().await;
}

/// A Deployment whose replicas come from the Widget's `size`.
const SIZED: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: sized}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: app
      template:
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: "{{ self.metadata.name }}"}
        spec:
          replicas: "{{ self.spec.size }}"
          selector: {matchLabels: {app: "{{ self.metadata.name }}"}}
          template:
            metadata: {labels: {app: "{{ self.metadata.name }}"}}
            spec:
              containers: [{name: app, image: "registry.invalid/app:1"}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_cannot_take_its_kinds_types_is_a_condition_and_an_event_and_the_others_converge()
 {
    let scene = Scene::new("typed-bad").await.with_widgets().await;
    let scene = scene.running(&[rule_from_yaml(SIZED)]).await;
    scene.apply(widget("bad", json!({"size": "large"}))).await;
    scene.apply(widget("good", json!({"size": "3"}))).await;
    let good = scene
        .until(
            "good's Deployment",
            ("apps/v1", "Deployment", "good"),
            |_| true,
        )
        .await;
    assert_eq!(good["spec"]["replicas"], 3, "\"3\" is applied as 3");
    let bad = scene
        .until("bad to be refused", widget_at("bad"), |w| {
            condition(w, "Ready")["reason"] == "Invalid"
        })
        .await;
    let message = condition(&bad, "Ready")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("spec.replicas: expected an integer, got the string \"large\""),
        "{message}"
    );
    assert!(scene.get("apps/v1", "Deployment", "bad").await.is_none());
    eventually("an Event on bad", crate::support::PATIENCE, || async {
        let events = support::events_about(&scene.client, scene.ns(), "bad", "Invalid").await;
        (!events.is_empty()).then_some(())
    })
    .await;
    scene.end().await;
}
