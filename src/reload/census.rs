//! How much each running rule does: the primaries it selects and the
//! children it made for them, counted in the engine's caches (no request)
//! for the `status` of `Rule` resources.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::engine::Engine;
use crate::engine::runtime::RuleController;

/// One rule's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Count {
    /// Primaries the rule selects.
    pub primaries: usize,
    /// Children kiln made for them (the rule's mark and an owner reference
    /// to the primary, as in the cache).
    pub children: usize,
}

/// The counts of every running rule, when this replica can tell them (it
/// runs the engine on every primary); `None` otherwise.
pub type Census = Arc<dyn Fn() -> Option<BTreeMap<String, Count>> + Send + Sync>;

/// The counts of the rules `names` that run in `engine` (a rule still
/// waiting for its kinds has none).
pub fn count(engine: &Engine, names: &[String]) -> BTreeMap<String, Count> {
    names
        .iter()
        .filter_map(|name| Some((name.clone(), of(engine.controller(name)?.as_ref()))))
        .collect()
}

fn of(controller: &RuleController) -> Count {
    let rule = &controller.rule().name;
    let wiring = controller.wiring();
    let selected: Vec<String> = controller
        .primaries()
        .entries()
        .iter()
        .filter(|o| controller.selects(o.namespace(), &o.labels()))
        .filter_map(|o| o.uid().map(ToString::to_string))
        .collect();
    // Several child ids may share a kind, and so an informer.
    let mut seen = BTreeSet::new();
    let informers: Vec<_> = wiring
        .children
        .values()
        .filter(|i| seen.insert(Arc::as_ptr(i) as usize))
        .collect();
    let children = selected
        .iter()
        .map(|uid| {
            informers
                .iter()
                .flat_map(|i| i.owned_by(uid))
                .filter(|child| crate::ownership::child_of(&child.metadata, rule, uid))
                .count()
        })
        .sum();
    Count {
        primaries: selected.len(),
        children,
    }
}
