//! Admission denials are retried (issue 13, item 7): a policy that denies a
//! child is `Denied`, retried with backoff, and the child converges once the
//! policy is lifted — with no change to the primary.

use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use crate::support::scene::{CONVERGE, Scene, condition, configmap, widget_at};
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
    support::apply(&scene.client, json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]},
            "validations": [{"expression": "!has(object.data) || !('v' in object.data) || object.data.v != 'blocked'",
                "message": "v may not be blocked"}]
        }
    }), None).await;
    support::apply(&scene.client, json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": scene.ns()}}}}
    }), None).await;
    // The policy takes effect once the API server has loaded it.
    let probe: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(scene.client.clone(), scene.ns());
    let blocked =
        serde_json::from_value(json!({"metadata": {"name": "probe"}, "data": {"v": "blocked"}}))
            .unwrap();
    eventually("the policy to deny", CONVERGE, || async {
        let pp = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        probe.create(&pp, &blocked).await.is_err().then_some(())
    })
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
    let bindings: Api<kube::api::DynamicObject> = Api::all_with(
        scene.client.clone(),
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicyBinding",
        )),
    );
    bindings
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    scene
        .until("the child, once allowed", configmap("w"), |c| {
            c["data"]["v"] == "blocked"
        })
        .await;
    scene
        .until("the primary ready", widget_at("w"), |w| {
            condition(w, "Ready")["status"] == "True"
        })
        .await;
    scene.end().await;
}
