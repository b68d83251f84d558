//! `kiln diff` against the real control plane: an edited rule's changes
//! (a child changed, one created, one pruned) are shown, with exit 1, and
//! nothing in the namespace is written; the rules that run give exit 0.
//! Decorations are judged by the field manager `kiln run` applies as.

use std::collections::BTreeMap;

use kube::api::{DynamicObject, ListParams};
use kube::discovery::{Discovery, Scope, verbs};
use serde_json::json;

use crate::support::scene::Scene;
use crate::support::{self, rule_from_yaml};

/// The running rule: two ConfigMaps per Widget.
const BEFORE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: diffed}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-main"}
        data: {color: blue, size: "1"}
    - id: extra
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-extra"}
"#;

/// The edit under review: `main` changes colour, `extra` goes, `fresh` comes.
fn after() -> String {
    BEFORE
        .replace("color: blue", "color: green")
        .replace("extra", "fresh")
}

/// `kiln diff --rules FILE -n NS EXTRA…`: exit code and stdout.
fn kiln_diff(rule: &str, namespace: &str, extra: &[&str]) -> (Option<i32>, String) {
    kiln_diff_files(&[("rule.yaml", rule)], namespace, extra)
}

/// `kiln diff --rules DIR -n NS EXTRA…` of the rule files `(name, text)`:
/// exit code, stdout and stderr.
fn kiln_diff_files(
    rules: &[(&str, &str)],
    namespace: &str,
    extra: &[&str],
) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let rules_dir = dir.path().join("rules");
    std::fs::create_dir(&rules_dir).unwrap();
    for (name, text) in rules {
        std::fs::write(rules_dir.join(name), text).unwrap();
    }
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, support::kubeconfig_yaml()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["diff", "--rules"])
        .arg(&rules_dir)
        .args(["-n", namespace, "--kubeconfig"])
        .arg(&kubeconfig)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    (out.status.code(), format!("{stdout}{stderr}"))
}

/// The resourceVersion of every object of every listable namespaced kind
/// in `namespace`.
async fn versions(client: &kube::Client, namespace: &str) -> BTreeMap<String, String> {
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let mut out = BTreeMap::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if caps.scope != Scope::Namespaced || !caps.supports_operation(verbs::LIST) {
                continue;
            }
            let api: kube::Api<DynamicObject> =
                kube::Api::namespaced_with(client.clone(), namespace, &ar);
            let Ok(list) = api.list(&ListParams::default()).await else {
                continue;
            };
            for o in list.items {
                out.insert(
                    format!("{} {}", ar.kind, o.metadata.name.unwrap_or_default()),
                    o.metadata.resource_version.unwrap_or_default(),
                );
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kiln_diff_shows_an_edited_rule_s_changes_and_writes_nothing() {
    let scene = Scene::new("diff").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {}}))
        .await;
    let scene = scene.running(&[rule_from_yaml(BEFORE)]).await;
    scene.ready("w").await;
    scene
        .until("extra", ("v1", "ConfigMap", "w-extra"), |_| true)
        .await;
    // kiln stops, so that only `kiln diff` could write.
    scene.engine().shutdown().await;

    let (code, out) = kiln_diff(BEFORE, scene.ns(), &[]);
    assert_eq!(code, Some(0), "the running rules change nothing:\n{out}");
    assert!(out.is_empty(), "{out}");

    let before = versions(&scene.client, scene.ns()).await;
    assert!(before.contains_key("ConfigMap w-main"), "{before:?}");
    let (code, out) = kiln_diff(&after(), scene.ns(), &[]);
    assert_eq!(code, Some(1), "{out}");
    for line in [
        format!("# Widget {}/w (rule diffed)", scene.ns()),
        "~ ConfigMap w-main (main): changed (fields: data.color)".to_string(),
        "-   color: blue".to_string(),
        "+   color: green".to_string(),
        "    size: '1'".to_string(),
        "+ ConfigMap w-fresh (fresh): created".to_string(),
        "- ConfigMap w-extra (extra): pruned".to_string(),
    ] {
        assert!(out.contains(&line), "no `{line}` in:\n{out}");
    }
    assert_eq!(
        versions(&scene.client, scene.ns()).await,
        before,
        "kiln diff wrote to the namespace"
    );

    // `kiln explain` names the fields that would change.
    let explained = support::kiln_explain(
        "test.kiln.dev/v1",
        "Widget",
        &format!("{}/w", scene.ns()),
        &[("rule.yaml", &after())],
    );
    assert!(
        explained.contains("main ConfigMap w-main: would change: the live object lacks or differs in a field the rule sets (fields: data.color)"),
        "{explained}"
    );
    scene.end().await;
}

/// A rule that only decorates: each Widget's Secret gets the Widget's team.
const DECORATING: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: labelled}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  watches:
    - name: creds
      apiVersion: v1
      kind: Secret
      ref: {name: "{{ self.metadata.name }}-creds"}
      required: true
  decorate:
    - id: team
      target: related.creds
      patch:
        metadata:
          labels: {team: "{{ self.spec.team }}"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_and_diff_judge_decorations_by_the_field_manager_kiln_runs_as() {
    let scene = Scene::new("manager").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "w-creds"}, "data": {}}))
        .await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {"team": "blue"}}))
        .await;
    let ns = scene.ns().to_string();
    let kiln = support::KilnProcess::start(
        DECORATING,
        &["--namespace", &ns, "--field-manager", "platform"],
    );
    let secret = scene
        .until("the Secret decorated", ("v1", "Secret", "w-creds"), |s| {
            s["metadata"]["labels"]["team"] == "blue"
        })
        .await;
    let managers: Vec<&str> = secret["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(
        managers.iter().any(|m| m.starts_with("platform.")),
        "{managers:?}"
    );
    scene
        .until(
            "the Widget Ready",
            ("test.kiln.dev/v1", "Widget", "w"),
            |w| crate::support::scene::condition(w, "Ready")["status"] == "True",
        )
        .await;
    drop(kiln);

    let line = format!("decorate team Secret {ns}/w-creds: ");
    let rules = [("rule.yaml", DECORATING)];
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rule.yaml"), DECORATING).unwrap();
    let rules_dir = dir.path().to_str().unwrap();
    let explained = support::kiln_explain_with(
        "test.kiln.dev/v1",
        "Widget",
        &format!("{ns}/w"),
        &["--rules", rules_dir, "--field-manager", "platform"],
    );
    assert!(
        explained.contains(&format!("{line}applied")),
        "as the engine's manager, the decoration is applied:\n{explained}"
    );
    let as_default =
        support::kiln_explain("test.kiln.dev/v1", "Widget", &format!("{ns}/w"), &rules);
    assert!(
        as_default.contains(&format!("{line}would set the fields it lacks")),
        "another manager owns none of the fields:\n{as_default}"
    );

    let (code, out) = kiln_diff(DECORATING, &ns, &["--field-manager", "platform"]);
    assert_eq!(code, Some(0), "nothing would change:\n{out}");
    let (code, out) = kiln_diff(DECORATING, &ns, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!("~ {line}would set the fields it lacks")),
        "{out}"
    );
    scene.end().await;
}

/// A rule defining `Gear` in `group` with the `spec` fields given.
fn gear_api(name: &str, group: &str, fields: &str) -> String {
    format!(
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: {name}}}\nspec:\n  api:\n    group: {group}\n    kind: Gear\n    versions:\n      - name: v1\n        schema:\n          spec:\n{fields}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kiln_diff_diffs_every_rule_it_can_and_shows_the_crds_it_would_create_or_refuse() {
    let scene = Scene::new("diff-crds").await.with_widgets().await;
    scene
        .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {}}))
        .await;
    let pid = std::process::id();
    // A rule on a kind no CRD serves yet: it waits.
    let waiting = format!(
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: waiting}}\nspec:\n  for: {{apiVersion: later{pid}.diff.kiln.dev/v1, kind: Gadget}}\n"
    );
    // A rule whose API is new: kiln would create its CRD.
    let fresh_group = format!("fresh{pid}.diff.kiln.dev");
    let fresh = gear_api("fresh", &fresh_group, "            size: integer\n");
    // A rule whose API kiln installed, edited to drop a field: refused.
    let narrowed_group = format!("narrowed{pid}.diff.kiln.dev");
    let both = "            size: integer\n            color: string\n";
    let installed = kiln::rules::load_sources(vec![kiln::rules::load::Source {
        file: "rule.yaml".into(),
        text: gear_api("narrowed", &narrowed_group, both),
    }])
    .unwrap_or_else(|d| panic!("{}", d[0]));
    kiln::api::install::install_set(&scene.client, None, &installed)
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
    let narrowed = gear_api("narrowed", &narrowed_group, "            size: integer\n");
    // A rule on a served kind whose child kind is not served yet: it waits.
    let parts = format!(
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: parts}}\nspec:\n  for: {{apiVersion: test.kiln.dev/v1, kind: Widget}}\n  children:\n    - id: part\n      template: {{apiVersion: later{pid}.diff.kiln.dev/v1, kind: Part, metadata: {{name: p}}}}\n"
    );

    let (code, out) = kiln_diff_files(
        &[
            ("a-waiting.yaml", &waiting),
            ("b-fresh.yaml", &fresh),
            ("c-narrowed.yaml", &narrowed),
            ("d-widgets.yaml", BEFORE),
            ("e-parts.yaml", &parts),
        ],
        scene.ns(),
        &[],
    );
    assert_eq!(code, Some(1), "changes, no error:\n{out}");
    for line in [
        format!(
            "# later{pid}.diff.kiln.dev/v1/Gadget (rule waiting): kind not served: the rule will wait"
        ),
        format!(
            "+ CustomResourceDefinition gears.{fresh_group} (rule fresh): kiln would create this CRD"
        ),
        format!(
            "# {fresh_group}/v1/Gear (rule fresh): kind not served yet: kiln creates its CRD, then the rule runs"
        ),
        format!(
            "! CustomResourceDefinition gears.{narrowed_group} (rule narrowed): kiln would refuse this change"
        ),
        "!   breaking: v1 `spec.color`: ".to_string(),
        format!("# Widget {}/w (rule diffed)", scene.ns()),
        "+ ConfigMap w-main (main): created".to_string(),
        format!(
            "# test.kiln.dev/v1/Widget (rule parts): kind not served: later{pid}.diff.kiln.dev/v1/Part: the rule will wait"
        ),
    ] {
        assert!(out.contains(&line), "no `{line}` in:\n{out}");
    }
    assert!(
        crate::api::crd(&scene.client, &format!("gears.{fresh_group}"))
            .await
            .is_none(),
        "kiln diff created no CRD"
    );
    scene.end().await;
}
