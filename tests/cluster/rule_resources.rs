//! Rules as Kubernetes resources: a `Rule` applied runs and says so in its
//! status, an invalid edit is refused while the previous generation keeps
//! running, and a deleted Rule stops.

use std::time::Duration;

use kiln::reload::ReloadOptions;
use serde_json::{Value, json};

use crate::reload::{From, Harness, wait_cm, widget};
use crate::support::{self, TestNamespace, eventually};

const CONVERGE: Duration = Duration::from_secs(30);
const RULE: (&str, &str) = ("kiln.dev/v1alpha1", "Rule");

fn rule_object(name: &str, children: Value) -> Value {
    json!({
        "apiVersion": "kiln.dev/v1alpha1",
        "kind": "Rule",
        "metadata": {"name": name},
        "spec": {"for": {"apiVersion": "test.kiln.dev/v1", "kind": "Widget"}, "children": children},
    })
}

fn child(key: &str) -> Value {
    json!([{"id": "one", "template": {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "{{ self.metadata.name }}-one"},
        "data": {"key": key},
    }}])
}

async fn rule_status(client: &kube::Client, name: &str) -> Value {
    support::get(client, RULE.0, RULE.1, "", name)
        .await
        .map(|r| r["status"].clone())
        .unwrap_or(Value::Null)
}

fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_resource_runs_refuses_an_invalid_edit_and_stops_when_deleted() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "ruleres").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    support::install_crds(&client, "charts/kiln/crds").await;
    let name = format!("{n}-widgets");
    let options = ReloadOptions {
        allow_empty: true,
        recheck: Duration::from_millis(500),
        ..ReloadOptions::default()
    };
    let h = Harness::start(n, From::Resources, options).await;
    support::apply(&client, widget("a"), Some(n)).await;

    // Applied: it runs, its child is made, its status says so.
    support::apply(&client, rule_object(&name, child("first")), None).await;
    h.running(&name).await;
    let cm = wait_cm(&client, n, "a-one").await;
    assert_eq!(cm["data"]["key"], "first");
    let status = eventually("Rule Ready", CONVERGE, || async {
        let s = rule_status(&client, &name).await;
        (condition(&s, "Ready")["status"] == "True").then_some(s)
    })
    .await;
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(condition(&status, "Refused")["status"], "False");

    // An invalid edit: refused with the diagnostic, generation 1 keeps running.
    let mut bad = child("second");
    bad[0]["tempalte"] = bad[0]["template"].take();
    support::apply(&client, rule_object(&name, bad), None).await;
    let status = eventually("Rule Refused", CONVERGE, || async {
        let s = rule_status(&client, &name).await;
        (condition(&s, "Refused")["status"] == "True").then_some(s)
    })
    .await;
    let refused = condition(&status, "Refused")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(refused.contains(&format!("rule/{name}")), "{refused}");
    assert!(refused.contains("children"), "{refused}");
    assert_eq!(condition(&status, "Ready")["status"], "False");
    assert_eq!(condition(&status, "Ready")["reason"], "Refused");
    assert_eq!(status["observedGeneration"], 1, "generation 1 runs");
    // The running version still makes children: a new primary gets the old one.
    support::apply(&client, widget("b"), Some(n)).await;
    let cm = wait_cm(&client, n, "b-one").await;
    assert_eq!(cm["data"]["key"], "first");

    // Nothing changed: the status is not written again.
    let rv = |o: Option<Value>| o.unwrap()["metadata"]["resourceVersion"].clone();
    let before = rv(support::get(&client, RULE.0, RULE.1, "", &name).await);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rv(support::get(&client, RULE.0, RULE.1, "", &name).await);
    assert_eq!(before, after, "the Rule was written though nothing changed");

    // A valid edit runs as generation 3.
    support::apply(&client, rule_object(&name, child("third")), None).await;
    eventually("child follows generation 3", CONVERGE, || async {
        let cm = support::get(&client, "v1", "ConfigMap", n, "a-one").await?;
        (cm["data"]["key"] == "third").then_some(())
    })
    .await;
    eventually("Rule Ready at generation 3", CONVERGE, || async {
        let s = rule_status(&client, &name).await;
        (condition(&s, "Ready")["status"] == "True" && s["observedGeneration"] == 3).then_some(())
    })
    .await;

    // Deleted: the rule stops.
    support::delete(&client, RULE, None, &name).await;
    eventually("rule stopped", CONVERGE, || async {
        h.engine.state(&name).is_none().then_some(())
    })
    .await;
    support::apply(&client, widget("c"), Some(n)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        support::get(&client, "v1", "ConfigMap", n, "c-one")
            .await
            .is_none(),
        "a deleted Rule still made a child"
    );
    h.stop().await;
}
