//! Never act on missing information: a cache kiln may
//! not fill (RBAC) or has not filled yet is not "absent", so it never turns
//! a `when` false or prunes a child; the primary says why it waits.

use std::time::Duration;

use serde_json::json;

use kiln::engine::{Engine, Options, RuleState};

use crate::support::scene::{CONVERGE, Scene, configmap};
use crate::support::{self, WriteCounter, eventually, rule_from_yaml};

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
    with_gate_and_widget(&scene).await;
    let scene = scene.running(&[rule_from_yaml(GATED)]).await;
    scene
        .until("the gated child", configmap("w-opened"), |_| true)
        .await;
    scene.engine().shutdown().await;

    // kiln restarts with a token that may do everything but read Secrets.
    let (engine, _) = blind_engine(&scene).await;
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

/// An engine running the gated rule with a token that may do everything
/// the rule needs but list and watch Secrets, and the count of requests it
/// has sent for Secrets (lists and watches).
async fn blind_engine(scene: &Scene) -> (Engine, WriteCounter) {
    let rules = json!([
        {"apiGroups": ["test.kiln.dev"], "resources": ["widgets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["test.kiln.dev"], "resources": ["widgets/status"], "verbs": ["patch", "update"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "resourceNames": ["widgets.test.kiln.dev"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
    ]);
    let token =
        support::service_account_token(&scene.client, scene.ns(), "blind-kiln", rules).await;
    let kubeconfig = support::token_kubeconfig(support::kubeconfig_yaml(), &token);
    let (client, tries) = support::client_counting(&kubeconfig, |req| {
        req.method() == http::Method::GET && req.uri().path().ends_with("/secrets")
    })
    .await;
    let engine = Engine::new(
        client,
        Options {
            namespaces: vec![scene.ns().to_string()],
            kind_retry: Duration::from_millis(200),
            ..Options::default()
        },
    );
    engine.start(rule_from_yaml(GATED));
    eventually("the rule to run", CONVERGE, || async {
        (engine.state("gated") == Some(RuleState::Running)).then_some(())
    })
    .await;
    (engine, tries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_may_not_list_backs_off_and_makes_kiln_unready() {
    let scene = Scene::new("blind-list").await.with_widgets().await;
    with_gate_and_widget(&scene).await;
    let (engine, tries) = blind_engine(&scene).await;
    let message = scene.refused("w", "Forbidden").await;
    assert!(
        message.contains("may not list and watch Secret"),
        "{message}"
    );
    // Not ready, and saying which watch fails and why.
    let why = eventually("kiln to turn unready", CONVERGE, || async {
        engine.readiness().err()
    })
    .await;
    assert!(
        why.contains("watch of v1/Secret") && why.contains("forbidden"),
        "{why}"
    );
    // The refused list is retried with a backoff that grows: at most five
    // tries in 16 s (1 + 2 + 4 + 8 s apart). It used to be every ~1.2 s.
    let before = tries.get();
    tokio::time::sleep(Duration::from_secs(16)).await;
    let during = tries.get() - before;
    assert!(
        during <= 5,
        "{during} list tries in 16 s: the backoff does not grow"
    );
    engine.shutdown().await;
    scene.end().await;
}

/// The Secret `gate` and the Widget `w`.
async fn with_gate_and_widget(scene: &Scene) {
    scene
        .apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "gate"}, "stringData": {"k": "v"}}))
        .await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}))
        .await;
}
