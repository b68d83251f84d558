//! Own only what you created (issue 13, item 12): kiln deletes nothing it
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
