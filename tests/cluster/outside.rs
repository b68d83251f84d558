//! Children outside the primary's namespace (issue 15, item 5): a
//! namespaced Widget gets a Namespace of its own and a ConfigMap in it, as
//! KRO's saas-multi-tenant example does. No owner reference can cross
//! namespaces: kiln tracks them by label, holds a finalizer on the primary,
//! and deletes them (waiting until they are gone) before it lets the
//! primary go.

use std::time::Duration;

use serde_json::json;

use crate::support::scene::{CONVERGE, Scene, widget_at};
use crate::support::{self, eventually, rule_from_yaml};

fn rule() -> String {
    std::fs::read_to_string(support::repo_root().join("tests/fixtures/rules/space.yaml")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_widget_gets_a_namespace_of_its_own_and_takes_it_along_when_deleted() {
    let scene = Scene::new("outside").await.with_widgets().await;
    let space = format!("{}-w", scene.ns());
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"team": "blue"}}))
        .await;
    let scene = scene
        .also_watching(&space)
        .running(&[rule_from_yaml(&rule())])
        .await;
    let w = scene
        .until("the finalizer", widget_at("w"), |w| {
            w["metadata"]["finalizers"] == json!(["space.kiln.dev/ordered-deletion"])
        })
        .await;
    let uid = w["metadata"]["uid"].as_str().unwrap().to_string();
    let ns = eventually("the Namespace", CONVERGE, || async {
        support::get(&scene.client, "v1", "Namespace", "", &space).await
    })
    .await;
    assert_eq!(ns["metadata"]["labels"]["kiln.dev/owner-uid"], uid);
    assert!(ns["metadata"].get("ownerReferences").is_none());
    let settings = eventually("the ConfigMap in it", CONVERGE, || async {
        support::get(&scene.client, "v1", "ConfigMap", &space, "settings").await
    })
    .await;
    assert_eq!(settings["data"]["team"], "blue");
    assert_eq!(settings["metadata"]["labels"]["kiln.dev/owner-uid"], uid);
    scene.ready("w").await;
    assert_eq!(
        scene.writes_during_resync("space", 1).await,
        0,
        "converged: no writes"
    );

    // Deleted: kiln deletes what it made outside, waits, then lets go.
    support::delete(
        &scene.client,
        ("test.kiln.dev/v1", "Widget"),
        Some(scene.ns()),
        "w",
    )
    .await;
    eventually("the Widget gone", Duration::from_secs(90), || async {
        scene
            .get("test.kiln.dev/v1", "Widget", "w")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        support::get(&scene.client, "v1", "Namespace", "", &space)
            .await
            .is_none(),
        "the Namespace outlived its Widget"
    );
    scene.end().await;
}
