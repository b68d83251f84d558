//! The checks of a child's `recreate` and `replace`, apart from the rest of
//! validation: `recreate: false` means something only for a created-once
//! child, and each `replace` path names a map inside the object, never the
//! parts kiln or the API server keep (`metadata`, `status`, `apiVersion`,
//! `kind`).

use super::spec::{RawChild, UpdatePolicy};

/// The top-level fields a `replace` path may not start with.
const KEPT: &[&str] = &["apiVersion", "kind", "metadata", "status"];

/// The child's `replace` paths, split into keys, and every problem with its
/// field (`recreate` or `replace`).
pub fn check(c: &RawChild) -> (Vec<Vec<String>>, Vec<(&'static str, String)>) {
    let mut problems = Vec::new();
    if !c.recreate && c.update_policy != UpdatePolicy::CreateOnce {
        problems.push((
            "recreate",
            "`recreate: false` needs `updatePolicy: CreateOnce`: a child kiln keeps as rendered is always created again".to_string(),
        ));
    }
    if !c.replace.is_empty() && c.update_policy == UpdatePolicy::CreateOnce {
        problems.push((
            "replace",
            "`replace` cannot go with `updatePolicy: CreateOnce`: kiln never writes a created-once child again".to_string(),
        ));
    }
    let mut paths = Vec::new();
    for path in &c.replace {
        match split(path) {
            Ok(keys) => paths.push(keys),
            Err(why) => problems.push(("replace", format!("`{}`: {why}", path.escape_debug()))),
        }
    }
    (paths, problems)
}

/// A dotted path (`spec.hard`) as its keys.
fn split(path: &str) -> Result<Vec<String>, String> {
    let keys: Vec<String> = path.split('.').map(str::to_string).collect();
    if keys.iter().any(String::is_empty) {
        return Err("a path is keys separated by `.`, e.g. `spec.hard`".into());
    }
    if KEPT.contains(&keys[0].as_str()) {
        return Err(format!(
            "`{}` is not the rule's to replace (kiln's marks, the API server's fields, the child's own controller's status)",
            keys[0]
        ));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(extra: &str) -> RawChild {
        let yaml = format!(
            "id: q\ntemplate: {{apiVersion: v1, kind: ResourceQuota, metadata: {{name: q}}}}\n{extra}"
        );
        from_yaml(&yaml)
    }

    fn from_yaml(yaml: &str) -> RawChild {
        let docs = crate::yaml::parse_documents(yaml, crate::yaml::Limits::default()).unwrap();
        serde_json::from_value(docs[0].to_json()).unwrap()
    }

    #[test]
    fn replace_paths_are_split_and_kiln_s_own_parts_are_refused() {
        let (paths, problems) = check(&child("replace: [spec.hard, data]"));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            paths,
            vec![vec!["spec".to_string(), "hard".into()], vec!["data".into()]]
        );
        for bad in ["metadata.labels", "status", "spec..hard", ""] {
            let (_, problems) = check(&child(&format!("replace: [\"{bad}\"]")));
            assert_eq!(problems.len(), 1, "{bad}: {problems:?}");
        }
    }

    #[test]
    fn recreate_false_needs_create_once_and_replace_refuses_it() {
        assert_eq!(check(&child("recreate: false")).1.len(), 1);
        let once = "updatePolicy: CreateOnce\nrecreate: false";
        assert!(check(&child(once)).1.is_empty());
        let both = "updatePolicy: CreateOnce\nreplace: [spec.hard]";
        assert_eq!(check(&child(both)).1[0].0, "replace");
    }
}
