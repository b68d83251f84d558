//! Everything kiln starts stops with its rules: once stopped, nothing of it
//! goes on asking the API server, however it went (a Ctrl-C stops the local
//! control plane at the same moment as kiln).

use kiln::engine::{Engine, Options};
use serde_json::json;

use crate::engine::WIDGET_RULE;
use crate::support::stall::{self, StallingProxy};
use crate::support::{self, PATIENCE, TestNamespace, eventually};

/// Whether a request is about CustomResourceDefinitions (the watch a rule
/// keeps on its primary's CRD, listed again after an error).
fn about_crds(req: &http::Request<kube::client::Body>) -> bool {
    req.uri().path().contains("/customresourcedefinitions")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_engine_asks_nothing_more_of_an_api_server_that_went_away() {
    let admin = support::admin_client().await;
    support::install_crds(&admin, "tests/fixtures/crds").await;
    let ns = TestNamespace::new(&admin, "stopping").await;
    let n = ns.name();
    support::apply(&admin, json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"value": "v"}}), Some(n)).await;
    // kiln reaches the API server through a proxy: dropped, the server is gone.
    let proxy = StallingProxy::start(stall::api_server_port()).await;
    let (client, crd_requests) =
        support::client_counting(&stall::kubeconfig_through(proxy.port), about_crds).await;
    let options = Options {
        namespaces: vec![n.to_string()],
        ..Options::default()
    };
    let engine = Engine::new(client, options);
    engine.start(support::rule_from_yaml(WIDGET_RULE));
    eventually("the rule's child", PATIENCE, || async {
        support::get(&admin, "v1", "ConfigMap", n, "w").await
    })
    .await;
    // The rule follows its primary's CRD (a watch, after the CRD's read).
    eventually("the watch of the Widget CRD", PATIENCE, || async {
        (crd_requests.get() >= 2).then_some(())
    })
    .await;

    engine.shutdown().await;
    drop(proxy);
    // A watch left running meets the closed connection and tries again
    // (0.8 s, then about twice as long each time): once still, it would not
    // stay still for eight seconds.
    support::settled("the requests about CRDs", || crd_requests.get()).await;
    let still = crd_requests.get();
    tokio::time::sleep(std::time::Duration::from_secs(8)).await;
    assert_eq!(
        crd_requests.get(),
        still,
        "a CRD watch of the stopped engine went on asking"
    );
    ns.delete().await;
}
