//! The typing pass on built-in kinds and on a CRD's schema.

use serde_json::json;

use super::*;

fn kind(group: &str, version: &str, kind: &str) -> Arc<Node> {
    builtin::kind(group, version, kind).unwrap_or_else(|| panic!("{kind}"))
}

fn shaped(node: &Node, mut object: Value) -> (Value, Vec<String>) {
    let problems = shape(&mut object, node);
    (object, problems.iter().map(ToString::to_string).collect())
}

#[test]
fn an_integer_into_a_string_field_becomes_its_text() {
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "labels": {"n": 2}},
        "data": {"replicas": 2, "on": true}});
    let (object, problems) = shaped(&kind("", "v1", "ConfigMap"), object);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(object["data"], json!({"replicas": "2", "on": "true"}));
    assert_eq!(object["metadata"]["labels"]["n"], "2");
}

#[test]
fn a_string_into_an_integer_field_becomes_the_integer_when_nothing_is_lost() {
    let object = json!({"spec": {"replicas": "3", "paused": "true",
        "template": {"spec": {"containers": [{"name": "a", "ports": [{"containerPort": "80"}]}]}}}});
    let (object, problems) = shaped(&kind("apps", "v1", "Deployment"), object);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(object["spec"]["replicas"], 3);
    assert_eq!(object["spec"]["paused"], true);
    assert_eq!(
        object["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"],
        80
    );
}

#[test]
fn what_would_lose_something_is_a_problem_at_its_path() {
    let object = json!({"spec": {"replicas": "03", "minReadySeconds": 1.5, "paused": "yes",
        "revisionHistoryLimit": 3_000_000_000_u64, "selector": "app=a"}});
    let (_, problems) = shaped(&kind("apps", "v1", "Deployment"), object);
    assert_eq!(
        problems,
        [
            "spec.replicas: expected an integer, got the string \"03\"",
            "spec.minReadySeconds: expected an integer, got 1.5: it would lose its fraction",
            "spec.paused: expected a boolean, got a string \"yes\"",
            "spec.revisionHistoryLimit: 3000000000 does not fit in a 32-bit integer",
            "spec.selector: expected a map, got a string",
        ]
    );
}

#[test]
fn an_unknown_field_is_a_problem_with_the_nearest_name() {
    let object = json!({"spec": {"replicsa": 2, "template": {"spec": {"containers": [{"name": "a", "port": 80}]}}}});
    let (_, problems) = shaped(&kind("apps", "v1", "Deployment"), object);
    assert_eq!(
        problems,
        [
            "spec.replicsa: unknown field `replicsa` (did you mean `replicas`?): the API server refuses a field its kind does not have",
            "spec.template.spec.containers[0].port: unknown field `port` (did you mean `ports`?): the API server refuses a field its kind does not have",
        ]
    );
}

#[test]
fn int_or_string_quantity_and_open_fields_are_respected() {
    let object = json!({"spec": {"ports": [{"port": 80, "targetPort": "http"}, {"port": "81", "targetPort": 8081}]}});
    let (object, problems) = shaped(&kind("", "v1", "Service"), object);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        object["spec"]["ports"][1],
        json!({"port": 81, "targetPort": 8081})
    );
    let pod = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": 1, "memory": "1Gi"}}}]}});
    let (object, problems) = shaped(&kind("", "v1", "Pod"), pod);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(
        object["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        1
    );
    let crd = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "size": {"type": "integer"},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "port": {"x-kubernetes-int-or-string": true}}}}});
    let node = Node::from_openapi(&crd);
    let object = json!({"spec": {"size": "2", "free": {"any": {"thing": 1}}, "port": "http"}});
    let (object, problems) = shaped(&node, object);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(object["spec"]["size"], 2);
    let (_, problems) = shaped(&node, json!({"spec": {"sise": 1}}));
    assert_eq!(problems.len(), 1, "{problems:?}");
}

#[test]
fn a_kind_without_schema_is_unchecked_and_a_crd_given_is_typed() {
    assert!(
        Typing::of("example.com", "v1", "Thing", &[])
            .node()
            .is_none()
    );
    let crd = json!({"kind": "CustomResourceDefinition", "metadata": {"name": "things.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Thing"}, "versions": [{"name": "v1",
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}}}]}});
    assert!(
        Typing::of("example.com", "v1", "Thing", &[crd])
            .node()
            .is_some()
    );
    assert!(Typing::of("apps", "v1", "Deployment", &[]).node().is_some());
}
