//! What of a cached object the engine needs: the paths rules set (their
//! child templates) and read (`readyWhen`, `children.<id>.…` in templates),
//! everything else dropped at ingest (issue 16).
//!
//! A projection is a tree of field names; a leaf keeps the whole subtree
//! under it. `apiVersion`, `kind` and `metadata` are always kept (names,
//! labels, owner references, the managed fields the informer already
//! filtered). A path a rule reads only in part (`children.x[key]`, a bare
//! `children.x`) keeps everything under the part that is known, so an
//! expression kiln cannot see through never loses a field it reads.
//!
//! Pure logic, no API calls. Not yet applied by the informer: wiring it in
//! needs a re-list of a kind when a reloaded rule widens its projection
//! (see [`Projection::covers`]).

use std::collections::BTreeMap;

use serde_json::Value;

/// Top-level fields every object keeps, whatever the rules say.
const IDENTITY: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// The fields kept under one point of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Keep {
    /// Everything under this point.
    All,
    /// Only these fields (each with what is kept under it).
    Fields(BTreeMap<String, Keep>),
}

impl Keep {
    fn keep_path(&mut self, path: &[&str]) {
        let Keep::Fields(fields) = self else { return };
        match path.split_first() {
            None => *self = Keep::All,
            Some((first, rest)) => fields
                .entry((*first).to_string())
                .or_insert_with(|| Keep::Fields(BTreeMap::new()))
                .keep_path(rest),
        }
    }

    fn union(&mut self, other: &Keep) {
        match (&mut *self, other) {
            (Keep::All, _) => {}
            (_, Keep::All) => *self = Keep::All,
            (Keep::Fields(mine), Keep::Fields(theirs)) => {
                for (name, keep) in theirs {
                    mine.entry(name.clone())
                        .and_modify(|k| k.union(keep))
                        .or_insert_with(|| keep.clone());
                }
            }
        }
    }

    fn covers(&self, other: &Keep) -> bool {
        match (self, other) {
            (Keep::All, _) => true,
            (Keep::Fields(_), Keep::All) => false,
            (Keep::Fields(mine), Keep::Fields(theirs)) => theirs
                .iter()
                .all(|(name, keep)| mine.get(name).is_some_and(|k| k.covers(keep))),
        }
    }

    fn apply(&self, value: &mut Value) {
        let (Keep::Fields(fields), Value::Object(map)) = (self, value) else {
            return;
        };
        map.retain(|name, _| fields.contains_key(name));
        for (name, child) in map.iter_mut() {
            if let Some(keep) = fields.get(name) {
                keep.apply(child);
            }
        }
    }
}

/// What is kept of the objects of one kind: the union over every rule that
/// caches the kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection(Keep);

impl Default for Projection {
    fn default() -> Self {
        Self::identity()
    }
}

impl Projection {
    /// Keeps whole objects (a primary, whose templates read any path of `self`).
    pub fn everything() -> Self {
        Self(Keep::All)
    }

    /// Keeps only `apiVersion`, `kind` and `metadata`.
    pub fn identity() -> Self {
        Self(Keep::Fields(BTreeMap::new()))
    }

    /// Whether whole objects are kept.
    pub fn is_everything(&self) -> bool {
        self.0 == Keep::All
    }

    /// Also keeps the subtree at `path` (the whole object for an empty path).
    pub fn keep_path(&mut self, path: &[&str]) {
        self.0.keep_path(path);
    }

    /// Also keeps every path a child template sets: each map is followed
    /// key by key; anything else (an expression, a list, a scalar) keeps the
    /// whole subtree where it stands, since its shape is known only once
    /// rendered.
    pub fn keep_set_by(&mut self, template: &Value) {
        fn walk(keep: &mut Projection, value: &Value, path: &mut Vec<String>) {
            match value {
                Value::Object(map) if !map.is_empty() => {
                    for (name, child) in map {
                        path.push(name.clone());
                        walk(keep, child, path);
                        path.pop();
                    }
                }
                _ => {
                    let steps: Vec<&str> = path.iter().map(String::as_str).collect();
                    keep.keep_path(&steps);
                }
            }
        }
        let Value::Object(map) = template else {
            self.0 = Keep::All;
            return;
        };
        for (name, child) in map {
            if IDENTITY.contains(&name.as_str()) {
                continue;
            }
            walk(self, child, &mut vec![name.clone()]);
        }
    }

    /// Also keeps what a template reference reads of the object named
    /// `prefix` (`children.deployment` for
    /// `children.deployment.status.readyReplicas`, `child` for `readyWhen`).
    /// A reference that reads the object itself, or that is cut where kiln
    /// cannot follow it, keeps everything under the part that is known.
    /// References to anything else are ignored.
    pub fn keep_read(&mut self, reference: &str, prefix: &str) {
        let Some(rest) = reference.strip_prefix(prefix) else {
            return;
        };
        let rest = match rest.strip_prefix('.') {
            Some(rest) => rest,
            None if rest.is_empty() => "",
            None => return,
        };
        let path: Vec<&str> = rest.split('.').filter(|s| !s.is_empty()).collect();
        self.keep_path(&path);
    }

    /// Keeps also what `other` keeps.
    pub fn union(&mut self, other: &Projection) {
        self.0.union(&other.0);
    }

    /// Whether this projection keeps everything `other` keeps: a cache
    /// filled under `self` can serve rules that need only `other` without a
    /// re-list.
    pub fn covers(&self, other: &Projection) -> bool {
        self.0.covers(&other.0)
    }

    /// Drops from `object` what is not kept (its identity always is).
    pub fn apply(&self, object: &mut Value) {
        let Keep::Fields(fields) = &self.0 else {
            return;
        };
        let Value::Object(map) = object else { return };
        map.retain(|name, _| IDENTITY.contains(&name.as_str()) || fields.contains_key(name));
        for (name, child) in map.iter_mut() {
            if let Some(keep) = fields.get(name) {
                keep.apply(child);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "w", "namespace": "ns", "labels": {"a": "b"}},
            "spec": {
                "replicas": 2,
                "revisionHistoryLimit": 10,
                "progressDeadlineSeconds": 600,
                "strategy": {"type": "RollingUpdate"},
                "selector": {"matchLabels": {"app": "w"}},
                "template": {
                    "metadata": {"labels": {"app": "w"}},
                    "spec": {
                        "containers": [{"name": "app", "image": "i", "imagePullPolicy": "Always"}],
                        "dnsPolicy": "ClusterFirst"
                    }
                }
            },
            "status": {"readyReplicas": 2, "replicas": 2, "conditions": [{"type": "Available"}]}
        })
    }

    /// The bench's Deployment template, as a rule writes it.
    fn template() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "{{ self.metadata.name }}"},
            "spec": {
                "replicas": "{{ self.spec.replicas }}",
                "selector": {"matchLabels": {"app": "{{ self.metadata.name }}"}},
                "template": {
                    "metadata": {"labels": {"app": "{{ self.metadata.name }}"}},
                    "spec": {"containers": [{"name": "app", "image": "{{ self.spec.image }}"}]}
                }
            }
        })
    }

    #[test]
    fn keeps_what_the_template_sets_and_the_rule_reads_and_drops_the_rest() {
        let mut p = Projection::identity();
        p.keep_set_by(&template());
        p.keep_read("child.status.readyReplicas", "child");
        p.keep_read("child.spec.replicas", "child");
        let mut d = deployment();
        p.apply(&mut d);
        assert_eq!(
            d,
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "w", "namespace": "ns", "labels": {"a": "b"}},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": "w"}},
                    "template": {
                        "metadata": {"labels": {"app": "w"}},
                        // A list is kept whole: its shape is known only once rendered.
                        "spec": {"containers": [{"name": "app", "image": "i", "imagePullPolicy": "Always"}]}
                    }
                },
                "status": {"readyReplicas": 2}
            })
        );
    }

    #[test]
    fn an_expression_in_place_of_a_map_keeps_the_whole_map() {
        let mut p = Projection::identity();
        p.keep_set_by(
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "data": "{{ self.spec.config }}"}),
        );
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
            "data": {"k": "v", "other": "x"}, "binaryData": {"b": "AA=="}});
        p.apply(&mut cm);
        assert_eq!(cm["data"], json!({"k": "v", "other": "x"}));
        assert!(cm.get("binaryData").is_none());
    }

    #[test]
    fn a_reference_cut_short_keeps_everything_under_what_is_known() {
        let mut p = Projection::identity();
        // `children.svc` alone (passed whole to a filter): the whole object.
        p.keep_read("children.svc", "children.svc");
        assert!(p.is_everything());
        let mut p = Projection::identity();
        // `children.svc.spec[key]`: minijinja reports `children.svc.spec`.
        p.keep_read("children.svc.spec", "children.svc");
        let mut s = json!({"apiVersion": "v1", "kind": "Service", "metadata": {},
            "spec": {"a": 1, "b": {"c": 2}}, "status": {"x": 1}});
        p.apply(&mut s);
        assert_eq!(s["spec"], json!({"a": 1, "b": {"c": 2}}));
        assert!(s.get("status").is_none());
    }

    #[test]
    fn references_to_other_objects_are_ignored() {
        let mut p = Projection::identity();
        p.keep_read("children.deploymentx.status", "children.deployment");
        p.keep_read("self.spec", "children.deployment");
        assert_eq!(p, Projection::identity());
    }

    #[test]
    fn only_identity_when_nothing_is_set_or_read() {
        let mut d = deployment();
        Projection::identity().apply(&mut d);
        assert_eq!(
            d,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "w", "namespace": "ns", "labels": {"a": "b"}}})
        );
        let mut whole = deployment();
        Projection::everything().apply(&mut whole);
        assert_eq!(whole, deployment());
    }

    #[test]
    fn the_union_over_rules_keeps_what_any_of_them_needs_and_says_when_to_relist() {
        let mut a = Projection::identity();
        a.keep_path(&["status", "readyReplicas"]);
        let mut b = Projection::identity();
        b.keep_path(&["status"]);
        b.keep_path(&["spec", "replicas"]);
        let mut both = a.clone();
        both.union(&b);
        assert!(both.covers(&a) && both.covers(&b));
        // A reloaded rule that starts reading `status` whole needs a re-list.
        assert!(!a.covers(&b));
        assert!(b.covers(&a));
        assert!(Projection::everything().covers(&both));
        assert!(!both.covers(&Projection::everything()));
        let mut d = deployment();
        both.apply(&mut d);
        assert_eq!(d["status"]["conditions"][0]["type"], "Available");
        assert_eq!(d["spec"], json!({"replicas": 2}));
    }
}
