//! `kiln explain` against the real control plane: the rules that select an
//! object and why the others do not, each child as the cluster holds it
//! against what the rule renders now, the conditions and kiln's Events.

use serde_json::json;

use crate::support::scene::{Scene, condition};
use crate::support::{self, rule_from_yaml};

/// A rule on WebApps that only takes those labelled `tier: gold`.
const PICKY: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: picky}
spec:
  for:
    apiVersion: demo.kiln.dev/v1
    kind: WebApp
    selector: {matchLabels: {tier: gold}}
  children:
    - id: note
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-note"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kiln_explain_shows_selection_children_conditions_and_events() {
    let scene = Scene::new("explain").await;
    support::install_crds(&scene.client, "examples/webapp").await;
    scene
        .apply(support::example("examples/webapp/webapp.yaml"))
        .await;
    let webapp = support::shipped_rule("webapp", |t| t);
    let scene = scene.running(&[webapp, rule_from_yaml(PICKY)]).await;
    // Waiting for its Secret first: a DependencyMissing Event.
    scene
        .until("Waiting", ("demo.kiln.dev/v1", "WebApp", "shop"), |w| {
            condition(w, "Waiting")["status"] == "True"
        })
        .await;
    scene
        .apply(support::example("examples/webapp/secret.yaml"))
        .await;
    scene
        .until("Reconciled", ("demo.kiln.dev/v1", "WebApp", "shop"), |w| {
            condition(w, "Reconciled")["status"] == "True"
        })
        .await;
    scene
        .until("the Service", ("v1", "Service", "shop"), |_| true)
        .await;
    let key = scene.get("v1", "Secret", "shop-hash-key").await.unwrap();
    let key = key["data"]["key"].as_str().unwrap().to_string();

    // kiln stops; the WebApp changes and the Service goes.
    scene.engine().shutdown().await;
    let mut changed = support::example("examples/webapp/webapp.yaml");
    changed["spec"]["image"] = json!("nginx:1.28");
    scene.apply(changed).await;
    support::delete(&scene.client, ("v1", "Service"), Some(scene.ns()), "shop").await;

    let webapp_rule =
        std::fs::read_to_string(support::repo_root().join("rules/webapp.yaml")).unwrap();
    let stdout = support::kiln_explain(
        "demo.kiln.dev/v1",
        "WebApp",
        &format!("{}/shop", scene.ns()),
        &[("webapp.yaml", &webapp_rule), ("picky.yaml", PICKY)],
    );
    for line in [
        format!("WebApp {}/shop (uid", scene.ns()),
        "  webapp: selects it".to_string(),
        "  picky: does not select it: its labels {} do not match spec.for.selector".to_string(),
        "    config ConfigMap shop-config: applied".to_string(),
        "    hashkey Secret shop-hash-key: applied".to_string(),
        "    deployment Deployment shop: would change".to_string(),
        "    service Service shop: missing".to_string(),
        "  Reconciled True ".to_string(),
        "DependencyMissing".to_string(),
    ] {
        assert!(stdout.contains(&line), "no `{line}` in:\n{stdout}");
    }
    for secret in ["aHVudGVyMg==", "hunter2", key.as_str()] {
        assert!(!stdout.contains(secret), "{secret} in:\n{stdout}");
    }
    scene.end().await;
}

/// A rule whose child counts the ConfigMaps a label selector finds.
const COUNTING: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: counting}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  watches:
    - name: peers
      apiVersion: v1
      kind: ConfigMap
      selector:
        matchLabels: {peer-of: "{{ self.metadata.name }}"}
  children:
    - id: count
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-count"}
        data: {peers: "{{ related.peers | length | string }}"}
"#;

/// A selector that finds nothing is an empty list to templates, in
/// `kiln explain` as in the engine: explain renders what the engine applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kiln_explain_reads_a_selector_that_finds_nothing_as_the_engine_does() {
    let scene = Scene::new("explain-none").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {}}))
        .await;
    let scene = scene.running(&[rule_from_yaml(COUNTING)]).await;
    scene
        .until("the count", ("v1", "ConfigMap", "w-count"), |c| {
            c["data"]["peers"] == "0"
        })
        .await;
    let stdout = support::kiln_explain(
        "test.kiln.dev/v1",
        "Widget",
        &format!("{}/w", scene.ns()),
        &[("counting.yaml", COUNTING)],
    );
    assert!(
        stdout.contains("    count ConfigMap w-count: applied"),
        "{stdout}"
    );
    scene.end().await;
}

/// `kiln explain --rules-configmap` reads the rules kiln runs from the
/// cluster, as `kiln run --rules-configmap` does: no local copy needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kiln_explain_reads_the_rules_from_their_configmap() {
    let scene = Scene::new("explain-cm").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {}}))
        .await;
    scene
        .apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kiln-rules"},
            "data": {"counting.yaml": COUNTING, "picky.yaml": PICKY}}))
        .await;
    let stdout = support::kiln_explain_with(
        "test.kiln.dev/v1",
        "Widget",
        &format!("{}/w", scene.ns()),
        &["--rules-configmap", &format!("{}/kiln-rules", scene.ns())],
    );
    for line in [
        "  counting: selects it",
        "    count ConfigMap w-count: missing",
    ] {
        assert!(stdout.contains(line), "no `{line}` in:\n{stdout}");
    }
    scene.end().await;
}
