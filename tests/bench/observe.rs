//! What the driver sees of the cluster while a contender works, and the
//! stand-in for the kubelet and the Deployment controller.
//!
//! Four watches (as the admin, so the audit log does not count them against
//! the contender) keep counts: primaries that report `Ready=True` for their
//! current generation, and children of each kind that carry a WebApp owner
//! reference. The Deployment watch also records when each Deployment first
//! showed the updated replica count, and marks Deployments ready by patching
//! their status, as a kubelet and the Deployment controller would.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tokio::task::JoinSet;

use crate::workload::{NAMESPACE, UPDATED_REPLICAS};

/// Counts at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Primaries reporting `Ready=True` with `observedGeneration` current.
    pub ready: usize,
    /// Owned Deployments.
    pub deployments: usize,
    /// Owned Services.
    pub services: usize,
    /// Owned ConfigMaps.
    pub config_maps: usize,
    /// Owned Deployments whose `spec.replicas` is [`UPDATED_REPLICAS`].
    pub updated: usize,
    /// Primaries seen at generation 2 or later (after the update).
    pub primaries_changed: usize,
}

impl Progress {
    /// Every child of `n` primaries exists and every primary is ready.
    pub fn converged(&self, n: usize) -> bool {
        self.ready == n && self.deployments == n && self.services == n && self.config_maps == n
    }
}

#[derive(Default)]
struct State {
    ready: HashMap<String, bool>,
    changed: HashSet<String>,
    deployments: HashSet<String>,
    services: HashSet<String>,
    config_maps: HashSet<String>,
    updated_at: HashMap<String, Instant>,
    patched: HashSet<(String, i64)>,
}

/// The running watches. Dropping it stops them.
pub struct Observer {
    state: Arc<Mutex<State>>,
    _tasks: JoinSet<()>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn owned_by_webapp<K: Resource>(obj: &K) -> bool {
    obj.owner_references().iter().any(|o| o.kind == "WebApp")
}

impl Observer {
    /// Starts the watches in the benchmark namespace.
    pub fn start(client: &Client, webapps: &ApiResource) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let mut tasks = JoinSet::new();

        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, webapps);
        let s = state.clone();
        tasks.spawn(each(api, move |w: DynamicObject| {
            let generation = w.metadata.generation;
            let ready = w.data["status"]["observedGeneration"].as_i64() == generation
                && w.data["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
            let mut st = lock(&s);
            if generation.unwrap_or(0) >= 2 {
                st.changed.insert(w.name_any());
            }
            st.ready.insert(w.name_any(), ready);
        }));

        tasks.spawn(count_owned::<Service>(client, &state, |st| {
            &mut st.services
        }));
        tasks.spawn(count_owned::<ConfigMap>(client, &state, |st| {
            &mut st.config_maps
        }));

        let (to_patch, patches) = futures::channel::mpsc::unbounded();
        let s = state.clone();
        tasks.spawn(each(
            Api::namespaced(client.clone(), NAMESPACE),
            move |d: Deployment| {
                if !owned_by_webapp(&d) {
                    return;
                }
                let name = d.name_any();
                let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                let generation = d.metadata.generation.unwrap_or(0);
                let status = d.status.clone().unwrap_or_default();
                let mut st = lock(&s);
                st.deployments.insert(name.clone());
                if i64::from(replicas) == UPDATED_REPLICAS {
                    st.updated_at
                        .entry(name.clone())
                        .or_insert_with(Instant::now);
                }
                let ready = status.ready_replicas.unwrap_or(0) == replicas
                    && status.observed_generation == Some(generation);
                if !ready && st.patched.insert((name.clone(), generation)) {
                    let _ = to_patch.unbounded_send((name, generation, replicas));
                }
            },
        ));
        tasks.spawn(mark_ready(client.clone(), patches));
        Self {
            state,
            _tasks: tasks,
        }
    }

    /// The counts now.
    pub fn progress(&self) -> Progress {
        let st = lock(&self.state);
        Progress {
            ready: st.ready.values().filter(|r| **r).count(),
            deployments: st.deployments.len(),
            services: st.services.len(),
            config_maps: st.config_maps.len(),
            updated: st.updated_at.len(),
            primaries_changed: st.changed.len(),
        }
    }

    /// Polls every 10 ms until `done` holds (returns when it first held) or
    /// `timeout` passes (`None`).
    pub async fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&Progress) -> bool,
    ) -> Option<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            if done(&self.progress()) {
                return Some(Instant::now());
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// When each Deployment first showed the updated replica count.
    pub fn updated_at(&self) -> HashMap<String, Instant> {
        lock(&self.state).updated_at.clone()
    }
}

/// Records the names of the children of kind `K` that have a WebApp owner.
fn count_owned<K>(
    client: &Client,
    state: &Arc<Mutex<State>>,
    names: fn(&mut State) -> &mut HashSet<String>,
) -> impl Future<Output = ()> + use<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    K: Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let state = state.clone();
    each(
        Api::<K>::namespaced(client.clone(), NAMESPACE),
        move |o: K| {
            if owned_by_webapp(&o) {
                names(&mut lock(&state)).insert(o.name_any());
            }
        },
    )
}

/// Runs `f` on every object the watch applies (initial list and changes).
/// Watch errors are retried by the watcher's default backoff.
async fn each<K, F>(api: Api<K>, mut f: F)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
    F: FnMut(K) + Send,
{
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    let mut stream = std::pin::pin!(stream);
    loop {
        match stream.try_next().await {
            Ok(Some(obj)) => f(obj),
            Ok(None) => return,
            Err(e) => tracing::warn!("observer watch: {e}"),
        }
    }
}

/// Sets each Deployment's status to "all replicas ready" for its generation,
/// eight at a time.
async fn mark_ready(
    client: Client,
    patches: futures::channel::mpsc::UnboundedReceiver<(String, i64, i32)>,
) {
    let api: Api<Deployment> = Api::namespaced(client, NAMESPACE);
    patches
        .for_each_concurrent(8, |(name, generation, replicas)| {
            let api = api.clone();
            async move {
                let status = json!({ "status": {
                    "observedGeneration": generation,
                    "replicas": replicas,
                    "updatedReplicas": replicas,
                    "readyReplicas": replicas,
                    "availableReplicas": replicas,
                }});
                for attempt in 0..5u64 {
                    let patched = api
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                        .await;
                    match patched {
                        Ok(_) => return,
                        Err(e) => {
                            tracing::warn!("marking {name} ready: {e}");
                            tokio::time::sleep(Duration::from_millis(200 * (attempt + 1))).await;
                        }
                    }
                }
            }
        })
        .await;
}
