//! A rule's own Events and finalizer, as kubernetes/sample-controller and
//! Flux write theirs: `Synced` after a reconcile (once per generation, not
//! every resync), `ErrResourceExists` when a child's name is held by
//! someone else, and the finalizer under the rule's name for it.

use serde_json::{Value, json};

use crate::support::scene::{CONVERGE, Scene, configmap};
use crate::support::{events_about, eventually, rule_from_yaml};

const FOO: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: foo}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  deletion: {finalizer: samplecontroller.example.com/foo}
  events:
    - reason: Synced
      message: Foo synced successfully
    - reason: ErrResourceExists
      type: Warning
      when: outcome.reason == 'AlreadyExists'
      message: 'Resource "{{ self.metadata.name }}-dep" already exists and is not managed by Foo'
  children:
    - id: dep
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-dep"}
        data: {replicas: "{{ self.spec.replicas | default(1) | string }}"}
"#;

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

/// How many times the Event was told: 1, plus its series' count beyond.
fn times(event: &k8s_openapi::api::events::v1::Event) -> i32 {
    event.series.as_ref().map_or(1, |s| s.count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_records_its_own_events_and_holds_its_named_finalizer() {
    let scene = Scene::new("own-events").await.with_widgets().await;
    // Someone else's ConfigMap holds the name w2's child would take.
    scene
        .apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w2-dep"}, "data": {}}))
        .await;
    scene.apply(widget("w1", json!({}))).await;
    scene.apply(widget("w2", json!({}))).await;
    let scene = scene.running(&[rule_from_yaml(FOO)]).await;
    let (client, ns) = (scene.client.clone(), scene.ns().to_string());

    scene
        .until("w1's child", configmap("w1-dep"), |_| true)
        .await;
    let synced = eventually("Synced on w1", CONVERGE, || async {
        events_about(&client, &ns, "w1", "Synced").await.pop()
    })
    .await;
    assert_eq!(synced.note.as_deref(), Some("Foo synced successfully"));
    assert_eq!(synced.type_.as_deref(), Some("Normal"));
    let w1 = scene.get("test.kiln.dev/v1", "Widget", "w1").await.unwrap();
    assert_eq!(
        w1["metadata"]["finalizers"],
        json!(["samplecontroller.example.com/foo"])
    );

    let exists = eventually("ErrResourceExists on w2", CONVERGE, || async {
        events_about(&client, &ns, "w2", "ErrResourceExists")
            .await
            .pop()
    })
    .await;
    assert_eq!(exists.type_.as_deref(), Some("Warning"));
    assert_eq!(
        exists.note.as_deref(),
        Some(r#"Resource "w2-dep" already exists and is not managed by Foo"#)
    );
    assert!(events_about(&client, &ns, "w2", "Synced").await.is_empty());

    // A resync of a steady primary tells nothing again.
    scene.writes_during_resync("foo", 2).await;
    let again = events_about(&client, &ns, "w1", "Synced").await;
    assert_eq!(again.iter().map(times).sum::<i32>(), 1, "{again:?}");

    // A new generation is synced, and told again.
    scene.apply(widget("w1", json!({"replicas": 3}))).await;
    scene
        .until("w1's child follows", configmap("w1-dep"), |c| {
            c["data"]["replicas"] == "3"
        })
        .await;
    eventually("Synced told for the new generation", CONVERGE, || async {
        let told: i32 = events_about(&client, &ns, "w1", "Synced")
            .await
            .iter()
            .map(times)
            .sum();
        (told == 2).then_some(())
    })
    .await;

    // Deleting w1: kiln deletes its child, then lets go of its finalizer.
    scene.delete_widget("w1", CONVERGE).await;
    assert!(scene.get("v1", "ConfigMap", "w1-dep").await.is_none());
    scene.end().await;
}
