//! One `apiextensions.k8s.io/v1` `ConversionReview`: every object converted
//! to the version asked for, or the request failed with the first object
//! that could not be (named, with the template and its line). Pure.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::convert::Conversions;

/// How the webhook finds an API's conversions: by group and kind.
pub trait Lookup {
    /// The conversions of `kind` in `group`, if a rule defines them now.
    fn conversions(&self, group: &str, kind: &str) -> Option<std::sync::Arc<Conversions>>;
}

/// A review answered: the JSON to send, and what it was, for metrics.
#[derive(Debug)]
pub struct Answer {
    /// The `ConversionReview` holding the response.
    pub review: Value,
    /// The CRD converted (`<plural>.<group>`), when a rule defines it.
    pub crd: Option<String>,
    /// Objects in the request.
    pub objects: usize,
    /// Whether every object was converted.
    pub ok: bool,
}

/// The part of a `ConversionReview` request kiln reads.
#[derive(Deserialize)]
struct Review {
    request: Option<Request>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    #[serde(default)]
    uid: String,
    #[serde(default, rename = "desiredAPIVersion")]
    desired_api_version: Option<String>,
    #[serde(default)]
    objects: Vec<Value>,
}

/// The answer to the request body `body` (a `ConversionReview`).
pub fn answer(body: &[u8], lookup: &dyn Lookup) -> Answer {
    let request = match serde_json::from_slice::<Review>(body) {
        Ok(Review { request: Some(r) }) => r,
        Ok(Review { request: None }) => return failed("", "the review has no request".into()),
        Err(e) => return failed("", format!("the request is not a ConversionReview: {e}")),
    };
    let objects = request.objects.len();
    // One big stack for the whole review (not a stack mapped per template
    // evaluation): only plain JSON outlives each object's conversion.
    let (crd, converted) = crate::template::limits::render_stack(|| convert_all(&request, lookup));
    let ok = converted.is_ok();
    Answer {
        review: response(&request.uid, converted),
        crd,
        objects,
        ok,
    }
}

fn failed(uid: &str, message: String) -> Answer {
    Answer {
        review: response(uid, Err(message)),
        crd: None,
        objects: 0,
        ok: false,
    }
}

/// Every object of the request, converted; and the CRD they belong to.
fn convert_all(
    request: &Request,
    lookup: &dyn Lookup,
) -> (Option<String>, Result<Vec<Value>, String>) {
    let Some(desired) = request.desired_api_version.as_deref() else {
        return (None, Err("the request has no desiredAPIVersion".into()));
    };
    let Some((group, version)) = desired.split_once('/') else {
        return (
            None,
            Err(format!("desiredAPIVersion `{desired}` has no group")),
        );
    };
    let mut out = Vec::with_capacity(request.objects.len());
    let mut found: Option<(&str, std::sync::Arc<Conversions>)> = None;
    for object in &request.objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let conversions = match &found {
            Some((k, c)) if *k == kind => c.clone(),
            _ => match lookup.conversions(group, kind) {
                Some(c) => {
                    found = Some((kind, c.clone()));
                    c
                }
                None => {
                    let crd = found.map(|(_, c)| c.crd().to_string());
                    let message = format!("no rule defines conversions for {kind} in {group}");
                    return (crd, Err(message));
                }
            },
        };
        match conversions.convert(object, version) {
            Ok(v) => out.push(v),
            Err(e) => return (Some(conversions.crd().to_string()), Err(e.to_string())),
        }
    }
    (found.map(|(_, c)| c.crd().to_string()), Ok(out))
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
        let answered = answer(
            &review(json!([obj("x", json!("nginx")), obj("y", json!("redis"))])),
            &lookup(),
        );
        assert_eq!(
            (answered.crd.as_deref(), answered.objects, answered.ok),
            (Some("webapps.demo.kiln.dev"), 2, true)
        );
        let out = answered.review;
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
        let answered = answer(&review(json!([obj("x", json!("nginx")), bad])), &lookup());
        assert!(!answered.ok);
        let out = answered.review;
        assert_eq!(out["response"]["result"]["status"], "Failure");
        let message = out["response"]["result"]["message"].as_str().unwrap();
        assert!(message.contains("WebApp a/bad"), "{message}");
        assert!(message.contains("toStorage.spec.image.name"), "{message}");
    }

    #[test]
    fn garbage_and_unknown_kinds_are_failures_not_crashes() {
        let out = answer(b"{not json", &lookup()).review;
        assert_eq!(out["response"]["result"]["status"], "Failure");
        let mut other = obj("x", json!("a"));
        other["kind"] = json!("Other");
        let out = answer(&review(json!([other])), &lookup()).review;
        assert!(
            out["response"]["result"]["message"]
                .as_str()
                .unwrap()
                .contains("no rule defines")
        );
    }
}
