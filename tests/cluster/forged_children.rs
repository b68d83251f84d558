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
    support::delete(
        &scene.client,
        ("test.kiln.dev/v1", "Widget"),
        Some(&victim_ns),
        "db",
    )
    .await;
    eventually("the victim gone", Duration::from_secs(30), || async {
        scene
            .get("test.kiln.dev/v1", "Widget", "db")
            .await
            .is_none()
            .then_some(())
    })
    .await;
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
