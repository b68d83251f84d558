//! A rule that held its finalizer on a kind and no longer runs on it,
//! changed while kiln was down or while another replica held the Lease:
//! the kiln that starts next lets go of that finalizer on the old kind's
//! objects (they would never be deleted otherwise), as a hot reload does.

use std::time::Duration;

use kube::Client;
use serde_json::json;

use crate::reload::{configmap_child, widget};
use crate::support::{self, KilnProcess, TestNamespace, eventually};

/// Generous: the machine may be loaded and kiln started twice.
const CONVERGE: Duration = Duration::from_secs(120);

/// `name`, holding its finalizer on Widgets (ordered deletion).
fn on_widgets(name: &str) -> String {
    format!(
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: {name}}}\nspec:\n  for: {{apiVersion: test.kiln.dev/v1, kind: Widget}}\n  deletion: {{ordered: true}}\n  children:\n{}",
        configmap_child("one", "one")
    )
}

/// The same rule moved to ConfigMaps (labelled so none is selected).
fn on_configmaps(name: &str) -> String {
    on_widgets(name).replace(
        "{apiVersion: test.kiln.dev/v1, kind: Widget}",
        "{apiVersion: v1, kind: ConfigMap, selector: {matchLabels: {kiln-test/renamed: \"yes\"}}}",
    )
}

fn in_ns(n: &str) -> Vec<&str> {
    vec!["--namespace", n, "--leader-elect-namespace", n]
}

/// Widget `a` in `n`, held by `rule`'s finalizer, and the saved rules
/// naming the rule.
async fn held(client: &Client, n: &str, rule: &str) {
    support::apply(client, widget("a"), Some(n)).await;
    let finalizer = json!([format!("{rule}.kiln.dev/ordered-deletion")]);
    eventually("the finalizer", CONVERGE, || async {
        let w = support::get(client, "test.kiln.dev/v1", "Widget", n, "a").await?;
        (w["metadata"]["finalizers"] == finalizer).then_some(())
    })
    .await;
    eventually("the saved rules", CONVERGE, || async {
        let cm = support::get(client, "v1", "ConfigMap", n, "kiln-accepted-rules").await?;
        let text = cm["data"]["accepted.json"].as_str()?.to_string();
        text.contains("Widget").then_some(())
    })
    .await;
}

/// Deletes Widget `a`: it goes (no finalizer is left holding it).
async fn deleted(client: &Client, n: &str) {
    support::delete(client, ("test.kiln.dev/v1", "Widget"), Some(n), "a").await;
    eventually("the Widget gone", CONVERGE, || async {
        support::get(client, "test.kiln.dev/v1", "Widget", n, "a")
            .await
            .is_none()
            .then_some(())
    })
    .await;
}

async fn stop(mut kiln: KilnProcess) {
    kiln.terminate();
    let status = kiln.exited(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_moved_to_another_kind_while_kiln_was_down_lets_go_of_the_old_kinds_objects() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "strand-restart").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let kiln = KilnProcess::start(&on_widgets("restarted"), &in_ns(n));
    held(&client, n, "restarted").await;
    // A tenant's Widget, held by kiln's finalizer, and the tenant's copy
    // of that finalizer beside kiln's entry.
    support::apply(&client, widget("t"), Some(n)).await;
    let finalizer = json!(["restarted.kiln.dev/ordered-deletion"]);
    eventually("kiln's entry on it", CONVERGE, || async {
        let t = support::get(&client, "test.kiln.dev/v1", "Widget", n, "t").await?;
        (t["metadata"]["finalizers"] == finalizer).then_some(())
    })
    .await;
    let mut theirs = widget("t");
    theirs["metadata"]["finalizers"] = finalizer.clone();
    support::apply(&client, theirs, Some(n)).await;
    stop(kiln).await;

    let kiln = KilnProcess::start(&on_configmaps("restarted"), &in_ns(n));
    deleted(&client, n).await;
    eventually("no release owed", CONVERGE, || async {
        let pending = kiln.metric("kiln_finalizer_releases_pending ").await?;
        (pending == 0.0).then_some(())
    })
    .await;
    // Only kiln's own entry went: the tenant's copy stays, theirs to remove.
    let t = support::get(&client, "test.kiln.dev/v1", "Widget", n, "t")
        .await
        .unwrap();
    assert_eq!(
        t["metadata"]["finalizers"], finalizer,
        "a tenant's finalizer was removed"
    );
    support::apply(&client, widget("t"), Some(n)).await;
    // Done, so no longer owed in the saved set.
    eventually("the release out of the saved rules", CONVERGE, || async {
        let cm = support::get(&client, "v1", "ConfigMap", n, "kiln-accepted-rules").await?;
        let text = cm["data"]["accepted.json"].as_str()?.to_string();
        (text.contains("ConfigMap") && !text.contains("releasing")).then_some(())
    })
    .await;
    stop(kiln).await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_removed_while_kiln_was_down_lets_go_of_its_objects() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "strand-removed").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let kiln = KilnProcess::start(&on_widgets("removed"), &in_ns(n));
    held(&client, n, "removed").await;
    stop(kiln).await;

    // Another rule in its place: `removed` is gone from the set.
    let kiln = KilnProcess::start(&on_configmaps("other"), &in_ns(n));
    deleted(&client, n).await;
    stop(kiln).await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_taking_over_with_a_rule_moved_to_another_kind_lets_go_of_the_old_kinds_objects()
{
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "strand-standby").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let mut args = in_ns(n);
    args.extend(["--leader-elect", "--leader-elect-lease-duration", "4s"]);
    args.extend(["--leader-elect-renew-deadline", "3s"]);
    args.extend(["--leader-elect-retry-period", "1s"]);
    let leader = KilnProcess::start(&on_widgets("handed"), &args);
    held(&client, n, "handed").await;

    // A new pod of a rollout that moves the rule: it waits, then leads.
    let standby = KilnProcess::start(&on_configmaps("handed"), &args);
    eventually("the standby waits", CONVERGE, || async {
        (standby.metric("kiln_leader ").await == Some(0.0)).then_some(())
    })
    .await;
    stop(leader).await;
    eventually("the standby leads", CONVERGE, || async {
        (standby.metric("kiln_leader ").await == Some(1.0)).then_some(())
    })
    .await;
    deleted(&client, n).await;
    stop(standby).await;
    ns.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_kiln_may_not_make_stays_owed_and_said_until_it_may() {
    let client = support::admin_client().await;
    let ns = TestNamespace::new(&client, "strand-forbidden").await;
    let n = ns.name();
    support::install_crds(&client, "tests/fixtures/crds").await;
    let kiln = KilnProcess::start(&on_widgets("forbidden"), &in_ns(n));
    held(&client, n, "forbidden").await;
    stop(kiln).await;

    // Restarted with what the moved rule needs: nothing on Widgets.
    let needs = json!([
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["configmaps/finalizers"], "verbs": ["update"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
    ]);
    let token = support::service_account_token(&client, n, "strand-kiln", needs.clone()).await;
    let kubeconfig = support::token_kubeconfig(support::kubeconfig_yaml(), &token);
    let kiln = KilnProcess::start_on(&kubeconfig, &on_configmaps("forbidden"), &in_ns(n));
    eventually("the release owed and said", CONVERGE, || async {
        let pending = kiln.metric("kiln_finalizer_releases_pending ").await?;
        (pending == 1.0).then_some(())
    })
    .await;
    let w = support::get(&client, "test.kiln.dev/v1", "Widget", n, "a")
        .await
        .unwrap();
    assert_eq!(
        w["metadata"]["finalizers"],
        json!(["forbidden.kiln.dev/ordered-deletion"]),
        "a kind kiln may not list is never taken as holding nothing"
    );
    let cm = support::get(&client, "v1", "ConfigMap", n, "kiln-accepted-rules")
        .await
        .unwrap();
    let saved = cm["data"]["accepted.json"].as_str().unwrap();
    assert!(saved.contains("\"releasing\""), "still owed: {saved}");

    // Granted: it is tried again and done.
    let mut granted = needs.as_array().unwrap().clone();
    granted.push(json!({"apiGroups": ["test.kiln.dev"], "resources": ["widgets"], "verbs": ["list", "patch"]}));
    support::service_account_token(&client, n, "strand-kiln", json!(granted)).await;
    deleted(&client, n).await;
    stop(kiln).await;
    ns.delete().await;
}
