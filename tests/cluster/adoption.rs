//! A tenant deletes another tenant's namespace: a "one namespace per
//! Team" rule whose `outside` Namespace child adopts an existing one. The
//! tenant names its primary after someone else's namespace; kiln must not
//! take it over, nor delete it when the tenant deletes its primary. Only
//! what the rule author lists (`adoptNames`) is taken over.

use std::time::Duration;

use serde_json::json;

use crate::support::scene::{CONVERGE, Scene};
use crate::support::{self, eventually, rule_from_yaml};

/// One Namespace per Widget, named after it; existing ones are taken over,
/// within the rule's list.
fn rule(legacy: &str) -> String {
    format!(
        r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: team-space}}
spec:
  for: {{apiVersion: test.kiln.dev/v1, kind: Widget}}
  children:
    - id: space
      outside: true
      adopt: true
      adoptNames: [{legacy}]
      template:
        apiVersion: v1
        kind: Namespace
        metadata:
          name: "{{{{ self.metadata.name }}}}"
          labels: {{team: "{{{{ self.metadata.name }}}}"}}
"#
    )
}

async fn namespace(scene: &Scene, name: &str) -> serde_json::Value {
    support::get(&scene.client, "v1", "Namespace", "", name)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_delete_another_tenants_namespace() {
    let scene = Scene::new("adopt").await.with_widgets().await;
    let victim = format!("{}-victim", scene.ns());
    let legacy = format!("{}-legacy", scene.ns());
    for name in [&victim, &legacy] {
        support::apply(
            &scene.client,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
            None,
        )
        .await;
    }
    let widget = |name: &str| {
        json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": {}})
    };
    // The tenant names its Widget after the victim's namespace.
    scene.apply(widget(&victim)).await;
    scene.apply(widget(&legacy)).await;
    let scene = scene.running(&[rule_from_yaml(&rule(&legacy))]).await;

    // What the rule author listed is taken over...
    eventually("the legacy namespace taken over", CONVERGE, || async {
        let ns = namespace(&scene, &legacy).await;
        (ns["metadata"]["labels"]["team"] == legacy.as_str()).then_some(())
    })
    .await;
    // ...what the tenant names is not, and the primary says which bound.
    let message = scene.refused(&victim, "AlreadyExists").await;
    assert!(message.contains("`adoptNames`"), "{message}");
    let ns = namespace(&scene, &victim).await;
    assert!(ns["metadata"]["labels"]["kiln.dev/rule"].is_null(), "{ns}");
    assert!(ns["metadata"]["labels"]["team"].is_null(), "{ns}");

    // The tenant deletes its Widget: the victim's namespace stays; the
    // legacy one, kiln's now, goes with its Widget.
    for name in [&victim, &legacy] {
        scene.delete_widget(name, support::PATIENCE).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ns = namespace(&scene, &victim).await;
    assert!(
        ns["metadata"]["deletionTimestamp"].is_null(),
        "the victim's namespace is being deleted: {ns}"
    );
    support::delete(&scene.client, ("v1", "Namespace"), None, &victim).await;
    scene.end().await;
}
