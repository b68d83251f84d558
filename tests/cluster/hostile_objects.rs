//! One object kiln cannot decode never stops its kind: a
//! Widget whose spec nests 140 levels deep (the CRD preserves unknown
//! fields) is past serde's recursion limit. It is left out and reported
//! once; every other Widget, listed beside it or created later, converges,
//! and kiln stays ready.

use std::time::Duration;

use serde_json::json;

use crate::support::scene::{CONVERGE, Scene, configmap};
use crate::support::{self, eventually, rule_from_yaml};

const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: flat}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
        data: {v: "{{ self.spec.v | default('none') }}"}
"#;

/// Creates or replaces a Widget whose `spec.deep` nests `depth` levels,
/// without decoding the answer (the test's own client could not either).
async fn put_deep_widget(scene: &Scene, name: &str, depth: usize, v: &str) {
    let nested = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
    let body = format!(
        r#"{{"apiVersion":"test.kiln.dev/v1","kind":"Widget","metadata":{{"name":"{name}"}},"spec":{{"v":"{v}","deep":{nested}}}}}"#
    );
    let uri = format!(
        "/apis/test.kiln.dev/v1/namespaces/{}/widgets/{name}?fieldManager={}&force=true",
        scene.ns(),
        support::MANAGER
    );
    let request = http::Request::patch(uri)
        .header("Content-Type", "application/apply-patch+yaml")
        .body(body.into_bytes())
        .unwrap();
    scene.client.request_text(request).await.unwrap();
}

fn undecodable_count(scene: &Scene) -> f64 {
    let text = scene.engine().metrics().encode();
    text.lines()
        .find(|l| l.starts_with("kiln_undecodable_objects_total{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_deeply_nested_primary_never_stops_its_kind() {
    let scene = Scene::new("deep").await.with_widgets().await;
    put_deep_widget(&scene, "deep", 140, "x").await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "listed"}, "spec": {"v": "a"}}))
        .await;
    // The first list holds the deep Widget: the rule still starts.
    let scene = scene.running(&[rule_from_yaml(RULE)]).await;
    scene
        .until(
            "the child of the Widget listed beside it",
            configmap("listed"),
            |c| c["data"]["v"] == "a",
        )
        .await;
    // Reported once, as a Warning Event on the object and a metric.
    let events = eventually("an Undecodable Event", CONVERGE, || async {
        let hits = support::events_about(&scene.client, scene.ns(), "deep", "Undecodable").await;
        (!hits.is_empty()).then_some(hits)
    })
    .await;
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    let note = events[0].note.as_deref().unwrap_or_default();
    assert!(note.contains("recursion limit"), "{note}");
    assert!(!note.contains("{\"a\""), "the body is never quoted: {note}");
    assert_eq!(undecodable_count(&scene), 1.0);

    // Live watch events: the deep Widget changes, still too deep; a new
    // Widget is created after it. The kind keeps flowing.
    put_deep_widget(&scene, "deep", 150, "y").await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "later"}, "spec": {"v": "b"}}))
        .await;
    scene
        .until(
            "the child of a Widget created later",
            configmap("later"),
            |c| c["data"]["v"] == "b",
        )
        .await;
    assert!(
        scene.get("v1", "ConfigMap", "deep").await.is_none(),
        "the object kiln could not read was not reconciled"
    );
    assert_eq!(undecodable_count(&scene), 1.0, "reported once");
    assert_eq!(scene.engine().readiness(), Ok(()));

    // Once it can be read again, it is reconciled like any other.
    put_deep_widget(&scene, "deep", 3, "z").await;
    scene
        .until(
            "the child once the Widget decodes",
            configmap("deep"),
            |c| c["data"]["v"] == "z",
        )
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    scene.end().await;
}
