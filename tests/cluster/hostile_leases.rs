//! Fencing: a leader paused past its Lease (SIGSTOP)
//! wakes to find work queued; it must write nothing before it re-checks the
//! Lease, because another replica may hold it by then.

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use crate::engine::{WIDGET_RULE, widget};
use crate::support::scene::{CONVERGE, Scene, configmap};
use crate::support::{self, KilnProcess, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_leader_writes_nothing_after_its_lease_expired() {
    let scene = Scene::new("fence").await.with_widgets().await;
    let n = scene.ns().to_string();
    let args = support::elected_in(&n);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let leader = KilnProcess::start(WIDGET_RULE, &args);
    scene.apply(widget("a", json!({"value": "1"}))).await;
    scene
        .until("the leader's work", configmap("a"), |c| {
            c["data"]["value"] == "1"
        })
        .await;
    let pid = Pid::from_raw(i32::try_from(leader.child.id()).unwrap());

    // Paused well past its lease; another replica takes the Lease meanwhile.
    kill(pid, Signal::SIGSTOP).unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    support::hand_lease_to(&scene.client, &n, "another-replica", 60).await;
    // Work waits for the paused leader: a change it will see when it wakes.
    scene.apply(widget("a", json!({"value": "2"}))).await;
    scene.apply(widget("b", json!({"value": "new"}))).await;
    kill(pid, Signal::SIGCONT).unwrap();
    eventually("the old leader to notice", CONVERGE, || async {
        (leader.metric("kiln_leader ").await == Some(0.0)).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let a = scene.get("v1", "ConfigMap", "a").await.unwrap();
    assert_eq!(
        a["data"]["value"], "1",
        "the paused leader wrote after waking"
    );
    assert!(
        scene.get("v1", "ConfigMap", "b").await.is_none(),
        "the paused leader created a child"
    );
    drop(leader);
    scene.end().await;
}
