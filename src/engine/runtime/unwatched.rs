//! An `outside` child that would go to a namespace kiln does not watch.
//!
//! kiln run with `--namespace` sees only those namespaces: in any other it
//! could not tell whether someone else's object already holds the child's
//! name (and would overwrite it), never sees the child it made, and cannot
//! delete it when the primary goes. A rule whose `outside` child names
//! such a namespace literally is refused (by the engine, and by the reload
//! check before it replaces a running one); a templated namespace that
//! renders to one is refused for that primary (`NamespaceNotAllowed`),
//! nothing written.

use std::sync::Arc;

use crate::engine::cache::kinds::Kind;
use crate::render::Rendered;
use crate::rules::{Child, Gvk, Rule};
use crate::template::{Piece, Tree};

/// Why each of `rule`'s namespaced `outside` children whose template
/// names a namespace kiln does not watch (`namespaces`; empty: every
/// namespace) literally is refused, one line per child. `namespaced` says
/// whether a kind is namespaced (`None`: not known; not judged).
pub(crate) fn unwatched(
    rule: &Rule,
    namespaces: &[String],
    namespaced: impl Fn(&Gvk) -> Option<bool>,
) -> Vec<String> {
    rule.children
        .iter()
        .filter(|c| c.outside && namespaced(&c.gvk) == Some(true))
        .filter_map(|c| {
            let ns = literal_namespace(c)?;
            (!watched(namespaces, ns)).then(|| refusal_of(&c.id, &c.gvk.kind, ns, namespaces))
        })
        .collect()
}

/// Why the children `rendered` for a primary may not be written: an
/// `outside` child rendered into a namespace kiln does not watch.
pub(super) fn unseen(rule: &Rule, rendered: &Rendered, namespaces: &[String]) -> Option<String> {
    let why: Vec<String> = rendered
        .children
        .iter()
        .filter(|c| rule.children.iter().any(|r| r.id == c.id && r.outside))
        .filter_map(|c| {
            let ns = c.namespace.as_deref()?;
            (!watched(namespaces, ns)).then(|| refusal_of(&c.id, &c.gvk.kind, ns, namespaces))
        })
        .collect();
    (!why.is_empty()).then(|| why.join("; "))
}

fn watched(namespaces: &[String], ns: &str) -> bool {
    namespaces.is_empty() || namespaces.iter().any(|w| w == ns)
}

fn refusal_of(id: &str, kind: &str, ns: &str, namespaces: &[String]) -> String {
    format!(
        "child `{id}` is an `outside` {kind} in namespace `{ns}`, and kiln watches only {}: there it could not see someone else's object holding the name (it would overwrite it), nor delete its child when the primary goes; run kiln on that namespace too, or on every namespace",
        namespaces.join(", ")
    )
}

/// Why `rule` may not run on an engine watching `namespaces`, with its
/// kinds resolved: the reasons of [`unwatched`] as one line.
pub(super) fn refusal(rule: &Rule, namespaces: &[String], kinds: &[Arc<Kind>]) -> Option<String> {
    let namespaced = |gvk: &Gvk| kinds.iter().find(|k| &k.gvk == gvk).map(|k| k.namespaced);
    let why = unwatched(rule, namespaces, namespaced);
    (!why.is_empty()).then(|| why.join("; "))
}

/// The child's `metadata.namespace` when the template writes it literally.
fn literal_namespace(child: &Child) -> Option<&str> {
    let metadata = match &child.template {
        Tree::Value(v) => return v["metadata"]["namespace"].as_str(),
        Tree::Map(entries) => entries.iter().find_map(|(k, v)| match k {
            Piece::Literal(k) if k == "metadata" => Some(v),
            _ => None,
        })?,
        _ => return None,
    };
    metadata.literal_at("namespace")?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(namespace: &str) -> Rule {
        let text = format!(
            r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {{name: space}}
spec:
  for: {{apiVersion: test.kiln.dev/v1, kind: Widget}}
  children:
    - id: settings
      outside: true
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: "{{{{ self.metadata.name }}}}"
          namespace: "{namespace}"
"#
        );
        crate::rules::one_rule(&text)
    }

    #[test]
    fn an_outside_child_in_a_namespace_kiln_does_not_watch_is_refused() {
        let watched = ["team".to_string()];
        let why = unwatched(&rule("shared"), &watched, |_| Some(true));
        assert_eq!(why.len(), 1);
        assert!(
            why[0].contains("child `settings`") && why[0].contains("only team"),
            "{}",
            why[0]
        );
        assert!(
            unwatched(&rule("shared"), &[], |_| Some(true)).is_empty(),
            "every namespace"
        );
        assert!(
            unwatched(&rule("shared"), &watched, |_| Some(false)).is_empty(),
            "cluster-scoped"
        );
        assert!(unwatched(&rule("team"), &watched, |_| Some(true)).is_empty());
        // A templated namespace is judged where it renders.
        let templated = rule("{{ self.metadata.namespace }}-space");
        assert!(unwatched(&templated, &watched, |_| Some(true)).is_empty());
    }
}
