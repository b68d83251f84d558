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
/// removed ones with `- `, added ones with `+ `. Myers' algorithm, in
/// memory linear in the two texts, with a deadline so a pathological pair
/// degrades to a coarser diff rather than a long wait.
pub fn line_diff(before: &str, after: &str) -> String {
    let diff = similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        .timeout(std::time::Duration::from_secs(2))
        .diff_lines(before, after);
    let mut out = String::with_capacity(before.len() + after.len());
    for change in diff.iter_all_changes() {
        out.push_str(match change.tag() {
            similar::ChangeTag::Equal => "  ",
            similar::ChangeTag::Delete => "- ",
            similar::ChangeTag::Insert => "+ ",
        });
        out.push_str(change.value().trim_end_matches(['\n', '\r']));
        out.push('\n');
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

    #[test]
    fn a_line_diff_of_ten_thousand_lines_needs_no_table_of_their_product() {
        // A quadratic table for 10,000 × 10,000 lines is 800 MB; the diff
        // must come back with every line accounted for and nothing else.
        let before: String = (0..10_000).map(|i| format!("k{i}: {i}\n")).collect();
        let after: String = (0..10_000)
            .map(|i| match i % 100 {
                0 => format!("k{i}: changed\n"),
                _ => format!("k{i}: {i}\n"),
            })
            .collect();
        let diff = line_diff(&before, &after);
        let count = |prefix: &str| diff.lines().filter(|l| l.starts_with(prefix)).count();
        assert_eq!((count("- "), count("+ "), count("  ")), (100, 100, 9_900));
    }
}
