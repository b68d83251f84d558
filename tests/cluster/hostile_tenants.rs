//! Tenant boundaries: whoever writes a primary decides
//! values, not where kiln reads. A tenant who may only create primaries in
//! its own namespace cannot make kiln copy a Secret out of another one.

use serde_json::json;

use crate::support::rule_from_yaml;
use crate::support::scene::Scene;
use crate::support::{TestNamespace, apply};

const COPIER: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: copier}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  watches:
    - name: from
      apiVersion: v1
      kind: Secret
      ref:
        name: "{{ self.spec.from.name }}"
        namespace: "{{ self.spec.from.namespace }}"
      required: true
  children:
    - id: copy
      template:
        apiVersion: v1
        kind: Secret
        metadata: {name: "{{ self.metadata.name }}-copy"}
        data: "{{ related.from.data }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_make_kiln_copy_a_secret_out_of_another_namespace() {
    let scene = Scene::new("tenant-a").await.with_widgets().await;
    let victim = TestNamespace::new(&scene.client, "victim").await;
    let secret = |name: &str, value: &str| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {"password": value}});
    apply(
        &scene.client,
        secret("db", "victims-password"),
        Some(victim.name()),
    )
    .await;
    scene.apply(secret("own", "tenants-own")).await;
    let widget = |name: &str, from_ns: &str, from: &str| {
        json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": name},
               "spec": {"from": {"namespace": from_ns, "name": from}}})
    };
    scene.apply(widget("steal", victim.name(), "db")).await;
    let own_ns = scene.ns().to_string();
    scene.apply(widget("fine", &own_ns, "own")).await;
    // kiln can see the victim's namespace (as a cluster-wide kiln would).
    let scene = scene
        .also_watching(victim.name())
        .running(&[rule_from_yaml(COPIER)])
        .await;

    // Reading its own namespace works.
    scene
        .until(
            "the tenant's own copy",
            ("v1", "Secret", "fine-copy"),
            |s| s["data"]["password"] == "dGVuYW50cy1vd24=",
        )
        .await;
    // Pointing into another namespace is refused for that object.
    let message = scene.refused("steal", "NamespaceNotAllowed").await;
    assert!(
        message.contains(victim.name()) && message.contains("related.from"),
        "{message}"
    );
    assert!(
        scene.get("v1", "Secret", "steal-copy").await.is_none(),
        "the victim's Secret was copied"
    );
    victim.delete().await;
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_the_rule_allows_may_be_read() {
    let scene = Scene::new("tenant-b").await.with_widgets().await;
    let shared = TestNamespace::new(&scene.client, "shared").await;
    apply(
        &scene.client,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ca"}, "stringData": {"password": "public"}}),
        Some(shared.name()),
    )
    .await;
    scene
        .apply(
            json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"},
               "spec": {"from": {"namespace": shared.name(), "name": "ca"}}}),
        )
        .await;
    let allowing = COPIER.replace(
        "      required: true\n",
        &format!(
            "      required: true\n      allowNamespaces: [{}]\n",
            shared.name()
        ),
    );
    let scene = scene
        .also_watching(shared.name())
        .running(&[rule_from_yaml(&allowing)])
        .await;
    scene
        .until("the allowed copy", ("v1", "Secret", "w-copy"), |s| {
            s["data"]["password"] == "cHVibGlj"
        })
        .await;
    shared.delete().await;
    scene.end().await;
}
