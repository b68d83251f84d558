//! Templates checked against the primary's schema: a read of
//! `self.spec.<path>` or `self.status.<path>` that the schema does not
//! declare is a typo (the template would see nothing, in the cluster, at
//! run time), found here at validate time.

use serde_json::Value;

/// Mapping methods a template may call on an object (`self.spec.env.items()`).
const METHODS: [&str; 4] = ["items", "keys", "values", "get"];

/// Fields every object has besides those its schema declares.
const OBJECT_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Checks one path a template reads of `self` (`self.spec.title`; a path
/// cut at `[` ends with it) against the object's `openAPIV3Schema`. The
/// error names the first undeclared step and what is declared there.
pub fn check(schema: &Value, path: &str, whose: &str) -> Result<(), String> {
    let path = path.trim_end_matches('[');
    let mut parts = path.split('.');
    if parts.next() != Some("self") {
        return Ok(());
    }
    let parts: Vec<&str> = parts.collect();
    if parts.first().is_some_and(|p| OBJECT_FIELDS.contains(p)) {
        return Ok(());
    }
    walk(schema, &parts, "self", whose)
}

fn walk(node: &Value, parts: &[&str], walked: &str, whose: &str) -> Result<(), String> {
    let Some((part, rest)) = parts.split_first() else {
        return Ok(());
    };
    let here = format!("{walked}.{part}");
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        return match properties.get(*part) {
            Some(inner) => walk(inner, rest, &here, whose),
            None if open(node) || METHODS.contains(part) => Ok(()),
            None => {
                let declared: Vec<&str> = properties.keys().map(String::as_str).collect();
                let declared = if declared.is_empty() {
                    "no fields".to_string()
                } else {
                    declared.join(", ")
                };
                Err(format!(
                    "`{here}` is not declared in the schema of {whose} (`{walked}` has {declared})"
                ))
            }
        };
    }
    match node.get("additionalProperties") {
        // A map: any key, then its values' schema.
        Some(inner @ Value::Object(_)) => walk(inner, rest, &here, whose),
        // A scalar, a list or anything-goes: what follows is a method or
        // an index, not a field.
        _ => Ok(()),
    }
}

/// Whether an object schema keeps fields it does not declare.
fn open(node: &Value) -> bool {
    node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        || node.get("additionalProperties") == Some(&Value::Bool(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "title": {"type": "string"},
                "tls": {"type": "object", "properties": {"enabled": {"type": "boolean"}}},
                "pages": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }},
            "status": {"type": "object", "properties": {"url": {}}},
        }})
    }

    #[test]
    fn declared_paths_pass() {
        for p in [
            "self",
            "self.metadata.name",
            "self.spec",
            "self.spec.title",
            "self.spec.title.upper",
            "self.spec.tls.enabled",
            "self.spec.pages[",
            "self.spec.labels.team",
            "self.spec.labels.items",
            "self.spec.extra.anything.at.all",
            "self.status.url",
        ] {
            assert_eq!(check(&schema(), p, "X"), Ok(()), "{p}");
        }
    }

    #[test]
    fn a_misspelled_field_names_what_is_declared() {
        assert_eq!(
            check(&schema(), "self.spec.titel", "X"),
            Err("`self.spec.titel` is not declared in the schema of X (`self.spec` has title, tls, pages, labels, extra)".into())
        );
        assert!(check(&schema(), "self.spec.tls.enable", "X").is_err());
        assert!(check(&schema(), "self.status.ur", "X").is_err());
        assert!(check(&schema(), "self.sepc", "X").is_err());
    }

    #[test]
    fn map_values_are_checked_below_any_key() {
        let s = json!({"properties": {"spec": {"properties": {
            "sites": {"type": "object", "additionalProperties": {"type": "object", "properties": {"host": {"type": "string"}}}},
        }}}});
        assert_eq!(check(&s, "self.spec.sites.a.host", "X"), Ok(()));
        assert_eq!(
            check(&s, "self.spec.sites.a.hots", "X"),
            Err("`self.spec.sites.a.hots` is not declared in the schema of X (`self.spec.sites.a` has host)".into())
        );
    }
}
