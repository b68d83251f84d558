//! Children outside the primary's namespace: a
//! namespaced Widget gets a Namespace of its own and a ConfigMap in it, as
//! KRO's saas-multi-tenant example does. No owner reference can cross
//! namespaces: kiln tracks them by label, holds a finalizer on the primary,
//! and deletes them (waiting until they are gone) before it lets the
//! primary go.

use serde_json::json;

use crate::support::scene::{CONVERGE, Scene, widget_at};
use crate::support::{self, eventually, rule_from_yaml};

fn rule() -> String {
    std::fs::read_to_string(support::repo_root().join("tests/fixtures/rules/space.yaml")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_widget_gets_a_namespace_of_its_own_and_takes_it_along_when_deleted() {
    let (scene, space) = space_scene("outside").await;
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
    eventually("the Widget gone", support::PATIENCE, || async {
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

/// A Widget `w` (team blue) and the `space` rule running, watching the
/// Widget's Namespace to be. Returns the scene and that Namespace's name.
async fn space_scene(prefix: &str) -> (Scene, String) {
    let scene = Scene::new(prefix).await.with_widgets().await;
    let space = format!("{}-w", scene.ns());
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"team": "blue"}}))
        .await;
    let scene = scene
        .also_watching(&space)
        .running(&[rule_from_yaml(&rule())])
        .await;
    (scene, space)
}

/// A Widget whose `space` rule converged: its Namespace and the ConfigMap
/// in it exist. Returns the scene and the Namespace's name.
async fn converged_space(prefix: &str) -> (Scene, String) {
    let (scene, space) = space_scene(prefix).await;
    settings_with(&scene, &space, "blue").await;
    scene.ready("w").await;
    (scene, space)
}

/// Waits (a few seconds, far below any resync) until the ConfigMap in the
/// Widget's Namespace holds `team`.
async fn settings_with(scene: &Scene, space: &str, team: &str) {
    eventually("the ConfigMap in it", support::PATIENCE, || async {
        support::get(&scene.client, "v1", "ConfigMap", space, "settings")
            .await
            .filter(|s| s["data"]["team"] == team)
    })
    .await;
}

/// Deleting an `outside` child wakes its primary: it is back within
/// seconds, not at the next resync (the rule has none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outside_child_someone_deleted_is_back_within_seconds() {
    let (scene, space) = converged_space("outside-deleted").await;
    support::delete(&scene.client, ("v1", "ConfigMap"), Some(&space), "settings").await;
    settings_with(&scene, &space, "blue").await;
    scene.end().await;
}

/// Editing an `outside` child wakes its primary: the field is set back
/// within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outside_child_someone_edited_is_set_back_within_seconds() {
    let (scene, space) = converged_space("outside-edited").await;
    support::edit(
        &scene.client,
        ("v1", "ConfigMap"),
        Some(&space),
        "settings",
        json!({"data": {"team": "red"}}),
    )
    .await;
    settings_with(&scene, &space, "blue").await;
    scene.end().await;
}

/// `kiln explain` finds `outside` children where they are (another
/// namespace, cluster-scoped) by kiln's mark, and says they are applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kiln_explain_says_an_existing_outside_child_is_applied() {
    let (scene, space) = converged_space("outside-explain").await;
    let stdout = support::kiln_explain(
        "test.kiln.dev/v1",
        "Widget",
        &format!("{}/w", scene.ns()),
        &[("space.yaml", &rule())],
    );
    for line in [
        format!("    space Namespace {space}: applied"),
        "    settings ConfigMap settings: applied".to_string(),
    ] {
        assert!(stdout.contains(&line), "no `{line}` in:\n{stdout}");
    }
    scene.end().await;
}

/// Two Widgets whose `outside` Namespace has one name: the second is told
/// which primary holds it, not that kiln did not create it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_primary_of_an_outside_child_is_told_which_primary_holds_it() {
    let scene = Scene::new("outside-held").await.with_widgets().await;
    let ns = scene.ns().to_string();
    // `{namespace}-{name}`: `<ns>`/`w-x` and `<ns>-w`/`x` both make `<ns>-w-x`.
    let other = format!("{ns}-w");
    let space = format!("{ns}-w-x");
    support::apply(
        &scene.client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}}),
        None,
    )
    .await;
    let widget = |name: &str| {
        json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": {"team": "blue"}})
    };
    scene.apply(widget("w-x")).await;
    let scene = scene
        .also_watching(&other)
        .also_watching(&space)
        .running(&[rule_from_yaml(&rule())])
        .await;
    scene.ready("w-x").await;
    support::apply(&scene.client, widget("x"), Some(&other)).await;
    let refused = eventually("the second Widget refused", CONVERGE, || async {
        let w = support::get(&scene.client, "test.kiln.dev/v1", "Widget", &other, "x").await?;
        let c = crate::support::scene::condition(&w, "Reconciled").clone();
        (c["reason"] == "AlreadyExists").then_some(c)
    })
    .await;
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("made by kiln for Widget {ns}/w-x (rule space)")),
        "{message}"
    );
    for (namespace, name) in [(other.as_str(), "x"), (ns.as_str(), "w-x")] {
        support::delete(
            &scene.client,
            ("test.kiln.dev/v1", "Widget"),
            Some(namespace),
            name,
        )
        .await;
        eventually("the Widget gone", support::PATIENCE, || async {
            support::get(&scene.client, "test.kiln.dev/v1", "Widget", namespace, name)
                .await
                .is_none()
                .then_some(())
        })
        .await;
    }
    support::delete(&scene.client, ("v1", "Namespace"), None, &other).await;
    scene.end().await;
}

/// The `space` rule edited to select another kind (its group or kind
/// renamed): kiln lets go of the finalizer it held on every Widget, so
/// deleting one (or the Widget CRD) does not hang. The children it made
/// stay, as when a rule is removed: an edit never deletes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renaming_a_rules_kind_does_not_strand_finalizers() {
    let (scene, space) = converged_space("outside-renamed").await;
    let finalizer = json!(["space.kiln.dev/ordered-deletion"]);
    let w = scene.get("test.kiln.dev/v1", "Widget", "w").await.unwrap();
    assert_eq!(w["metadata"]["finalizers"], finalizer);

    let renamed = rule().replace(
        "apiVersion: test.kiln.dev/v1\n    kind: Widget",
        "apiVersion: v1\n    kind: ConfigMap\n    selector: {matchLabels: {kiln-test/renamed: \"yes\"}}",
    );
    let renamed = rule_from_yaml(&renamed);
    assert_eq!(renamed.primary.gvk.kind, "ConfigMap");
    scene.engine().replace(renamed).await;

    eventually("the finalizer let go", support::PATIENCE, || async {
        let w = scene.get("test.kiln.dev/v1", "Widget", "w").await?;
        (w["metadata"]["finalizers"] != finalizer).then_some(())
    })
    .await;
    scene.delete_widget("w", support::PATIENCE).await;
    assert!(
        support::get(&scene.client, "v1", "Namespace", "", &space)
            .await
            .is_some(),
        "an edit of the rule deletes none of the children it made"
    );
    support::delete(&scene.client, ("v1", "Namespace"), None, &space).await;
    scene.end().await;
}
