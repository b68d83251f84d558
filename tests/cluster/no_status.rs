//! A primary whose kind has no status subresource: kiln writes no status
//! on it, and says so once on the object, with a Warning Event, instead of
//! leaving its status silently empty.

use k8s_openapi::api::core::v1::Event;
use kube::api::ListParams;
use serde_json::json;

use crate::support::rule_from_yaml;
use crate::support::scene::Scene;

const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: gizmos}
spec:
  for: {apiVersion: strict.kiln.dev/v1, kind: Gizmo}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
        data: {phase: "{{ self.spec.phase }}"}
"#;

/// kiln's `NoStatusSubresource` Events about the object `uid`.
async fn told(scene: &Scene, uid: &str) -> Vec<Event> {
    kube::Api::<Event>::namespaced(scene.client.clone(), scene.ns())
        .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("NoStatusSubresource"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_kind_without_a_status_subresource_gets_one_warning_event() {
    let scene = Scene::new("no-status")
        .await
        .with_crds("tests/fixtures/crds-strict")
        .await;
    let gizmo = |phase: &str| {
        json!({"apiVersion": "strict.kiln.dev/v1", "kind": "Gizmo",
            "metadata": {"name": "g"}, "spec": {"phase": phase}})
    };
    let g = scene.apply(gizmo("a")).await;
    let uid = g["metadata"]["uid"].as_str().unwrap().to_string();
    let scene = scene.running(&[rule_from_yaml(RULE)]).await;
    scene
        .until("the child", ("v1", "ConfigMap", "g"), |c| {
            c["data"]["phase"] == "a"
        })
        .await;
    let events = crate::support::eventually(
        "the Warning Event",
        crate::support::scene::CONVERGE,
        || async { Some(told(&scene, &uid).await).filter(|e| !e.is_empty()) },
    )
    .await;
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    let message = events[0].message.as_deref().unwrap_or_default();
    assert!(
        message.contains("Gizmo has no status subresource"),
        "{message}"
    );
    // Another reconcile: said once, not again.
    scene.apply(gizmo("b")).await;
    scene
        .until("the child to follow", ("v1", "ConfigMap", "g"), |c| {
            c["data"]["phase"] == "b"
        })
        .await;
    let events = told(&scene, &uid).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].count.unwrap_or(1), 1, "{events:?}");
    let g = scene.get("strict.kiln.dev/v1", "Gizmo", "g").await.unwrap();
    assert!(g.get("status").is_none(), "{g}");
    scene.end().await;
}
