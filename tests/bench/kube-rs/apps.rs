//! The rules axis (`tests/bench/README.md`, "The rules axis"): what a team
//! would write instead of R kiln rules over the kinds `App0` … `App(K-1)`:
//! one `Controller` per kind, in one process, whose reconcile does what the
//! rules on that kind do. Rule `i` takes the primaries of kind `App(i mod K)`
//! labelled `bench.kiln.dev/rule: r<i>`, applies their ConfigMap
//! `<name>-config` (`data` = `spec.config`, labelled with the rule and its
//! generation) and writes their status (`observedGeneration`, `Ready` and
//! `Reconciled`, `config<i>`). A rule's generation is configuration: changing
//! one means restarting the process with new flags, as a redeploy would.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::watcher;
use kube::{Client, CustomResource, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::common::{Condition, INITIAL_BACKOFF, MANAGED_BY, MAX_BACKOFF, set_condition};

const RULE_LABEL: &str = "bench.kiln.dev/rule";

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("App has no {0}")]
    Incomplete(&'static str),
}
const GEN_LABEL: &str = "bench.kiln.dev/gen";

/// What the rules write: `observedGeneration`, the conditions and one
/// `config<i>` field per rule (only one rule selects a primary).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    observed_generation: Option<i64>,
    #[serde(default)]
    conditions: Vec<Condition>,
    #[serde(flatten)]
    fields: BTreeMap<String, serde_json::Value>,
}

/// The ten kinds: the WebApp schema under other names, one derived type each
/// as a team owning ten CRDs would have.
macro_rules! app_kinds {
    ($($spec:ident $kind:tt),*) => {$(
        #[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
        #[kube(group = "bench.kiln.dev", version = "v1", kind = $kind, namespaced, status = "AppStatus")]
        #[serde(rename_all = "camelCase")]
        pub struct $spec {
            pub image: String,
            #[serde(default)]
            pub replicas: Option<i32>,
            #[serde(default)]
            pub port: Option<i32>,
            pub secret_name: String,
            #[serde(default)]
            pub config: BTreeMap<String, String>,
        }
    )*};
}

app_kinds!(
    App0Spec "App0", App1Spec "App1", App2Spec "App2", App3Spec "App3", App4Spec "App4",
    App5Spec "App5", App6Spec "App6", App7Spec "App7", App8Spec "App8", App9Spec "App9"
);

/// What reconcile reads of a primary, whatever its kind.
pub trait App:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Serialize
    + Send
    + Sync
    + 'static
{
    fn config(&self) -> &BTreeMap<String, String>;
    fn app_status(&self) -> Option<&AppStatus>;
}

macro_rules! impl_app {
    ($($kind:ident),*) => {$(
        impl App for $kind {
            fn config(&self) -> &BTreeMap<String, String> {
                &self.spec.config
            }
            fn app_status(&self) -> Option<&AppStatus> {
                self.status.as_ref()
            }
        }
    )*};
}

impl_app!(App0, App1, App2, App3, App4, App5, App6, App7, App8, App9);

/// The rules axis's job, from the flags.
pub struct Job {
    pub rules: usize,
    pub kinds: usize,
    pub generation: String,
    pub generation_of: HashMap<usize, String>,
    pub manager: String,
    pub resync: Duration,
    pub concurrency: u16,
}

impl Job {
    fn generation(&self, i: usize) -> &str {
        self.generation_of.get(&i).unwrap_or(&self.generation)
    }
}

/// Reads `r000=e1,r007=e2`.
pub fn parse_generations(s: &str) -> anyhow::Result<HashMap<usize, String>> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let parsed = pair
                .split_once('=')
                .and_then(|(name, g)| Some((name.strip_prefix('r')?.parse().ok()?, g.to_string())));
            parsed.ok_or_else(|| anyhow::anyhow!("--generation-of: {pair:?} is not rNNN=GEN"))
        })
        .collect()
}

struct Ctx<K: App> {
    apps: Api<K>,
    configmaps: Api<ConfigMap>,
    apply: PatchParams,
    job: Arc<Job>,
    /// This kind's place among the kinds (rule `i` is on kind `i mod kinds`).
    index: usize,
    failures: std::sync::Mutex<HashMap<String, u32>>,
}

impl<K: App> Ctx<K> {
    /// The rule of this kind selecting `app`, if any.
    fn rule(&self, app: &K) -> Option<usize> {
        let name = app.labels().get(RULE_LABEL)?;
        let i: usize = name.strip_prefix('r')?.parse().ok()?;
        (i < self.job.rules && i % self.job.kinds == self.index).then_some(i)
    }
}

async fn reconcile<K: App>(app: Arc<K>, ctx: Arc<Ctx<K>>) -> Result<Action, Error> {
    let Some(i) = ctx.rule(&app) else {
        return Ok(Action::await_change());
    };
    let name = app.name_any();
    let rule = format!("r{i:03}");
    let owner = OwnerReference {
        block_owner_deletion: Some(true),
        ..app
            .controller_owner_ref(&())
            .ok_or(Error::Incomplete("uid"))?
    };
    let config_name = format!("{name}-config");
    let configmap = ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_name.clone()),
            namespace: app.namespace(),
            labels: Some(BTreeMap::from([
                (MANAGED_BY.to_string(), ctx.job.manager.clone()),
                (RULE_LABEL.to_string(), rule),
                (GEN_LABEL.to_string(), ctx.job.generation(i).to_string()),
            ])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(app.config().clone()),
        ..ConfigMap::default()
    };
    ctx.configmaps
        .patch(&config_name, &ctx.apply, &Patch::Apply(&configmap))
        .await?;

    let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut status = app.app_status().cloned().unwrap_or_default();
    status.observed_generation = app.meta().generation;
    set_condition(
        &mut status.conditions,
        "Ready",
        true,
        "AllChildrenReady",
        &now,
    );
    set_condition(&mut status.conditions, "Reconciled", true, "Applied", &now);
    status
        .fields
        .insert(format!("config{i:03}"), json!(config_name));
    if app.app_status() != Some(&status) {
        let patch = json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": status,
        });
        ctx.apps
            .patch_status(&name, &ctx.apply, &Patch::Apply(patch))
            .await?;
    }
    ctx.failures().remove(&name);
    Ok(Action::requeue(ctx.job.resync))
}

fn error_policy<K: App>(app: Arc<K>, error: &Error, ctx: Arc<Ctx<K>>) -> Action {
    tracing::warn!(app = %app.name_any(), %error, "reconcile failed");
    let mut failures = ctx.failures();
    let n = failures.entry(app.name_any()).or_insert(0);
    let delay = INITIAL_BACKOFF.saturating_mul(1 << (*n).min(16));
    *n += 1;
    Action::requeue(delay.min(MAX_BACKOFF))
}

impl<K: App> Ctx<K> {
    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The controller of kind `K`, the `index`th: runs until a signal.
fn controller<K: App>(
    client: Client,
    ns: &str,
    job: Arc<Job>,
    index: usize,
) -> BoxFuture<'static, ()> {
    let apps = Api::<K>::namespaced(client.clone(), ns);
    let ctx = Arc::new(Ctx {
        apps: apps.clone(),
        configmaps: Api::namespaced(client, ns),
        apply: PatchParams::apply(&job.manager).force(),
        index,
        failures: std::sync::Mutex::default(),
        job: job.clone(),
    });
    Controller::new(apps, watcher::Config::default())
        .owns(ctx.configmaps.clone(), watcher::Config::default())
        .with_config(controller::Config::default().concurrency(job.concurrency))
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "controller");
            }
        })
        .boxed()
}

/// Starts the controller of one kind.
type Start = fn(Client, &str, Arc<Job>, usize) -> BoxFuture<'static, ()>;

/// Runs one controller per kind until a signal.
pub async fn run(client: Client, ns: &str, job: Job) {
    let job = Arc::new(job);
    let kinds: [Start; 10] = [
        controller::<App0>,
        controller::<App1>,
        controller::<App2>,
        controller::<App3>,
        controller::<App4>,
        controller::<App5>,
        controller::<App6>,
        controller::<App7>,
        controller::<App8>,
        controller::<App9>,
    ];
    let running = kinds
        .iter()
        .take(job.kinds)
        .enumerate()
        .map(|(i, start)| start(client.clone(), ns, job.clone(), i));
    futures::future::join_all(running).await;
}
