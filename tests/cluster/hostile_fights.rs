//! Controller fights are bounded (issue 13, item 8): another controller that
//! keeps rewriting a field kiln sets gets a bounded number of answers, the
//! primary says who it fights with, and kiln's writes resume after a
//! cool-down.

use std::time::{Duration, Instant};

use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::json;

use crate::support::counts;
use crate::support::scene::{Scene, condition, configmap};
use crate::support::{self, rule_from_yaml};

const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: fought}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
        data: {value: "{{ self.spec.value }}"}
  requeue:
    onError: {initial: 1s, max: 4s}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_controller_rewriting_a_field_gets_a_bounded_number_of_answers() {
    let scene = Scene::new("fight").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"value": "ours"}}))
        .await;
    let scene = scene.running(&[rule_from_yaml(RULE)]).await;
    scene
        .until("the child", configmap("w"), |c| {
            c["data"]["value"] == "ours"
        })
        .await;

    // The other controller rewrites the value every 100 ms for 8 s.
    let cms = support::dynamic_api(
        &scene.client,
        &json!("v1"),
        &json!("ConfigMap"),
        Some(scene.ns()),
    )
    .await;
    let before = counts::applies(scene.engine());
    let started = Instant::now();
    let mut i = 0;
    let mut said = None;
    while started.elapsed() < Duration::from_secs(8) {
        i += 1;
        if said.is_none() && i % 5 == 0 {
            let w = scene.get("test.kiln.dev/v1", "Widget", "w").await.unwrap();
            let reconciled = condition(&w, "Reconciled");
            if reconciled["reason"] == "Conflict" {
                said = Some(reconciled.clone());
            }
        }
        let theirs: DynamicObject = serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}, "data": {"value": format!("theirs-{i}")}}),
        )
        .unwrap();
        cms.patch(
            "w",
            &PatchParams::apply("fighter").force(),
            &Patch::Apply(&theirs),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answers = counts::applies(scene.engine()) - before;
    assert!(
        answers <= 2 * 20 + 4,
        "{answers} applies answering {i} rewrites in 8 s: unbounded"
    );
    let reconciled = said.expect("the primary never said it was in a fight");
    assert!(
        reconciled["message"].as_str().unwrap().contains("fighter"),
        "{reconciled}"
    );
    // The fight ends: after the cool-down kiln restores its value.
    scene
        .until("the value restored", configmap("w"), |c| {
            c["data"]["value"] == "ours"
        })
        .await;
    scene.ready("w").await;
    scene.end().await;
}
