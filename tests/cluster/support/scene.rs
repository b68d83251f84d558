//! A test's world, built as a sentence:
//! `Scene::new("prefix").await.with_widgets().await.running(&[rule]).await`
//! — an admin client, a namespace of its own, the test CRDs, an engine
//! scoped to the namespace whose writes are counted.

use std::sync::Arc;
use std::time::Duration;

use kiln::engine::{Engine, Options, RuleState};
use kiln::rules::Rule;
use kube::Client;
use serde_json::Value;

use super::{TestNamespace, WriteCounter, eventually};

/// How long a test waits for the cluster to converge.
pub const CONVERGE: Duration = super::PATIENCE;

/// One test's namespace, client and (once started) engine.
pub struct Scene {
    /// The admin client.
    pub client: Client,
    ns: TestNamespace,
    engine: Option<Arc<Engine>>,
    writes: WriteCounter,
    /// Namespaces the engine watches besides the scene's own.
    also: Vec<String>,
    /// Whether the engine caches only what rules set and read.
    project: bool,
    /// Whether hooks may be served on loopback (the test-only setting).
    loopback: bool,
}

impl Scene {
    /// A namespace of its own, named after `prefix`.
    pub async fn new(prefix: &str) -> Self {
        let client = super::admin_client().await;
        let ns = TestNamespace::new(&client, prefix).await;
        Self {
            client,
            ns,
            engine: None,
            writes: WriteCounter::default(),
            also: Vec::new(),
            project: false,
            loopback: false,
        }
    }

    /// With the test CRDs (Widget) installed.
    pub async fn with_widgets(self) -> Self {
        super::install_crds(&self.client, "tests/fixtures/crds").await;
        self
    }

    /// With the CRDs under `dir` (relative to the repository) installed.
    pub async fn with_crds(self, dir: &str) -> Self {
        super::install_crds(&self.client, dir).await;
        self
    }

    /// The engine will also watch `namespace`.
    pub fn also_watching(mut self, namespace: &str) -> Self {
        self.also.push(namespace.to_string());
        self
    }

    /// The engine will cache only what rules set and read.
    pub fn projecting(mut self) -> Self {
        self.project = true;
        self
    }

    /// The engine's egress client will connect to a server on loopback
    /// (a hook the test serves): the explicit test-only setting, never a
    /// default.
    pub fn allowing_loopback(mut self) -> Self {
        self.loopback = true;
        self
    }

    /// With an engine running `rules` in this namespace (each rule running).
    pub async fn running(mut self, rules: &[Arc<Rule>]) -> Self {
        let mut namespaces = vec![self.ns().to_string()];
        namespaces.extend(self.also.iter().cloned());
        let (engine, writes) =
            start_engine_with(&namespaces, rules, self.project, self.loopback).await;
        self.engine = Some(engine);
        self.writes = writes;
        self
    }

    /// The namespace.
    pub fn ns(&self) -> &str {
        self.ns.name()
    }

    /// The engine (after [`running`](Self::running)).
    pub fn engine(&self) -> &Arc<Engine> {
        self.engine
            .as_ref()
            .expect("the scene has no engine running")
    }

    /// Write requests the engine has sent.
    pub fn writes(&self) -> u64 {
        self.writes.get()
    }

    /// Server-side applies `object` in the namespace, as the test's manager.
    pub async fn apply(&self, object: Value) -> Value {
        super::apply(&self.client, object, Some(self.ns())).await
    }

    /// The API of a kind, in the namespace when the kind is namespaced.
    pub async fn api(&self, api_version: &str, kind: &str) -> kube::Api<kube::api::DynamicObject> {
        super::dynamic_api(
            &self.client,
            &serde_json::json!(api_version),
            &serde_json::json!(kind),
            Some(self.ns()),
        )
        .await
    }

    /// An object in the namespace, now.
    pub async fn get(&self, api_version: &str, kind: &str, name: &str) -> Option<Value> {
        super::get(&self.client, api_version, kind, self.ns(), name).await
    }

    /// Waits until the object exists and `check` holds for it.
    pub async fn until(
        &self,
        what: &str,
        (api_version, kind, name): (&str, &str, &str),
        check: impl Fn(&Value) -> bool,
    ) -> Value {
        eventually(what, CONVERGE, || async {
            self.get(api_version, kind, name).await.filter(|o| check(o))
        })
        .await
    }

    /// Deletes Widget `name` and waits (`within` at most) until it is gone.
    pub async fn delete_widget(&self, name: &str, within: Duration) {
        let (api_version, kind, _) = widget_at(name);
        super::delete(&self.client, (api_version, kind), Some(self.ns()), name).await;
        eventually(&format!("{name} gone"), within, || async {
            self.get(api_version, kind, name)
                .await
                .is_none()
                .then_some(())
        })
        .await;
    }

    /// Waits until Widget `name` is `Ready=True`.
    pub async fn ready(&self, name: &str) -> Value {
        self.until(&format!("{name} to be ready"), widget_at(name), |w| {
            condition(w, "Ready")["status"] == "True"
        })
        .await
    }

    /// Waits until Widget `name` is `Reconciled=False` for `reason`;
    /// returns the condition's message.
    pub async fn refused(&self, name: &str, reason: &str) -> String {
        let w = self
            .until(
                &format!("{name} to be refused: {reason}"),
                widget_at(name),
                |w| condition(w, "Reconciled")["reason"] == reason,
            )
            .await;
        condition(&w, "Reconciled")["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Waits until the engine writes nothing for 1.5 s, forces a resync of
    /// `rule` and waits until it reconciled `n` more times, plus a second
    /// for the echo; returns the writes the resync caused.
    pub async fn writes_during_resync(&self, rule: &str, n: u64) -> u64 {
        // Settled first: a write still on its way from the convergence the
        // caller waited for (a status after a child's echo) is not the
        // resync's.
        super::settled("the engine to settle", || self.writes()).await;
        let reconciles = super::counts::reconciles(self.engine());
        let before = self.writes();
        self.engine().resync(rule);
        eventually("the resync's reconciles", CONVERGE, || async {
            (super::counts::reconciles(self.engine()) >= reconciles + n).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.writes() - before
    }

    /// Deletes the namespace.
    pub async fn end(self) {
        if let Some(engine) = &self.engine {
            engine.shutdown().await;
        }
        self.ns.delete().await;
    }
}

/// Starts an engine scoped to `namespaces` on a write-counting client and waits
/// until every rule runs.
pub async fn start_engine(
    namespaces: &[String],
    rules: &[Arc<Rule>],
) -> (Arc<Engine>, WriteCounter) {
    start_engine_with(namespaces, rules, Options::default().project_cache, false).await
}

/// [`start_engine`], caching only what rules set and read when `project`.
async fn start_engine_with(
    namespaces: &[String],
    rules: &[Arc<Rule>],
    project: bool,
    loopback: bool,
) -> (Arc<Engine>, WriteCounter) {
    let (client, writes) = super::counting_client().await;
    let mut policy = kiln::egress::AddressPolicy::default();
    if loopback {
        policy = policy.allowing_loopback_for_tests();
    }
    let options = Options {
        namespaces: namespaces.to_vec(),
        concurrency: 2,
        kind_retry: Duration::from_millis(200),
        project_cache: project,
        // What kiln keeps of its own stays in the test's namespace.
        state_namespace: namespaces[0].clone(),
        egress: kiln::egress::Client::new(policy),
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
    (engine, writes)
}

/// A ConfigMap's address for [`Scene::until`].
pub fn configmap(name: &str) -> (&'static str, &'static str, &str) {
    ("v1", "ConfigMap", name)
}

/// A Widget's address for [`Scene::until`].
pub fn widget_at(name: &str) -> (&'static str, &'static str, &str) {
    ("test.kiln.dev/v1", "Widget", name)
}

/// The condition of `kind` on an object, or null.
pub fn condition<'a>(obj: &'a Value, kind: &str) -> &'a Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}
