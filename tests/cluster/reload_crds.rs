//! The CRDs a reload needs: one rule's CRD the API server cannot answer
//! for holds back that rule only (the others take their new version, and
//! it is tried again), and a standby writes none (the replica that runs
//! the engine does, and the standby once it takes over).

use std::sync::Arc;
use std::time::Duration;

use kiln::metrics::Metrics;
use kiln::reload::{Checker, Loader, ReloadOptions, Teller, Version};
use kiln::rules::load::Source;
use kube::Client;
use serde_json::Value;

use crate::support::{self, KilnProcess, TestNamespace, eventually};

const CONVERGE: Duration = Duration::from_secs(120);

/// A rule `name` defining `Site` in `group`, with the spec fields `fields`.
fn site_rule(name: &str, group: &str, fields: &str) -> String {
    format!(
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: {name}}}\nspec:\n  api:\n    group: {group}\n    kind: Site\n    versions:\n      - name: v1\n        schema:\n          spec:\n            title: string\n{fields}  children:\n    - id: page\n      template:\n        apiVersion: v1\n        kind: ConfigMap\n        metadata: {{name: \"{{{{ self.metadata.name }}}}-page\"}}\n        data: {{title: \"{{{{ self.spec.title }}}}\"}}\n"
    )
}

fn version(rules: &[String]) -> Version {
    Version {
        sources: rules
            .iter()
            .enumerate()
            .map(|(i, text)| Source {
                file: format!("rule{i}.yaml").into(),
                text: text.clone(),
            })
            .collect(),
        ..Version::default()
    }
}

/// The spec fields the CRD `name` declares.
async fn fields(client: &Client, name: &str) -> Vec<String> {
    let crd = support::get(
        client,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "",
        name,
    )
    .await
    .unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    spec["properties"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn one_rules_crd_the_api_server_cannot_answer_for_holds_back_that_rule_only() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "crd-transient").await;
    let pid = std::process::id();
    let (ga, gb) = (
        format!("transa{pid}.reload.kiln.dev"),
        format!("transb{pid}.reload.kiln.dev"),
    );
    let first = [site_rule("sites-a", &ga, ""), site_rule("sites-b", &gb, "")];
    let set = kiln::rules::load_sources(version(&first).sources).unwrap();
    kiln::api::install::install_set(&client, None, &set)
        .await
        .unwrap_or_else(|r| panic!("{}", r.diagnostics[0]));
    let crd_a = format!("sites.{ga}");
    let path = format!("/customresourcedefinitions/{crd_a}");
    let (checker, failures) =
        support::failing::client_failing(support::kubeconfig_yaml(), move |r| {
            r.uri().path().ends_with(&path)
        })
        .await;
    let metrics = Arc::new(Metrics::new());
    let teller = Teller::new(&client, None, Arc::new(|| true));
    let mut loader = Loader::first(version(&first), ReloadOptions::default(), metrics, teller)
        .unwrap_or_else(|r| panic!("{:?}", r.diagnostics()))
        .checking(Checker::new(checker, vec![ns.name().to_string()]));

    // Both rules gain a field; `sites-a`'s CRD cannot be read for now.
    failures.fail(u32::MAX);
    let edit = [
        site_rule("sites-a", &ga, "            color: string\n"),
        site_rule("sites-b", &gb, "            size: string\n"),
    ];
    loader.consider(version(&edit)).await;
    assert!(
        fields(&client, &format!("sites.{gb}"))
            .await
            .contains(&"size".to_string()),
        "the other rule takes its new version"
    );
    assert!(!fields(&client, &crd_a).await.contains(&"color".to_string()));
    let running = loader.rules().get();
    assert!(
        running
            .get("sites-b")
            .unwrap()
            .api
            .as_ref()
            .unwrap()
            .crd
            .to_string()
            .contains("size")
    );
    assert!(
        !running
            .get("sites-a")
            .unwrap()
            .api
            .as_ref()
            .unwrap()
            .crd
            .to_string()
            .contains("color")
    );
    assert!(
        loader.waiting(),
        "the rule the API server could not answer for waits"
    );

    // The API server answers again: it is tried again and runs.
    failures.fail(0);
    loader.recheck().await;
    assert!(fields(&client, &crd_a).await.contains(&"color".to_string()));
    assert!(!loader.waiting());
    let running = loader.rules().get();
    assert!(
        running
            .get("sites-a")
            .unwrap()
            .api
            .as_ref()
            .unwrap()
            .crd
            .to_string()
            .contains("color")
    );
    for group in [ga, gb] {
        support::delete(
            &client,
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            None,
            &format!("sites.{group}"),
        )
        .await;
    }
    ns.delete().await;
}

async fn stop(mut kiln: KilnProcess) {
    kiln.terminate();
    let status = kiln.exited(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}");
}

/// The CRD `name`'s resourceVersion.
async fn version_of(client: &Client, name: &str) -> Value {
    let crd = support::get(
        client,
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "",
        name,
    )
    .await
    .unwrap();
    crd["metadata"]["resourceVersion"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_writes_no_crd_on_reload_and_installs_it_once_it_leads() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "crd-standby").await;
    let n = ns.name();
    let group = format!("standby{}.reload.kiln.dev", std::process::id());
    let crd = format!("sites.{group}");
    let rule = site_rule("sites-s", &group, "");
    let mut args = vec!["--namespace", n, "--leader-elect-namespace", n];
    args.extend(["--leader-elect", "--leader-elect-lease-duration", "4s"]);
    args.extend(["--leader-elect-renew-deadline", "3s"]);
    args.extend(["--leader-elect-retry-period", "1s"]);
    let leader = KilnProcess::start(&rule, &args);
    eventually("the CRD", CONVERGE, || async {
        support::get(
            &client,
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "",
            &crd,
        )
        .await
    })
    .await;
    let standby = KilnProcess::start(&rule, &args);
    eventually("the standby waits", CONVERGE, || async {
        (standby.metric("kiln_leader ").await == Some(0.0)).then_some(())
    })
    .await;
    let before = version_of(&client, &crd).await;

    // Only the standby's rules change (a new pod of a rollout).
    let edited = site_rule("sites-s", &group, "            color: string\n");
    let file = standby.kubeconfig().with_file_name("rule.yaml");
    std::fs::write(&file, &edited).unwrap();
    eventually("the standby reloads", CONVERGE, || async {
        let ok = standby
            .metric("kiln_rules_reload_total{result=\"success\"}")
            .await?;
        (ok >= 1.0).then_some(())
    })
    .await;
    assert_eq!(
        version_of(&client, &crd).await,
        before,
        "a standby wrote the CRD"
    );

    // It takes over: its engine installs the CRD of its rules.
    stop(leader).await;
    eventually(
        "the new field, installed by the new leader",
        CONVERGE,
        || async {
            fields(&client, &crd)
                .await
                .contains(&"color".to_string())
                .then_some(())
        },
    )
    .await;
    stop(standby).await;
    support::delete(
        &client,
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
        None,
        &crd,
    )
    .await;
    ns.delete().await;
}
