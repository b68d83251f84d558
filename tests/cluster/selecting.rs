//! Selecting primaries and related objects: label
//! selectors with expressions in watches, a watch across all namespaces when
//! the rule says so literally, and namespaces a rule never takes.

use serde_json::json;

use crate::support::scene::{Scene, configmap, widget_at};
use crate::support::{self, TestNamespace};

fn peer(name: &str, labels: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}})
}

const PEERS: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: peers}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  watches:
    - name: peers
      apiVersion: v1
      kind: ConfigMap
      selector:
        allNamespaces: true
        matchExpressions:
          - {key: peer, operator: Exists}
          - {key: retired, operator: DoesNotExist}
  status:
    fields:
      peers: "{{ related.peers | length }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_watch_with_expressions_reads_every_namespace_when_the_rule_says_so() {
    let client = support::admin_client().await;
    let other = TestNamespace::new(&client, "sel-peers").await;
    let scene = Scene::new("sel-all")
        .await
        .with_widgets()
        .await
        .also_watching(other.name());
    scene.apply(peer("here", json!({"peer": "a"}))).await;
    support::apply(
        &client,
        peer("there", json!({"peer": "b"})),
        Some(other.name()),
    )
    .await;
    support::apply(
        &client,
        peer("old", json!({"peer": "c", "retired": "yes"})),
        Some(other.name()),
    )
    .await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}))
        .await;
    let scene = scene.running(&[support::rule_from_yaml(PEERS)]).await;
    scene
        .until("both live peers, here and there", widget_at("w"), |w| {
            w["status"]["peers"] == 2
        })
        .await;
    // A new peer in the other namespace requeues the primary.
    support::apply(
        &client,
        peer("new", json!({"peer": "d"})),
        Some(other.name()),
    )
    .await;
    scene
        .until("the new peer", widget_at("w"), |w| {
            w["status"]["peers"] == 3
        })
        .await;
    scene.end().await;
    other.delete().await;
}

/// A rule on Widgets with one ConfigMap child, and `for_extra` added to
/// `spec.for` (indented lines).
fn widget_rule(name: &str, for_extra: &str) -> String {
    format!(
        r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: {name}}}
spec:
  for:
    apiVersion: test.kiln.dev/v1
    kind: Widget
{for_extra}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: "{{{{ rule.name }}}}-{{{{ self.metadata.name }}}}"}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_excluded_namespace_is_never_reconciled() {
    let client = support::admin_client().await;
    let excluded = TestNamespace::new(&client, "sel-excluded").await;
    let scene = Scene::new("sel-taken")
        .await
        .with_widgets()
        .await
        .also_watching(excluded.name());
    let widget = json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}});
    scene.apply(widget.clone()).await;
    support::apply(&client, widget, Some(excluded.name())).await;
    let exclude = format!("    excludeNamespaces: [{}]", excluded.name());
    let rule = support::rule_from_yaml(&widget_rule("excluding", &exclude));
    let scene = scene.running(&[rule]).await;
    scene
        .until("the child here", configmap("excluding-w"), |_| true)
        .await;
    scene.ready("w").await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let there = support::get(&client, "v1", "ConfigMap", excluded.name(), "excluding-w").await;
    assert!(
        there.is_none(),
        "a widget in an excluded namespace got a child"
    );
    let status = support::get(&client, "test.kiln.dev/v1", "Widget", excluded.name(), "w")
        .await
        .unwrap();
    assert!(status["status"].is_null(), "{}", status["status"]);
    scene.end().await;
    excluded.delete().await;
}

const GOLD: &str = "    namespaceSelector:
      matchExpressions:
        - {key: kiln.dev/tier, operator: In, values: [gold]}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_selector_takes_primaries_only_where_the_namespace_matches() {
    let client = support::admin_client().await;
    let plain = TestNamespace::new(&client, "sel-plain").await;
    let scene = Scene::new("sel-gold")
        .await
        .with_widgets()
        .await
        .also_watching(plain.name());
    let gold = json!({"metadata": {"labels": {"kiln.dev/tier": "gold"}}});
    let namespace = ("v1", "Namespace");
    support::edit(&client, namespace, None, scene.ns(), gold.clone()).await;
    let widget = json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}});
    scene.apply(widget.clone()).await;
    support::apply(&client, widget, Some(plain.name())).await;
    let scene = scene
        .running(&[support::rule_from_yaml(&widget_rule("gold", GOLD))])
        .await;
    scene
        .until(
            "the child in the gold namespace",
            configmap("gold-w"),
            |_| true,
        )
        .await;
    scene.ready("w").await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let there = support::get(&client, "v1", "ConfigMap", plain.name(), "gold-w").await;
    assert!(
        there.is_none(),
        "a widget outside the selected namespaces got a child"
    );
    // The namespace is labelled: its widget is taken from now on.
    support::edit(&client, namespace, None, plain.name(), gold).await;
    crate::support::eventually(
        "the child once the namespace matches",
        crate::support::scene::CONVERGE,
        || async { support::get(&client, "v1", "ConfigMap", plain.name(), "gold-w").await },
    )
    .await;
    scene.end().await;
    plain.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_whose_namespace_selector_does_not_take_an_object_has_no_say_in_its_status() {
    let scene = Scene::new("sel-share").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}))
        .await;
    let rules = [
        support::rule_from_yaml(&widget_rule("plain", "")),
        support::rule_from_yaml(&widget_rule("gold", GOLD)),
    ];
    let scene = scene.running(&rules).await;
    scene
        .until("plain's child", configmap("plain-w"), |_| true)
        .await;
    let w = scene.ready("w").await;
    let types: Vec<&str> = w["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert!(
        !types.iter().any(|t| t.starts_with("gold.")),
        "a rule that does not take the widget shows in its status: {types:?}"
    );
    assert!(scene.get("v1", "ConfigMap", "gold-w").await.is_none());
    scene.end().await;
}

/// With `spec.for.namespaceSelector`, a Namespace cache kiln may not list
/// is no "not selected": a primary being deleted keeps kiln's finalizer
/// (its children are not left behind) and says why it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_kiln_may_not_list_becomes_not_selected() {
    use kiln::engine::{Engine, Options, RuleState};
    use std::time::Duration;
    let scene = Scene::new("sel-blind").await.with_widgets().await;
    let gold = json!({"metadata": {"labels": {"kiln.dev/tier": "gold"}}});
    support::edit(&scene.client, ("v1", "Namespace"), None, scene.ns(), gold).await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}))
        .await;
    let yaml = format!(
        "{}  deletion: {{ordered: true}}\n",
        widget_rule("guarded", GOLD)
    );
    let scene = scene.running(&[support::rule_from_yaml(&yaml)]).await;
    scene
        .until("the finalizer", widget_at("w"), |w| {
            w["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| !f.is_empty())
        })
        .await;
    scene
        .until("the child", configmap("guarded-w"), |_| true)
        .await;
    scene.engine().shutdown().await;

    // kiln restarts with a token that may do everything but list Namespaces
    // (it may read the Widget CRD, as `kiln rbac` grants: a CRD kiln may not
    // read makes the rule wait, not run on an unchecked schema).
    let rules = json!([
        {"apiGroups": ["test.kiln.dev"], "resources": ["widgets"], "verbs": ["get", "list", "watch", "patch", "update"]},
        {"apiGroups": ["test.kiln.dev"], "resources": ["widgets/status"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "resourceNames": ["widgets.test.kiln.dev"], "verbs": ["get", "list", "watch"]},
    ]);
    let token =
        support::service_account_token(&scene.client, scene.ns(), "no-ns-kiln", rules).await;
    let client = support::token_client(&token).await;
    let engine = Engine::new(
        client,
        Options {
            namespaces: vec![scene.ns().to_string()],
            kind_retry: Duration::from_millis(200),
            ..Options::default()
        },
    );
    engine.start(support::rule_from_yaml(&yaml));
    support::eventually(
        "the rule to run",
        crate::support::scene::CONVERGE,
        || async { (engine.state("guarded") == Some(RuleState::Running)).then_some(()) },
    )
    .await;

    let widgets = scene.api("test.kiln.dev/v1", "Widget").await;
    widgets
        .delete("w", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    let message = scene.refused("w", "Forbidden").await;
    assert!(message.contains("Namespace"), "{message}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let w = scene.get("test.kiln.dev/v1", "Widget", "w").await;
    assert!(
        w.is_some(),
        "the finalizer was let go on a Namespace cache kiln could not fill"
    );
    assert!(scene.get("v1", "ConfigMap", "guarded-w").await.is_some());
    engine.shutdown().await;
    scene.end().await;
}
