//! Rules as Kubernetes resources: cluster-scoped `kiln.dev/v1alpha1 Rule`
//! objects (`rules.kiln.dev`), listed for the first version and watched for
//! the next. Each object's spec is handed out as one rule document named
//! `rule/<name>`, so diagnostics point at the object. What was handed out
//! (each Rule's generation and status as read) is shared with the
//! [`StatusWriter`](super::status::StatusWriter).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use kube::api::{ApiResource, ListParams, ObjectMeta};
use kube::core::GroupVersionKind;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client};
use serde_json::Value;
use serde_json::value::RawValue;

use super::source::{RuleSource, SourceError, Version};
use crate::rules::load::Source;

/// The resource rules are read from.
pub fn rule_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kiln.dev", "v1alpha1", "Rule"),
        "rules",
    )
}

/// The file name a Rule's document carries.
pub fn file_of(name: &str) -> PathBuf {
    PathBuf::from(format!("rule/{name}"))
}

/// One Rule object as last read.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// `metadata.uid` (Events name the object by it).
    pub uid: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// Its `status`, as read.
    pub status: Value,
    /// Its rule document.
    pub text: String,
}

/// A `Rule` object as listed and watched: its spec and status kept as the
/// API server's JSON, decoded per object afterwards. One Rule nested too
/// deeply to decode is then refused alone, and never fails the list or the
/// watch of every Rule.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
pub struct RuleObject {
    /// Its metadata.
    pub metadata: ObjectMeta,
    /// Its spec, undecoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<Box<RawValue>>,
    /// Its status, undecoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Box<RawValue>>,
}

impl kube::Resource for RuleObject {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Rule".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "kiln.dev".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1alpha1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "rules".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The Rule objects of the last version handed out, by name.
pub type Offered = Arc<Mutex<BTreeMap<String, Seen>>>;

/// Cluster-scoped `Rule` objects, listed then watched.
pub struct RuleResources {
    api: Api<RuleObject>,
    store: BTreeMap<String, Seen>,
    offered: Offered,
    events: Option<BoxStream<'static, Result<Event<RuleObject>, watcher::Error>>>,
}

impl RuleResources {
    /// Every Rule in the cluster.
    pub fn new(client: Client) -> Self {
        Self {
            api: Api::all(client),
            store: BTreeMap::new(),
            offered: Offered::default(),
            events: None,
        }
    }

    /// What this source handed out last (for the status writer).
    pub fn offered(&self) -> Offered {
        self.offered.clone()
    }

    fn version(&self) -> Version {
        *self
            .offered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = self.store.clone();
        Version {
            sources: self
                .store
                .iter()
                .map(|(name, seen)| Source {
                    file: file_of(name),
                    text: seen.text.clone(),
                })
                .collect(),
            generations: self
                .store
                .iter()
                .map(|(name, seen)| (file_of(name), seen.generation))
                .collect(),
            ..Version::default()
        }
    }
}

/// A Rule object as kiln reads it: its name and what it holds. A spec
/// that does not decode (nested deeper than JSON is decoded) is handed out
/// as the API server wrote it, for validation to refuse with why.
pub fn seen(obj: &RuleObject) -> Option<(String, Seen)> {
    let name = obj.metadata.name.clone()?;
    let raw = obj.spec.as_deref().map_or("null", RawValue::get);
    let text = match serde_json::from_str::<Value>(raw) {
        Ok(spec) => {
            let doc = serde_json::json!({
                "apiVersion": "kiln.dev/v1alpha1",
                "kind": "Rule",
                "metadata": {"name": name},
                "spec": spec,
            });
            // JSON is YAML: one key per line, so diagnostics have useful lines.
            serde_json::to_string_pretty(&doc).unwrap_or_default()
        }
        Err(_) => {
            let name = Value::String(name.clone());
            format!(
                "{{\"apiVersion\": \"kiln.dev/v1alpha1\", \"kind\": \"Rule\", \"metadata\": {{\"name\": {name}}}, \"spec\": {raw}}}"
            )
        }
    };
    let status = obj.status.as_deref().map_or("null", RawValue::get);
    let seen = Seen {
        uid: obj.metadata.uid.clone().unwrap_or_default(),
        generation: obj.metadata.generation.unwrap_or(0),
        status: serde_json::from_str(status).unwrap_or(Value::Null),
        text,
    };
    Some((name, seen))
}

impl RuleSource for RuleResources {
    fn first(&mut self) -> BoxFuture<'_, Result<Version, SourceError>> {
        Box::pin(async move {
            let list = self
                .api
                .list(&ListParams::default())
                .await
                .map_err(|source| SourceError::Rules { source })?;
            self.store = list.items.iter().filter_map(seen).collect();
            Ok(self.version())
        })
    }

    fn next(&mut self) -> BoxFuture<'_, Option<Version>> {
        Box::pin(async move {
            let events = self.events.get_or_insert_with(|| {
                let config = crate::request_timeout::watch_config();
                watcher(self.api.clone(), config).default_backoff().boxed()
            });
            let mut relisting: Option<BTreeMap<String, Seen>> = None;
            loop {
                match events.next().await? {
                    Ok(Event::Apply(obj)) => {
                        if let Some((name, s)) = seen(&obj) {
                            self.store.insert(name, s);
                        }
                        return Some(self.version());
                    }
                    Ok(Event::Delete(obj)) => {
                        if let Some(name) = obj.metadata.name {
                            self.store.remove(&name);
                        }
                        return Some(self.version());
                    }
                    Ok(Event::Init) => relisting = Some(BTreeMap::new()),
                    Ok(Event::InitApply(obj)) => {
                        if let (Some(list), Some((name, s))) = (relisting.as_mut(), seen(&obj)) {
                            list.insert(name, s);
                        }
                    }
                    Ok(Event::InitDone) => {
                        // Only a complete list replaces what is known.
                        if let Some(list) = relisting.take() {
                            self.store = list;
                        }
                        return Some(self.version());
                    }
                    Err(error) => {
                        tracing::warn!(%error, "watching the Rule resources failed; retrying (the last good rules keep running)");
                    }
                }
            }
        })
    }
}
