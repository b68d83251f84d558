//! What kiln writes on objects it shares with others: the conditions
//! other controllers set keep their places and their types, and a status
//! field that renders `none` is left out rather than sent as `null`.

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::rule_from_yaml;
use crate::support::scene::Scene;

const STRICT: &str = "tests/fixtures/crds-strict";

const WIDGETS: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: placed}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
"#;

const GADGETS: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: gadgets}
spec:
  for: {apiVersion: strict.kiln.dev/v1, kind: Gadget}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
  status:
    fields:
      phase: "{{ self.spec.phase }}"
      lastScheduleTime: "{{ self.spec.last if self.spec.last is defined else none }}"
"#;

/// Another controller applies `status` on the object, as its own manager.
async fn their_status(scene: &Scene, (api_version, kind, name): (&str, &str, &str), status: Value) {
    let patch = json!({"apiVersion": api_version, "kind": kind, "status": status});
    scene
        .api(api_version, kind)
        .await
        .patch_status(
            name,
            &PatchParams::apply("another-controller").force(),
            &Patch::Apply(&patch),
        )
        .await
        .unwrap();
}

fn types(obj: &Value) -> Vec<&str> {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["type"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_controllers_conditions_keep_their_place_in_a_whole_list() {
    let scene = Scene::new("placed").await.with_widgets().await;
    let at = ("test.kiln.dev/v1", "Widget", "w");
    scene
        .apply(json!({"apiVersion": at.0, "kind": at.1, "metadata": {"name": "w"}, "spec": {}}))
        .await;
    let synced = json!({"type": "Synced", "status": "True", "reason": "Hook"});
    their_status(&scene, at, json!({"conditions": [synced]})).await;
    let scene = scene.running(&[rule_from_yaml(WIDGETS)]).await;
    let w = scene
        .until("kiln's conditions", at, |w| types(w).contains(&"Ready"))
        .await;
    assert_eq!(
        types(&w),
        ["Synced", "Ready", "Reconciled", "Waiting"],
        "{w}"
    );
    assert_eq!(
        w["status"]["conditions"][0], synced,
        "theirs kept as it was"
    );
    assert_eq!(scene.writes_during_resync("placed", 1).await, 0);
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_condition_another_controller_owns_is_left_alone() {
    let scene = Scene::new("theirs").await.with_crds(STRICT).await;
    let at = ("strict.kiln.dev/v1", "Gadget", "g");
    scene
        .apply(json!({"apiVersion": at.0, "kind": at.1, "metadata": {"name": "g"}, "spec": {"phase": "a"}}))
        .await;
    let ready = json!({"type": "Ready", "status": "False", "reason": "Theirs", "message": "m",
        "lastTransitionTime": "2026-01-01T00:00:00Z"});
    their_status(&scene, at, json!({"conditions": [ready]})).await;
    let scene = scene.running(&[rule_from_yaml(GADGETS)]).await;
    let g = scene
        .until("kiln's conditions", at, |g| {
            types(g).contains(&"Reconciled")
        })
        .await;
    assert_eq!(types(&g), ["Ready", "Reconciled", "Waiting"], "{g}");
    assert_eq!(g["status"]["conditions"][0], ready, "theirs, untouched");
    assert_eq!(scene.writes_during_resync("gadgets", 1).await, 0);
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_field_that_renders_none_is_left_out() {
    let scene = Scene::new("none").await.with_crds(STRICT).await;
    let at = ("strict.kiln.dev/v1", "Gadget", "g");
    let gadget = |spec: Value| json!({"apiVersion": at.0, "kind": at.1, "metadata": {"name": "g"}, "spec": spec});
    scene.apply(gadget(json!({"phase": "a"}))).await;
    let scene = scene.running(&[rule_from_yaml(GADGETS)]).await;
    let g = scene
        .until("the status without the none", at, |g| {
            g["status"]["phase"] == "a"
        })
        .await;
    assert!(g["status"].get("lastScheduleTime").is_none(), "{g}");
    let t = "2026-01-01T00:00:00Z";
    scene.apply(gadget(json!({"phase": "a", "last": t}))).await;
    scene
        .until("the time once it renders", at, |g| {
            g["status"]["lastScheduleTime"] == t
        })
        .await;
    scene.apply(gadget(json!({"phase": "b"}))).await;
    let g = scene
        .until("the phase to follow", at, |g| g["status"]["phase"] == "b")
        .await;
    assert!(
        g["status"].get("lastScheduleTime").is_none(),
        "a field kiln wrote and now renders none leaves: {g}"
    );
    assert_eq!(scene.writes_during_resync("gadgets", 1).await, 0);
    scene.end().await;
}
