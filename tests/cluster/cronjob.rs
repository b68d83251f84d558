//! The kubebuilder book's CronJob, ported (`examples/ported/cronjob/`), run
//! by the engine: nothing but `spec.requeue.at` wakes it at the next minute,
//! where it creates that minute's Job, once, and records it in the status.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::scene::Scene;
use crate::support::{self, eventually, rule_from_yaml};

fn cronjob(name: &str) -> Value {
    json!({
        "apiVersion": "batch.tutorial.kubebuilder.io/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": "* * * * *",
            "concurrencyPolicy": "Allow",
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox:1.37", "args": ["true"]}]
            }}}}
        }
    })
}

/// Seconds since 1970, now.
fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cronjob_wakes_at_its_next_scheduled_minute_and_creates_that_job_once() {
    let scene = Scene::new("cronjob")
        .await
        .with_crds("examples/ported/cronjob")
        .await;
    // Start early in a minute, so the engine settles well before the next.
    let into = now().rem_euclid(60);
    if into > 20 {
        tokio::time::sleep(Duration::from_secs((61 - into).unsigned_abs())).await;
    }
    scene.apply(cronjob("tick")).await;
    let rule = support::repo_root().join("examples/ported/cronjob/rule.yaml");
    let rule = rule_from_yaml(&std::fs::read_to_string(rule).unwrap());
    let scene = scene.running(&[rule]).await;
    let cronjob_at = ("batch.tutorial.kubebuilder.io/v1", "CronJob", "tick");
    scene
        .until("the CronJob reconciled", cronjob_at, |c| {
            c["status"]["observedGeneration"] == 1
        })
        .await;
    let boundary = (now() / 60 + 1) * 60;
    let jobs = scene.api("batch/v1", "Job").await;
    // Settled, with nothing left to change before the next minute: no Job
    // for the minute the CronJob was created in.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(now() < boundary, "the scene took a minute to start");
    let listed = jobs.list(&Default::default()).await.unwrap().items;
    assert!(listed.is_empty(), "a Job before its time: {listed:?}");
    // The next minute's Job comes from the wake alone.
    let job = eventually("the next minute's Job", Duration::from_secs(90), || async {
        jobs.list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .next()
    })
    .await;
    let name = job.metadata.name.clone().unwrap();
    let at =
        job.metadata.annotations.as_ref().unwrap()["batch.tutorial.kubebuilder.io/scheduled-at"]
            .clone();
    assert_eq!(
        kiln::template::time::parse(&at).unwrap().as_second(),
        boundary
    );
    assert_eq!(name, format!("tick-{boundary}"));
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("CronJob", "tick")
    );
    scene
        .until("lastScheduleTime to be that minute", cronjob_at, |c| {
            c["status"]["lastScheduleTime"] == at.as_str()
        })
        .await;
    // Within the same minute nothing more is created.
    if boundary + 60 - now() > 5 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let names: Vec<String> = jobs
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|j| j.metadata.name)
            .collect();
        assert_eq!(names, [name], "one Job per scheduled time");
    }
    scene.end().await;
}
