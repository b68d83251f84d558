//! Whether a child with `adopt: true` may take over the object at the key
//! it rendered. In the primary's own namespace it may; anywhere else (an
//! `outside` child, a cluster-scoped child, a cluster-scoped primary's
//! child) only an object the rule names literally (`adoptNames`, or the
//! child's literal name, see `rules::validate::adoption`): whoever writes a
//! primary decides values, not which existing object kiln takes over and
//! later deletes with the primary.

use crate::engine::key::ObjKey;
use crate::rules::Child;

/// Why `child` may not take over the object at `key` for a primary in
/// `primary_namespace` (`None`: cluster-scoped), if it may not. A child
/// that does not adopt is not asked.
pub(super) fn refused(
    child: &Child,
    key: &ObjKey,
    primary_namespace: Option<&str>,
) -> Option<String> {
    let confined = !child.outside
        && primary_namespace.is_some()
        && key.namespace.as_deref() == primary_namespace;
    let at = match &key.namespace {
        Some(ns) => format!("{ns}/{}", key.name),
        None => key.name.clone(),
    };
    if confined || child.adopt_names.contains(&at) {
        return None;
    }
    Some(format!(
        "child `{}` takes over only what its `adoptNames` lists outside the primary's namespace ({}), not `{at}`: the primary decides values, not which existing object kiln takes over",
        child.id,
        if child.adopt_names.is_empty() {
            "none".to_string()
        } else {
            child.adopt_names.join(", ")
        }
    ))
}

/// Whether `child` takes over whatever holds `key` (it adopts, within its
/// bound).
pub(super) fn adopts(child: Option<&Child>, key: &ObjKey, primary_namespace: Option<&str>) -> bool {
    child.is_some_and(|c| c.adopt && refused(c, key, primary_namespace).is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(outside: bool, adopt_names: &[&str]) -> Child {
        let text = format!(
            r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: teams}}
spec:
  for: {{apiVersion: test.kiln.dev/v1, kind: Team}}
  children:
    - id: space
      outside: {outside}
      adopt: true
      adoptNames: {adopt_names:?}
      template:
        apiVersion: test.kiln.dev/v1
        kind: Space
        metadata: {{name: "{{{{ self.metadata.name }}}}"}}
"#
        );
        let rule = crate::rules::one_rule(&text);
        rule.children.into_iter().next().unwrap()
    }

    fn key(namespace: Option<&str>, name: &str) -> ObjKey {
        ObjKey {
            namespace: namespace.map(str::to_string),
            name: name.into(),
        }
    }

    #[test]
    fn a_tenant_cannot_name_the_object_kiln_takes_over() {
        let listed = child(true, &["legacy", "shared/settings"]);
        let why = refused(&listed, &key(None, "victim"), Some("team-a")).unwrap();
        assert!(
            why.contains("`adoptNames`") && why.contains("`victim`"),
            "{why}"
        );
        assert!(why.contains("(legacy, shared/settings)"), "{why}");
        assert!(!adopts(Some(&listed), &key(None, "victim"), Some("team-a")));
        assert!(adopts(Some(&listed), &key(None, "legacy"), Some("team-a")));
        assert!(adopts(
            Some(&listed),
            &key(Some("shared"), "settings"),
            Some("a")
        ));
        assert!(!adopts(
            Some(&listed),
            &key(Some("other"), "settings"),
            Some("a")
        ));
    }

    #[test]
    fn in_the_primarys_own_namespace_adoption_needs_no_list() {
        let inside = child(false, &[]);
        assert!(adopts(Some(&inside), &key(Some("a"), "x"), Some("a")));
        assert!(
            !adopts(Some(&inside), &key(None, "x"), None),
            "cluster-scoped primary"
        );
    }
}
