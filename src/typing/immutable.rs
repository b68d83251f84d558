//! Fields the API server refuses to change once set, as the kind's schema
//! says: a change of one is refused on every apply, so `kiln diff` names
//! it and validation warns when a template may change it.

use serde_json::Value;

use super::node::Node;
use super::shape::resolved;
use crate::yaml::Step;

/// Every immutable field `object` sets, with its value (outside pod
/// templates, whose pods' fields are immutable, not the template's).
pub fn fields<'v>(node: &Node, object: &'v Value) -> Vec<(Vec<Step>, &'v Value)> {
    let mut out = Vec::new();
    let Some(node) = resolved(node) else {
        return out;
    };
    for (key, value) in object.as_object().into_iter().flatten() {
        if ["apiVersion", "kind", "metadata"].contains(&key.as_str()) {
            continue;
        }
        if let Some(field) = node.properties.get(key) {
            let mut path = vec![Step::Key(key.clone())];
            walk(field, value, &mut path, &mut out);
        }
    }
    out
}

fn walk<'v>(
    node: &Node,
    value: &'v Value,
    path: &mut Vec<Step>,
    out: &mut Vec<(Vec<Step>, &'v Value)>,
) {
    if node.template {
        return;
    }
    if node.immutable {
        out.push((path.clone(), value));
        return;
    }
    let Some(node) = resolved(node) else {
        return;
    };
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let Some(field) = node.properties.get(key).or(node.additional.as_deref()) else {
                    continue;
                };
                path.push(Step::Key(key.clone()));
                walk(field, v, path, out);
                path.pop();
            }
        }
        Value::Array(items) => {
            let Some(of) = &node.items else {
                return;
            };
            for (i, item) in items.iter().enumerate() {
                path.push(Step::Index(i));
                walk(of, item, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// The value at `path` in `object`.
fn at<'v>(object: &'v Value, path: &[Step]) -> Option<&'v Value> {
    path.iter().try_fold(object, |v, step| match step {
        Step::Key(k) => v.get(k),
        Step::Index(i) => v.get(i),
    })
}

/// Whether the live value holds everything `desired` says (the API server
/// adds defaults to what was applied).
fn holds(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d
            .iter()
            .all(|(k, v)| v.is_null() || l.get(k).is_some_and(|lv| holds(v, lv))),
        (Value::Array(d), Value::Array(l)) => {
            d.len() == l.len() && d.iter().zip(l).all(|(a, b)| holds(a, b))
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (a, b) => a == b,
    }
}

/// The immutable fields a live object has set that `desired` would change.
pub fn changed(node: &Node, desired: &Value, live: &Value) -> Vec<Vec<Step>> {
    fields(node, desired)
        .into_iter()
        .filter(|(path, want)| {
            at(live, path).is_some_and(|have| !have.is_null() && !holds(want, have))
        })
        .map(|(path, _)| path)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::typing::builtin;
    use serde_json::json;

    #[test]
    fn a_changed_cluster_ip_is_immutable_a_changed_port_and_pod_template_are_not() {
        let service = builtin::kind("", "v1", "Service").expect("Service");
        let live =
            json!({"spec": {"clusterIP": "10.0.0.5", "ports": [{"port": 80, "protocol": "TCP"}]}});
        let same = json!({"spec": {"clusterIP": "10.0.0.5", "ports": [{"port": 81}]}});
        assert!(changed(&service, &same, &live).is_empty());
        let other = json!({"spec": {"clusterIP": "None"}});
        let paths: Vec<String> = changed(&service, &other, &live)
            .iter()
            .map(|p| crate::yaml::path_string(p))
            .collect();
        assert_eq!(paths, ["spec.clusterIP"]);
        let deployment = builtin::kind("apps", "v1", "Deployment").expect("Deployment");
        let live = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x", "args": ["1"]}]}}}});
        let desired = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x", "args": ["2"]}]}}}});
        assert!(changed(&deployment, &desired, &live).is_empty());
    }
}
