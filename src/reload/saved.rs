//! The accepted rule set, saved in the cluster: one ConfigMap in kiln's own
//! namespace (`<lease name>-accepted-rules`), created by kiln and written
//! only by the replica that runs the engine, once a set is accepted. It
//! holds, for each rule, the document it was compiled from and the
//! generation of the source object it came from, so a restart, a standby
//! taking over or a new pod run the last accepted rules when the source is
//! invalid or cannot be read.
//!
//! A ConfigMap, not a Secret: it holds rule documents, which are no more
//! secret than the rule source they were read from (a ConfigMap, files
//! from one, or `Rule` objects). A set too large for one object (the API
//! server's limit is 1 MiB) is not saved, and says so: the copy saved
//! before stays whole, nothing is cut.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use super::accepted::Accepted;
use super::release::Release;
use crate::gate::{self, Warrant};

/// The key holding the saved set.
const KEY: &str = "accepted.json";
/// The label naming kiln's own ConfigMap; one without it is not kiln's.
const OWNED: (&str, &str) = ("app.kubernetes.io/managed-by", "kiln");
/// Largest saved set: the API server takes objects up to 1 MiB, with room
/// left for the metadata.
pub const MAX_BYTES: usize = 900 * 1024;

/// Why the accepted set could not be read or saved.
#[derive(Debug, thiserror::Error)]
pub enum SavedError {
    /// The API server did not answer as expected.
    #[error("accepted rules ConfigMap {namespace}/{name}: {source}")]
    Api {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// A ConfigMap of that name exists that kiln did not make.
    #[error(
        "ConfigMap {namespace}/{name} exists but is not kiln's (no label {}={}): the accepted rules are neither read from it nor saved in it",
        OWNED.0, OWNED.1
    )]
    NotKilns {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// What it holds does not decode.
    #[error("accepted rules ConfigMap {namespace}/{name} does not hold a rule set: {source}")]
    Undecodable {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The set does not fit in one object.
    #[error(
        "the accepted rules take {bytes} bytes, more than the {MAX_BYTES} one ConfigMap may hold: they are not saved (the set saved before stays)"
    )]
    TooLarge {
        /// The size of the set.
        bytes: usize,
    },
}

/// The ConfigMap's name with the default Lease (`--leader-elect-id kiln`).
pub const DEFAULT_NAME: &str = "kiln-accepted-rules";

/// The name of the ConfigMap the kiln whose Lease is `lease` saves its
/// accepted rules in.
pub fn name(lease: &str) -> String {
    format!("{lease}-accepted-rules")
}

/// The ConfigMap the accepted set is saved in.
#[derive(Clone)]
pub struct Saved {
    api: Api<ConfigMap>,
    namespace: String,
    name: String,
}

/// What is saved: the rules and where they were read from.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Stored {
    /// The rule source (`--rules`, the ConfigMap, the Rule resources).
    source: String,
    #[serde(flatten)]
    accepted: Accepted,
    /// The finalizers still owed a release (rules that no longer run on a
    /// kind they held theirs on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    releasing: Vec<Release>,
}

impl Saved {
    /// The accepted rules of the kiln whose Lease is `lease`, in `namespace`.
    pub fn new(client: Client, namespace: &str, lease: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name(lease),
        }
    }

    /// `namespace/name`.
    pub fn place(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn api_error(&self, source: kube::Error) -> SavedError {
        SavedError::Api {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    /// The saved set of rules read from `source` (`None`: none saved, or
    /// saved from another source).
    pub async fn read(&self, source: &str) -> Result<Option<Accepted>, SavedError> {
        let Some(cm) = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.api_error(e))?
        else {
            return Ok(None);
        };
        self.owned(&cm)?;
        let Some(text) = cm.data.as_ref().and_then(|d| d.get(KEY)) else {
            return Ok(None);
        };
        let stored: Stored =
            serde_json::from_str(text).map_err(|source| SavedError::Undecodable {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                source,
            })?;
        if stored.source != source {
            tracing::warn!(saved = %self.place(), from = %stored.source, now = %source, "the accepted rules were saved from another rule source: not used");
            return Ok(None);
        }
        Ok(Some(stored.accepted))
    }

    fn owned(&self, cm: &ConfigMap) -> Result<(), SavedError> {
        let labels = cm.metadata.labels.as_ref();
        if labels.and_then(|l| l.get(OWNED.0)).map(String::as_str) == Some(OWNED.1) {
            return Ok(());
        }
        Err(SavedError::NotKilns {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        })
    }

    /// Saves `accepted`, read from `source`: created when absent, replaced
    /// when kiln's. `owe` is handed the set saved before and the releases
    /// it still owes, and says what the new one owes; what it owes.
    pub async fn write(
        &self,
        source: &str,
        accepted: &Accepted,
        owe: impl FnOnce(&Accepted, &[Release]) -> Vec<Release>,
    ) -> Result<Vec<Release>, SavedError> {
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.api_error(e))?;
        if let Some(current) = &current {
            self.owned(current)?;
        }
        let before = current.as_ref().and_then(decode);
        let releasing = match &before {
            Some(b) => owe(&b.accepted, &b.releasing),
            None => owe(&Accepted::default(), &[]),
        };
        let text = encode(source, accepted, &releasing)?;
        let mut cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([(OWNED.0.into(), OWNED.1.into())])),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(KEY.to_string(), text)])),
            ..ConfigMap::default()
        };
        let params = PostParams::default();
        match current {
            None => gate::create(&self.api, &params, &cm, Warrant::OwnState)
                .await
                .map(drop),
            Some(current) => {
                // Replaced only as read: a concurrent write is not overwritten.
                cm.metadata.resource_version = current.metadata.resource_version;
                gate::replace(&self.api, &self.name, &params, &cm, Warrant::OwnState)
                    .await
                    .map(drop)
            }
        }
        .map_err(|e| self.api_error(e))?;
        Ok(releasing)
    }
}

/// What a ConfigMap of kiln's holds, when it decodes.
fn decode(cm: &ConfigMap) -> Option<Stored> {
    let text = cm.data.as_ref()?.get(KEY)?;
    serde_json::from_str(text).ok()
}

/// The saved form of `accepted`, refused when too large for one object.
fn encode(source: &str, accepted: &Accepted, releasing: &[Release]) -> Result<String, SavedError> {
    let stored = Stored {
        source: source.to_string(),
        accepted: accepted.clone(),
        releasing: releasing.to_vec(),
    };
    let text = serde_json::to_string(&stored).unwrap_or_default();
    if text.len() > MAX_BYTES {
        return Err(SavedError::TooLarge { bytes: text.len() });
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reload::accepted::Entry;

    #[test]
    fn a_set_too_large_for_one_object_is_refused_whole() {
        let entry = |i: usize| Entry {
            name: format!("r{i}"),
            file: format!("r{i}.yaml").into(),
            text: "x".repeat(100 * 1024),
            generation: Some(1),
        };
        let small = Accepted {
            rules: (0..3).map(entry).collect(),
        };
        let text = encode("files", &small, &[]).unwrap();
        let back: Stored = serde_json::from_str(&text).unwrap();
        assert_eq!(back.accepted, small);
        let large = Accepted {
            rules: (0..10).map(entry).collect(),
        };
        assert!(matches!(
            encode("files", &large, &[]),
            Err(SavedError::TooLarge { bytes }) if bytes > MAX_BYTES
        ));
    }
}
