//! `replace` on a child: the maps at those paths hold exactly the keys the
//! rule renders (Kyverno's `synchronize`). Server-side apply keeps the keys
//! other field managers own, so kiln removes them itself: when the live
//! child (as cached: the cache keeps these maps whole) holds a key under a
//! `replace` path that the rendered child does not, the plan sends a merge
//! patch setting it to null, conditioned on the child's `resourceVersion`
//! (`touch.rs`). Nothing extra, nothing sent. A path the rule renders no
//! map at is left alone.

use serde_json::Value;

use super::touch::{Touch, extra};
use crate::render::DesiredChild;
use crate::rules::Child;

/// The touch that removes what `live` holds beyond the rendered `desired`
/// under `child`'s `replace` paths, if anything.
pub(super) fn needed(child: Option<&Child>, desired: &DesiredChild, live: &Value) -> Option<Touch> {
    let paths = &child?.replace;
    if extra(paths, &desired.object, live).is_empty() {
        return None;
    }
    Some(Touch::Strip {
        gvk: desired.gvk.clone(),
        key: super::live::key_of(desired),
        uid: live["metadata"]["uid"].as_str().map(str::to_string),
        paths: paths.clone(),
        desired: desired.object.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(s: &str) -> Vec<String> {
        s.split('.').map(str::to_string).collect()
    }

    #[test]
    fn only_keys_under_replace_paths_that_the_rule_does_not_render_are_extra() {
        let desired =
            json!({"spec": {"hard": {"pods": "10"}, "scopes": ["x"]}, "data": {"a": "1"}});
        let live = json!({"spec": {"hard": {"pods": "10", "cpu": "4"}, "scopes": ["x"], "other": 1},
                          "data": {"a": "1", "b": "2"}});
        assert_eq!(
            extra(&[p("spec.hard")], &desired, &live),
            vec![p("spec.hard.cpu")]
        );
        assert_eq!(
            extra(&[p("spec.hard"), p("data")], &desired, &live),
            vec![p("spec.hard.cpu"), p("data.b")]
        );
        assert!(
            extra(&[p("spec.limits")], &desired, &live).is_empty(),
            "not rendered"
        );
        assert!(extra(&[p("spec.hard")], &desired, &desired).is_empty());
    }
}
