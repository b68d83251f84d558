//! Decorators: a rule patches objects it does not own —
//! related Pods, the primary itself — as a field manager of its own, never
//! taking a field another manager owns unless forced, and taking back
//! exactly its fields when it stops setting them. The first test is
//! Metacontroller's service-per-pod example, ported
//! (`examples/ported/service-per-pod/`).

use serde_json::{Value, json};

use crate::support::scene::{Scene, condition, widget_at};
use crate::support::{self, rule_from_yaml};

const MANAGER: &str = "kiln.service-per-pod.pod_name";

fn example(file: &str) -> String {
    std::fs::read_to_string(
        support::repo_root()
            .join("examples/ported/service-per-pod")
            .join(file),
    )
    .unwrap()
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "labels": {"app": "nginx", "team": "web"}},
           "spec": {"automountServiceAccountToken": false,
                    "containers": [{"name": "nginx", "image": "nginx"}]}})
}

fn managers(obj: &Value) -> Vec<String> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_per_pod_labels_each_pod_and_gives_it_a_service() {
    let rule = example("rule.yaml");
    let scene = Scene::new("per-pod").await;
    let sts =
        kiln::yaml::parse_documents(&example("statefulset.yaml"), kiln::yaml::Limits::default())
            .unwrap()[0]
            .to_json();
    scene.apply(sts).await;
    for name in ["nginx-0", "nginx-1"] {
        scene.apply(pod(name)).await;
    }
    let scene = scene.running(&[rule_from_yaml(&rule)]).await;
    for name in ["nginx-0", "nginx-1"] {
        let p = scene
            .until("the pod labelled", ("v1", "Pod", name), |p| {
                p["metadata"]["labels"]["pod-name"] == name
            })
            .await;
        assert_eq!(p["metadata"]["labels"]["team"], "web", "other labels stay");
        assert!(
            managers(&p).contains(&MANAGER.to_string()),
            "{:?}",
            managers(&p)
        );
        let svc = scene
            .until("its Service", ("v1", "Service", name), |_| true)
            .await;
        assert_eq!(svc["spec"]["selector"], json!({"pod-name": name}));
        assert_eq!(svc["spec"]["ports"][0]["port"], 80);
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    }
    assert_eq!(
        scene.writes_during_resync("service-per-pod", 1).await,
        0,
        "a converged decoration costs no writes"
    );

    // The rule stops decorating: exactly its label leaves every Pod.
    let without: String = rule.split("  decorate:").next().unwrap().to_string()
        + "  children:"
        + rule.split("  children:").nth(1).unwrap();
    scene.engine().replace(rule_from_yaml(&without)).await;
    for name in ["nginx-0", "nginx-1"] {
        let p = scene
            .until("the label taken back", ("v1", "Pod", name), |p| {
                p["metadata"]["labels"].get("pod-name").is_none()
            })
            .await;
        assert_eq!(p["metadata"]["labels"]["team"], "web");
        assert!(!managers(&p).contains(&MANAGER.to_string()));
    }
    scene.end().await;
}

const TEAM: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: team}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  decorate:
    - id: label
      target: self
      force: FORCE
      patch:
        metadata:
          labels:
            team: "{{ self.spec.team }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decorator_never_takes_a_field_another_manager_owns_unless_forced() {
    let scene = Scene::new("decorate-self").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "labels": {"team": "mine"}}, "spec": {"team": "platform"}}))
        .await;
    let scene = scene
        .running(&[rule_from_yaml(&TEAM.replace("FORCE", "false"))])
        .await;
    let message = scene.refused("w", "Conflict").await;
    assert!(message.contains("team"), "{message}");
    let w = scene.get("test.kiln.dev/v1", "Widget", "w").await.unwrap();
    assert_eq!(w["metadata"]["labels"]["team"], "mine", "their value stays");

    // Forced, the rule takes the field.
    scene
        .engine()
        .replace(rule_from_yaml(&TEAM.replace("FORCE", "true")))
        .await;
    scene
        .until("the forced label", widget_at("w"), |w| {
            w["metadata"]["labels"]["team"] == "platform"
                && condition(w, "Reconciled")["status"] == "True"
        })
        .await;
    scene.end().await;
}

const CLAIMING: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: claiming}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  watches:
    - {name: target, apiVersion: v1, kind: ConfigMap, ref: {name: "{{ self.spec.target }}"}}
  decorate:
    - id: mark
      target: related.target
      patch:
        metadata:
          labels: {marked-by: "{{ self.metadata.name }}"}
"#;

/// Two primaries of one rule decorating one object would do it as one
/// field manager, each undoing the other without end: both say so, and
/// kiln stops writing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decorators_fight_themselves_endlessly() {
    let scene = Scene::new("claims").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}}))
        .await;
    for name in ["a", "b"] {
        scene
            .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
                "metadata": {"name": name}, "spec": {"target": "shared"}}))
            .await;
    }
    let scene = scene.running(&[rule_from_yaml(CLAIMING)]).await;
    for (name, other) in [("a", "b"), ("b", "a")] {
        let message = scene.refused(name, "Conflict").await;
        assert!(
            message.contains("ConfigMap") && message.contains(&format!("/{other}")),
            "{message}"
        );
    }
    // No flapping: the shared object is written no more.
    support::settled("the decorators to settle", || {
        support::counts::applies(scene.engine())
    })
    .await;
    let before = support::counts::applies(scene.engine());
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let during = support::counts::applies(scene.engine()) - before;
    assert_eq!(during, 0, "{during} applies in 3 s");

    // One lets go: the other decorates alone.
    let widgets = scene.api("test.kiln.dev/v1", "Widget").await;
    widgets
        .delete("b", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    scene
        .until("the label of a alone", ("v1", "ConfigMap", "shared"), |c| {
            c["metadata"]["labels"]["marked-by"] == "a"
        })
        .await;
    scene.ready("a").await;
    scene.end().await;
}

/// A decorator of a cluster-scoped object found by a name the primary
/// gives writes only where the rule author allows (`allowNames`): a
/// tenant naming `kube-system` gets a refusal naming that bound, and
/// `kube-system` no label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decorator_writes_where_the_tenant_says() {
    let scene = Scene::new("bounded").await.with_widgets().await;
    let rule = format!(
        r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: tagger}}
spec:
  for: {{apiVersion: test.kiln.dev/v1, kind: Widget}}
  watches:
    - {{name: ns, apiVersion: v1, kind: Namespace, ref: {{name: "{{{{ self.spec.namespace }}}}"}}}}
  decorate:
    - id: tag
      target: related.ns
      allowNames: [{}]
      patch:
        metadata:
          labels: {{tagged-by: "{{{{ self.metadata.name }}}}"}}
"#,
        scene.ns()
    );
    for (name, namespace) in [("mine", scene.ns()), ("evil", "kube-system")] {
        scene
            .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
                "metadata": {"name": name}, "spec": {"namespace": namespace}}))
            .await;
    }
    let scene = scene.running(&[rule_from_yaml(&rule)]).await;
    let message = scene.refused("evil", "Invalid").await;
    assert!(
        message.contains("kube-system") && message.contains("allowNames"),
        "{message}"
    );
    support::eventually(
        "the label on the allowed Namespace",
        crate::support::scene::CONVERGE,
        || async {
            let own = support::get(&scene.client, "v1", "Namespace", "", scene.ns()).await;
            (own?["metadata"]["labels"]["tagged-by"] == "mine").then_some(())
        },
    )
    .await;
    let system = support::get(&scene.client, "v1", "Namespace", "", "kube-system")
        .await
        .unwrap();
    assert!(
        system["metadata"]["labels"].get("tagged-by").is_none(),
        "{}",
        system["metadata"]
    );
    scene.end().await;
}

const MARKING: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: marking}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  watches:
    - {name: target, apiVersion: v1, kind: ConfigMap, ref: {name: target}}
  decorate:
    - id: mark
      target: related.target
      patch:
        metadata:
          labels: {marked: "yes"}
"#;

/// kiln decorates from its cache: a target deleted between the cache and
/// the write is never created again by the apply (which would hold
/// nothing but the decorator's fields, owned by nobody). The decoration is
/// planned from the target as cached, the target deleted, then the
/// decoration sent exactly as the engine sends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decorator_resurrects_what_was_deleted() {
    use kiln::engine::decision::decorate;
    use kiln::engine::runtime::{Sent, send_decoration};
    let scene = Scene::new("resurrect").await.with_widgets().await;
    let cached = scene
        .apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "target"}}))
        .await;
    let widget = scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}))
        .await;
    let rule = rule_from_yaml(MARKING);
    let mut inputs = kiln::render::Inputs {
        primary: widget.clone(),
        ..Default::default()
    };
    inputs.related.insert("target".into(), cached);
    let this = kiln::template::to_jinja(&widget);
    let planned = decorate(
        &rule,
        "kiln",
        || kiln::render::context(&rule, &this, &inputs),
        &inputs,
    )
    .unwrap();
    assert_eq!(planned.apply.len(), 1, "{planned:?}");

    let cms = scene.api("v1", "ConfigMap").await;
    cms.delete("target", &Default::default()).await.unwrap();
    let sent = send_decoration(&cms, &planned.apply[0]).await.unwrap();
    assert_eq!(sent, Sent::Gone);
    assert!(
        scene.get("v1", "ConfigMap", "target").await.is_none(),
        "the decoration created the deleted target"
    );

    // Another object by the same name since: not the one kiln saw.
    scene
        .apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "target"}}))
        .await;
    let _ = send_decoration(&cms, &planned.apply[0]).await;
    let now = scene.get("v1", "ConfigMap", "target").await.unwrap();
    assert!(now["metadata"]["labels"].get("marked").is_none(), "{now}");
    scene.end().await;
}
