//! `history` on a child: of the children a rule no longer renders, the
//! newest `keep` of each class stay and the older ones kiln created are
//! pruned; an object kiln did not create, whatever labels it carries, is
//! neither counted nor deleted.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;

use crate::support::rule_from_yaml;
use crate::support::scene::{CONVERGE, Scene, configmap};

/// One ConfigMap per `spec.items` entry, `kind` from its name; history: the
/// newest `spec.keepOk` of the `ok` ones, the newest one of the others.
const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: hist}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: runs
      forEach: self.spec.items
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "run-{{ item }}"}
        data: {kind: "{{ 'ok' if item.startswith('ok') else 'bad' }}"}
      history:
        - when: child.data.kind == 'ok'
          keep: self.spec.keepOk
        - keep: 1
"#;

async fn widget(scene: &Scene, items: &[&str]) {
    scene
        .apply(
            json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"items": items, "keepOk": 2}}),
        )
        .await;
}

/// The ConfigMaps named `run-*` in the namespace.
async fn runs(scene: &Scene) -> BTreeSet<String> {
    let api = scene.api("v1", "ConfigMap").await;
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|cm| cm.metadata.name)
        .filter(|n| n.starts_with("run-"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_keeps_the_newest_of_each_class_and_never_a_strangers_object() {
    let scene = Scene::new("history").await.with_widgets().await;
    // Someone else's ConfigMap, older than all, with the labels kiln's
    // children carry: not kiln's, so never counted nor deleted.
    scene
        .apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "run-ok-stranger", "labels": {
                "kiln.dev/rule": "hist", "kiln.dev/child": "runs",
                "app.kubernetes.io/managed-by": "kiln"}},
            "data": {"kind": "ok"}}))
        .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let scene = scene.running(&[rule_from_yaml(RULE)]).await;
    // Made one after the other, a second apart; names sort against the
    // order they were made in, so only creation time can tell the newest.
    let mut items: Vec<&str> = Vec::new();
    for item in ["ok-d", "ok-c", "bad-b", "ok-b", "bad-a", "ok-a"] {
        items.push(item);
        widget(&scene, &items).await;
        scene
            .until("the run", configmap(&format!("run-{item}")), |_| true)
            .await;
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    // None rendered any more: the history decides.
    widget(&scene, &[]).await;
    let want: BTreeSet<String> = ["run-ok-a", "run-ok-b", "run-bad-a", "run-ok-stranger"]
        .map(String::from)
        .into();
    crate::support::until("history trimmed", CONVERGE, || async {
        let now = runs(&scene).await;
        if now == want {
            Ok(())
        } else {
            Err(format!("{now:?}"))
        }
    })
    .await;
    assert_eq!(scene.writes_during_resync("hist", 1).await, 0);
    assert_eq!(runs(&scene).await, want, "stable");
    scene.end().await;
}
