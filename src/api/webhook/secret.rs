//! The webhook's certificates kept in a Secret in kiln's namespace, shared
//! by every replica: created once (the first replica to create it wins; the
//! others read it), replaced when renewal is due by one replica (an update
//! conditioned on the version read; the others read the winner's).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api as KubeApi;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};

use super::certs::{self, Material};

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
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                "kiln".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
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
/// first when absent, for other hosts or due.
pub async fn ensure(
    secrets: &KubeApi<Secret>,
    name: &str,
    hosts: &[String],
    validity: Duration,
) -> Result<Material, SecretError> {
    let api_error = |source| SecretError::Api {
        secret: format!("{}/{name}", secrets.namespace().unwrap_or_default()),
        source,
    };
    for _ in 0..3 {
        let current = secrets.get_opt(name).await.map_err(api_error)?;
        let now = SystemTime::now();
        let held = current.as_ref().and_then(read);
        if let Some(m) = &held
            && !m.due(certs::epoch(now), hosts)
        {
            return Ok(m.clone());
        }
        let previous = held.as_ref().map(|m| m.ca.as_str());
        let fresh = certs::issue(hosts, validity, now, previous)?;
        let mut secret = write(name, &fresh);
        let written = match current {
            None => secrets.create(&PostParams::default(), &secret).await,
            Some(old) => {
                // Conditioned on the version read (a patch carrying it): one
                // replica renews, the others get a conflict.
                secret.metadata.resource_version = old.metadata.resource_version;
                let patch = Patch::Merge(&secret);
                secrets.patch(name, &PatchParams::default(), &patch).await
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
}
