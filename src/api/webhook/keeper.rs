//! Keeps the webhook's certificates and the CRDs pointing at it: on every
//! replica, each period (and when the rules change) it reads the Secret
//! (making or renewing the certificates when due), makes sure every
//! multi-version CRD the rules define has the `spec.conversion` of this
//! bundle, and only then serves a new certificate, so the API server
//! already trusts its CA. The first certificate is served before any CRD
//! is pointed at the webhook (and before the installer may create one
//! with `spec.conversion`), so the API server never reaches a listener
//! without one. Only CRDs this kiln created (or adopted) are pointed
//! ([`crate::api::provenance`]): a CRD of that name that is someone else's
//! is left as it is, whatever the rules say.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api as KubeApi, Client};
use serde_json::{Value, json};

use super::certs::Material;
use super::listen::{self, Webhook};
use super::server::{self, Certificate};
use super::{RulesLookup, Settings, secret, set_conversion};
use crate::api::provenance::{Whose, whose};
use crate::gate::{self, Warrant};
use crate::metrics::Metrics;
use crate::reload::CurrentRules;

/// The field manager kiln sets a CRD's `spec.conversion` with.
pub const FIELD_MANAGER: &str = "kiln-conversion";

/// How long the API server is given to take a new CA bundle before this
/// replica serves a certificate only the new CA signed.
const TAKE_UP: Duration = Duration::from_secs(2);

/// How soon a CRD not created or not pointed at the webhook yet is looked at again.
const UNSETTLED: Duration = Duration::from_secs(1);

/// Serves conversion on `settings.addr` while a rule needs it (each review
/// counted in `metrics`) and keeps its certificates and the rules' CRDs in
/// the background until the webhook is drained; returns the webhook, to
/// drain on shutdown.
pub async fn start(
    client: Client,
    settings: Settings,
    rules: CurrentRules,
    metrics: Arc<Metrics>,
) -> std::io::Result<Webhook> {
    let cert = Arc::new(Certificate::default());
    let lookup = Arc::new(RulesLookup(rules.clone()));
    let bounds = server::Bounds::default();
    let changes = rules.subscribe();
    let serving = listen::follow(
        settings.addr,
        bounds,
        cert.clone(),
        lookup,
        metrics,
        changes,
        |current| current.set.converts(),
    )
    .await?;
    super::serves();
    // Kept while the listener serves: draining it stops the keeper too.
    let mut draining = serving.draining();
    tokio::spawn(async move {
        tokio::select! {
            biased;
            _ = draining.wait_for(|d| *d) => {}
            () = keep(client, settings, rules, cert) => {}
        }
    });
    Ok(serving)
}

/// How often the Secret is read: often enough to switch well before a
/// certificate expires.
fn period(validity: Duration) -> Duration {
    (validity / 20).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

async fn keep(client: Client, settings: Settings, rules: CurrentRules, cert: Arc<Certificate>) {
    let secrets: KubeApi<Secret> = KubeApi::namespaced(client.clone(), &settings.namespace);
    let crds: KubeApi<CustomResourceDefinition> = KubeApi::all(client.clone());
    let hosts = settings.endpoint.hosts();
    let mut serving: Option<Material> = None;
    let mut told: Option<String> = None;
    let mut changes = rules.subscribe();
    loop {
        // No rule converts and no CRD is about to be created pointed here
        // (the installer waits for a certificate): no Secret to read or
        // make (kiln's Role grants it only when a rule converts), no CRD
        // to point.
        if serving.is_none() && !super::wanted() && !rules.get().converts() {
            tokio::select! {
                _ = changes.changed() => {}
                () = tokio::time::sleep(UNSETTLED) => {}
            }
            continue;
        }
        let mut settled = false;
        let served_ca = serving.as_ref().map(|m| m.ca.as_str());
        match secret::ensure(
            &secrets,
            &settings.secret,
            &hosts,
            settings.validity,
            served_ca,
        )
        .await
        {
            Ok(material) => {
                told = None;
                let conversion = settings
                    .endpoint
                    .conversion(&trusting(&material, serving.as_ref()));
                if serving.is_none() {
                    // First: serve the certificate, and only then let the
                    // installer and the CRDs point at it, so no CRD converts
                    // through a listener without one.
                    serving = serve(&cert, material.clone());
                }
                if serving.is_some() {
                    set_conversion(conversion.clone());
                    settled = point_crds(&crds, &rules, &conversion, &settings.crd_manager).await;
                }
                if settled && serving.as_ref().is_some_and(|s| s != &material) {
                    // Renewed (or made afresh): every CRD trusts the new CA
                    // and the one served (both in the bundle) before this
                    // replica serves the new certificate; not before.
                    tokio::time::sleep(TAKE_UP).await;
                    serving = serve(&cert, material).or(serving);
                }
            }
            Err(error) => {
                let message = error.to_string();
                tracing::error!(%error, "the conversion webhook's certificates could not be read or made");
                if matches!(error, secret::SecretError::Foreign { .. })
                    && told.as_ref() != Some(&message)
                {
                    secret::tell_foreign(&client, &settings.namespace, &settings.secret, &message)
                        .await;
                    told = Some(message);
                }
            }
        }
        // A CRD not created (or not pointed) yet is looked at again soon.
        let wait = if settled {
            period(settings.validity)
        } else {
            UNSETTLED
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            changed = changes.changed() => if changed.is_err() {
                tokio::time::sleep(period(settings.validity)).await;
            },
        }
    }
}

/// The CAs the CRDs must trust: the Secret's bundle, and the CA of the
/// certificate served now when the bundle lacks it (the Secret was made
/// afresh by a replica that did not serve it).
fn trusting(material: &Material, serving: Option<&Material>) -> String {
    match serving {
        Some(s) if !material.bundle.contains(s.ca.trim()) => {
            format!("{}{}", material.bundle, s.ca)
        }
        _ => material.bundle.clone(),
    }
}

/// Serves `material`'s certificate from the next handshake on; the
/// material, once served.
fn serve(cert: &Certificate, material: Material) -> Option<Material> {
    match cert.set(&material.cert, &material.key) {
        Ok(()) => {
            tracing::info!(
                not_after = material.not_after,
                "serving conversion with a new certificate"
            );
            Some(material)
        }
        Err(error) => {
            tracing::error!(%error, "the webhook's certificate was not taken");
            None
        }
    }
}

/// Sets `spec.conversion` on every CRD of the running rules that has
/// several versions and is kiln's (created or adopted as `manager`), where
/// it differs; whether every one is pointed (a CRD not created yet is not).
async fn point_crds(
    crds: &KubeApi<CustomResourceDefinition>,
    rules: &CurrentRules,
    conversion: &Value,
    manager: &str,
) -> bool {
    let mut settled = true;
    let set = rules.get();
    let names = set
        .rules
        .iter()
        .filter_map(|r| r.api.as_ref())
        .filter(|a| a.conversions.is_some())
        .map(|a| a.name());
    for name in names {
        let now = match crds.get_opt(&name).await {
            Ok(Some(crd)) => serde_json::to_value(&crd).unwrap_or(Value::Null),
            Ok(None) => {
                settled = false;
                continue;
            }
            Err(error) => {
                tracing::warn!(crd = %name, %error, "could not read the CRD to point it at the webhook");
                settled = false;
                continue;
            }
        };
        if !matches!(whose(&now, manager), Whose::Kilns) {
            tracing::warn!(crd = %name, "the CRD is not kiln's (kiln did not create it): not pointed at the conversion webhook");
            continue;
        }
        if &now["spec"]["conversion"] == conversion {
            continue;
        }
        let patch = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            // Only the CRD read (and found kiln's): a CRD replaced since is
            // not written.
            "metadata": {"name": name, "resourceVersion": now["metadata"]["resourceVersion"]},
            "spec": {"conversion": conversion},
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match gate::patch(crds, &name, &params, &Patch::Apply(&patch), Warrant::Crd).await {
            Ok(_) => tracing::info!(crd = %name, "pointed the CRD at the conversion webhook"),
            Err(error) => {
                tracing::warn!(crd = %name, %error, "could not point the CRD at the conversion webhook");
                settled = false;
            }
        }
    }
    settled
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_is_read_often_enough_to_switch_in_time() {
        assert_eq!(period(Duration::from_secs(30)), Duration::from_millis(1500));
        assert_eq!(period(Duration::from_secs(10)), Duration::from_secs(1));
        assert_eq!(
            period(Duration::from_secs(365 * 86400)),
            Duration::from_secs(60)
        );
    }
}
