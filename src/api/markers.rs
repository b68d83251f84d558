//! The markers after `|` in a SimpleSchema field (`required=true
//! default="x" enum="a,b" minimum=1`): parsed, checked against the field's
//! type, and written into its OpenAPI schema.

use serde_json::{Value, json};

/// One marker, parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Marker {
    /// `required=true`: the parent object must have the field.
    Required(bool),
    /// `default=V`, as written (typed once the field's type is known).
    Default(String),
    /// `description="..."`.
    Description(String),
    /// `enum="a,b,c"`.
    Enum(String),
    /// `minimum=N` / `maximum=N`.
    Bound(&'static str, f64),
    /// `minLength`, `maxLength`, `minItems`, `maxItems`.
    Count(&'static str, u64),
    /// `pattern="regex"`.
    Pattern(String),
    /// `uniqueItems=true`.
    UniqueItems(bool),
    /// `immutable=true`.
    Immutable(bool),
}

const NAMES: [&str; 13] = [
    "required",
    "default",
    "description",
    "enum",
    "minimum",
    "maximum",
    "pattern",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "immutable",
];

/// Splits `a=1 b="x y" c=z` into (key, value) pairs.
fn tokens(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let Some(eq) = rest.find('=') else {
            return Err(format!(
                "marker `{}` has no value: write `name=value`",
                rest.split_whitespace().next().unwrap_or(rest)
            ));
        };
        let key = rest[..eq].trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(format!(
                "marker `{}` has no value: write `name=value`",
                key.split_whitespace().next().unwrap_or(key)
            ));
        }
        let after = &rest[eq + 1..];
        let (value, tail) = if let Some(body) = after.strip_prefix('"') {
            let (value, len) = quoted_string(body)
                .ok_or_else(|| format!("marker `{key}`: the quoted value is not closed"))?;
            (value, &body[len..])
        } else {
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            (after[..end].to_string(), &after[end..])
        };
        out.push((key.to_string(), value));
        rest = tail.trim_start();
    }
    Ok(out)
}

/// The text of a quoted value (after its opening quote) with `\"` and `\\`
/// unescaped, and the bytes it took including the closing quote.
fn quoted_string(body: &str) -> Option<(String, usize)> {
    let mut value = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((value, i + 1)),
            '\\' => {
                let (_, next) = chars.next()?;
                value.push(next);
            }
            c => value.push(c),
        }
    }
    None
}

/// Parses the markers of one field.
pub fn parse(text: &str) -> Result<Vec<Marker>, String> {
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (key, value) in tokens(text)? {
        if seen.contains(&key) {
            return Err(format!("marker `{key}` is given twice"));
        }
        seen.push(key.clone());
        out.push(marker(&key, value)?);
    }
    Ok(out)
}

fn marker(key: &str, value: String) -> Result<Marker, String> {
    let flag = |v: &str| match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("marker `{key}` takes `true` or `false`, not `{v}`")),
    };
    let number = |v: &str| {
        v.parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
            .ok_or_else(|| format!("marker `{key}` takes a number, not `{v}`"))
    };
    let count = |v: &str| {
        v.parse::<u64>()
            .map_err(|_| format!("marker `{key}` takes a whole number ≥ 0, not `{v}`"))
    };
    Ok(match key {
        "required" => Marker::Required(flag(&value)?),
        "default" => Marker::Default(value),
        "description" => Marker::Description(value),
        "enum" => Marker::Enum(value),
        "minimum" => Marker::Bound("minimum", number(&value)?),
        "maximum" => Marker::Bound("maximum", number(&value)?),
        "pattern" => Marker::Pattern(value),
        "minLength" => Marker::Count("minLength", count(&value)?),
        "maxLength" => Marker::Count("maxLength", count(&value)?),
        "minItems" => Marker::Count("minItems", count(&value)?),
        "maxItems" => Marker::Count("maxItems", count(&value)?),
        "uniqueItems" => Marker::UniqueItems(flag(&value)?),
        "immutable" => Marker::Immutable(flag(&value)?),
        other => {
            return Err(format!(
                "unknown marker `{other}`: expected one of {}",
                super::quoted(NAMES)
            ));
        }
    })
}

/// The OpenAPI type of a schema (`object` for a map, `""` when unknown).
pub fn type_of(schema: &Value) -> &str {
    schema.get("type").and_then(Value::as_str).unwrap_or("")
}

/// The SimpleSchema name of a schema's type, for messages.
fn type_name(schema: &Value) -> &str {
    match type_of(schema) {
        "number" => "float",
        "object" if schema.get("additionalProperties").is_some() => "map",
        "array" => "list",
        t => t,
    }
}

/// Writes a marker into the field's schema, when it fits its type.
pub fn apply(schema: &mut Value, marker: &Marker) -> Result<(), String> {
    let ty = type_of(schema).to_string();
    let shown = type_name(schema).to_string();
    let fits = |ok: &[&str], what: &str| {
        if ok.contains(&ty.as_str()) {
            Ok(())
        } else {
            Err(format!(
                "marker `{what}` does not fit a field of type {shown}: it applies to {}",
                ok.iter()
                    .map(|t| if *t == "number" { "float" } else { t })
                    .collect::<Vec<_>>()
                    .join(" or ")
            ))
        }
    };
    match marker {
        Marker::Required(_) => {}
        Marker::Description(d) => schema["description"] = json!(d),
        Marker::Default(text) => {
            let value = typed_value(schema, text)?;
            schema["default"] = value;
        }
        Marker::Enum(list) => {
            fits(&["string", "integer"], "enum")?;
            let values = list
                .split(',')
                .map(|v| typed_value(schema, v.trim()))
                .collect::<Result<Vec<_>, _>>()?;
            schema["enum"] = Value::Array(values);
        }
        Marker::Bound(name, n) => {
            fits(&["integer", "number"], name)?;
            schema[*name] = number_value(&ty, *n, name)?;
        }
        Marker::Pattern(p) => {
            fits(&["string"], "pattern")?;
            schema["pattern"] = json!(p);
        }
        Marker::Count(name, n) => {
            let on = if name.ends_with("Items") {
                "array"
            } else {
                "string"
            };
            fits(&[on], name)?;
            schema[*name] = json!(n);
        }
        Marker::UniqueItems(unique) => {
            fits(&["array"], "uniqueItems")?;
            if *unique {
                let item = type_of(&schema["items"]);
                if !matches!(item, "string" | "integer" | "number" | "boolean") {
                    return Err("marker `uniqueItems` needs a list of strings, integers, floats or booleans (its items are compared as values)".into());
                }
                schema["x-kubernetes-list-type"] = json!("set");
            }
        }
        Marker::Immutable(immutable) => {
            if *immutable {
                schema["x-kubernetes-validations"] = json!([{
                    "rule": "self == oldSelf",
                    "message": "this field is immutable",
                }]);
            }
        }
    }
    Ok(())
}

fn number_value(ty: &str, n: f64, name: &str) -> Result<Value, String> {
    if ty == "integer" {
        if n.fract() != 0.0 {
            return Err(format!(
                "marker `{name}` of an integer field must be a whole number, not {n}"
            ));
        }
        return Ok(json!(n as i64));
    }
    Ok(json!(n))
}

/// `text` (a default or an enum value) as a value of the field's type.
fn typed_value(schema: &Value, text: &str) -> Result<Value, String> {
    let ty = type_of(schema);
    if ty == "string" {
        return Ok(Value::String(text.to_string()));
    }
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    let fits = match (&parsed, ty) {
        (Some(Value::Number(n)), "integer") => n.is_i64() || n.is_u64(),
        (Some(Value::Number(_)), "number") => true,
        (Some(Value::Bool(_)), "boolean") => true,
        (Some(Value::Array(_)), "array") => true,
        (Some(Value::Object(_)), "object") => true,
        _ => false,
    };
    match parsed {
        Some(v) if fits => Ok(v),
        _ => {
            let ty = type_name(schema);
            let article = if ty.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            };
            Err(format!("`{text}` is not {article} {ty} (the field's type)"))
        }
    }
}

/// A default must satisfy the field's own constraints (the API server
/// refuses a CRD whose default would be refused).
pub fn check_default(schema: &Value) -> Result<(), String> {
    check_bounds(schema)?;
    let Some(default) = schema.get("default") else {
        return Ok(());
    };
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && !values.contains(default)
    {
        return Err(format!(
            "default {default} is not one of the enum values ({})",
            values
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let n = default.as_f64();
    let bound = |k: &str| schema.get(k).and_then(Value::as_f64);
    if let (Some(n), Some(min)) = (n, bound("minimum"))
        && n < min
    {
        return Err(format!("default {default} is below the minimum {min}"));
    }
    if let (Some(n), Some(max)) = (n, bound("maximum"))
        && n > max
    {
        return Err(format!("default {default} is above the maximum {max}"));
    }
    let len = match default {
        Value::String(s) => Some(("Length", s.chars().count())),
        Value::Array(a) => Some(("Items", a.len())),
        _ => None,
    };
    if let Some((unit, len)) = len {
        let count = |k: String| schema.get(&k).and_then(Value::as_u64);
        if count(format!("min{unit}")).is_some_and(|m| (len as u64) < m) {
            return Err(format!("default {default} is shorter than min{unit}"));
        }
        if count(format!("max{unit}")).is_some_and(|m| (len as u64) > m) {
            return Err(format!("default {default} is longer than max{unit}"));
        }
    }
    Ok(())
}

/// `minimum ≤ maximum`, `minLength ≤ maxLength`, `minItems ≤ maxItems`.
pub fn check_bounds(schema: &Value) -> Result<(), String> {
    for (lo, hi) in [
        ("minimum", "maximum"),
        ("minLength", "maxLength"),
        ("minItems", "maxItems"),
    ] {
        let get = |k: &str| schema.get(k).and_then(Value::as_f64);
        if let (Some(a), Some(b)) = (get(lo), get(hi))
            && a > b
        {
            return Err(format!("{lo} {a} is above {hi} {b}: no value fits"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_split_on_spaces_outside_quotes() {
        let m = parse(r#"required=true default="a b" description="say \"hi\"" minimum=1"#).unwrap();
        assert_eq!(
            m,
            [
                Marker::Required(true),
                Marker::Default("a b".into()),
                Marker::Description("say \"hi\"".into()),
                Marker::Bound("minimum", 1.0),
            ]
        );
    }

    #[test]
    fn bad_markers_say_what_is_wrong() {
        assert!(
            parse("requird=true")
                .unwrap_err()
                .contains("unknown marker `requird`")
        );
        assert!(parse("required").unwrap_err().contains("has no value"));
        assert!(
            parse("required=yes")
                .unwrap_err()
                .contains("`true` or `false`")
        );
        assert!(parse("minimum=x").unwrap_err().contains("takes a number"));
        assert!(parse("default=\"x").unwrap_err().contains("not closed"));
        assert!(parse("minimum=1 minimum=2").unwrap_err().contains("twice"));
    }

    #[test]
    fn a_marker_must_fit_its_type() {
        let mut s = json!({"type": "boolean"});
        let e = apply(&mut s, &Marker::Bound("minimum", 1.0)).unwrap_err();
        assert_eq!(
            e,
            "marker `minimum` does not fit a field of type boolean: it applies to integer or float"
        );
        let mut s = json!({"type": "string"});
        assert!(apply(&mut s, &Marker::Count("minItems", 1)).is_err());
        assert!(apply(&mut s, &Marker::Count("minLength", 1)).is_ok());
    }

    #[test]
    fn defaults_are_typed_and_checked() {
        let mut s = json!({"type": "integer"});
        apply(&mut s, &Marker::Default("3".into())).unwrap();
        assert_eq!(s["default"], json!(3));
        assert!(apply(&mut s, &Marker::Default("three".into())).is_err());
        assert!(apply(&mut s, &Marker::Default("1.5".into())).is_err());
        let mut s = json!({"type": "string"});
        apply(&mut s, &Marker::Enum("a, b".into())).unwrap();
        apply(&mut s, &Marker::Default("c".into())).unwrap();
        assert!(
            check_default(&s)
                .unwrap_err()
                .contains("not one of the enum values")
        );
        let mut s = json!({"type": "integer", "minimum": 1});
        apply(&mut s, &Marker::Default("0".into())).unwrap();
        assert!(check_default(&s).unwrap_err().contains("below the minimum"));
    }

    #[test]
    fn immutable_is_a_transition_rule_and_unique_items_a_set() {
        let mut s = json!({"type": "string"});
        apply(&mut s, &Marker::Immutable(true)).unwrap();
        assert_eq!(s["x-kubernetes-validations"][0]["rule"], "self == oldSelf");
        let mut s = json!({"type": "array", "items": {"type": "string"}});
        apply(&mut s, &Marker::UniqueItems(true)).unwrap();
        assert_eq!(s["x-kubernetes-list-type"], "set");
    }
}
