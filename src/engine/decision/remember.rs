//! `recreate: false` on a created-once child: kiln remembers that it made
//! the child, so one deleted on purpose is not made again (Kyverno's
//! generate without `synchronize`).
//!
//! The record is the primary's annotation `<rule>.kiln.dev/created-once`,
//! a comma-separated list of `<child id>/<name>`: it lives as long as the
//! primary (a restart or a reload reads it again; a new primary has none,
//! so it gets its child). It is written level-based: every such child that
//! exists is in it (so a child is recorded once it is seen, not when it is
//! sent), entries of child ids the rule no longer remembers leave it, and
//! a record that holds what it should is not written again.
//!
//! Who can forge it: whoever may edit the primary. Removing an entry makes
//! kiln create that child again; adding one keeps kiln from creating it.
//! Both are what that person could do anyway to a created-once child
//! (create or delete it), and the record says only what kiln should make
//! for this primary, never where: so the owner's annotation is trusted.
//! Nobody else (a tenant who may only delete the child) can forge it.

use std::collections::BTreeSet;

use serde_json::Value;

use super::live::LiveChild;
use super::touch::Touch;
use crate::render::DesiredChild;
use crate::rules::{Rule, UpdatePolicy};

/// The annotation holding `rule`'s record on a primary.
pub(super) fn annotation(rule: &str) -> String {
    format!("{rule}.kiln.dev/created-once")
}

fn entry(id: &str, name: &str) -> String {
    format!("{id}/{name}")
}

/// Whether the rule remembers its child `id` (`CreateOnce`, `recreate: false`).
fn remembers(rule: &Rule, id: &str) -> bool {
    rule.children
        .iter()
        .any(|c| c.id == id && c.update_policy == UpdatePolicy::CreateOnce && !c.recreate)
}

/// The record on `primary`, as entries.
fn recorded(rule: &Rule, primary: &Value) -> BTreeSet<String> {
    primary["metadata"]["annotations"][annotation(&rule.name)]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether `child`, not there, was made before and is not made again.
pub(super) fn forgone(rule: &Rule, child: &DesiredChild, primary: &Value) -> bool {
    remembers(rule, &child.id) && recorded(rule, primary).contains(&entry(&child.id, &child.name))
}

/// The record the primary should hold, when it differs from the one it
/// holds: kept entries of remembered ids, and every remembered child live.
pub(super) fn update(rule: &Rule, primary: &Value, live: &[LiveChild]) -> Option<Touch> {
    let old = recorded(rule, primary);
    let mut new: BTreeSet<String> = old
        .iter()
        .filter(|e| e.split_once('/').is_some_and(|(id, _)| remembers(rule, id)))
        .cloned()
        .collect();
    new.extend(
        live.iter()
            .filter(|l| remembers(rule, &l.id))
            .map(|l| entry(&l.id, &l.key.name)),
    );
    (new != old).then(|| Touch::Remember {
        annotation: annotation(&rule.name),
        value: (!new.is_empty()).then(|| new.into_iter().collect::<Vec<_>>().join(",")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::key::ObjKey;
    use serde_json::json;

    fn rule(extra: &str) -> std::sync::Arc<Rule> {
        let yaml = format!(
            "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: r}}\nspec:\n  for: {{apiVersion: v1, kind: Namespace}}\n  children:\n    - id: deny\n      updatePolicy: CreateOnce\n{extra}      template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: deny, namespace: x}}}}\n"
        );
        let source = crate::rules::load::Source {
            file: "r.yaml".into(),
            text: yaml,
        };
        crate::rules::load_sources(vec![source]).unwrap().rules[0].clone()
    }

    fn live(id: &str, name: &str) -> LiveChild {
        LiveChild {
            id: id.into(),
            gvk: crate::rules::Gvk {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
            },
            key: ObjKey {
                namespace: Some("x".into()),
                name: name.into(),
            },
            uid: None,
            deleting: false,
            orphan: false,
        }
    }

    fn primary(record: Option<&str>) -> Value {
        match record {
            Some(r) => json!({"metadata": {"annotations": {"r.kiln.dev/created-once": r}}}),
            None => json!({"metadata": {}}),
        }
    }

    #[test]
    fn a_child_seen_is_recorded_once_and_then_forgone_when_gone() {
        let r = rule("      recreate: false\n");
        let want = Touch::Remember {
            annotation: "r.kiln.dev/created-once".into(),
            value: Some("deny/deny".into()),
        };
        assert_eq!(
            update(&r, &primary(None), &[live("deny", "deny")]),
            Some(want)
        );
        assert_eq!(
            update(&r, &primary(Some("deny/deny")), &[live("deny", "deny")]),
            None
        );
        assert_eq!(
            update(&r, &primary(Some("deny/deny")), &[]),
            None,
            "kept when gone"
        );
        assert_eq!(update(&r, &primary(None), &[]), None, "nothing to record");
        let child = DesiredChild {
            id: "deny".into(),
            gvk: live("deny", "deny").gvk,
            namespace: Some("x".into()),
            name: "deny".into(),
            object: json!({}),
            generated: Vec::new(),
        };
        assert!(forgone(&r, &child, &primary(Some("deny/deny"))));
        assert!(
            !forgone(&r, &child, &primary(None)),
            "a new primary gets one"
        );
    }

    #[test]
    fn a_rule_that_recreates_records_nothing_and_drops_its_old_record() {
        let r = rule("");
        assert_eq!(update(&r, &primary(None), &[live("deny", "deny")]), None);
        let dropped = update(&r, &primary(Some("deny/deny")), &[live("deny", "deny")]);
        assert_eq!(
            dropped,
            Some(Touch::Remember {
                annotation: "r.kiln.dev/created-once".into(),
                value: None,
            })
        );
    }
}
