//! `spec.for.readOnly: true`: kiln writes nothing on the rule's primary —
//! no condition, no `observedGeneration`, no status field, no finalizer, no
//! label or annotation. A primary another controller owns (a Rancher
//! `Cluster` a Kyverno-style rule generates from) stays byte-for-byte as
//! its writers left it.
//!
//! What such a rule may not ask for, each refused with its place:
//! status fields and conditions, a decorator on `self`, ordered deletion
//! (it needs a finalizer), and an `outside` child kiln would have to delete
//! when the primary goes (without a finalizer nothing holds the primary
//! until it has: such a child must be `deletionPolicy: Orphan`). Children
//! that carry an owner reference (in the primary's namespace, or anywhere
//! for a cluster-scoped primary) are deleted by the garbage collector.

use super::spec::{DeletionPolicy, RawSpec};
use crate::yaml::Step;

/// A place in the rule and why it cannot be there.
pub type Refusal = (Vec<Step>, String);

fn key(k: &str) -> Step {
    Step::Key(k.to_string())
}

/// Whether the rule writes nothing on its primary.
pub fn is_read_only(spec: &RawSpec) -> bool {
    spec.for_.as_ref().is_some_and(|f| f.read_only)
}

/// What a read-only rule asks kiln to write on (or for) its primary.
pub fn refusals(spec: &RawSpec) -> Vec<Refusal> {
    if !is_read_only(spec) {
        return Vec::new();
    }
    const WHY: &str = "spec.for.readOnly is true: kiln writes nothing on the primary";
    let spec_at = |rest: &[Step]| [&[key("spec")], rest].concat();
    let mut out = Vec::new();
    if let Some(status) = &spec.status
        && (!status.fields.is_empty() || !status.conditions.is_empty())
    {
        out.push((
            spec_at(&[key("status")]),
            format!("{WHY}, so it writes no status fields or conditions"),
        ));
    }
    for (i, d) in spec.decorate.iter().enumerate() {
        if d.target.trim() == "self" {
            out.push((
                spec_at(&[key("decorate"), Step::Index(i), key("target")]),
                format!("{WHY}, so no decorator may patch `self`"),
            ));
        }
    }
    if spec.deletion.as_ref().is_some_and(|d| d.ordered) {
        out.push((
            spec_at(&[key("deletion"), key("ordered")]),
            format!("{WHY}, and ordered deletion needs a finalizer on it"),
        ));
    }
    if spec
        .deletion
        .as_ref()
        .is_some_and(|d| d.finalizer.is_some())
    {
        out.push((
            spec_at(&[key("deletion"), key("finalizer")]),
            format!("{WHY}, so it holds no finalizer on it"),
        ));
    }
    for (i, c) in spec.children.iter().enumerate() {
        if !c.recreate {
            out.push((
                spec_at(&[key("children"), Step::Index(i), key("recreate")]),
                format!(
                    "{WHY}, and `recreate: false` records the children it created in an annotation on the primary"
                ),
            ));
        }
        if c.outside && c.deletion_policy != DeletionPolicy::Orphan {
            out.push((
                spec_at(&[key("children"), Step::Index(i), key("outside")]),
                format!(
                    "{WHY}: without its finalizer kiln cannot delete an `outside` child when the primary goes; \
                     set `deletionPolicy: Orphan` (the child stays behind when the primary goes), \
                     or keep the child where an owner reference can hold it (the primary's namespace, \
                     or anywhere for a cluster-scoped primary)"
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::path_string;

    fn spec(yaml: &str) -> RawSpec {
        serde_norway::from_str(yaml).unwrap()
    }

    fn places(yaml: &str) -> Vec<String> {
        refusals(&spec(yaml))
            .iter()
            .map(|(at, _)| path_string(at))
            .collect()
    }

    const FOR: &str = "for: {apiVersion: x.io/v1, kind: C, readOnly: true}\n";

    #[test]
    fn a_read_only_rule_may_not_ask_for_anything_written_on_its_primary() {
        let yaml = format!(
            "{FOR}status: {{fields: {{a: b}}}}\ndecorate: [{{id: d, target: self, patch: {{}}}}]\ndeletion: {{ordered: true}}\nchildren:\n  - {{id: ns, outside: true, template: {{}}}}\n  - {{id: kept, outside: true, deletionPolicy: Orphan, template: {{}}}}\n  - {{id: owned, template: {{}}}}\n"
        );
        assert_eq!(
            places(&yaml),
            [
                "spec.status",
                "spec.decorate[0].target",
                "spec.deletion.ordered",
                "spec.children[0].outside"
            ]
        );
    }

    #[test]
    fn a_rule_that_writes_on_its_primary_is_not_concerned() {
        let yaml = "for: {apiVersion: x.io/v1, kind: C}\nstatus: {fields: {a: b}}\ndeletion: {ordered: true}\n";
        assert!(places(yaml).is_empty());
        assert!(!is_read_only(&spec(yaml)));
        assert!(places(&format!("{FOR}children: [{{id: owned, template: {{}}}}]\n")).is_empty());
    }
}
