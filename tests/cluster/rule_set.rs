//! The current rule set outlives an engine: a replica that loses the leader
//! Lease and wins it back runs the last good rules, never the ones it read
//! at start.

use std::time::Duration;

use serde_json::{Value, json};

use crate::engine::widget;
use crate::support::scene::{CONVERGE, Scene, configmap};
use crate::support::{self, KilnProcess, eventually};

/// A rule whose child says which version of the rule made it.
fn versioned_rule(version: &str) -> String {
    format!(
        r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: widgets}}
spec:
  for: {{apiVersion: test.kiln.dev/v1, kind: Widget}}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: "{{{{ self.metadata.name }}}}"}}
        data: {{rules: {version}}}
"#
    )
}

fn made_by(cm: &Value) -> &str {
    cm["data"]["rules"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_wins_the_lease_back_runs_the_reloaded_rules() {
    let scene = Scene::new("lease-rules").await.with_widgets().await;
    let n = scene.ns().to_string();
    let args = support::elected_in(&n);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let kiln = KilnProcess::start(&versioned_rule("start-up"), &args);
    scene.apply(widget("a", json!({}))).await;
    scene
        .until("the start-up rules' child", configmap("a"), |c| {
            made_by(c) == "start-up"
        })
        .await;

    kiln.rewrite_rule(&versioned_rule("reloaded"));
    scene
        .until("the reloaded rules' child", configmap("a"), |c| {
            made_by(c) == "reloaded"
        })
        .await;

    // Someone else holds the Lease for a while: kiln stands down.
    support::hand_lease_to(&scene.client, &n, "thief", 4).await;
    eventually("kiln to stand down", CONVERGE, || async {
        (kiln.metric("kiln_leader ").await == Some(0.0)).then_some(())
    })
    .await;
    scene.apply(widget("b", json!({}))).await;
    eventually("kiln to lead again", CONVERGE, || async {
        (kiln.metric("kiln_leader ").await == Some(1.0)).then_some(())
    })
    .await;

    // From the moment it leads again, every child it writes is the
    // reloaded rules' (the start-up rules would rewrite `a` and make `b`
    // their way until a reload read the files again).
    // Watched until b's child exists and for eight seconds at least: how
    // fast the machine makes b decides only how long this looks.
    let started = std::time::Instant::now();
    let mut b_seen = false;
    while !b_seen || started.elapsed() < Duration::from_secs(8) {
        assert!(
            started.elapsed() < support::PATIENCE,
            "the new leader did not make b's child"
        );
        for name in ["a", "b"] {
            if let Some(cm) = scene.get("v1", "ConfigMap", name).await {
                assert_eq!(
                    made_by(&cm),
                    "reloaded",
                    "{name} was written by the start-up rules after the Lease was won back"
                );
                b_seen |= name == "b";
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(kiln);
    scene.end().await;
}
