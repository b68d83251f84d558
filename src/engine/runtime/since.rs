//! `spec.for.takeExisting: false` (Kyverno's `generateExisting: false`): a
//! rule takes only the primaries created after it was first loaded.
//!
//! "First loaded" is kept where tenants cannot write and where a restart or
//! a reload finds it again: a ConfigMap `kiln-since-<rule>` in kiln's own
//! namespace, created the first time a kiln starts the rule and never
//! changed. Its `metadata.creationTimestamp`, set by the API server, is the
//! instant; a primary's `creationTimestamp` comes from the same clock, so
//! no clock of kiln's is compared with the server's. Both have whole
//! seconds: a primary created in the same second as the record counts as
//! existing (kiln never takes an older object by mistake). A restart, a
//! reload or an edit of the rule reads the same record; deleting it makes
//! the rule's start a new first load (it then takes fewer primaries, never
//! more). Until the record is read the rule does not start (never act on
//! missing information).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;

use super::shared::Shared;
use crate::gate::{self, Warrant};
use crate::rules::Rule;

/// Why the record of a rule's first load could not be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum SinceError {
    /// The API server refused or failed the request.
    #[error("reading or creating ConfigMap {namespace}/{name}: {source}")]
    Api {
        /// kiln's namespace.
        namespace: String,
        /// The record's name.
        name: String,
        /// The answer.
        source: kube::Error,
    },
    /// The record has no creation time (never so from an API server).
    #[error("ConfigMap {0} has no creationTimestamp")]
    NoTimestamp(String),
}

/// The name of the record of `rule`'s first load.
pub(super) fn record_name(rule: &str) -> String {
    format!("kiln-since-{rule}")
}

/// The record of a rule's first load, as kiln creates it.
fn record(namespace: &str, rule: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(record_name(rule)),
            namespace: Some(namespace.to_string()),
            labels: Some(BTreeMap::from([
                (crate::render::RULE_LABEL.to_string(), rule.to_string()),
                (
                    crate::render::MANAGED_BY_LABEL.to_string(),
                    crate::render::MANAGED_BY.to_string(),
                ),
            ])),
            annotations: Some(BTreeMap::from([(
                "kiln.dev/description".to_string(),
                "when rule first ran (this object's creationTimestamp): with spec.for.takeExisting: false it takes only primaries created later".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("rule".to_string(), rule.to_string())])),
        ..ConfigMap::default()
    }
}

/// When `rule` was first loaded: the record's creation time, creating the
/// record now if there is none.
pub(super) async fn first_loaded(
    client: &kube::Client,
    namespace: &str,
    rule: &str,
) -> Result<Timestamp, SinceError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let name = record_name(rule);
    let failed = |source| SinceError::Api {
        namespace: namespace.to_string(),
        name: name.clone(),
        source,
    };
    let record = record(namespace, rule);
    let cm = match gate::create(&api, &PostParams::default(), &record, Warrant::OwnState).await {
        Ok(cm) => cm,
        Err(kube::Error::Api(s)) if s.code == 409 => api.get(&name).await.map_err(failed)?,
        Err(e) => return Err(failed(e)),
    };
    cm.metadata
        .creation_timestamp
        .map(|t| t.0)
        .ok_or_else(|| SinceError::NoTimestamp(name.clone()))
}

/// The instant the rule takes primaries from (`None`: every primary),
/// waiting while the record cannot be read; `None` when stopped meanwhile.
pub(super) async fn resolve(
    rule: &Rule,
    shared: &Shared,
    stop: &mut watch::Receiver<bool>,
) -> Option<Option<Timestamp>> {
    if rule.primary.take_existing {
        return Some(None);
    }
    let namespace = &shared.options.state_namespace;
    loop {
        match first_loaded(&shared.client, namespace, &rule.name).await {
            Ok(at) => return Some(Some(at)),
            Err(error) => {
                tracing::warn!(rule = %rule.name, %error, "the rule takes only primaries created after its first load, and that instant cannot be read yet: the rule waits");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(shared.options.kind_retry) => {}
            _ = stop.changed() => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_is_named_after_the_rule_and_marked() {
        let cm = record("kiln-system", "netpol");
        assert_eq!(cm.metadata.name.as_deref(), Some("kiln-since-netpol"));
        assert_eq!(cm.metadata.labels.unwrap()["kiln.dev/rule"], "netpol");
    }
}
