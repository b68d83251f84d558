//! Never act on missing information (issue 13, item 10): a cache kiln may
//! not fill (RBAC) or has not filled yet is not "absent", so it never turns
//! a `when` false or prunes a child; the primary says why it waits.

use std::time::Duration;

use serde_json::json;

use crate::support::rule_from_yaml;
use crate::support::scene::{Scene, configmap};

const GATED: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: gated}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  watches:
    - name: gate
      apiVersion: v1
      kind: Secret
      ref: {name: gate}
  children:
    - id: opened
      when: related.gate is defined
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-opened"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_kiln_may_not_list_never_prunes_a_child() {
    let scene = Scene::new("blind").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "gate"}, "stringData": {"k": "v"}}))
        .await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}))
        .await;
    let scene = scene.running(&[rule_from_yaml(GATED)]).await;
    scene
        .until("the gated child", configmap("w-opened"), |_| true)
        .await;
    scene.engine().shutdown().await;

    // kiln restarts with a token that may do everything but read Secrets.
    let rules = json!([
        {"apiGroups": ["test.kiln.dev"], "resources": ["widgets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["test.kiln.dev"], "resources": ["widgets/status"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
    ]);
    let blind =
        crate::support::service_account_client(&scene.client, scene.ns(), "blind-kiln", rules)
            .await;
    let engine = kiln::engine::Engine::new(
        blind,
        kiln::engine::Options {
            namespaces: vec![scene.ns().to_string()],
            kind_retry: Duration::from_millis(200),
            ..kiln::engine::Options::default()
        },
    );
    engine.start(rule_from_yaml(GATED));
    crate::support::eventually(
        "the rule to run",
        crate::support::scene::CONVERGE,
        || async {
            (engine.state("gated") == Some(kiln::engine::RuleState::Running)).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        scene.get("v1", "ConfigMap", "w-opened").await.is_some(),
        "the child was pruned on a Secret cache kiln could not fill"
    );
    let message = scene.refused("w", "Forbidden").await;
    assert!(
        message.contains("may not list and watch Secret"),
        "{message}"
    );
    engine.shutdown().await;
    scene.end().await;
}
