//! What a child's `history` keeps of the live children the rule no longer
//! renders: the newest `keep` of each class, by creation time (then name).
//! The rest of them are pruned like any child no longer rendered; this only
//! takes children out of the prune, never adds one. A child being deleted
//! already, or left to outlive its primary (no owner reference), takes no
//! place: it is not kiln's to keep.

use std::collections::BTreeMap;

use super::live::LiveChild;
use crate::render::history::Filed;

/// The filed children that stay, among the `live` children of the snapshot.
pub(super) fn kept<'f>(filed: &'f [Filed], live: &[LiveChild]) -> Vec<&'f Filed> {
    let mut classes: BTreeMap<(&str, usize), Vec<&Filed>> = BTreeMap::new();
    let counted = |f: &Filed| live.iter().any(|l| is(f, l) && !l.deleting && !l.orphan);
    for f in filed.iter().filter(|f| counted(f)) {
        classes.entry((&f.id, f.class)).or_default().push(f);
    }
    classes
        .into_values()
        .flat_map(|mut members| {
            members.sort_by(|a, b| (&b.created, &b.name).cmp(&(&a.created, &a.name)));
            let keep = members.first().map_or(0, |f| f.keep);
            members.into_iter().take(keep)
        })
        .collect()
}

/// Whether `live` is one of the children kept.
pub(super) fn keeps(kept: &[&Filed], live: &LiveChild) -> bool {
    kept.iter().any(|f| is(f, live))
}

/// Whether the filed child is the live one.
fn is(f: &Filed, live: &LiveChild) -> bool {
    f.id == live.id && f.name == live.key.name && f.namespace == live.key.namespace
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filed(name: &str, class: usize, keep: usize, created: &str) -> Filed {
        Filed {
            id: "jobs".into(),
            namespace: Some("ns".into()),
            name: name.into(),
            class,
            keep,
            created: created.into(),
        }
    }

    fn live(filed: &[Filed]) -> Vec<LiveChild> {
        filed
            .iter()
            .map(|f| LiveChild {
                id: f.id.clone(),
                gvk: crate::rules::namespace_gvk(),
                key: crate::engine::key::ObjKey {
                    namespace: f.namespace.clone(),
                    name: f.name.clone(),
                },
                uid: None,
                deleting: false,
                orphan: false,
            })
            .collect()
    }

    fn names<'a>(kept: &[&'a Filed]) -> Vec<&'a str> {
        let mut out: Vec<&str> = kept.iter().map(|f| f.name.as_str()).collect();
        out.sort_unstable();
        out
    }

    #[test]
    fn the_newest_of_each_class_stay_each_class_by_its_own_keep() {
        let filed = [
            filed("ok-1", 0, 2, "2026-05-17T09:15:00Z"),
            filed("ok-3", 0, 2, "2026-05-17T09:45:00Z"),
            filed("ok-2", 0, 2, "2026-05-17T09:30:00Z"),
            filed("bad-1", 1, 1, "2026-05-17T08:00:00Z"),
            filed("bad-2", 1, 1, "2026-05-17T10:00:00Z"),
        ];
        assert_eq!(
            names(&kept(&filed, &live(&filed))),
            ["bad-2", "ok-2", "ok-3"]
        );
    }

    #[test]
    fn keep_zero_keeps_none_and_a_tie_in_time_goes_by_name() {
        let filed = [
            filed("a", 0, 1, "2026-05-17T09:00:00Z"),
            filed("b", 0, 1, "2026-05-17T09:00:00Z"),
            filed("c", 1, 0, "2026-05-17T09:00:00Z"),
        ];
        assert_eq!(names(&kept(&filed, &live(&filed))), ["b"]);
    }

    #[test]
    fn a_child_being_deleted_or_orphaned_takes_no_place() {
        let filed = [
            filed("old", 0, 1, "2026-05-17T08:00:00Z"),
            filed("going", 0, 1, "2026-05-17T09:00:00Z"),
            filed("left", 0, 1, "2026-05-17T10:00:00Z"),
        ];
        let mut live = live(&filed);
        live[1].deleting = true;
        live[2].orphan = true;
        assert_eq!(names(&kept(&filed, &live)), ["old"]);
        assert_eq!(
            names(&kept(&filed, &[])),
            Vec::<&str>::new(),
            "only what is live"
        );
    }
}
