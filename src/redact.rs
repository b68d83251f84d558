//! Keeps Secret values out of messages: conditions, Events, logs and
//! `kiln render` errors quote templates and API answers, and either may echo
//! a value a template read from a Secret (a name rendered from it, an
//! invalid value the API server quotes back). The API server quotes values
//! Go-style (`"line\n"`, `\"`) and JSON escapes them, so each value is
//! redacted as it is, trimmed (a file's trailing newline), and in both of
//! those escaped forms. A value that is also a string the message's reader
//! sees anyway (the primary's name, namespace or a value of its spec, the
//! name of an object the reconcile reads in the primary's namespace) is
//! left alone: redacting it
//! protects nothing and hides which object a message is about
//! ([`except_public`]).

use base64::Engine as _;
use serde_json::Value;

/// What replaces a Secret value in a message.
pub const REDACTED: &str = "[redacted]";

/// Shorter values are left alone: redacting `1` or `yes` everywhere would
/// garble messages and protects nothing.
const SHORTEST: usize = 4;

/// The values of the Secrets in `secrets` (Secret objects, or lists of
/// them: the caller knows their kind, which cached objects do not carry),
/// as stored (base64) and decoded, longest first.
pub fn secret_values<'a>(secrets: impl IntoIterator<Item = &'a Value>) -> Vec<String> {
    let mut out = Vec::new();
    for value in secrets {
        let objects: Vec<&Value> = match value {
            Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        for obj in objects {
            for (encoded, map) in [(true, &obj["data"]), (false, &obj["stringData"])] {
                let Some(map) = map.as_object() else { continue };
                for s in map.values().filter_map(Value::as_str) {
                    out.push(s.to_string());
                    if encoded
                        && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(s)
                        && let Ok(text) = String::from_utf8(bytes)
                    {
                        push_forms(&mut out, &text);
                    } else if !encoded {
                        push_forms(&mut out, s);
                    }
                }
            }
        }
    }
    longest_first(out)
}

/// `value` as a message may show it: as it is, trimmed, Go-quoted and
/// JSON-escaped (each without the quotes around it).
fn push_forms(out: &mut Vec<String>, value: &str) {
    for v in [value, value.trim()] {
        out.push(v.to_string());
        out.push(go_quoted(v));
        out.push(json_escaped(v));
    }
}

/// `value` as Go's `%q` (`strconv.Quote`) writes it, without the quotes.
fn go_quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// `value` as a JSON string holds it, without the quotes.
fn json_escaped(value: &str) -> String {
    let quoted = Value::String(value.to_string()).to_string();
    quoted[1..quoted.len() - 1].to_string()
}

/// Long enough values only, longest first (a value inside another is
/// redacted after it), once each.
fn longest_first(mut values: Vec<String>) -> Vec<String> {
    values.retain(|s| s.len() >= SHORTEST);
    values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    values.dedup();
    values
}

/// `secrets` and the values `random_secret` drew (as drawn and base64
/// encoded), longest first.
pub fn with_drawn<'a>(
    mut secrets: Vec<String>,
    drawn: impl IntoIterator<Item = &'a String>,
) -> Vec<String> {
    for value in drawn {
        secrets.push(base64::engine::general_purpose::STANDARD.encode(value));
        push_forms(&mut secrets, value);
    }
    longest_first(secrets)
}

/// `secrets` without the values equal to one of `public`: strings whoever
/// reads kiln's messages about the primary sees anyway (its own fields, the
/// names of the objects it names), such as a database user `orders` that
/// is also the name of the primary and its children.
pub fn except_public<'a>(
    mut secrets: Vec<String>,
    public: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    let public: std::collections::HashSet<&str> = public.into_iter().collect();
    secrets.retain(|s| !public.contains(s.as_str()));
    secrets
}

/// Every string of `value` (keys and leaves), for [`except_public`].
pub fn strings(value: &Value) -> Vec<&str> {
    let mut out = Vec::new();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => out.push(s.as_str()),
            Value::Array(items) => stack.extend(items),
            Value::Object(m) => {
                out.extend(m.keys().map(String::as_str));
                stack.extend(m.values());
            }
            _ => {}
        }
    }
    out
}

/// `message` with every one of `secrets` replaced by [`REDACTED`].
pub fn redact(message: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(message.to_string(), |m, s| m.replace(s.as_str(), REDACTED))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_values_are_redacted_stored_and_decoded() {
        let secret = json!({"kind": "Secret", "data": {"password": "aHVudGVyMi1zZWNyZXQ=", "n": "MQ=="}, "stringData": {"token": "abcd-efgh"}});
        let secrets = secret_values([&json!([secret])]);
        let message = "name `hunter2-secret` is not valid; aHVudGVyMi1zZWNyZXQ= and abcd-efgh; not-a-secret; 1";
        assert_eq!(
            redact(message, &secrets),
            "name `[redacted]` is not valid; [redacted] and [redacted]; not-a-secret; 1"
        );
    }

    #[test]
    fn values_the_api_server_quotes_or_escapes_are_redacted() {
        use base64::Engine as _;
        // A Secret made `--from-file`: its value ends with a newline; another
        // holds quotes and a backslash.
        let file = base64::engine::general_purpose::STANDARD.encode("hunter2-file\n");
        let quoted = "pa\"ss\\word";
        let secret = json!({"data": {"f": file}, "stringData": {"q": quoted}});
        let secrets = secret_values([&secret]);
        let go = r#"data[k]: Invalid value: "hunter2-file\n": a lowercase RFC 1123 label"#;
        assert_eq!(
            redact(go, &secrets),
            r#"data[k]: Invalid value: "[redacted]": a lowercase RFC 1123 label"#
        );
        let go = r#"Invalid value: "pa\"ss\\word""#;
        assert_eq!(redact(go, &secrets), r#"Invalid value: "[redacted]""#);
        let json = r#"{"value":"hunter2-file\n","q":"pa\"ss\\word"}"#;
        assert_eq!(
            redact(json, &secrets),
            r#"{"value":"[redacted]","q":"[redacted]"}"#
        );
        // A template that trimmed the newline.
        assert_eq!(redact("name hunter2-file", &secrets), "name [redacted]");
    }

    #[test]
    fn go_quoting_escapes_as_strconv_quote() {
        assert_eq!(go_quoted("a\"b\\c\n\t\u{1}é"), r#"a\"b\\c\n\t\x01é"#);
    }

    #[test]
    fn drawn_values_are_redacted_as_drawn_and_encoded() {
        let drawn = ["Zq3vN8pLw2Xk7TbRcY1mA5sD9fGhJ4eU".to_string()];
        let encoded = base64::engine::general_purpose::STANDARD.encode(&drawn[0]);
        let secrets = with_drawn(Vec::new(), &drawn);
        let message = format!("data.password: Invalid value: {encoded} ({})", drawn[0]);
        assert_eq!(
            redact(&message, &secrets),
            "data.password: Invalid value: [redacted] ([redacted])"
        );
    }
}
