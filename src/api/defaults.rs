//! Defaults from a structural schema applied to an object, as the API
//! server does when it reads or writes one: a missing field with a
//! `default` gets it, inside every object, list item and map value that is
//! there (and inside defaults themselves).

use serde_json::Value;

/// Fills in `object`'s missing fields from `schema` (an `openAPIV3Schema`).
pub fn apply(schema: &Value, object: &mut Value) {
    match object {
        Value::Object(fields) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, sub) in properties {
                    if !fields.contains_key(name)
                        && let Some(default) = sub.get("default")
                    {
                        fields.insert(name.clone(), default.clone());
                    }
                    if let Some(value) = fields.get_mut(name) {
                        apply(sub, value);
                    }
                }
            }
            if let Some(values @ Value::Object(_)) = schema.get("additionalProperties") {
                for value in fields.values_mut() {
                    apply(values, value);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for value in items {
                    apply(item, value);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn missing_fields_get_their_defaults_at_every_depth() {
        let schema = json!({"properties": {"spec": {"default": {}, "properties": {
            "replicas": {"type": "integer", "default": 1},
            "tls": {"properties": {"enabled": {"default": false}}},
            "pages": {"items": {"properties": {"path": {"default": "/"}}}},
            "sites": {"additionalProperties": {"properties": {"port": {"default": 80}}}},
        }}}});
        let mut o = json!({"spec": {
            "replicas": 3,
            "tls": {},
            "pages": [{}, {"path": "/a"}],
            "sites": {"x": {}},
        }});
        apply(&schema, &mut o);
        assert_eq!(
            o,
            json!({"spec": {
                "replicas": 3,
                "tls": {"enabled": false},
                "pages": [{"path": "/"}, {"path": "/a"}],
                "sites": {"x": {"port": 80}},
            }})
        );
        let mut empty = json!({});
        apply(&schema, &mut empty);
        assert_eq!(
            empty,
            json!({"spec": {"replicas": 1}}),
            "a defaulted spec gets its own defaults"
        );
    }
}
