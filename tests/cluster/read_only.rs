//! `spec.for.readOnly: true`, the shape of Kyverno's "generate from a
//! Rancher Cluster": a rule on a kind another controller owns makes its
//! children and writes nothing on the primary — no label, annotation,
//! condition, observedGeneration or finalizer — and the garbage collector
//! deletes the children with it.

use std::collections::BTreeSet;

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::rule_from_yaml;
use crate::support::scene::{Scene, configmap};

const CLUSTER: (&str, &str, &str) = ("provisioning.cattle.io/v1", "Cluster", "prod");

const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: rancher}
spec:
  for: {apiVersion: provisioning.cattle.io/v1, kind: Cluster, readOnly: true}
  children:
    - id: settings
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-settings"}
        data: {version: "{{ self.spec.kubernetesVersion }}"}
"#;

fn cluster(version: &str) -> Value {
    json!({"apiVersion": CLUSTER.0, "kind": CLUSTER.1,
        "metadata": {"name": CLUSTER.2, "labels": {"team": "a"}, "annotations": {"note": "theirs"}},
        "spec": {"kubernetesVersion": version}})
}

/// The field managers that wrote the object.
fn managers(obj: &Value) -> BTreeSet<&str> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_rule_makes_its_children_and_leaves_the_primary_as_others_wrote_it() {
    let scene = Scene::new("readonly")
        .await
        .with_crds("tests/fixtures/crds-rancher")
        .await;
    scene.apply(cluster("v1.30")).await;
    // Rancher's own status: its Ready and observedGeneration, one atomic list.
    let status = json!({"apiVersion": CLUSTER.0, "kind": CLUSTER.1, "status": {
        "observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": "False", "reason": "Provisioning",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    scene
        .api(CLUSTER.0, CLUSTER.1)
        .await
        .patch_status(
            CLUSTER.2,
            &PatchParams::apply("rancher").force(),
            &Patch::Apply(&status),
        )
        .await
        .unwrap();
    let before = scene.get(CLUSTER.0, CLUSTER.1, CLUSTER.2).await.unwrap();

    let scene = scene.running(&[rule_from_yaml(RULE)]).await;
    scene
        .until("the child", configmap("prod-settings"), |cm| {
            cm["data"]["version"] == "v1.30"
        })
        .await;
    assert_eq!(scene.writes_during_resync("rancher", 1).await, 0);
    let after = scene.get(CLUSTER.0, CLUSTER.1, CLUSTER.2).await.unwrap();
    assert_eq!(after, before, "byte for byte what the other writers left");

    // A new generation: the child follows; the primary's status stays
    // Rancher's (observedGeneration 1), nothing of kiln's on it.
    scene.apply(cluster("v1.31")).await;
    scene
        .until("the child to follow", configmap("prod-settings"), |cm| {
            cm["data"]["version"] == "v1.31"
        })
        .await;
    assert_eq!(scene.writes_during_resync("rancher", 1).await, 0);
    let now = scene.get(CLUSTER.0, CLUSTER.1, CLUSTER.2).await.unwrap();
    assert_eq!(now["status"], before["status"], "{now}");
    for field in ["labels", "annotations", "finalizers"] {
        assert_eq!(now["metadata"][field], before["metadata"][field], "{field}");
    }
    assert_eq!(
        managers(&now),
        BTreeSet::from([crate::support::MANAGER, "rancher"]),
        "{now}"
    );

    let explained = crate::support::kiln_explain(
        CLUSTER.0,
        CLUSTER.1,
        &format!("{}/{}", scene.ns(), CLUSTER.2),
        &[("rancher.yaml", RULE)],
    );
    let line = "rancher: spec.for.readOnly: kiln writes nothing on this object";
    assert!(explained.contains(line), "no `{line}` in:\n{explained}");

    // No finalizer holds it: the primary goes at once, and the garbage
    // collector deletes the child it owns (it learns a new CRD's kind at
    // its next discovery, up to 30 s on).
    scene
        .api(CLUSTER.0, CLUSTER.1)
        .await
        .delete(CLUSTER.2, &Default::default())
        .await
        .unwrap();
    let limit = std::time::Duration::from_secs(120);
    crate::support::until("the primary and its child gone", limit, || async {
        let primary = scene.get(CLUSTER.0, CLUSTER.1, CLUSTER.2).await;
        let child = scene.get("v1", "ConfigMap", "prod-settings").await;
        match (primary, child) {
            (None, None) => Ok(()),
            left => Err(format!("still there: {left:?}")),
        }
    })
    .await;
    scene.end().await;
}

/// The one kind of `outside` child a read-only primary may have: one left
/// to outlive it (`deletionPolicy: Orphan`), here cluster-scoped.
const ORPHAN_OUTSIDE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: viewer}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget, readOnly: true}
  children:
    - id: role
      outside: true
      deletionPolicy: Orphan
      template:
        apiVersion: rbac.authorization.k8s.io/v1
        kind: ClusterRole
        metadata: {name: "{{ self.metadata.namespace }}-{{ self.metadata.name }}-viewer"}
        rules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphaned_outside_child_is_repaired_when_edited_or_deleted() {
    let scene = Scene::new("orphan-outside").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}))
        .await;
    let scene = scene.running(&[rule_from_yaml(ORPHAN_OUTSIDE)]).await;
    let name = format!("{}-w-viewer", scene.ns());
    let role = ("rbac.authorization.k8s.io/v1", "ClusterRole");
    let verbs = |verb: &'static str| move |r: &Value| r["rules"][0]["verbs"] == json!([verb]);
    scene
        .until("the role", (role.0, role.1, &name), verbs("get"))
        .await;
    // Edited by someone: put back.
    crate::support::edit(
        &scene.client,
        role,
        None,
        &name,
        json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]}),
    )
    .await;
    scene
        .until("the role put back", (role.0, role.1, &name), verbs("get"))
        .await;
    // Deleted: made again.
    crate::support::delete(&scene.client, role, None, &name).await;
    scene
        .until("the role made again", (role.0, role.1, &name), verbs("get"))
        .await;
    crate::support::delete(&scene.client, role, None, &name).await;
    scene.end().await;
}
