//! Collections and filters: a forEach over a product of
//! two lists, values built with each(), a quantity compared, a Python-style
//! split and hashes as other tools write them — and the status lists the
//! children in forEach order, not in name order.

use serde_json::json;

use crate::support::rule_from_yaml;
use crate::support::scene::{Scene, configmap, widget_at};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_product_of_regions_and_tiers_renders_in_list_order() {
    let rule = std::fs::read_to_string(
        crate::support::repo_root().join("tests/fixtures/rules/fleet.yaml"),
    )
    .unwrap();
    let scene = Scene::new("fleet").await.with_widgets().await;
    scene
        .apply(
            json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"regions": ["us", "eu"], "tiers": ["web", "db"], "host": "api.example.com",
                     "ports": [80, 443], "memory": "512Mi"}}),
        )
        .await;
    let scene = scene.running(&[rule_from_yaml(&rule)]).await;
    let cell = scene
        .until("the us/db cell", configmap("w-us-db"), |_| true)
        .await;
    assert_eq!(
        cell["data"],
        json!({"region": "us", "tier": "db", "domain": "example.com", "ports": "p0=80,p1=443",
               "large": "false", "digest": "0MQ9OIUGTZrrRwIUqRSkO67EDh1m29RjdRNrasFdLmM=",
               "shard": "af63ea4c86020456"})
    );
    // The spec's order (us before eu, web before db), not the names' order.
    scene
        .until("the cells in forEach order", widget_at("w"), |w| {
            w["status"]["cells"] == json!(["w-us-web", "w-us-db", "w-eu-web", "w-eu-db"])
        })
        .await;
    // The spec's order changes: the status follows, no child is rewritten.
    let writes = scene.writes();
    scene
        .apply(
            json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"regions": ["eu", "us"], "tiers": ["web", "db"], "host": "api.example.com",
                     "ports": [80, 443], "memory": "512Mi"}}),
        )
        .await;
    scene
        .until("the cells in the new order", widget_at("w"), |w| {
            w["status"]["cells"] == json!(["w-eu-web", "w-eu-db", "w-us-web", "w-us-db"])
        })
        .await;
    assert_eq!(scene.writes() - writes, 1, "only the status is written");
    scene.end().await;
}
