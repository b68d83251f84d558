//! The cache keeps of child and watched kinds only what rules set and read:
//! a change to anything else wakes no one, and a rule reloaded
//! to read a field it did not read before sees it (the kind is listed
//! again) without rewriting any child.

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::counts;
use crate::support::scene::{CONVERGE, Scene, configmap};
use crate::support::{self, eventually};

/// A Widget with one ConfigMap child; its status reads `read` of the child.
fn rule(read: &str) -> String {
    format!(
        r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: projected}}
spec:
  for: {{apiVersion: test.kiln.dev/v1, kind: Widget}}
  children:
    - id: config
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: "{{{{ self.metadata.name }}}}-config"}}
        data: {{value: "{{{{ self.spec.value }}}}"}}
  status:
    fields:
      seen: "{{{{ {read} | default('none') }}}}"
"#
    )
}

fn widget(name: &str) -> Value {
    json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"value": "1"}})
}

/// A scene running the rule that reads `children.config.data.value`,
/// caching only what rules set and read.
async fn projected(prefix: &str) -> Scene {
    Scene::new(prefix)
        .await
        .with_widgets()
        .await
        .projecting()
        .running(&[support::rule_from_yaml(&rule("children.config.data.value"))])
        .await
}

/// Another writer sets `patch` on the child ConfigMap `name`.
async fn foreign_patch(scene: &Scene, name: &str, patch: Value) {
    scene
        .api("v1", "ConfigMap")
        .await
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_to_a_field_no_rule_sets_or_reads_wakes_nothing() {
    let scene = projected("proj-quiet").await;
    scene.apply(widget("w")).await;
    scene
        .until("w's status", ("test.kiln.dev/v1", "Widget", "w"), |w| {
            w["status"]["seen"] == "1"
        })
        .await;
    scene.writes_during_resync("projected", 1).await;
    let reconciles = counts::reconciles(scene.engine());
    // Dropped at ingest: neither set by the template nor read.
    foreign_patch(&scene, "w-config", json!({"binaryData": {"b": "AA=="}})).await;
    foreign_patch(&scene, "w-config", json!({"immutable": false})).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        counts::reconciles(scene.engine()),
        reconciles,
        "a dropped field woke a reconcile"
    );
    // A field the template sets still does, and is put back.
    foreign_patch(&scene, "w-config", json!({"data": {"value": "drift"}})).await;
    scene
        .until("the drift to be corrected", configmap("w-config"), |c| {
            c["data"]["value"] == "1"
        })
        .await;
    assert!(counts::reconciles(scene.engine()) > reconciles);
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_reloaded_to_read_a_new_field_sees_it_without_rewriting_any_child() {
    let scene = projected("proj-widen").await;
    for name in ["a", "b"] {
        scene.apply(widget(name)).await;
        scene
            .until("status", ("test.kiln.dev/v1", "Widget", name), |w| {
                w["status"]["seen"] == "1"
            })
            .await;
        // Set by someone else, dropped from the cache while no rule reads it.
        foreign_patch(
            &scene,
            &format!("{name}-config"),
            json!({"binaryData": {"b": "AA=="}}),
        )
        .await;
    }
    scene.writes_during_resync("projected", 2).await;
    let applies = counts::applies(scene.engine());
    // The rule now reads `binaryData`: the ConfigMaps are listed again.
    scene.engine().start(support::rule_from_yaml(&rule(
        "children.config.binaryData.b",
    )));
    for name in ["a", "b"] {
        scene
            .until(
                "the newly read field",
                ("test.kiln.dev/v1", "Widget", name),
                |w| w["status"]["seen"] == "AA==",
            )
            .await;
    }
    support::settled("the engine to settle", || scene.writes()).await;
    assert_eq!(
        counts::applies(scene.engine()),
        applies,
        "a child was rewritten"
    );
    scene.end().await;
}

/// How many ConfigMaps the engine caches, and the bytes of their JSON.
fn cached_configmaps(scene: &Scene) -> (usize, usize) {
    scene
        .engine()
        .cached()
        .into_iter()
        .find(|(gvk, _, _)| gvk.kind == "ConfigMap")
        .map_or((0, 0), |(_, n, bytes)| (n, bytes))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_objects_of_a_child_kind_kiln_did_not_make_are_cached_without_their_data() {
    let scene = projected("proj-foreign").await;
    // Someone else's ConfigMaps, 20 × 500 KB in the very field the
    // template sets, one named like w's child.
    let blob = "x".repeat(500_000);
    for i in 0..20 {
        let name = if i == 0 {
            "w-config".to_string()
        } else {
            format!("big-{i}")
        };
        scene
            .apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name}, "data": {"value": blob}}))
            .await;
    }
    scene.apply(widget("v")).await;
    scene
        .until("v's status", ("test.kiln.dev/v1", "Widget", "v"), |w| {
            w["status"]["seen"] == "1"
        })
        .await;
    // kiln's own child keeps its data (the status read it); the others are
    // seen, but only by their metadata.
    let (count, bytes) = eventually("the 20 ConfigMaps in the cache", CONVERGE, || async {
        let (count, bytes) = cached_configmaps(&scene);
        (count >= 21).then_some((count, bytes))
    })
    .await;
    assert!(
        bytes < count * 2_000,
        "{count} ConfigMaps cached in {bytes} bytes: someone else's data is held"
    );
    // Seen by metadata is enough never to take one over.
    scene.apply(widget("w")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let theirs = scene.get("v1", "ConfigMap", "w-config").await.unwrap();
    assert_eq!(
        theirs["data"]["value"].as_str().map(str::len),
        Some(500_000)
    );
    assert!(
        theirs["metadata"]["ownerReferences"].is_null(),
        "taken over"
    );
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bench_workload_caches_under_2_kib_of_json_per_object() {
    let rule =
        std::fs::read_to_string(support::repo_root().join("tests/bench/webapp.yaml")).unwrap();
    let scene = Scene::new("proj-bench")
        .await
        .with_crds("examples/webapp")
        .await
        .projecting()
        .running(&[support::rule_from_yaml(&rule)])
        .await;
    scene
        .apply(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "creds"}, "stringData": {"password": "p"}}))
        .await;
    for i in 0..10 {
        scene
            .apply(json!({"apiVersion": "demo.kiln.dev/v1", "kind": "WebApp",
                "metadata": {"name": format!("web-{i}")},
                "spec": {"image": "nginx:1.27", "replicas": 1, "port": 8080,
                    "secretName": "creds", "config": {"LOG_LEVEL": "info"}}}))
            .await;
    }
    // Every child applied and seen back, every status written.
    eventually("the children in the cache", CONVERGE, || async {
        let cached = scene.engine().cached();
        let full = |kind: &str| cached.iter().any(|(g, n, _)| g.kind == kind && *n == 10);
        (full("Deployment") && full("Service")).then_some(())
    })
    .await;
    scene.writes_during_resync("webapp", 10).await;
    let cached = scene.engine().cached();
    let each: Vec<(&str, usize)> = ["Deployment", "Service", "ConfigMap", "WebApp", "Secret"]
        .into_iter()
        .map(|kind| {
            let (_, n, bytes) = cached.iter().find(|(g, _, _)| g.kind == kind).unwrap();
            // Printed for the README's figures (`--nocapture`).
            eprintln!("{kind}: {n} cached, {} bytes of JSON each", bytes / n);
            (kind, bytes / n)
        })
        .collect();
    for (kind, bytes) in each {
        assert!(bytes < 2048, "{kind}: {bytes} bytes each");
    }
    scene.end().await;
}
