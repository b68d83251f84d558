//! The conversion webhook's Secret on the real API server: kiln uses and
//! writes only the Secret it made (a foreign Secret of that name is left
//! as it is and reported by an Event on it), and a Secret deleted while
//! kiln serves is made again without a moment where the CRD does not
//! trust the certificate served.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Event, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use serde_json::json;

use crate::conversion::{apps, create_many, image, kiln, pointed, rule};
use crate::support::{self, TestNamespace, eventually, free_port};

const DEADLINE: Duration = Duration::from_secs(120);
const SECRET: &str = "kiln-conversion-webhook";

/// Someone's TLS Secret named as kiln's, carrying kiln's label and
/// annotation (anyone may copy them).
fn foreign_tls() -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(SECRET.into()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".into(),
                "kiln".into(),
            )])),
            annotations: Some(BTreeMap::from([(
                "kiln.dev/conversion-webhook".into(),
                "certificates".into(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            (
                "tls.crt".into(),
                ByteString(b"someone's certificate".to_vec()),
            ),
            ("tls.key".into(), ByteString(b"someone's key".to_vec())),
        ])),
        ..Secret::default()
    }
}

#[tokio::test]
async fn a_foreign_secret_with_the_webhook_name_is_never_overwritten() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "conv-foreign").await;
    let group = format!("foreign{}.conv.kiln.dev", std::process::id());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns.name());
    let theirs = secrets
        .create(&PostParams::default(), &foreign_tls())
        .await
        .unwrap();
    let port = free_port();
    let _kiln = kiln(&rule(&group, "v1"), ns.name(), port, port, &[]);
    let events: Api<Event> = Api::namespaced(client.clone(), ns.name());
    let note = eventually(
        "kiln tells it does not use the Secret",
        DEADLINE,
        || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("WebhookSecretNotKilns")
                        && e.involved_object.name.as_deref() == Some(SECRET)
                })
                .and_then(|e| e.message)
        },
    )
    .await;
    assert!(note.contains("was not made by kiln"), "{note}");
    let now = secrets.get(SECRET).await.unwrap();
    assert_eq!(
        now.metadata.resource_version, theirs.metadata.resource_version,
        "the Secret is never written"
    );
    assert_eq!(now.data, theirs.data);
    // No CRD is pointed at a webhook serving no certificate.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if let Some(crd) = crds.get_opt(&format!("apps.{group}")).await.unwrap() {
        let strategy = crd.spec.conversion.map(|c| c.strategy);
        assert_ne!(strategy.as_deref(), Some("Webhook"));
    }
}

#[tokio::test]
async fn recreating_the_webhook_secret_never_breaks_conversion() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "conv-recreate").await;
    let group = format!("recreate{}.conv.kiln.dev", std::process::id());
    let port = free_port();
    // Read every 15 s (a twentieth of the validity).
    let validity = ["--conversion-cert-validity", "300s"];
    let _kiln = kiln(&rule(&group, "v1"), ns.name(), port, port, &validity);
    pointed(&client, &group).await;
    create_many(&client, &group, "v1", ns.name(), 10).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns.name());
    let cert = |s: Secret| s.data.and_then(|d| d.get("tls.crt").cloned());
    let first = cert(secrets.get(SECRET).await.unwrap());
    // Gets at v1alpha1 read etcd and convert through the webhook, each.
    let alpha = apps(&client, &group, "v1alpha1", ns.name());
    let getter = {
        let (alpha, secrets, first) = (alpha.clone(), secrets.clone(), first.clone());
        tokio::spawn(async move { get_until_switched(alpha, secrets, first).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    secrets
        .delete(SECRET, &DeleteParams::default())
        .await
        .unwrap();
    let (gets, failures) = getter.await.unwrap();
    assert!(
        failures.is_empty(),
        "{} of {gets} gets failed: {failures:?}",
        failures.len()
    );
    let now = cert(secrets.get(SECRET).await.unwrap());
    assert_ne!(now, first, "the Secret was made again");
}

/// Gets Apps at v1alpha1 until the Secret holds a new certificate and some
/// time after (the replica switches to it within a period and a bit); the
/// number of gets and the failures.
async fn get_until_switched(
    alpha: Api<kube::api::DynamicObject>,
    secrets: Api<Secret>,
    first: Option<ByteString>,
) -> (usize, Vec<String>) {
    let (mut gets, mut failures) = (0, Vec::new());
    let started = tokio::time::Instant::now();
    let mut renewed: Option<tokio::time::Instant> = None;
    while renewed.is_none_or(|at| at.elapsed() < Duration::from_secs(25)) {
        assert!(
            started.elapsed() < DEADLINE * 2,
            "the Secret was never made again"
        );
        match alpha.get(&format!("app-{:04}", gets % 10)).await {
            Ok(o) => assert_eq!(image(&o), json!("nginx:1.27")),
            Err(e) => failures.push(e.to_string()),
        }
        gets += 1;
        if renewed.is_none() && gets % 10 == 0 {
            let now = secrets.get_opt(SECRET).await.ok().flatten();
            let now = now.and_then(|s| s.data.and_then(|d| d.get("tls.crt").cloned()));
            if now.is_some() && now != first {
                renewed = Some(tokio::time::Instant::now());
            }
        }
    }
    (gets, failures)
}
