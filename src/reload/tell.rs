//! Telling about a refused rule set: a Warning Event on the rules ConfigMap
//! (with its uid, so `kubectl describe configmap` lists it), when one is
//! named, and only on the replica that speaks for the group (the leader;
//! sharded, the holder of bucket 0), so replicas do not repeat each other.

use crate::gate;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource as _};

/// Whether this replica speaks for the group right now.
pub type Speaks = Arc<dyn Fn() -> bool + Send + Sync>;

/// Publishes Events about the rules on their ConfigMap.
pub struct Teller {
    reporter: Reporter,
    /// Per reason, the last note told and the recorder that told it. kube's
    /// recorder folds an Event into the last one of its reason on the same
    /// object (a series, the first note kept): only a note told again is
    /// folded, so each rule refused and each new reason is an Event of its
    /// own.
    recorders: Mutex<HashMap<String, (String, Recorder)>>,
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
            reporter,
            recorders: Mutex::default(),
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
        let recorder = self.recorder(reason, note);
        if let Err(error) = gate::publish(&recorder, &event, &reference).await {
            tracing::warn!(%error, "could not publish an Event on the rules ConfigMap");
        }
    }

    /// The recorder telling `note` for `reason`: the one that told it last
    /// when it is the same note (kube folds it into that Event), a new one
    /// otherwise (a new Event).
    fn recorder(&self, reason: &str, note: &str) -> Recorder {
        let mut recorders = self
            .recorders
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match recorders.get(reason) {
            Some((last, recorder)) if last == note => recorder.clone(),
            _ => {
                let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
                recorders.insert(reason.to_string(), (note.to_string(), recorder.clone()));
                recorder
            }
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
