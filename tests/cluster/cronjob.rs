//! The kubebuilder book's CronJob, ported (`examples/ported/cronjob/`), run
//! by the engine: nothing but `spec.requeue.at` wakes it at the next minute,
//! where it creates that minute's Job, once, and records it in the status.

use std::time::Duration;

use kube::api::DynamicObject;
use serde_json::{Value, json};

use crate::support::scene::{CONVERGE, Scene};
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

/// The Jobs in the scene's namespace, by scheduled time (seconds since 1970).
async fn jobs(scene: &Scene) -> Vec<(i64, DynamicObject)> {
    let api = scene.api("batch/v1", "Job").await;
    let mut out: Vec<(i64, DynamicObject)> = api
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|job| {
            let at = job.metadata.annotations.as_ref().unwrap()
                ["batch.tutorial.kubebuilder.io/scheduled-at"]
                .clone();
            (kiln::template::time::parse(&at).unwrap().as_second(), job)
        })
        .collect();
    out.sort_by_key(|(at, _)| *at);
    out
}

/// Waits for the Job scheduled for `at` (or, with `None`, the first one).
async fn job_for(scene: &Scene, at: Option<i64>) -> (i64, DynamicObject) {
    eventually("the minute's Job", Duration::from_secs(100), || async {
        jobs(scene)
            .await
            .into_iter()
            .find(|(t, _)| at.is_none_or(|a| a == *t))
    })
    .await
}

/// Waits until the CronJob's status says it last ran at `at`.
async fn last_scheduled(scene: &Scene, at: i64) {
    let at = jiff::Timestamp::from_second(at).unwrap().to_string();
    support::until("lastScheduleTime to be that minute", CONVERGE, || async {
        let cronjob = scene
            .get("batch.tutorial.kubebuilder.io/v1", "CronJob", "tick")
            .await
            .unwrap_or_default();
        if cronjob["status"]["lastScheduleTime"] == at.as_str() {
            Ok(())
        } else {
            Err(format!("want {at}; status: {}", cronjob["status"]))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cronjob_wakes_at_each_scheduled_minute_and_creates_its_job_once() {
    let scene = Scene::new("cronjob")
        .await
        .with_crds("examples/ported/cronjob")
        .await;
    scene.apply(cronjob("tick")).await;
    let rule = support::repo_root().join("examples/ported/cronjob/rule.yaml");
    let rule = rule_from_yaml(&std::fs::read_to_string(rule).unwrap());
    let scene = scene.running(&[rule]).await;

    let (first, job) = job_for(&scene, None).await;
    assert_eq!(first % 60, 0, "a scheduled minute");
    assert_eq!(
        job.metadata.name.as_deref(),
        Some(format!("tick-{first}").as_str())
    );
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("CronJob", "tick")
    );
    last_scheduled(&scene, first).await;

    // Nothing changes after that; only the wake at the next minute (the
    // rule's requeue.at) reconciles the CronJob again, and it runs that
    // minute's Job beside the first (concurrencyPolicy: Allow).
    job_for(&scene, Some(first + 60)).await;
    last_scheduled(&scene, first + 60).await;
    let times: Vec<i64> = jobs(&scene).await.into_iter().map(|(t, _)| t).collect();
    assert_eq!(times, [first, first + 60], "one Job per scheduled time");
    scene.end().await;
}

/// Writes a Job's status as the job controller would when it succeeds (the
/// test control plane runs no job controller).
async fn complete(scene: &Scene, job: &DynamicObject) {
    let name = job.metadata.name.as_deref().unwrap();
    let now = jiff::Timestamp::now().round(jiff::Unit::Second).unwrap();
    let started = job
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_else(|| now.to_string());
    let condition = |kind: &str| {
        json!({"type": kind, "status": "True", "reason": kind, "message": "",
               "lastProbeTime": now.to_string(), "lastTransitionTime": now.to_string()})
    };
    let body = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
    "status": {
        "startTime": started,
        "completionTime": now.to_string(),
        "succeeded": 1,
        "conditions": [condition("SuccessCriteriaMet"), condition("Complete")],
    }});
    scene
        .api("batch/v1", "Job")
        .await
        .patch_status(
            name,
            &kube::api::PatchParams::apply("test-job-controller").force(),
            &kube::api::Patch::Apply(&body),
        )
        .await
        .unwrap();
}

/// Sleeps until `at` (seconds since 1970) has passed.
async fn sleep_until(at: i64) {
    let now = jiff::Timestamp::now().as_second();
    if at > now {
        tokio::time::sleep(Duration::from_secs((at - now) as u64)).await;
    }
}

/// What the kubebuilder book's CronJob does besides running each minute:
/// `Forbid` skips a run while a Job is active, a run missed by more than
/// `startingDeadlineSeconds` is skipped, and only the newest
/// `successfulJobsHistoryLimit` finished Jobs are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cronjob_forbids_overlap_skips_a_missed_deadline_and_trims_its_history() {
    let scene = Scene::new("cronjob-forbid")
        .await
        .with_crds("examples/ported/cronjob")
        .await;
    let mut tick = cronjob("tick");
    tick["spec"]["concurrencyPolicy"] = json!("Forbid");
    tick["spec"]["startingDeadlineSeconds"] = json!(10);
    tick["spec"]["successfulJobsHistoryLimit"] = json!(1);
    scene.apply(tick).await;
    let rule = support::repo_root().join("examples/ported/cronjob/rule.yaml");
    let rule = rule_from_yaml(&std::fs::read_to_string(rule).unwrap());
    let scene = scene.running(&[rule]).await;

    // The first Job stays active through the next scheduled minute: Forbid.
    let (first, first_job) = job_for(&scene, None).await;
    sleep_until(first + 60 + 15).await;
    let times: Vec<i64> = jobs(&scene).await.into_iter().map(|(t, _)| t).collect();
    assert_eq!(times, [first], "no run beside an active Job");

    // It finishes 15 s after that minute: the run it held back is past its
    // 10 s deadline, so it is skipped, not run late.
    complete(&scene, &first_job).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let times: Vec<i64> = jobs(&scene).await.into_iter().map(|(t, _)| t).collect();
    assert_eq!(
        times,
        [first],
        "a run missed by more than its deadline is skipped"
    );

    // The minute after runs; the finished first Job is kept (limit 1).
    let (second, second_job) = job_for(&scene, Some(first + 120)).await;
    last_scheduled(&scene, second).await;
    let times: Vec<i64> = jobs(&scene).await.into_iter().map(|(t, _)| t).collect();
    assert_eq!(times, [first, second], "the newest finished Job is kept");

    // When the second finishes, only the newest finished Job stays.
    complete(&scene, &second_job).await;
    support::until("history trimmed to one finished Job", CONVERGE, || async {
        let times: Vec<i64> = jobs(&scene).await.into_iter().map(|(t, _)| t).collect();
        if times.first() == Some(&second) {
            Ok(())
        } else {
            Err(format!("Jobs scheduled at {times:?}"))
        }
    })
    .await;
    scene.end().await;
}
