//! A tenant plants objects carrying kiln's mark for another tenant's
//! primary in its own namespace (labels and annotations anyone can copy;
//! uids are no secret). They are not that primary's children: never read
//! by its templates, never waited for when it goes.

use std::time::Duration;

use serde_json::json;

use crate::support::scene::Scene;
use crate::support::{self, eventually, rule_from_yaml};

/// A Widget keeps a password in a child it reads back, and deletes its
/// children in order when it goes.
const KEEPER: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: keeper}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  deletion: {ordered: true}
  children:
    - id: creds
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-creds"}
        data:
          password: >-
            {{ children.creds.data.password
               if children.creds.data.password is defined
               else 'drawn-by-kiln' }}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_children_across_namespaces_are_neither_read_nor_waited_for() {
    let scene = Scene::new("forged").await.with_widgets().await;
    let victim_ns = scene.ns().to_string();
    let attacker_ns = format!("{victim_ns}-evil");
    support::apply(
        &scene.client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": attacker_ns}}),
        None,
    )
    .await;
    let victim = scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": "db"}, "spec": {}}))
        .await;
    let uid = victim["metadata"]["uid"].as_str().unwrap();
    // The attacker's ConfigMaps, in its own namespace: one marked as the
    // victim's orphaned `creds` (never pruned), one as its `outside`
    // child, with a finalizer of its own.
    let plants = [
        (
            "db-creds",
            json!({}),
            json!({"kiln.dev/primary-uid": uid, "kiln.dev/primary-name": "db"}),
        ),
        (
            "db-hold",
            json!({"kiln.dev/owner-uid": uid}),
            json!({"kiln.dev/owner": format!("test.kiln.dev/v1 Widget {victim_ns}/db")}),
        ),
    ];
    for (name, owner, annotations) in &plants {
        let mut labels = json!({"kiln.dev/rule": "keeper", "kiln.dev/child": "creds"});
        labels
            .as_object_mut()
            .unwrap()
            .extend(owner.as_object().unwrap().clone());
        support::apply(
            &scene.client,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "labels": labels, "annotations": annotations,
                    "finalizers": ["evil.example/hold"]},
                "data": {"password": "attackers-password"}}),
            Some(&attacker_ns),
        )
        .await;
    }
    let scene = scene
        .also_watching(&attacker_ns)
        .running(&[rule_from_yaml(KEEPER)])
        .await;
    let creds = scene
        .until(
            "the victim's creds",
            ("v1", "ConfigMap", "db-creds"),
            |_| true,
        )
        .await;
    assert_eq!(creds["data"]["password"], "drawn-by-kiln", "{creds}");

    // The victim goes: kiln deletes its own child and lets it go, without
    // waiting for the planted object.
    scene.delete_widget("db", support::PATIENCE).await;
    for (name, _, _) in &plants {
        let planted = support::get(&scene.client, "v1", "ConfigMap", &attacker_ns, name)
            .await
            .unwrap();
        assert!(
            planted["metadata"]["deletionTimestamp"].is_null(),
            "{name}: not kiln's to delete"
        );
        support::edit(
            &scene.client,
            ("v1", "ConfigMap"),
            Some(&attacker_ns),
            name,
            json!({"metadata": {"finalizers": null}}),
        )
        .await;
    }
    support::delete(&scene.client, ("v1", "Namespace"), None, &attacker_ns).await;
    scene.end().await;
}

/// A Widget keeps a password in an `outside` child, in a namespace of its
/// own, and reads it back.
const OUTSIDE_KEEPER: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: keeper}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: creds
      outside: true
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: "{{ self.metadata.name }}-creds"
          namespace: "{{ self.metadata.namespace }}-space"
        data:
          password: >-
            {{ children.creds.data.password
               if children.creds.data.password is defined
               else 'drawn-by-kiln' }}
"#;

/// An object labelled and annotated as `keeper`'s child `creds`, for the
/// primary `uid`, as the `placement` says (`outside` or `owned`), with a
/// finalizer of its own and the attacker's password.
fn planted(name: &str, placement: &str, uid: &str, owner: &str) -> serde_json::Value {
    let mut meta = json!({"name": name,
        "labels": {"kiln.dev/rule": "keeper", "kiln.dev/child": "creds"},
        "finalizers": ["evil.example/hold"]});
    if placement == "outside" {
        meta["labels"]["kiln.dev/owner-uid"] = json!(uid);
        meta["annotations"] = json!({"kiln.dev/owner": owner});
    } else {
        meta["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Namespace",
            "name": owner, "uid": uid, "controller": true}]);
    }
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
        "data": {"password": "attackers-password"}})
}

/// Lets a planted object go (its finalizer), then its namespace.
async fn clear(scene: &Scene, namespace: &str, name: &str) {
    support::edit(
        &scene.client,
        ("v1", "ConfigMap"),
        Some(namespace),
        name,
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
}

async fn namespace(scene: &Scene, name: &str, labels: serde_json::Value) -> serde_json::Value {
    support::apply(
        &scene.client,
        json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}}),
        None,
    )
    .await
}

/// The same attack on an `outside` child: the planted object, in the
/// attacker's namespace, names the victim's primary and carries the very
/// name of its child. It is not read, and the victim goes without waiting
/// for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_outside_children_are_neither_read_nor_waited_for() {
    let scene = Scene::new("forged-out").await.with_widgets().await;
    let victim_ns = scene.ns().to_string();
    let (attacker_ns, space) = (format!("{victim_ns}-evil"), format!("{victim_ns}-space"));
    for ns in [&attacker_ns, &space] {
        namespace(&scene, ns, json!({})).await;
    }
    let victim = scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": "db"}, "spec": {}}))
        .await;
    let uid = victim["metadata"]["uid"].as_str().unwrap();
    let owner = format!("test.kiln.dev/v1 Widget {victim_ns}/db");
    support::apply(
        &scene.client,
        planted("db-creds", "outside", uid, &owner),
        Some(&attacker_ns),
    )
    .await;
    let scene = scene
        .also_watching(&attacker_ns)
        .also_watching(&space)
        .running(&[rule_from_yaml(OUTSIDE_KEEPER)])
        .await;
    let creds = eventually("the victim's creds", support::PATIENCE, || async {
        support::get(&scene.client, "v1", "ConfigMap", &space, "db-creds").await
    })
    .await;
    assert_eq!(creds["data"]["password"], "drawn-by-kiln", "{creds}");
    scene.ready("db").await;

    scene.delete_widget("db", support::PATIENCE).await;
    let plant = support::get(&scene.client, "v1", "ConfigMap", &attacker_ns, "db-creds")
        .await
        .unwrap();
    assert!(
        plant["metadata"]["deletionTimestamp"].is_null(),
        "not kiln's to delete: {plant}"
    );
    clear(&scene, &attacker_ns, "db-creds").await;
    for ns in [&attacker_ns, &space] {
        support::delete(&scene.client, ("v1", "Namespace"), None, ns).await;
    }
    scene.end().await;
}

/// A Namespace (cluster-scoped) keeps a password in a child in itself.
fn namespace_keeper(team: &str) -> String {
    format!(
        r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: keeper}}
spec:
  for:
    apiVersion: v1
    kind: Namespace
    selector: {{matchLabels: {{forged-team: "{team}"}}}}
  children:
    - id: creds
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: creds
          namespace: "{{{{ self.metadata.name }}}}"
        data:
          password: >-
            {{{{ children.creds.data.password
               if children.creds.data.password is defined
               else 'drawn-by-kiln' }}}}
"#
    )
}

/// A cluster-scoped primary's children: an object in the attacker's
/// namespace with an owner reference to the victim's Namespace (its uid)
/// and kiln's labels is not its child: never read, never pruned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_children_of_a_cluster_scoped_primary_are_not_read() {
    let scene = Scene::new("forged-cs").await;
    let attacker_ns = scene.ns().to_string();
    let team = format!("{attacker_ns}-team");
    let primary = namespace(&scene, &team, json!({"forged-team": team})).await;
    let uid = primary["metadata"]["uid"].as_str().unwrap();
    support::apply(
        &scene.client,
        planted("creds", "owned", uid, &team),
        Some(&attacker_ns),
    )
    .await;
    let scene = scene
        .also_watching(&team)
        .running(&[rule_from_yaml(&namespace_keeper(&team))])
        .await;
    let creds = eventually("the team's creds", support::PATIENCE, || async {
        support::get(&scene.client, "v1", "ConfigMap", &team, "creds").await
    })
    .await;
    assert_eq!(creds["data"]["password"], "drawn-by-kiln", "{creds}");
    // Looked at again (a label on the primary): still the same, and the
    // planted object is untouched.
    namespace(&scene, &team, json!({"forged-team": team, "again": "yes"})).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let creds = support::get(&scene.client, "v1", "ConfigMap", &team, "creds")
        .await
        .unwrap();
    assert_eq!(creds["data"]["password"], "drawn-by-kiln", "{creds}");
    let plant = support::get(&scene.client, "v1", "ConfigMap", &attacker_ns, "creds")
        .await
        .unwrap();
    assert!(plant["metadata"]["deletionTimestamp"].is_null(), "{plant}");
    clear(&scene, &attacker_ns, "creds").await;
    support::delete(&scene.client, ("v1", "Namespace"), None, &team).await;
    scene.end().await;
}
