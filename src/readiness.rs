//! Readiness by kind: whether a live child without `readyWhen` is ready,
//! judged as kstatus judges the common kinds (the rules Flux and Helm use):
//! the controller has observed the current generation, the rollout is
//! complete and what it runs is available.
//!
//! | kind | ready when |
//! |---|---|
//! | Deployment | generation observed; `updatedReplicas`, `replicas` and `availableReplicas` are `spec.replicas`; no `ProgressDeadlineExceeded` |
//! | StatefulSet | generation observed; `readyReplicas` ≥ `spec.replicas`; rolling updates: `updatedReplicas` ≥ `spec.replicas` − partition and, without partition, `currentRevision` = `updateRevision` |
//! | DaemonSet | generation observed; `updatedNumberScheduled` and `numberAvailable` ≥ `desiredNumberScheduled` |
//! | ReplicaSet | generation observed; `availableReplicas` ≥ `spec.replicas` |
//! | Job | condition `Complete` is `True` |
//! | Pod | phase `Succeeded`, or `Running` with condition `Ready` `True` |
//! | PersistentVolumeClaim | phase `Bound` |
//! | Service | type `LoadBalancer`: `status.loadBalancer.ingress` is not empty; other types: it exists |
//! | any other | a `Ready` condition: it is `True` and, where given, `observedGeneration` is the current generation; no `Ready` condition: it exists |
//!
//! An object being deleted is never ready. Pure logic, no API calls.

use serde_json::Value;

use crate::rules::Gvk;

/// Why a live object is not ready, for people (`Ok` when it is).
pub type Judgement = Result<(), String>;

/// Whether a `readyWhen` is the word `exists`: ready once it exists.
pub fn is_exists(ready_when: &str) -> bool {
    ready_when.trim() == "exists"
}

/// Judges `live`, an object of kind `gvk`, by the rules of its kind.
pub fn judge(gvk: &Gvk, live: &Value) -> Judgement {
    if !live["metadata"]["deletionTimestamp"].is_null() {
        return Err("being deleted".into());
    }
    match (gvk.group.as_str(), gvk.kind.as_str()) {
        ("apps", "Deployment") => deployment(live),
        ("apps", "StatefulSet") => stateful_set(live),
        ("apps", "DaemonSet") => daemon_set(live),
        ("apps", "ReplicaSet") => replica_set(live),
        ("batch", "Job") => job(live),
        ("", "Pod") => pod(live),
        ("", "PersistentVolumeClaim") => phase(live, "Bound"),
        ("", "Service") => service(live),
        _ => by_ready_condition(live),
    }
}

/// The fields of an object of kind `gvk` that [`judge`] reads, beyond its
/// metadata (which is always kept): what the engine's caches must keep.
pub fn reads(gvk: &Gvk) -> &'static [&'static [&'static str]] {
    match (gvk.group.as_str(), gvk.kind.as_str()) {
        ("apps", "StatefulSet") => &[
            &["status"],
            &["spec", "replicas"],
            &["spec", "updateStrategy"],
        ],
        ("apps", "Deployment" | "DaemonSet" | "ReplicaSet") => {
            &[&["status"], &["spec", "replicas"]]
        }
        ("", "Service") => &[&["status"], &["spec", "type"]],
        _ => &[&["status"]],
    }
}

fn int(v: &Value) -> Option<i64> {
    v.as_i64()
}

/// The status counter `field`, 0 when absent (controllers omit zeros).
fn count(live: &Value, field: &str) -> i64 {
    int(&live["status"][field]).unwrap_or(0)
}

/// Whether the controller has seen the object's current generation.
fn generation_observed(live: &Value) -> Judgement {
    let generation = int(&live["metadata"]["generation"]);
    let observed = int(&live["status"]["observedGeneration"]);
    match (generation, observed) {
        (Some(g), Some(o)) if o >= g => Ok(()),
        (None, _) => Ok(()),
        (Some(g), Some(o)) => Err(format!("generation {g} not observed yet (observed {o})")),
        (Some(g), None) => Err(format!("generation {g} not observed yet")),
    }
}

/// `spec.replicas`, 1 when absent (the API server's default).
fn desired(live: &Value) -> i64 {
    int(&live["spec"]["replicas"]).unwrap_or(1)
}

fn at_least(live: &Value, field: &str, want: i64) -> Judgement {
    let got = count(live, field);
    if got >= want {
        Ok(())
    } else {
        Err(format!("{got} of {want} {}", words(field)))
    }
}

/// `availableReplicas` → "available", for messages.
fn words(field: &str) -> &str {
    match field {
        "updatedReplicas" | "updatedNumberScheduled" => "updated",
        "availableReplicas" | "numberAvailable" => "available",
        "readyReplicas" => "ready",
        other => other,
    }
}

/// The condition `type_` of the object, if it has one.
fn condition<'v>(live: &'v Value, type_: &str) -> Option<&'v Value> {
    live["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn deployment(live: &Value) -> Judgement {
    generation_observed(live)?;
    if let Some(p) = condition(live, "Progressing")
        && p["reason"] == "ProgressDeadlineExceeded"
    {
        return Err("progress deadline exceeded".into());
    }
    let want = desired(live);
    at_least(live, "updatedReplicas", want)?;
    let old = count(live, "replicas") - count(live, "updatedReplicas");
    if old > 0 {
        return Err(format!("{old} old replicas pending termination"));
    }
    at_least(live, "availableReplicas", want)
}

fn stateful_set(live: &Value) -> Judgement {
    generation_observed(live)?;
    let want = desired(live);
    at_least(live, "readyReplicas", want)?;
    let strategy = &live["spec"]["updateStrategy"];
    if strategy["type"] == "OnDelete" {
        return Ok(());
    }
    let partition = int(&strategy["rollingUpdate"]["partition"]).unwrap_or(0);
    at_least(live, "updatedReplicas", (want - partition).max(0))?;
    let status = &live["status"];
    if partition == 0
        && !status["updateRevision"].is_null()
        && status["currentRevision"] != status["updateRevision"]
    {
        return Err("rolling update in progress".into());
    }
    Ok(())
}

fn daemon_set(live: &Value) -> Judgement {
    generation_observed(live)?;
    if live["status"]["desiredNumberScheduled"].is_null() {
        return Err("not scheduled yet".into());
    }
    let want = count(live, "desiredNumberScheduled");
    at_least(live, "updatedNumberScheduled", want)?;
    at_least(live, "numberAvailable", want)
}

fn replica_set(live: &Value) -> Judgement {
    generation_observed(live)?;
    at_least(live, "availableReplicas", desired(live))
}

fn job(live: &Value) -> Judgement {
    let holds = |t: &str| condition(live, t).is_some_and(|c| c["status"] == "True");
    if holds("Complete") {
        Ok(())
    } else if holds("Failed") {
        Err("failed".into())
    } else {
        Err("not complete".into())
    }
}

fn pod(live: &Value) -> Judgement {
    match live["status"]["phase"].as_str() {
        Some("Succeeded") => Ok(()),
        Some("Running") if condition(live, "Ready").is_some_and(|c| c["status"] == "True") => {
            Ok(())
        }
        Some(phase) => Err(format!("phase {phase}, not ready")),
        None => Err("no phase yet".into()),
    }
}

fn phase(live: &Value, want: &str) -> Judgement {
    match live["status"]["phase"].as_str() {
        Some(p) if p == want => Ok(()),
        Some(p) => Err(format!("phase {p}, not {want}")),
        None => Err(format!("no phase yet, not {want}")),
    }
}

fn service(live: &Value) -> Judgement {
    if live["spec"]["type"] != "LoadBalancer" {
        return Ok(());
    }
    match live["status"]["loadBalancer"]["ingress"].as_array() {
        Some(ingress) if !ingress.is_empty() => Ok(()),
        _ => Err("no load balancer ingress yet".into()),
    }
}

fn by_ready_condition(live: &Value) -> Judgement {
    let Some(ready) = condition(live, "Ready") else {
        return Ok(());
    };
    if !live["status"]["observedGeneration"].is_null() {
        generation_observed(live)?;
    }
    let generation = int(&live["metadata"]["generation"]);
    if let (Some(g), Some(o)) = (generation, int(&ready["observedGeneration"]))
        && o < g
    {
        return Err(format!("Ready is of generation {o}, not {g}"));
    }
    if ready["status"] == "True" {
        Ok(())
    } else {
        let message = ready["message"].as_str().unwrap_or_default();
        Err(format!(
            "Ready is {}{}{message}",
            ready["status"].as_str().unwrap_or("unknown"),
            if message.is_empty() { "" } else { ": " }
        ))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn gvk(api_version: &str, kind: &str) -> Gvk {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        Gvk {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }

    fn deploy(replicas: i64, status: Value) -> Value {
        json!({"metadata": {"generation": 2}, "spec": {"replicas": replicas}, "status": status})
    }

    #[test]
    fn a_deployment_is_ready_once_its_rollout_is_complete_and_available() {
        let g = gvk("apps/v1", "Deployment");
        let done = json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2});
        assert_eq!(judge(&g, &deploy(2, done)), Ok(()));
        let unobserved = json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2});
        assert!(
            judge(&g, &deploy(2, unobserved))
                .unwrap_err()
                .contains("generation 2")
        );
        let rolling = json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1, "availableReplicas": 2});
        assert_eq!(judge(&g, &deploy(2, rolling)), Err("1 of 2 updated".into()));
        let old = json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 2, "availableReplicas": 2});
        assert!(
            judge(&g, &deploy(2, old))
                .unwrap_err()
                .contains("pending termination")
        );
        let unavailable = json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2});
        assert_eq!(
            judge(&g, &deploy(2, unavailable)),
            Err("0 of 2 available".into())
        );
        let stuck = json!({"observedGeneration": 2, "updatedReplicas": 2, "availableReplicas": 2,
            "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]});
        assert!(judge(&g, &deploy(2, stuck)).is_err());
        // Scaled to zero and observed: nothing left to roll out.
        assert_eq!(
            judge(&g, &deploy(0, json!({"observedGeneration": 2}))),
            Ok(())
        );
        // Created, no status yet.
        assert!(judge(&g, &json!({"metadata": {"generation": 1}, "spec": {}})).is_err());
    }

    #[test]
    fn a_stateful_set_needs_ready_and_updated_replicas_and_one_revision() {
        let g = gvk("apps/v1", "StatefulSet");
        let sts = |strategy: Value, status: Value| json!({"metadata": {"generation": 1}, "spec": {"replicas": 3, "updateStrategy": strategy}, "status": status});
        let rolling = json!({"type": "RollingUpdate"});
        let done = json!({"observedGeneration": 1, "readyReplicas": 3, "updatedReplicas": 3, "currentRevision": "a", "updateRevision": "a"});
        assert_eq!(judge(&g, &sts(rolling.clone(), done)), Ok(()));
        let unready = json!({"observedGeneration": 1, "readyReplicas": 2, "updatedReplicas": 3});
        assert_eq!(
            judge(&g, &sts(rolling.clone(), unready)),
            Err("2 of 3 ready".into())
        );
        let revisions = json!({"observedGeneration": 1, "readyReplicas": 3, "updatedReplicas": 3, "currentRevision": "a", "updateRevision": "b"});
        assert!(judge(&g, &sts(rolling, revisions.clone())).is_err());
        let partitioned = json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 2}});
        let part = json!({"observedGeneration": 1, "readyReplicas": 3, "updatedReplicas": 1, "currentRevision": "a", "updateRevision": "b"});
        assert_eq!(judge(&g, &sts(partitioned, part)), Ok(()));
        assert_eq!(
            judge(&g, &sts(json!({"type": "OnDelete"}), revisions)),
            Ok(())
        );
    }

    #[test]
    fn a_daemon_set_needs_every_scheduled_pod_updated_and_available() {
        let g = gvk("apps/v1", "DaemonSet");
        let ds = |status: Value| json!({"metadata": {"generation": 1}, "status": status});
        assert!(judge(&g, &ds(json!({"observedGeneration": 1}))).is_err());
        let done = json!({"observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberAvailable": 2});
        assert_eq!(judge(&g, &ds(done)), Ok(()));
        let half = json!({"observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberAvailable": 1});
        assert_eq!(judge(&g, &ds(half)), Err("1 of 2 available".into()));
    }

    #[test]
    fn a_replica_set_needs_its_replicas_available() {
        let g = gvk("apps/v1", "ReplicaSet");
        let rs = |available: i64| {
            json!({"metadata": {"generation": 1}, "spec": {"replicas": 2},
                "status": {"observedGeneration": 1, "availableReplicas": available}})
        };
        assert_eq!(judge(&g, &rs(2)), Ok(()));
        assert_eq!(judge(&g, &rs(1)), Err("1 of 2 available".into()));
    }

    #[test]
    fn a_job_is_ready_once_complete() {
        let g = gvk("batch/v1", "Job");
        let job = |t: &str| json!({"status": {"conditions": [{"type": t, "status": "True"}]}});
        assert_eq!(judge(&g, &job("Complete")), Ok(()));
        assert_eq!(judge(&g, &job("Failed")), Err("failed".into()));
        assert!(judge(&g, &json!({"status": {"active": 1}})).is_err());
    }

    #[test]
    fn a_pod_is_ready_when_running_and_ready_or_succeeded() {
        let g = gvk("v1", "Pod");
        let pod = |phase: &str, ready: &str| json!({"status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}});
        assert_eq!(judge(&g, &pod("Running", "True")), Ok(()));
        assert!(judge(&g, &pod("Running", "False")).is_err());
        assert!(judge(&g, &pod("Pending", "False")).is_err());
        assert_eq!(judge(&g, &pod("Succeeded", "False")), Ok(()));
        assert!(judge(&g, &json!({})).is_err());
    }

    #[test]
    fn a_claim_is_ready_once_bound() {
        let g = gvk("v1", "PersistentVolumeClaim");
        assert_eq!(judge(&g, &json!({"status": {"phase": "Bound"}})), Ok(()));
        assert_eq!(
            judge(&g, &json!({"status": {"phase": "Pending"}})),
            Err("phase Pending, not Bound".into())
        );
    }

    #[test]
    fn only_a_load_balancer_service_waits_for_its_address() {
        let g = gvk("v1", "Service");
        assert_eq!(judge(&g, &json!({"spec": {"type": "ClusterIP"}})), Ok(()));
        assert_eq!(judge(&g, &json!({"spec": {}})), Ok(()));
        let lb = |ingress: Value| json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": ingress}}});
        assert!(judge(&g, &lb(json!([]))).is_err());
        assert_eq!(judge(&g, &lb(json!([{"ip": "10.0.0.1"}]))), Ok(()));
    }

    #[test]
    fn any_kind_with_a_ready_condition_is_judged_by_it_at_the_current_generation() {
        let g = gvk("example.com/v1", "Database");
        let db = |status: Value| json!({"metadata": {"generation": 3}, "status": status});
        let ready = json!([{"type": "Ready", "status": "True"}]);
        assert_eq!(
            judge(
                &g,
                &db(json!({"observedGeneration": 3, "conditions": ready}))
            ),
            Ok(())
        );
        assert!(
            judge(
                &g,
                &db(json!({"observedGeneration": 2, "conditions": ready}))
            )
            .is_err()
        );
        let stale = json!([{"type": "Ready", "status": "True", "observedGeneration": 2}]);
        assert!(judge(&g, &db(json!({"conditions": stale}))).is_err());
        let no = json!([{"type": "Ready", "status": "False", "message": "disk full"}]);
        assert_eq!(
            judge(&g, &db(json!({"conditions": no}))),
            Err("Ready is False: disk full".into())
        );
        // No Ready condition: ready once it exists (a ConfigMap, a Secret).
        assert_eq!(judge(&gvk("v1", "ConfigMap"), &json!({"data": {}})), Ok(()));
        assert_eq!(judge(&g, &db(json!({"observedGeneration": 1}))), Ok(()));
    }

    #[test]
    fn an_object_being_deleted_is_not_ready() {
        let cm = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}});
        assert!(judge(&gvk("v1", "ConfigMap"), &cm).is_err());
    }
}
