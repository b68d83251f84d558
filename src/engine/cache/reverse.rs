//! The reverse index of `spec.watches`: which primaries' rendered references
//! point at which related object, so a change to a related object requeues
//! exactly those primaries (and a related object that appears for the first
//! time finds the primaries that were waiting for it).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::engine::key::ObjKey;
use crate::rules::LabelSelector;

/// One primary's selector watch: objects in `namespace` with these labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SelectorRef {
    /// The watch's name.
    pub watch: String,
    /// Where to look (`None`: cluster-scoped kind).
    pub namespace: Option<String>,
    /// Every namespace instead (`allNamespaces`).
    pub all_namespaces: bool,
    /// The rendered selector.
    pub selector: LabelSelector,
}

/// A watch's name and the key of the object it names, shared by the index
/// and every primary naming it (the bench's 3000 WebApps name one Secret).
type Target = Arc<(Box<str>, ObjKey)>;

/// What one primary's watches point at; boxed slices, so a primary that
/// names one object holds one entry, not a grown vector's spare capacity.
#[derive(Debug, Default)]
struct Targets {
    refs: Box<[Target]>,
    selectors: Box<[SelectorRef]>,
}

/// Watch name + related key → primaries, and the way back for cleanup.
/// Each primary's key is held once, shared by both maps, and each target
/// once however many primaries name it (at the bench's N=3000
/// copies of keys and watch names would take about 0.8 MB).
#[derive(Debug, Default)]
pub(crate) struct Reverse {
    by_target: HashMap<Target, HashSet<Arc<ObjKey>>>,
    by_primary: HashMap<Arc<ObjKey>, Targets>,
}

impl Reverse {
    /// Records what `primary` refers to now, replacing what it referred to before.
    pub(crate) fn set(
        &mut self,
        primary: &ObjKey,
        refs: Vec<(String, ObjKey)>,
        selectors: Vec<SelectorRef>,
    ) {
        self.forget(primary);
        let primary = Arc::new(primary.clone());
        let refs = refs
            .into_iter()
            .map(|(watch, key)| {
                let target = (watch.into_boxed_str(), key);
                let target = match self.by_target.get_key_value(&target) {
                    Some((shared, _)) => shared.clone(),
                    None => Arc::new(target),
                };
                self.by_target
                    .entry(target.clone())
                    .or_default()
                    .insert(primary.clone());
                target
            })
            .collect();
        let targets = Targets {
            refs,
            selectors: selectors.into_boxed_slice(),
        };
        self.by_primary.insert(primary, targets);
    }

    /// Drops everything `primary` referred to.
    pub(crate) fn forget(&mut self, primary: &ObjKey) {
        let Some(targets) = self.by_primary.remove(primary) else {
            return;
        };
        for target in targets.refs {
            if let Some(set) = self.by_target.get_mut(&target) {
                set.remove(primary);
                if set.is_empty() {
                    self.by_target.remove(&target);
                }
            }
        }
    }

    /// Primaries whose watch `watch` refers to `object` (with these labels).
    pub(crate) fn primaries_for(
        &self,
        watch: &str,
        object: &ObjKey,
        labels: &BTreeMap<String, String>,
    ) -> Vec<ObjKey> {
        let mut out: Vec<ObjKey> = self
            .by_target
            .get(&(Box::from(watch), object.clone()))
            .map(|s| s.iter().map(|p| ObjKey::clone(p)).collect())
            .unwrap_or_default();
        for (primary, targets) in &self.by_primary {
            let hit = targets.selectors.iter().any(|s| {
                s.watch == watch
                    && (s.all_namespaces || s.namespace == object.namespace)
                    && s.selector.matches(labels)
            });
            if hit && !out.contains(&**primary) {
                out.push(ObjKey::clone(primary));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> ObjKey {
        ObjKey {
            namespace: Some(ns.into()),
            name: name.into(),
        }
    }

    #[test]
    fn a_related_object_finds_exactly_the_primaries_that_name_it() {
        let mut r = Reverse::default();
        r.set(
            &key("a", "shop"),
            vec![("credentials".into(), key("a", "shop-secret"))],
            vec![],
        );
        r.set(
            &key("a", "blog"),
            vec![("credentials".into(), key("a", "blog-secret"))],
            vec![],
        );
        let none = BTreeMap::new();
        assert_eq!(
            r.primaries_for("credentials", &key("a", "shop-secret"), &none),
            [key("a", "shop")]
        );
        assert!(
            r.primaries_for("other", &key("a", "shop-secret"), &none)
                .is_empty()
        );
        // The primary now points elsewhere: the old target no longer finds it.
        r.set(
            &key("a", "shop"),
            vec![("credentials".into(), key("a", "new-secret"))],
            vec![],
        );
        assert!(
            r.primaries_for("credentials", &key("a", "shop-secret"), &none)
                .is_empty()
        );
        r.forget(&key("a", "blog"));
        assert!(
            r.primaries_for("credentials", &key("a", "blog-secret"), &none)
                .is_empty()
        );
    }

    #[test]
    fn a_target_and_a_primary_key_are_each_held_once() {
        let mut r = Reverse::default();
        let secret = || vec![("credentials".to_string(), key("a", "secret"))];
        for name in ["x", "y", "z"] {
            r.set(&key("a", name), secret(), vec![]);
        }
        // Set again (every reconcile does): nothing more is held.
        r.set(&key("a", "y"), secret(), vec![]);
        assert_eq!(r.by_target.len(), 1);
        let (target, primaries) = r.by_target.iter().next().unwrap();
        assert_eq!(
            Arc::strong_count(target),
            1 + 3,
            "the index and each primary"
        );
        assert_eq!(primaries.len(), 3);
        for (primary, targets) in &r.by_primary {
            assert_eq!(Arc::strong_count(primary), 2, "both maps share {primary:?}");
            assert!(Arc::ptr_eq(&targets.refs[0], target));
        }
        for name in ["x", "y", "z"] {
            r.forget(&key("a", name));
        }
        assert!(r.by_target.is_empty() && r.by_primary.is_empty());
    }

    #[test]
    fn selector_watches_match_by_namespace_and_labels() {
        let mut r = Reverse::default();
        let labels: BTreeMap<String, String> = [("app".to_string(), "shop".to_string())].into();
        r.set(
            &key("a", "shop"),
            vec![],
            vec![SelectorRef {
                watch: "peers".into(),
                namespace: Some("a".into()),
                all_namespaces: false,
                selector: LabelSelector {
                    match_labels: labels.clone(),
                    match_expressions: Vec::new(),
                },
            }],
        );
        let mut more = labels.clone();
        more.insert("tier".into(), "web".into());
        assert_eq!(
            r.primaries_for("peers", &key("a", "x"), &more),
            [key("a", "shop")]
        );
        assert!(r.primaries_for("peers", &key("b", "x"), &more).is_empty());
        assert!(
            r.primaries_for("peers", &key("a", "x"), &BTreeMap::new())
                .is_empty()
        );
    }

    #[test]
    fn an_all_namespaces_selector_finds_its_primary_from_any_namespace() {
        let mut r = Reverse::default();
        let selector = LabelSelector {
            match_labels: BTreeMap::new(),
            match_expressions: vec![crate::rules::Requirement {
                key: "peer".into(),
                operator: crate::rules::Operator::Exists,
                values: Vec::new(),
            }],
        };
        r.set(
            &key("a", "shop"),
            vec![],
            vec![SelectorRef {
                watch: "peers".into(),
                namespace: None,
                all_namespaces: true,
                selector,
            }],
        );
        let peer: BTreeMap<String, String> = [("peer".to_string(), "x".to_string())].into();
        assert_eq!(
            r.primaries_for("peers", &key("elsewhere", "x"), &peer),
            [key("a", "shop")]
        );
        assert!(
            r.primaries_for("peers", &key("elsewhere", "x"), &BTreeMap::new())
                .is_empty()
        );
    }
}
