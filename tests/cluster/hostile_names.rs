//! Names are checked before requests: a rendered name that
//! would change the request's URL (`x/../../../kube-system/configmaps/evil`,
//! `e4/status`) is `Invalid` for its object, sent nowhere and not retried.

use std::time::Duration;

use serde_json::json;

use crate::support::counts;
use crate::support::rule_from_yaml;
use crate::support::scene::{Scene, configmap};

const NAMED_BY_SPEC: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: named}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.spec.child }}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rendered_name_that_walks_the_url_path_is_invalid_and_never_sent() {
    let scene = Scene::new("names").await.with_widgets().await;
    let widget = |name: &str, child: &str| json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"child": child}});
    scene
        .apply(widget("escape", "x/../../../kube-system/configmaps/evil"))
        .await;
    scene.apply(widget("status", "e4/status")).await;
    scene.apply(widget("good", "good-child")).await;
    let scene = scene.running(&[rule_from_yaml(NAMED_BY_SPEC)]).await;
    scene
        .until("the good child", configmap("good-child"), |_| true)
        .await;
    for name in ["escape", "status"] {
        let message = scene.refused(name, "Invalid").await;
        assert!(message.contains("metadata.name"), "{message}");
    }
    // Not retried: no reconcile of its own for either in a few seconds.
    let before = counts::reconciles(scene.engine());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(counts::reconciles(scene.engine()) - before <= 1, "retried");
    let evil = crate::support::get(&scene.client, "v1", "ConfigMap", "kube-system", "evil").await;
    assert!(evil.is_none());
    scene.end().await;
}

/// A primary with a 253-character name (the longest there is) still gets
/// its Events: kube's Event name (`<name>.<time>`) would be too long, so
/// kiln names it shortly and still points it at the primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_with_a_253_character_name_loses_its_events() {
    let scene = Scene::new("names-long").await.with_widgets().await;
    let name = format!("{}.{}", "w".repeat(200), "x".repeat(52));
    assert_eq!(name.len(), 253);
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": {"child": "Not A Name"}}))
        .await;
    let scene = scene.running(&[rule_from_yaml(NAMED_BY_SPEC)]).await;
    crate::support::eventually(
        "a Warning Event about the primary",
        crate::support::scene::CONVERGE,
        || async {
            let hits =
                crate::support::events_about(&scene.client, scene.ns(), &name, "Invalid").await;
            (!hits.is_empty()).then_some(())
        },
    )
    .await;
    scene.end().await;
}
