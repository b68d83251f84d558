//! Hot reload against the real control plane: an engine and a reloader run
//! in-process on a rules directory (or a ConfigMap) that the test edits.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kiln::engine::{Engine, Options, RuleState};
use kiln::metrics::Metrics;
use kiln::reload::{
    Checker, Files, Follower, Loader, ReloadOptions, RuleResources, RuleSource, RulesConfigMap,
    StatusWriter, Teller, Version,
};
use kiln::rules::{self, Gvk};
use kube::Client;
use serde_json::{Value, json};

use crate::support::{self, TestNamespace, eventually};

const CONVERGE: Duration = support::PATIENCE;

pub(crate) fn rule(name: &str, kind: &str, children: &str) -> String {
    format!(
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: {name}}}\nspec:\n  for: {{apiVersion: test.kiln.dev/v1, kind: {kind}}}\n  children:\n{children}"
    )
}

pub(crate) fn configmap_child(id: &str, suffix: &str) -> String {
    format!(
        "    - id: {id}\n      template:\n        apiVersion: v1\n        kind: ConfigMap\n        metadata: {{name: \"{{{{ self.metadata.name }}}}-{suffix}\"}}\n        data: {{from: \"{{{{ rule.name }}}}\"}}\n"
    )
}

/// Where a harness reads its rules.
#[derive(Clone)]
pub(crate) enum From {
    Dir(std::path::PathBuf),
    ConfigMap(String, String),
    /// The `Rule` resources, their status written.
    Resources,
}

impl From {
    pub(crate) fn dir(path: &Path) -> Self {
        Self::Dir(path.to_path_buf())
    }

    fn source(&self, client: &Client) -> (Box<dyn RuleSource>, Option<StatusWriter>) {
        match self {
            Self::Dir(dir) => (
                Box::new(Files::new(
                    vec![dir.clone()],
                    Duration::from_millis(200),
                    Duration::from_millis(500),
                )),
                None,
            ),
            Self::ConfigMap(ns, name) => (
                Box::new(RulesConfigMap::new(client.clone(), ns, name)),
                None,
            ),
            Self::Resources => {
                let source = RuleResources::new(client.clone());
                let status = StatusWriter::new(client.clone(), source.offered());
                (Box::new(source), Some(status))
            }
        }
    }

    fn configmap(&self) -> Option<(String, String)> {
        match self {
            Self::Dir(_) | Self::Resources => None,
            Self::ConfigMap(ns, name) => Some((ns.clone(), name.clone())),
        }
    }
}

/// A loader on the source (checking rules against the cluster) and an
/// engine following it, as `kiln run` has.
pub(crate) struct Harness {
    pub(crate) engine: Arc<Engine>,
    pub(crate) metrics: Arc<Metrics>,
    stop: Vec<tokio::sync::oneshot::Sender<()>>,
}

impl Harness {
    pub(crate) async fn start(ns: &str, from: From, options: ReloadOptions) -> Self {
        Self::start_as(support::admin_client().await, ns, from, options).await
    }

    /// As `client` (kiln's own identity, with its permissions).
    pub(crate) async fn start_as(
        client: Client,
        ns: &str,
        from: From,
        options: ReloadOptions,
    ) -> Self {
        let (mut source, status) = from.source(&client);
        let first = source.first().await.unwrap();
        let metrics = Arc::new(Metrics::new());
        let teller = Teller::new(&client, from.configmap(), Arc::new(|| true));
        let prune = options.prune_on_rule_removal;
        let loader = Loader::first(first, options, metrics.clone(), teller)
            .unwrap_or_else(|r| panic!("{:?}", r.diagnostics()))
            .checking(Checker::new(client.clone(), vec![ns.to_string()]));
        let loader = match status {
            Some(status) => loader.reporting(status),
            None => loader,
        };
        let engine = Arc::new(Engine::sharded(
            client.clone(),
            Options {
                namespaces: vec![ns.to_string()],
                kind_retry: Duration::from_millis(200),
                ..Options::default()
            },
            None,
            metrics.clone(),
        ));
        let follower = Follower::start(engine.clone(), &loader.rules(), prune);
        let (loader_tx, loader_rx) = tokio::sync::oneshot::channel::<()>();
        let (follower_tx, follower_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(loader.run(source, async move {
            let _ = loader_rx.await;
        }));
        tokio::spawn(follower.run(async move {
            let _ = follower_rx.await;
        }));
        Self {
            engine,
            metrics,
            stop: vec![loader_tx, follower_tx],
        }
    }

    pub(crate) async fn running(&self, name: &str) {
        eventually(&format!("rule {name} running"), CONVERGE, || async {
            (self.engine.state(name) == Some(RuleState::Running)).then_some(())
        })
        .await;
    }

    /// Stops the reloader and the engine.
    pub(crate) async fn stop(mut self) {
        for tx in self.stop.drain(..) {
            let _ = tx.send(());
        }
        self.engine.shutdown().await;
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        for tx in self.stop.drain(..) {
            let _ = tx.send(());
        }
    }
}

pub(crate) fn write(dir: &Path, file: &str, text: &str) {
    // Write then rename, like most editors: readers never see half a file.
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(tmp, dir.join(file)).unwrap();
}

pub(crate) async fn configmap(client: &Client, ns: &str, name: &str) -> Option<Value> {
    support::get(client, "v1", "ConfigMap", ns, name).await
}

pub(crate) async fn wait_cm(client: &Client, ns: &str, name: &str) -> Value {
    eventually(&format!("ConfigMap {name}"), CONVERGE, || {
        configmap(client, ns, name)
    })
    .await
}

pub(crate) fn widget(name: &str) -> Value {
    json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": name}, "spec": {"value": "x"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_edits_apply_invalid_edits_change_nothing_and_removal_stops_the_rule() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "reload").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "widgets.yaml",
        &rule("widgets", "Widget", &configmap_child("one", "one")),
    );
    for w in ["a", "b"] {
        support::apply(&client, widget(w), Some(n)).await;
    }
    // Removing the only rule below leaves an empty set: allowed on purpose
    // here (`--allow-empty-rules`); refused otherwise (see
    // `an_empty_rules_configmap_is_refused_and_the_rules_keep_running`).
    let h = Harness::start(
        n,
        From::dir(dir.path()),
        ReloadOptions {
            allow_empty: true,
            ..ReloadOptions::default()
        },
    )
    .await;
    h.running("widgets").await;
    wait_cm(&client, n, "a-one").await;
    wait_cm(&client, n, "b-one").await;
    let widget_gvk = Gvk {
        group: "test.kiln.dev".into(),
        version: "v1".into(),
        kind: "Widget".into(),
    };

    // A child added to the rule: every existing primary gets it.
    let two = format!(
        "{}{}",
        configmap_child("one", "one"),
        configmap_child("two", "two")
    );
    write(dir.path(), "widgets.yaml", &rule("widgets", "Widget", &two));
    wait_cm(&client, n, "a-two").await;
    wait_cm(&client, n, "b-two").await;
    assert_eq!(h.metrics.reloads("success"), 1);
    assert_eq!(
        h.engine.watch_starts(&widget_gvk),
        1,
        "swapping the rule did not restart its watch"
    );

    // An invalid edit: nothing changes, it is counted, the old rule keeps working.
    write(
        dir.path(),
        "widgets.yaml",
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {name: widgets}\nspec:\n  for: {apiVersion: test.kiln.dev/v1, kind: widget}\n",
    );
    eventually("the invalid set to be refused", CONVERGE, || async {
        (h.metrics.reloads("error") == 1).then_some(())
    })
    .await;
    support::apply(&client, widget("c"), Some(n)).await;
    wait_cm(&client, n, "c-two").await;
    assert_eq!(h.engine.state("widgets"), Some(RuleState::Running));

    // Fixing it applies the fix.
    write(
        dir.path(),
        "widgets.yaml",
        &rule("widgets", "Widget", &configmap_child("one", "uno")),
    );
    wait_cm(&client, n, "a-uno").await;
    // The children the rule stopped rendering are pruned.
    eventually("a-two pruned", CONVERGE, || async {
        configmap(&client, n, "a-two").await.is_none().then_some(())
    })
    .await;

    // The rule is removed: it stops; its children stay (no --prune-on-rule-removal).
    std::fs::remove_file(dir.path().join("widgets.yaml")).unwrap();
    eventually("the rule to stop", CONVERGE, || async {
        h.engine.state("widgets").is_none().then_some(())
    })
    .await;
    support::apply(&client, widget("d"), Some(n)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        configmap(&client, n, "d-uno").await.is_none(),
        "a removed rule reconciled a new primary"
    );
    assert!(
        configmap(&client, n, "a-uno").await.is_some(),
        "children of a removed rule stay by default"
    );
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_for_a_second_kind_starts_without_disturbing_the_first() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "reload-2nd").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    support::install_crds(&client, "examples/schedule").await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "widgets.yaml",
        &rule("widgets", "Widget", &configmap_child("one", "one")),
    );
    support::apply(&client, widget("a"), Some(n)).await;
    let h = Harness::start(n, From::dir(dir.path()), ReloadOptions::default()).await;
    h.running("widgets").await;
    wait_cm(&client, n, "a-one").await;
    let first = h.engine.controller("widgets").unwrap();

    std::fs::copy(
        support::repo_root().join("rules/schedule.yaml"),
        dir.path().join("schedule.yaml"),
    )
    .unwrap();
    support::apply(
        &client,
        support::example("examples/schedule/schedule.yaml"),
        Some(n),
    )
    .await;
    h.running("schedule").await;
    eventually("a CronJob", CONVERGE, || {
        support::get(&client, "batch/v1", "CronJob", n, "nightly-report")
    })
    .await;

    let widget_gvk = Gvk {
        group: "test.kiln.dev".into(),
        version: "v1".into(),
        kind: "Widget".into(),
    };
    let cm_gvk = Gvk {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
    };
    assert_eq!(h.engine.watch_starts(&widget_gvk), 1);
    assert_eq!(h.engine.watch_starts(&cm_gvk), 1);
    assert!(
        Arc::ptr_eq(&first, &h.engine.controller("widgets").unwrap()),
        "the first rule was not restarted"
    );
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_read_from_a_configmap_through_the_api_follow_its_edits() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "reload-cm").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), n);
    let rules_cm = |text: String| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": "kiln-rules"}, "data": {"widgets.yaml": text, "README": "not a rule"}})).unwrap()
    };
    let pp = kube::api::PatchParams::apply("test").force();
    cms.patch(
        "kiln-rules",
        &pp,
        &kube::api::Patch::Apply(rules_cm(rule(
            "widgets",
            "Widget",
            &configmap_child("one", "one"),
        ))),
    )
    .await
    .unwrap();
    support::apply(&client, widget("a"), Some(n)).await;
    let options = ReloadOptions::default();
    let h = Harness::start(
        n,
        From::ConfigMap(n.to_string(), "kiln-rules".into()),
        options,
    )
    .await;
    h.running("widgets").await;
    wait_cm(&client, n, "a-one").await;

    cms.patch(
        "kiln-rules",
        &pp,
        &kube::api::Patch::Apply(rules_cm(rule(
            "widgets",
            "Widget",
            &configmap_child("one", "edited"),
        ))),
    )
    .await
    .unwrap();
    wait_cm(&client, n, "a-edited").await;

    // An invalid edit is refused and reported as a Warning Event on the ConfigMap.
    cms.patch(
        "kiln-rules",
        &pp,
        &kube::api::Patch::Apply(rules_cm(
            "apiVersion: kiln.dev/v1alpha1\nkind: Rule\n".into(),
        )),
    )
    .await
    .unwrap();
    let events = eventually(
        "an InvalidRules Event on the ConfigMap",
        CONVERGE,
        || async {
            let hits = support::events_about(&client, n, "kiln-rules", "InvalidRules").await;
            (!hits.is_empty()).then_some(hits)
        },
    )
    .await;
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    assert!(
        events[0]
            .note
            .as_deref()
            .unwrap()
            .contains("missing field `metadata`"),
        "{:?}",
        events[0].note
    );
    // And one Event per refused rule, naming the ConfigMap by its uid so
    // `kubectl describe configmap` lists it.
    let uid = cms.get("kiln-rules").await.unwrap().metadata.uid;
    let per_rule = eventually("a RuleRefused Event on the ConfigMap", CONVERGE, || async {
        let hits = support::events_about(&client, n, "kiln-rules", "RuleRefused").await;
        (!hits.is_empty()).then_some(hits)
    })
    .await;
    assert_eq!(per_rule[0].regarding.as_ref().unwrap().uid, uid);
    assert!(
        per_rule[0]
            .note
            .as_deref()
            .unwrap()
            .contains("missing field `metadata`"),
        "{:?}",
        per_rule[0].note
    );
    assert_eq!(h.engine.state("widgets"), Some(RuleState::Running));
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_rule_with_pruning_on_deletes_its_children() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "reload-prune").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "widgets.yaml",
        &rule("widgets", "Widget", &configmap_child("one", "one")),
    );
    write(
        dir.path(),
        "keep.yaml",
        &rule("keep", "Widget", &configmap_child("k", "kept")),
    );
    support::apply(&client, widget("a"), Some(n)).await;
    let options = ReloadOptions {
        prune_on_rule_removal: true,
        ..ReloadOptions::default()
    };
    let h = Harness::start(n, From::dir(dir.path()), options).await;
    h.running("widgets").await;
    wait_cm(&client, n, "a-one").await;
    wait_cm(&client, n, "a-kept").await;
    std::fs::remove_file(dir.path().join("widgets.yaml")).unwrap();
    eventually("a-one deleted with its rule", CONVERGE, || async {
        configmap(&client, n, "a-one").await.is_none().then_some(())
    })
    .await;
    assert!(
        configmap(&client, n, "a-kept").await.is_some(),
        "another rule's child was touched"
    );
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_invalid_rule_file_loaded_by_hot_reload_leaves_the_running_rules_untouched() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "reload-corpus").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("widgets.yaml");
    write(
        dir.path(),
        "widgets.yaml",
        &rule("widgets", "Widget", &configmap_child("one", "one")),
    );
    let (sources, read_errors) = rules::load::read_sources(std::slice::from_ref(&good));
    let metrics = Arc::new(Metrics::new());
    let teller = Teller::new(&client, None, Arc::new(|| true));
    let mut loader = Loader::first(
        Version {
            sources,
            read_errors,
            ..Version::default()
        },
        ReloadOptions::default(),
        metrics.clone(),
        teller,
    )
    .unwrap();
    let current = loader.rules();
    let good_set = current.get();
    let engine = Arc::new(Engine::new(
        client.clone(),
        Options {
            namespaces: vec![n.to_string()],
            kind_retry: Duration::from_millis(200),
            ..Options::default()
        },
    ));
    let following =
        tokio::spawn(Follower::start(engine.clone(), &current, false).run(std::future::pending()));
    eventually("the rule to run", CONVERGE, || async {
        (engine.state("widgets") == Some(RuleState::Running)).then_some(())
    })
    .await;
    let running = engine.controller("widgets").unwrap();

    let mut corpus: Vec<_> = std::fs::read_dir(support::repo_root().join("tests/invalid"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    corpus.sort();
    assert!(corpus.len() >= 100);
    for (i, bad) in corpus.iter().enumerate() {
        // The good rule plus one bad file, as if both sat in the rules directory.
        let (sources, read_errors) = rules::load::read_sources(&[good.clone(), bad.clone()]);
        loader
            .consider(Version {
                sources,
                read_errors,
                ..Version::default()
            })
            .await;
        assert_eq!(
            metrics.reloads("error"),
            i as u64 + 1,
            "{} was not refused",
            bad.display()
        );
        assert!(
            Arc::ptr_eq(&running, &engine.controller("widgets").unwrap()),
            "{} disturbed the running rule",
            bad.display()
        );
        // Rules are accepted one by one: the good rule is the one that
        // ran, and a rule of a bad file runs only if valid on its own (and
        // keeps running while a later file refuses a rule of its name).
        let now = current.get();
        assert!(
            Arc::ptr_eq(&good_set.rules[0], now.get("widgets").unwrap()),
            "{} replaced the running rule",
            bad.display()
        );
        for rule in now.rules.iter().filter(|r| r.name != "widgets") {
            let from_corpus = corpus[..=i].contains(&rule.file);
            assert!(from_corpus, "{} ran {}", bad.display(), rule.name);
        }
    }
    // And the untouched rule still works.
    support::apply(&client, widget("after-corpus"), Some(n)).await;
    wait_cm(&client, n, "after-corpus-one").await;
    following.abort();
    engine.shutdown().await;
    ns.delete().await;
}

/// A rules ConfigMap whose only key is mistyped
/// (`rules.yaml.bak`) would stop every rule and, with pruning on, delete
/// every child. It is refused like an invalid set, unless allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_rules_configmap_is_refused_and_the_rules_keep_running() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "reload-empty").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let cms: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), n);
    let pp = kube::api::PatchParams::apply("test").force();
    let set_data = |data: serde_json::Value| {
        let cms = cms.clone();
        let pp = pp.clone();
        async move {
            let cm: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": "kiln-rules"}, "data": data}))
                    .unwrap();
            cms.patch("kiln-rules", &pp, &kube::api::Patch::Apply(cm))
                .await
                .unwrap();
        }
    };
    let good = rule("widgets", "Widget", &configmap_child("one", "one"));
    set_data(json!({"rules.yaml": good})).await;
    support::apply(&client, widget("a"), Some(n)).await;
    let source = From::ConfigMap(n.to_string(), "kiln-rules".into());
    let options = ReloadOptions {
        prune_on_rule_removal: true,
        ..ReloadOptions::default()
    };
    let h = Harness::start(n, source.clone(), options.clone()).await;
    h.running("widgets").await;
    wait_cm(&client, n, "a-one").await;

    // The key is mistyped: no rule file left.
    set_data(json!({"rules.yaml.bak": good})).await;
    eventually("the empty set to be refused", CONVERGE, || async {
        (h.metrics.reloads("error") == 1).then_some(())
    })
    .await;
    let events = eventually("an InvalidRules Event", CONVERGE, || async {
        let hits = support::events_about(&client, n, "kiln-rules", "InvalidRules").await;
        (!hits.is_empty()).then_some(hits)
    })
    .await;
    assert!(
        events[0]
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("holds no rules"),
        "{:?}",
        events[0].note
    );
    assert_eq!(h.engine.state("widgets"), Some(RuleState::Running));
    assert!(
        configmap(&client, n, "a-one").await.is_some(),
        "children were pruned"
    );
    support::apply(&client, widget("b"), Some(n)).await;
    wait_cm(&client, n, "b-one").await;
    h.stop().await;

    // Started with --allow-empty-rules, the same edit is accepted.
    set_data(json!({"rules.yaml": good})).await;
    let allowing = ReloadOptions {
        allow_empty: true,
        ..options
    };
    let h = Harness::start(n, source, allowing).await;
    h.running("widgets").await;
    set_data(json!({"rules.yaml.bak": good})).await;
    eventually("the rule to stop", CONVERGE, || async {
        h.engine.state("widgets").is_none().then_some(())
    })
    .await;
    h.stop().await;
    ns.delete().await;
}
