use serde_json::json;

use super::*;

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "w", "namespace": "ns", "labels": {"a": "b"}},
        "spec": {
            "replicas": 2,
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
            "strategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": {"app": "w"}},
            "template": {
                "metadata": {"labels": {"app": "w"}},
                "spec": {
                    "containers": [{"name": "app", "image": "i", "imagePullPolicy": "Always"}],
                    "dnsPolicy": "ClusterFirst"
                }
            }
        },
        "status": {"readyReplicas": 2, "replicas": 2, "conditions": [{"type": "Available"}]}
    })
}

/// The bench's Deployment template, as a rule writes it.
fn template() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "{{ self.metadata.name }}"},
        "spec": {
            "replicas": "{{ self.spec.replicas }}",
            "selector": {"matchLabels": {"app": "{{ self.metadata.name }}"}},
            "template": {
                "metadata": {"labels": {"app": "{{ self.metadata.name }}"}},
                "spec": {"containers": [{"name": "app", "image": "{{ self.spec.image }}"}]}
            }
        }
    })
}

#[test]
fn keeps_what_the_template_sets_and_the_rule_reads_and_drops_the_rest() {
    let mut p = Projection::identity();
    p.keep_set_by(&template());
    p.keep_read("child.status.readyReplicas", "child");
    p.keep_read("child.spec.replicas", "child");
    let mut d = deployment();
    p.apply(&mut d);
    assert_eq!(
        d,
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "w", "namespace": "ns", "labels": {"a": "b"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "w"}},
                "template": {
                    "metadata": {"labels": {"app": "w"}},
                    // Of a list of maps, in each item the keys the items set.
                    "spec": {"containers": [{"name": "app", "image": "i"}]}
                }
            },
            "status": {"readyReplicas": 2}
        })
    );
}

#[test]
fn an_expression_in_place_of_a_map_keeps_the_whole_map() {
    let mut p = Projection::identity();
    p.keep_set_by(
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "data": "{{ self.spec.config }}"}),
    );
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "data": {"k": "v", "other": "x"}, "binaryData": {"b": "AA=="}});
    p.apply(&mut cm);
    assert_eq!(cm["data"], json!({"k": "v", "other": "x"}));
    assert!(cm.get("binaryData").is_none());
}

#[test]
fn a_reference_cut_short_keeps_everything_under_what_is_known() {
    let mut p = Projection::identity();
    // `children.svc` alone (passed whole to a filter): the whole object.
    p.keep_read("children.svc", "children.svc");
    assert!(p.keeps_kilns_whole());
    let mut p = Projection::identity();
    // `children.svc.spec[key]`: minijinja reports `children.svc.spec`.
    p.keep_read("children.svc.spec", "children.svc");
    let mut s = json!({"apiVersion": "v1", "kind": "Service", "metadata": {},
            "spec": {"a": 1, "b": {"c": 2}}, "status": {"x": 1}});
    p.apply(&mut s);
    assert_eq!(s["spec"], json!({"a": 1, "b": {"c": 2}}));
    assert!(s.get("status").is_none());
}

#[test]
fn reading_every_child_or_related_object_whole_keeps_them_whole() {
    // `children | tojson` or `children[name]`: minijinja names `children`.
    let mut p = Projection::identity();
    p.keep_read("children", "children.svc");
    assert!(p.keeps_kilns_whole());
    let mut p = Projection::identity();
    p.keep_read("related", "related.creds");
    assert!(p.keeps_kilns_whole());
    // A name that merely starts the same is someone else.
    let mut p = Projection::identity();
    p.keep_read("child", "children.svc");
    assert_eq!(p, Projection::identity());
}

#[test]
fn references_to_other_objects_are_ignored() {
    let mut p = Projection::identity();
    p.keep_read("children.deploymentx.status", "children.deployment");
    p.keep_read("self.spec", "children.deployment");
    assert_eq!(p, Projection::identity());
}

#[test]
fn only_identity_when_nothing_is_set_or_read() {
    let mut d = deployment();
    Projection::identity().apply(&mut d);
    assert_eq!(
        d,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "w", "namespace": "ns", "labels": {"a": "b"}}})
    );
    let mut whole = deployment();
    Projection::everything().apply(&mut whole);
    assert_eq!(whole, deployment());
}

#[test]
fn the_union_over_rules_keeps_what_any_of_them_needs_and_says_when_to_relist() {
    let mut a = Projection::identity();
    a.keep_path(&["status", "readyReplicas"]);
    let mut b = Projection::identity();
    b.keep_path(&["status"]);
    b.keep_path(&["spec", "replicas"]);
    let mut both = a.clone();
    both.union(&b);
    assert!(both.covers(&a) && both.covers(&b));
    // A reloaded rule that starts reading `status` whole needs a re-list.
    assert!(!a.covers(&b));
    assert!(b.covers(&a));
    assert!(Projection::everything().covers(&both));
    assert!(!both.covers(&Projection::everything()));
    let mut d = deployment();
    both.apply(&mut d);
    assert_eq!(d["status"]["conditions"][0]["type"], "Available");
    assert_eq!(d["spec"], json!({"replicas": 2}));
}
