//! Admission denials are retried: a policy that denies a
//! child is `Denied`, retried with backoff, and the child converges once the
//! policy is lifted — with no change to the primary.

use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use std::time::Duration;

use crate::support::scene::{CONVERGE, Scene, configmap};
use crate::support::{self, eventually, rule_from_yaml};

const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: admitted}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
        data: {v: "{{ self.spec.v }}"}
  requeue:
    onError: {initial: 200ms, max: 2s}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_denied_by_an_admission_policy_converges_once_the_policy_is_lifted() {
    let scene = Scene::new("admission").await.with_widgets().await;
    let name = format!("deny-blocked-{}", scene.ns());
    deny(
        &scene,
        &name,
        "configmaps",
        "!has(object.data) || !('v' in object.data) || object.data.v != 'blocked'",
        "v may not be blocked",
    )
    .await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"v": "blocked"}}))
        .await;
    let scene = scene.running(&[rule_from_yaml(RULE)]).await;
    let message = scene.refused("w", "Denied").await;
    assert!(message.contains("v may not be blocked"), "{message}");
    let events = eventually("a Warning Event", CONVERGE, || async {
        let hits = support::events_about(&scene.client, scene.ns(), "w", "Denied").await;
        (!hits.is_empty()).then_some(hits)
    })
    .await;
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));

    // The policy is lifted; nothing about the primary changes.
    lift(&scene, &name).await;
    scene
        .until("the child, once allowed", configmap("w"), |c| {
            c["data"]["v"] == "blocked"
        })
        .await;
    scene.ready("w").await;
    scene.end().await;
}

/// Denies CREATE and UPDATE of `resource` (`configmaps`, or
/// `widgets/status` once Widget `w` exists) in the scene's namespace unless
/// `expression` holds; returns once the API server enforces it.
async fn deny(scene: &Scene, name: &str, resource: &str, expression: &str, message: &str) {
    let group = if resource.starts_with("widgets") {
        "test.kiln.dev"
    } else {
        ""
    };
    support::apply(
        &scene.client,
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": [group], "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"], "resources": [resource]}]},
                "validations": [{"expression": expression, "message": message}]
            }
        }),
        None,
    )
    .await;
    support::apply(&scene.client, json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": scene.ns()}}}}
    }), None).await;
    // The policy takes effect once the API server has loaded it: a dry run
    // of what it forbids is refused.
    if resource == "widgets/status" {
        let widgets = scene.api("test.kiln.dev/v1", "Widget").await;
        eventually("the status policy to deny", CONVERGE, || async {
            let pp = kube::api::PatchParams {
                dry_run: true,
                ..kube::api::PatchParams::default()
            };
            let patch = kube::api::Patch::Merge(json!({"status": {"probe": "x"}}));
            widgets
                .patch_status("w", &pp, &patch)
                .await
                .is_err()
                .then_some(())
        })
        .await;
    }
    if resource == "configmaps" {
        let probe: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(scene.client.clone(), scene.ns());
        let blocked = serde_json::from_value(
            json!({"metadata": {"name": "probe"}, "data": {"v": "blocked"}}),
        )
        .unwrap();
        eventually("the policy to deny", CONVERGE, || async {
            let pp = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            probe.create(&pp, &blocked).await.is_err().then_some(())
        })
        .await;
    }
}

/// Deletes the binding of a policy made by [`deny`].
async fn lift(scene: &Scene, name: &str) {
    let bindings: Api<kube::api::DynamicObject> = Api::all_with(
        scene.client.clone(),
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicyBinding",
        )),
    );
    bindings
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

const STATUS_RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: frozen}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
        data: {v: "{{ self.spec.v }}"}
  status:
    fields:
      v: "{{ self.spec.v }}"
  requeue:
    onError: {initial: 200ms, max: 5m}
"#;

/// A status write the server keeps refusing backs off on its own count:
/// a child that fails later is retried from the first step, not from the
/// status's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_the_server_keeps_refusing_never_slows_a_childs_retries() {
    let scene = Scene::new("frozen").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"v": "a"}}))
        .await;
    let frozen = format!("frozen-status-{}", scene.ns());
    deny(
        &scene,
        &frozen,
        "widgets/status",
        "false",
        "status is frozen",
    )
    .await;
    let scene = scene.running(&[rule_from_yaml(STATUS_RULE)]).await;
    scene
        .until("the child", configmap("w"), |c| c["data"]["v"] == "a")
        .await;
    // The status is refused again and again: 0.2 + 0.4 + … s apart; after
    // 13 s its next retry is 25 s away.
    tokio::time::sleep(Duration::from_secs(13)).await;
    assert!(
        scene.get("test.kiln.dev/v1", "Widget", "w").await.unwrap()["status"]
            .get("v")
            .is_none(),
        "the status policy does not hold"
    );
    // Now a child write is denied for a while, then allowed again.
    let blocked = format!("deny-blocked-{}", scene.ns());
    deny(
        &scene,
        &blocked,
        "configmaps",
        "!has(object.data) || !('v' in object.data) || object.data.v != 'blocked'",
        "v may not be blocked",
    )
    .await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"v": "blocked"}}))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    lift(&scene, &blocked).await;
    // Retried on the child's own backoff (0.2 s, 0.4 s, … a few seconds at
    // most), not the status's 25 s or more: the status's next retry is
    // more than 22 s away when the policy is lifted.
    eventually(
        "the child, once allowed",
        Duration::from_secs(22),
        || async {
            scene
                .get("v1", "ConfigMap", "w")
                .await
                .filter(|c| c["data"]["v"] == "blocked")
        },
    )
    .await;
    lift(&scene, &frozen).await;
    scene.end().await;
}
