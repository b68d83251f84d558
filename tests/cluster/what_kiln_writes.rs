//! What kiln writes on objects it shares with others: the conditions
//! other controllers set keep their places and their types, and a status
//! field that renders `none` is left out rather than sent as `null`; a
//! kind without a status subresource is said to get no status.

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::rule_from_yaml;
use crate::support::scene::Scene;

const STRICT: &str = "tests/fixtures/crds-strict";

/// A rule `name` on `kind` (`apiVersion group/v1`) with one ConfigMap child,
/// and `status` (YAML under `spec`, may be empty).
fn rule_on(name: &str, api_version: &str, kind: &str, status: &str) -> String {
    format!(
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: {name}}}\nspec:\n  for: {{apiVersion: {api_version}, kind: {kind}}}\n  children:\n    - id: main\n      template:\n        apiVersion: v1\n        kind: ConfigMap\n        metadata: {{name: \"{{{{ self.metadata.name }}}}\"}}\n{status}"
    )
}

const PHASE: &str = "  status:\n    fields:\n      phase: \"{{ self.spec.phase }}\"\n";

fn gadgets() -> std::sync::Arc<kiln::rules::Rule> {
    let status = format!(
        "{PHASE}      lastScheduleTime: \"{{{{ self.spec.last if self.spec.last is defined else none }}}}\"\n"
    );
    rule_from_yaml(&rule_on("gadgets", "strict.kiln.dev/v1", "Gadget", &status))
}

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
    let scene = scene
        .running(&[rule_from_yaml(&rule_on(
            "placed",
            "test.kiln.dev/v1",
            "Widget",
            "",
        ))])
        .await;
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
    let scene = scene.running(&[gadgets()]).await;
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
    let scene = scene.running(&[gadgets()]).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_says_a_kind_without_a_status_subresource_gets_no_status() {
    let scene = Scene::new("gizmo").await.with_crds(STRICT).await;
    scene
        .apply(json!({"apiVersion": "strict.kiln.dev/v1", "kind": "Gizmo",
            "metadata": {"name": "g"}, "spec": {"phase": "a"}}))
        .await;
    let stdout = crate::support::kiln_explain(
        "strict.kiln.dev/v1",
        "Gizmo",
        &format!("{}/g", scene.ns()),
        &[(
            "gizmos.yaml",
            &rule_on("gizmos", "strict.kiln.dev/v1", "Gizmo", PHASE),
        )],
    );
    let line = "kiln writes no status: Gizmo has no status subresource";
    assert!(stdout.contains(line), "no `{line}` in:\n{stdout}");
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_in_a_k8s_io_group_gets_its_status_and_only_what_it_declares() {
    let scene = Scene::new("probe")
        .await
        .with_crds("tests/fixtures/crds-k8s-io")
        .await;
    let at = ("testing.k8s.io/v1", "Probe", "p");
    scene
        .apply(
            json!({"apiVersion": at.0, "kind": at.1, "metadata": {"name": "p"},
            "spec": {"phase": "Ready"}}),
        )
        .await;
    let rule = rule_on("probes", at.0, at.1, PHASE);
    let scene = scene.running(&[rule_from_yaml(&rule)]).await;
    let p = scene
        .until("the status kiln writes", at, |p| {
            p["status"]["phase"] == "Ready"
        })
        .await;
    assert!(
        p["status"].get("conditions").is_none(),
        "the CRD declares no conditions: {p}"
    );
    assert_eq!(scene.writes_during_resync("probes", 1).await, 0);
    scene.end().await;
}

/// A primary in a built-in group with a dot (`networking.k8s.io`) has no
/// CRD: kiln asks for none (nor does `kiln rbac` grant reading one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_crd_is_read_for_a_built_in_dotted_groups_primary() {
    use kiln::engine::{Engine, Options, RuleState};
    let client = crate::support::admin_client().await;
    let ns = crate::support::TestNamespace::new(&client, "builtin-crd").await;
    let (counted, reads) =
        crate::support::client_counting(crate::support::kubeconfig_yaml(), |req| {
            req.uri().path().contains("/customresourcedefinitions")
        })
        .await;
    let engine = Engine::new(
        counted,
        Options {
            namespaces: vec![ns.name().to_string()],
            ..Options::default()
        },
    );
    engine.start(rule_from_yaml(&rule_on(
        "policies",
        "networking.k8s.io/v1",
        "NetworkPolicy",
        "",
    )));
    crate::support::eventually("the rule to run", crate::support::PATIENCE, || async {
        (engine.state("policies") == Some(RuleState::Running)).then_some(())
    })
    .await;
    assert_eq!(reads.get(), 0, "a CRD was asked for a built-in kind");
    engine.shutdown().await;
    ns.delete().await;
}
