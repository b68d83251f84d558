//! A rule edit is checked against the cluster before it replaces the running
//! rule: what only the cluster knows (the primary's status schema, kiln's
//! permissions) refuses it loudly, the last good rules keep running, and
//! what was missing is checked again until it is there.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kiln::engine::RuleState;
use kiln::reload::ReloadOptions;
use kube::Client;
use serde_json::{Value, json};

use crate::reload::{From, Harness};
use crate::support::scene::{CONVERGE, Scene, configmap};
use crate::support::{self, eventually};

const PORTED: &str = "tests/fixtures/crds-ported";

/// A NodePool rule: a child that says which `version` of the rule made
/// it, the status field its CRD declares, and `extra` status fields.
fn nodes_rule(version: &str, extra: &str) -> String {
    format!(
        r#"apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: nodes}}
spec:
  for: {{apiVersion: infra.ported.kiln.dev/v1, kind: NodePool}}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: "{{{{ self.metadata.name }}}}-pool"}}
        data: {{version: "{version}"}}
  status:
    fields:
      nodes: "{{{{ self.spec.nodes | sort }}}}"
{extra}"#
    )
}

const WIDGETS: &str = r#"apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: widgets}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-one"}
        data: {from: widgets}
"#;

fn pool(name: &str) -> Value {
    json!({"apiVersion": "infra.ported.kiln.dev/v1", "kind": "NodePool",
           "metadata": {"name": name}, "spec": {"nodes": ["b", "a"]}})
}

fn widget(name: &str) -> Value {
    json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {}})
}

/// Sets the rules ConfigMap's files.
async fn set_rules(client: &Client, ns: &str, files: &[(&str, &str)]) {
    let data: serde_json::Map<String, Value> = files
        .iter()
        .map(|(k, v)| ((*k).to_string(), json!(v)))
        .collect();
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "kiln-rules"}, "data": data})).unwrap();
    kube::Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(
            "kiln-rules",
            &kube::api::PatchParams::apply("test").force(),
            &kube::api::Patch::Apply(cm),
        )
        .await
        .unwrap();
}

/// The Warning Events with `reason` on the rules ConfigMap, once there are
/// some; each names the ConfigMap by uid (so `kubectl describe` lists it).
async fn told(client: &Client, ns: &str, reason: &str) -> Vec<String> {
    let uid = kube::Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get("kiln-rules")
        .await
        .unwrap()
        .metadata
        .uid;
    eventually(&format!("a {reason} Event"), CONVERGE, || async {
        let events = support::events_about(client, ns, "kiln-rules", reason).await;
        (!events.is_empty()).then_some(events)
    })
    .await
    .into_iter()
    .map(|e| {
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(
            e.regarding.and_then(|r| r.uid),
            uid,
            "the Event names the ConfigMap's uid"
        );
        e.note.unwrap_or_default()
    })
    .collect()
}

fn quick() -> ReloadOptions {
    ReloadOptions {
        recheck: Duration::from_secs(1),
        ..ReloadOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_writing_status_its_crd_lacks_is_refused_and_the_running_version_keeps_running() {
    let scene = Scene::new("check-schema").await.with_crds(PORTED).await;
    let (client, n) = (scene.client.clone(), scene.ns().to_string());
    set_rules(&client, &n, &[("nodes.yaml", &nodes_rule("1", ""))]).await;
    scene.apply(pool("a")).await;
    let h = Harness::start(&n, From::ConfigMap(n.clone(), "kiln-rules".into()), quick()).await;
    h.running("nodes").await;
    scene
        .until("version 1's child", configmap("a-pool"), |c| {
            c["data"]["version"] == "1"
        })
        .await;

    // Version 2 writes a status field the NodePool CRD does not declare.
    let undeclared = "      undeclared: \"{{ self.metadata.name }}\"\n";
    set_rules(&client, &n, &[("nodes.yaml", &nodes_rule("2", undeclared))]).await;
    let notes = told(&client, &n, "RulesRefused").await;
    assert!(
        notes[0].contains("`status.undeclared`"),
        "the Event says why: {notes:?}"
    );
    assert_eq!(h.metrics.reloads("refused"), 1);
    assert_eq!(h.metrics.reloads("success"), 0);
    assert_eq!(h.metrics.rules_pending.get(), 1);
    // Version 1 keeps running: a new pool gets its child and its status.
    scene.apply(pool("b")).await;
    scene
        .until(
            "version 1's child of a new pool",
            configmap("b-pool"),
            |c| c["data"]["version"] == "1",
        )
        .await;
    scene
        .until(
            "version 1's status",
            ("infra.ported.kiln.dev/v1", "NodePool", "b"),
            |p| p["status"]["nodes"] == json!(["a", "b"]),
        )
        .await;
    assert_eq!(h.engine.state("nodes"), Some(RuleState::Running));

    // Version 3 fits the schema: it replaces version 1.
    set_rules(&client, &n, &[("nodes.yaml", &nodes_rule("3", ""))]).await;
    for name in ["a-pool", "b-pool"] {
        scene
            .until("version 3's child", configmap(name), |c| {
                c["data"]["version"] == "3"
            })
            .await;
    }
    assert_eq!(h.metrics.rules_pending.get(), 0);
    h.stop().await;
    scene.end().await;
}

/// kiln's identity, a ServiceAccount with what `kiln rbac` grants for
/// `rules`: a client as it.
async fn as_kiln_for(client: &Client, ns: &str, rules: &[&str]) -> Client {
    let sources = rules
        .iter()
        .enumerate()
        .map(|(i, text)| kiln::rules::load::Source {
            file: format!("{i}.yaml").into(),
            text: (*text).to_string(),
        })
        .collect();
    let set = kiln::rules::load_sources(sources).unwrap();
    let role = kiln::rbac::cluster_role(&set, "kiln", &kiln::rbac::guess_plural);
    let token = support::service_account_token(client, ns, "kiln", role["rules"].clone()).await;
    kiln::controlplane::client_from_kubeconfig(&support::token_kubeconfig(
        support::kubeconfig_yaml(),
        &token,
    ))
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_rule_kiln_may_not_run_waits_with_its_reason_and_starts_once_rbac_allows_it() {
    let scene = Scene::new("check-rbac")
        .await
        .with_widgets()
        .await
        .with_crds(PORTED)
        .await;
    let (client, n) = (scene.client.clone(), scene.ns().to_string());
    set_rules(&client, &n, &[("widgets.yaml", WIDGETS)]).await;
    let as_kiln = as_kiln_for(&client, &n, &[WIDGETS]).await;
    scene.apply(widget("a")).await;
    let h = Harness::start_as(
        as_kiln,
        &n,
        From::ConfigMap(n.clone(), "kiln-rules".into()),
        quick(),
    )
    .await;
    h.running("widgets").await;
    scene
        .until("widgets' child", configmap("a-one"), |_| true)
        .await;

    // A rule for a new kind, whose permissions kiln lacks.
    let nodes = nodes_rule("1", "");
    set_rules(
        &client,
        &n,
        &[("widgets.yaml", WIDGETS), ("nodes.yaml", &nodes)],
    )
    .await;
    scene.apply(pool("p")).await;
    let notes = told(&client, &n, "RulesRefused").await;
    assert!(
        notes[0].contains("kiln may not list nodepools.infra.ported.kiln.dev"),
        "the Event says why: {notes:?}"
    );
    assert!(
        notes[0].contains("customresourcedefinitions"),
        "the CRD that cannot be read is named: {notes:?}"
    );
    assert_eq!(h.metrics.rules_pending.get(), 1);
    assert_eq!(h.engine.state("nodes"), None, "the rule was started");
    // The running rules keep running.
    scene.apply(widget("b")).await;
    scene
        .until("widgets' child of a new widget", configmap("b-one"), |_| {
            true
        })
        .await;
    assert!(scene.get("v1", "ConfigMap", "p-pool").await.is_none());

    // RBAC fixed, kiln not restarted: the rule starts and writes its status
    // per the CRD's schema.
    as_kiln_for(&client, &n, &[WIDGETS, &nodes]).await;
    scene
        .until("the new rule's child", configmap("p-pool"), |_| true)
        .await;
    scene
        .until(
            "the new rule's status",
            ("infra.ported.kiln.dev/v1", "NodePool", "p"),
            |p| p["status"]["nodes"] == json!(["a", "b"]),
        )
        .await;
    assert_eq!(h.metrics.rules_pending.get(), 0);
    assert_eq!(h.metrics.reloads("success"), 1);
    h.stop().await;
    scene.end().await;
}
