use serde_json::json;

use super::*;

fn rule_from(text: &str) -> Rule {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.yaml");
    std::fs::write(&file, text).unwrap();
    let mut set = crate::rules::load(&[file]).unwrap_or_else(|d| panic!("{}", d[0]));
    std::sync::Arc::into_inner(set.rules.remove(0)).unwrap()
}

fn of<'a>(all: &'a [(Gvk, Projection)], kind: &str) -> &'a Projection {
    &all.iter().find(|(g, _)| g.kind == kind).unwrap().1
}

#[test]
fn the_bench_rule_keeps_its_primary_whole_and_of_the_rest_what_it_sets_and_reads() {
    let rule = rule_from(include_str!("../../../../tests/bench/webapp.yaml"));
    let all = of_rule(&rule);
    assert_eq!(all.len(), 5);
    assert!(of(&all, "WebApp").is_everything());
    let mut d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"},
        "spec": {"replicas": 1, "revisionHistoryLimit": 10, "strategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": {"app.kubernetes.io/name": "w"}},
            "template": {"metadata": {"labels": {"x": "y", "app.kubernetes.io/name": "w"},
                    "annotations": {"a": "b", "kiln.dev/config-hash": "h"}},
                "spec": {"containers": [], "dnsPolicy": "ClusterFirst", "schedulerName": "default"}}},
        "status": {"readyReplicas": 1, "replicas": 1, "conditions": []}
    });
    of(&all, "Deployment").apply(&mut d);
    assert_eq!(
        d["spec"],
        json!({"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": "w"}},
                // Of a map the template writes key by key, only those keys.
                "template": {"metadata": {"labels": {"app.kubernetes.io/name": "w"},
                        "annotations": {"kiln.dev/config-hash": "h"}},
                    "spec": {"containers": []}}})
    );
    // Read by readyWhen and by the status field `readyReplicas`.
    assert_eq!(d["status"], json!({"readyReplicas": 1}));
    let mut s = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "w"},
            "spec": {"ports": [], "selector": {}, "clusterIP": "10.0.0.1", "type": "ClusterIP"},
            "status": {"loadBalancer": {}}});
    of(&all, "Service").apply(&mut s);
    // No `readyWhen`: its type and status are kept, to judge its
    // readiness by kind (a LoadBalancer waits for its address).
    assert_eq!(
        s["spec"],
        json!({"ports": [], "selector": {}, "type": "ClusterIP"})
    );
    assert_eq!(s["status"], json!({"loadBalancer": {}}));
    // The Secret: templates read `related.credentials.data`.
    let mut secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "type": "Opaque", "data": {"password": "cA=="}});
    of(&all, "Secret").apply(&mut secret);
    assert_eq!(secret.get("type"), None);
    assert_eq!(secret["data"]["password"], "cA==");
}

fn object(labels: Value, rest: Value) -> DynamicObject {
    let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ns", "labels": labels}});
    o.as_object_mut()
        .unwrap()
        .extend(rest.as_object().unwrap().clone());
    serde_json::from_value(o).unwrap()
}

#[test]
fn of_a_child_kind_objects_kiln_did_not_make_keep_only_their_identity() {
    let rule = rule_from(include_str!("../../../../tests/bench/webapp.yaml"));
    let all = of_rule(&rule);
    let big = json!({"data": {"blob": "x".repeat(1000)}});
    // kiln's ConfigMap: its template sets `data`.
    let mut ours = object(json!({"kiln.dev/rule": "webapp"}), big.clone());
    of(&all, "ConfigMap").apply_to(&mut ours);
    assert_eq!(ours.data["data"]["blob"].as_str().map(str::len), Some(1000));
    // Anyone else's: its name, labels and owners, nothing more.
    let mut theirs = object(json!({"app": "other"}), big.clone());
    of(&all, "ConfigMap").apply_to(&mut theirs);
    assert_eq!(theirs.data, json!({}));
    assert_eq!(theirs.metadata.name.as_deref(), Some("c"));
    // A watched kind keeps what templates read of anyone's object.
    let mut secret = object(
        json!({}),
        json!({"data": {"password": "cA=="}, "type": "Opaque"}),
    );
    of(&all, "Secret").apply_to(&mut secret);
    assert_eq!(secret.data, json!({"data": {"password": "cA=="}}));
    // A kind that is a child here and watched by another rule keeps of
    // anyone's what the watch reads.
    let mut watched = Projection::identity();
    watched.keep_path(&["data"]);
    let mut both = of(&all, "ConfigMap").clone();
    both.union(&watched.of_anyone());
    let mut theirs = object(json!({}), big);
    both.apply_to(&mut theirs);
    assert_eq!(
        theirs.data["data"]["blob"].as_str().map(str::len),
        Some(1000)
    );
    assert!(
        !of(&all, "ConfigMap").covers(&both),
        "the union needs a re-list"
    );
}

#[test]
fn a_status_field_reading_a_child_whole_keeps_it_whole() {
    let text = include_str!("../../../../tests/bench/webapp.yaml").replace(
        "children.deployment.status.readyReplicas | default(0)",
        "children.service | tojson | length",
    );
    let all = of_rule(&rule_from(&text));
    assert!(of(&all, "Service").keeps_kilns_whole());
    assert!(!of(&all, "Deployment").keeps_kilns_whole());
}

#[test]
fn a_childs_creation_timestamp_is_dropped_unless_a_rule_reads_it() {
    let stamped = |kind: &str, labels: Value| {
        let mut o = object(labels, json!({}));
        o.types = Some(kube::api::TypeMeta {
            api_version: "v1".into(),
            kind: kind.into(),
        });
        o.metadata.creation_timestamp =
            Some(serde_json::from_value(json!("2026-11-23T18:44:55Z")).unwrap());
        o
    };
    let rule = rule_from(include_str!("../../../../tests/bench/webapp.yaml"));
    let all = of_rule(&rule);
    // Children, kiln's or anyone's: the engine never reads it.
    for labels in [json!({"kiln.dev/rule": "webapp"}), json!({})] {
        let mut cm = stamped("ConfigMap", labels);
        of(&all, "ConfigMap").apply_to(&mut cm);
        assert_eq!(cm.metadata.creation_timestamp, None);
        assert_eq!(cm.metadata.name.as_deref(), Some("c"));
    }
    let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "w", "creationTimestamp": "2026-11-23T18:44:55Z", "generation": 1}});
    of(&all, "Deployment").apply(&mut d);
    assert_eq!(d["metadata"], json!({"name": "w", "generation": 1}));
    // The primary and watched kinds keep it: templates read them freely.
    for kind in ["WebApp", "Secret"] {
        let mut o = stamped(kind, json!({}));
        of(&all, kind).apply_to(&mut o);
        assert!(o.metadata.creation_timestamp.is_some(), "{kind}");
    }
    // A rule that reads it of a child keeps it, and a cache filled
    // without it is re-listed for that rule.
    for read in [
        "children.service.metadata.creationTimestamp",
        "children.service.metadata",
        "children.service",
    ] {
        let text = include_str!("../../../../tests/bench/webapp.yaml").replace(
            "children.deployment.status.readyReplicas | default(0)",
            &format!("{read} | tojson | length"),
        );
        let reading = of_rule(&rule_from(&text));
        let mut svc = stamped("Service", json!({"kiln.dev/rule": "webapp"}));
        of(&reading, "Service").apply_to(&mut svc);
        assert!(svc.metadata.creation_timestamp.is_some(), "{read}");
        assert!(
            !of(&all, "Service").covers(of(&reading, "Service")),
            "{read}"
        );
    }
}

#[test]
fn of_a_list_of_maps_each_item_keeps_the_keys_any_item_sets_and_satisfied_is_unchanged() {
    let rule = rule_from(include_str!("../../../../tests/bench/webapp.yaml"));
    let all = of_rule(&rule);
    let live: Value = serde_json::from_str(include_str!(
        "../../../../tests/fixtures/projection/deployment_live.json"
    ))
    .unwrap();
    let mut kept = live.clone();
    of(&all, "Deployment").apply(&mut kept);
    assert_eq!(
        kept["spec"]["template"]["spec"]["containers"],
        json!([{"env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"key": "password", "name": "credentials"}}}],
                "envFrom": [{"configMapRef": {"name": "app-00001-config"}}],
                "image": "nginx:1.27", "name": "app",
                "ports": [{"containerPort": 8080, "name": "http"}]}])
    );
    // What kiln renders is satisfied by the projected object exactly
    // when by the whole one, whatever changed in a list.
    let desired = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "nginx:1.27",
             "ports": [{"name": "http", "containerPort": 8080}],
             "envFrom": [{"configMapRef": {"name": "app-00001-config"}}],
             "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "credentials", "key": "password"}}}]}]}}}});
    let variants = [
        desired.clone(),
        json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.28"}]}}}}),
        json!({"spec": {"template": {"spec": {"containers": [{"name": "app"}, {"name": "side"}]}}}}),
        json!({"spec": {"template": {"spec": {"containers": []}}}}),
        json!({"spec": {"template": {"spec": {"containers": [{"name": "app",
                "ports": [{"name": "http", "containerPort": 8080}, {"name": "metrics", "containerPort": 9090}]}]}}}}),
    ];
    for d in &variants {
        assert_eq!(
            crate::engine::decision::diff::satisfied(&kept, d),
            crate::engine::decision::diff::satisfied(&live, d),
            "{d}"
        );
    }
    assert!(crate::engine::decision::diff::satisfied(&kept, &desired));
    // Lists of scalars, of templated items, or empty: kept whole.
    let mut p = Projection::identity();
    p.keep_set_by(&json!({"spec": {"args": ["a"], "empty": [], "mixed": [{"a": 1}, "b"]}}));
    let mut o = json!({"spec": {"args": ["a", "x"], "empty": [{"k": 1}], "mixed": [{"a": 1, "z": 2}, "b"]}});
    let whole = o.clone();
    p.apply(&mut o);
    assert_eq!(o, whole);
    // A rule reading into the list keeps it whole.
    let mut read = of(&all, "Deployment").clone();
    read.keep_read("child.spec.template.spec.containers", "child");
    let mut whole = live.clone();
    read.apply(&mut whole);
    assert_eq!(
        whole["spec"]["template"]["spec"]["containers"],
        live["spec"]["template"]["spec"]["containers"]
    );
    assert!(!of(&all, "Deployment").covers(&read), "widening re-lists");
    assert!(read.covers(of(&all, "Deployment")));
}

#[test]
fn a_list_the_server_lengthened_converges_when_what_it_stored_is_cut_as_the_cache_cuts() {
    use crate::engine::decision::diff::{converged, normalized};
    let mut p = Projection::identity();
    p.keep_set_by(
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"},
            "spec": {"containers": [{"name": "app", "image": "i"}]}}),
    );
    let meta = json!({"name": "w", "annotations": {"kiln.dev/applied": "h"}});
    let sent = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"containers": [{"name": "app", "image": "i"}]}});
    // A mutating webhook added a sidecar; the server filled defaults.
    let stored = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"containers": [
                {"name": "app", "image": "i", "imagePullPolicy": "IfNotPresent"},
                {"name": "side", "image": "s", "imagePullPolicy": "IfNotPresent"}]}});
    let mut cached = stored.clone();
    p.apply(&mut cached);
    let mut cut = stored.clone();
    p.apply(&mut cut);
    let known = normalized(&sent, &cut).unwrap();
    assert!(
        converged(&cached, &sent, Some(&known)),
        "0 writes at steady state"
    );
    // What the controller did before cutting: a write loop.
    let whole = normalized(&sent, &stored).unwrap();
    assert!(!converged(&cached, &sent, Some(&whole)));
}

#[test]
fn history_keeps_what_its_classes_read_of_a_child_and_its_creation_time() {
    let rule = rule_from(
        "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspec:\n  for: {apiVersion: demo.kiln.dev/v1, kind: CronJob}\n  children:\n    - id: jobs\n      readyWhen: exists\n      template:\n        apiVersion: batch/v1\n        kind: Job\n        metadata: {name: \"{{ self.metadata.name }}-1\"}\n        spec: {template: {spec: {containers: []}}}\n      history:\n        - {when: child.status.succeeded | default(0) > 0, keep: 3}\n        - {keep: 1}\n",
    );
    let all = of_rule(&rule);
    let mut job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "c-1", "creationTimestamp": "2026-05-17T09:15:00Z",
            "labels": {crate::render::RULE_LABEL: "r"}},
        "spec": {"template": {"spec": {"containers": []}}, "parallelism": 1},
        "status": {"succeeded": 1, "active": 0}
    });
    of(&all, "Job").apply(&mut job);
    assert_eq!(job["status"], json!({"succeeded": 1}), "{job}");
    assert_eq!(
        job["metadata"]["creationTimestamp"], "2026-05-17T09:15:00Z",
        "history keeps the newest by creation time"
    );
}
