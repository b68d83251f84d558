//! The ceiling: the same writes a controller makes, issued directly with the
//! same concurrency. One LIST for the primaries (their UIDs and generations)
//! and one GET of the Secret, then per primary the writes a controller makes:
//! the children, the status "not ready" and the status "ready" (`converge`),
//! or the Deployment and the two statuses (`update`). No watches, no cache,
//! no waiting for the Deployment to become ready: what the API server itself
//! can take of this workload on this machine.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::Value;

use crate::cluster::webapps;
use crate::procstat;
use crate::workload::{NAMESPACE, Primary, SECRET};

/// Which writes to issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Phase {
    /// Children and status of every primary.
    Converge,
    /// The Deployment and status of every primary (after a spec change).
    Update,
}

/// Issues the writes, then prints this process's CPU seconds and peak RSS
/// as JSON on stdout for the driver.
pub async fn run(phase: Phase, concurrency: usize, manager: &str) -> anyhow::Result<()> {
    let client = Client::try_default().await?;
    let primaries: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &webapps());
    let list = primaries.list(&ListParams::default()).await?;
    let secret = Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .get(SECRET)
        .await?;
    let secret_data = serde_json::to_value(&secret.data)?;
    let objects: Vec<Value> = list
        .items
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    let params = PatchParams::apply(manager).force();
    let now = now();
    futures::stream::iter(&objects)
        .map(|object| {
            let primary = Primary {
                object,
                secret_data: &secret_data,
                manager,
            };
            let (client, params, primaries, now) = (&client, &params, &primaries, &now);
            async move {
                let name = |v: &Value| {
                    v["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                };
                let deployment = primary.deployment();
                if phase == Phase::Converge {
                    let cm = primary.config_map();
                    Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
                        .patch(&name(&cm), params, &Patch::Apply(&cm))
                        .await?;
                }
                Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
                    .patch(&name(&deployment), params, &Patch::Apply(&deployment))
                    .await?;
                if phase == Phase::Converge {
                    let svc = primary.service();
                    Api::<Service>::namespaced(client.clone(), NAMESPACE)
                        .patch(&name(&svc), params, &Patch::Apply(&svc))
                        .await?;
                }
                for ready in [false, true] {
                    let status = primary.status(ready, now);
                    primaries
                        .patch_status(&name(object), params, &Patch::Apply(&status))
                        .await?;
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<()>()
        .await?;
    let sample = procstat::sample(None).unwrap_or_default();
    println!(
        "{}",
        serde_json::json!({"cpu_seconds": sample.cpu_seconds, "peak_rss_bytes": sample.peak_rss_bytes})
    );
    Ok(())
}

/// The current time as the API server writes it (`2026-11-21T10:00:00Z`).
fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
