//! One `apiextensions.k8s.io/v1` `ConversionReview`: every object converted
//! to the version asked for, or the request failed naming every object that
//! could not be (the first few, with the template and its line, and how
//! many). Pure.
//!
//! The API server takes a review whole or not at all: its answer must hold
//! as many converted objects as it sent, in order, and a `Failure` fails
//! every object of it (`apiextensions-apiserver`'s webhook converter). So
//! one object a template cannot convert fails the read or list that needed
//! it; the message names that object, so its owner can fix it.
//!
//! Memory is proportional to the review: the request is read as one slice
//! per object (borrowed from the body), each object is parsed, converted
//! and written to the answer on its own, so at most one parsed object is
//! held at a time besides the body and the answer's bytes.

use serde::Deserialize;
use serde_json::value::RawValue;
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
    /// The `ConversionReview` holding the response, as JSON.
    pub json: Vec<u8>,
    /// The CRD converted (`<plural>.<group>`), when a rule defines it.
    pub crd: Option<String>,
    /// Objects in the request.
    pub objects: usize,
    /// Whether every object was converted.
    pub ok: bool,
}

/// The part of a `ConversionReview` request kiln reads.
#[derive(Deserialize)]
struct Review<'a> {
    #[serde(borrow)]
    request: Option<Request<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request<'a> {
    #[serde(default)]
    uid: String,
    #[serde(default, rename = "desiredAPIVersion")]
    desired_api_version: Option<String>,
    /// Each object as written in the body, parsed one at a time.
    #[serde(default, borrow)]
    objects: Vec<&'a RawValue>,
}

/// How many failing objects a failed review's message names.
const NAMED: usize = 3;

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
    let json = match converted {
        Ok(objects) => success(&request.uid, &objects),
        Err(message) => failure(&request.uid, message),
    };
    Answer {
        json,
        crd,
        objects,
        ok,
    }
}

fn failed(uid: &str, message: String) -> Answer {
    Answer {
        json: failure(uid, message),
        crd: None,
        objects: 0,
        ok: false,
    }
}

/// What failed in a review: how many objects, and the first few errors.
#[derive(Default)]
struct Failures {
    count: usize,
    named: Vec<String>,
}

impl Failures {
    fn add(&mut self, error: String) {
        self.count += 1;
        if self.named.len() < NAMED {
            self.named.push(error);
        }
    }

    fn message(self, of: usize) -> String {
        let named = self.named.join("; ");
        if of == 1 {
            return named;
        }
        let more = self.count - self.named.len();
        let rest = if more > 0 {
            format!("; and {more} more")
        } else {
            String::new()
        };
        format!(
            "{} of {of} objects could not be converted (the API server takes a review whole or not at all): {named}{rest}",
            self.count
        )
    }
}

/// Every object of the request, converted and written out as JSON, comma
/// separated; and the CRD they belong to.
fn convert_all(
    request: &Request<'_>,
    lookup: &dyn Lookup,
) -> (Option<String>, Result<Vec<u8>, String>) {
    let Some(desired) = request.desired_api_version.as_deref() else {
        return (None, Err("the request has no desiredAPIVersion".into()));
    };
    let Some((group, version)) = desired.split_once('/') else {
        return (
            None,
            Err(format!("desiredAPIVersion `{desired}` has no group")),
        );
    };
    let mut out = Vec::with_capacity(request.objects.iter().map(|o| o.get().len() + 1).sum());
    let mut failures = Failures::default();
    let mut found: Option<(String, std::sync::Arc<Conversions>)> = None;
    for raw in &request.objects {
        let object: Value = match serde_json::from_str(raw.get()) {
            Ok(o) => o,
            Err(e) => {
                failures.add(format!("an object does not parse: {e}"));
                continue;
            }
        };
        let kind = object["kind"].as_str().unwrap_or_default();
        let conversions = match &found {
            Some((k, c)) if k == kind => c.clone(),
            _ => match lookup.conversions(group, kind) {
                Some(c) => {
                    found = Some((kind.to_string(), c.clone()));
                    c
                }
                None => {
                    let crd = found.map(|(_, c)| c.crd().to_string());
                    let message = format!("no rule defines conversions for {kind} in {group}");
                    return (crd, Err(message));
                }
            },
        };
        match conversions.convert(&object, version) {
            // Once one failed, the rest are converted only to name them.
            Ok(v) if failures.count == 0 => {
                if !out.is_empty() {
                    out.push(b',');
                }
                if let Err(e) = serde_json::to_writer(&mut out, &v) {
                    failures.add(e.to_string());
                }
            }
            Ok(_) => {}
            Err(e) => failures.add(e.to_string()),
        }
    }
    let crd = found.map(|(_, c)| c.crd().to_string());
    if failures.count > 0 {
        return (crd, Err(failures.message(request.objects.len())));
    }
    (crd, Ok(out))
}

/// A successful review: `objects` is the converted objects' JSON, comma
/// separated.
fn success(uid: &str, objects: &[u8]) -> Vec<u8> {
    let uid = serde_json::to_string(uid).unwrap_or_else(|_| "\"\"".into());
    let head = format!(
        r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","response":{{"uid":{uid},"convertedObjects":["#
    );
    let tail = br#"],"result":{"status":"Success"}}}"#;
    let mut json = Vec::with_capacity(head.len() + objects.len() + tail.len());
    json.extend_from_slice(head.as_bytes());
    json.extend_from_slice(objects);
    json.extend_from_slice(tail);
    json
}

fn failure(uid: &str, message: String) -> Vec<u8> {
    let review = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": {
            "uid": uid,
            "convertedObjects": [],
            "result": {"status": "Failure", "message": message},
        },
    });
    serde_json::to_vec(&review).unwrap_or_default()
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
        let out = parsed(&answered);
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
        let out = parsed(&answered);
        assert_eq!(out["response"]["result"]["status"], "Failure");
        let message = out["response"]["result"]["message"].as_str().unwrap();
        assert!(message.contains("WebApp a/bad"), "{message}");
        assert!(message.contains("toStorage.spec.image.name"), "{message}");
    }

    fn parsed(answered: &Answer) -> Value {
        serde_json::from_slice(&answered.json).unwrap()
    }

    #[test]
    fn one_unconvertible_object_names_the_object() {
        // The API server fails the whole review on a Failure: the message
        // names every object that failed (the first few) and how many.
        let unconvertible = |name: &str| {
            let mut o = obj(name, json!("x"));
            o["spec"] = json!({});
            o
        };
        let objects = json!([
            obj("x", json!("nginx")),
            unconvertible("bad"),
            obj("y", json!("redis")),
            unconvertible("worse"),
        ]);
        let answered = answer(&review(objects), &lookup());
        assert!(!answered.ok);
        let out = parsed(&answered);
        assert_eq!(out["response"]["convertedObjects"], json!([]));
        let message = out["response"]["result"]["message"].as_str().unwrap();
        assert!(message.starts_with("2 of 4 objects"), "{message}");
        assert!(message.contains("WebApp a/bad"), "{message}");
        assert!(message.contains("WebApp a/worse"), "{message}");
        assert!(!message.contains("a/x"), "{message}");
    }

    #[test]
    fn garbage_and_unknown_kinds_are_failures_not_crashes() {
        let out = parsed(&answer(b"{not json", &lookup()));
        assert_eq!(out["response"]["result"]["status"], "Failure");
        let mut other = obj("x", json!("a"));
        other["kind"] = json!("Other");
        let out = parsed(&answer(&review(json!([other])), &lookup()));
        assert!(
            out["response"]["result"]["message"]
                .as_str()
                .unwrap()
                .contains("no rule defines")
        );
    }
}
