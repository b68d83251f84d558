//! The engine against the real control plane: each test runs its own engine,
//! scoped to its own namespace, and asserts what ends up in the cluster.

use std::sync::Arc;
use std::time::Duration;

use kiln::engine::{Engine, Options, RuleState};
use kiln::rules::Rule;
use kube::Client;
use serde_json::{Value, json};

use crate::support::{self, TestNamespace, WriteCounter, eventually};

const CONVERGE: Duration = Duration::from_secs(30);

struct Running {
    engine: Arc<Engine>,
    writes: WriteCounter,
}

impl Running {
    async fn start(ns: &str, rules: &[Arc<Rule>]) -> Self {
        let (client, writes) = support::counting_client().await;
        let options = Options {
            namespaces: vec![ns.to_string()],
            concurrency: 2,
            kind_retry: Duration::from_millis(200),
            ..Options::default()
        };
        let engine = Arc::new(Engine::new(client, options));
        for rule in rules {
            engine.start(rule.clone());
        }
        for rule in rules {
            eventually(&format!("rule {} to run", rule.name), CONVERGE, || async {
                (engine.state(&rule.name) == Some(RuleState::Running)).then_some(())
            })
            .await;
        }
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
    eventually(what, Duration::from_secs(60), || async {
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
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
    ns.delete().await;
}

const WIDGET_RULE: &str = r#"
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

fn widget(name: &str, spec: Value) -> Value {
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
        let api: kube::Api<k8s_openapi::api::events::v1::Event> =
            kube::Api::namespaced(client.clone(), n);
        let list = api.list(&Default::default()).await.unwrap();
        let hits: Vec<_> = list
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("bad")
                    && e.reason.as_deref() == Some("TemplateError")
            })
            .collect();
        (!hits.is_empty()).then_some(hits)
    })
    .await;
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    // No hot retry: the failed primary is not reconciled again on its own.
    let before = kiln
        .engine
        .stats()
        .reconciles
        .load(std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = kiln
        .engine
        .stats()
        .reconciles
        .load(std::sync::atomic::Ordering::SeqCst);
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
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stats = kiln.engine.stats();
    let reconciles = stats.reconciles.load(std::sync::atomic::Ordering::SeqCst);
    let writes = kiln.writes.get();
    kiln.engine.resync("widgets");
    eventually("10 more reconciles", CONVERGE, || async {
        (stats.reconciles.load(std::sync::atomic::Ordering::SeqCst) >= reconciles + 10)
            .then_some(())
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
    let engine = Engine::new(
        engine_client,
        Options {
            namespaces: vec![n.to_string()],
            kind_retry: Duration::from_millis(200),
            ..Options::default()
        },
    );
    engine.start(rule);
    eventually("the rule to wait for its kind", CONVERGE, || async {
        matches!(engine.state("lazy"), Some(RuleState::WaitingForKinds(k)) if k.iter().any(|k| k.contains("Widget")))
            .then_some(())
    })
    .await;
    let crd = std::fs::read_to_string(support::repo_root().join("tests/fixtures/crds/widget.yaml"))
        .unwrap()
        .replace("widgets.test.kiln.dev", &format!("widgets.{group}"))
        .replace("group: test.kiln.dev", &format!("group: {group}"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("crd.yaml"), crd).unwrap();
    let rel = dir
        .path()
        .strip_prefix("/")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    support::install_crds(&client, &format!("../../../../../../../../{rel}")).await;
    let mut w = widget("w", json!({"value": "late"}));
    w["apiVersion"] = json!(format!("{group}/v1"));
    support::apply(&client, w, Some(n)).await;
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
    engine.shutdown().await;
    ns.delete().await;
}
