//! Conversion between the versions of a rule-defined API on the real API
//! server: `kiln run --conversion-addr` serves the CRD conversion webhook
//! (reached at a URL, as kiln outside the cluster), makes its certificates,
//! keeps them in a Secret and points the CRD at itself. An object written
//! at one version is read at the other; lists convert; the storage version
//! switches; a second replica serves when one is killed, and one stopped
//! with SIGTERM answers its reviews in flight first; a renewed certificate
//! does not interrupt conversion; the CRD is created pointed at a webhook
//! that already serves its certificate.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::support::{self, KilnProcess, TestNamespace, eventually, free_port};

const CONVERGE: Duration = support::PATIENCE;

/// Conversion templates of `from` (image a string) to `to` (image split).
const TO_SPLIT: &str = r#"
              image:
                repository: "{{ self.spec.image.split(':')[0] }}"
                tag: "{{ self.spec.image.split(':')[1] if ':' in self.spec.image else none }}""#;
const TO_STRING: &str = r#"
              image: "{{ self.spec.image.repository ~ (':' ~ self.spec.image.tag if self.spec.image.tag is defined else '') }}""#;

/// A rule defining `App` in `group`: `v1alpha1` (image a string) and `v1`
/// (image split), `storage` the one that stores. Only objects labelled
/// `managed: "yes"` are reconciled (a ConfigMap each), so bulk objects
/// exercise conversion alone.
pub(crate) fn rule(group: &str, storage: &str) -> String {
    let (alpha_conv, v1_conv) = if storage == "v1" {
        (conversion(TO_SPLIT, TO_STRING), String::new())
    } else {
        (String::new(), conversion(TO_STRING, TO_SPLIT))
    };
    let storage_of = |v: &str| {
        if v == storage {
            "\n        storage: true"
        } else {
            ""
        }
    };
    format!(
        r#"apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: apps}}
spec:
  for:
    apiVersion: {group}/{storage}
    kind: App
    selector: {{matchLabels: {{managed: "yes"}}}}
  api:
    group: {group}
    kind: App
    versions:
      - name: v1alpha1{alpha_storage}
        schema:
          spec:
            image: string | required=true
            replicas: integer | default=1
{alpha_conv}      - name: v1{v1_storage}
        schema:
          spec:
            image:
              repository: string | required=true
              tag: string
            replicas: integer | default=1
{v1_conv}  children:
    - id: cm
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: "{{{{ self.metadata.name }}}}-app"}}
        data:
          image: "{{{{ self.spec.image | string }}}}"
"#,
        alpha_storage = storage_of("v1alpha1"),
        v1_storage = storage_of("v1"),
    )
}

fn conversion(to_storage: &str, from_storage: &str) -> String {
    format!(
        "        conversion:\n          toStorage:\n            spec:{to_storage}\n              replicas: \"{{{{ self.spec.replicas }}}}\"\n          fromStorage:\n            spec:{from_storage}\n              replicas: \"{{{{ self.spec.replicas }}}}\"\n"
    )
}

pub(crate) fn apps(client: &Client, group: &str, version: &str, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: "App".into(),
        plural: "apps".into(),
    };
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn app(group: &str, version: &str, name: &str, spec: Value, managed: bool) -> DynamicObject {
    let labels = if managed {
        json!({"managed": "yes"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "apiVersion": format!("{group}/{version}"), "kind": "App",
        "metadata": {"name": name, "labels": labels}, "spec": spec,
    }))
    .unwrap()
}

/// `kiln run` serving conversion on `port`, reached at `url_port`.
pub(crate) fn kiln(rule: &str, ns: &str, port: u16, url_port: u16, extra: &[&str]) -> KilnProcess {
    let addr = format!("127.0.0.1:{port}");
    let url = format!("https://127.0.0.1:{url_port}");
    let mut args = vec![
        "--conversion-addr",
        &addr,
        "--conversion-url",
        &url,
        "--conversion-namespace",
        ns,
        "--namespace",
        ns,
    ];
    args.extend_from_slice(extra);
    KilnProcess::start(rule, &args)
}

/// Waits until the CRD converts through the webhook.
pub(crate) async fn pointed(client: &Client, group: &str) {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let name = format!("apps.{group}");
    eventually("the CRD is pointed at kiln's webhook", CONVERGE, || async {
        let crd = crds.get_opt(&name).await.ok()??;
        let conversion = crd.spec.conversion?;
        (conversion.strategy == "Webhook" && conversion.webhook?.client_config?.ca_bundle.is_some())
            .then_some(())
    })
    .await;
    // Established and served at both versions (a CRD just created may
    // answer 404 for a moment).
    eventually("the API server serves both versions", CONVERGE, || async {
        for version in ["v1", "v1alpha1"] {
            let api = apps(client, group, version, "default");
            api.list(&ListParams::default()).await.ok()?;
        }
        Some(())
    })
    .await;
}

pub(crate) fn image(o: &DynamicObject) -> Value {
    o.data["spec"]["image"].clone()
}

#[tokio::test]
async fn an_object_written_at_one_version_is_read_at_the_other() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "conv-read").await;
    let group = format!("read{}.conv.kiln.dev", std::process::id());
    let port = free_port();
    let _kiln = kiln(&rule(&group, "v1"), ns.name(), port, port, &[]);
    pointed(&client, &group).await;
    let alpha = apps(&client, &group, "v1alpha1", ns.name());
    let v1 = apps(&client, &group, "v1", ns.name());
    let created = eventually("an App created at v1alpha1", CONVERGE, || async {
        alpha
            .create(
                &PostParams::default(),
                &app(
                    &group,
                    "v1alpha1",
                    "shop",
                    json!({"image": "nginx:1.27"}),
                    true,
                ),
            )
            .await
            .ok()
    })
    .await;
    let stored = v1.get("shop").await.unwrap();
    assert_eq!(
        image(&stored),
        json!({"repository": "nginx", "tag": "1.27"})
    );
    assert_eq!(
        stored.data["spec"]["replicas"], 1,
        "defaulted at v1alpha1, converted"
    );
    assert_eq!(
        stored.metadata.uid, created.metadata.uid,
        "metadata passes through"
    );
    assert_eq!(
        image(&alpha.get("shop").await.unwrap()),
        json!("nginx:1.27")
    );
    // Written at v1, read at v1alpha1; an update at v1alpha1 is stored split.
    v1.create(
        &PostParams::default(),
        &app(
            &group,
            "v1",
            "blog",
            json!({"image": {"repository": "httpd"}}),
            false,
        ),
    )
    .await
    .unwrap();
    let mut blog = alpha.get("blog").await.unwrap();
    assert_eq!(image(&blog), json!("httpd"));
    blog.data["spec"]["image"] = json!("httpd:2.4");
    alpha
        .replace("blog", &PostParams::default(), &blog)
        .await
        .unwrap();
    assert_eq!(
        image(&v1.get("blog").await.unwrap()),
        json!({"repository": "httpd", "tag": "2.4"})
    );
    // The rule reads the storage version: its child sees the split image.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), ns.name());
    eventually(
        "the child renders from the stored object",
        CONVERGE,
        || async {
            let cm = cms.get_opt("shop-app").await.ok()??;
            cm.data?.get("image")?.contains("nginx").then_some(())
        },
    )
    .await;
    // `kiln explain` of the object named at v1alpha1: the rule reads it
    // at v1, as the API server serves it there.
    let explained = support::kiln_explain(
        &format!("{group}/v1alpha1"),
        "App",
        &format!("{}/shop", ns.name()),
        &[("apps.yaml", &rule(&group, "v1"))],
    );
    assert!(explained.contains("apps: selects it"), "{explained}");
    assert!(explained.contains("shop-app"), "{explained}");
}

/// Creates one unmanaged App at v1alpha1 (once, not retried).
async fn create_at_alpha(client: &Client, group: &str, ns: &str, name: &str, image: &str) {
    let o = app(group, "v1alpha1", name, json!({"image": image}), false);
    apps(client, group, "v1alpha1", ns)
        .create(&PostParams::default(), &o)
        .await
        .unwrap();
}

/// Creates `n` unmanaged Apps at `version`, 32 at a time.
pub(crate) async fn create_many(client: &Client, group: &str, version: &str, ns: &str, n: usize) {
    let api = apps(client, group, version, ns);
    let spec = if version == "v1" {
        json!({"image": {"repository": "nginx", "tag": "1.27"}})
    } else {
        json!({"image": "nginx:1.27"})
    };
    stream::iter(0..n)
        .map(|i| {
            let (api, spec) = (api.clone(), spec.clone());
            let o = app(group, version, &format!("app-{i:04}"), spec, false);
            async move { api.create(&PostParams::default(), &o).await.map(|_| ()) }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_thousand_objects_list_at_the_version_that_does_not_store() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "conv-list").await;
    let group = format!("list{}.conv.kiln.dev", std::process::id());
    let port = free_port();
    let _kiln = kiln(&rule(&group, "v1"), ns.name(), port, port, &[]);
    pointed(&client, &group).await;
    create_many(&client, &group, "v1", ns.name(), 1000).await;
    let list = apps(&client, &group, "v1alpha1", ns.name())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1000);
    assert!(list.items.iter().all(|o| image(o) == json!("nginx:1.27")));
}

#[tokio::test]
async fn the_storage_version_switches_with_objects_stored() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "conv-switch").await;
    let group = format!("switch{}.conv.kiln.dev", std::process::id());
    let port = free_port();
    let kiln = kiln(&rule(&group, "v1"), ns.name(), port, port, &[]);
    pointed(&client, &group).await;
    create_many(&client, &group, "v1", ns.name(), 20).await;
    kiln.rewrite_rule(&rule(&group, "v1alpha1"));
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    eventually("v1alpha1 stores", CONVERGE, || async {
        let crd = crds.get(&format!("apps.{group}")).await.ok()?;
        crd.spec
            .versions
            .iter()
            .any(|v| v.name == "v1alpha1" && v.storage)
            .then_some(())
    })
    .await;
    // Objects stored at v1 before and at v1alpha1 now: both read at both.
    create_at_alpha(&client, &group, ns.name(), "after", "redis:7").await;
    let at_v1 = apps(&client, &group, "v1", ns.name())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(at_v1.items.len(), 21);
    let after = at_v1
        .items
        .iter()
        .find(|o| o.metadata.name.as_deref() == Some("after"))
        .unwrap();
    assert_eq!(image(after), json!({"repository": "redis", "tag": "7"}));
    let at_alpha = apps(&client, &group, "v1alpha1", ns.name())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        at_alpha
            .items
            .iter()
            .filter(|o| o.metadata.name.as_deref() != Some("after"))
            .all(|o| image(o) == json!("nginx:1.27"))
    );
    let stored = crds
        .get(&format!("apps.{group}"))
        .await
        .unwrap()
        .status
        .unwrap()
        .stored_versions
        .unwrap();
    assert!(
        stored.contains(&"v1".to_string()) && stored.contains(&"v1alpha1".to_string()),
        "{stored:?}"
    );
}

/// A TCP relay on `port` to the first of `backends` that accepts, round
/// robin: the Service in front of kiln's replicas.
fn relay(port: u16, backends: Vec<u16>) {
    tokio::spawn(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let mut next = 0usize;
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                continue;
            };
            next += 1;
            let order: Vec<u16> = (0..backends.len())
                .map(|i| backends[(next + i) % backends.len()])
                .collect();
            tokio::spawn(async move {
                for b in order {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(("127.0.0.1", b)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                        return;
                    }
                }
            });
        }
    });
}

#[tokio::test]
async fn two_replicas_serve_conversion_and_one_killed_mid_list_leaves_the_other() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "conv-replicas").await;
    let group = format!("replicas{}.conv.kiln.dev", std::process::id());
    let (front, a, b) = (free_port(), free_port(), free_port());
    relay(front, vec![a, b]);
    let elect = ["--leader-elect", "--leader-elect-namespace", ns.name()];
    let mut first = kiln(&rule(&group, "v1"), ns.name(), a, front, &elect);
    let _second = kiln(&rule(&group, "v1"), ns.name(), b, front, &elect);
    pointed(&client, &group).await;
    create_many(&client, &group, "v1", ns.name(), 1000).await;
    let alpha = apps(&client, &group, "v1alpha1", ns.name());
    // Both replicas answer (the relay alternates), with the same certificates.
    for _ in 0..4 {
        assert_eq!(
            alpha
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len(),
            1000
        );
    }
    let lister = {
        let alpha = alpha.clone();
        tokio::spawn(async move {
            let mut results = Vec::new();
            for _ in 0..12 {
                results.push(
                    alpha
                        .list(&ListParams::default())
                        .await
                        .map(|l| l.items.len()),
                );
            }
            results
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.child.kill().unwrap();
    let _ = first.child.wait();
    let results = lister.await.unwrap();
    let failed = results.iter().filter(|r| r.is_err()).count();
    assert!(
        failed <= 1,
        "only a list in flight on the killed replica may fail: {results:?}"
    );
    assert!(
        results.iter().rev().take(6).all(|r| matches!(r, Ok(1000))),
        "{results:?}"
    );
}

#[tokio::test]
async fn a_renewed_certificate_does_not_interrupt_conversion() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "conv-renew").await;
    let group = format!("renew{}.conv.kiln.dev", std::process::id());
    let port = free_port();
    let _kiln = kiln(
        &rule(&group, "v1"),
        ns.name(),
        port,
        port,
        &["--conversion-cert-validity", "12s"],
    );
    pointed(&client, &group).await;
    create_many(&client, &group, "v1", ns.name(), 50).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns.name());
    let cert = || async {
        let s = secrets.get("kiln-conversion-webhook").await.unwrap();
        s.data.unwrap()["tls.crt"].0.clone()
    };
    let alpha = apps(&client, &group, "v1alpha1", ns.name());
    let mut seen = vec![cert().await];
    // Lists at v1alpha1 all along, until the certificate was renewed twice.
    let deadline = tokio::time::Instant::now() + support::PATIENCE;
    let mut lists = 0;
    while seen.len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the certificate was not renewed twice in {:?} of 12 s certificates: {} seen",
            support::PATIENCE,
            seen.len()
        );
        let list = alpha.list(&ListParams::default()).await;
        let list =
            list.unwrap_or_else(|e| panic!("a list at v1alpha1 failed after {lists} lists: {e}"));
        assert_eq!(list.items.len(), 50);
        lists += 1;
        let now = cert().await;
        if seen.last() != Some(&now) {
            seen.push(now);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn the_crd_is_created_pointed_at_a_webhook_that_already_serves() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "conv-first").await;
    let group = format!("first{}.conv.kiln.dev", std::process::id());
    let name = format!("apps.{group}");
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    // Every version of the CRD the API server stores, from before kiln starts.
    let watch = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut events = crds.watch(&watch, "0").await.unwrap().boxed();
    let port = free_port();
    let _kiln = kiln(&rule(&group, "v1"), ns.name(), port, port, &[]);
    let created = tokio::time::timeout(CONVERGE, async {
        loop {
            match events.try_next().await.unwrap() {
                Some(WatchEvent::Added(crd)) => return crd,
                Some(_) => {}
                None => panic!("the watch ended"),
            }
        }
    })
    .await
    .expect("kiln creates the CRD");
    let conversion = created
        .spec
        .conversion
        .expect("created with spec.conversion");
    assert_eq!(
        conversion.strategy, "Webhook",
        "never created without conversion"
    );
    assert!(
        conversion
            .webhook
            .and_then(|w| w.client_config)
            .and_then(|c| c.ca_bundle)
            .is_some()
    );
    // As soon as the API server serves the kind, the webhook answers: a
    // single create at v1alpha1, not retried, is stored converted.
    let alpha = apps(&client, &group, "v1alpha1", ns.name());
    eventually("the API server serves v1alpha1", CONVERGE, || async {
        alpha.list(&ListParams::default()).await.ok()
    })
    .await;
    create_at_alpha(&client, &group, ns.name(), "at-once", "nginx:1.27").await;
    let stored = apps(&client, &group, "v1", ns.name())
        .get("at-once")
        .await
        .unwrap();
    assert_eq!(
        image(&stored),
        json!({"repository": "nginx", "tag": "1.27"})
    );
}

#[tokio::test]
async fn a_replica_stopped_with_sigterm_answers_its_reviews_in_flight_and_exits() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "conv-sigterm").await;
    let group = format!("sigterm{}.conv.kiln.dev", std::process::id());
    let (front, a, b) = (free_port(), free_port(), free_port());
    // The relay alternates for each new connection, skipping a replica that
    // refuses: until the second starts, every connection reaches the first.
    relay(front, vec![a, b]);
    let elect = ["--leader-elect", "--leader-elect-namespace", ns.name()];
    let mut first = kiln(&rule(&group, "v1"), ns.name(), a, front, &elect);
    pointed(&client, &group).await;
    create_many(&client, &group, "v1", ns.name(), 20).await;
    let _second = kiln(&rule(&group, "v1"), ns.name(), b, front, &elect);
    // A get at v1alpha1 reads etcd and converts through the webhook (a list
    // is served from the API server's watch cache, converted already).
    let alpha = apps(&client, &group, "v1alpha1", ns.name());
    let served = || async {
        first
            .metric("kiln_conversion_reviews_total{crd=")
            .await
            .unwrap_or(0.0)
    };
    let before = served().await;
    alpha.get("app-0000").await.unwrap();
    assert!(served().await > before, "the first replica answers reviews");
    let getters: Vec<_> = (0..4)
        .map(|g| {
            let alpha = alpha.clone();
            tokio::spawn(async move {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
                let mut results = Vec::new();
                let mut i = g;
                while tokio::time::Instant::now() < deadline {
                    let name = format!("app-{:04}", i % 20);
                    results.push(alpha.get(&name).await.map(|o| image(&o)));
                    i += 4;
                }
                results
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    first.terminate();
    let status = first.exited(support::PATIENCE).await;
    assert!(status.success(), "kiln exits cleanly on SIGTERM: {status}");
    let mut gets = 0;
    for getter in getters {
        for result in getter.await.unwrap() {
            gets += 1;
            let image = result.unwrap_or_else(|e| panic!("a get at v1alpha1 failed: {e}"));
            assert_eq!(image, json!("nginx:1.27"));
        }
    }
    assert!(
        gets > 20,
        "reviews kept coming while the replica stopped: {gets}"
    );
}

/// `kiln run` with the webhook on (as the chart and `deploy/` run it) but
/// no rule that converts: kiln needs no certificate, so it neither reads nor
/// makes the webhook's Secret, which its Role grants only when a rule
/// converts (before, it asked for it every second, forbidden for ever).
#[tokio::test]
async fn no_rule_converts_no_webhook_secret_is_read_or_made() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "conv-none").await;
    let group = format!("none{}.conv.kiln.dev", std::process::id());
    let rule = format!(
        r#"apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: apps}}
spec:
  for: {{apiVersion: {group}/v1, kind: App}}
  api:
    group: {group}
    kind: App
    versions:
      - name: v1
        schema:
          spec:
            image: string | required=true
  children:
    - id: settings
      template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: "{{{{ self.metadata.name }}}}-app"}}}}
"#
    );
    let port = free_port();
    let _kiln = kiln(&rule, ns.name(), port, port, &[]);
    let v1 = apps(&client, &group, "v1", ns.name());
    eventually("an App created", CONVERGE, || async {
        let app = app(&group, "v1", "shop", json!({"image": "shop:1"}), true);
        v1.create(&PostParams::default(), &app).await.ok()
    })
    .await;
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), ns.name());
    eventually("the App's ConfigMap", CONVERGE, || async {
        configmaps.get_opt("shop-app").await.ok()?
    })
    .await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns.name());
    let secret = secrets
        .get_opt(kiln::api::webhook::DEFAULT_SECRET)
        .await
        .unwrap();
    assert!(secret.is_none(), "kiln made the webhook's Secret");
    ns.delete().await;
}
