//! What `kiln test` compares and prints: partial matches of expected
//! against got, each difference naming its field path, and JUnit XML.

use std::fmt;

use serde_json::Value;

/// One difference: where, and what was expected against what was got.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The field path, e.g. `children[Deployment web].spec.replicas`.
    pub path: String,
    /// For humans.
    pub message: String,
}

impl Failure {
    /// A failure at `path`.
    pub fn new(path: &str, message: impl Into<String>) -> Self {
        Self {
            path: path.to_string(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Compares `want` (partial) with `got` under `at` + `field`: every field
/// `want` gives must be equal; a `null` means the field must be absent;
/// lists compare item by item and must be as long.
pub fn compare(at: &str, field: &str, want: &Value, got: &Value, out: &mut Vec<Failure>) {
    let path = if field.is_empty() {
        at.to_string()
    } else {
        format!("{at}.{field}")
    };
    match (want, got) {
        (Value::Null, Value::Null) => {}
        (Value::Null, g) => out.push(Failure::new(
            &path,
            format!("expected absent, got {}", show(g)),
        )),
        (w, Value::Null) => out.push(Failure::new(
            &path,
            format!("expected {}, got nothing", show(w)),
        )),
        (Value::Object(w), Value::Object(g)) => {
            for (k, v) in w {
                let sub = if field.is_empty() {
                    k.clone()
                } else {
                    format!("{field}.{k}")
                };
                compare(at, &sub, v, g.get(k).unwrap_or(&Value::Null), out);
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                compare(at, &format!("{field}[{i}]"), wv, gv, out);
            }
        }
        (w, g) if w == g => {}
        (w, g) => out.push(Failure::new(
            &path,
            format!("expected {}, got {}", show(w), show(g)),
        )),
    }
}

/// Compares `want` (a snapshot) with `got` exactly under `at` + `field`:
/// every field either has and the other lacks, and every value that
/// differs, is a failure; lists compare item by item.
pub fn exact(at: &str, field: &str, want: &Value, got: &Value, out: &mut Vec<Failure>) {
    let path = joined(at, field);
    let sub = |k: &str| {
        if field.is_empty() {
            k.to_string()
        } else {
            format!("{field}.{k}")
        }
    };
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, v) in w {
                exact(at, &sub(k), v, g.get(k).unwrap_or(&Value::Null), out);
            }
            for (k, v) in g.iter().filter(|(k, _)| !w.contains_key(*k)) {
                out.push(Failure::new(
                    &joined(at, &sub(k)),
                    format!("not in the snapshot, got {}", show(v)),
                ));
            }
        }
        (Value::Array(w), Value::Array(g)) => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                exact(at, &format!("{field}[{i}]"), wv, gv, out);
            }
            if w.len() != g.len() {
                out.push(Failure::new(
                    &path,
                    format!("expected {} items, got {}", w.len(), g.len()),
                ));
            }
        }
        (w, g) if kiln::engine::decision::equal(w, g) => {}
        (w, Value::Null) => out.push(Failure::new(
            &path,
            format!("expected {}, got nothing", show(w)),
        )),
        (w, g) => out.push(Failure::new(
            &path,
            format!("expected {}, got {}", show(w), show(g)),
        )),
    }
}

/// `at` and a field path under it (`a.b`, or `a[0]` for a list item).
fn joined(at: &str, field: &str) -> String {
    match field {
        "" => at.to_string(),
        f if f.starts_with('[') => format!("{at}{f}"),
        f => format!("{at}.{f}"),
    }
}

/// The condition of `type_` in a status.
pub fn find_condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn show(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// JUnit XML for cases `(file, name, failure)`: one suite per file.
pub fn junit(cases: &[(String, String, Option<String>)]) -> String {
    let mut files: Vec<&String> = cases.iter().map(|c| &c.0).collect();
    files.dedup();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n");
    for file in files {
        let mine: Vec<_> = cases.iter().filter(|c| &c.0 == file).collect();
        let failures = mine.iter().filter(|c| c.2.is_some()).count();
        out.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\">\n",
            escape(file),
            mine.len()
        ));
        for (_, name, failure) in mine {
            out.push_str(&format!(
                "    <testcase classname=\"{}\" name=\"{}\"",
                escape(file),
                escape(name)
            ));
            match failure {
                None => out.push_str("/>\n"),
                Some(f) => out.push_str(&format!(
                    ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>\n",
                    escape(f.lines().next().unwrap_or_default()),
                    escape(f)
                )),
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn diff(want: Value, got: Value) -> Vec<String> {
        let mut out = Vec::new();
        compare("c", "", &want, &got, &mut out);
        out.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_partial_match_names_the_field_that_differs() {
        let got = json!({"spec": {"replicas": 2, "x": 1}});
        assert!(diff(json!({"spec": {"replicas": 2}}), got.clone()).is_empty());
        assert_eq!(
            diff(json!({"spec": {"replicas": 3}}), got.clone()),
            ["c.spec.replicas: expected 3, got 2"]
        );
        assert_eq!(
            diff(json!({"spec": {"x": null}}), got),
            ["c.spec.x: expected absent, got 1"]
        );
    }

    #[test]
    fn junit_counts_failures_and_escapes() {
        let xml = junit(&[
            ("f".into(), "a<b".into(), None),
            ("f".into(), "c".into(), Some("x: \"1\"".into())),
        ]);
        assert!(xml.contains("tests=\"2\" failures=\"1\""));
        assert!(xml.contains("name=\"a&lt;b\""));
        assert!(xml.contains("&quot;1&quot;"));
    }
}
