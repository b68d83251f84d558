//! Discovery: each GVK resolved once to its resource (plural, scope, whether
//! it has a status subresource) and cached until it stops being served.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::Client;
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{self, Scope};

use crate::rules::Gvk;

/// A kind the API server serves.
#[derive(Debug, Clone)]
pub struct Kind {
    /// Group, version, kind.
    pub gvk: Gvk,
    /// Plural and friends, from discovery.
    pub ar: ApiResource,
    /// Namespaced (true) or cluster-scoped.
    pub namespaced: bool,
    /// Whether `/status` is a subresource.
    pub has_status: bool,
}

/// Why a kind could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum KindError {
    /// The API server does not serve it (a CRD not installed yet, say).
    #[error("{0} is not served by the API server (is its CRD installed?)")]
    NotServed(Gvk),
    /// Discovery itself failed.
    #[error("discovery of {gvk} failed: {source}")]
    Discovery {
        /// The kind.
        gvk: Gvk,
        /// The error.
        #[source]
        source: kube::Error,
    },
}

/// The discovery cache.
#[derive(Clone)]
pub struct Kinds {
    client: Client,
    cache: Arc<Mutex<HashMap<Gvk, Arc<Kind>>>>,
}

impl Kinds {
    /// An empty cache.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: Arc::default(),
        }
    }

    /// Resolves `gvk` (one discovery request the first time).
    pub async fn resolve(&self, gvk: &Gvk) -> Result<Arc<Kind>, KindError> {
        if let Some(kind) = self.lock().get(gvk) {
            return Ok(kind.clone());
        }
        let query = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
        let (ar, caps) = match discovery::pinned_kind(&self.client, &query).await {
            Ok(found) => found,
            Err(kube::Error::Discovery(_)) => return Err(KindError::NotServed(gvk.clone())),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Err(KindError::NotServed(gvk.clone()));
            }
            Err(source) => {
                return Err(KindError::Discovery {
                    gvk: gvk.clone(),
                    source,
                });
            }
        };
        let kind = Arc::new(Kind {
            gvk: gvk.clone(),
            namespaced: caps.scope == Scope::Namespaced,
            has_status: caps
                .subresources
                .iter()
                .any(|(sr, _)| sr.plural == "status"),
            ar,
        });
        self.lock().insert(gvk.clone(), kind.clone());
        Ok(kind)
    }

    /// Forgets `gvk`, so the next resolve asks the server again.
    pub fn forget(&self, gvk: &Gvk) {
        self.lock().remove(gvk);
    }

    /// Whether `gvk` is known to be namespaced (`None` when not resolved).
    pub fn namespaced(&self, gvk: &Gvk) -> Option<bool> {
        self.lock().get(gvk).map(|k| k.namespaced)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Gvk, Arc<Kind>>> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
