//! Own only what you created: kiln deletes nothing it
//! did not make, whatever labels the object carries.

use serde_json::json;

use crate::support::rule_from_yaml;
use crate::support::scene::{Scene, configmap};

const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: app}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_a_removed_rule_never_deletes_a_look_alike_it_did_not_create() {
    let scene = Scene::new("own-prune").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}))
        .await;
    // A hand-made ConfigMap that carries kiln's labels but no owner.
    scene
        .apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "hand-made", "labels": {"kiln.dev/rule": "app", "app.kubernetes.io/managed-by": "kiln", "kiln.dev/child": "main"}},
            "data": {"mine": "yes"}}))
        .await;
    let scene = scene.running(&[rule_from_yaml(RULE)]).await;
    scene
        .until("the rule's child", configmap("w"), |_| true)
        .await;

    scene.engine().remove("app", true).await;
    crate::support::eventually(
        "the rule's own child pruned",
        crate::support::scene::CONVERGE,
        || async {
            scene
                .get("v1", "ConfigMap", "w")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    let kept = scene.get("v1", "ConfigMap", "hand-made").await;
    assert!(kept.is_some(), "kiln deleted an object it did not create");
    scene.end().await;
}

/// A replica that may not write (a standby, or a leader past its renew
/// deadline: its fence says no) deletes nothing when a rule is removed
/// with pruning on; the leader does that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_a_removed_rule_deletes_nothing_without_the_lease() {
    let scene = Scene::new("own-fenced").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}))
        .await;
    let scene = scene.running(&[rule_from_yaml(RULE)]).await;
    scene
        .until("the rule's child", configmap("w"), |_| true)
        .await;
    scene.engine().set_fence(std::sync::Arc::new(|| false));
    scene.engine().remove("app", true).await;
    // The removal returns once it has deleted what it would delete.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(
        scene.get("v1", "ConfigMap", "w").await.is_some(),
        "a replica without the lease deleted a child of the removed rule"
    );
    scene.end().await;
}

const NAMED: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: named}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: copy
      when: self.spec.on
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.spec.child }}"}
        data: {from: "{{ self.metadata.name }}"}
  requeue: {waiting: 1s}
"#;

fn named(name: &str, child: &str, on: bool) -> serde_json::Value {
    json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"child": child, "on": on}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_named_like_a_users_object_never_takes_it_over_or_deletes_it() {
    let scene = Scene::new("own-collide").await.with_widgets().await;
    let users = scene
        .apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "regcred", "labels": {"team": "a"}}, "data": {"token": "users"}}))
        .await;
    scene.apply(named("w", "regcred", true)).await;
    let scene = scene.running(&[rule_from_yaml(NAMED)]).await;
    let message = scene.refused("w", "AlreadyExists").await;
    assert!(
        message.contains("ConfigMap") && message.contains("regcred"),
        "{message}"
    );
    crate::support::eventually(
        "an AlreadyExists Event",
        crate::support::scene::CONVERGE,
        || async {
            let hits =
                crate::support::events_about(&scene.client, scene.ns(), "w", "AlreadyExists").await;
            (!hits.is_empty()).then_some(())
        },
    )
    .await;
    let untouched = |o: &serde_json::Value| {
        assert_eq!(
            o["metadata"]["labels"], users["metadata"]["labels"],
            "labels"
        );
        assert!(
            o["metadata"].get("ownerReferences").is_none(),
            "owner references"
        );
        assert_eq!(o["data"], json!({"token": "users"}), "content");
        assert_eq!(
            o["metadata"]["resourceVersion"],
            users["metadata"]["resourceVersion"]
        );
    };
    untouched(&scene.get("v1", "ConfigMap", "regcred").await.unwrap());
    // The rule stops rendering it: the user's object is not kiln's to delete.
    scene.apply(named("w", "regcred", false)).await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    untouched(&scene.get("v1", "ConfigMap", "regcred").await.unwrap());
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_primaries_rendering_one_child_the_first_keeps_it() {
    let scene = Scene::new("own-two").await.with_widgets().await;
    scene.apply(named("a", "shared", true)).await;
    let scene = scene.running(&[rule_from_yaml(NAMED)]).await;
    scene
        .until("a's child", configmap("shared"), |c| {
            c["data"]["from"] == "a"
        })
        .await;
    scene.apply(named("b", "shared", true)).await;
    let message = scene.refused("b", "AlreadyExists").await;
    assert!(message.contains("controlled by Widget a"), "{message}");
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let child = scene.get("v1", "ConfigMap", "shared").await.unwrap();
    assert_eq!(
        child["data"]["from"], "a",
        "ownership does not move back and forth"
    );
    assert_eq!(child["metadata"]["ownerReferences"][0]["name"], "a");
    // a lets go of it: a's prune is a's to make, and b, which still renders
    // it, creates it again.
    scene.apply(named("a", "shared", false)).await;
    scene
        .until("b's child", configmap("shared"), |c| {
            c["data"]["from"] == "b" && c["metadata"]["ownerReferences"][0]["name"] == "b"
        })
        .await;
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_adopt_an_existing_object_is_taken_over_and_managed() {
    let scene = Scene::new("own-adopt").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "legacy"}, "data": {"from": "hand"}}))
        .await;
    scene.apply(named("w", "legacy", true)).await;
    let adopting = NAMED.replace("    - id: copy\n", "    - id: copy\n      adopt: true\n");
    let scene = scene.running(&[rule_from_yaml(&adopting)]).await;
    let adopted = scene
        .until("the object adopted", configmap("legacy"), |c| {
            c["data"]["from"] == "w"
        })
        .await;
    assert_eq!(adopted["metadata"]["labels"]["kiln.dev/rule"], "named");
    assert_eq!(adopted["metadata"]["ownerReferences"][0]["name"], "w");
    // Managed from now on: when the rule stops rendering it, it goes.
    scene.apply(named("w", "legacy", false)).await;
    crate::support::eventually(
        "the adopted object pruned",
        crate::support::scene::CONVERGE,
        || async {
            scene
                .get("v1", "ConfigMap", "legacy")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    scene.end().await;
}
