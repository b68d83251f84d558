//! `spec.for.takeExisting: false` (Kyverno's `generateExisting: false`): a
//! rule takes only the primaries created after it was first loaded.
//!
//! "First loaded" is kept where tenants cannot write and where a restart or
//! a reload finds it again: a ConfigMap `kiln-since-<rule>` in kiln's own
//! namespace, created the first time a kiln starts the rule and never
//! changed. Its `metadata.creationTimestamp`, set by the API server, is the
//! instant; a primary's `creationTimestamp` comes from the same clock, so
//! no clock of kiln's is compared with the server's. Both have whole
//! seconds: before it makes the record kiln lists the primaries, and writes
//! in the record (`sameSecond`) the uids of those created in its second,
//! which are existing; the others of that second are new. A restart, a
//! reload or an edit of the rule reads the same record; deleting it makes
//! the rule's start a new first load (it then takes fewer primaries, never
//! more). Until the record is read the rule does not start (never act on
//! missing information).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, PostParams};
use tokio::sync::watch;

use super::shared::Shared;
use crate::engine::decision::existing::Since;
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
    /// The primary kind could not be resolved to list it.
    #[error("listing the primaries before the first load")]
    Kind(#[from] crate::engine::cache::kinds::KindError),
    /// Listing the primaries before the first load failed.
    #[error("listing the primaries before the first load")]
    List(#[source] kube::Error),
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

/// The record's key listing the primaries created in its second before it.
const SAME_SECOND: &str = "sameSecond";

/// When `rule` was first loaded: the record's creation time, and which
/// primaries created in that second existed before it. Creating the record
/// now if there is none, the primaries are listed first (`existing`).
pub(super) async fn first_loaded<F>(
    client: &kube::Client,
    namespace: &str,
    rule: &str,
    existing: F,
) -> Result<Since, SinceError>
where
    F: AsyncFnOnce() -> Result<Vec<(String, Timestamp)>, SinceError>,
{
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let name = record_name(rule);
    let failed = |source| SinceError::Api {
        namespace: namespace.to_string(),
        name: name.clone(),
        source,
    };
    let cm = match api.get_opt(&name).await.map_err(failed)? {
        Some(cm) => cm,
        None => {
            // Listed before the record is made: of the primaries created in
            // its second, these existed before it.
            let before = existing().await?;
            let record = record(namespace, rule);
            match gate::create(&api, &PostParams::default(), &record, Warrant::OwnState).await {
                Ok(cm) => same_second(&api, cm, &before).await.map_err(failed)?,
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    api.get(&name).await.map_err(failed)?
                }
                Err(e) => return Err(failed(e)),
            }
        }
    };
    let at = cm
        .metadata
        .creation_timestamp
        .map(|t| t.0)
        .ok_or_else(|| SinceError::NoTimestamp(name.clone()))?;
    let same_second = cm.data.as_ref().and_then(|d| d.get(SAME_SECOND)).map(|v| {
        v.split(',')
            .filter(|u| !u.is_empty())
            .map(str::to_string)
            .collect()
    });
    Ok(Since { at, same_second })
}

/// Records in the record just made the uids of `before` created in its
/// second (a record without them counts that whole second as existing).
async fn same_second(
    api: &Api<ConfigMap>,
    mut cm: ConfigMap,
    before: &[(String, Timestamp)],
) -> Result<ConfigMap, kube::Error> {
    let Some(at) = cm.metadata.creation_timestamp.as_ref().map(|t| t.0) else {
        return Ok(cm);
    };
    let uids: Vec<&str> = before
        .iter()
        .filter(|(_, created)| *created == at)
        .map(|(uid, _)| uid.as_str())
        .collect();
    cm.data
        .get_or_insert_with(BTreeMap::new)
        .insert(SAME_SECOND.to_string(), uids.join(","));
    let name = cm.metadata.name.clone().unwrap_or_default();
    gate::replace(api, &name, &PostParams::default(), &cm, Warrant::OwnState).await
}

/// The instant the rule takes primaries from (`None`: every primary),
/// waiting while the record cannot be read; `None` when stopped meanwhile.
pub(super) async fn resolve(
    rule: &Rule,
    shared: &Shared,
    stop: &mut watch::Receiver<bool>,
) -> Option<Option<Since>> {
    if rule.primary.take_existing {
        return Some(None);
    }
    let namespace = &shared.options.state_namespace;
    loop {
        let existing = async || primaries(rule, shared).await;
        match first_loaded(&shared.client, namespace, &rule.name, existing).await {
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

/// Every primary of the rule's kind kiln watches: uid and creation time.
async fn primaries(rule: &Rule, shared: &Shared) -> Result<Vec<(String, Timestamp)>, SinceError> {
    let kind = shared.kinds.resolve(&rule.primary.gvk).await?;
    let client = shared.client.clone();
    let apis: Vec<Api<DynamicObject>> = match shared.options.namespaces.as_slice() {
        namespaces if kind.namespaced && !namespaces.is_empty() => namespaces
            .iter()
            .map(|ns| Api::namespaced_with(client.clone(), ns, &kind.ar))
            .collect(),
        _ => vec![Api::all_with(client, &kind.ar)],
    };
    let mut out = Vec::new();
    for api in apis {
        let listed = api.list_metadata(&ListParams::default()).await;
        for obj in listed.map_err(SinceError::List)? {
            if let (Some(uid), Some(created)) = (obj.metadata.uid, obj.metadata.creation_timestamp)
            {
                out.push((uid, created.0));
            }
        }
    }
    Ok(out)
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
