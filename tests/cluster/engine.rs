//! The engine against the real control plane: each test runs its own engine,
//! scoped to its own namespace, and asserts what ends up in the cluster.

use std::sync::Arc;
use std::time::Duration;

use kiln::engine::{Engine, Options, RuleState};
use kiln::rules::Rule;
use kube::Client;
use serde_json::{Value, json};

use crate::support::counts;
use crate::support::{self, TestNamespace, WriteCounter, eventually};

const CONVERGE: Duration = support::PATIENCE;

struct Running {
    engine: Arc<Engine>,
    writes: WriteCounter,
}

impl Running {
    async fn start(ns: &str, rules: &[Arc<Rule>]) -> Self {
        let (engine, writes) = support::scene::start_engine(&[ns.to_string()], rules).await;
        Self { engine, writes }
    }
}

async fn wait_for(
    client: &Client,
    what: &str,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    eventually(what, CONVERGE, || async {
        support::get(client, api_version, kind, ns, name)
            .await
            .filter(|o| check(o))
    })
    .await
}

async fn wait_gone(
    client: &Client,
    what: &str,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
) {
    eventually(what, support::PATIENCE, || async {
        support::get(client, api_version, kind, ns, name)
            .await
            .is_none()
            .then_some(())
    })
    .await;
}

fn condition<'a>(obj: &'a Value, kind: &str) -> &'a Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webapp_converges_heals_follows_and_is_collected() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "eng-webapp").await;
    let n = ns.name();
    support::install_crds(&client, "examples/webapp").await;
    support::apply(
        &client,
        support::example("examples/webapp/secret.yaml"),
        Some(n),
    )
    .await;
    let webapp = support::apply(
        &client,
        support::example("examples/webapp/webapp.yaml"),
        Some(n),
    )
    .await;
    let _kiln = Running::start(n, &[support::shipped_rule("webapp", |t| t)]).await;

    // Children exist, owned, labelled, with rendered values.
    let deploy = wait_for(
        &client,
        "the Deployment",
        "apps/v1",
        "Deployment",
        n,
        "shop",
        |_| true,
    )
    .await;
    assert_eq!(deploy["spec"]["replicas"], 2);
    assert_eq!(
        deploy["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.27"
    );
    assert_eq!(
        deploy["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "kiln"
    );
    assert_eq!(deploy["metadata"]["labels"]["kiln.dev/rule"], "webapp");
    let owner = &deploy["metadata"]["ownerReferences"][0];
    assert_eq!(
        (
            owner["kind"].as_str(),
            owner["uid"].as_str(),
            owner["controller"].as_bool()
        ),
        (
            Some("WebApp"),
            webapp["metadata"]["uid"].as_str(),
            Some(true)
        )
    );
    wait_for(&client, "the Service", "v1", "Service", n, "shop", |_| true).await;
    let cm = wait_for(
        &client,
        "the ConfigMap",
        "v1",
        "ConfigMap",
        n,
        "shop-config",
        |_| true,
    )
    .await;
    assert_eq!(cm["data"]["LOG_LEVEL"], "info");

    // Not ready until the Deployment reports ready replicas (no kubelet here:
    // the test plays the deployment controller and writes its status).
    let primary = wait_for(
        &client,
        "status Ready=False",
        "demo.kiln.dev/v1",
        "WebApp",
        n,
        "shop",
        |o| condition(o, "Ready")["status"] == "False",
    )
    .await;
    assert_eq!(primary["status"]["url"], format!("http://shop.{n}.svc"));
    let deployments =
        support::dynamic_api(&client, &json!("apps/v1"), &json!("Deployment"), Some(n)).await;
    let ready = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "shop"}, "status": {"replicas": 2, "readyReplicas": 2}});
    deployments
        .patch_status(
            "shop",
            &kube::api::PatchParams::apply("test-deployment-controller").force(),
            &kube::api::Patch::Apply(&ready),
        )
        .await
        .unwrap();
    let primary = wait_for(
        &client,
        "status Ready=True",
        "demo.kiln.dev/v1",
        "WebApp",
        n,
        "shop",
        |o| condition(o, "Ready")["status"] == "True",
    )
    .await;
    assert_eq!(primary["status"]["readyReplicas"], 2);
    assert_eq!(
        primary["status"]["observedGeneration"],
        primary["metadata"]["generation"]
    );
    assert_eq!(condition(&primary, "Reconciled")["status"], "True");

    // The spec changes: the children follow.
    let mut changed = support::example("examples/webapp/webapp.yaml");
    changed["spec"]["image"] = json!("nginx:1.28");
    support::apply(&client, changed, Some(n)).await;
    wait_for(
        &client,
        "the new image",
        "apps/v1",
        "Deployment",
        n,
        "shop",
        |d| d["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.28",
    )
    .await;

    // A child is deleted: it comes back.
    let services = support::dynamic_api(&client, &json!("v1"), &json!("Service"), Some(n)).await;
    let old_uid = support::get(&client, "v1", "Service", n, "shop")
        .await
        .unwrap()["metadata"]["uid"]
        .clone();
    services.delete("shop", &Default::default()).await.unwrap();
    wait_for(
        &client,
        "the Service to come back",
        "v1",
        "Service",
        n,
        "shop",
        |s| s["metadata"]["uid"] != old_uid,
    )
    .await;

    // Someone edits a field the rule owns: it is restored.
    let drift = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "shop"}, "spec": {"replicas": 7}});
    deployments
        .patch(
            "shop",
            &kube::api::PatchParams::apply("someone-else").force(),
            &kube::api::Patch::Apply(&drift),
        )
        .await
        .unwrap();
    wait_for(
        &client,
        "replicas restored",
        "apps/v1",
        "Deployment",
        n,
        "shop",
        |d| d["spec"]["replicas"] == 2,
    )
    .await;

    // The primary is deleted: the garbage collector removes the children.
    let webapps = support::dynamic_api(
        &client,
        &json!("demo.kiln.dev/v1"),
        &json!("WebApp"),
        Some(n),
    )
    .await;
    webapps.delete("shop", &Default::default()).await.unwrap();
    wait_gone(
        &client,
        "the Deployment to be collected",
        "apps/v1",
        "Deployment",
        n,
        "shop",
    )
    .await;
    wait_gone(
        &client,
        "the ConfigMap to be collected",
        "v1",
        "ConfigMap",
        n,
        "shop-config",
    )
    .await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_secret_waits_and_its_creation_converges_at_once() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "eng-wait").await;
    let n = ns.name();
    support::install_crds(&client, "examples/webapp").await;
    support::apply(
        &client,
        support::example("examples/webapp/webapp.yaml"),
        Some(n),
    )
    .await;
    // A long waiting period: converging quickly proves the Secret's arrival
    // itself requeued the WebApp (the reverse index), not a timer.
    let rule = support::shipped_rule("webapp", |t| t.replace("waiting: 5s", "waiting: 10m"));
    let _kiln = Running::start(n, &[rule]).await;

    let waiting = wait_for(
        &client,
        "Waiting=True",
        "demo.kiln.dev/v1",
        "WebApp",
        n,
        "shop",
        |o| condition(o, "Waiting")["status"] == "True",
    )
    .await;
    assert!(
        condition(&waiting, "Waiting")["message"]
            .as_str()
            .unwrap()
            .contains(&format!("Secret {n}/shop-credentials"))
    );
    assert!(
        support::get(&client, "apps/v1", "Deployment", n, "shop")
            .await
            .is_none(),
        "nothing rendered while waiting"
    );

    let started = std::time::Instant::now();
    support::apply(
        &client,
        support::example("examples/webapp/secret.yaml"),
        Some(n),
    )
    .await;
    wait_for(
        &client,
        "the Deployment",
        "apps/v1",
        "Deployment",
        n,
        "shop",
        |_| true,
    )
    .await;
    wait_for(
        &client,
        "Waiting=False",
        "demo.kiln.dev/v1",
        "WebApp",
        n,
        "shop",
        |o| condition(o, "Waiting")["status"] == "False",
    )
    .await;
    // Far below the waiting period (ten minutes), however loaded the machine.
    assert!(
        started.elapsed() < Duration::from_secs(300),
        "took {:?}",
        started.elapsed()
    );
    ns.delete().await;
}

pub const WIDGET_RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: widgets}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
        data: {value: "{{ self.spec.value }}"}
    - id: extra
      when: self.spec.extra | default(false)
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-extra"}
    - id: item
      forEach: self.spec.items | default([])
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-{{ item }}"}
  status:
    fields:
      value: "{{ self.spec.value }}"
"#;

pub fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_no_longer_rendered_are_pruned() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "eng-prune").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    support::apply(
        &client,
        widget(
            "w",
            json!({"value": "1", "extra": true, "items": ["a", "b"]}),
        ),
        Some(n),
    )
    .await;
    let _kiln = Running::start(n, &[support::rule_from_yaml(WIDGET_RULE)]).await;
    for name in ["w", "w-extra", "w-a", "w-b"] {
        wait_for(&client, name, "v1", "ConfigMap", n, name, |_| true).await;
    }
    // `when` turns false and an item leaves the list.
    support::apply(
        &client,
        widget("w", json!({"value": "1", "extra": false, "items": ["a"]})),
        Some(n),
    )
    .await;
    wait_gone(&client, "w-extra pruned", "v1", "ConfigMap", n, "w-extra").await;
    wait_gone(&client, "w-b pruned", "v1", "ConfigMap", n, "w-b").await;
    assert!(
        support::get(&client, "v1", "ConfigMap", n, "w-a")
            .await
            .is_some()
    );
    assert!(
        support::get(&client, "v1", "ConfigMap", n, "w")
            .await
            .is_some()
    );
    // A ConfigMap kiln did not make is never pruned.
    let foreign =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w-foreign"}});
    support::apply(&client, foreign, Some(n)).await;
    support::apply(
        &client,
        widget("w", json!({"value": "2", "items": []})),
        Some(n),
    )
    .await;
    wait_gone(&client, "w-a pruned", "v1", "ConfigMap", n, "w-a").await;
    assert!(
        support::get(&client, "v1", "ConfigMap", n, "w-foreign")
            .await
            .is_some()
    );
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_error_on_one_primary_leaves_the_others_reconciled() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "eng-bad").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    support::apply(&client, widget("good", json!({"value": "ok"})), Some(n)).await;
    support::apply(&client, widget("bad", json!({"other": 1})), Some(n)).await;
    let kiln = Running::start(n, &[support::rule_from_yaml(WIDGET_RULE)]).await;

    wait_for(
        &client,
        "good's ConfigMap",
        "v1",
        "ConfigMap",
        n,
        "good",
        |c| c["data"]["value"] == "ok",
    )
    .await;
    let bad = wait_for(
        &client,
        "bad's condition",
        "test.kiln.dev/v1",
        "Widget",
        n,
        "bad",
        |o| condition(o, "Reconciled")["status"] == "False",
    )
    .await;
    let reconciled = condition(&bad, "Reconciled");
    assert_eq!(reconciled["reason"], "TemplateError");
    assert!(
        reconciled["message"]
            .as_str()
            .unwrap()
            .contains("`self.spec.value` is undefined"),
        "{reconciled}"
    );
    assert!(
        support::get(&client, "v1", "ConfigMap", n, "bad")
            .await
            .is_none()
    );
    let events = eventually("a Warning Event on bad", CONVERGE, || async {
        let hits = support::events_about(&client, n, "bad", "TemplateError").await;
        (!hits.is_empty()).then_some(hits)
    })
    .await;
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    // No hot retry: the failed primary is not reconciled again on its own.
    support::settled("the reconciles to settle", || {
        counts::reconciles(&kiln.engine)
    })
    .await;
    let before = counts::reconciles(&kiln.engine);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = counts::reconciles(&kiln.engine);
    assert!(after - before <= 1, "{} reconciles in 3s", after - before);
    // Fixing the object fixes it.
    support::apply(&client, widget("bad", json!({"value": "fixed"})), Some(n)).await;
    wait_for(
        &client,
        "bad's ConfigMap",
        "v1",
        "ConfigMap",
        n,
        "bad",
        |c| c["data"]["value"] == "fixed",
    )
    .await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resync_of_converged_primaries_writes_nothing() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "eng-steady").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    for i in 0..10 {
        support::apply(
            &client,
            widget(
                &format!("w{i}"),
                json!({"value": format!("{i}"), "extra": true, "items": ["a"]}),
            ),
            Some(n),
        )
        .await;
    }
    let kiln = Running::start(n, &[support::rule_from_yaml(WIDGET_RULE)]).await;
    for i in 0..10 {
        wait_for(
            &client,
            "converged",
            "test.kiln.dev/v1",
            "Widget",
            n,
            &format!("w{i}"),
            |o| condition(o, "Ready")["status"] == "True",
        )
        .await;
    }
    // Let the echo of kiln's own writes settle, then force a resync of everything.
    support::settled("the echo of kiln's writes", || kiln.writes.get()).await;
    let reconciles = counts::reconciles(&kiln.engine);
    let writes = kiln.writes.get();
    kiln.engine.resync("widgets");
    eventually("10 more reconciles", CONVERGE, || async {
        (counts::reconciles(&kiln.engine) >= reconciles + 10).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        kiln.writes.get() - writes,
        0,
        "API writes during a steady-state resync"
    );
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_sharing_kinds_share_one_watch_per_kind() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "eng-share").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let second = WIDGET_RULE
        .replace("name: widgets}", "name: widgets-copy}")
        .replace(
            "\"{{ self.metadata.name }}\"}",
            "\"{{ self.metadata.name }}-copy\"}",
        );
    support::apply(&client, widget("w", json!({"value": "1"})), Some(n)).await;
    let kiln = Running::start(
        n,
        &[
            support::rule_from_yaml(WIDGET_RULE),
            support::rule_from_yaml(&second),
        ],
    )
    .await;
    wait_for(
        &client,
        "first rule's child",
        "v1",
        "ConfigMap",
        n,
        "w",
        |_| true,
    )
    .await;
    wait_for(
        &client,
        "second rule's child",
        "v1",
        "ConfigMap",
        n,
        "w-copy",
        |_| true,
    )
    .await;
    assert_eq!(kiln.engine.watches(), 2, "Widget and ConfigMap, once each");
    // A rule removed from the set takes its series out of /metrics (a
    // rename would otherwise leave every old name there); the other keeps its.
    let copy = "controller=\"widgets-copy\"";
    eventually("the second rule's reconciles counted", CONVERGE, || async {
        kiln.engine.metrics().encode().contains(copy).then_some(())
    })
    .await;
    kiln.engine.remove("widgets-copy", false).await;
    let text = kiln.engine.metrics().encode();
    assert!(!text.contains("\"widgets-copy\""), "{text}");
    assert!(text.contains("controller=\"widgets\""), "{text}");
    // A stopped rule leaves its watches lingering for a next version;
    // shutting the engine down stops them too, so none outlives it (the
    // demo's cluster went away under them: "watch failed" at Ctrl-C).
    kiln.engine.shutdown().await;
    assert_eq!(kiln.engine.cached(), vec![], "a watch outlived the engine");
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_waits_for_its_crd_starts_when_it_appears_and_waits_again_when_it_goes() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "eng-lazy").await;
    let n = ns.name();
    let group = format!("lazy{}.kiln.dev", std::process::id());
    let rule = support::rule_from_yaml(
        &WIDGET_RULE
            .replace("test.kiln.dev/v1", &format!("{group}/v1"))
            .replace("name: widgets}", "name: lazy}"),
    );
    let (engine_client, _) = support::counting_client().await;
    let options = Options {
        namespaces: vec![n.to_string()],
        kind_retry: Duration::from_millis(200),
        ..Options::default()
    };
    let engine = Engine::new(engine_client, options);
    engine.start(rule);
    let waiting = |engine: &Engine| {
        let waits = matches!(engine.state("lazy"), Some(RuleState::WaitingForKinds(k)) if k.iter().any(|k| k.contains("Widget")));
        let metric = engine
            .metrics()
            .encode()
            .contains("kiln_rule_waiting_for_kinds{rule=\"lazy\"} 1");
        waits && metric
    };
    eventually(
        "the rule to wait for its kind (state and metric)",
        CONVERGE,
        || async { waiting(&engine).then_some(()) },
    )
    .await;

    let crd = std::fs::read_to_string(support::repo_root().join("tests/fixtures/crds/widget.yaml"))
        .unwrap()
        .replace("widgets.test.kiln.dev", &format!("widgets.{group}"))
        .replace("group: test.kiln.dev", &format!("group: {group}"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("crd.yaml"), crd).unwrap();
    // An absolute path: joined onto the repository root, it stays itself.
    let crd_dir = dir.path().to_str().unwrap();
    support::install_crds(&client, crd_dir).await;
    let lazy_widget = |name: &str, value: &str| {
        let mut w = widget(name, json!({"value": value}));
        w["apiVersion"] = json!(format!("{group}/v1"));
        w
    };
    support::apply(&client, lazy_widget("w", "late"), Some(n)).await;
    wait_for(
        &client,
        "the child once the CRD exists",
        "v1",
        "ConfigMap",
        n,
        "w",
        |c| c["data"]["value"] == "late",
    )
    .await;
    assert!(
        !engine
            .metrics()
            .encode()
            .contains("kiln_rule_waiting_for_kinds{rule=\"lazy\"} 1")
    );

    // The CRD is deleted while the rule runs: the rule waits again...
    let crds: kube::Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        kube::Api::all(client.clone());
    let crd_name = format!("widgets.{group}");
    crds.delete(&crd_name, &Default::default()).await.unwrap();
    eventually(
        "the rule to wait for its kind again",
        support::PATIENCE,
        || async { waiting(&engine).then_some(()) },
    )
    .await;
    eventually("the CRD to be gone", support::PATIENCE, || async {
        crds.get_opt(&crd_name)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    // ...and resumes when it is back.
    support::install_crds(&client, crd_dir).await;
    support::apply(&client, lazy_widget("w2", "again"), Some(n)).await;
    wait_for(
        &client,
        "a child after the CRD came back",
        "v1",
        "ConfigMap",
        n,
        "w2",
        |c| c["data"]["value"] == "again",
    )
    .await;
    assert_eq!(engine.state("lazy"), Some(RuleState::Running));
    engine.shutdown().await;
    ns.delete().await;
}

/// Plays a workload controller: writes ready replicas into a child's status.
async fn mark_ready(
    client: &Client,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
    replicas: i64,
) {
    let api = support::dynamic_api(client, &json!(api_version), &json!(kind), Some(ns)).await;
    let status = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name},
        "status": {"replicas": replicas, "readyReplicas": replicas}});
    api.patch_status(
        name,
        &kube::api::PatchParams::apply("test-workload-controller").force(),
        &kube::api::Patch::Apply(&status),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_converges_and_keeps_its_generated_password() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "eng-db").await;
    let n = ns.name();
    support::install_crds(&client, "examples/database").await;
    let mut sample = support::example("examples/database/database.yaml");
    let meta = sample["metadata"].as_object_mut().unwrap();
    meta.remove("uid");
    meta.remove("creationTimestamp");
    support::apply(&client, sample, Some(n)).await;
    let _kiln = Running::start(n, &[support::shipped_rule("database", |t| t)]).await;

    let sts = wait_for(
        &client,
        "the StatefulSet",
        "apps/v1",
        "StatefulSet",
        n,
        "orders",
        |_| true,
    )
    .await;
    assert_eq!(
        sts["spec"]["template"]["spec"]["containers"][0]["image"],
        "postgres:17"
    );
    let secret = wait_for(
        &client,
        "the Secret",
        "v1",
        "Secret",
        n,
        "orders-credentials",
        |_| true,
    )
    .await;
    let password = secret["data"]["password"].clone();
    mark_ready(&client, "apps/v1", "StatefulSet", n, "orders", 1).await;
    let db = wait_for(
        &client,
        "Ready=True",
        "demo.kiln.dev/v1",
        "Database",
        n,
        "orders",
        |o| condition(o, "Ready")["status"] == "True",
    )
    .await;
    assert_eq!(db["status"]["endpoint"], format!("orders.{n}.svc:5432"));
    assert_eq!(db["status"]["readyReplicas"], 1);
    // StatefulSet storage is immutable: the API server refuses the change,
    // and the Database says so instead of retrying hot.
    let db_with = |spec: Value| json!({"apiVersion": "demo.kiln.dev/v1", "kind": "Database", "metadata": {"name": "orders"}, "spec": spec});
    support::apply(
        &client,
        db_with(json!({"version": "17", "storage": "9Gi", "replicas": 1})),
        Some(n),
    )
    .await;
    let refused = wait_for(
        &client,
        "Reconciled=False Invalid",
        "demo.kiln.dev/v1",
        "Database",
        n,
        "orders",
        |o| condition(o, "Reconciled")["reason"] == "Invalid",
    )
    .await;
    let message = condition(&refused, "Reconciled")["message"]
        .as_str()
        .unwrap()
        .to_string();
    let db_now = support::get(&client, "demo.kiln.dev/v1", "Database", n, "orders")
        .await
        .unwrap();
    assert_eq!(
        db_now["status"]["endpoint"],
        format!("orders.{n}.svc:5432"),
        "status fields kept while failing"
    );
    assert!(message.contains("StatefulSet"), "{message}");
    // A change the server accepts recovers, and the password is kept.
    support::apply(
        &client,
        db_with(json!({"version": "17", "storage": "5Gi", "replicas": 2})),
        Some(n),
    )
    .await;
    wait_for(
        &client,
        "two replicas",
        "apps/v1",
        "StatefulSet",
        n,
        "orders",
        |s| s["spec"]["replicas"] == 2,
    )
    .await;
    wait_for(
        &client,
        "Reconciled=True",
        "demo.kiln.dev/v1",
        "Database",
        n,
        "orders",
        |o| condition(o, "Reconciled")["status"] == "True",
    )
    .await;
    let secret = support::get(&client, "v1", "Secret", n, "orders-credentials")
        .await
        .unwrap();
    assert_eq!(secret["data"]["password"], password);
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_renders_one_cronjob_per_entry_and_becomes_ready() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "eng-sched").await;
    let n = ns.name();
    support::install_crds(&client, "examples/schedule").await;
    support::apply(
        &client,
        support::example("examples/schedule/schedule.yaml"),
        Some(n),
    )
    .await;
    let _kiln = Running::start(n, &[support::shipped_rule("schedule", |t| t)]).await;
    wait_for(
        &client,
        "nightly-vacuum-db",
        "batch/v1",
        "CronJob",
        n,
        "nightly-vacuum-db",
        |c| c["spec"]["schedule"] == "0 2 * * *",
    )
    .await;
    wait_for(
        &client,
        "nightly-report",
        "batch/v1",
        "CronJob",
        n,
        "nightly-report",
        |c| {
            c["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"]
                == "alpine:3.21"
        },
    )
    .await;
    let s = wait_for(
        &client,
        "Ready=True",
        "demo.kiln.dev/v1",
        "JobSchedule",
        n,
        "nightly",
        |o| condition(o, "Ready")["status"] == "True",
    )
    .await;
    assert_eq!(s["status"]["jobs"], 2);
    let api = support::dynamic_api(
        &client,
        &json!("demo.kiln.dev/v1"),
        &json!("JobSchedule"),
        Some(n),
    )
    .await;
    api.delete("nightly", &Default::default()).await.unwrap();
    wait_gone(
        &client,
        "the CronJobs to be collected",
        "batch/v1",
        "CronJob",
        n,
        "nightly-report",
    )
    .await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_namespace_gets_its_tenant_objects() {
    let client = support::admin_client().await;
    let name = format!("kiln-tenant-eng-{}", std::process::id());
    let mut namespace = support::example("examples/tenant/namespace.yaml");
    namespace["metadata"]["name"] = json!(name);
    namespace["metadata"]["labels"]["kiln.dev/size"] = json!("small");
    // Namespaces are cluster-scoped and the children live in the tenant
    // namespace itself, so this engine watches every namespace; only
    // namespaces labelled kiln.dev/tenant are taken.
    let (engine_client, _) = support::counting_client().await;
    let engine = Engine::new(engine_client, Options::default());
    engine.start(support::shipped_rule("tenant", |t| t));
    support::apply(&client, namespace, None).await;
    let quota = wait_for(
        &client,
        "the ResourceQuota",
        "v1",
        "ResourceQuota",
        &name,
        "tenant-quota",
        |_| true,
    )
    .await;
    assert_eq!(quota["spec"]["hard"]["pods"], "20", "size=small");
    wait_for(
        &client,
        "the LimitRange",
        "v1",
        "LimitRange",
        &name,
        "tenant-defaults",
        |_| true,
    )
    .await;
    let binding = wait_for(
        &client,
        "the RoleBinding",
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        &name,
        "tenant-admins",
        |_| true,
    )
    .await;
    assert_eq!(binding["subjects"][0]["name"], "tenant:blue");
    // Someone deletes the quota: it comes back.
    let api =
        support::dynamic_api(&client, &json!("v1"), &json!("ResourceQuota"), Some(&name)).await;
    api.delete("tenant-quota", &Default::default())
        .await
        .unwrap();
    eventually("the quota to come back", CONVERGE, || async {
        support::get(&client, "v1", "ResourceQuota", &name, "tenant-quota")
            .await
            .filter(|q| q["metadata"]["deletionTimestamp"].is_null())
    })
    .await;
    engine.shutdown().await;
    let _ = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
        .delete(&name, &Default::default())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kiln_run_serves_metrics_and_probes_and_exits_cleanly_on_sigterm() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "eng-cli").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    support::apply(&client, widget("w", json!({"value": "from-cli"})), Some(n)).await;
    let mut kiln =
        support::KilnProcess::start(WIDGET_RULE, &["--namespace", n, "--log-format", "json"]);
    wait_for(&client, "the child", "v1", "ConfigMap", n, "w", |c| {
        c["data"]["value"] == "from-cli"
    })
    .await;

    assert_eq!(
        support::http_get(kiln.health, "/healthz").await.unwrap().0,
        200
    );
    eventually("/readyz to answer 200", CONVERGE, || async {
        support::http_get(kiln.health, "/readyz")
            .await
            .filter(|(code, _)| *code == 200)
    })
    .await;
    let reconciled = eventually("reconcile metrics", CONVERGE, || async {
        kiln.metric("controller_runtime_reconcile_total{controller=\"widgets\",result=\"success\"}")
            .await
    })
    .await;
    assert!(reconciled >= 1.0);
    assert_eq!(
        kiln.metric("kiln_watches ").await,
        Some(2.0),
        "Widget and ConfigMap"
    );
    assert_eq!(kiln.metric("kiln_rules_loaded ").await, Some(1.0));
    assert_eq!(
        kiln.metric("kiln_leader ").await,
        Some(1.0),
        "no election: always active"
    );
    assert!(
        kiln.metric("kiln_apply_total{rule=\"widgets\",result=\"success\"}")
            .await
            .unwrap_or(0.0)
            >= 1.0
    );
    assert!(
        kiln.metric("workqueue_adds_total{name=\"widgets\",controller=\"widgets\"}")
            .await
            .unwrap_or(0.0)
            >= 1.0
    );

    kiln.terminate();
    let status = kiln.exited(support::PATIENCE).await;
    assert!(status.success(), "{status}");
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_leader_election_one_replica_writes_and_a_standby_takes_over_on_sigterm() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "eng-lease").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let args = [
        "--namespace",
        n,
        "--leader-elect",
        "--leader-elect-namespace",
        n,
        "--leader-elect-lease-duration",
        "6s",
        "--leader-elect-renew-deadline",
        "4s",
        "--leader-elect-retry-period",
        "1s",
    ];
    let mut first = support::KilnProcess::start(WIDGET_RULE, &args);
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), n);
    let holder =
        |l: k8s_openapi::api::coordination::v1::Lease| l.spec.and_then(|s| s.holder_identity);
    let first_holder = eventually("a leader", CONVERGE, || async {
        leases.get_opt("kiln").await.unwrap().and_then(holder)
    })
    .await;
    assert!(
        first_holder.ends_with(&format!("-{}", first.child.id())),
        "{first_holder}"
    );
    let mut second = support::KilnProcess::start(WIDGET_RULE, &args);
    eventually("the standby to serve metrics", CONVERGE, || async {
        second.metric("kiln_leader ").await
    })
    .await;
    support::apply(&client, widget("a", json!({"value": "1"})), Some(n)).await;
    wait_for(
        &client,
        "the leader's work",
        "v1",
        "ConfigMap",
        n,
        "a",
        |_| true,
    )
    .await;
    assert_eq!(first.metric("kiln_leader ").await, Some(1.0));
    assert_eq!(second.metric("kiln_leader ").await, Some(0.0));
    assert!(
        second
            .metric("controller_runtime_reconcile_total")
            .await
            .is_none(),
        "the standby reconciled"
    );
    assert_eq!(
        support::http_get(second.health, "/readyz").await.unwrap().0,
        200,
        "a standby is ready"
    );

    // Someone else takes the Lease: the leader stops writing at once, and
    // nobody writes until that Lease expires.
    support::hand_lease_to(&client, n, "thief", 8).await;
    eventually("the leader to stand down", CONVERGE, || async {
        (first.metric("kiln_leader ").await == Some(0.0)).then_some(())
    })
    .await;
    support::apply(
        &client,
        widget("during-theft", json!({"value": "x"})),
        Some(n),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    if let Some(cm) = support::get(&client, "v1", "ConfigMap", n, "during-theft").await {
        let lease = leases.get_opt("kiln").await.unwrap();
        panic!(
            "someone wrote without the lease: created {} ; lease now {:?}; first leader={:?} (pid {}), second leader={:?} (pid {})",
            cm["metadata"]["creationTimestamp"],
            lease.and_then(|l| l.spec),
            first.metric("kiln_leader ").await,
            first.child.id(),
            second.metric("kiln_leader ").await,
            second.child.id()
        );
    }
    wait_for(
        &client,
        "work again once the stolen lease expired",
        "v1",
        "ConfigMap",
        n,
        "during-theft",
        |_| true,
    )
    .await;
    let new_holder = eventually("a replica to lead again", CONVERGE, || async {
        leases.get_opt("kiln").await.unwrap().and_then(holder)
    })
    .await;
    assert_ne!(new_holder, "thief");
    // The rest of the test expects the first replica to lead; if the
    // standby won, swap their roles.
    if !new_holder.ends_with(&format!("-{}", first.child.id())) {
        std::mem::swap(&mut first, &mut second);
    }

    // The leader is asked to stop: it releases the lease, the standby takes
    // over well before the lease would have expired.
    first.terminate();
    assert!(first.exited(support::PATIENCE).await.success());
    // Released before it exited: the Lease no longer names it (it is free,
    // or the standby holds it already), so no one waits for it to expire.
    let after_exit = leases.get_opt("kiln").await.unwrap().and_then(holder);
    assert!(
        after_exit
            .as_deref()
            .is_none_or(|h| !h.ends_with(&format!("-{}", first.child.id()))),
        "the stopped leader still holds the Lease: {after_exit:?}"
    );
    eventually("the standby to lead", CONVERGE, || async {
        (second.metric("kiln_leader ").await == Some(1.0)).then_some(())
    })
    .await;
    support::apply(&client, widget("b", json!({"value": "2"})), Some(n)).await;
    wait_for(
        &client,
        "the new leader's work",
        "v1",
        "ConfigMap",
        n,
        "b",
        |_| true,
    )
    .await;
    second.terminate();
    assert!(second.exited(support::PATIENCE).await.success());
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_only_updates_of_a_primary_do_not_re_render() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "eng-status").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    support::apply(&client, widget("w", json!({"value": "1"})), Some(n)).await;
    let kiln = Running::start(n, &[support::rule_from_yaml(WIDGET_RULE)]).await;
    wait_for(
        &client,
        "Ready",
        "test.kiln.dev/v1",
        "Widget",
        n,
        "w",
        |o| condition(o, "Ready")["status"] == "True",
    )
    .await;
    let reconciles = || counts::reconciles(&kiln.engine);
    support::settled("the reconciles to settle", reconciles).await;
    let before = reconciles();
    let api = support::dynamic_api(
        &client,
        &json!("test.kiln.dev/v1"),
        &json!("Widget"),
        Some(n),
    )
    .await;
    for i in 0..5 {
        let status = json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"probe": i}});
        api.patch_status(
            "w",
            &kube::api::PatchParams::apply("someone-else"),
            &kube::api::Patch::Apply(&status),
        )
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        reconciles() - before,
        0,
        "status-only updates caused reconciles"
    );
    // A label change is not status-only: it is reconciled.
    let labelled = json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w", "labels": {"x": "y"}}});
    api.patch(
        "w",
        &kube::api::PatchParams::apply("someone-else"),
        &kube::api::Patch::Apply(&labelled),
    )
    .await
    .unwrap();
    eventually("a reconcile after a label change", CONVERGE, || async {
        (reconciles() > before).then_some(())
    })
    .await;
    ns.delete().await;
}
