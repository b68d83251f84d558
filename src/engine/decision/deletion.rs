//! A primary going away: whether the rule holds its finalizer on it, what
//! a reconcile does with that finalizer before anything else, and the
//! teardown, one step per reconcile — the children nothing live waits for
//! are deleted first; once none is left the finalizer goes, and the
//! primary with it.
//!
//! Pure: the controller reads the primary's finalizers, the caches and the
//! live children, and carries each step out (`runtime/controller/finalizer.rs`).

use super::live::LiveChild;
use super::plan::{Next, Prune, orphaned};
use crate::rules::{DeletionPolicy, Rule};

/// The finalizer a rule keeps on its primaries: the one it names, else
/// `<rule>.kiln.dev/ordered-deletion`.
pub(crate) fn finalizer(rule: &Rule) -> String {
    rule.finalizer
        .clone()
        .unwrap_or_else(|| unnamed_finalizer(&rule.name))
}

/// The finalizer of the rule named `rule` when it names none.
pub(crate) fn unnamed_finalizer(rule: &str) -> String {
    format!("{rule}.kiln.dev/ordered-deletion")
}

/// The field manager a rule keeps its finalizer with: only that entry is
/// ever removed, never a copy of the string another manager wrote.
pub(crate) fn manager(rule: &str) -> String {
    format!("kiln-finalizer-{rule}")
}

/// Whether the rule holds its finalizer on primaries: it names it, it
/// deletes its children in order, it has a finalize hook to call first, or
/// it has `outside` children it deletes (no owner reference lets the
/// garbage collector delete those; kiln does).
pub(crate) fn needed(rule: &Rule) -> bool {
    rule.finalizer.is_some()
        || rule.ordered_deletion
        || rule.hook.as_ref().is_some_and(|h| h.finalize.is_some())
        || rule
            .children
            .iter()
            .any(|c| c.outside && c.deletion_policy != DeletionPolicy::Orphan)
}

/// Whether a primary with these `finalizers` carries the rule's.
pub(crate) fn holds(rule: &Rule, finalizers: &[String]) -> bool {
    let finalizer = finalizer(rule);
    finalizers.contains(&finalizer)
}

/// What a reconcile does with the rule's finalizer before anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finalizing {
    /// The primary is going and the finalizer holds it: take the next
    /// [`step`] of the teardown.
    TearDown,
    /// Let go of the finalizer, and stop (a primary going that the rule no
    /// longer selects).
    Release,
    /// Nothing more for this primary (going, without the finalizer).
    Stop,
    /// Add (`true`) or remove (`false`) the finalizer, then reconcile: added
    /// before any child exists, so none is left to the garbage collector's
    /// order; removed as soon as it is not wanted.
    Set(bool),
    /// Reconcile as it is.
    Keep,
}

/// The finalizer step: whether the primary `holds` the rule's finalizer,
/// whether the rule `wants` it held ([`needed`], and the primary selected;
/// `None` while that is unknown, e.g. a Namespace cache kiln may not list)
/// and whether it is `going`.
/// Never act on missing information: an unknown want keeps the finalizer as
/// it is, going or not, and the reconcile says why it waits.
pub(crate) fn finalizing(holds: bool, wants: Option<bool>, going: bool) -> Finalizing {
    let Some(wants) = wants else {
        return Finalizing::Keep;
    };
    match (going, holds, wants) {
        (true, true, true) => Finalizing::TearDown,
        (true, true, false) => Finalizing::Release,
        (true, false, _) => Finalizing::Stop,
        (false, h, w) if h != w => Finalizing::Set(w),
        (false, _, _) => Finalizing::Keep,
    }
}

/// What to delete now while a primary with ordered deletion goes away: the
/// live children no other live child waits for (a child goes before the
/// children it waits for). Nothing left alive means the finalizer may go.
pub(crate) fn teardown(rule: &Rule, live: &[LiveChild]) -> Vec<Prune> {
    let waited_for = |id: &str| {
        live.iter().any(|other| {
            other.id != id
                && rule
                    .children
                    .iter()
                    .any(|c| c.id == other.id && c.needs.iter().any(|n| n.id == id))
        })
    };
    // An orphaned child stays when its primary goes.
    live.iter()
        .filter(|c| !c.deleting && !waited_for(&c.id) && !orphaned(rule, c))
        .map(|c| Prune {
            gvk: c.gvk.clone(),
            key: c.key.clone(),
            uid: c.uid.clone(),
        })
        .collect()
}

/// One step of a teardown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Delete nothing now, and look again (why, for the log).
    Wait(&'static str),
    /// Let go of the finalizer: nothing kiln deletes is left.
    Release,
    /// Delete these children, then look again.
    Prune(Vec<Prune>),
}

/// The next step of tearing down a primary, from its `live` children as
/// the caches hold them (`blind`: a cache cannot be trusted).
pub(crate) fn step(rule: &Rule, blind: bool, live: &[LiveChild]) -> Step {
    // Never act on missing information: a child a blind cache lacks may exist.
    if blind {
        return Step::Wait("a cache of the rule's kinds cannot be trusted yet");
    }
    // Orphaned children stay: they never hold the primary back.
    if live.iter().all(|c| orphaned(rule, c)) {
        return Step::Release;
    }
    let prune = teardown(rule, live);
    if prune.is_empty() {
        return Step::Wait("the children left are being deleted");
    }
    Step::Prune(prune)
}

impl Step {
    /// When to look again once the step is carried out.
    pub(crate) fn next(&self, rule: &Rule) -> Next {
        match self {
            Self::Release => Next::Done,
            Self::Wait(_) | Self::Prune(_) => Next::After(rule.requeue.waiting),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::key::ObjKey;
    use crate::rules::{Gvk, one_rule};

    /// `db` first, `app` needs it; `cache` outside the namespace, deleted
    /// by kiln; `logs` left behind.
    const RULE: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: shop}
spec:
  for: {apiVersion: demo.kiln.dev/v1, kind: App}
  deletion: {ordered: true}
  children:
    - id: db
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-db"}
    - id: app
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-app"}
        data: {db: "{{ children.db.metadata.name }}"}
    - id: logs
      deletionPolicy: Orphan
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}-logs"}
"#;

    fn live(id: &str) -> LiveChild {
        LiveChild {
            id: id.into(),
            gvk: Gvk {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
            },
            key: ObjKey {
                namespace: Some("team".into()),
                name: format!("shop-{id}"),
            },
            uid: Some(format!("uid-{id}")),
            deleting: false,
            orphan: false,
        }
    }

    fn deleting(id: &str) -> LiveChild {
        LiveChild {
            deleting: true,
            ..live(id)
        }
    }

    /// A step, in words.
    fn said(step: &Step) -> String {
        match step {
            Step::Wait(why) => format!("wait: {why}"),
            Step::Release => "release".into(),
            Step::Prune(prune) => {
                let names: Vec<&str> = prune.iter().map(|p| p.key.name.as_str()).collect();
                format!("delete {}", names.join(", "))
            }
        }
    }

    #[test]
    fn a_teardown_deletes_what_nothing_waits_for_then_lets_the_primary_go() {
        let rule = one_rule(RULE);
        // (blind, live) → step
        let table = [
            (
                true,
                vec![live("app")],
                "wait: a cache of the rule's kinds cannot be trusted yet",
            ),
            (
                false,
                vec![live("db"), live("app"), live("logs")],
                "delete shop-app",
            ),
            (
                false,
                vec![live("db"), deleting("app")],
                "wait: the children left are being deleted",
            ),
            (false, vec![live("db"), live("logs")], "delete shop-db"),
            (
                false,
                vec![deleting("db")],
                "wait: the children left are being deleted",
            ),
            (false, vec![live("logs")], "release"),
            (false, vec![], "release"),
        ];
        for (blind, live, expected) in table {
            assert_eq!(said(&step(&rule, blind, &live)), expected, "{live:?}");
        }
    }

    #[test]
    fn a_teardown_looks_again_after_each_step_but_the_release() {
        let rule = one_rule(RULE);
        let waiting = Next::After(rule.requeue.waiting);
        assert_eq!(Step::Wait("x").next(&rule), waiting);
        assert_eq!(Step::Prune(Vec::new()).next(&rule), waiting);
        assert_eq!(Step::Release.next(&rule), Next::Done);
    }

    #[test]
    fn the_finalizer_is_needed_for_ordered_deletion_or_outside_children_kiln_deletes() {
        let ordered = one_rule(RULE);
        assert!(needed(&ordered));
        let mut plain = one_rule(RULE);
        plain.ordered_deletion = false;
        assert!(
            !needed(&plain),
            "the garbage collector deletes the children"
        );
        plain.children[0].outside = true;
        assert!(needed(&plain), "an outside child has no owner reference");
        plain.children[0].deletion_policy = DeletionPolicy::Orphan;
        assert!(!needed(&plain), "an orphaned outside child stays");
    }

    #[test]
    fn a_primary_holds_the_rule_s_finalizer_not_another_rule_s() {
        let mut rule = one_rule(RULE);
        let ours = finalizer(&rule);
        assert_eq!(ours, "shop.kiln.dev/ordered-deletion");
        assert!(holds(&rule, &[String::from("x"), ours]));
        assert!(!holds(&rule, &["other.kiln.dev/ordered-deletion".into()]));
        assert!(!holds(&rule, &[]));
        // A finalizer the rule names is the one it holds, always.
        rule.finalizer = Some("finalizers.example.com".into());
        rule.ordered_deletion = false;
        assert_eq!(finalizer(&rule), "finalizers.example.com");
        assert!(holds(&rule, &["finalizers.example.com".into()]));
        assert!(needed(&rule));
    }
}
