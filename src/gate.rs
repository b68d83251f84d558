//! The write gate: every create, apply, patch, update and delete kiln sends
//! to the API server goes through this module, with the reason kiln may
//! write that object (a [`Warrant`]). The decision that the reason holds is
//! made before, where the facts are (`engine::placed::believed` for a
//! child, the CRD's provenance in `api::install`, the Secret's in
//! `api::webhook::secret`); the gate makes every write name it, so a write
//! with no reason cannot be written, and `tests/shape.rs` proves no other
//! module sends a write verb.

use std::fmt::Debug;

use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, Recorder};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why kiln may write an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warrant {
    /// A child kiln created where its rule places it: its mark, at the place
    /// the rule renders from the primary's identity (`engine::placed`), or
    /// a name no one holds yet. Covers its apply, its owner reference and
    /// its prune.
    Child,
    /// An object the rule author named literally: adopted (`adopt`,
    /// `adoptNames`) or decorated (`decorate`).
    Named,
    /// A primary the rule selects: its status and kiln's finalizer on it.
    Primary,
    /// A CustomResourceDefinition kiln created (its provenance recorded at
    /// creation), or one the rule author adopts by name.
    Crd,
    /// kiln's own state in its own namespace: its Leases, its webhook
    /// Secret, its records in ConfigMaps.
    OwnState,
    /// The status of a `Rule` resource kiln runs.
    RuleStatus,
    /// A question kiln asks the API server (an access review): it creates
    /// nothing that is stored.
    Review,
    /// An Event kiln reports on an object.
    Event,
}

impl Warrant {
    /// A short name, for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Child => "child",
            Self::Named => "named",
            Self::Primary => "primary",
            Self::Crd => "crd",
            Self::OwnState => "own-state",
            Self::RuleStatus => "rule-status",
            Self::Review => "review",
            Self::Event => "event",
        }
    }
}

/// `api.patch`, for `why`.
pub async fn patch<K, P>(
    api: &Api<K>,
    name: &str,
    pp: &PatchParams,
    patch: &Patch<P>,
    why: Warrant,
) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + Debug,
    P: Serialize + Debug,
{
    tracing::trace!(name, why = why.as_str(), "patch");
    api.patch(name, pp, patch).await
}

/// `api.patch_status`, for `why`.
pub async fn patch_status<K, P>(
    api: &Api<K>,
    name: &str,
    pp: &PatchParams,
    patch: &Patch<P>,
    why: Warrant,
) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + Debug,
    P: Serialize + Debug,
{
    tracing::trace!(name, why = why.as_str(), "patch status");
    api.patch_status(name, pp, patch).await
}

/// `api.create`, for `why`.
pub async fn create<K>(api: &Api<K>, pp: &PostParams, data: &K, why: Warrant) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + Serialize + Debug,
{
    tracing::trace!(why = why.as_str(), "create");
    api.create(pp, data).await
}

/// `api.replace` (an update conditioned on the resourceVersion `data`
/// carries), for `why`.
pub async fn replace<K>(
    api: &Api<K>,
    name: &str,
    pp: &PostParams,
    data: &K,
    why: Warrant,
) -> kube::Result<K>
where
    K: Clone + DeserializeOwned + Serialize + Debug,
{
    tracing::trace!(name, why = why.as_str(), "replace");
    api.replace(name, pp, data).await
}

/// `api.delete`, for `why`: done once the API server took the deletion
/// (the object is gone, or going once its finalizers are released).
pub async fn delete<K>(
    api: &Api<K>,
    name: &str,
    dp: &DeleteParams,
    why: Warrant,
) -> kube::Result<()>
where
    K: Clone + DeserializeOwned + Debug,
{
    tracing::trace!(name, why = why.as_str(), "delete");
    api.delete(name, dp).await.map(drop)
}

/// Publishes an Event on the object `reference` names.
pub async fn publish(
    recorder: &Recorder,
    event: &Event,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
) -> Result<(), kube::Error> {
    recorder.publish(event, reference).await
}
