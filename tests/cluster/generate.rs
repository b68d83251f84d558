//! What Kyverno and Metacontroller users try next, each on the cluster:
//! decorators reading `spec.vars`, a rule that takes only primaries created
//! after it was first loaded (`spec.for.takeExisting: false`), a
//! created-once child that stays deleted (`recreate: false`), a child whose
//! maps hold exactly what the rule renders (`replace`), and a child reading
//! a sibling's live state without waiting for it (`observed.<id>`).

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::scene::{Scene, configmap, widget_at};
use crate::support::{self, rule_from_yaml};

fn widget(name: &str, team: &str) -> Value {
    json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
           "metadata": {"name": name}, "spec": {"team": team}})
}

/// Waits `for_` and checks that `name` never appears meanwhile.
async fn stays_absent(
    scene: &Scene,
    (api_version, kind, name): (&str, &str, &str),
    for_: Duration,
) {
    let end = tokio::time::Instant::now() + for_;
    while tokio::time::Instant::now() < end {
        assert!(
            scene.get(api_version, kind, name).await.is_none(),
            "{kind} {name} must not be there"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The engine stopped and a new one started on the same rules (a restart).
async fn restarted(scene: Scene, rules: &[std::sync::Arc<kiln::rules::Rule>]) -> Scene {
    scene.engine().shutdown().await;
    scene.running(rules).await
}

const VARS_DECORATOR: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: vars-decorator}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  vars:
    team: "{{ self.spec.team | upper }}"
  decorate:
    - id: label
      target: self
      patch:
        metadata:
          labels:
            team: "{{ vars.team }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decorator_reads_the_rules_vars() {
    let scene = Scene::new("vars-decorator").await.with_widgets().await;
    scene.apply(widget("w", "platform")).await;
    let scene = scene.running(&[rule_from_yaml(VARS_DECORATOR)]).await;
    scene
        .until("the label from vars", widget_at("w"), |w| {
            w["metadata"]["labels"]["team"] == "PLATFORM"
        })
        .await;
    assert_eq!(scene.writes_during_resync("vars-decorator", 1).await, 0);
    scene.end().await;
}

const NEW_ONLY: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: new-only}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget, takeExisting: false}
  children:
    - id: config
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-config"}
        data: {team: "{{ self.spec.team }}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_existing_false_takes_only_primaries_created_after_the_first_load() {
    let rules = [rule_from_yaml(NEW_ONLY)];
    let scene = Scene::new("new-only").await.with_widgets().await;
    scene.apply(widget("old", "a")).await;
    // The record's second is after the old primary's.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let scene = scene.running(&rules).await;
    let record = scene
        .until(
            "the first load recorded",
            configmap("kiln-since-new-only"),
            |_| true,
        )
        .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    scene.apply(widget("new", "b")).await;
    scene
        .until("the new primary's child", configmap("new-config"), |c| {
            c["data"]["team"] == "b"
        })
        .await;
    stays_absent(&scene, configmap("old-config"), Duration::from_secs(2)).await;
    let old = scene
        .get("test.kiln.dev/v1", "Widget", "old")
        .await
        .unwrap();
    assert!(old.get("status").is_none(), "nothing written on it: {old}");

    // A restart reads the same record: the old primary stays untaken, a
    // newer one is taken.
    let scene = restarted(scene, &rules).await;
    scene.apply(widget("newer", "c")).await;
    scene
        .until(
            "the newer primary's child",
            configmap("newer-config"),
            |_| true,
        )
        .await;
    stays_absent(&scene, configmap("old-config"), Duration::from_secs(2)).await;
    let again = scene
        .get("v1", "ConfigMap", "kiln-since-new-only")
        .await
        .unwrap();
    assert_eq!(
        again["metadata"]["creationTimestamp"],
        record["metadata"]["creationTimestamp"]
    );
    scene.end().await;
}

/// Creates, within one second of the API server's clock, a Widget `old`,
/// the record of the first load of `new-only` naming `old` as existing in
/// its second (as kiln records what it listed before), then a Widget
/// `new`; tries again until all three share a second. Returns the
/// names of the two Widgets.
async fn one_second(scene: &Scene) -> (String, String) {
    for attempt in 0..50 {
        let (old, new) = (format!("old{attempt}"), format!("new{attempt}"));
        let old_w = scene.apply(widget(&old, "a")).await;
        let uid = old_w["metadata"]["uid"].as_str().unwrap();
        let record = scene
            .apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "kiln-since-new-only"}, "data": {"rule": "new-only", "sameSecond": uid}}))
            .await;
        let new_w = scene.apply(widget(&new, "b")).await;
        let second = |o: &Value| o["metadata"]["creationTimestamp"].clone();
        if second(&old_w) == second(&record) && second(&record) == second(&new_w) {
            return (old, new);
        }
        for name in [&old, &new] {
            support::delete(
                &scene.client,
                ("test.kiln.dev/v1", "Widget"),
                Some(scene.ns()),
                name,
            )
            .await;
        }
        support::delete(
            &scene.client,
            ("v1", "ConfigMap"),
            Some(scene.ns()),
            "kiln-since-new-only",
        )
        .await;
    }
    panic!("no second held all three creations in 50 tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_existing_false_takes_a_primary_created_in_the_first_loads_second_after_it() {
    let rules = [rule_from_yaml(NEW_ONLY)];
    let scene = Scene::new("same-second").await.with_widgets().await;
    let (old, new) = one_second(&scene).await;
    let scene = scene.running(&rules).await;
    scene
        .until(
            "the primary made after the record, in its second",
            configmap(&format!("{new}-config")),
            |c| c["data"]["team"] == "b",
        )
        .await;
    stays_absent(
        &scene,
        configmap(&format!("{old}-config")),
        Duration::from_secs(2),
    )
    .await;
    scene.end().await;
}

const ONCE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: once}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: starter
      updatePolicy: CreateOnce
      recreate: false
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-starter"}
        data: {team: "{{ self.spec.team }}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_once_child_deleted_on_purpose_is_not_created_again() {
    let rules = [rule_from_yaml(ONCE)];
    let scene = Scene::new("once").await.with_widgets().await;
    scene.apply(widget("w", "a")).await;
    let scene = scene.running(&rules).await;
    scene
        .until("the starter", configmap("w-starter"), |_| true)
        .await;
    scene
        .until("the record on the primary", widget_at("w"), |w| {
            w["metadata"]["annotations"]["once.kiln.dev/created-once"] == "starter/w-starter"
        })
        .await;
    assert_eq!(scene.writes_during_resync("once", 1).await, 0);

    support::delete(
        &scene.client,
        ("v1", "ConfigMap"),
        Some(scene.ns()),
        "w-starter",
    )
    .await;
    stays_absent(&scene, configmap("w-starter"), Duration::from_secs(3)).await;
    // An edit of the primary renders it again: still not created.
    scene.apply(widget("w", "b")).await;
    stays_absent(&scene, configmap("w-starter"), Duration::from_secs(3)).await;
    // Nor after a restart.
    let scene = restarted(scene, &rules).await;
    stays_absent(&scene, configmap("w-starter"), Duration::from_secs(3)).await;
    // A new primary gets its own.
    scene.apply(widget("w2", "c")).await;
    scene
        .until("the new primary's starter", configmap("w2-starter"), |c| {
            c["data"]["team"] == "c"
        })
        .await;
    scene.end().await;
}

const QUOTA: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: quota}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: quota
      replace: [spec.hard]
      template:
        apiVersion: v1
        kind: ResourceQuota
        metadata: {name: "{{ self.metadata.name }}-quota"}
        spec:
          hard: {pods: "10"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_removes_keys_another_writer_added_under_the_field() {
    let scene = Scene::new("replace").await.with_widgets().await;
    scene.apply(widget("w", "a")).await;
    let scene = scene.running(&[rule_from_yaml(QUOTA)]).await;
    let at = ("v1", "ResourceQuota", "w-quota");
    scene
        .until("the quota", at, |q| q["spec"]["hard"]["pods"] == "10")
        .await;
    assert_eq!(scene.writes_during_resync("quota", 1).await, 0);

    // Another field manager adds a key kiln does not render.
    scene
        .apply(json!({"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "w-quota"},
            "spec": {"hard": {"count/secrets": "5"}}}))
        .await;
    let q = scene
        .until("the added key removed", at, |q| {
            q["spec"]["hard"].get("count/secrets").is_none()
        })
        .await;
    assert_eq!(q["spec"]["hard"], json!({"pods": "10"}));
    assert_eq!(scene.writes_during_resync("quota", 1).await, 0);
    scene.end().await;
}

const OBSERVED: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: observed}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: endpoint
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-endpoint"}
        data:
          ip: "{{ READ.service.spec.clusterIP | default('') }}"
    - id: service
      template:
        apiVersion: v1
        kind: Service
        metadata:
          name: "{{ self.metadata.name }}"
          annotations:
            endpoint-config: "{{ children.endpoint.metadata.name }}"
        spec:
          ports: [{port: 80}]
          selector: {app: "{{ self.metadata.name }}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observed_reads_a_sibling_without_waiting_for_it() {
    // With `children.service` the two children wait for each other.
    let file = tempfile::tempdir().unwrap();
    let path = file.path().join("rule.yaml");
    std::fs::write(&path, OBSERVED.replace("READ", "children")).unwrap();
    let refused = kiln::rules::load(&[path]).unwrap_err();
    assert!(refused[0].to_string().contains("cycle"), "{}", refused[0]);

    let scene = Scene::new("observed").await.with_widgets().await;
    scene.apply(widget("w", "a")).await;
    let rule = rule_from_yaml(&OBSERVED.replace("READ", "observed"));
    let scene = scene.running(&[rule]).await;
    let svc = scene
        .until("the Service", ("v1", "Service", "w"), |s| {
            s["spec"]["clusterIP"]
                .as_str()
                .is_some_and(|ip| !ip.is_empty())
        })
        .await;
    let ip = svc["spec"]["clusterIP"].clone();
    scene
        .until(
            "its address in the ConfigMap",
            configmap("w-endpoint"),
            |c| c["data"]["ip"] == ip,
        )
        .await;
    assert_eq!(scene.writes_during_resync("observed", 1).await, 0);
    scene.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_against_a_writer_that_keeps_adding_is_a_bounded_fight() {
    let scene = Scene::new("replace-fight").await.with_widgets().await;
    scene.apply(widget("w", "a")).await;
    let rule = QUOTA.replace(
        "spec:\n  for:",
        "spec:\n  requeue: {onError: {initial: 1s, max: 4s}}\n  for:",
    );
    let scene = scene.running(&[rule_from_yaml(&rule)]).await;
    let at = ("v1", "ResourceQuota", "w-quota");
    scene
        .until("the quota", at, |q| q["spec"]["hard"]["pods"] == "10")
        .await;
    let quotas = support::dynamic_api(
        &scene.client,
        &json!("v1"),
        &json!("ResourceQuota"),
        Some(scene.ns()),
    )
    .await;
    let before = crate::support::counts::applies(scene.engine());
    let started = std::time::Instant::now();
    let mut said = None;
    // Until kiln says it fights (20 strips; slower on a loaded machine).
    while said.is_none() && started.elapsed() < crate::support::PATIENCE {
        let theirs: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "w-quota"},
            "spec": {"hard": {"count/secrets": "5"}}}))
        .unwrap();
        let pp = kube::api::PatchParams::apply("fighter").force();
        quotas
            .patch("w-quota", &pp, &kube::api::Patch::Apply(&theirs))
            .await
            .unwrap();
        let w = scene.get("test.kiln.dev/v1", "Widget", "w").await.unwrap();
        let reconciled = crate::support::scene::condition(&w, "Reconciled");
        if said.is_none() && reconciled["reason"] == "Conflict" {
            said = Some(reconciled.clone());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answers = crate::support::counts::applies(scene.engine()) - before;
    assert!(answers <= 2 * 20 + 4, "{answers} patches: unbounded");
    let reconciled = said.expect("the primary never said it was in a fight");
    assert!(
        reconciled["message"].as_str().unwrap().contains("fighter"),
        "{reconciled}"
    );
    scene.end().await;
}

const ALSO: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: also}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: config
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-also"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_that_does_not_take_an_old_primary_has_no_part_in_its_status() {
    let rules = [rule_from_yaml(NEW_ONLY), rule_from_yaml(ALSO)];
    let scene = Scene::new("new-only-shared").await.with_widgets().await;
    scene.apply(widget("old", "a")).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let scene = scene.running(&rules).await;
    // Only `also` takes it: its status is that rule's alone.
    let old = scene.ready("old").await;
    let types: Vec<&str> = old["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert!(
        !types.iter().any(|t| t.starts_with("new-only.")),
        "{types:?}"
    );
    stays_absent(&scene, configmap("old-config"), Duration::from_secs(2)).await;
    scene.end().await;
}
