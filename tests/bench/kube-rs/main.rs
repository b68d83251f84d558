//! The kube-rs contender of the benchmark (`tests/bench/README.md`): a WebApp
//! controller written by hand, the way the kube-rs docs and examples teach it.
//!
//! A derived `WebApp` type, typed k8s-openapi children, one `Controller` that
//! owns the Deployment, Service and ConfigMap of each WebApp and watches the
//! Secrets they name, server-side apply of every child on every reconcile,
//! and a status written only when it changes. Secrets are read from a
//! reflector cache, never with a GET; the Deployment's readiness comes from
//! the object its apply returns.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, Container, ContainerPort, EnvFromSource, EnvVar, EnvVarSource,
    PodSpec, PodTemplateSpec, Secret, SecretKeySelector, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, CustomResource, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::common::{Condition, Contract, INITIAL_BACKOFF, MANAGED_BY, MAX_BACKOFF, set_condition};

/// Requeue delay while a WebApp waits for its Secret or its Deployment.
const WAITING: Duration = Duration::from_secs(5);

/// A container image served behind a Service, configured from a ConfigMap,
/// with its credentials in a Secret the user provides.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "demo.kiln.dev",
    version = "v1",
    kind = "WebApp",
    namespaced,
    status = "WebAppStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct WebAppSpec {
    /// Container image to run.
    pub image: String,
    /// Desired pod count (the CRD defaults it to 1).
    #[serde(default = "one")]
    pub replicas: i32,
    /// Container port (the CRD defaults it to 8080).
    #[serde(default = "http_alt")]
    pub port: i32,
    /// Secret holding a `password` key.
    pub secret_name: String,
    /// Settings rendered into the app's ConfigMap.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

fn one() -> i32 {
    1
}

fn http_alt() -> i32 {
    8080
}

/// What the controller last observed of a WebApp.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebAppStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    observed_generation: Option<i64>,
    #[serde(default)]
    conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ready_replicas: Option<i32>,
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("serializing: {0}")]
    Json(#[from] serde_json::Error),
    #[error("WebApp has no {0}")]
    Incomplete(&'static str),
}

/// What every reconcile shares.
struct Ctx {
    webapps: Api<WebApp>,
    deployments: Api<Deployment>,
    services: Api<Service>,
    configmaps: Api<ConfigMap>,
    secrets: Store<Secret>,
    apply: PatchParams,
    /// The `app.kubernetes.io/managed-by` label value: the field manager.
    manager: String,
    resync: Duration,
    /// Consecutive failures per WebApp, for the error backoff.
    failures: Mutex<HashMap<ObjectRef<WebApp>, u32>>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// Writes `status` to the status subresource unless the WebApp already has it.
async fn write_status(webapp: &WebApp, status: WebAppStatus, ctx: &Ctx) -> Result<(), Error> {
    if webapp.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let patch = json!({
        "apiVersion": WebApp::api_version(&()),
        "kind": WebApp::kind(&()),
        "status": status,
    });
    ctx.webapps
        .patch_status(&webapp.name_any(), &ctx.apply, &Patch::Apply(patch))
        .await?;
    Ok(())
}

async fn reconcile(webapp: Arc<WebApp>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = webapp.name_any();
    let ns = webapp.namespace().ok_or(Error::Incomplete("namespace"))?;
    let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut status = webapp.status.clone().unwrap_or_default();
    status.observed_generation = webapp.metadata.generation;

    // 1. The Secret, from the cache.
    let secret_ref = ObjectRef::new(&webapp.spec.secret_name).within(&ns);
    let Some(secret) = ctx.secrets.get(&secret_ref) else {
        set_condition(
            &mut status.conditions,
            "Ready",
            false,
            "DependencyMissing",
            &now,
        );
        write_status(&webapp, status, &ctx).await?;
        return Ok(Action::requeue(WAITING));
    };

    // 2. The children, each applied with an owner reference and our label.
    let owner = OwnerReference {
        block_owner_deletion: Some(true),
        ..webapp
            .controller_owner_ref(&())
            .ok_or(Error::Incomplete("uid"))?
    };
    let meta = |name: String, labels: BTreeMap<String, String>| ObjectMeta {
        name: Some(name),
        namespace: Some(ns.clone()),
        labels: Some(labels),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    };
    let managed = BTreeMap::from([(MANAGED_BY.to_string(), ctx.manager.clone())]);
    let selector = BTreeMap::from([("app.kubernetes.io/name".to_string(), name.clone())]);
    let mut labels = managed.clone();
    labels.extend(selector.clone());
    let config_name = format!("{name}-config");

    let configmap = ConfigMap {
        metadata: meta(config_name.clone(), managed.clone()),
        data: Some(webapp.spec.config.clone()),
        ..ConfigMap::default()
    };
    ctx.configmaps
        .patch(&config_name, &ctx.apply, &Patch::Apply(&configmap))
        .await?;

    let annotations = BTreeMap::from([
        (
            "kiln.dev/config-hash".to_string(),
            sha256_hex(serde_json::to_string(&webapp.spec.config)?.as_bytes()),
        ),
        (
            "kiln.dev/credentials-hash".to_string(),
            sha256_hex(serde_json::to_string(&secret.data)?.as_bytes()),
        ),
    ]);
    let container = Container {
        name: "app".into(),
        image: Some(webapp.spec.image.clone()),
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: webapp.spec.port,
            ..ContainerPort::default()
        }]),
        env_from: Some(vec![EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: config_name,
                ..ConfigMapEnvSource::default()
            }),
            ..EnvFromSource::default()
        }]),
        env: Some(vec![EnvVar {
            name: "PASSWORD".into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: webapp.spec.secret_name.clone(),
                    key: "password".into(),
                    ..SecretKeySelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }]),
        ..Container::default()
    };
    let deployment = Deployment {
        metadata: meta(name.clone(), labels),
        spec: Some(DeploymentSpec {
            replicas: Some(webapp.spec.replicas),
            selector: LabelSelector {
                match_labels: Some(selector.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(selector.clone()),
                    annotations: Some(annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    };
    let applied = ctx
        .deployments
        .patch(&name, &ctx.apply, &Patch::Apply(&deployment))
        .await?;

    let service = Service {
        metadata: meta(name.clone(), managed),
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                target_port: Some(IntOrString::String("http".into())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    ctx.services
        .patch(&name, &ctx.apply, &Patch::Apply(&service))
        .await?;

    // 3. Readiness, from the Deployment the apply returned.
    let want = applied.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let have = applied
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let ready = have >= want;

    // 4. Status, written only when it changed.
    let reason = if ready {
        "AllChildrenReady"
    } else {
        "ChildrenNotReady"
    };
    set_condition(&mut status.conditions, "Ready", ready, reason, &now);
    set_condition(&mut status.conditions, "Reconciled", true, "Applied", &now);
    status.url = Some(format!("http://{name}.{ns}.svc"));
    status.ready_replicas = Some(have);
    write_status(&webapp, status, &ctx).await?;

    // 5. Requeue: soon while waiting, after the resync period once ready.
    ctx.failures().remove(&ObjectRef::from_obj(webapp.as_ref()));
    Ok(Action::requeue(if ready { ctx.resync } else { WAITING }))
}

/// Retries a failed WebApp after 1 s, doubling per consecutive failure up to 5 min.
fn error_policy(webapp: Arc<WebApp>, error: &Error, ctx: Arc<Ctx>) -> Action {
    tracing::warn!(webapp = %webapp.name_any(), %error, "reconcile failed");
    let mut failures = ctx.failures();
    let n = failures
        .entry(ObjectRef::from_obj(webapp.as_ref()))
        .or_insert(0);
    let delay = INITIAL_BACKOFF.saturating_mul(1 << (*n).min(16));
    *n += 1;
    Action::requeue(delay.min(MAX_BACKOFF))
}

impl Ctx {
    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<WebApp>, u32>> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::init_tracing();
    let args = Contract::parse();
    let client = Client::try_default().await?;
    let ns = args.namespace.as_str();
    let webapps = Api::<WebApp>::namespaced(client.clone(), ns);
    let secrets = Api::<Secret>::namespaced(client.clone(), ns);

    // The Secret cache reconcile reads from, filled before the first reconcile.
    let (secret_store, writer) = reflector::store();
    let secret_reflector = watcher(secrets.clone(), watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .for_each(|_| futures::future::ready(()));
    tokio::spawn(secret_reflector);
    secret_store.wait_until_ready().await?;

    let ctx = Arc::new(Ctx {
        webapps: webapps.clone(),
        deployments: Api::namespaced(client.clone(), ns),
        services: Api::namespaced(client.clone(), ns),
        configmaps: Api::namespaced(client.clone(), ns),
        secrets: secret_store,
        apply: PatchParams::apply(&args.field_manager).force(),
        manager: args.field_manager.clone(),
        resync: Duration::from_secs(args.resync_seconds),
        failures: Mutex::default(),
    });

    let controller = Controller::new(webapps, watcher::Config::default());
    let cached_webapps = controller.store();
    controller
        .owns(ctx.deployments.clone(), watcher::Config::default())
        .owns(ctx.services.clone(), watcher::Config::default())
        .owns(ctx.configmaps.clone(), watcher::Config::default())
        .watches(
            secrets,
            watcher::Config::default(),
            move |secret: Secret| {
                // Every WebApp in the Secret's namespace that names it.
                let (name, ns) = (secret.name_any(), secret.namespace());
                cached_webapps
                    .state()
                    .into_iter()
                    .filter(|w| w.spec.secret_name == name && w.namespace() == ns)
                    .map(|w| ObjectRef::from_obj(w.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .with_config(controller::Config::default().concurrency(args.concurrency))
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "controller");
            }
        })
        .await;
    Ok(())
}
