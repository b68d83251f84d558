//! Secret values never appear in messages: a template that fails
//! on a value read from a Secret leaves no trace of it in the primary's
//! conditions or Events.

use serde_json::json;

use crate::support::scene::{CONVERGE, Scene, condition, widget_at};
use crate::support::{self, eventually, rule_from_yaml};

const LEAKY: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: leaky}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  watches:
    - {name: creds, apiVersion: v1, kind: Secret, ref: {name: creds}, required: true}
  children:
    - id: cm
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ related.creds.data.password | b64decode }}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_failing_on_a_secret_value_never_shows_it() {
    let scene = Scene::new("secrets").await.with_widgets().await;
    let value = "Hunter2-Secret";
    scene
        .apply(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "stringData": {"password": value}}))
        .await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}))
        .await;
    let scene = scene.running(&[rule_from_yaml(LEAKY)]).await;
    let w = scene
        .until("the failure", widget_at("w"), |w| {
            condition(w, "Reconciled")["status"] == "False"
        })
        .await;
    let events = eventually("a Warning Event", CONVERGE, || async {
        let hits = support::events_about(&scene.client, scene.ns(), "w", "Invalid").await;
        (!hits.is_empty()).then_some(hits)
    })
    .await;
    let status = w["status"].to_string();
    assert!(status.contains("[redacted]"), "{status}");
    let notes: Vec<String> = events.iter().filter_map(|e| e.note.clone()).collect();
    for text in std::iter::once(status).chain(notes) {
        assert!(!text.contains(value), "a Secret value in a message: {text}");
        assert!(!text.contains("SHVudGVyMi1TZWNyZXQ="), "{text}");
    }
    scene.end().await;
}

const QUOTED: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: quoted}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  watches:
    - {name: creds, apiVersion: v1, kind: Secret, ref: {name: creds}, required: true}
  children:
    - id: cm
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: "{{ self.metadata.name }}"
          labels:
            file: "{{ related.creds.data.file | b64decode }}"
            quote: "{{ related.creds.data.quote | b64decode }}"
"#;

/// The API server quotes an invalid value Go-style (`"...\n"`, `\"`): a
/// Secret value with a trailing newline (a Secret made `--from-file`) or a
/// quote is redacted in that form too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redaction_is_bypassed_by_quoting() {
    let scene = Scene::new("secrets-quoted").await.with_widgets().await;
    let (file, quote) = ("Hunter2-FromFile\n", "Quoted\"Secret-Value");
    scene
        .apply(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
            "stringData": {"file": file, "quote": quote}}),
        )
        .await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}))
        .await;
    let scene = scene.running(&[rule_from_yaml(QUOTED)]).await;
    let w = scene
        .until("the failure", widget_at("w"), |w| {
            condition(w, "Reconciled")["status"] == "False"
        })
        .await;
    let reason = condition(&w, "Reconciled")["reason"]
        .as_str()
        .unwrap()
        .to_string();
    let events = eventually("a Warning Event", CONVERGE, || async {
        let hits = support::events_about(&scene.client, scene.ns(), "w", &reason).await;
        (!hits.is_empty()).then_some(hits)
    })
    .await;
    let status = w["status"].to_string();
    assert!(status.contains("[redacted]"), "{status}");
    let notes: Vec<String> = events.iter().filter_map(|e| e.note.clone()).collect();
    for text in std::iter::once(status).chain(notes) {
        assert!(!text.contains("Hunter2-FromFile"), "a Secret value: {text}");
        assert!(!text.contains("Secret-Value"), "a Secret value: {text}");
    }
    scene.end().await;
}
