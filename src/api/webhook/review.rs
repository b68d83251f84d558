//! One `apiextensions.k8s.io/v1` `ConversionReview`: every object converted
//! to the version asked for, or the request failed with the first object
//! that could not be (named, with the template and its line). Pure.

use serde_json::{Value, json};

use crate::api::convert::Conversions;

/// How the webhook finds an API's conversions: by group and kind.
pub trait Lookup {
    /// The conversions of `kind` in `group`, if a rule defines them now.
    fn conversions(&self, group: &str, kind: &str) -> Option<std::sync::Arc<Conversions>>;
}

/// The answer to the request body `body` (a `ConversionReview`), as JSON.
pub fn answer(body: &[u8], lookup: &dyn Lookup) -> Value {
    let review: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return response("", Err(format!("the request is not JSON: {e}"))),
    };
    let request = &review["request"];
    let uid = request["uid"].as_str().unwrap_or_default();
    // One big stack for the whole review (not a stack mapped per template
    // evaluation): only plain JSON outlives each object's conversion.
    let converted = crate::template::limits::render_stack(|| convert_all(request, lookup));
    response(uid, converted)
}

/// Every object of the request, converted.
fn convert_all(request: &Value, lookup: &dyn Lookup) -> Result<Vec<Value>, String> {
    let desired = request["desiredAPIVersion"]
        .as_str()
        .ok_or("the request has no desiredAPIVersion")?;
    let (group, version) = desired
        .split_once('/')
        .ok_or_else(|| format!("desiredAPIVersion `{desired}` has no group"))?;
    let objects = request["objects"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out = Vec::with_capacity(objects.len());
    let mut found: Option<(String, std::sync::Arc<Conversions>)> = None;
    for object in objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let conversions = match &found {
            Some((k, c)) if k == kind => c.clone(),
            _ => {
                let c = lookup
                    .conversions(group, kind)
                    .ok_or_else(|| format!("no rule defines conversions for {kind} in {group}"))?;
                found = Some((kind.to_string(), c.clone()));
                c
            }
        };
        out.push(
            conversions
                .convert(object, version)
                .map_err(|e| e.to_string())?,
        );
    }
    Ok(out)
}

fn response(uid: &str, converted: Result<Vec<Value>, String>) -> Value {
    let body = match converted {
        Ok(objects) => json!({
            "uid": uid,
            "convertedObjects": objects,
            "result": {"status": "Success"},
        }),
        Err(message) => json!({
            "uid": uid,
            "convertedObjects": [],
            "result": {"status": "Failure", "message": message},
        }),
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    struct One(Arc<Conversions>);
    impl Lookup for One {
        fn conversions(&self, group: &str, kind: &str) -> Option<Arc<Conversions>> {
            (group == "demo.kiln.dev" && kind == "WebApp").then(|| self.0.clone())
        }
    }

    fn lookup() -> One {
        let raw: crate::api::spec::RawApi = serde_norway::from_str(
            r#"
group: demo.kiln.dev
kind: WebApp
versions:
  - name: v1alpha1
    schema: {spec: {image: string}}
    conversion:
      toStorage: {spec: {image: {name: "{{ self.spec.image }}"}}}
      fromStorage: {spec: {image: "{{ self.spec.image.name }}"}}
  - name: v1
    storage: true
    schema: {spec: {image: {name: string}}}
"#,
        )
        .unwrap();
        One(Arc::new(
            crate::api::convert::compile(&raw, "v1", &[])
                .unwrap()
                .unwrap(),
        ))
    }

    fn review(objects: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "r1", "desiredAPIVersion": "demo.kiln.dev/v1", "objects": objects},
        }))
        .unwrap()
    }

    fn obj(name: &str, image: Value) -> Value {
        json!({"apiVersion": "demo.kiln.dev/v1alpha1", "kind": "WebApp",
               "metadata": {"name": name, "namespace": "a"}, "spec": {"image": image}})
    }

    #[test]
    fn every_object_is_converted_in_order() {
        let out = answer(
            &review(json!([obj("x", json!("nginx")), obj("y", json!("redis"))])),
            &lookup(),
        );
        assert_eq!(out["response"]["uid"], "r1");
        assert_eq!(out["response"]["result"]["status"], "Success");
        let images: Vec<&Value> = out["response"]["convertedObjects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| &o["spec"]["image"]["name"])
            .collect();
        assert_eq!(images, [&json!("nginx"), &json!("redis")]);
    }

    #[test]
    fn one_failing_object_fails_the_request_naming_it() {
        let mut bad = obj("bad", json!("x"));
        bad["spec"] = json!({});
        let out = answer(&review(json!([obj("x", json!("nginx")), bad])), &lookup());
        assert_eq!(out["response"]["result"]["status"], "Failure");
        let message = out["response"]["result"]["message"].as_str().unwrap();
        assert!(message.contains("WebApp a/bad"), "{message}");
        assert!(message.contains("toStorage.spec.image.name"), "{message}");
    }

    #[test]
    fn garbage_and_unknown_kinds_are_failures_not_crashes() {
        let out = answer(b"{not json", &lookup());
        assert_eq!(out["response"]["result"]["status"], "Failure");
        let mut other = obj("x", json!("a"));
        other["kind"] = json!("Other");
        let out = answer(&review(json!([other])), &lookup());
        assert!(
            out["response"]["result"]["message"]
                .as_str()
                .unwrap()
                .contains("no rule defines")
        );
    }
}
