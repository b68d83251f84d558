//! What a plan would change on the live objects, for people: the fields
//! kiln would send that the live object lacks or holds otherwise, and a
//! YAML diff of them (`kiln diff`, and the fields `kiln explain` names).
//!
//! Pure logic over a [`Reading`], no API calls.

use kiln::engine::decision::{ChildVerdict, Verdict};
use kiln::render::{self, APPLIED_ANNOTATION, DesiredChild};
use serde_json::{Map, Value};

use super::observe::Reading;

/// The desired child of a verdict and its live object, if it has one
/// (with the `apiVersion` and `kind` a listed object is read without).
pub fn pair<'r>(
    reading: &'r Reading,
    v: &ChildVerdict,
) -> Option<(&'r DesiredChild, Option<Value>)> {
    let desired = reading
        .plan
        .apply
        .iter()
        .find(|c| c.id == v.id && c.name == v.name && c.gvk == v.gvk)?;
    let live =
        render::observed_named(reading.observed.inputs.observed.get(&v.id), &v.name).map(|live| {
            let mut live = live.clone();
            if let Value::Object(map) = &mut live {
                for field in ["apiVersion", "kind"] {
                    if map.get(field).is_none_or(Value::is_null) {
                        map.insert(field.into(), desired.object[field].clone());
                    }
                }
            }
            live
        });
    Some((desired, live))
}

/// For a child the plan changes, the fields that would change, for one
/// line of text; `None` for any other verdict.
pub fn changed_fields(reading: &Reading, v: &ChildVerdict) -> Option<String> {
    if v.verdict != Verdict::Change {
        return None;
    }
    let (desired, live) = pair(reading, v)?;
    let paths = changes(&live?, &desired.object);
    Some(if paths.is_empty() {
        "a field kiln set before and no longer renders is removed".to_string()
    } else {
        format!("fields: {}", paths.join(", "))
    })
}

/// The paths (`spec.replicas`, `spec.ports[0].port`) of the fields of
/// `desired` that `live` lacks or holds otherwise. kiln's hash of what it
/// applied is left out: it changes with any field, which is shown.
pub fn changes(live: &Value, desired: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(live, desired, "", &mut out);
    out
}

fn walk(live: &Value, desired: &Value, at: &str, out: &mut Vec<String>) {
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => {
            for (k, dv) in d {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                if path == format!("metadata.annotations.{APPLIED_ANNOTATION}") {
                    continue;
                }
                match l.get(k) {
                    Some(lv) => walk(lv, dv, &path, out),
                    None if dv.is_null() => {}
                    None => out.push(path),
                }
            }
        }
        (Value::Array(l), Value::Array(d)) if l.len() == d.len() => {
            for (i, (lv, dv)) in l.iter().zip(d).enumerate() {
                walk(lv, dv, &format!("{at}[{i}]"), out);
            }
        }
        (l, d) if kiln::engine::decision::satisfied(l, d) => {}
        _ => out.push(at.to_string()),
    }
}

/// The live object's values of the fields `desired` sets (what kiln would
/// send, seen on the live object): absent fields are left out.
pub fn sent_fields_of(live: &Value, desired: &Value) -> Value {
    match (live, desired) {
        (Value::Object(l), Value::Object(d)) => {
            let mut out = Map::new();
            for (k, dv) in d {
                if let Some(lv) = l.get(k) {
                    out.insert(k.clone(), sent_fields_of(lv, dv));
                }
            }
            Value::Object(out)
        }
        (Value::Array(l), Value::Array(d)) => Value::Array(
            l.iter()
                .enumerate()
                .map(|(i, lv)| match d.get(i) {
                    Some(dv) => sent_fields_of(lv, dv),
                    None => lv.clone(),
                })
                .collect(),
        ),
        (l, _) => l.clone(),
    }
}

/// A line diff of two texts: unchanged lines start with two spaces,
/// removed ones with `- `, added ones with `+ `.
pub fn line_diff(before: &str, after: &str) -> String {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    // Longest common subsequence, from the end.
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push_str(&format!("  {}\n", a[i]));
            (i, j) = (i + 1, j + 1);
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push_str(&format!("- {}\n", a[i]));
            i += 1;
        } else {
            out.push_str(&format!("+ {}\n", b[j]));
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn changes_name_the_fields_kiln_sets_that_differ_or_are_missing() {
        let live = json!({"metadata": {"name": "a", "uid": "u", "annotations": {APPLIED_ANNOTATION: "old"}},
            "spec": {"replicas": 1, "ports": [{"port": 80}], "extra": true}});
        let desired = json!({"metadata": {"name": "a", "annotations": {APPLIED_ANNOTATION: "new"}},
            "spec": {"replicas": 2, "ports": [{"port": 8080}], "paused": false}});
        assert_eq!(
            changes(&live, &desired),
            ["spec.replicas", "spec.ports[0].port", "spec.paused"]
        );
        assert!(changes(&live, &json!({"spec": {"replicas": 1}})).is_empty());
        assert_eq!(
            changes(&live, &json!({"spec": {"ports": []}})),
            ["spec.ports"]
        );
    }

    #[test]
    fn the_live_side_holds_only_the_fields_kiln_sends() {
        let live = json!({"metadata": {"name": "a", "uid": "u"}, "spec": {"replicas": 1, "x": 1}, "status": {}});
        let desired = json!({"metadata": {"name": "a"}, "spec": {"replicas": 2, "paused": true}});
        assert_eq!(
            sent_fields_of(&live, &desired),
            json!({"metadata": {"name": "a"}, "spec": {"replicas": 1}})
        );
    }

    #[test]
    fn a_line_diff_marks_removed_and_added_lines() {
        let diff = line_diff("a: 1\nb: 2\nc: 3\n", "a: 1\nb: 5\nc: 3\nd: 4\n");
        assert_eq!(diff, "  a: 1\n- b: 2\n+ b: 5\n  c: 3\n+ d: 4\n");
    }
}
