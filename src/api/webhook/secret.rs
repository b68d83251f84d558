//! The webhook's certificates kept in a Secret in kiln's namespace, shared
//! by every replica: created once (the first replica to create it wins; the
//! others read it), replaced when renewal is due by one replica (an update
//! conditioned on the version read; the others read the winner's).
//!
//! Only a Secret kiln made is used or written: one kiln's field manager
//! created (its `managedFields`), of type `kubernetes.io/tls`, carrying
//! kiln's annotation ([`provenance`]). Any other Secret of that name is
//! left as it is and reported ([`SecretError::Foreign`]): the webhook then
//! serves no certificate it would have had to write there.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::Api as KubeApi;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use super::FIELD_MANAGER;
use super::certs::{self, Material};
use crate::gate::{self, Warrant};

/// Why the certificates could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The API server refused or was not reached.
    #[error("Secret {secret}: {source}")]
    Api {
        /// `namespace/name`.
        secret: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// Other writers kept changing it.
    #[error("Secret {0} kept changing while kiln renewed it; trying again later")]
    Contended(String),
    /// The certificates could not be made.
    #[error("making the webhook's certificates: {0}")]
    Issue(#[from] rcgen::Error),
    /// A Secret of that name exists that kiln did not make.
    #[error(
        "Secret {secret} was not made by kiln ({what}); kiln neither uses nor overwrites it, and serves no conversion until it is gone: delete it if it is a leftover, or give kiln another Secret name (--conversion-secret)"
    )]
    Foreign {
        /// `namespace/name`.
        secret: String,
        /// Its type and who wrote it.
        what: String,
    },
}

/// The annotation kiln writes on its webhook Secret.
pub const ANNOTATION: &str = "kiln.dev/conversion-webhook";

/// The Secret type kiln writes.
const TLS: &str = "kubernetes.io/tls";

/// Whether kiln made `secret`: created by kiln's field manager, of kiln's
/// type, with kiln's annotation (labels anyone can copy are not asked).
/// A Secret an earlier kiln made (before it named its field manager) is
/// taken when it holds kiln's whole material under kiln's keys. `Err`
/// says what it is instead.
pub fn provenance(secret: &Secret) -> Result<(), String> {
    let type_ = secret.type_.as_deref().unwrap_or("Opaque");
    let managers: Vec<&str> = secret
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|f| f.manager.as_deref())
        .collect();
    let annotated = secret
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANNOTATION));
    let created = secret.metadata.managed_fields.iter().flatten().any(|f| {
        f.manager.as_deref() == Some(FIELD_MANAGER) && f.operation.as_deref() == Some("Update")
    });
    let labelled = secret
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("app.kubernetes.io/managed-by"))
        .is_some_and(|v| v == "kiln");
    let earlier_kiln = labelled && read(secret).is_some();
    if type_ == TLS && ((annotated && created) || earlier_kiln) {
        return Ok(());
    }
    let managers = if managers.is_empty() {
        "no field manager recorded".to_string()
    } else {
        format!("written by {}", managers.join(", "))
    };
    Err(format!("type {type_}, {managers}"))
}

/// The Secret's keys.
const BUNDLE: &str = "ca-bundle.crt";
const CA: &str = "ca.crt";
const CERT: &str = "tls.crt";
const KEY: &str = "tls.key";
const HOSTS: &str = "hosts";
const NOT_BEFORE: &str = "not-before";
const NOT_AFTER: &str = "not-after";

fn text(data: &BTreeMap<String, ByteString>, k: &str) -> Option<String> {
    data.get(k)
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
}

/// The material a Secret holds, if it holds it whole.
pub fn read(secret: &Secret) -> Option<Material> {
    let data = secret.data.as_ref()?;
    Some(Material {
        bundle: text(data, BUNDLE)?,
        ca: text(data, CA)?,
        cert: text(data, CERT)?,
        key: text(data, KEY)?,
        hosts: text(data, HOSTS)?
            .split(',')
            .filter(|h| !h.is_empty())
            .map(str::to_string)
            .collect(),
        not_before: text(data, NOT_BEFORE)?.parse().ok()?,
        not_after: text(data, NOT_AFTER)?.parse().ok()?,
    })
}

/// The Secret holding `m`.
pub fn write(name: &str, m: &Material) -> Secret {
    let entries = [
        (BUNDLE, m.bundle.clone()),
        (CA, m.ca.clone()),
        (CERT, m.cert.clone()),
        (KEY, m.key.clone()),
        (HOSTS, m.hosts.join(",")),
        (NOT_BEFORE, m.not_before.to_string()),
        (NOT_AFTER, m.not_after.to_string()),
    ];
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            annotations: Some(BTreeMap::from([(
                ANNOTATION.to_string(),
                "certificates".to_string(),
            )])),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                "kiln".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some(TLS.into()),
        data: Some(
            entries
                .into_iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Secret::default()
    }
}

/// The certificates to serve now: those in the Secret, made (or renewed)
/// first when absent, for other hosts or due. `serving` is the CA of the
/// certificate this replica serves now, if any: a Secret made afresh (the
/// old one deleted) keeps it in its bundle, so the CRDs go on trusting the
/// certificate served until the new one is.
pub async fn ensure(
    secrets: &KubeApi<Secret>,
    name: &str,
    hosts: &[String],
    validity: Duration,
    serving: Option<&str>,
) -> Result<Material, SecretError> {
    let at = format!("{}/{name}", secrets.namespace().unwrap_or_default());
    let api_error = |source| SecretError::Api {
        secret: at.clone(),
        source,
    };
    for _ in 0..3 {
        let current = secrets.get_opt(name).await.map_err(api_error)?;
        if let Some(secret) = &current {
            provenance(secret).map_err(|what| SecretError::Foreign {
                secret: at.clone(),
                what,
            })?;
        }
        let now = SystemTime::now();
        let held = current.as_ref().and_then(read);
        if let Some(m) = &held
            && !m.due(certs::epoch(now), hosts)
        {
            return Ok(m.clone());
        }
        let previous = held.as_ref().map(|m| m.ca.as_str()).or(serving);
        let fresh = certs::issue(hosts, validity, now, previous)?;
        let mut secret = write(name, &fresh);
        let written = match current {
            None => {
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PostParams::default()
                };
                gate::create(secrets, &params, &secret, Warrant::OwnState).await
            }
            Some(old) => {
                // Conditioned on the version read (a patch carrying it): one
                // replica renews, the others get a conflict.
                secret.metadata.resource_version = old.metadata.resource_version;
                let patch = Patch::Merge(&secret);
                let params = PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                };
                gate::patch(secrets, name, &params, &patch, Warrant::OwnState).await
            }
        };
        match written {
            Ok(_) => {
                tracing::info!(
                    secret = name,
                    not_after = fresh.not_after,
                    "made the conversion webhook's certificates"
                );
                return Ok(fresh);
            }
            // Another replica wrote first: read theirs.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(api_error(e)),
        }
    }
    Err(SecretError::Contended(name.to_string()))
}

/// Tells, by a Warning Event on the Secret, that kiln does not use it.
pub async fn tell_foreign(client: &kube::Client, namespace: &str, name: &str, note: &str) {
    let reporter = Reporter {
        controller: "kiln".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let secrets: KubeApi<Secret> = KubeApi::namespaced(client.clone(), namespace);
    let uid = secrets
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|s| s.metadata.uid);
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Secret".into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        uid,
        ..ObjectReference::default()
    };
    let event = Event {
        type_: EventType::Warning,
        reason: "WebhookSecretNotKilns".into(),
        note: Some(note.chars().take(1000).collect()),
        action: "ServeConversion".into(),
        secondary: None,
    };
    if let Err(error) = gate::publish(&recorder, &event, &reference).await {
        tracing::warn!(%error, "could not publish an Event on the webhook's Secret");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_gives_back_what_was_written() {
        let hosts = vec!["127.0.0.1".to_string(), "kiln.x.svc".to_string()];
        let m = certs::issue(&hosts, Duration::from_secs(60), SystemTime::now(), None).unwrap();
        assert_eq!(read(&write("kiln-conversion", &m)), Some(m));
        assert_eq!(read(&Secret::default()), None);
    }

    fn created_by(manager: &str, mut secret: Secret) -> Secret {
        secret.metadata.managed_fields = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
                manager: Some(manager.into()),
                operation: Some("Update".into()),
                ..Default::default()
            },
        ]);
        secret
    }

    #[test]
    fn only_a_secret_kilns_field_manager_created_is_kilns() {
        let hosts = vec!["127.0.0.1".to_string()];
        let m = certs::issue(&hosts, Duration::from_secs(60), SystemTime::now(), None).unwrap();
        assert_eq!(
            provenance(&created_by(FIELD_MANAGER, write("s", &m))),
            Ok(())
        );
        // Kiln's labels and annotation copied onto someone's TLS Secret.
        let mut copied = created_by("helm", write("s", &m));
        copied.data = Some(BTreeMap::from([(
            "tls.crt".to_string(),
            ByteString(b"theirs".to_vec()),
        )]));
        let refused = provenance(&copied).unwrap_err();
        assert_eq!(refused, "type kubernetes.io/tls, written by helm");
        // An Opaque Secret of that name.
        let mut opaque = created_by(FIELD_MANAGER, write("s", &m));
        opaque.type_ = Some("Opaque".into());
        assert!(provenance(&opaque).unwrap_err().starts_with("type Opaque"));
        // One an earlier kiln made: kiln's whole material, under its keys.
        let mut earlier = created_by("unknown", write("s", &m));
        earlier.metadata.annotations = None;
        assert_eq!(provenance(&earlier), Ok(()));
    }
}
