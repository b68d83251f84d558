//! Named expressions and dependencies between children: `vars` reach
//! every template, a child waits for the children it
//! refers to (until they exist, or are ready), the primary says so, and a
//! child waiting again is kept, not pruned.

use serde_json::{Value, json};

use crate::support::rule_from_yaml;
use crate::support::scene::{Scene, condition, configmap, widget_at};

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

const VARS: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: vars}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  vars:
    name: "{{ self.metadata.name }}-app"
    host: "{{ vars.name }}.{{ self.spec.domain }}"
    labels: {app: "{{ vars.name }}", tier: "{{ self.spec.tier | default('web') }}"}
  children:
    - id: config
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ vars.name }}", labels: "{{ vars.labels }}"}
        data:
          host: "{{ vars.host }}"
          urls: "{{ self.spec.paths | each('\"https://\" ~ vars.host ~ item') | join(',') }}"
  status:
    fields:
      url: "https://{{ vars.host }}/"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vars_reach_children_status_and_each_and_follow_the_primary() {
    let scene = Scene::new("deps-vars").await.with_widgets().await;
    scene
        .apply(widget(
            "w",
            json!({"domain": "example.com", "paths": ["/a", "/b"]}),
        ))
        .await;
    let scene = scene.running(&[rule_from_yaml(VARS)]).await;
    let child = scene
        .until("the child built from vars", configmap("w-app"), |c| {
            c["data"]["host"] == "w-app.example.com"
        })
        .await;
    assert_eq!(
        child["data"]["urls"],
        "https://w-app.example.com/a,https://w-app.example.com/b"
    );
    assert_eq!(child["metadata"]["labels"]["app"], "w-app");
    assert_eq!(child["metadata"]["labels"]["tier"], "web");
    scene
        .until("the status built from vars", widget_at("w"), |w| {
            w["status"]["url"] == "https://w-app.example.com/"
        })
        .await;

    // Vars are evaluated per reconcile: a new domain reaches every use.
    scene
        .apply(widget(
            "w",
            json!({"domain": "example.org", "paths": ["/a"], "tier": "db"}),
        ))
        .await;
    let child = scene
        .until(
            "the child to follow the new domain",
            configmap("w-app"),
            |c| c["data"]["host"] == "w-app.example.org",
        )
        .await;
    assert_eq!(child["data"]["urls"], "https://w-app.example.org/a");
    assert_eq!(child["metadata"]["labels"]["tier"], "db");
    scene
        .until("the status to follow", widget_at("w"), |w| {
            w["status"]["url"] == "https://w-app.example.org/"
        })
        .await;
    scene.end().await;
}

/// `db` is made first; `app` copies its name (waits until it exists) and is
/// ready once someone labels it `up=yes`; `web` reads `ready.app` (waits
/// until `app` is ready).
const CHAIN: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: chain}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: web
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-web"}
        data: {appReady: "{{ 'yes' if ready.app else 'no' }}"}
    - id: app
      readyWhen: child.metadata.labels.up | default('') == 'yes'
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-app"}
        data: {db: "{{ children.db.metadata.name }}"}
    - id: db
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-db"}
  status:
    fields:
      appReady: "{{ ready.app }}"
      webReady: "{{ ready.web }}"
  requeue: {waiting: 1s}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_waits_for_the_children_it_refers_to_and_the_primary_says_so() {
    let scene = Scene::new("deps-chain").await.with_widgets().await;
    scene.apply(widget("w", json!({}))).await;
    let scene = scene.running(&[rule_from_yaml(CHAIN)]).await;

    // `db` and then `app` appear; `web` waits for `app` to be ready.
    let app = scene
        .until("app, after db", configmap("w-app"), |_| true)
        .await;
    assert_eq!(app["data"]["db"], "w-db");
    let w = scene
        .until("the primary to wait for app", widget_at("w"), |w| {
            condition(w, "Waiting")["message"]
                .as_str()
                .is_some_and(|m| m.contains("`web` waits for `app` to be ready"))
        })
        .await;
    assert_eq!(condition(&w, "Waiting")["status"], "True");
    assert_eq!(condition(&w, "Waiting")["reason"], "WaitingForChildren");
    assert_eq!(condition(&w, "Ready")["status"], "False");
    assert_eq!(condition(&w, "Reconciled")["status"], "True");
    assert_eq!(w["status"]["appReady"], false);
    assert!(
        scene.get("v1", "ConfigMap", "w-web").await.is_none(),
        "web was applied before app was ready"
    );

    // Someone marks `app` ready: `web` appears, reading `ready.app`.
    scene
        .apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "w-app", "labels": {"up": "yes"}}}))
        .await;
    let web = scene
        .until("web, once app is ready", configmap("w-web"), |_| true)
        .await;
    assert_eq!(web["data"]["appReady"], "yes");
    let w = scene.ready("w").await;
    assert_eq!(condition(&w, "Waiting")["status"], "False");
    assert_eq!(w["status"]["appReady"], true);
    assert_eq!(w["status"]["webReady"], true);

    // `app` stops being ready: `web` waits again, and is kept as it is.
    scene
        .apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "w-app", "labels": {"up": "no"}}}))
        .await;
    scene
        .until("the primary to wait again", widget_at("w"), |w| {
            condition(w, "Waiting")["status"] == "True" && w["status"]["appReady"] == false
        })
        .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let kept = scene.get("v1", "ConfigMap", "w-web").await;
    assert!(kept.is_some(), "a child waiting again was pruned");
    assert_eq!(kept.unwrap()["data"]["appReady"], "yes");
    scene.end().await;
}

/// The KRO getting-started Application, ported (`rules/application.yaml`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ported_kro_application_orders_its_children_and_reports_their_readiness() {
    let scene = Scene::new("deps-kro").await;
    crate::support::install_crds(&scene.client, "examples/application").await;
    scene
        .apply(crate::support::example(
            "examples/application/application.yaml",
        ))
        .await;
    let rule = crate::support::shipped_rule("application", |t| t);
    let scene = scene.running(&[rule]).await;
    let app = ("demo.kiln.dev/v1", "Application", "my-application-instance");

    // What KRO makes: a Deployment of 3 named after spec.name, with the image.
    let deployment = scene
        .until(
            "the Deployment",
            ("apps/v1", "Deployment", "my-awesome-app"),
            |_| true,
        )
        .await;
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"],
        json!({"app": "my-awesome-app"})
    );
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["name"], "my-awesome-app");
    assert_eq!(container["image"], "nginx");
    assert_eq!(container["ports"][0]["containerPort"], 80);
    // A Service taking its selector from the Deployment.
    let service = scene
        .until(
            "the Service",
            ("v1", "Service", "my-awesome-app-service"),
            |_| true,
        )
        .await;
    assert_eq!(
        service["spec"]["selector"],
        json!({"app": "my-awesome-app"})
    );
    assert_eq!(service["spec"]["ports"][0]["port"], 80);
    // No Ingress while the Deployment is not available; the primary says why.
    let waiting = scene
        .until("the Application to wait for its Deployment", app, |a| {
            condition(a, "Waiting")["message"]
                .as_str()
                .is_some_and(|m| m.contains("`ingress` waits for `deployment` to be ready"))
        })
        .await;
    assert_eq!(waiting["status"]["availableReplicas"], 0);
    assert_eq!(waiting["status"]["serving"], false);
    assert_eq!(waiting["status"]["ingressReady"], false);
    let ingress = ("networking.k8s.io/v1", "Ingress", "my-awesome-app-ingress");
    assert!(
        scene.get(ingress.0, ingress.1, ingress.2).await.is_none(),
        "the Ingress came before the Deployment was ready"
    );
    let rule_text =
        std::fs::read_to_string(crate::support::repo_root().join("rules/application.yaml"))
            .unwrap();
    let explained = crate::support::kiln_explain(
        app.0,
        app.1,
        &format!("{}/{}", scene.ns(), app.2),
        &[("application.yaml", &rule_text)],
    );
    for line in [
        "    deployment Deployment my-awesome-app: applied, not ready",
        "    service Service my-awesome-app-service: applied, ready",
        "    ingress: waits for `deployment` to be ready: not applied yet",
    ] {
        assert!(explained.contains(line), "no `{line}` in:\n{explained}");
    }

    // The local control plane has no kubelet: play the Deployment controller.
    let deployments = scene.api("apps/v1", "Deployment").await;
    let available = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "my-awesome-app"},
        "status": {"replicas": 3, "readyReplicas": 3, "availableReplicas": 3,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable", "message": "up"}]}});
    deployments
        .patch_status(
            "my-awesome-app",
            &kube::api::PatchParams::apply("test-deployment-controller").force(),
            &kube::api::Patch::Apply(&available),
        )
        .await
        .unwrap();

    let made = scene
        .until("the Ingress, once the Deployment is ready", ingress, |_| {
            true
        })
        .await;
    let backend = &made["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"];
    assert_eq!(backend["name"], "my-awesome-app-service");
    assert_eq!(backend["port"]["number"], 80);
    let ready = scene
        .until("the Application to be ready", app, |a| {
            condition(a, "Ready")["status"] == "True"
        })
        .await;
    assert_eq!(ready["status"]["availableReplicas"], 3);
    assert_eq!(ready["status"]["serving"], true);
    assert_eq!(ready["status"]["ingressReady"], true);
    assert_eq!(
        ready["status"]["deploymentConditions"][0]["type"],
        "Available"
    );
    assert_eq!(condition(&ready, "Waiting")["status"], "False");

    // includeWhen turned false: the Ingress goes, the rest stays.
    let mut off = crate::support::example("examples/application/application.yaml");
    off["spec"]["ingress"]["enabled"] = json!(false);
    scene.apply(off).await;
    crate::support::eventually(
        "the Ingress to be pruned",
        crate::support::scene::CONVERGE,
        || async {
            scene
                .get(ingress.0, ingress.1, ingress.2)
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(
        scene
            .get("v1", "Service", "my-awesome-app-service")
            .await
            .is_some()
    );
    scene.end().await;
}

/// The chain above with ordered deletion: deleting a Widget deletes `app`
/// (which waits for `db`) before `db`. (`web` waits for `app` to be ready,
/// which nobody marks here.)
fn ordered() -> String {
    CHAIN
        .replace("metadata: {name: chain}", "metadata: {name: ordered}")
        .replace(
            "  children:\n",
            "  deletion: {ordered: true}\n  children:\n",
        )
}

const FINALIZER: &str = "ordered.kiln.dev/ordered-deletion";

fn finalizers(obj: &Value) -> Vec<&str> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Sets the test's own finalizers on ConfigMap `name`.
async fn hold_configmap(scene: &Scene, name: &str, finalizers: &[&str]) {
    scene
        .apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "finalizers": finalizers}}))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_deletion_deletes_a_child_before_the_children_it_waits_for() {
    let scene = Scene::new("deps-delete").await.with_widgets().await;
    scene.apply(widget("w", json!({}))).await;
    let scene = scene.running(&[rule_from_yaml(&ordered())]).await;
    scene.until("app", configmap("w-app"), |_| true).await;
    scene.until("db", configmap("w-db"), |_| true).await;
    let w = scene
        .until("the finalizer", widget_at("w"), |w| {
            finalizers(w).contains(&FINALIZER)
        })
        .await;
    assert_eq!(finalizers(&w), [FINALIZER]);

    // `app` cannot go away yet (a finalizer of the test's own).
    hold_configmap(&scene, "w-app", &["test.kiln.dev/hold"]).await;
    crate::support::delete(
        &scene.client,
        ("test.kiln.dev/v1", "Widget"),
        Some(scene.ns()),
        "w",
    )
    .await;
    scene
        .until("kiln to delete app", configmap("w-app"), |c| {
            c["metadata"]["deletionTimestamp"].is_string()
        })
        .await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let db = scene.get("v1", "ConfigMap", "w-db").await;
    assert!(
        db.is_some_and(|d| d["metadata"]["deletionTimestamp"].is_null()),
        "db was deleted while app, which waits for it, was still there"
    );
    assert!(scene.get("test.kiln.dev/v1", "Widget", "w").await.is_some());

    // `app` goes: then `db`, then the Widget itself.
    hold_configmap(&scene, "w-app", &[]).await;
    crate::support::eventually(
        "db and the Widget to be gone",
        crate::support::scene::CONVERGE,
        || async {
            let db = scene.get("v1", "ConfigMap", "w-db").await;
            let w = scene.get("test.kiln.dev/v1", "Widget", "w").await;
            (db.is_none() && w.is_none()).then_some(())
        },
    )
    .await;
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_that_stops_leaves_no_finalizer_behind() {
    let scene = Scene::new("deps-release").await.with_widgets().await;
    scene.apply(widget("w", json!({}))).await;
    let scene = scene.running(&[rule_from_yaml(&ordered())]).await;
    scene
        .until("the finalizer", widget_at("w"), |w| {
            finalizers(w).contains(&FINALIZER)
        })
        .await;
    // The rule no longer orders deletion (a hot reload): the finalizer goes.
    let unordered = ordered().replace("  deletion: {ordered: true}\n", "");
    scene.engine().replace(rule_from_yaml(&unordered)).await;
    scene
        .until("the finalizer to go", widget_at("w"), |w| {
            finalizers(w).is_empty()
        })
        .await;
    // Ordered again, then removed: the finalizer goes with the rule.
    scene.engine().replace(rule_from_yaml(&ordered())).await;
    scene
        .until("the finalizer again", widget_at("w"), |w| {
            finalizers(w).contains(&FINALIZER)
        })
        .await;
    scene.engine().remove("ordered", false).await;
    let w = scene
        .until("the finalizer to go with the rule", widget_at("w"), |w| {
            finalizers(w).is_empty()
        })
        .await;
    assert!(w["metadata"]["deletionTimestamp"].is_null());
    scene.end().await;
}
