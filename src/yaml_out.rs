//! YAML text kiln writes (`render`, `package`, `crd`, `configmap`, the
//! `to_yaml` filter) that every reader reads back as written.
//!
//! `serde_norway` leaves a string plain unless a YAML 1.2 reader would take
//! it for a number, a boolean or null, and its test is narrower than other
//! readers': `12360550813e8171` (too big for an f64, yet a float to YAML),
//! `yes`, `on`, `0x1F`, `1_000` or `1:20` (numbers and booleans to YAML 1.1
//! readers such as kubectl's) stay plain and come back as something else.
//! Here every plain string some reader could take for a number, a boolean or
//! null is double-quoted; everything else is left as `serde_norway` writes
//! it. (Timestamps such as `2001-12-14` stay plain: Kubernetes' readers keep
//! them as strings.)

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
    number(body)
}

/// A number to YAML 1.1 or 1.2: an integer in any base (`0x1F`, `0o17`,
/// `0b101`, `012`), with `_` separators, an exponent (`1e3`, even one too
/// big for an f64) or sexagesimal parts (`1:20`).
fn number(body: &str) -> bool {
    if body.starts_with('_') {
        return false;
    }
    let b = body.replace('_', "");
    let all = |s: &str, f: fn(&char) -> bool| !s.is_empty() && s.chars().all(|c| f(&c));
    for (prefix, digit) in [
        ("0x", char::is_ascii_hexdigit as fn(&char) -> bool),
        ("0o", |c: &char| ('0'..='7').contains(c)),
        ("0b", |c: &char| *c == '0' || *c == '1'),
    ] {
        if let Some(rest) = b.strip_prefix(prefix) {
            return all(rest, digit);
        }
    }
    if let Some((head, tail)) = b.split_once(':') {
        let (parts, last) = match tail.rsplit_once(':') {
            Some((middle, last)) => (middle.split(':').collect::<Vec<_>>(), last),
            None => (Vec::new(), tail),
        };
        let last = last.split_once('.').map_or(last, |(whole, _)| whole);
        return all(head, char::is_ascii_digit)
            && parts
                .iter()
                .chain([&last])
                .all(|p| p.len() <= 2 && all(p, char::is_ascii_digit));
    }
    let (mantissa, exponent) = match b.find(['e', 'E']) {
        Some(i) => (&b[..i], Some(&b[i + 1..])),
        None => (b.as_str(), None),
    };
    let exponent_ok =
        exponent.is_none_or(|e| all(e.trim_start_matches(['-', '+']), char::is_ascii_digit));
    exponent_ok
        && mantissa.chars().filter(|c| *c == '.').count() <= 1
        && mantissa.chars().any(|c| c.is_ascii_digit())
        && mantissa.chars().all(|c| c.is_ascii_digit() || c == '.')
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
