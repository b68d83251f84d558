//! Telling about a refused rule set: a Warning Event on the rules ConfigMap
//! (with its uid, so `kubectl describe configmap` lists it), when one is
//! named, and only on the replica that speaks for the group (the leader;
//! sharded, the holder of bucket 0), so replicas do not repeat each other.

use crate::gate;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource as _};

/// Whether this replica speaks for the group right now.
pub type Speaks = Arc<dyn Fn() -> bool + Send + Sync>;

/// Publishes Events about the rules on their ConfigMap.
pub struct Teller {
    recorder: Recorder,
    client: Client,
    configmap: Option<(String, String)>,
    speaks: Speaks,
}

impl Teller {
    /// Events on the ConfigMap `configmap` (`namespace`, `name`), if any,
    /// while `speaks` says so.
    pub fn new(client: &Client, configmap: Option<(String, String)>, speaks: Speaks) -> Self {
        let reporter = Reporter {
            controller: "kiln".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client: client.clone(),
            configmap,
            speaks,
        }
    }

    /// Whether this replica speaks for the group now (what it tells is
    /// published).
    pub fn speaking(&self) -> bool {
        (self.speaks)()
    }

    /// A Warning Event: `reason`, and `note` (cut to the API's 1 kB).
    pub async fn warn(&self, reason: &str, note: &str) {
        let Some((namespace, name)) = &self.configmap else {
            return;
        };
        if !(self.speaks)() {
            return;
        }
        let reference = self.reference(namespace, name).await;
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: "Reload".into(),
            secondary: None,
        };
        if let Err(error) = gate::publish(&self.recorder, &event, &reference).await {
            tracing::warn!(%error, "could not publish an Event on the rules ConfigMap");
        }
    }

    /// The ConfigMap's reference, with its uid when it can be read.
    async fn reference(&self, namespace: &str, name: &str) -> ObjectReference {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        match api.get(name).await {
            Ok(cm) => cm.object_ref(&()),
            Err(error) => {
                tracing::warn!(%error, "could not read the rules ConfigMap for its uid");
                ObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("ConfigMap".into()),
                    namespace: Some(namespace.to_string()),
                    name: Some(name.to_string()),
                    ..ObjectReference::default()
                }
            }
        }
    }
}
