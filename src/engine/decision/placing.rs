//! Where kiln's conditions go among those a primary already shows, and
//! which of its engine conditions it leaves to others. Pure.
//!
//! kiln's conditions keep the place they have on the object; a new one goes
//! at the end, so a condition another controller put first stays first.
//! Where `conditions` is one atomic field (a CRD that does not declare it
//! `x-kubernetes-list-type: map`, or keeps unknown fields), server-side
//! apply replaces the whole list, so kiln sends the others' conditions back
//! as they are, in their places, except kiln's own per-rule conditions
//! (`<rule>.kiln.dev/<type>`) it no longer composes.
//!
//! An engine condition (`Ready`, `Reconciled`, `Waiting`) the object shows
//! and kiln's field manager does not own is another controller's: kiln does
//! not write that type. Condition types the rule declares are written as
//! the rule says.

use std::collections::BTreeSet;

use serde_json::Value;

use super::status::types;

/// How the primary's schema stores `status.conditions` for server-side apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionList {
    /// A map list keyed by `type`: each condition is its own field.
    Keyed,
    /// One atomic field: whoever applies it replaces the whole list.
    Whole,
}

/// How `conditions` is stored, from the schema's `list` and what kiln's
/// field manager `owned` shows: owning `conditions` with no condition of
/// its own by type means the server keeps it as one atomic field (a schema
/// kiln could not read says nothing).
pub(crate) fn stored(list: ConditionList, owned: &[String]) -> ConditionList {
    let whole = owned.iter().any(|o| o == "conditions")
        && !owned.iter().any(|o| o.starts_with("conditions/"));
    if whole { ConditionList::Whole } else { list }
}

/// The engine condition types on `live` that another field manager set:
/// shown by the object, and not among `owned` (kiln's, as
/// [`owned`](crate::engine::cache::owned_status::owned) lists them). On a whole list
/// ownership is not per type, so none is known to be another's.
pub(crate) fn theirs(live: &Value, owned: &[String], list: ConditionList) -> Vec<String> {
    if list == ConditionList::Whole {
        return Vec::new();
    }
    live_conditions(live)
        .iter()
        .filter_map(|c| c["type"].as_str())
        .filter(|t| [types::READY, types::RECONCILED, types::WAITING].contains(t))
        .filter(|t| {
            !owned
                .iter()
                .any(|o| o.strip_prefix("conditions/") == Some(t))
        })
        .map(str::to_string)
        .collect()
}

/// `status` (kiln's, composed) with its conditions placed among `live`'s:
/// types in `skip` left out, kiln's conditions the object shows in the
/// order it shows them, new ones at the end; on a [`ConditionList::Whole`]
/// list the others' conditions are kept in their places.
pub(crate) fn place(
    mut status: Value,
    live: &Value,
    list: ConditionList,
    skip: &[String],
) -> Value {
    let Some(mine) = status.get_mut("conditions").and_then(Value::as_array_mut) else {
        return status;
    };
    mine.retain(|c| !skip.iter().any(|s| c["type"] == s.as_str()));
    let shown = live_conditions(live);
    let mut placed = Vec::with_capacity(mine.len() + shown.len());
    let mut seen = BTreeSet::new();
    for l in shown {
        let t = l["type"].as_str().unwrap_or_default().to_string();
        if !seen.insert(t.clone()) {
            continue;
        }
        match mine.iter().find(|m| m["type"] == t.as_str()) {
            Some(m) => placed.push(m.clone()),
            None if list == ConditionList::Whole && !kilns(&t) => placed.push(l.clone()),
            None => {}
        }
    }
    placed.extend(
        mine.iter()
            .filter(|m| !seen.contains(m["type"].as_str().unwrap_or_default()))
            .cloned(),
    );
    *mine = placed;
    status
}

/// A per-rule condition type kiln made (`<rule>.kiln.dev/<type>`): one it
/// no longer composes leaves, as a condition kiln owns does from a map list.
fn kilns(t: &str) -> bool {
    t.contains(".kiln.dev/")
}

fn live_conditions(live: &Value) -> &[Value] {
    live["conditions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn c(t: &str, s: &str) -> Value {
        json!({"type": t, "status": s})
    }

    fn types_of(status: &Value) -> Vec<&str> {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect()
    }

    fn mine() -> Value {
        json!({"conditions": [c("Ready", "True"), c("Reconciled", "True"), c("Waiting", "False")]})
    }

    #[test]
    fn others_first_stay_first_and_new_ones_go_at_the_end() {
        let live = json!({"conditions": [c("Synced", "True"), c("Reconciled", "False"), c("gone.kiln.dev/Ready", "True")]});
        let out = place(mine(), &live, ConditionList::Keyed, &[]);
        assert_eq!(types_of(&out), ["Reconciled", "Ready", "Waiting"]);
        assert_eq!(out["conditions"][0]["status"], "True", "kiln's value");
        let out = place(mine(), &live, ConditionList::Whole, &[]);
        assert_eq!(
            types_of(&out),
            ["Synced", "Reconciled", "Ready", "Waiting"],
            "a whole list is sent back with the others' conditions in their places"
        );
    }

    #[test]
    fn owning_conditions_with_no_type_of_its_own_is_a_whole_list() {
        let whole = ["conditions".to_string(), "observedGeneration".to_string()];
        assert_eq!(stored(ConditionList::Keyed, &whole), ConditionList::Whole);
        let keyed = ["conditions".to_string(), "conditions/Ready".to_string()];
        assert_eq!(stored(ConditionList::Keyed, &keyed), ConditionList::Keyed);
        assert_eq!(stored(ConditionList::Keyed, &[]), ConditionList::Keyed);
    }

    #[test]
    fn an_engine_condition_kiln_does_not_own_is_theirs() {
        let live = json!({"conditions": [c("Ready", "False"), c("Reconciled", "True"), c("Mine", "True")]});
        let owned = ["conditions/Reconciled".to_string()];
        assert_eq!(theirs(&live, &owned, ConditionList::Keyed), ["Ready"]);
        assert!(theirs(&live, &owned, ConditionList::Whole).is_empty());
        let skip = theirs(&live, &owned, ConditionList::Keyed);
        let out = place(mine(), &live, ConditionList::Keyed, &skip);
        assert_eq!(types_of(&out), ["Reconciled", "Waiting"]);
    }
}
