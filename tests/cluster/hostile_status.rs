//! A status too large fails visibly: a huge spec value
//! copied to status is refused by the server; the primary shows why (with
//! the smaller status it can take) and gets an Event, and it is not retried
//! in a hot loop.

use std::time::Duration;

use serde_json::json;

use crate::support::counts;
use crate::support::scene::{CONVERGE, Scene, condition, widget_at};
use crate::support::{self, eventually, rule_from_yaml};

const COPY: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: copy}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
  status:
    fields:
      copy: "{{ self.spec.big }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_too_large_to_store_is_a_visible_failure() {
    let scene = Scene::new("big-status").await.with_widgets().await;
    let big = "x".repeat(900 * 1024);
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"big": big}}))
        .await;
    let scene = scene.running(&[rule_from_yaml(COPY)]).await;
    let w = scene
        .until("the refusal on the primary", widget_at("w"), |w| {
            condition(w, "Reconciled")["status"] == "False"
        })
        .await;
    let reconciled = condition(&w, "Reconciled");
    assert_eq!(reconciled["reason"], "Invalid", "{reconciled}");
    let message = reconciled["message"].as_str().unwrap();
    assert!(
        message.contains("writing status") && message.contains("too large"),
        "{message}"
    );
    assert!(message.len() < 2000, "the refused value is not echoed");
    assert!(w["status"].get("copy").is_none());
    eventually("a Warning Event", CONVERGE, || async {
        let hits = support::events_about(&scene.client, scene.ns(), "w", "Invalid").await;
        (!hits.is_empty()).then_some(())
    })
    .await;
    // No hot loop: the echoes of kiln's own failure status may wake the
    // primary once or twice more, then nothing until something changes.
    let before = counts::reconciles(scene.engine());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = counts::reconciles(scene.engine());
    assert!(
        settled - before <= 2,
        "{} reconciles in 2 s",
        settled - before
    );
    // However late the echoes come on a busy machine: once still, it stays still.
    support::settled("the echoes", || counts::reconciles(scene.engine())).await;
    let settled = counts::reconciles(scene.engine());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = counts::reconciles(scene.engine());
    assert_eq!(
        after,
        settled,
        "retried in a loop: {} more reconciles",
        after - settled
    );
    scene.end().await;
}
