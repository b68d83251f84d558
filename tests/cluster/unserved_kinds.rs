//! A rule naming a child kind the API server does not serve yet (a Flux
//! HelmRelease before Flux is installed): only the children of that kind
//! wait, the rest of the rule runs, and the primary says which kind it
//! waits for. Once the kind is served, its children are made.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use crate::support::rule_from_yaml;
use crate::support::scene::{CONVERGE, Scene, condition, configmap, widget_at};

fn rule(group: &str) -> String {
    format!(
        r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: unserved}}
spec:
  for: {{apiVersion: test.kiln.dev/v1, kind: Widget}}
  children:
    - id: config
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: "{{{{ self.metadata.name }}}}-config"}}
        data: {{chart: podinfo}}
    - id: release
      readyWhen: exists
      template:
        apiVersion: {group}/v2
        kind: HelmRelease
        metadata: {{name: "{{{{ self.metadata.name }}}}"}}
        spec: {{chart: podinfo}}
"#
    )
}

fn helm_release_crd(group: &str) -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("helmreleases.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "helmreleases", "singular": "helmrelease", "kind": "HelmRelease", "listKind": "HelmReleaseList"},
            "versions": [{
                "name": "v2", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_children_of_a_kind_not_served_wait_and_the_primary_names_it() {
    let group = format!("helm{}.unserved.kiln.dev", std::process::id());
    let scene = Scene::new("unserved").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}))
        .await;
    let scene = scene.running(&[rule_from_yaml(&rule(&group))]).await;

    // The rest of the rule runs: the ConfigMap is made.
    scene
        .until(
            "the ConfigMap, beside a child that waits",
            configmap("w-config"),
            |c| c["data"]["chart"] == "podinfo",
        )
        .await;
    // The primary says what it waits for, naming the kind.
    let w = scene
        .until("Ready=False naming the kind", widget_at("w"), |w| {
            condition(w, "Ready")["reason"] == "KindNotServed"
        })
        .await;
    let ready = condition(&w, "Ready");
    assert_eq!(ready["status"], "False");
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{group}/v2/HelmRelease")),
        "{message}"
    );
    assert_eq!(condition(&w, "Waiting")["reason"], "KindNotServed");

    // Once the kind is served, its child is made and the primary is ready.
    let crds = Api::<CustomResourceDefinition>::all(scene.client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(helm_release_crd(&group)).unwrap();
    let name = format!("helmreleases.{group}");
    crds.patch(
        &name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap();
    let gvk = kube::core::GroupVersionKind::gvk(&group, "v2", "HelmRelease");
    crate::support::wait_for_kind(&scene.client, &gvk, CONVERGE).await;
    scene
        .until(
            "the HelmRelease once its kind is served",
            (&format!("{group}/v2"), "HelmRelease", "w"),
            |r| r["spec"]["chart"] == "podinfo",
        )
        .await;
    scene.ready("w").await;
    crds.delete(&name, &DeleteParams::default()).await.unwrap();
    scene.end().await;
}
