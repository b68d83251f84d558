//! One accepted rule set: kiln saves the rules it runs in a ConfigMap of
//! its own, and a restart, a standby taking over or a new process runs the
//! last accepted version of each rule whose current version is invalid or
//! refused, instead of exiting or running the refused one.

use std::time::Duration;

use kube::Client;
use serde_json::{Value, json};

use crate::reload::{configmap_child, rule, wait_cm, widget};
use crate::rule_resources::{RULE, condition, rule_status, take_turn};
use crate::support::{self, KilnProcess, TestNamespace, eventually};

/// Generous: the machine may be loaded and kiln started twice.
const CONVERGE: Duration = Duration::from_secs(120);

/// The ConfigMap kiln saves its accepted rules in (lease `kiln`).
const SAVED: &str = "kiln-accepted-rules";

/// `--namespace NS --leader-elect-namespace NS`: kiln's own objects (the
/// saved rules) in the test's namespace.
fn in_ns(n: &str) -> Vec<&str> {
    vec!["--namespace", n, "--leader-elect-namespace", n]
}

/// Waits until kiln saved its accepted rules, holding `needle`.
async fn saved_holding(client: &Client, n: &str, needle: &str) {
    eventually(
        &format!("the saved rules to hold {needle}"),
        CONVERGE,
        || async {
            let cm = support::get(client, "v1", "ConfigMap", n, SAVED).await?;
            let text = cm["data"]["accepted.json"].as_str()?.to_string();
            text.contains(needle).then_some(())
        },
    )
    .await;
}

async fn stop(mut kiln: KilnProcess) {
    kiln.terminate();
    let status = kiln.exited(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}");
}

/// A ConfigMap child whose data says which version made it.
fn says(version: &str) -> String {
    configmap_child("one", "one").replace("{{ rule.name }}", version)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_runs_the_last_accepted_rules_when_the_current_are_invalid() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "acc-restart").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let good = rule("widgets", "Widget", &says("v1"));
    let kiln = KilnProcess::start(&good, &in_ns(n));
    support::apply(&client, widget("a"), Some(n)).await;
    assert_eq!(wait_cm(&client, n, "a-one").await["data"]["from"], "v1");
    saved_holding(&client, n, "v1").await;
    stop(kiln).await;

    // Restarted on an invalid edit (an unclosed template): the saved
    // version runs, the edit is refused (and told on the rules ConfigMap
    // the chart names), kiln does not exit.
    let events_on = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "rules"}});
    support::apply(&client, events_on, Some(n)).await;
    let bad = rule("widgets", "Widget", &says("v2").replace("v2\"", "{{ v2\""));
    let named = format!("{n}/rules");
    let mut args = in_ns(n);
    args.extend(["--rules-configmap", &named]);
    let mut kiln = KilnProcess::start(&bad, &args);
    support::apply(&client, widget("b"), Some(n)).await;
    let cm = eventually("b-one", CONVERGE, || async {
        support::get(&client, "v1", "ConfigMap", n, "b-one").await
    })
    .await;
    assert_eq!(cm["data"]["from"], "v1", "the last accepted version runs");
    assert!(
        kiln.child.try_wait().unwrap().is_none(),
        "kiln keeps running"
    );
    assert_eq!(
        kiln.metric("kiln_rule_edit_refused{rule=\"widgets\"}")
            .await,
        Some(1.0)
    );
    stop(kiln).await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_taking_over_runs_the_last_accepted_rules_when_its_own_are_invalid() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "acc-standby").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let mut args = in_ns(n);
    args.extend(["--leader-elect", "--leader-elect-lease-duration", "4s"]);
    args.extend(["--leader-elect-renew-deadline", "3s"]);
    args.extend(["--leader-elect-retry-period", "1s"]);
    let leader = KilnProcess::start(&rule("widgets", "Widget", &says("v1")), &args);
    support::apply(&client, widget("a"), Some(n)).await;
    assert_eq!(wait_cm(&client, n, "a-one").await["data"]["from"], "v1");
    saved_holding(&client, n, "v1").await;

    // A standby started on an invalid version (a new pod of a bad rollout):
    // it waits on the saved rules, then takes over with them.
    let bad = rule("widgets", "Widget", &says("v2").replace("v2\"", "{{ v2\""));
    let mut standby = KilnProcess::start(&bad, &args);
    eventually("the standby waits", CONVERGE, || async {
        (standby.metric("kiln_leader ").await == Some(0.0)).then_some(())
    })
    .await;
    stop(leader).await;
    support::apply(&client, widget("b"), Some(n)).await;
    let cm = eventually("b-one", CONVERGE, || async {
        support::get(&client, "v1", "ConfigMap", n, "b-one").await
    })
    .await;
    assert_eq!(cm["data"]["from"], "v1", "the last accepted version runs");
    assert!(standby.child.try_wait().unwrap().is_none());
    assert_eq!(standby.metric("kiln_leader ").await, Some(1.0));
    stop(standby).await;
    ns.delete().await;
}

/// A rule defining `Site` in `group` with the spec fields `fields`, its
/// child saying `version`.
fn site_rule(group: &str, fields: &str, version: &str) -> String {
    format!(
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: sites}}\nspec:\n  api:\n    group: {group}\n    kind: Site\n    versions:\n      - name: v1\n        schema:\n          spec:\n{fields}  children:\n    - id: page\n      template:\n        apiVersion: v1\n        kind: ConfigMap\n        metadata: {{name: \"{{{{ self.metadata.name }}}}-page\"}}\n        data: {{from: {version}}}\n"
    )
}

const FIELDS: &str = "            title: string\n            tags: \"[]string\"\n            replicas: integer | maximum=5\n";

fn site(group: &str, name: &str) -> Value {
    json!({"apiVersion": format!("{group}/v1"), "kind": "Site", "metadata": {"name": name}, "spec": {"title": name}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaking_edit_refused_on_reload_stays_refused_after_a_restart() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "acc-breaking").await;
    let n = ns.name();
    let group = format!("accepted{}.api.kiln.dev", std::process::id());
    let kiln = KilnProcess::start(&site_rule(&group, FIELDS, "v1"), &in_ns(n));
    let crd = format!("sites.{group}");
    let gvk = kube::core::GroupVersionKind::gvk(&group, "v1", "Site");
    support::wait_for_kind(&client, &gvk, CONVERGE).await;
    support::apply(&client, site(&group, "one"), Some(n)).await;
    assert_eq!(wait_cm(&client, n, "one-page").await["data"]["from"], "v1");
    saved_holding(&client, n, "v1").await;

    // `tags` dropped and `replicas` bounded tighter: refused on reload.
    let narrower = FIELDS
        .replace("            tags: \"[]string\"\n", "")
        .replace("maximum=5", "maximum=3");
    let breaking = site_rule(&group, &narrower, "v2");
    kiln.rewrite_rule(&breaking);
    eventually("the edit refused", CONVERGE, || async {
        let refused = kiln.metric("kiln_rule_edit_refused{rule=\"sites\"}").await;
        (refused == Some(1.0)).then_some(())
    })
    .await;
    stop(kiln).await;

    // Restarted on the refused edit: still refused, the accepted version
    // runs, the CRD keeps `tags`.
    let kiln = KilnProcess::start(&breaking, &in_ns(n));
    support::apply(&client, site(&group, "two"), Some(n)).await;
    let cm = eventually("two-page", CONVERGE, || async {
        support::get(&client, "v1", "ConfigMap", n, "two-page").await
    })
    .await;
    assert_eq!(cm["data"]["from"], "v1", "the refused edit does not run");
    assert_eq!(
        kiln.metric("kiln_rule_edit_refused{rule=\"sites\"}").await,
        Some(1.0)
    );
    let crd = support::get(
        &client,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "",
        &crd,
    )
    .await
    .unwrap();
    let fields = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert!(
        fields.get("tags").is_some(),
        "the CRD is unchanged: {fields}"
    );
    stop(kiln).await;
    ns.delete().await;
}

/// A Rule making the child `<primary>-<suffix>` whose data says `version`.
fn rule_object(name: &str, suffix: &str, version: &str) -> Value {
    json!({
        "apiVersion": "kiln.dev/v1alpha1",
        "kind": "Rule",
        "metadata": {"name": name},
        "spec": {
            "for": {"apiVersion": "test.kiln.dev/v1", "kind": "Widget"},
            "children": [{"id": "one", "template": {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{{{{ self.metadata.name }}}}-{suffix}")},
                "data": {"from": version},
            }}],
        },
    })
}

fn from_cluster(n: &str) -> KilnProcess {
    let mut args = vec!["--rules-from-cluster"];
    args.extend(in_ns(n));
    KilnProcess::run(&args)
}

async fn child_says(client: &Client, n: &str, name: &str) -> Value {
    eventually(name, CONVERGE, || async {
        support::get(client, "v1", "ConfigMap", n, name).await
    })
    .await["data"]["from"]
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_invalid_rule_resource_does_not_stop_the_others_after_a_restart() {
    let client = support::admin_client().await;
    let _turn = take_turn(&client).await;
    let ns = TestNamespace::new(&client, "acc-rules").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let (a, b) = (format!("{n}-a"), format!("{n}-b"));
    support::apply(&client, rule_object(&a, "a", "a1"), None).await;
    support::apply(&client, rule_object(&b, "b", "b1"), None).await;
    let kiln = from_cluster(n);
    support::apply(&client, widget("w1"), Some(n)).await;
    assert_eq!(child_says(&client, n, "w1-a").await, "a1");
    assert_eq!(child_says(&client, n, "w1-b").await, "b1");
    saved_holding(&client, n, "b1").await;
    stop(kiln).await;

    // While kiln is down, Rule b is broken.
    let mut bad = rule_object(&b, "b", "b2");
    bad["spec"]["children"][0]["tempalte"] = bad["spec"]["children"][0]["template"].take();
    support::apply(&client, bad, None).await;
    let mut kiln = from_cluster(n);
    support::apply(&client, widget("w2"), Some(n)).await;
    assert_eq!(child_says(&client, n, "w2-a").await, "a1");
    assert_eq!(
        child_says(&client, n, "w2-b").await,
        "b1",
        "b's accepted version runs"
    );
    let status = eventually("Rule b Refused", CONVERGE, || async {
        let s = rule_status(&client, &b).await;
        (condition(&s, "Refused")["status"] == "True").then_some(s)
    })
    .await;
    assert_eq!(status["observedGeneration"], 1, "generation 1 runs");
    assert_eq!(condition(&status, "Ready")["reason"], "Refused");
    assert!(
        kiln.child.try_wait().unwrap().is_none(),
        "kiln keeps running"
    );
    stop(kiln).await;
    for name in [&a, &b] {
        support::delete(&client, RULE, None, name).await;
    }
    ns.delete().await;
}

/// `{"x": {"x": … "end" …}}`, `depth` objects deep.
fn nested(depth: usize) -> String {
    format!("{}\"end\"{}", "{\"x\": ".repeat(depth), "}".repeat(depth))
}

/// Creates the Rule `name` whose child template holds a value `depth`
/// levels deep, through the raw API (no client decodes it).
async fn create_deep_rule(client: &Client, name: &str, depth: usize) {
    let body = format!(
        r#"{{"apiVersion": "kiln.dev/v1alpha1", "kind": "Rule", "metadata": {{"name": "{name}"}}, "spec": {{"for": {{"apiVersion": "test.kiln.dev/v1", "kind": "Widget"}}, "children": [{{"id": "deep", "template": {{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "deep"}}, "data": {}}}}}]}}}}"#,
        nested(depth)
    );
    let request = http::Request::post("/apis/kiln.dev/v1alpha1/rules")
        .header("content-type", "application/json")
        .body(body.into_bytes())
        .unwrap();
    client.request_text(request).await.unwrap();
}

/// The status of the Rule `name`, read through the raw API (its spec may be
/// too deep for a client to decode).
async fn raw_status(client: &Client, name: &str) -> Value {
    #[derive(serde::Deserialize)]
    struct Status {
        #[serde(default)]
        status: Value,
    }
    let uri = format!("/apis/kiln.dev/v1alpha1/rules/{name}");
    let request = http::Request::get(uri).body(Vec::new()).unwrap();
    let Ok(text) = client.request_text(request).await else {
        return Value::Null;
    };
    serde_json::from_str::<Status>(&text).map_or(Value::Null, |s| s.status)
}

async fn raw_delete(client: &Client, name: &str) {
    let uri = format!("/apis/kiln.dev/v1alpha1/rules/{name}");
    let request = http::Request::delete(uri).body(Vec::new()).unwrap();
    let _ = client.request_text(request).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_resource_nested_200_deep_is_refused_alone() {
    let client = support::admin_client().await;
    let _turn = take_turn(&client).await;
    let ns = TestNamespace::new(&client, "acc-deep").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let (good, deep) = (format!("{n}-good"), format!("{n}-deep"));
    support::apply(&client, rule_object(&good, "good", "g1"), None).await;
    let kiln = from_cluster(n);
    support::apply(&client, widget("w1"), Some(n)).await;
    assert_eq!(child_says(&client, n, "w1-good").await, "g1");

    // While kiln runs: refused alone, and says why.
    create_deep_rule(&client, &deep, 200).await;
    let refused = |client: Client, deep: String| async move {
        eventually("the deep Rule Refused", CONVERGE, || async {
            let s = raw_status(&client, &deep).await;
            (condition(&s, "Refused")["status"] == "True").then_some(s)
        })
        .await
    };
    let status = refused(client.clone(), deep.clone()).await;
    let why = condition(&status, "Refused")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(why.contains("deep"), "{why}");
    support::apply(&client, widget("w2"), Some(n)).await;
    assert_eq!(child_says(&client, n, "w2-good").await, "g1");
    stop(kiln).await;

    // After a restart: the list of Rules decodes, the good one runs.
    let mut kiln = from_cluster(n);
    support::apply(&client, widget("w3"), Some(n)).await;
    assert_eq!(child_says(&client, n, "w3-good").await, "g1");
    refused(client.clone(), deep.clone()).await;
    assert!(
        kiln.child.try_wait().unwrap().is_none(),
        "kiln keeps running"
    );
    stop(kiln).await;
    support::delete(&client, RULE, None, &good).await;
    raw_delete(&client, &deep).await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_runs_the_last_accepted_rules_when_the_rules_configmap_cannot_be_read() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "acc-unread").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let rules = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "rules"},
        "data": {"widgets.yaml": rule("widgets", "Widget", &says("v1"))},
    });
    support::apply(&client, rules.clone(), Some(n)).await;
    let source = format!("{n}/rules");
    let mut args = vec!["--rules-configmap", &source];
    args.extend(in_ns(n));
    let kiln = KilnProcess::run(&args);
    support::apply(&client, widget("a"), Some(n)).await;
    assert_eq!(wait_cm(&client, n, "a-one").await["data"]["from"], "v1");
    saved_holding(&client, n, "v1").await;
    stop(kiln).await;

    // The rules ConfigMap is gone: the saved rules run, and once it is
    // back, kiln follows it.
    support::delete(&client, ("v1", "ConfigMap"), Some(n), "rules").await;
    let mut kiln = KilnProcess::run(&args);
    support::apply(&client, widget("b"), Some(n)).await;
    assert_eq!(child_says(&client, n, "b-one").await, "v1");
    assert!(
        kiln.child.try_wait().unwrap().is_none(),
        "kiln keeps running"
    );
    let mut edited = rules;
    edited["data"]["widgets.yaml"] = json!(rule("widgets", "Widget", &says("v3")));
    support::apply(&client, edited, Some(n)).await;
    support::apply(&client, widget("c"), Some(n)).await;
    eventually("c-one made by v3", CONVERGE, || async {
        let cm = support::get(&client, "v1", "ConfigMap", n, "c-one").await?;
        (cm["data"]["from"] == "v3").then_some(())
    })
    .await;
    stop(kiln).await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_of_that_name_kiln_did_not_make_is_neither_run_nor_overwritten() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "acc-foreign").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    // Someone else's ConfigMap, holding a rule set in kiln's format.
    let planted = json!({
        "source": format!("files in namespaces {n}"),
        "rules": [{"name": "widgets", "file": "x.yaml", "text": rule("widgets", "Widget", &says("planted"))}],
    })
    .to_string();
    let foreign = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": SAVED},
        "data": {"accepted.json": planted},
    });
    support::apply(&client, foreign, Some(n)).await;
    let rv = |cm: Option<Value>| cm.unwrap()["metadata"]["resourceVersion"].clone();
    let before = rv(support::get(&client, "v1", "ConfigMap", n, SAVED).await);

    // Invalid rules: the planted set is not run; nothing valid, kiln exits.
    let bad = rule("widgets", "Widget", &says("v2").replace("v2\"", "{{ v2\""));
    let mut kiln = KilnProcess::start(&bad, &in_ns(n));
    let status = kiln.exited(CONVERGE).await;
    assert_eq!(status.code(), Some(1), "{status}");

    // Valid rules run, and the ConfigMap is not overwritten: kiln says so
    // on the rules ConfigMap instead.
    let events_on = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "rules"}});
    support::apply(&client, events_on, Some(n)).await;
    let named = format!("{n}/rules");
    let mut args = in_ns(n);
    args.extend(["--rules-configmap", &named]);
    let kiln = KilnProcess::start(&rule("widgets", "Widget", &says("v1")), &args);
    support::apply(&client, widget("a"), Some(n)).await;
    assert_eq!(child_says(&client, n, "a-one").await, "v1");
    eventually("AcceptedRulesNotSaved", CONVERGE, || async {
        let hits = support::events_about(&client, n, "rules", "AcceptedRulesNotSaved").await;
        (!hits.is_empty()).then_some(())
    })
    .await;
    let after = rv(support::get(&client, "v1", "ConfigMap", n, SAVED).await);
    assert_eq!(before, after, "someone else's ConfigMap was written");
    stop(kiln).await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_set_that_could_not_be_read_at_start_is_not_written_over() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "acc-unread-saved").await;
    let own = TestNamespace::new(&client, "acc-unread-own").await;
    let (n, o) = (ns.name(), own.name());
    support::install_crds(&client, "tests/fixtures/crds").await;
    let events_on = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "rules"}});
    support::apply(&client, events_on, Some(n)).await;
    let named = format!("{n}/rules");
    let args = vec![
        "--namespace",
        n,
        "--leader-elect-namespace",
        o,
        "--rules-configmap",
        &named,
    ];
    let others = rule("others", "Widget", &configmap_child("two", "two"));
    let good = format!("{}---\n{others}", rule("widgets", "Widget", &says("v1")));
    let kiln = KilnProcess::start(&good, &args);
    support::apply(&client, widget("a"), Some(n)).await;
    assert_eq!(wait_cm(&client, n, "a-one").await["data"]["from"], "v1");
    let saved_text = || async {
        let cm = support::get(&client, "v1", "ConfigMap", o, SAVED).await?;
        Some(cm["data"]["accepted.json"].as_str()?.to_string())
    };
    eventually("both rules saved", CONVERGE, || async {
        let text = saved_text().await?;
        (text.contains("\\\"widgets\\\"") && text.contains("\\\"others\\\"")).then_some(())
    })
    .await;
    stop(kiln).await;

    // Restarted as a ServiceAccount that may not read kiln's namespace yet
    // (its Role not there yet, as when both are made at once), on an
    // invalid edit of `widgets`: it runs `others` only.
    let sa_rules = json!([
        {"apiGroups": ["test.kiln.dev"], "resources": ["*"], "verbs": ["*"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews"], "verbs": ["create"]},
    ]);
    let token = support::service_account_token(&client, n, "kiln", sa_rules).await;
    let everything = |name: &str| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]})
    };
    let bound = |name: &str| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "kiln", "namespace": n}]})
    };
    support::apply(&client, everything("kiln"), Some(n)).await;
    support::apply(&client, bound("kiln"), Some(n)).await;
    let kubeconfig = support::token_kubeconfig(support::kubeconfig_yaml(), &token);
    let bad = rule("widgets", "Widget", &says("v2").replace("v2\"", "{{ v2\""));
    let kiln = KilnProcess::start_on(&kubeconfig, &format!("{bad}---\n{others}"), &args);
    support::apply(&client, widget("b"), Some(n)).await;
    wait_cm(&client, n, "b-two").await;

    // Kiln's namespace becomes readable and writable: the set saved before
    // keeps `widgets`, which this process does not run.
    support::apply(&client, everything("kiln"), Some(o)).await;
    support::apply(&client, bound("kiln"), Some(o)).await;
    let outcome = eventually("the saved set kept or written over", CONVERGE, || async {
        let text = saved_text().await?;
        if !text.contains("\\\"widgets\\\"") {
            return Some("written over: widgets' last accepted version is lost");
        }
        let kept = support::events_about(&client, n, "rules", "AcceptedRulesNotSaved")
            .await
            .into_iter()
            .filter_map(|e| e.note)
            .any(|note| note.contains("could not be read when kiln started"));
        kept.then_some("kept")
    })
    .await;
    assert_eq!(outcome, "kept");
    drop(kiln);
    ns.delete().await;
    own.delete().await;
}
