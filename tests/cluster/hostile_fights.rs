//! Controller fights are bounded: another controller that
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
    // At least 8 s, and on until kiln says it fights, however slow the machine.
    let fought = |said: &Option<serde_json::Value>| {
        said.is_some() && started.elapsed() >= Duration::from_secs(8)
    };
    while !fought(&said) && started.elapsed() < support::PATIENCE {
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
        "{answers} applies answering {i} rewrites: unbounded"
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

const MANY: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: many}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: item
      forEach: range(self.spec.count)
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-{{ item }}"}
        data: {value: "{{ self.spec.value }}"}
"#;

/// The children of rule `many` in the scene whose `value` is `value`.
async fn children_showing(scene: &Scene, value: &str) -> usize {
    let cms = scene.api("v1", "ConfigMap").await;
    let lp = kube::api::ListParams::default().labels("kiln.dev/rule=many");
    let list = cms.list(&lp).await.unwrap();
    list.items
        .iter()
        .filter(|c| c.data["data"]["value"] == value)
        .count()
}

/// The write budget counts fights, never creation: a primary with a
/// thousand children (the budget is 20 answers a minute) is created in
/// full, never paused as a fight with an "unknown field manager".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_budget_stops_ordinary_work_a_thousand_children() {
    let scene = Scene::new("budget-many").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {"value": "v", "count": 1000}}))
        .await;
    let scene = scene.running(&[rule_from_yaml(MANY)]).await;
    support::eventually("a thousand children", Duration::from_secs(240), || async {
        let w = scene.get("test.kiln.dev/v1", "Widget", "w").await.unwrap();
        let reconciled = condition(&w, "Reconciled");
        assert_ne!(reconciled["reason"], "Conflict", "{reconciled}");
        (children_showing(&scene, "v").await == 1000).then_some(())
    })
    .await;
    // Ready waits until the cache holds all thousand: slow on a loaded machine.
    support::eventually("w to be ready", Duration::from_secs(120), || async {
        let w = scene.get("test.kiln.dev/v1", "Widget", "w").await?;
        (condition(&w, "Ready")["status"] == "True").then_some(())
    })
    .await;
    scene.end().await;
}

/// The owner's own edits are no fight: a primary with 8 children edited
/// ten times in a minute (80 applies, no other writer) converges to the
/// last edit, never paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_budget_stops_ordinary_work_the_owners_edits() {
    let scene = Scene::new("budget-edits").await.with_widgets().await;
    let widget = |value: &str| {
        json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {"value": value, "count": 8}})
    };
    scene.apply(widget("v0")).await;
    let scene = scene.running(&[rule_from_yaml(MANY)]).await;
    for edit in 0..10 {
        let value = format!("v{edit}");
        scene.apply(widget(&value)).await;
        support::eventually(&format!("edit {edit}"), support::PATIENCE, || async {
            let w = scene.get("test.kiln.dev/v1", "Widget", "w").await.unwrap();
            let reconciled = condition(&w, "Reconciled");
            assert_ne!(reconciled["reason"], "Conflict", "{reconciled}");
            (children_showing(&scene, &value).await == 8).then_some(())
        })
        .await;
    }
    scene.ready("w").await;
    scene.end().await;
}

/// A child the API server refuses as Invalid (a ConfigMap value that is no
/// string), its primary edited again and again (each edit a reconcile, each
/// reconcile the same refused apply): no fight. Every refusal is the
/// object's `Invalid` condition with the API server's words, and none
/// spends the write budget, which would pause the primary as "another
/// controller keeps changing what the rule sets".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_refused_as_invalid_spends_no_write_budget() {
    let scene = Scene::new("fight-invalid").await.with_widgets().await;
    let widget = |edit: usize| {
        json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "annotations": {"edit": edit.to_string()}},
            "spec": {"value": {"nested": true}}})
    };
    scene.apply(widget(0)).await;
    let scene = scene.running(&[rule_from_yaml(RULE)]).await;
    let invalid = || async {
        let w = scene.get("test.kiln.dev/v1", "Widget", "w").await?;
        let c = condition(&w, "Reconciled").clone();
        (c["reason"] == "Invalid").then_some(c)
    };
    support::eventually("w refused as Invalid", Duration::from_secs(120), invalid).await;
    // More edits than the budget lets repeat within its window.
    for edit in 1..=25 {
        let before = counts::reconciles(scene.engine());
        scene.apply(widget(edit)).await;
        support::eventually(
            &format!("the reconcile of edit {edit}"),
            Duration::from_secs(120),
            || async { (counts::reconciles(scene.engine()) > before).then_some(()) },
        )
        .await;
    }
    // Every edit was answered: the last one's reconcile has ended.
    support::eventually(
        "the reconciles to end",
        Duration::from_secs(120),
        || async {
            (counts::total(scene.engine(), "controller_runtime_active_workers", &[]) == 0)
                .then_some(())
        },
    )
    .await;
    let w = scene.get("test.kiln.dev/v1", "Widget", "w").await.unwrap();
    let reconciled = condition(&w, "Reconciled");
    assert_eq!(reconciled["reason"], "Invalid", "{reconciled}");
    let message = reconciled["message"].as_str().unwrap();
    assert!(message.contains("ConfigMap"), "{message}");
    assert!(!message.contains("another controller"), "{message}");
    assert_eq!(
        counts::total(scene.engine(), "kiln_write_budget_exhausted_total", &[]),
        0
    );
    scene.end().await;
}
