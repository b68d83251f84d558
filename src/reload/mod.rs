//! Hot reload: the rule set changes while kiln runs, safely.
//!
//! Rules come from files (a mounted ConfigMap, or any directory) or straight
//! from a ConfigMap through the API. A reload reads and validates the whole
//! set first; if anything is invalid nothing changes, every diagnostic is
//! logged and counted (and published as a Warning Event on the rules
//! ConfigMap when one is named). A valid set is diffed by rule name:
//! unchanged rules are not touched, removed rules stop, new rules start,
//! changed rules are swapped and re-reconcile every primary once.

pub mod plan;
pub mod watch;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher::{Event, watcher};
use kube::{Api, Client};

use crate::engine::Engine;
use crate::rules::load::{self, Source};
use crate::rules::{self, Diagnostic, RuleSet};
pub use plan::{Plan, plan};

/// Where rules come from.
#[derive(Debug, Clone)]
pub enum RuleSource {
    /// Files and directories (a mounted ConfigMap among them).
    Paths(Vec<PathBuf>),
    /// A ConfigMap read through the API: every `*.yaml`/`*.yml` key is a file.
    ConfigMap {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

/// How reloads behave.
#[derive(Debug, Clone)]
pub struct ReloadOptions {
    /// Delete the children of a removed rule (default: they stay).
    pub prune_on_rule_removal: bool,
    /// A burst of file events is one reload once quiet this long.
    pub debounce: Duration,
    /// Files are re-read this often even without events.
    pub poll: Duration,
    /// The ConfigMap to publish Warning Events on for invalid rule sets.
    pub configmap: Option<(String, String)>,
    /// Accept a source with no rules (every rule stops). Default: refused like
    /// an invalid set, so a mistyped key or a vanished directory cannot stop
    /// every rule (and, with pruning, delete every child).
    pub allow_empty: bool,
}

impl Default for ReloadOptions {
    fn default() -> Self {
        Self {
            prune_on_rule_removal: false,
            debounce: Duration::from_millis(300),
            poll: Duration::from_secs(10),
            configmap: None,
            allow_empty: false,
        }
    }
}

/// Keeps the engine's rules in step with their source.
pub struct Reloader {
    engine: Arc<Engine>,
    /// For the CRDs rules define.
    client: Client,
    current: RuleSet,
    last_seen: u64,
    options: ReloadOptions,
    events: Option<(Recorder, k8s_openapi::api::core::v1::ObjectReference)>,
}

/// The problem with a source that holds no rules.
pub fn empty_set() -> Diagnostic {
    Diagnostic::new(
        std::path::Path::new("<rules>"),
        "",
        None,
        String::new(),
        "the rule source holds no rules (no `*.yaml` or `*.yml` file or ConfigMap key): an empty set is refused like an invalid one (start kiln with --allow-empty-rules to allow it)".into(),
    )
}

/// Reads the rule files of a ConfigMap's data, in key order.
pub fn configmap_sources(cm: &ConfigMap) -> Vec<Source> {
    let (ns, name) = (
        cm.metadata.namespace.clone().unwrap_or_default(),
        cm.metadata.name.clone().unwrap_or_default(),
    );
    let mut sources: Vec<Source> = cm
        .data
        .iter()
        .flatten()
        .filter(|(key, _)| load::is_rule_file(std::path::Path::new(key)))
        .map(|(key, text)| Source {
            file: PathBuf::from(format!("configmap/{ns}/{name}/{key}")),
            text: text.clone(),
        })
        .collect();
    sources.sort_by(|a, b| a.file.cmp(&b.file));
    sources
}

fn fingerprint(sources: &[Source], read_errors: &[Diagnostic]) -> u64 {
    let mut h = DefaultHasher::new();
    for s in sources {
        s.file.hash(&mut h);
        s.text.hash(&mut h);
    }
    for d in read_errors {
        d.to_string().hash(&mut h);
    }
    h.finish()
}

impl Reloader {
    /// A reloader for an engine already running `initial`.
    pub fn new(
        engine: Arc<Engine>,
        client: &Client,
        initial: RuleSet,
        initial_sources: &[Source],
        options: ReloadOptions,
    ) -> Self {
        let events = options.configmap.as_ref().map(|(ns, name)| {
            let reporter = Reporter {
                controller: "kiln".into(),
                instance: std::env::var("POD_NAME").ok(),
            };
            let reference = k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("ConfigMap".into()),
                namespace: Some(ns.clone()),
                name: Some(name.clone()),
                ..Default::default()
            };
            (Recorder::new(client.clone(), reporter), reference)
        });
        let m = engine.metrics();
        m.rules_loaded.set(initial.rules.len() as i64);
        m.last_good_load.set(now_unix() as f64);
        Self {
            engine,
            client: client.clone(),
            last_seen: fingerprint(initial_sources, &[]),
            current: initial,
            options,
            events,
        }
    }

    /// Follows `source` until `shutdown` resolves.
    pub async fn run(
        mut self,
        client: Client,
        source: RuleSource,
        shutdown: impl Future<Output = ()>,
    ) {
        futures::pin_mut!(shutdown);
        match source {
            RuleSource::Paths(paths) => {
                let mut watcher = watch::DirWatcher::new(&paths);
                loop {
                    tokio::select! {
                        () = &mut shutdown => return,
                        () = watcher.changed(self.options.debounce, self.options.poll) => {
                            let (sources, read_errors) = load::read_sources(&paths);
                            self.consider(sources, read_errors).await;
                        }
                    }
                }
            }
            RuleSource::ConfigMap { namespace, name } => {
                let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
                let config =
                    crate::request_timeout::watch_config().fields(&format!("metadata.name={name}"));
                let events = watcher(api, config).default_backoff();
                futures::pin_mut!(events);
                loop {
                    tokio::select! {
                        () = &mut shutdown => return,
                        event = events.next() => match event {
                            Some(Ok(Event::Apply(cm) | Event::InitApply(cm))) => self.consider(configmap_sources(&cm), Vec::new()).await,
                            Some(Ok(Event::Delete(_))) => tracing::warn!(%namespace, %name, "the rules ConfigMap was deleted; the last good rules keep running"),
                            Some(Ok(_)) => {}
                            Some(Err(error)) => tracing::warn!(%namespace, %name, %error, "watching the rules ConfigMap failed; retrying"),
                            None => return,
                        },
                    }
                }
            }
        }
    }

    /// Loads a new version of the sources, unless it is the one already seen.
    pub async fn consider(&mut self, sources: Vec<Source>, read_errors: Vec<Diagnostic>) {
        let seen = fingerprint(&sources, &read_errors);
        if seen == self.last_seen {
            return;
        }
        self.last_seen = seen;
        let loaded = rules::load_sources_with(sources, read_errors);
        match loaded {
            Ok(set) if set.rules.is_empty() && !self.options.allow_empty => {
                self.refuse(&[empty_set()]).await;
            }
            // The CRDs it defines, checked and applied first: a CRD change
            // that would break stored objects refuses the set.
            Ok(set) => {
                match crate::api::install::install_set(&self.client, Some(&self.current), &set)
                    .await
                {
                    Ok(()) => self.apply(set).await,
                    Err(refusal) => {
                        if refusal.transient {
                            // Not an answer: the same sources are tried again.
                            self.last_seen = 0;
                        }
                        self.refuse(&refusal.diagnostics).await;
                    }
                }
            }
            Err(diagnostics) => self.refuse(&diagnostics).await,
        }
    }

    async fn apply(&mut self, set: RuleSet) {
        let plan = plan(&self.current, &set);
        for name in &plan.stop {
            self.engine
                .remove(name, self.options.prune_on_rule_removal)
                .await;
        }
        for name in &plan.replace {
            if let Some(rule) = set.get(name) {
                self.engine.replace(rule.clone()).await;
            }
        }
        for name in &plan.start {
            if let Some(rule) = set.get(name) {
                self.engine.start(rule.clone());
            }
        }
        let m = self.engine.metrics();
        m.reload_total
            .get_or_create(&crate::metrics::label("result", "success"))
            .inc();
        m.rules_loaded.set(set.rules.len() as i64);
        m.last_good_load.set(now_unix() as f64);
        tracing::info!(
            started = ?plan.start, stopped = ?plan.stop, replaced = ?plan.replace, unchanged = plan.unchanged.len(),
            kiln_rules_loaded = set.rules.len(), kiln_rules_reload_total_success = m.reloads("success"),
            "rules reloaded"
        );
        self.current = set;
    }

    async fn refuse(&self, diagnostics: &[Diagnostic]) {
        let m = self.engine.metrics();
        m.reload_total
            .get_or_create(&crate::metrics::label("result", "error"))
            .inc();
        for d in diagnostics {
            tracing::error!(location = %d.location(), "{}", d.message);
        }
        tracing::error!(
            problems = diagnostics.len(),
            kiln_rules_reload_total_error = m.reloads("error"),
            "the new rules are invalid; the last good rules keep running"
        );
        // Sharded: one member (the one holding bucket 0) tells, not every replica.
        if let Some((recorder, reference)) = &self.events
            && self.engine.runs_singletons()
        {
            let summary: Vec<String> = diagnostics
                .iter()
                .take(5)
                .map(|d| format!("{}: {}", d.location(), d.message))
                .collect();
            let event = KubeEvent {
                type_: EventType::Warning,
                reason: "InvalidRules".into(),
                note: Some(
                    format!(
                        "{} problem(s); the last good rules keep running. {}",
                        diagnostics.len(),
                        summary.join("; ")
                    )
                    .chars()
                    .take(1000)
                    .collect(),
                ),
                action: "Reload".into(),
                secondary: None,
            };
            if let Err(error) = recorder.publish(&event, reference).await {
                tracing::warn!(%error, "could not publish an Event on the rules ConfigMap");
            }
        }
    }
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Reads the rules ConfigMap once (for the first load).
pub async fn read_configmap(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Vec<Source>, kube::Error> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get(name)
        .await?;
    Ok(configmap_sources(&cm))
}
