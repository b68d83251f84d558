//! Snapshots of `kiln test` cases: `kiln test --update` writes what each
//! case of `NAME.test.yaml` makes (every rendered child whole, the status,
//! the pruned children and the errors) into `NAME.test.snap` beside it, one
//! YAML document per case; once that file exists, a case fails on any
//! difference from its snapshot, as an `insta` snapshot or a committed
//! `crossplane render` output does. The file is YAML but not `*.yaml`, so
//! rule loading and `kind: Rule` packaging never take it for a rule.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::{Map, Value};

use super::test_match::{Failure, exact};

/// The snapshot file of a test file: `NAME.test.yaml` → `NAME.test.snap`.
pub fn path_of(test_file: &Path) -> PathBuf {
    let name = test_file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let stem = name
        .strip_suffix(".yaml")
        .or_else(|| name.strip_suffix(".yml"))
        .unwrap_or(name);
    test_file.with_file_name(format!("{stem}.snap"))
}

/// The snapshots of a test file's cases, by case name; `None` when it has
/// no snapshot file.
pub fn read(test_file: &Path) -> anyhow::Result<Option<Map<String, Value>>> {
    let path = path_of(test_file);
    if !path.exists() {
        return Ok(None);
    }
    let mut out = Map::new();
    for doc in super::render::documents(&path)? {
        let name = doc["case"]
            .as_str()
            .with_context(|| format!("{}: a snapshot without `case`", path.display()))?
            .to_string();
        out.insert(name, doc);
    }
    Ok(Some(out))
}

/// Writes the snapshots `(case, what it made)` of a test file.
pub fn write(test_file: &Path, cases: &[(String, Value)]) -> anyhow::Result<PathBuf> {
    let path = path_of(test_file);
    let mut text = String::from(
        "# What each case makes, written by `kiln test --update`: a case fails on\n# any difference from its snapshot. Review changes as code.\n",
    );
    for (name, got) in cases {
        let mut doc = Map::new();
        doc.insert("case".into(), Value::String(name.clone()));
        if let Value::Object(fields) = got {
            doc.extend(fields.clone());
        }
        text.push_str("---\n");
        text.push_str(&kiln::yaml_out::to_string(&Value::Object(doc))?);
    }
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Every difference between a case's snapshot and what it made now.
pub fn compare(want: Option<&Value>, got: &Value) -> Vec<Failure> {
    let Some(want) = want else {
        return vec![Failure::new(
            "snapshot",
            "no snapshot of this case: run `kiln test --update` and review it",
        )];
    };
    let mut out = Vec::new();
    let (wanted, made) = (by_name(&want["children"]), by_name(&got["children"]));
    for (key, w) in &wanted {
        let at = format!("children[{key}]");
        match made.iter().find(|(k, _)| k == key) {
            Some((_, g)) => exact(&at, "", w, g, &mut out),
            None => out.push(Failure::new(&at, "in the snapshot, not rendered now")),
        }
    }
    for (key, _) in made
        .iter()
        .filter(|(k, _)| !wanted.iter().any(|(w, _)| w == k))
    {
        out.push(Failure::new(
            &format!("children[{key}]"),
            "rendered now, not in the snapshot",
        ));
    }
    for field in ["status", "pruned", "errors"] {
        exact(field, "", &want[field], &got[field], &mut out);
    }
    out
}

/// The children of a snapshot as `(Kind namespace/name, child)`.
fn by_name(children: &Value) -> Vec<(String, &Value)> {
    children
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let meta = &c["metadata"];
            let name = meta["name"].as_str().unwrap_or_default();
            let key = match meta["namespace"].as_str() {
                Some(ns) => format!("{} {ns}/{name}", c["kind"].as_str().unwrap_or_default()),
                None => format!("{} {name}", c["kind"].as_str().unwrap_or_default()),
            };
            (key, c)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_snapshot_sits_beside_its_test_file_and_is_not_yaml_by_name() {
        assert_eq!(
            path_of(Path::new("rules/webapp.test.yaml")),
            Path::new("rules/webapp.test.snap")
        );
        assert!(!kiln::rules::load::is_rule_file(&path_of(Path::new(
            "a.test.yaml"
        ))));
    }

    #[test]
    fn any_difference_fails_naming_the_child_and_field() {
        let want = json!({"children": [
            {"kind": "Service", "metadata": {"name": "a"}, "spec": {"port": 80}},
        ], "status": {"x": 1}});
        let strings = |got: Value| -> Vec<String> {
            compare(Some(&want), &got)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert!(strings(want.clone()).is_empty());
        let mut got = want.clone();
        got["children"][0]["spec"]["port"] = json!(81);
        got["children"][0]["spec"]["extra"] = json!(true);
        got["status"] = json!({});
        assert_eq!(
            strings(got),
            [
                "children[Service a].spec.port: expected 80, got 81",
                "children[Service a].spec.extra: not in the snapshot, got true",
                "status.x: expected 1, got nothing",
            ]
        );
    }
}
