//! controller-runtime's ChaosPod, ported (`examples/ported/chaospod/`), run
//! by the engine: the Pod is stopped and replaced (a new uid) at
//! `spec.nextStop`, and `nextStop` moves on. No node runs the Pods (they
//! stay Pending), which a replacement does not need.

use serde_json::{Value, json};

use crate::support::scene::Scene;
use crate::support::{self, eventually, rule_from_yaml};

const CHAOS: (&str, &str, &str) = ("chaosapps.metamagical.io/v1", "ChaosPod", "chaos");

/// The Pod's uid and creation time, once it exists and is not being deleted.
async fn pod(scene: &Scene, not: Option<&str>) -> (String, i64) {
    eventually("the ChaosPod's Pod", support::PATIENCE, || async {
        let pod = scene.get("v1", "Pod", "chaos").await?;
        let uid = pod["metadata"]["uid"].as_str()?.to_string();
        (pod["metadata"]["deletionTimestamp"].is_null() && not != Some(uid.as_str())).then(|| {
            let created = seconds(&pod["metadata"]["creationTimestamp"]);
            (uid, created)
        })
    })
    .await
}

fn seconds(time: &Value) -> i64 {
    kiln::template::time::parse(time.as_str().unwrap())
        .unwrap()
        .as_second()
}

async fn next_stop(scene: &Scene) -> i64 {
    let chaos = scene.get(CHAOS.0, CHAOS.1, CHAOS.2).await.unwrap();
    seconds(&chaos["spec"]["nextStop"])
}

/// Waits until the ChaosPod's `status.lastRun` is `at` (the Pod's creation).
async fn last_run(scene: &Scene, at: i64) {
    scene
        .until("lastRun to be the Pod's creation", CHAOS, |c| {
            c["status"]["lastRun"].as_str().map(|t| seconds(&json!(t))) == Some(at)
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chaospods_pod_is_replaced_at_next_stop_and_next_stop_moves_on() {
    let scene = Scene::new("chaospod")
        .await
        .with_crds("examples/ported/chaospod")
        .await;
    scene
        .apply(json!({"apiVersion": CHAOS.0, "kind": CHAOS.1, "metadata": {"name": CHAOS.2},
            "spec": {"template": {"metadata": {"labels": {"app": "chaos"}},
                "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]}}}}))
        .await;
    let rule = support::repo_root().join("examples/ported/chaospod/rule.yaml");
    let rule = rule_from_yaml(&std::fs::read_to_string(rule).unwrap());
    let scene = scene.running(&[rule]).await;

    let (first, created) = pod(&scene, None).await;
    let stop = next_stop(&scene).await;
    // nextStop is set first (10 or 20 s on), then the Pod is made.
    assert!(
        (1..=20).contains(&(stop - created)),
        "the stop is up to 20 s after the Pod was made: {stop} vs {created}"
    );
    last_run(&scene, created).await;

    // At nextStop the Pod goes and a new one comes; nextStop moves on.
    let (second, recreated) = pod(&scene, Some(&first)).await;
    assert_ne!(first, second);
    assert!(
        recreated >= stop,
        "replaced at the stop ({stop}), not before: {recreated}"
    );
    let moved = next_stop(&scene).await;
    assert!(moved > stop, "nextStop moves on: {moved} after {stop}");
    // 10 or 20 s after the reconcile that handled the stop (woken at it).
    assert!(
        (10..=25).contains(&(moved - stop)),
        "10 or 20 s after the stop: {moved} vs {stop}"
    );
    last_run(&scene, recreated).await;
    scene.end().await;
}
