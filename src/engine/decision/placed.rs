//! Whether an object carrying kiln's mark for primary P sits where kiln
//! put P's child, so the mark may be believed. Marks are hints anyone who
//! may write an object can copy (uids are no secret): an object is P's
//! child only at a place kiln decides for P.
//!
//! - An owned or orphaned child of a namespaced primary: in the primary's
//!   namespace, or cluster-scoped (`ownership::in_place`).
//! - An `outside` child: exactly at the key its template renders for P.
//!   Its name and namespace come from P's identity and the rule alone
//!   (`kiln validate` holds them to that), so the key is known without the
//!   rest of the render, even while the primary is being deleted. An
//!   object elsewhere marked as P's `outside` child (planted in a tenant's
//!   own namespace) is never read, pruned or waited for.
//! - A cluster-scoped primary's namespaced child: in the namespace its
//!   template renders from the primary's identity (a `Namespace` primary's
//!   children in that namespace); a namespace taken from the spec cannot be
//!   known before the render, and is not checked.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use crate::engine::key::ObjKey;
use crate::ownership::Mark;
use crate::rules::{Child, Rule};
use crate::template::{Budget, Piece, Tree, to_jinja};

/// A primary's identity as templates see it (`self.metadata.name`,
/// `namespace`, `uid`): all an `outside` child's key may use.
pub fn identity(meta: &ObjectMeta) -> Value {
    json!({"metadata": {"name": meta.name, "namespace": meta.namespace, "uid": meta.uid}})
}

/// Whether `mark` (already known to name `rule` and `primary`'s uid), on
/// the object at `at`, is believed. `primary` is the primary's [`identity`].
pub fn believed(rule: &Rule, mark: &Mark, at: &ObjKey, primary: &Value) -> bool {
    let primary_namespace = primary["metadata"]["namespace"].as_str();
    let Some(child) = rule.children.iter().find(|c| c.id == mark.child) else {
        // An id the rule no longer has: pruned only where kiln can have
        // put it.
        return crate::ownership::in_place(at.namespace.as_deref(), primary_namespace);
    };
    let namespace = || match rendered(rule, child, primary, "namespace") {
        // A namespaced kind whose template names no namespace goes to the
        // primary's.
        Some(None) if at.namespace.is_some() => Some(primary_namespace.map(str::to_string)),
        other => other,
    };
    if child.outside {
        let name = rendered(rule, child, primary, "name");
        return name == Some(Some(at.name.clone())) && namespace() == Some(at.namespace.clone());
    }
    if primary_namespace.is_some() || at.namespace.is_none() {
        return crate::ownership::in_place(at.namespace.as_deref(), primary_namespace);
    }
    // A cluster-scoped primary's namespaced child: in the namespace its
    // template gives, when that comes from the primary's identity.
    namespace().is_none_or(|ns| ns == at.namespace)
}

/// The child's `metadata.<field>` as its template renders it from the
/// primary's [`identity`] alone: `None` when it needs more (or does not
/// render), `Some(None)` when the template has none.
fn rendered(rule: &Rule, child: &Child, primary: &Value, field: &str) -> Option<Option<String>> {
    let ctx = minijinja::context! {
        self => to_jinja(primary),
        rule => minijinja::context! { name => rule.name.clone() },
    };
    let Some(tree) = entry(&entry(&child.template, "metadata")?, field) else {
        return Some(None);
    };
    let mut budget = Budget::new(64 * 1024);
    let value = tree.render(&rule.templates, &ctx, &mut budget).ok()?;
    Some(Some(value.as_str()?.to_string()))
}

/// The subtree at `key` of a mapping tree.
fn entry(tree: &Tree, key: &str) -> Option<Tree> {
    match tree {
        Tree::Value(Value::Object(map)) => map.get(key).cloned().map(Tree::Value),
        Tree::Map(entries) => entries.iter().find_map(|(k, v)| match k {
            Piece::Literal(k) if k == key => Some(v.clone()),
            _ => None,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ownership::Placement;

    fn at(namespace: Option<&str>, name: &str) -> ObjKey {
        ObjKey {
            namespace: namespace.map(str::to_string),
            name: name.into(),
        }
    }

    fn mark(child: &str) -> Mark {
        Mark {
            rule: "r".into(),
            child: child.into(),
            name: "w".into(),
            uid: "u1".into(),
            placement: Placement::Orphaned,
        }
    }

    fn primary(namespace: Option<&str>, name: &str) -> Value {
        identity(&ObjectMeta {
            name: Some(name.into()),
            namespace: namespace.map(str::to_string),
            uid: Some("u1".into()),
            ..ObjectMeta::default()
        })
    }

    #[test]
    fn an_outside_child_is_believed_only_at_the_key_rendered_for_its_primary() {
        let rule = crate::rules::one_rule(
            r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: r}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: settings
      outside: true
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: settings
          namespace: "{{ self.metadata.namespace }}-{{ self.metadata.name }}"
          labels: {team: "{{ self.spec.team }}"}
    - id: own
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-own"}
"#,
        );
        let p = primary(Some("team"), "w");
        let m = mark("settings");
        assert!(believed(&rule, &m, &at(Some("team-w"), "settings"), &p));
        assert!(
            !believed(&rule, &m, &at(Some("evil"), "settings"), &p),
            "planted"
        );
        assert!(!believed(&rule, &m, &at(Some("team-w"), "other"), &p));
        let own = mark("own");
        assert!(believed(&rule, &own, &at(Some("team"), "w-own"), &p));
        assert!(!believed(&rule, &own, &at(Some("evil"), "w-own"), &p));
    }

    #[test]
    fn a_cluster_scoped_primarys_child_is_believed_only_in_the_namespace_rendered_for_it() {
        let rule = crate::rules::one_rule(
            r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: r}
spec:
  for: {apiVersion: v1, kind: Namespace}
  children:
    - id: quota
      template:
        apiVersion: v1
        kind: ResourceQuota
        metadata: {name: quota, namespace: "{{ self.metadata.name }}"}
"#,
        );
        let p = primary(None, "team");
        let m = mark("quota");
        assert!(believed(&rule, &m, &at(Some("team"), "quota"), &p));
        assert!(
            !believed(&rule, &m, &at(Some("evil"), "quota"), &p),
            "planted"
        );
    }
}
