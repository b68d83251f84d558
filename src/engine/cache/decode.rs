//! Objects as a list or watch delivers them: decoded, or — when one cannot
//! be (nested past serde's recursion limit, say) — its metadata and why.
//!
//! The API server stores objects kiln cannot decode: a CRD with
//! `x-kubernetes-preserve-unknown-fields` takes a spec nested 140 levels
//! deep, and serde_json refuses anything past 128. Decoded as part of a list,
//! one such object failed the whole list, and with it every object of its
//! kind. Here each item is taken as raw JSON first (which
//! serde_json skips over without recursing) and decoded on its own, so the
//! one that fails is set apart and the rest of the list flows.

use std::borrow::Cow;
use std::sync::Arc;

use kube::api::{ApiResource, DynamicObject};
use kube::core::{DynamicResourceScope, ObjectMeta, Resource, TypeMeta};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// One object from a list or a watch event.
#[derive(Debug, Clone)]
pub(super) struct Incoming {
    /// The object; when it could not be decoded, only its type and metadata.
    pub object: DynamicObject,
    /// Why it could not be decoded (the decoder's words, never the body).
    pub undecodable: Option<Arc<str>>,
}

/// Just the type and metadata of an object: every other field is skipped
/// unread, however deep it nests.
/// (No `flatten`: serde buffers flattened fields, recursing into them; and
/// not the whole metadata: `managedFields` mirror the object's nesting.)
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Shallow {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    metadata: ShallowMeta,
}

/// What identifies an object and its version.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ShallowMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
}

impl From<ShallowMeta> for ObjectMeta {
    fn from(m: ShallowMeta) -> Self {
        Self {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            generation: m.generation,
            ..Self::default()
        }
    }
}

impl Incoming {
    /// Decodes one object's JSON text.
    pub(super) fn decode(text: &str) -> Result<Self, serde_json::Error> {
        match serde_json::from_str::<DynamicObject>(text) {
            Ok(object) => Ok(Self {
                object,
                undecodable: None,
            }),
            Err(error) => {
                let shallow: Shallow = serde_json::from_str(text)?;
                Ok(Self {
                    object: DynamicObject {
                        types: shallow
                            .api_version
                            .zip(shallow.kind)
                            .map(|(api_version, kind)| TypeMeta { api_version, kind }),
                        metadata: shallow.metadata.into(),
                        data: serde_json::Value::Null,
                    },
                    undecodable: Some(error.to_string().into()),
                })
            }
        }
    }
}

impl<'de> Deserialize<'de> for Incoming {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Self::decode(raw.get()).map_err(serde::de::Error::custom)
    }
}

impl Resource for Incoming {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::group(dt)
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::version(dt)
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::kind(dt)
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::api_version(dt)
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        DynamicObject::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.object.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.object.metadata
    }
}

#[cfg(test)]
mod tests {
    use kube::core::ObjectList;
    use kube::core::WatchEvent;

    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
    }

    /// A Widget as the API server sends it: its managed fields mirror the
    /// nesting of its spec.
    fn widget(name: &str, spec: &str) -> String {
        let fields = spec.replace("\"a\"", "\"f:a\"");
        format!(
            r#"{{"apiVersion":"test.kiln.dev/v1","kind":"Widget","metadata":{{"name":"{name}","namespace":"ns","uid":"u-{name}","resourceVersion":"7","managedFields":[{{"manager":"m","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{{"f:spec":{fields}}}}}]}},"spec":{spec}}}"#
        )
    }

    #[test]
    fn a_list_with_one_object_nested_too_deep_still_decodes_the_others() {
        let body = format!(
            r#"{{"apiVersion":"v1","kind":"List","metadata":{{"resourceVersion":"9"}},"items":[{},{},{}]}}"#,
            widget("a", "{}"),
            widget("deep", &nested(140)),
            widget("b", r#"{"x":[1,2]}"#)
        );
        // Decoded as plain objects, the whole list fails: the bug.
        assert!(serde_json::from_str::<ObjectList<DynamicObject>>(&body).is_err());
        let list: ObjectList<Incoming> = serde_json::from_str(&body).unwrap();
        let names: Vec<(String, bool)> = list
            .items
            .iter()
            .map(|i| {
                (
                    i.object.metadata.name.clone().unwrap(),
                    i.undecodable.is_some(),
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                ("a".into(), false),
                ("deep".into(), true),
                ("b".into(), false)
            ]
        );
        let deep = &list.items[1];
        assert_eq!(deep.object.metadata.uid.as_deref(), Some("u-deep"));
        assert_eq!(deep.object.types.as_ref().unwrap().kind, "Widget");
        assert!(
            deep.undecodable
                .as_deref()
                .unwrap()
                .contains("recursion limit"),
            "{:?}",
            deep.undecodable
        );
        assert_eq!(list.items[2].object.data["spec"]["x"][1], 2);
    }

    #[test]
    fn a_watch_event_for_an_object_nested_too_deep_keeps_its_metadata() {
        let line = format!(
            r#"{{"type":"ADDED","object":{}}}"#,
            widget("deep", &nested(300))
        );
        let event: WatchEvent<Incoming> = serde_json::from_str(&line).unwrap();
        let WatchEvent::Added(incoming) = event else {
            panic!("not an ADDED event")
        };
        assert_eq!(incoming.object.metadata.name.as_deref(), Some("deep"));
        assert_eq!(
            incoming.object.metadata.resource_version.as_deref(),
            Some("7")
        );
        assert!(incoming.undecodable.is_some());
        let ok = format!(r#"{{"type":"MODIFIED","object":{}}}"#, widget("a", "{}"));
        let event: WatchEvent<Incoming> = serde_json::from_str(&ok).unwrap();
        assert!(matches!(event, WatchEvent::Modified(i) if i.undecodable.is_none()));
    }

    #[test]
    fn the_reason_never_quotes_the_body() {
        let secret = "s3cr3t-value";
        let text = format!(
            r#"{{"apiVersion":"v1","kind":"X","metadata":{{"name":"n"}},"spec":{{"k":"{secret}","d":{}}}}}"#,
            nested(200)
        );
        let incoming = Incoming::decode(&text).unwrap();
        assert!(!incoming.undecodable.unwrap().contains(secret));
    }
}
