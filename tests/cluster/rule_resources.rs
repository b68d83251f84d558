//! Rules as Kubernetes resources: a `Rule` applied runs and says so in its
//! status, an invalid edit is refused while the previous generation keeps
//! running, and a deleted Rule stops.

use std::time::Duration;

use kiln::reload::ReloadOptions;
use serde_json::{Value, json};

use crate::reload::{From, Harness, wait_cm, widget};
use kiln::controlplane::Binaries;

use crate::support::{self, KilnProcess, TestNamespace, eventually};

const CONVERGE: Duration = support::PATIENCE;

/// Every kiln that reads Rule resources reads all of them (and writes their
/// status): the tests that run one take turns.
static RULES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
pub(crate) const RULE: (&str, &str) = ("kiln.dev/v1alpha1", "Rule");

/// This test's turn: every Rule a test before it left behind (a failed one
/// stops before deleting its own) is deleted first, so no kiln of this
/// test runs another test's rules.
pub(crate) async fn take_turn(client: &kube::Client) -> tokio::sync::MutexGuard<'static, ()> {
    let turn = RULES.lock().await;
    support::install_crds(client, "charts/kiln/crds").await;
    let rules = support::dynamic_api(client, &json!(RULE.0), &json!(RULE.1), None).await;
    let _ = rules
        .delete_collection(&Default::default(), &Default::default())
        .await;
    eventually("no Rule left from an earlier test", CONVERGE, || async {
        let left = rules.list(&Default::default()).await.ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
    turn
}

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

pub(crate) async fn rule_status(client: &kube::Client, name: &str) -> Value {
    support::get(client, RULE.0, RULE.1, "", name)
        .await
        .map(|r| r["status"].clone())
        .unwrap_or(Value::Null)
}

pub(crate) fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_resource_runs_refuses_an_invalid_edit_and_stops_when_deleted() {
    let client = support::admin_client().await;
    let _turn = take_turn(&client).await;
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

    // Nothing changed: the status is not written again (once the writes of
    // the refusal, however slow, are done: a loop never settles).
    let rv = |o: Option<Value>| o.unwrap()["metadata"]["resourceVersion"].clone();
    let before = eventually("the Rule to settle", CONVERGE, || async {
        let before = rv(support::get(&client, RULE.0, RULE.1, "", &name).await);
        tokio::time::sleep(support::QUIET).await;
        let after = rv(support::get(&client, RULE.0, RULE.1, "", &name).await);
        (before == after).then_some(after)
    })
    .await;
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

/// `kiln run --rules-from-cluster`, reconciling in `namespace` only.
fn from_cluster(namespace: &str) -> KilnProcess {
    KilnProcess::run(&["--rules-from-cluster", "--namespace", namespace])
}

/// `kubectl ARGS…` (the kubectl built beside the control plane) with `kiln`'s kubeconfig.
fn kubectl(kiln: &KilnProcess, args: &[&str]) -> String {
    let bins = Binaries::locate(&Binaries::default_source()).unwrap();
    let out = std::process::Command::new(bins.path("kubectl"))
        .arg("--kubeconfig")
        .arg(kiln.kubeconfig())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `kiln explain ARGS… --rules-from-cluster`: stdout and stderr.
fn explain(kiln: &KilnProcess, args: &[&str]) -> (String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("explain")
        .args(args)
        .args(["--rules-from-cluster", "--kubeconfig"])
        .arg(kiln.kubeconfig())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "kiln explain: {stderr}");
    (String::from_utf8(out.stdout).unwrap(), stderr)
}

/// The first row of `kubectl get` output, by column header.
fn table(text: &str) -> Vec<(String, String)> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    header
        .iter()
        .zip(row)
        .map(|(h, v)| ((*h).to_string(), v.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_resource_reports_its_primaries_children_and_events_as_kubectl_shows_them() {
    let client = support::admin_client().await;
    let _turn = take_turn(&client).await;
    let ns = TestNamespace::new(&client, "rulecensus").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    support::install_crds(&client, "charts/kiln/crds").await;
    let name = format!("{n}-census");
    support::apply(&client, widget("a"), Some(n)).await;
    support::apply(&client, widget("b"), Some(n)).await;
    let kiln = from_cluster(n);
    support::apply(&client, rule_object(&name, child("first")), None).await;
    // A kiln process starting (and checking its rule against the cluster)
    // on a loaded machine takes longer than a running engine's reconcile.
    eventually("ConfigMap b-one", 3 * CONVERGE, || async {
        support::get(&client, "v1", "ConfigMap", n, "b-one").await
    })
    .await;

    // Its status counts what it does, each condition says since when.
    let status = eventually("Rule counts", CONVERGE, || async {
        let s = rule_status(&client, &name).await;
        (s["primaries"] == 2 && s["children"] == 2).then_some(s)
    })
    .await;
    assert_eq!(condition(&status, "Ready")["status"], "True");
    assert!(
        condition(&status, "Ready")["lastTransitionTime"].is_string(),
        "{status}"
    );
    assert!(
        condition(&status, "Refused")["lastTransitionTime"].is_string(),
        "{status}"
    );

    // `kubectl get rules` shows READY, PRIMARIES and AGE.
    let row = table(&kubectl(&kiln, &["get", "rules", &name]));
    let columns: Vec<&str> = row.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(columns, ["NAME", "READY", "PRIMARIES", "AGE"], "{row:?}");
    assert_eq!(row[1].1, "True");
    assert_eq!(row[2].1, "2");
    let wide = table(&kubectl(&kiln, &["get", "rules", &name, "-o", "wide"]));
    assert!(
        wide.contains(&("CHILDREN".to_string(), "2".to_string())),
        "{wide:?}"
    );

    // `kiln explain` reads the rules from the Rule resources.
    let (out, _) = explain(&kiln, &["test.kiln.dev/v1", "Widget", &format!("{n}/a")]);
    assert!(out.contains(&name), "{out}");

    // A third primary is counted.
    support::apply(&client, widget("c"), Some(n)).await;
    eventually("Rule counts 3", CONVERGE, || async {
        let s = rule_status(&client, &name).await;
        (s["primaries"] == 3 && s["children"] == 3).then_some(())
    })
    .await;

    // An invalid edit: a Warning Event on the Rule, which `kubectl describe`
    // shows; the counts still say what generation 1 does.
    let mut bad = child("second");
    bad[0]["tempalte"] = bad[0]["template"].take();
    support::apply(&client, rule_object(&name, bad), None).await;
    let refused = eventually("a Refused Event on the Rule", CONVERGE, || async {
        let hits = support::events_about(&client, "default", &name, "Refused").await;
        (!hits.is_empty()).then_some(hits)
    })
    .await;
    assert_eq!(refused[0].type_.as_deref(), Some("Warning"));
    let status = rule_status(&client, &name).await;
    assert_eq!(
        refused[0].regarding.as_ref().unwrap().uid.as_deref(),
        support::get(&client, RULE.0, RULE.1, "", &name)
            .await
            .unwrap()["metadata"]["uid"]
            .as_str()
    );
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["primaries"], 3);
    let described = kubectl(&kiln, &["describe", "rule", &name]);
    let events = described.split("Events:").nth(1).unwrap_or_default();
    assert!(
        events.contains("Refused") && events.contains("Running"),
        "{described}"
    );
    let row = table(&kubectl(&kiln, &["get", "rules", &name]));
    assert_eq!(row[1].1, "False", "{row:?}");
    // Metrics say the same.
    let metric = format!("kiln_rule_edit_refused{{rule=\"{name}\"}}");
    let (_, body) = support::http_get(kiln.metrics, "/metrics").await.unwrap();
    assert!(body.lines().any(|l| l == format!("{metric} 1")), "{body}");
    // `kiln explain` names the refused Rule and explains with the others.
    let (_, stderr) = explain(&kiln, &["test.kiln.dev/v1", "Widget", &format!("{n}/a")]);
    assert!(
        stderr.contains(&format!("rule/{name} is refused")),
        "{stderr}"
    );

    support::delete(&client, RULE, None, &name).await;
    drop(kiln);
    ns.delete().await;
}
