//! Declarative correctness: children and status hold exactly what
//! the rules and primaries say now — a field either stops rendering leaves —
//! rules sharing a primary keep their parts apart, and values the API server
//! stores differently cost no writes at steady state.

use serde_json::{Value, json};

use crate::support::rule_from_yaml;
use crate::support::scene::{Scene, condition, configmap, widget_at};

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

const LABELLED: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: labelled}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: "{{ self.metadata.name }}"
          labels: {extra: "yes", keep: "yes"}
        data: {owner: me, old: x}
  status:
    fields:
      owner: me
      old: x
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_a_rule_stops_rendering_leave_the_child_and_the_status() {
    let scene = Scene::new("decl-rule").await.with_widgets().await;
    scene.apply(widget("w", json!({}))).await;
    let scene = scene.running(&[rule_from_yaml(LABELLED)]).await;
    scene
        .until("the first version's child", configmap("w"), |c| {
            c["data"]["old"] == "x" && c["metadata"]["labels"]["extra"] == "yes"
        })
        .await;
    scene
        .until("the first version's status", widget_at("w"), |w| {
            w["status"]["old"] == "x"
        })
        .await;

    // Hot reload: the rule drops a label, a data key and a status field.
    let edited = LABELLED
        .replace("{extra: \"yes\", keep: \"yes\"}", "{keep: \"yes\"}")
        .replace("{owner: me, old: x}", "{owner: me}")
        .replace("      old: x\n", "");
    scene.engine().replace(rule_from_yaml(&edited)).await;

    let child = scene
        .until(
            "`extra` and `old` to leave the child",
            configmap("w"),
            |c| c["metadata"]["labels"].get("extra").is_none() && c["data"].get("old").is_none(),
        )
        .await;
    assert_eq!(child["metadata"]["labels"]["keep"], "yes");
    assert_eq!(child["data"]["owner"], "me");
    // Under load the first status without `old` may come from a reconcile
    // whose apply failed transiently (Ready=False); converged is what counts.
    let primary = scene
        .until(
            "`old` to leave the status, converged",
            widget_at("w"),
            |w| w["status"].get("old").is_none() && condition(w, "Ready")["status"] == "True",
        )
        .await;
    assert_eq!(primary["status"]["owner"], "me");
    // And converged again: a resync writes nothing.
    assert_eq!(scene.writes_during_resync("labelled", 1).await, 0);
    scene.end().await;
}

const ANNOTATIONS: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: annotations}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: copy
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-annotations"}
        data: "{{ self.metadata.annotations | default({}) }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_primary_loses_leaves_the_child() {
    let scene = Scene::new("decl-primary").await.with_widgets().await;
    let annotated = |a: Value| {
        let mut w = widget("w", json!({}));
        w["metadata"]["annotations"] = a;
        w
    };
    scene.apply(annotated(json!({"a": "1", "b": "2"}))).await;
    let scene = scene.running(&[rule_from_yaml(ANNOTATIONS)]).await;
    scene
        .until("a and b copied", configmap("w-annotations"), |c| {
            c["data"]["a"] == "1" && c["data"]["b"] == "2"
        })
        .await;
    scene.apply(annotated(json!({"a": "1"}))).await;
    let child = scene
        .until("b to leave the child", configmap("w-annotations"), |c| {
            c["data"].get("b").is_none()
        })
        .await;
    assert_eq!(child["data"], json!({"a": "1"}));
    scene.end().await;
}

const ALPHA: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: alpha}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: a
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-alpha"}
        data: {v: "{{ self.spec.alpha }}"}
  status:
    fields:
      alphaValue: "{{ self.spec.alpha }}"
"#;

const BETA: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: beta}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: b
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-beta"}
        data: {v: "{{ self.spec.beta }}"}
  status:
    fields:
      betaValue: "{{ self.spec.beta }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_rules_on_one_primary_keep_their_status_and_children_apart() {
    let scene = Scene::new("decl-two").await.with_widgets().await;
    scene
        .apply(widget("w", json!({"alpha": "a1", "beta": "b1"})))
        .await;
    let scene = scene
        .running(&[rule_from_yaml(ALPHA), rule_from_yaml(BETA)])
        .await;
    let both = scene
        .until("both rules' status", widget_at("w"), |w| {
            w["status"]["alphaValue"] == "a1"
                && w["status"]["betaValue"] == "b1"
                && condition(w, "Ready")["status"] == "True"
        })
        .await;
    for rule in ["alpha", "beta"] {
        let own = condition(&both, &format!("{rule}.kiln.dev/Ready"));
        assert_eq!(own["status"], "True", "{rule}: {both}");
    }
    scene
        .until("alpha's child", configmap("w-alpha"), |_| true)
        .await;
    scene
        .until("beta's child", configmap("w-beta"), |_| true)
        .await;

    // beta's child cannot be made (an object is no ConfigMap value, and no
    // string either): beta fails, and alpha's status fields and conditions
    // survive beta's writes.
    scene
        .apply(widget(
            "w",
            json!({"alpha": "a2", "beta": {"not": "a string"}}),
        ))
        .await;
    let failing = scene
        .until("beta to fail", widget_at("w"), |w| {
            condition(w, "beta.kiln.dev/Reconciled")["status"] == "False"
                && w["status"]["alphaValue"] == "a2"
        })
        .await;
    assert_eq!(
        condition(&failing, "beta.kiln.dev/Reconciled")["reason"],
        "Invalid"
    );
    assert_eq!(
        condition(&failing, "alpha.kiln.dev/Ready")["status"],
        "True"
    );
    let ready = condition(&failing, "Ready");
    assert_eq!(
        ready["status"], "False",
        "one rule failing is failing: {failing}"
    );
    assert!(
        ready["message"].as_str().unwrap().starts_with("beta: "),
        "{ready}"
    );
    assert_eq!(
        failing["status"]["betaValue"], "b1",
        "beta computed nothing new: its field stays as it was"
    );
    assert_eq!(
        failing["status"]["observedGeneration"], both["metadata"]["generation"],
        "observedGeneration does not claim a status nobody computed"
    );
    assert_ne!(
        failing["metadata"]["generation"],
        both["metadata"]["generation"]
    );
    // Every later reconcile of alpha keeps beta's part, and the other way round.
    assert_eq!(scene.writes_during_resync("alpha", 1).await, 0);
    let after = scene.get("test.kiln.dev/v1", "Widget", "w").await.unwrap();
    assert_eq!(
        condition(&after, "beta.kiln.dev/Reconciled")["status"],
        "False"
    );
    assert_eq!(after["status"]["betaValue"], "b1");

    // Fixed: both ready again.
    scene
        .apply(widget("w", json!({"alpha": "a2", "beta": "b2"})))
        .await;
    scene
        .until("both ready again", widget_at("w"), |w| {
            condition(w, "Ready")["status"] == "True" && w["status"]["betaValue"] == "b2"
        })
        .await;

    // beta is removed: its part leaves the object, alpha's stays.
    scene.engine().stop("beta").await;
    let alone = scene
        .until("beta's part to leave", widget_at("w"), |w| {
            w["status"].get("betaValue").is_none() && condition(w, "beta.kiln.dev/Ready").is_null()
        })
        .await;
    assert_eq!(alone["status"]["alphaValue"], "a2");
    assert_eq!(condition(&alone, "Ready")["status"], "True");
    scene.end().await;
}

const NORMALISED: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: normalised}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: secret
      template:
        apiVersion: v1
        kind: Secret
        metadata: {name: "{{ self.metadata.name }}"}
        stringData: {password: "{{ self.spec.password }}"}
    - id: quota
      template:
        apiVersion: v1
        kind: ResourceQuota
        metadata: {name: "{{ self.metadata.name }}"}
        spec:
          hard: {limits.cpu: 1000m, limits.memory: 1024Mi}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_the_server_normalises_cost_no_writes_at_steady_state() {
    let scene = Scene::new("decl-norm").await.with_widgets().await;
    for i in 0..3 {
        scene
            .apply(widget(
                &format!("w{i}"),
                json!({"password": format!("p{i}")}),
            ))
            .await;
    }
    let scene = scene.running(&[rule_from_yaml(NORMALISED)]).await;
    for i in 0..3 {
        let name = format!("w{i}");
        scene
            .until("converged", widget_at(&name), |w| {
                condition(w, "Ready")["status"] == "True"
            })
            .await;
        let quota = scene
            .until("the quota", ("v1", "ResourceQuota", &name), |_| true)
            .await;
        assert_eq!(
            quota["spec"]["hard"]["limits.cpu"], "1",
            "stored canonicalised: the case this test is about"
        );
        let secret = scene
            .until("the secret", ("v1", "Secret", &name), |_| true)
            .await;
        assert!(secret.get("stringData").is_none());
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(scene.writes_during_resync("normalised", 3).await, 0);
    // A changed value still gets through.
    scene.apply(widget("w0", json!({"password": "new"}))).await;
    scene
        .until("the new password", ("v1", "Secret", "w0"), |s| {
            s["data"]["password"] == "bmV3"
        })
        .await;
    scene.end().await;
}
