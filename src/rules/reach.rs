//! What a rule makes kiln read beyond the primary's own namespace, said in
//! words for `kiln validate`: the tenant boundary a rule's author chose.

use super::scope::well_known_scope;
use super::{Rule, WatchTarget};

/// One line per watch that reads every namespace (`allNamespaces`).
pub fn notes(rule: &Rule) -> Vec<String> {
    let primary = &rule.primary.gvk;
    let scope = match well_known_scope(primary) {
        Some(false) => "cluster-scoped",
        Some(true) => "namespaced",
        None => "a custom kind",
    };
    rule.watches
        .iter()
        .filter(|w| matches!(w.target, WatchTarget::Selector { all_namespaces: true, .. }))
        .map(|w| {
            format!(
                "rule `{}`: related.{} reads the {} objects it selects in every namespace kiln watches \
                 (allNamespaces), whatever namespace a {} ({scope}) is in: whoever may create one \
                 sees them through what the rule renders from them",
                rule.name, w.name, w.gvk.kind, primary.kind
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(watch: &str) -> Rule {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.yaml");
        let text = format!(
            "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: r}}\nspec:\n  for: {{apiVersion: demo.kiln.dev/v1, kind: App}}\n  watches:\n{watch}"
        );
        std::fs::write(&file, text).unwrap();
        let mut set = super::super::load(&[file]).unwrap_or_else(|d| panic!("{}", d[0]));
        std::sync::Arc::into_inner(set.rules.remove(0)).unwrap()
    }

    #[test]
    fn a_watch_across_all_namespaces_is_explained_and_others_are_not() {
        let all = rule(
            "    - {name: peers, apiVersion: v1, kind: ConfigMap, selector: {allNamespaces: true, matchExpressions: [{key: peer, operator: Exists}]}}\n",
        );
        let notes = notes(&all);
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].contains(
                "related.peers reads the ConfigMap objects it selects in every namespace"
            ),
            "{}",
            notes[0]
        );
        let own = rule(
            "    - {name: peers, apiVersion: v1, kind: ConfigMap, selector: {matchLabels: {peer: x}}}\n",
        );
        assert!(super::notes(&own).is_empty());
    }
}
