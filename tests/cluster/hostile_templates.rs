//! A runaway template against `kiln run`: it fails for its own object, and
//! the process goes on serving every other object.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{self, KilnProcess, TestNamespace};

const CONVERGE: Duration = support::PATIENCE;

/// A rule whose template nests a list about 140,000 levels deep, but only
/// for a Widget that asks for it: `kiln validate` accepts it. Without its
/// own stack, dropping that list overflows the stack and aborts kiln.
fn hostile_rule() -> String {
    let nest = format!("{}ns.x{}", "[".repeat(70), "]".repeat(70));
    let template = format!(
        "{{% macro value(w) %}}{{% if w.spec.hostile | default(false) %}}\
         {{% set ns = namespace(x=1) %}}{{% for i in range(2000) %}}{{% set ns.x = {nest} %}}{{% endfor %}}\
         {{{{ ns.x | length }}}}{{% endif %}}{{{{ w.spec.value }}}}{{% endmacro %}}{{{{ value(self) }}}}"
    );
    format!(
        r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: widgets}}
spec:
  for: {{apiVersion: test.kiln.dev/v1, kind: Widget}}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: "{{{{ self.metadata.name }}}}"}}
        data: {{value: {template}}}
"#,
        template = serde_json::to_string(&template).unwrap()
    )
}

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

/// Like `support::eventually`, but fails at once if kiln exits meanwhile.
async fn while_alive<T, Fut>(
    kiln: &mut KilnProcess,
    what: &str,
    mut check: impl FnMut() -> Fut,
) -> T
where
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + CONVERGE;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        if let Some(status) = kiln.child.try_wait().unwrap() {
            panic!("kiln exited ({status}) while waiting for {what}");
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn condition<'a>(obj: &'a Value, kind: &str) -> &'a Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_template_fails_for_its_object_and_kiln_keeps_running() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "hostile").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let rule = hostile_rule();
    let mut kiln = support::KilnProcess::start(&rule, &["--namespace", n]);

    support::apply(
        &client,
        widget("bad", json!({"value": "b", "hostile": true})),
        Some(n),
    )
    .await;
    support::apply(&client, widget("good", json!({"value": "g"})), Some(n)).await;

    let child = while_alive(&mut kiln, "the good primary's child", || async {
        support::get(&client, "v1", "ConfigMap", n, "good").await
    })
    .await;
    assert_eq!(child["data"]["value"], "g");

    let bad = while_alive(&mut kiln, "the bad primary to fail", || async {
        support::get(&client, "test.kiln.dev/v1", "Widget", n, "bad")
            .await
            .filter(|w| condition(w, "Reconciled")["status"] == "False")
    })
    .await;
    let reconciled = condition(&bad, "Reconciled");
    assert_eq!(reconciled["reason"], "TemplateError", "{reconciled}");
    let message = reconciled["message"].as_str().unwrap_or_default();
    assert!(message.contains("nested too deeply"), "{message}");
    assert!(message.contains("64 levels"), "{message}");
    assert!(
        support::get(&client, "v1", "ConfigMap", n, "bad")
            .await
            .is_none()
    );
    assert!(
        kiln.child.try_wait().unwrap().is_none(),
        "kiln must keep running"
    );

    kiln.terminate();
    let status = kiln.exited(support::PATIENCE).await;
    assert!(status.success(), "{status}");
    ns.delete().await;
}
