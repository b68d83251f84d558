//! `spec.api.validations` → `x-kubernetes-validations`: each rule checked
//! offline as far as [`super::cel`] can, then placed on `spec` when it
//! reads nothing but `self.spec.…` (rewritten to read the spec as `self`;
//! the API server then ratchets it per spec: an update that leaves the spec
//! alone is not refused by it), else on the object's root.

use serde_json::{Value, json};

use super::SchemaError;
use super::cel;
use super::spec::RawObjectValidation;
use crate::yaml::Step;

/// The reasons the API server accepts.
const REASONS: [&str; 4] = [
    "FieldValueInvalid",
    "FieldValueForbidden",
    "FieldValueRequired",
    "FieldValueDuplicate",
];

/// A rule as the CRD carries it, and where.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Placed {
    /// Whether it sits on `spec` (else on the root).
    pub on_spec: bool,
    /// The `x-kubernetes-validations` entry.
    pub rule: Value,
}

/// Checks and places each of `raw` (written at `at`, the `validations` list).
pub(super) fn compile(
    raw: &[RawObjectValidation],
    at: &[Step],
) -> Result<Vec<Placed>, Vec<SchemaError>> {
    let mut errors = Vec::new();
    let mut placed = Vec::new();
    for (i, v) in raw.iter().enumerate() {
        let here = |field: &str| [at, &[Step::Index(i), Step::Key(field.into())]].concat();
        let mut refuse = |field: &str, message: String| {
            errors.push(SchemaError {
                at: here(field),
                message,
            })
        };
        if let Err(why) = cel::check(&v.expression) {
            refuse("expression", why);
        }
        if v.message.trim().is_empty() {
            refuse(
                "message",
                "a validation needs a message: it is what a refused user reads".into(),
            );
        } else if v.message.contains(['\n', '\r']) {
            refuse(
                "message",
                "the message must be one line (the API server refuses line breaks)".into(),
            );
        }
        if let Some(m) = &v.message_expression
            && let Err(why) = cel::check(m)
        {
            refuse("messageExpression", why);
        }
        if let Some(r) = &v.reason
            && !REASONS.contains(&r.as_str())
        {
            refuse(
                "reason",
                format!("reason `{r}` is not one of {}", REASONS.join(", ")),
            );
        }
        if let Some(p) = &v.field_path
            && (!p.starts_with('.') || p.len() < 2 || p.contains(char::is_whitespace))
        {
            refuse(
                "fieldPath",
                format!(
                    "fieldPath `{p}` must be a path from the object's root, e.g. `.spec.schedule`"
                ),
            );
        }
        placed.push(place(v));
    }
    if errors.is_empty() {
        Ok(placed)
    } else {
        Err(errors)
    }
}

/// Where `v` goes: on `spec`, rewritten, when its expression, message
/// expression and field path all stay inside the spec; else on the root.
fn place(v: &RawObjectValidation) -> Placed {
    let on_spec = (|| {
        let rule = cel::on_spec(&v.expression)?;
        let message = match &v.message_expression {
            Some(m) => Some(cel::on_spec(m)?),
            None => None,
        };
        let path = match &v.field_path {
            Some(p) => Some(cel::path_on_spec(p)?).filter(|p| !p.is_empty()),
            None => None,
        };
        Some(entry(rule, v, message, path))
    })();
    match on_spec {
        Some(rule) => Placed {
            on_spec: true,
            rule,
        },
        None => Placed {
            on_spec: false,
            rule: entry(
                v.expression.clone(),
                v,
                v.message_expression.clone(),
                v.field_path.clone(),
            ),
        },
    }
}

fn entry(
    rule: String,
    v: &RawObjectValidation,
    message_expression: Option<String>,
    field_path: Option<String>,
) -> Value {
    let mut out = json!({"rule": rule, "message": v.message});
    for (k, value) in [
        ("messageExpression", message_expression),
        ("reason", v.reason.clone()),
        ("fieldPath", field_path),
    ] {
        if let Some(value) = value {
            out[k] = json!(value);
        }
    }
    out
}

/// Adds the rules to a version's `openAPIV3Schema`, after the ones it has.
pub(super) fn add(placed: &[Placed], root: &mut Value) {
    for p in placed {
        let node = if p.on_spec {
            &mut root["properties"]["spec"]
        } else {
            &mut *root
        };
        let list = node
            .as_object_mut()
            .map(|o| o.entry("x-kubernetes-validations").or_insert(json!([])));
        if let Some(Value::Array(list)) = list {
            list.push(p.rule.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(expression: &str, field_path: Option<&str>) -> RawObjectValidation {
        RawObjectValidation {
            expression: expression.into(),
            message: "bad".into(),
            message_expression: None,
            reason: None,
            field_path: field_path.map(str::to_string),
        }
    }

    #[test]
    fn a_spec_only_rule_sits_on_spec_and_a_metadata_rule_on_the_root() {
        let placed = compile(
            &[
                raw("self.spec.minute <= 59", Some(".spec.minute")),
                raw("self.metadata.name.size() < 20", None),
                raw("self.spec.a == 1", Some(".metadata.name")),
            ],
            &[],
        )
        .unwrap();
        let mut root = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": "self.x", "message": "m"}]}}});
        add(&placed, &mut root);
        assert_eq!(
            root["properties"]["spec"]["x-kubernetes-validations"][1],
            json!({"rule": "self.minute <= 59", "message": "bad", "fieldPath": ".minute"})
        );
        assert_eq!(
            root["x-kubernetes-validations"],
            json!([
                {"rule": "self.metadata.name.size() < 20", "message": "bad"},
                {"rule": "self.spec.a == 1", "message": "bad", "fieldPath": ".metadata.name"},
            ])
        );
    }

    #[test]
    fn each_bad_part_is_named() {
        let mut v = raw("self.spec.(", Some("spec.x"));
        v.message = "two\nlines".into();
        v.reason = Some("Nope".into());
        v.message_expression = Some("'unclosed".into());
        let errors = compile(&[v], &[Step::Key("validations".into())]).unwrap_err();
        let fields: Vec<String> = errors
            .iter()
            .map(|e| format!("{:?}: {}", e.at.last().unwrap(), e.message))
            .collect();
        assert_eq!(fields.len(), 5, "{fields:#?}");
        for want in [
            "never closed",
            "one line",
            "string literal",
            "not one of",
            "root",
        ] {
            assert!(
                fields.iter().any(|f| f.contains(want)),
                "{want}: {fields:#?}"
            );
        }
    }
}
