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
    /// `validation="CEL"`: a rule the API server checks on the field
    /// (`self` is the field); repeatable.
    Validation(String),
    /// `listType=atomic|set|map`: how the API server merges the list.
    ListType(String),
    /// `listMapKey=field`: a key of a `listType=map` list; repeatable.
    ListMapKey(String),
}

/// Markers that may be given more than once (each adds one).
const REPEATABLE: [&str; 2] = ["validation", "listMapKey"];

const NAMES: [&str; 16] = [
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
    "validation",
    "listType",
    "listMapKey",
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
            let end = bare_end(after).map_err(|why| format!("marker `{key}`: {why}"))?;
            (after[..end].to_string(), &after[end..])
        };
        out.push((key.to_string(), value));
        rest = tail.trim_start();
    }
    Ok(out)
}

/// The text of a quoted value (after its opening quote) with `\"` and `\\`
/// unescaped, and the bytes it took including the closing quote. Any other
/// backslash stays, as KRO keeps it: `pattern="^\d+$"` is `^\d+$`.
fn quoted_string(body: &str) -> Option<(String, usize)> {
    let mut value = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((value, i + 1)),
            '\\' => {
                let (_, next) = chars.next()?;
                if !matches!(next, '"' | '\\') {
                    value.push('\\');
                }
                value.push(next);
            }
            c => value.push(c),
        }
    }
    None
}

/// Where an unquoted value ends: at whitespace outside brackets, braces and
/// quotes, so `default={"a": "b c"}` and `default=[1, 2]` are one value.
fn bare_end(text: &str) -> Result<usize, &'static str> {
    let (mut depth, mut quoted, mut escaped) = (0usize, false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            _ if quoted => {}
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or("a closing bracket or brace is not matched")?;
            }
            c if c.is_whitespace() && depth == 0 => return Ok(i),
            _ => {}
        }
    }
    match (quoted, depth) {
        (true, _) => Err("the quoted value is not closed"),
        (_, 0) => Ok(text.len()),
        _ => Err("a bracket or brace is not closed"),
    }
}

/// Parses the markers of one field.
pub fn parse(text: &str) -> Result<Vec<Marker>, String> {
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (key, value) in tokens(text)? {
        if seen.contains(&key) && !REPEATABLE.contains(&key.as_str()) {
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
        "validation" if value.trim().is_empty() => {
            return Err("marker `validation` needs a CEL expression".into());
        }
        "validation" => Marker::Validation(value),
        "listType" => match value.as_str() {
            "atomic" | "set" | "map" => Marker::ListType(value),
            other => {
                return Err(format!(
                    "marker `listType` takes `atomic`, `set` or `map`, not `{other}`"
                ));
            }
        },
        "listMapKey" => Marker::ListMapKey(value),
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
                set_list_type(schema, "set", "uniqueItems=true")?;
            }
        }
        Marker::Immutable(immutable) => {
            if *immutable {
                validate(schema, "self == oldSelf", "this field is immutable");
            }
        }
        Marker::Validation(rule) => validate(schema, rule, "validation failed"),
        Marker::ListType(list_type) => {
            fits(&["array"], "listType")?;
            set_list_type(schema, list_type, &format!("listType={list_type}"))?;
        }
        Marker::ListMapKey(key) => {
            fits(&["array"], "listMapKey")?;
            let keys = schema
                .as_object_mut()
                .map(|m| m.entry("x-kubernetes-list-map-keys").or_insert(json!([])));
            if let Some(Value::Array(keys)) = keys {
                if keys.iter().any(|k| k == key.as_str()) {
                    return Err(format!("marker `listMapKey={key}` is given twice"));
                }
                keys.push(json!(key));
            }
        }
    }
    Ok(())
}

/// Adds a CEL rule the API server checks on the field.
fn validate(schema: &mut Value, rule: &str, message: &str) {
    let rules = schema
        .as_object_mut()
        .map(|m| m.entry("x-kubernetes-validations").or_insert(json!([])));
    if let Some(Value::Array(rules)) = rules {
        rules.push(json!({"rule": rule, "message": message}));
    }
}

/// Sets the list's merge type, unless another marker set another one.
fn set_list_type(schema: &mut Value, list_type: &str, by: &str) -> Result<(), String> {
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some(before) if before != list_type => Err(format!(
            "marker `{by}` contradicts the list type `{before}` another marker set"
        )),
        _ => {
            schema["x-kubernetes-list-type"] = json!(list_type);
            Ok(())
        }
    }
}

/// A list type the API server takes: a `set` of scalars; a `map` of
/// objects keyed by `listMapKey`s, each a scalar field every item has (it
/// is required or has a default); keys only on a `map`.
pub fn check_list(schema: &Value) -> Result<(), String> {
    let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
    let keys: Vec<&str> = schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|k| k.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let items = &schema["items"];
    let scalar = |s: &Value| matches!(type_of(s), "string" | "integer" | "number" | "boolean");
    match list_type {
        _ if !keys.is_empty() && list_type != Some("map") => {
            Err("marker `listMapKey` needs `listType=map`".into())
        }
        Some("set") if !scalar(items) => Err(
            "a `set` list (`listType=set`, `uniqueItems=true`) needs items of strings, integers, floats or booleans (its items are compared as values)"
                .into(),
        ),
        Some("map") if keys.is_empty() => {
            Err("`listType=map` needs at least one `listMapKey=field`".into())
        }
        Some("map") => {
            let required = |k: &str| {
                items["required"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|f| f == k))
            };
            for key in keys {
                let field = &items["properties"][key];
                if !scalar(field) {
                    return Err(format!(
                        "`listMapKey={key}`: the items must be objects with a field `{key}` of a scalar type"
                    ));
                }
                if !required(key) && field.get("default").is_none() {
                    return Err(format!(
                        "`listMapKey={key}`: every item must have it: make `{key}` required=true or give it a default"
                    ));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
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
    fn values_in_brackets_hold_spaces_and_backslashes_stay_as_in_kro() {
        let m = parse(r#"default={"team": "web ops", "x": [1, 2]} pattern="^\d+\"$""#).unwrap();
        assert_eq!(
            m,
            [
                Marker::Default(r#"{"team": "web ops", "x": [1, 2]}"#.into()),
                Marker::Pattern(r#"^\d+"$"#.into()),
            ]
        );
        assert!(parse("default={").unwrap_err().contains("not closed"));
        assert!(parse("default=}").unwrap_err().contains("not matched"));
    }

    #[test]
    fn list_types_validations_and_map_keys_follow_kro() {
        let list = |items: Value, marks: &str| {
            let mut s = json!({"type": "array", "items": items});
            for m in parse(marks)? {
                apply(&mut s, &m)?;
            }
            check_list(&s).map(|()| s)
        };
        let item = json!({"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "port": {"type": "integer", "default": 80}, "tags": {"type": "array"}}});
        let s = list(item.clone(), "listType=map listMapKey=name listMapKey=port").unwrap();
        assert_eq!(s["x-kubernetes-list-map-keys"], json!(["name", "port"]));
        let refused = [
            ("listType=map", "at least one `listMapKey"),
            ("listMapKey=name", "needs `listType=map`"),
            ("listType=map listMapKey=tags", "of a scalar type"),
            ("listType=map listMapKey=nope", "of a scalar type"),
            ("listType=set", "strings, integers"),
            (
                "listType=map uniqueItems=true listMapKey=name",
                "contradicts",
            ),
            ("listType=list", "`atomic`, `set` or `map`"),
            ("listType=map listMapKey=name listMapKey=name", "twice"),
        ];
        for (marks, why) in refused {
            let e = list(item.clone(), marks).unwrap_err();
            assert!(e.contains(why), "{marks}: {e}");
        }
        let optional = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        assert!(
            list(optional, "listType=map listMapKey=name")
                .unwrap_err()
                .contains("required=true")
        );
        let mut s = json!({"type": "integer"});
        for m in parse(r#"validation="self > 1" validation="self < 9" immutable=true"#).unwrap() {
            apply(&mut s, &m).unwrap();
        }
        assert_eq!(s["x-kubernetes-validations"].as_array().unwrap().len(), 3);
        assert!(parse(r#"validation="""#).unwrap_err().contains("CEL"));
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
