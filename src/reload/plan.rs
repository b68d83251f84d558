//! What a reload changes: rules compared by name and content fingerprint.
//! Pure, so the decision is tested without a cluster.

use crate::rules::RuleSet;

/// What to do to go from the running set to a new one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// New names: start them.
    pub start: Vec<String>,
    /// Names gone from the new set: stop them.
    pub stop: Vec<String>,
    /// Same name, different content: swap and re-reconcile.
    pub replace: Vec<String>,
    /// Same name and content: leave alone.
    pub unchanged: Vec<String>,
}

impl Plan {
    /// Whether the plan changes anything.
    pub fn is_empty(&self) -> bool {
        self.start.is_empty() && self.stop.is_empty() && self.replace.is_empty()
    }
}

/// Compares two rule sets.
pub fn plan(old: &RuleSet, new: &RuleSet) -> Plan {
    let mut p = Plan::default();
    for rule in &new.rules {
        match old.get(&rule.name) {
            None => p.start.push(rule.name.clone()),
            Some(o) if o.fingerprint == rule.fingerprint => p.unchanged.push(rule.name.clone()),
            Some(_) => p.replace.push(rule.name.clone()),
        }
    }
    for rule in &old.rules {
        if new.get(&rule.name).is_none() {
            p.stop.push(rule.name.clone());
        }
    }
    p
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::rules::load::Source;

    /// Rules named and on kinds as given, each in a file of its own.
    pub(in crate::reload) fn set(rules: &[(&str, &str)]) -> RuleSet {
        let sources = rules
            .iter()
            .map(|(name, kind)| Source {
                file: format!("{name}.yaml").into(),
                text: format!("apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: {name}}}\nspec:\n  for: {{apiVersion: v1, kind: {kind}}}\n"),
            })
            .collect();
        crate::rules::load_sources(sources).unwrap()
    }

    #[test]
    fn diffs_by_name_and_content() {
        let old = set(&[("a", "ConfigMap"), ("b", "Secret"), ("c", "Service")]);
        let new = set(&[("a", "ConfigMap"), ("b", "Pod"), ("d", "Namespace")]);
        let p = plan(&old, &new);
        assert_eq!(p.unchanged, ["a"]);
        assert_eq!(p.replace, ["b"]);
        assert_eq!(p.start, ["d"]);
        assert_eq!(p.stop, ["c"]);
        assert!(plan(&new, &new).is_empty());
    }
}
