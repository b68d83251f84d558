//! Where rules come from: one interface for every source.
//!
//! A source hands out versions of the rule files: the first at once (kiln
//! does not start without it), the next ones when the source may have
//! changed. It neither validates nor compares: the [`Loader`](super::Loader)
//! does, the same way for every source. Files and directories (a mounted
//! ConfigMap among them) and a ConfigMap read through the API are sources;
//! another (a Kubernetes `Rule` resource, say) is one more implementation:
//! list them for the first version, watch them for the next.

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client};

use super::watch::DirWatcher;
use crate::rules::Diagnostic;
use crate::rules::load::{self, Source};

/// One version of the rules as a source holds them.
#[derive(Debug, Clone, Default)]
pub struct Version {
    /// The rule files, in a stable order.
    pub sources: Vec<Source>,
    /// Files that could not be read, as diagnostics.
    pub read_errors: Vec<Diagnostic>,
    /// The generation of the object each file is (a `Rule`'s
    /// `metadata.generation`), for sources whose files are objects.
    pub generations: std::collections::BTreeMap<PathBuf, i64>,
}

/// Why a source gave no first version.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The rules ConfigMap could not be read.
    #[error("reading the rules ConfigMap {namespace}/{name}: {source}")]
    ConfigMap {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// What the API server answered.
        #[source]
        source: kube::Error,
    },
    /// The Rule resources could not be listed.
    #[error("listing the Rule resources (rules.kiln.dev): {source}")]
    Rules {
        /// What the API server answered.
        #[source]
        source: kube::Error,
    },
}

/// A place rules are read from.
pub trait RuleSource: Send {
    /// The rules as they are now.
    fn first(&mut self) -> BoxFuture<'_, Result<Version, SourceError>>;
    /// The rules once they may have changed (the content may be the same:
    /// the caller compares); `None` once the source has ended.
    fn next(&mut self) -> BoxFuture<'_, Option<Version>>;
}

/// Rule files and directories, watched (inotify, and a poll for what it
/// cannot see).
pub struct Files {
    paths: Vec<PathBuf>,
    debounce: Duration,
    poll: Duration,
    watcher: Option<DirWatcher>,
}

impl Files {
    /// Files and directories, a burst of changes read once it has been quiet
    /// for `debounce`, and read again every `poll` regardless.
    pub fn new(paths: Vec<PathBuf>, debounce: Duration, poll: Duration) -> Self {
        Self {
            paths,
            debounce,
            poll,
            watcher: None,
        }
    }

    fn read(&self) -> Version {
        let (sources, read_errors) = load::read_sources(&self.paths);
        Version {
            sources,
            read_errors,
            ..Version::default()
        }
    }

    fn watcher(&mut self) -> &mut DirWatcher {
        self.watcher
            .get_or_insert_with(|| DirWatcher::new(&self.paths))
    }
}

impl RuleSource for Files {
    fn first(&mut self) -> BoxFuture<'_, Result<Version, SourceError>> {
        // Watched before the read: a change in between is not missed.
        self.watcher();
        Box::pin(async move { Ok(self.read()) })
    }

    fn next(&mut self) -> BoxFuture<'_, Option<Version>> {
        Box::pin(async move {
            let (debounce, poll) = (self.debounce, self.poll);
            self.watcher().changed(debounce, poll).await;
            Some(self.read())
        })
    }
}

/// A ConfigMap read through the API: every `*.yaml`/`*.yml` key is a file.
pub struct RulesConfigMap {
    api: Api<ConfigMap>,
    namespace: String,
    name: String,
    events: Option<BoxStream<'static, Result<Event<ConfigMap>, watcher::Error>>>,
}

impl RulesConfigMap {
    /// The ConfigMap `namespace/name`.
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
            events: None,
        }
    }
}

impl RuleSource for RulesConfigMap {
    fn first(&mut self) -> BoxFuture<'_, Result<Version, SourceError>> {
        Box::pin(async move {
            let cm = self
                .api
                .get(&self.name)
                .await
                .map_err(|source| SourceError::ConfigMap {
                    namespace: self.namespace.clone(),
                    name: self.name.clone(),
                    source,
                })?;
            Ok(version_of(&cm))
        })
    }

    fn next(&mut self) -> BoxFuture<'_, Option<Version>> {
        Box::pin(async move {
            let (namespace, name) = (&self.namespace, &self.name);
            let events = self.events.get_or_insert_with(|| {
                let config =
                    crate::request_timeout::watch_config().fields(&format!("metadata.name={name}"));
                watcher(self.api.clone(), config).default_backoff().boxed()
            });
            loop {
                match events.next().await? {
                    Ok(Event::Apply(cm) | Event::InitApply(cm)) => return Some(version_of(&cm)),
                    Ok(Event::Delete(_)) => {
                        tracing::warn!(%namespace, %name, "the rules ConfigMap was deleted; the last good rules keep running");
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(%namespace, %name, %error, "watching the rules ConfigMap failed; retrying");
                    }
                }
            }
        })
    }
}

fn version_of(cm: &ConfigMap) -> Version {
    Version {
        sources: configmap_sources(cm),
        ..Version::default()
    }
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
