//! One scenario table, three ways: `kiln explain` on the cluster, `kiln
//! render` on the same objects as files, and the engine on the cluster give
//! the same verdict for every child.
//!
//! Each scenario is a Widget. The rules converge them, the engine stops,
//! the scenario changes the cluster, then explain and render say what the
//! engine would do, and the engine, started again, does it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::scene::{CONVERGE, Scene, condition, widget_at};
use crate::support::{self, eventually, rule_from_yaml};

/// Four children with four lifecycles, and a required Secret the rule
/// decorates with the Widget's team.
const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: verdicts}
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
  children:
    - id: config
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-config"}
        data: {team: "{{ self.spec.team }}"}
    - id: extra
      when: self.spec.extra | default(true)
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-extra"}
    - id: once
      updatePolicy: CreateOnce
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-once"}
        data: {team: "{{ self.spec.team }}"}
    - id: kept
      deletionPolicy: Orphan
      when: self.spec.kept | default(true)
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-kept"}
    - id: shared
      adopt: true
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-shared"}
        data: {team: "{{ self.spec.team }}"}
"#;

/// A second rule on the same Widgets (those labelled `outside: "yes"`):
/// a ConfigMap in a namespace of the Widget's own, no owner reference.
const OUTSIDE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: elsewhere}
spec:
  for:
    apiVersion: test.kiln.dev/v1
    kind: Widget
    selector: {matchLabels: {outside: "yes"}}
  children:
    - id: settings
      outside: true
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: "{{ self.metadata.name }}-settings"
          namespace: "{{ self.metadata.namespace }}-x"
        data: {team: "{{ self.spec.team }}"}
"#;

/// What is expected of a child: the words explain and render print after
/// its name, and what the engine leaves in the cluster.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// Nothing to write: left as it is.
    Applied,
    /// Missing: created.
    Create,
    /// Differs: set back to `team: blue`.
    Change,
    /// Created once: left as it is (as the user made it).
    Once,
    /// No longer rendered: deleted.
    Prune,
    /// No longer rendered, orphaned: left.
    Left,
}

impl Expect {
    fn words(self) -> &'static str {
        match self {
            Self::Applied => ": applied",
            Self::Create => ": missing: kiln would create it",
            Self::Change => ": would change",
            Self::Once => ": created once: kiln does not write it again",
            Self::Prune => ": no longer rendered: kiln would delete it",
            Self::Left => ": no longer rendered: left as it is",
        }
    }
}

/// What is expected of the decoration of a Widget's Secret.
#[derive(Clone, Copy, Debug)]
enum Decor {
    /// The Secret shows it: left as it is.
    Applied,
    /// The Secret lacks it: the label is set again.
    Apply,
}

impl Decor {
    fn words(self) -> &'static str {
        match self {
            Self::Applied => ": applied",
            Self::Apply => ": would set the fields it lacks",
        }
    }
}

/// A scenario: a Widget, how the cluster changes while the engine is
/// stopped, and what each rule says of it (child id → expected, or the
/// words of a reconcile that renders nothing).
struct Scenario {
    name: &'static str,
    labels: Value,
    change: Change,
    children: &'static [(&'static str, Expect)],
    /// Said instead of children: "waiting", "failed (TemplateError)".
    said: Option<&'static str>,
    /// What is said and done of the Secret's decoration.
    decoration: Option<Decor>,
}

#[derive(Clone, Copy)]
enum Change {
    None,
    EditConfig,
    DeleteConfig,
    SwitchOff,
    DeleteSecret,
    BreakTemplate,
    EditOnce,
    EditShared,
    EditSettings,
    Undecorate,
}

const ALL_APPLIED: &[(&str, Expect)] = &[
    ("config", Expect::Applied),
    ("extra", Expect::Applied),
    ("once", Expect::Once),
    ("kept", Expect::Applied),
    ("shared", Expect::Applied),
];

fn scenarios() -> Vec<Scenario> {
    let plain = || json!({});
    let s = |name, change, children, said| Scenario {
        name,
        labels: plain(),
        change,
        children,
        said,
        decoration: None,
    };
    vec![
        Scenario {
            decoration: Some(Decor::Applied),
            ..s("converged", Change::None, ALL_APPLIED, None)
        },
        Scenario {
            decoration: Some(Decor::Apply),
            ..s("decorated", Change::Undecorate, ALL_APPLIED, None)
        },
        s(
            "field-removed",
            Change::EditConfig,
            &[("config", Expect::Change)],
            None,
        ),
        s(
            "child-gone",
            Change::DeleteConfig,
            &[("config", Expect::Create)],
            None,
        ),
        s(
            "when-false",
            Change::SwitchOff,
            &[("extra", Expect::Prune), ("kept", Expect::Left)],
            None,
        ),
        s(
            "required-missing",
            Change::DeleteSecret,
            &[],
            Some("waiting"),
        ),
        s(
            "template-error",
            Change::BreakTemplate,
            &[],
            Some("failed (TemplateError)"),
        ),
        s(
            "create-once",
            Change::EditOnce,
            &[("once", Expect::Once)],
            None,
        ),
        s(
            "adopt",
            Change::EditShared,
            &[("shared", Expect::Change)],
            None,
        ),
        Scenario {
            name: "outside",
            labels: json!({"outside": "yes"}),
            change: Change::EditSettings,
            children: &[("config", Expect::Applied), ("settings", Expect::Change)],
            said: None,
            decoration: None,
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_render_and_the_engine_give_the_same_verdict_per_child() {
    let scene = Scene::new("verdicts").await.with_widgets().await;
    let ns = scene.ns().to_string();
    let elsewhere = format!("{ns}-x");
    support::apply(
        &scene.client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": elsewhere}}),
        None,
    )
    .await;
    let table = scenarios();
    for s in &table {
        scene
            .apply(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("{}-creds", s.name)}, "stringData": {"k": "v"}}))
            .await;
        // Adopted: it exists before kiln, made by someone else.
        scene
            .apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{}-shared", s.name)}, "data": {"team": "old"}}))
            .await;
        scene
            .apply(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
                "metadata": {"name": s.name, "labels": s.labels}, "spec": {"team": "blue"}}))
            .await;
    }
    let rules = [rule_from_yaml(RULE), rule_from_yaml(OUTSIDE)];
    let scene = scene.also_watching(&elsewhere).running(&rules).await;
    for s in &table {
        scene.ready(s.name).await;
    }
    scene.engine().shutdown().await;
    for s in &table {
        change(&scene, s).await;
    }

    let files = tempfile::tempdir().unwrap();
    let rule_files = [("verdicts.yaml", RULE), ("elsewhere.yaml", OUTSIDE)];
    for s in &table {
        let explained = support::kiln_explain(
            "test.kiln.dev/v1",
            "Widget",
            &format!("{ns}/{}", s.name),
            &rule_files,
        );
        let rendered = render_from_cluster(&scene, s, files.path()).await;
        for (id, expect) in s.children {
            let said = format!("{id} ConfigMap ");
            for (how, out) in [("explain", &explained), ("render", &rendered)] {
                assert!(
                    out.lines()
                        .any(|l| l.contains(&said) && l.contains(expect.words())),
                    "{}: {how} does not say `{id} …{}`:\n{out}",
                    s.name,
                    expect.words()
                );
            }
        }
        if let Some(decor) = s.decoration {
            for (how, out) in [("explain", &explained), ("render", &rendered)] {
                assert!(
                    out.lines()
                        .any(|l| l.contains("decorate team Secret ") && l.contains(decor.words())),
                    "{}: {how} does not say `decorate team Secret …{}`:\n{out}",
                    s.name,
                    decor.words()
                );
            }
        }
        if let Some(words) = s.said {
            for (how, out) in [("explain", &explained), ("render", &rendered)] {
                assert!(
                    out.contains(words),
                    "{}: {how}: no `{words}`:\n{out}",
                    s.name
                );
            }
        }
    }

    // The engine, started again, does what both said.
    let before = versions(&scene, &table).await;
    let (engine, _) =
        crate::support::scene::start_engine(&[ns.clone(), elsewhere.clone()], &rules).await;
    for s in &table {
        engine_did(&scene, s, &before).await;
    }
    // The Widget with an `outside` child goes first: kiln deletes the
    // child and lets go of its finalizer.
    support::delete(
        &scene.client,
        ("test.kiln.dev/v1", "Widget"),
        Some(&ns),
        "outside",
    )
    .await;
    eventually("the outside Widget gone", support::PATIENCE, || async {
        scene
            .get("test.kiln.dev/v1", "Widget", "outside")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    engine.shutdown().await;
    support::delete(&scene.client, ("v1", "Namespace"), None, &elsewhere).await;
    scene.end().await;
}

/// Changes the cluster as the scenario says (the engine is stopped).
async fn change(scene: &Scene, s: &Scenario) {
    let cm = ("v1", "ConfigMap");
    let ns = Some(scene.ns());
    let name = |suffix: &str| format!("{}-{suffix}", s.name);
    let edit = |suffix: &'static str, ns: Option<String>| {
        let name = name(suffix);
        async move {
            support::edit(
                &scene.client,
                cm,
                ns.as_deref(),
                &name,
                json!({"data": {"team": "edited"}}),
            )
            .await;
        }
    };
    match s.change {
        Change::None => {}
        Change::EditConfig => edit("config", ns.map(str::to_string)).await,
        Change::EditOnce => edit("once", ns.map(str::to_string)).await,
        Change::EditShared => edit("shared", ns.map(str::to_string)).await,
        Change::EditSettings => edit("settings", Some(format!("{}-x", scene.ns()))).await,
        Change::DeleteConfig => support::delete(&scene.client, cm, ns, &name("config")).await,
        Change::Undecorate => {
            let unlabel = json!({"metadata": {"labels": {"team": null}}});
            support::edit(&scene.client, ("v1", "Secret"), ns, &name("creds"), unlabel).await;
        }
        Change::DeleteSecret => {
            support::delete(&scene.client, ("v1", "Secret"), ns, &name("creds")).await;
        }
        Change::SwitchOff => {
            support::edit(
                &scene.client,
                ("test.kiln.dev/v1", "Widget"),
                ns,
                s.name,
                json!({"spec": {"extra": false, "kept": false}}),
            )
            .await;
        }
        Change::BreakTemplate => {
            support::edit(
                &scene.client,
                ("test.kiln.dev/v1", "Widget"),
                ns,
                s.name,
                json!({"spec": {"team": null}}),
            )
            .await;
        }
    }
}

/// `kiln render --rule verdicts` on the Widget, its Secret and its
/// children as the cluster holds them, written to files; stdout and stderr.
async fn render_from_cluster(scene: &Scene, s: &Scenario, dir: &Path) -> String {
    let write = |file: String, value: &Value| {
        let path = dir.join(file);
        // JSON (which is YAML): serde_norway leaves a string such as the
        // hash `12360550813e8171` unquoted, and YAML reads it back as a
        // number too large to be finite.
        std::fs::write(&path, serde_json::to_string_pretty(value).unwrap()).unwrap();
        path
    };
    let widget = scene
        .get("test.kiln.dev/v1", "Widget", s.name)
        .await
        .unwrap();
    let mut args: Vec<String> = vec![
        "render".into(),
        "--rules".into(),
        dir.join("rules").display().to_string(),
        "--object".into(),
        write(format!("{}.yaml", s.name), &widget)
            .display()
            .to_string(),
    ];
    std::fs::create_dir_all(dir.join("rules")).unwrap();
    std::fs::write(dir.join("rules/verdicts.yaml"), RULE).unwrap();
    std::fs::write(dir.join("rules/elsewhere.yaml"), OUTSIDE).unwrap();
    if let Some(secret) = scene
        .get("v1", "Secret", &format!("{}-creds", s.name))
        .await
    {
        let file = write(format!("{}-creds.yaml", s.name), &secret);
        args.extend(["--related".into(), format!("creds={}", file.display())]);
    }
    let children: BTreeMap<&str, (String, String)> = [
        ("config", scene.ns().to_string()),
        ("extra", scene.ns().to_string()),
        ("once", scene.ns().to_string()),
        ("kept", scene.ns().to_string()),
        ("shared", scene.ns().to_string()),
        ("settings", format!("{}-x", scene.ns())),
    ]
    .into_iter()
    .map(|(id, ns)| (id, (ns, format!("{}-{id}", s.name))))
    .collect();
    for (id, (ns, name)) in &children {
        if let Some(child) = support::get(&scene.client, "v1", "ConfigMap", ns, name).await {
            let file = write(format!("{name}.yaml"), &child);
            args.extend(["--observed".into(), format!("{id}={}", file.display())]);
        }
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(&args)
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap()
    )
}

/// Every child's resource version (or none), by namespace and name, and
/// each decorated Secret's.
async fn versions(scene: &Scene, table: &[Scenario]) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    for s in table {
        if s.decoration.is_some() {
            let name = format!("{}-creds", s.name);
            let found = support::get(&scene.client, "v1", "Secret", scene.ns(), &name).await;
            out.insert(
                name,
                found.map(|c| c["metadata"]["resourceVersion"].to_string()),
            );
        }
        for (id, _) in s.children {
            let (ns, name) = child_at(scene, s, id);
            let found = support::get(&scene.client, "v1", "ConfigMap", &ns, &name).await;
            out.insert(
                name,
                found.map(|c| c["metadata"]["resourceVersion"].to_string()),
            );
        }
    }
    out
}

fn child_at(scene: &Scene, s: &Scenario, id: &str) -> (String, String) {
    let ns = if id == "settings" {
        format!("{}-x", scene.ns())
    } else {
        scene.ns().to_string()
    };
    (ns, format!("{}-{id}", s.name))
}

/// Waits until the engine did what was expected of each child.
async fn engine_did(scene: &Scene, s: &Scenario, before: &BTreeMap<String, Option<String>>) {
    if let Some(words) = s.said {
        let reason = if words == "waiting" {
            "Waiting"
        } else {
            "Reconciled"
        };
        scene
            .until(&format!("{}: {words}", s.name), widget_at(s.name), |w| {
                let c = condition(w, reason);
                if words == "waiting" {
                    c["status"] == "True"
                } else {
                    c["reason"] == "TemplateError"
                }
            })
            .await;
        return;
    }
    scene.ready(s.name).await;
    // What the engine did to each child is the verdict compared here.
    for (id, expect) in s.children {
        let (ns, name) = child_at(scene, s, id);
        let what = format!("{}: {id} {expect:?}", s.name);
        eventually(&what, CONVERGE, || async {
            let now = support::get(&scene.client, "v1", "ConfigMap", &ns, &name).await;
            let version = now
                .as_ref()
                .map(|c| c["metadata"]["resourceVersion"].to_string());
            let team = now.as_ref().map(|c| c["data"]["team"].clone());
            let done = match expect {
                Expect::Applied => version == before[&name],
                Expect::Create => now.is_some(),
                Expect::Change => team == Some(json!("blue")),
                Expect::Once => version == before[&name],
                Expect::Prune => now.is_none(),
                Expect::Left => now.is_some() && version == before[&name],
            };
            done.then_some(())
        })
        .await;
    }
    if let Some(decor) = s.decoration {
        let name = format!("{}-creds", s.name);
        let what = format!("{}: the Secret {decor:?}", s.name);
        eventually(&what, CONVERGE, || async {
            let now = support::get(&scene.client, "v1", "Secret", scene.ns(), &name).await?;
            let version = now["metadata"]["resourceVersion"].to_string();
            let labelled = now["metadata"]["labels"]["team"] == "blue";
            let done = match decor {
                Decor::Applied => labelled && Some(version) == before[&name],
                Decor::Apply => labelled,
            };
            done.then_some(())
        })
        .await;
    }
    // Settled: what was left as it is stays so.
    tokio::time::sleep(Duration::from_secs(1)).await;
}
