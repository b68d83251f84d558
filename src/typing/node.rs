//! The compact schema of one field: only what typing needs. Read from an
//! OpenAPI v3 schema (the API server's published documents for built-in
//! kinds, a CRD's `openAPIV3Schema`) by one function, [`Node::from_openapi`],
//! so built-in kinds and CRDs are typed alike.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The type of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ty {
    /// A map with fixed fields (`properties`) or free keys (`additionalProperties`).
    #[serde(rename = "o")]
    Object,
    /// A list.
    #[serde(rename = "a")]
    Array,
    /// A string.
    #[serde(rename = "s")]
    String,
    /// An integer.
    #[serde(rename = "i")]
    Integer,
    /// A number.
    #[serde(rename = "n")]
    Number,
    /// `true` or `false`.
    #[serde(rename = "b")]
    Boolean,
    /// An integer or a string (`x-kubernetes-int-or-string`).
    #[serde(rename = "is")]
    IntOrString,
    /// A resource quantity: a string or a number.
    #[serde(rename = "q")]
    Quantity,
}

fn no(b: &bool) -> bool {
    !*b
}

/// One field's schema. Absent parts are not written, so the committed table
/// of built-in kinds stays small.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// Its type; `None` takes any value.
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub ty: Option<Ty>,
    /// `format` (`int32`, `int64`, `byte`, `date-time`, ...).
    #[serde(rename = "f", default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Box<str>>,
    /// The fields of an object.
    #[serde(rename = "p", default, skip_serializing_if = "Fields::is_empty")]
    pub properties: Fields,
    /// The items of a list.
    #[serde(rename = "i", default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Box<Node>>,
    /// The values of a map with free keys.
    #[serde(rename = "a", default, skip_serializing_if = "Option::is_none")]
    pub additional: Option<Box<Node>>,
    /// A named schema of the built-in table this field is.
    #[serde(rename = "r", default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Box<str>>,
    /// `x-kubernetes-preserve-unknown-fields`.
    #[serde(rename = "u", default, skip_serializing_if = "no")]
    pub preserve_unknown: bool,
    /// `x-kubernetes-embedded-resource`: apiVersion, kind and metadata too.
    #[serde(rename = "e", default, skip_serializing_if = "no")]
    pub embedded: bool,
    /// The API server refuses a change of it once set.
    #[serde(rename = "m", default, skip_serializing_if = "no")]
    pub immutable: bool,
    /// What its schema says of immutability below holds not here: a pod
    /// template, whose pods' fields are immutable, not the template's.
    #[serde(rename = "w", default, skip_serializing_if = "no")]
    pub template: bool,
    /// `x-kubernetes-list-type`.
    #[serde(rename = "l", default, skip_serializing_if = "Option::is_none")]
    pub list_type: Option<Box<str>>,
    /// `x-kubernetes-list-map-keys`.
    #[serde(rename = "k", default, skip_serializing_if = "<[_]>::is_empty")]
    pub list_keys: Box<[Box<str>]>,
    /// `x-kubernetes-map-type`.
    #[serde(rename = "s", default, skip_serializing_if = "Option::is_none")]
    pub map_type: Option<Box<str>>,
}

/// The fields of an object, by name: held in a slice of exactly their
/// number, sorted, so a schema costs what it holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fields(Box<[(Box<str>, Node)]>);

impl Fields {
    /// The field `name`.
    pub fn get(&self, name: &str) -> Option<&Node> {
        let i = self.0.binary_search_by(|(n, _)| (**n).cmp(name)).ok()?;
        Some(&self.0[i].1)
    }

    /// The field `name`, to change.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Node> {
        let i = self.0.binary_search_by(|(n, _)| (**n).cmp(name)).ok()?;
        Some(&mut self.0[i].1)
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The names.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(n, _)| &**n)
    }

    /// The fields' schemas.
    pub fn values(&self) -> impl Iterator<Item = &Node> {
        self.0.iter().map(|(_, v)| v)
    }

    /// The fields' schemas, to change.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Node> {
        self.0.iter_mut().map(|(_, v)| v)
    }
}

impl std::ops::Index<&str> for Fields {
    type Output = Node;
    fn index(&self, name: &str) -> &Node {
        static ANY: std::sync::LazyLock<Node> = std::sync::LazyLock::new(Node::default);
        self.get(name).unwrap_or(&ANY)
    }
}

impl FromIterator<(String, Node)> for Fields {
    fn from_iter<I: IntoIterator<Item = (String, Node)>>(iter: I) -> Self {
        let sorted: BTreeMap<String, Node> = iter.into_iter().collect();
        Self(
            sorted
                .into_iter()
                .map(|(k, v)| (k.into_boxed_str(), v))
                .collect(),
        )
    }
}

impl Serialize for Fields {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (&**k, v)))
    }
}

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        BTreeMap::<String, Node>::deserialize(d).map(|m| m.into_iter().collect())
    }
}

/// Where a schema names another: `#/components/schemas/NAME`.
fn reference(schema: &Value) -> Option<Box<str>> {
    let direct = schema.get("$ref");
    let all_of = schema
        .get("allOf")
        .and_then(Value::as_array)
        .filter(|a| a.len() == 1)
        .and_then(|a| a[0].get("$ref"));
    let path = direct.or(all_of)?.as_str()?;
    Some(path.rsplit('/').next().unwrap_or(path).into())
}

/// Whether a field's own words or validations say the API server refuses
/// a change of it.
fn immutable(schema: &Value) -> bool {
    let said = schema
        .get("description")
        .and_then(Value::as_str)
        .is_some_and(|d| {
            d.contains("Cannot be updated")
                || d.contains("is immutable")
                || d.contains("are immutable")
                || d.contains("may not be changed through updates")
                || d.split(['.', '\n']).any(|s| s.trim() == "Immutable")
        });
    let validated = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .is_some_and(|rules| {
            rules.iter().any(|r| {
                let rule: String = r["rule"]
                    .as_str()
                    .unwrap_or_default()
                    .chars()
                    .filter(|c| !c.is_whitespace())
                    .collect();
                rule == "self==oldSelf" || rule == "oldSelf==self"
            })
        });
    said || validated
}

fn ty(schema: &Value) -> Option<Ty> {
    let flag = |k: &str| schema.get(k).and_then(Value::as_bool) == Some(true);
    if flag("x-kubernetes-int-or-string") || schema["format"] == "int-or-string" {
        return Some(Ty::IntOrString);
    }
    if let Some(one_of) = schema.get("oneOf").and_then(Value::as_array) {
        let types: Vec<&str> = one_of.iter().filter_map(|s| s["type"].as_str()).collect();
        return match types.as_slice() {
            ["string", "number"] | ["number", "string"] => Some(Ty::Quantity),
            ["integer", "string"] | ["string", "integer"] => Some(Ty::IntOrString),
            _ => None,
        };
    }
    Some(match schema.get("type").and_then(Value::as_str)? {
        "object" => Ty::Object,
        "array" => Ty::Array,
        "string" => Ty::String,
        "integer" => Ty::Integer,
        "number" => Ty::Number,
        "boolean" => Ty::Boolean,
        _ => return None,
    })
}

impl Node {
    /// The compact form of an OpenAPI v3 schema.
    pub fn from_openapi(schema: &Value) -> Self {
        let flag = |k: &str| schema.get(k).and_then(Value::as_bool) == Some(true);
        let text = |k: &str| schema.get(k).and_then(Value::as_str).map(Box::from);
        let properties = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| {
                p.iter()
                    .map(|(k, v)| (k.clone(), Self::from_openapi(v)))
                    .collect()
            })
            .unwrap_or_default();
        let additional = match schema.get("additionalProperties") {
            Some(Value::Bool(true)) => Some(Box::default()),
            Some(s @ Value::Object(_)) => Some(Box::new(Self::from_openapi(s))),
            _ => None,
        };
        let format = text("format").filter(|f| &**f != "int-or-string");
        Self {
            ty: ty(schema),
            format,
            properties,
            items: schema
                .get("items")
                .filter(|i| i.is_object())
                .map(|i| Box::new(Self::from_openapi(i))),
            additional,
            reference: reference(schema),
            preserve_unknown: flag("x-kubernetes-preserve-unknown-fields"),
            embedded: flag("x-kubernetes-embedded-resource"),
            immutable: immutable(schema),
            template: false,
            list_type: text("x-kubernetes-list-type"),
            list_keys: schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| k.iter().filter_map(Value::as_str).map(Box::from).collect())
                .unwrap_or_default(),
            map_type: text("x-kubernetes-map-type"),
        }
    }

    /// Whether it takes any value: no type, no fields.
    pub fn is_any(&self) -> bool {
        self.ty.is_none()
            && self.reference.is_none()
            && self.properties.is_empty()
            && self.items.is_none()
            && self.additional.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_what_typing_needs_and_nothing_else() {
        let node = Node::from_openapi(&json!({
            "type": "object",
            "description": "words",
            "properties": {
                "port": {"x-kubernetes-int-or-string": true},
                "size": {"oneOf": [{"type": "string"}, {"type": "number"}]},
                "name": {"type": "string", "description": "Cannot be updated."},
                "key": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "meta": {"allOf": [{"$ref": "#/components/schemas/io.k8s.X"}]},
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["port"], "items": {"type": "integer", "format": "int32"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "immutable": {"type": "boolean", "description": "Immutable, if set to true, ensures that data cannot be updated"}
            }
        }));
        let p = &node.properties;
        assert_eq!(p["port"].ty, Some(Ty::IntOrString));
        assert_eq!(p["size"].ty, Some(Ty::Quantity));
        assert!(p["name"].immutable && p["key"].immutable);
        assert!(!p["immutable"].immutable);
        assert_eq!(
            p["labels"].additional.as_deref().and_then(|a| a.ty),
            Some(Ty::String)
        );
        assert_eq!(p["meta"].reference.as_deref(), Some("io.k8s.X"));
        assert_eq!(&*p["ports"].list_keys, [Box::from("port")]);
        assert_eq!(
            p["ports"]
                .items
                .as_deref()
                .and_then(|i| i.format.as_deref()),
            Some("int32")
        );
        assert!(p["free"].preserve_unknown);
        let text = serde_json::to_string(&node).unwrap_or_default();
        assert!(!text.contains("words"), "{text}");
        assert_eq!(serde_json::from_str::<Node>(&text).ok(), Some(node));
    }
}
