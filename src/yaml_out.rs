//! YAML text kiln writes (`render`, `package`, `crd`, `configmap`, the
//! `to_yaml` filter) that every reader reads back as written.
//!
//! `serde_norway` leaves a string plain unless a YAML 1.2 reader would take
//! it for a number, a boolean or null, and its test is narrower than other
//! readers': `12360550813e8171` (too big for an f64, yet a float to YAML),
//! `yes`, `on`, `0x1F`, `1_000` or `1:20` (numbers and booleans to YAML 1.1
//! readers such as kubectl's) stay plain and come back as something else.
//! Here every plain string some reader could take for a non-string is
//! double-quoted; everything else is left as `serde_norway` writes it.

use saphyr_parser::{Event, Parser, ScalarStyle};
use serde::Serialize;

/// `value` as YAML, strings that could read back as non-strings quoted.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> Result<String, serde_norway::Error> {
    Ok(quote_ambiguous(&serde_norway::to_string(value)?))
}

/// `text` (YAML as `serde_norway` writes it) with every plain scalar that
/// it meant as a string, but another reader could take for a number, a
/// boolean or null, double-quoted.
fn quote_ambiguous(text: &str) -> String {
    let bytes_at: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let mut spans = Vec::new();
    for event in Parser::new_from_str(text) {
        let Ok((Event::Scalar(value, ScalarStyle::Plain, _, None), span)) = event else {
            continue;
        };
        let Some(&start) = bytes_at.get(span.start.index()) else {
            continue;
        };
        let written = text.get(start..start + value.len());
        if written == Some(value.as_ref()) && ambiguous(&value) && written_as_string(&value) {
            spans.push((start, value.len()));
        }
    }
    let mut out = text.to_string();
    for (start, len) in spans.into_iter().rev() {
        let quoted = serde_json::Value::String(out[start..start + len].to_string()).to_string();
        out.replace_range(start..start + len, &quoted);
    }
    out
}

/// Whether `serde_norway` wrote this plain scalar for a string (not for a
/// number, a boolean or null).
fn written_as_string(value: &str) -> bool {
    matches!(
        serde_norway::from_str::<serde_json::Value>(value),
        Ok(serde_json::Value::String(_))
    )
}

/// Whether some YAML reader (1.1 or 1.2, kiln's own) could read the plain
/// scalar `value` as something other than a string.
pub fn ambiguous(value: &str) -> bool {
    const WORDS: &[&str] = &[
        "~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
        "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
        "=", "<<",
    ];
    if WORDS.contains(&value) || !crate::yaml::plain_is_string(value) {
        return true;
    }
    let body = value.strip_prefix(['-', '+']).unwrap_or(value);
    let special = body.trim_start_matches('.');
    if matches!(special, "inf" | "Inf" | "INF" | "nan" | "NaN" | "NAN") {
        return true;
    }
    // Numbers of any base, with `_` separators, exponents, sexagesimal
    // `:` parts or dates: a digit (or `.` and a digit) first, then only
    // characters numbers are written with.
    let starts_numeric = body.starts_with(|c: char| c.is_ascii_digit())
        || (body.starts_with('.') && body[1..].starts_with(|c: char| c.is_ascii_digit()));
    starts_numeric
        && body
            .chars()
            .all(|c| c.is_ascii_hexdigit() || "xXoO_.:+-".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const AMBIGUOUS: &[&str] = &[
        "12360550813e8171",
        "1e3",
        "0x1F",
        ".inf",
        "-.inf",
        ".NaN",
        "yes",
        "No",
        "on",
        "OFF",
        "y",
        "~",
        "null",
        "012",
        "0o17",
        "0b101",
        "1_000",
        "1:20",
        "3.14",
        ".5",
        "2001-12-14",
        "true",
        "7",
    ];

    fn read_back(text: &str) -> Value {
        let docs = crate::yaml::parse_documents(text, crate::yaml::Limits::default()).unwrap();
        docs[0].to_json()
    }

    #[test]
    fn strings_that_could_read_as_other_types_are_quoted_and_read_back_as_strings() {
        let data: serde_json::Map<String, Value> = AMBIGUOUS
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("k{i}"), json!(s)))
            .collect();
        let value = json!({"data": data, "list": AMBIGUOUS, "keys": {"yes": 1, "0x1F": 2}});
        let text = to_string(&value).unwrap();
        for s in AMBIGUOUS {
            assert!(
                text.contains(&format!("\"{s}\"")) || text.contains(&format!("'{s}'")),
                "{s} is not quoted in:\n{text}"
            );
        }
        assert_eq!(read_back(&text), value, "{text}");
        let norway: Value = serde_norway::from_str(&text).unwrap();
        assert_eq!(norway, value);
    }

    #[test]
    fn numbers_booleans_null_and_ordinary_strings_are_written_as_before() {
        let value = json!({
            "replicas": 3, "ratio": 0.5, "enabled": true, "gone": null,
            "image": "nginx:1.25", "memory": "100Mi", "cpu": "10m", "name": "web-1",
            "text": "a\nb\n", "port": "8080",
        });
        let text = to_string(&value).unwrap();
        assert_eq!(text, serde_norway::to_string(&value).unwrap());
        assert_eq!(read_back(&text), value);
    }

    #[test]
    fn ambiguity_is_judged_per_string() {
        for s in AMBIGUOUS {
            assert!(ambiguous(s), "{s}");
        }
        for s in [
            "nginx", "100Mi", "10m", "web-1", "abc123", "v1.2.3", "1.2.3-rc", "deadbeef",
        ] {
            assert!(!ambiguous(s), "{s}");
        }
    }
}
