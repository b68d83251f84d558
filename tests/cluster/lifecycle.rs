//! Child lifecycle: `updatePolicy: CreateOnce` creates a
//! child and then leaves it to its users; `deletionPolicy: Orphan` leaves a
//! child behind when its primary goes or stops rendering it. And the
//! ported Kyverno `add-networkpolicy` example built on them.

use std::time::Duration;

use kiln::engine::{Engine, Options};

use serde_json::{Value, json};

use crate::support::scene::{CONVERGE, Scene, configmap, widget_at};
use crate::support::{self, eventually};

const ONCE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: once}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: defaults
      updatePolicy: CreateOnce
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
        data: {value: "{{ self.spec.value }}"}
  status:
    fields:
      value: "{{ self.spec.value }}"
"#;

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

/// A user's edit of a ConfigMap's `data.value` in the scene's namespace.
async fn edit_value(scene: &Scene, name: &str, value: &str) -> Value {
    let patch = json!({"data": {"value": value}});
    support::edit(
        &scene.client,
        ("v1", "ConfigMap"),
        Some(scene.ns()),
        name,
        patch,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_once_child_keeps_a_users_edit_and_ignores_a_new_render() {
    let scene = Scene::new("life-once").await.with_widgets().await;
    scene.apply(widget("w", json!({"value": "first"}))).await;
    let scene = scene.running(&[support::rule_from_yaml(ONCE)]).await;
    scene
        .until("the child created", configmap("w"), |c| {
            c["data"]["value"] == "first"
        })
        .await;
    scene.ready("w").await;

    // A user changes it: kiln does not put its value back, not on a resync
    // either, and writes nothing.
    let edited = edit_value(&scene, "w", "the user's").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(scene.writes_during_resync("once", 1).await, 0);

    // The render changes (the primary's spec): the child is still not
    // written; the primary's status follows the new spec.
    scene.apply(widget("w", json!({"value": "second"}))).await;
    scene
        .until("the new status", widget_at("w"), |w| {
            w["status"]["value"] == "second"
        })
        .await;
    let child = scene.get("v1", "ConfigMap", "w").await.unwrap();
    assert_eq!(child["data"]["value"], "the user's");
    assert_eq!(
        child["metadata"]["resourceVersion"], edited["metadata"]["resourceVersion"],
        "the child was written"
    );
    scene.ready("w").await;

    // kiln explain says so, and writes nothing.
    let explained = support::kiln_explain(
        "test.kiln.dev/v1",
        "Widget",
        &format!("{}/w", scene.ns()),
        &[("once.yaml", ONCE)],
    );
    assert!(
        explained.contains(
            "    defaults ConfigMap w: created once: kiln does not write it again, ready"
        ),
        "{explained}"
    );

    // Level-based: a created-once child someone deletes is created again,
    // from what the rule renders now.
    support::delete(&scene.client, ("v1", "ConfigMap"), Some(scene.ns()), "w").await;
    scene
        .until("the child created again", configmap("w"), |c| {
            c["data"]["value"] == "second" && c["metadata"]["deletionTimestamp"].is_null()
        })
        .await;
    scene.end().await;
}

const ORPHAN: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: orphan}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: kept
      deletionPolicy: Orphan
      when: self.spec.keep
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-kept"}
        data: {value: "{{ self.spec.value }}"}
    - id: owned
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-owned"}
  requeue: {waiting: 1s}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphaned_child_outlives_its_when_and_its_primary() {
    let scene = Scene::new("life-orphan").await.with_widgets().await;
    scene
        .apply(widget("w", json!({"keep": true, "value": "a"})))
        .await;
    let scene = scene.running(&[support::rule_from_yaml(ORPHAN)]).await;
    let kept = scene
        .until("the orphan child", configmap("w-kept"), |_| true)
        .await;
    assert!(
        kept["metadata"].get("ownerReferences").is_none(),
        "{}",
        kept["metadata"]
    );
    assert_eq!(kept["metadata"]["labels"]["kiln.dev/rule"], "orphan");
    assert_eq!(kept["metadata"]["labels"]["kiln.dev/child"], "kept");
    assert_eq!(
        kept["metadata"]["annotations"]["kiln.dev/primary-name"],
        "w"
    );
    let owned = scene
        .until("the owned child", configmap("w-owned"), |_| true)
        .await;
    assert_eq!(owned["metadata"]["ownerReferences"][0]["name"], "w");
    scene.ready("w").await;

    // Still managed while rendered: kiln finds it without an owner
    // reference (no AlreadyExists) and keeps it as rendered.
    scene
        .apply(widget("w", json!({"keep": true, "value": "b"})))
        .await;
    scene
        .until("the orphan child updated", configmap("w-kept"), |c| {
            c["data"]["value"] == "b"
        })
        .await;
    assert_eq!(scene.writes_during_resync("orphan", 1).await, 0);

    // kiln explain finds it as the widget's child, without an owner reference.
    let explained = support::kiln_explain(
        "test.kiln.dev/v1",
        "Widget",
        &format!("{}/w", scene.ns()),
        &[("orphan.yaml", ORPHAN)],
    );
    assert!(
        explained.contains("    kept ConfigMap w-kept: applied, ready"),
        "{explained}"
    );

    // `when` turns false: an orphan is not pruned.
    scene
        .apply(widget("w", json!({"keep": false, "value": "b"})))
        .await;
    scene
        .until("the new generation reconciled", widget_at("w"), |w| {
            w["status"]["observedGeneration"] == w["metadata"]["generation"]
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        scene.get("v1", "ConfigMap", "w-kept").await.is_some(),
        "the orphan was pruned"
    );

    // The primary goes: the garbage collector takes the owned child and
    // leaves the orphan.
    delete_and_collect(&scene, "w").await;
    let left = scene.get("v1", "ConfigMap", "w-kept").await;
    assert!(left.is_some(), "the orphan went with its primary");
    scene.end().await;
}

/// [`ORPHAN`] with its `kept` child created once, under `policy`.
fn once_kept(policy: &str) -> String {
    let kept = format!("      updatePolicy: CreateOnce\n      deletionPolicy: {policy}\n");
    ORPHAN.replace("name: orphan}", "name: once-kept}").replace(
        "      deletionPolicy: Orphan\n      when: self.spec.keep\n",
        &kept,
    )
}

/// Deletes widget `name` and waits until the garbage collector took its
/// owned child (`<name>-owned`), so it has had its say on the others.
async fn delete_and_collect(scene: &Scene, name: &str) {
    let widget = ("test.kiln.dev/v1", "Widget");
    support::delete(&scene.client, widget, Some(scene.ns()), name).await;
    // (The collector learns a new CRD's kind on its own schedule: up to a minute.)
    let owned = format!("{name}-owned");
    eventually("the owned child collected", support::PATIENCE, || async {
        scene
            .get("v1", "ConfigMap", &owned)
            .await
            .is_none()
            .then_some(())
    })
    .await;
}

/// A created-once child is never applied again, yet its ownership follows
/// the rule's `deletionPolicy`: `Delete` → `Orphan` removes the owner
/// reference (else the garbage collector deletes the child the rule author
/// asked to keep), `Orphan` → `Delete` adds it; a user's edit stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_once_child_follows_a_changed_deletion_policy() {
    let scene = Scene::new("life-reown").await.with_widgets().await;
    let w = scene.apply(widget("w", json!({"value": "a"}))).await;
    let scene = scene
        .running(&[support::rule_from_yaml(&once_kept("Delete"))])
        .await;
    scene
        .until("the owned created-once child", configmap("w-kept"), |c| {
            c["metadata"]["ownerReferences"][0]["uid"] == w["metadata"]["uid"]
        })
        .await;
    scene.ready("w").await;
    edit_value(&scene, "w-kept", "the user's").await;

    // The rule now says Orphan: only the ownership changes.
    let orphan = once_kept("Orphan");
    scene
        .engine()
        .replace(support::rule_from_yaml(&orphan))
        .await;
    let kept = scene
        .until("the owner reference gone", configmap("w-kept"), |c| {
            c["metadata"].get("ownerReferences").is_none()
        })
        .await;
    assert_eq!(
        kept["metadata"]["annotations"]["kiln.dev/primary-uid"],
        w["metadata"]["uid"]
    );
    assert_eq!(
        kept["metadata"]["annotations"]["kiln.dev/primary-name"],
        "w"
    );
    assert_eq!(kept["data"]["value"], "the user's", "{kept}");
    assert_eq!(scene.writes_during_resync("once-kept", 1).await, 0);

    // A widget made under the Orphan rule, then the rule says Delete again.
    let v = scene.apply(widget("v", json!({"value": "b"}))).await;
    scene
        .until("the orphan created-once child", configmap("v-kept"), |c| {
            c["metadata"]["annotations"]["kiln.dev/primary-uid"] == v["metadata"]["uid"]
        })
        .await;
    scene
        .engine()
        .replace(support::rule_from_yaml(&once_kept("Delete")))
        .await;
    let owned = scene
        .until("the owner reference added", configmap("v-kept"), |c| {
            c["metadata"]["ownerReferences"][0]["uid"] == v["metadata"]["uid"]
        })
        .await;
    assert!(
        owned["metadata"]["annotations"]
            .get("kiln.dev/primary-uid")
            .is_none(),
        "{}",
        owned["metadata"]
    );
    // `w-kept` was orphaned while the rule said so; now the rule says
    // Delete again, and it gets its reference back too: the policy in force
    // decides. So both go with their primaries.
    scene
        .until("w-kept owned again", configmap("w-kept"), |c| {
            c["metadata"]["ownerReferences"][0]["uid"] == w["metadata"]["uid"]
        })
        .await;
    delete_and_collect(&scene, "v").await;
    eventually("v-kept collected", support::PATIENCE, || async {
        scene
            .get("v1", "ConfigMap", "v-kept")
            .await
            .is_none()
            .then_some(())
    })
    .await;

    // Orphan once more, then the primary goes: the child stays.
    scene
        .engine()
        .replace(support::rule_from_yaml(&orphan))
        .await;
    scene
        .until("w-kept orphaned again", configmap("w-kept"), |c| {
            c["metadata"].get("ownerReferences").is_none()
        })
        .await;
    delete_and_collect(&scene, "w").await;
    let left = scene.get("v1", "ConfigMap", "w-kept").await;
    assert!(
        left.is_some(),
        "the created-once child went with its primary"
    );
    assert_eq!(left.unwrap()["data"]["value"], "the user's");
    scene.end().await;
}

/// The ported Kyverno policy (`rules/default-network-policy.yaml`): each
/// opted-in Namespace gets `default-deny` once; a user's edit stays; an
/// excluded Namespace gets nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kyverno_default_deny_is_generated_once_per_namespace_and_exclusions_hold() {
    let client = support::admin_client().await;
    let id = std::process::id();
    let (taken, excluded) = (
        format!("kiln-ddeny-{id}"),
        format!("kiln-ddeny-excluded-{id}"),
    );
    // The shipped exclusions, plus one namespace of this test's own.
    let rule = support::shipped_rule("default-network-policy", |text| {
        text.replace("default]", &format!("default, {excluded}]"))
    });
    for name in [&taken, &excluded] {
        support::apply(
            &client,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name,
                "labels": {"kiln.dev/network": "default-deny", support::TEST_LABEL: "true"}}}),
            None,
        )
        .await;
    }
    // Namespaces are cluster-scoped: this engine watches every namespace.
    let (engine_client, writes) = support::counting_client().await;
    let engine = Engine::new(engine_client, Options::default());
    engine.start(rule);
    let policy = eventually("default-deny in the namespace", CONVERGE, || async {
        default_deny(&client, &taken).await
    })
    .await;
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(policy["spec"]["podSelector"], json!({}));

    // The namespace's users open ingress: kiln leaves their policy alone.
    let patch = json!({"spec": {"policyTypes": ["Egress"]}});
    let netpol = ("networking.k8s.io/v1", "NetworkPolicy");
    support::edit(&client, netpol, Some(&taken), "default-deny", patch).await;
    support::settled("kiln's writes", || writes.get()).await;
    let before = writes.get();
    let reconciles = support::counts::reconciles(&engine);
    engine.resync("default-network-policy");
    eventually("the resync", support::PATIENCE, || async {
        (support::counts::reconciles(&engine) > reconciles).then_some(())
    })
    .await;
    support::settled("the resync's writes", || writes.get()).await;
    let kept = default_deny(&client, &taken).await.unwrap();
    assert_eq!(
        kept["spec"]["policyTypes"],
        json!(["Egress"]),
        "the user's edit was reverted"
    );
    assert_eq!(
        writes.get() - before,
        0,
        "a created-once policy was written again"
    );

    // Excluded namespaces get nothing.
    for ns in [excluded.as_str(), "kube-system"] {
        let none = default_deny(&client, ns).await;
        assert!(none.is_none(), "{ns} got a default-deny policy");
    }
    engine.shutdown().await;
    for name in [&taken, &excluded] {
        let _ = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .delete(name, &Default::default())
            .await;
    }
}

/// The `default-deny` NetworkPolicy in `ns`, if there is one.
async fn default_deny(client: &kube::Client, ns: &str) -> Option<Value> {
    support::get(
        client,
        "networking.k8s.io/v1",
        "NetworkPolicy",
        ns,
        "default-deny",
    )
    .await
}
