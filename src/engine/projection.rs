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
//! Of a kind used only for children, `metadata.creationTimestamp` is dropped
//! too unless a rule reads it: the engine itself never reads it of a child.
//!
//! Objects of a child kind that kiln did not make (no rule label) keep only
//! their identity, unless a rule also watches or is primary for the kind.
//!
//! Pure logic, no API calls. The informer applies it at ingest and lists a
//! kind again when a reloaded rule widens it (see [`Projection::covers`]).

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use serde_json::Value;

use crate::rules::{DecoratorTarget, Gvk, Rule, WatchTarget};
use crate::template::{Piece, Tree};

/// Top-level fields every object keeps, whatever the rules say.
const IDENTITY: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// The fields kept under one point of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Keep {
    /// Everything under this point.
    All,
    /// Only these fields (each with what is kept under it).
    Fields(BTreeMap<String, Keep>),
    /// Of a list, every item, each with this kept of it.
    Items(Box<Keep>),
}

impl Keep {
    fn keep_path(&mut self, path: &[&str]) {
        match self {
            Keep::All => {}
            // A path through a list by name: kept whole, to be safe.
            Keep::Items(_) => *self = Keep::All,
            Keep::Fields(fields) => match path.split_first() {
                None => *self = Keep::All,
                Some((first, rest)) => fields
                    .entry((*first).to_string())
                    .or_insert_with(|| Keep::Fields(BTreeMap::new()))
                    .keep_path(rest),
            },
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
            (Keep::Items(mine), Keep::Items(theirs)) => mine.union(theirs),
            // A list on one side, a map on the other: keep it whole.
            (Keep::Fields(_), Keep::Items(_)) | (Keep::Items(_), Keep::Fields(_)) => {
                *self = Keep::All;
            }
        }
    }

    fn covers(&self, other: &Keep) -> bool {
        match (self, other) {
            (Keep::All, _) => true,
            (_, Keep::All) => false,
            (Keep::Fields(mine), Keep::Fields(theirs)) => theirs
                .iter()
                .all(|(name, keep)| mine.get(name).is_some_and(|k| k.covers(keep))),
            (Keep::Items(mine), Keep::Items(theirs)) => mine.covers(theirs),
            (Keep::Fields(_), Keep::Items(_)) | (Keep::Items(_), Keep::Fields(_)) => false,
        }
    }

    fn apply(&self, value: &mut Value) {
        match (self, value) {
            (Keep::Fields(fields), Value::Object(map)) => {
                map.retain(|name, _| fields.contains_key(name));
                for (name, child) in map.iter_mut() {
                    if let Some(keep) = fields.get(name) {
                        keep.apply(child);
                    }
                }
            }
            (Keep::Items(keep), Value::Array(items)) => {
                for item in items {
                    keep.apply(item);
                }
            }
            _ => {}
        }
    }

    /// What a compiled template sets: each map with literal keys key by
    /// key; a non-empty list whose items are all such maps, of every item
    /// the union of their keys (`diff::satisfied` compares items by index
    /// and lists by length, and reads of a live item only the keys its
    /// desired item has); anything else (an expression, a scalar, a list
    /// of other items, a templated key) the whole subtree.
    fn set_by(tree: &Tree) -> Keep {
        fn map_entries(tree: &Tree) -> Option<Vec<(String, Tree)>> {
            match tree {
                Tree::Value(Value::Object(map)) if !map.is_empty() => Some(
                    map.iter()
                        .map(|(k, v)| (k.clone(), Tree::Value(v.clone())))
                        .collect(),
                ),
                Tree::Map(entries) if !entries.is_empty() => entries
                    .iter()
                    .map(|(k, v)| match k {
                        Piece::Literal(name) => Some((name.clone(), v.clone())),
                        _ => None,
                    })
                    .collect(),
                _ => None,
            }
        }
        let items: Option<Vec<Tree>> = match tree {
            Tree::Value(Value::Array(items)) => {
                Some(items.iter().cloned().map(Tree::Value).collect())
            }
            Tree::Seq(items) => Some(items.clone()),
            _ => None,
        };
        if let Some(items) = items {
            let mut keep: Option<Keep> = None;
            for item in &items {
                if map_entries(item).is_none() {
                    return Keep::All;
                }
                let one = Keep::set_by(item);
                match &mut keep {
                    Some(k) => k.union(&one),
                    None => keep = Some(one),
                }
            }
            return keep.map_or(Keep::All, |k| Keep::Items(Box::new(k)));
        }
        match map_entries(tree) {
            Some(entries) => Keep::Fields(
                entries
                    .iter()
                    .map(|(name, child)| (name.clone(), Keep::set_by(child)))
                    .collect(),
            ),
            None => Keep::All,
        }
    }
}

/// What is kept of the objects of one kind: the union over every rule that
/// caches the kind. Objects kiln made (they carry its rule label) keep what
/// rules set and read of a child; any other object keeps what rules read of
/// it as a watched or primary kind, and of a kind used only for children,
/// its identity alone: enough to see that it is there and whose it is, so
/// kiln never takes it over, without holding its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection {
    /// Of kiln's objects (its rule label).
    own: Keep,
    /// Of every other object.
    others: Keep,
    /// Whether `metadata.creationTimestamp` is kept (of every object).
    stamps: bool,
}

impl Default for Projection {
    fn default() -> Self {
        Self::identity()
    }
}

impl Projection {
    /// Keeps whole objects (a primary, whose templates read any path of `self`).
    pub fn everything() -> Self {
        Self {
            own: Keep::All,
            others: Keep::All,
            stamps: true,
        }
    }

    /// Keeps only `apiVersion`, `kind` and `metadata`.
    pub fn identity() -> Self {
        Self {
            own: Keep::Fields(BTreeMap::new()),
            others: Keep::Fields(BTreeMap::new()),
            stamps: true,
        }
    }

    /// Whether whole objects are kept.
    pub fn is_everything(&self) -> bool {
        self.own == Keep::All && self.others == Keep::All && self.stamps
    }

    /// Drops `metadata.creationTimestamp` unless what is kept already reads
    /// it (a kind used only for children: the engine never reads it there).
    #[must_use]
    fn without_stamps_unread(mut self) -> Self {
        let mut stamp = Keep::Fields(BTreeMap::new());
        stamp.keep_path(&["metadata", "creationTimestamp"]);
        self.stamps = self.own.covers(&stamp) || self.others.covers(&stamp);
        self
    }

    /// Whether kiln's objects are kept whole.
    #[cfg(test)]
    fn keeps_kilns_whole(&self) -> bool {
        self.own == Keep::All
    }

    /// Also keeps the subtree at `path` of kiln's objects (the whole object
    /// for an empty path); of others too once [`of_anyone`](Self::of_anyone).
    pub fn keep_path(&mut self, path: &[&str]) {
        self.own.keep_path(path);
    }

    /// Keeps of every object what is kept of kiln's (a watched kind: the
    /// objects read are anyone's).
    #[must_use]
    pub fn of_anyone(mut self) -> Self {
        self.others.union(&self.own);
        self
    }

    /// Also keeps every path a child template sets: each map is followed
    /// key by key, a list of such maps item by item (the union of their
    /// keys); anything else (an expression, a scalar) keeps the whole
    /// subtree where it stands, since its shape is known only once rendered.
    pub fn keep_set_by(&mut self, template: &Value) {
        self.keep_set_by_tree(&Tree::Value(template.clone()));
    }

    /// Also keeps every path a compiled child template sets (as
    /// [`keep_set_by`](Self::keep_set_by); a templated key keeps the whole
    /// map it stands in).
    pub fn keep_set_by_tree(&mut self, template: &Tree) {
        let mut set = Keep::set_by(template);
        if let Keep::Fields(fields) = &mut set {
            fields.retain(|name, _| !IDENTITY.contains(&name.as_str()));
        }
        self.own.union(&set);
    }

    /// Also keeps what a template reference reads of the object named
    /// `prefix` (`children.deployment` for
    /// `children.deployment.status.readyReplicas`, `child` for `readyWhen`).
    /// A reference that reads the object itself, or that is cut where kiln
    /// cannot follow it, keeps everything under the part that is known.
    /// References to anything else are ignored.
    pub fn keep_read(&mut self, reference: &str, prefix: &str) {
        // `children` or `related` read whole (`children | tojson`,
        // `children[id]`): every object under them, whole.
        if prefix
            .strip_prefix(reference)
            .is_some_and(|rest| rest.starts_with('.'))
        {
            self.keep_path(&[]);
            return;
        }
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
        self.own.union(&other.own);
        self.others.union(&other.others);
        self.stamps |= other.stamps;
    }

    /// Whether this projection keeps everything `other` keeps: a cache
    /// filled under `self` can serve rules that need only `other` without a
    /// re-list.
    pub fn covers(&self, other: &Projection) -> bool {
        self.own.covers(&other.own)
            && self.others.covers(&other.others)
            && (self.stamps || !other.stamps)
    }

    /// Drops from `object` what is not kept: what is kept of kiln's objects
    /// when it carries kiln's rule label, otherwise what is kept of others.
    pub fn apply_to(&self, object: &mut DynamicObject) {
        let kilns = object
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(crate::render::RULE_LABEL));
        let keep = if kilns { &self.own } else { &self.others };
        apply(keep, &mut object.data);
        if !self.stamps {
            object.metadata.creation_timestamp = None;
        }
    }

    /// Drops from `object` (kiln's) what is not kept (its identity always is).
    pub fn apply(&self, object: &mut Value) {
        apply(&self.own, object);
        if !self.stamps
            && let Some(Value::Object(meta)) = object.get_mut("metadata")
        {
            meta.remove("creationTimestamp");
        }
    }
}

/// Drops from `object` what `keep` does not keep (its identity always is).
fn apply(keep: &Keep, object: &mut Value) {
    let Keep::Fields(fields) = keep else {
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

/// What `rule` needs cached of each kind it uses: its primary whole; each
/// child what its template sets, what its `readyWhen` reads of `child` and
/// what any template reads of `children.<id>`; each watched kind what any
/// template reads of `related.<name>`; a kind a decorator patches, whole.
/// A kind named twice gets the union.
pub fn of_rule(rule: &Rule) -> Vec<(Gvk, Projection)> {
    let references: Vec<String> = templates_of(rule)
        .into_iter()
        .flat_map(|id| rule.templates.references(id))
        .collect();
    let reads = |prefix: &str, keep: &mut Projection| {
        for reference in &references {
            keep.keep_read(reference, prefix);
        }
    };
    let mut out: Vec<(Gvk, Projection)> =
        vec![(rule.primary.gvk.clone(), Projection::everything())];
    for child in &rule.children {
        let mut keep = Projection::identity();
        keep.keep_set_by_tree(&child.template);
        reads(&format!("children.{}", child.id), &mut keep);
        reads(&format!("observed.{}", child.id), &mut keep);
        // Whole, so keys another writer added there are seen (replace.rs).
        for path in &child.replace {
            keep.keep_path(&path.iter().map(String::as_str).collect::<Vec<_>>());
        }
        if let Some(ready) = &child.ready_when {
            for reference in rule.templates.references(ready) {
                keep.keep_read(&reference, "child");
            }
        } else if !child.ready_on_exists {
            for path in crate::readiness::reads(&child.gvk) {
                keep.keep_path(path);
            }
        }
        out.push((child.gvk.clone(), keep.without_stamps_unread()));
    }
    for watch in &rule.watches {
        let decorated = rule
            .decorators
            .iter()
            .any(|d| matches!(&d.target, DecoratorTarget::Related(n) if *n == watch.name));
        let mut keep = if decorated {
            Projection::everything()
        } else {
            Projection::identity()
        };
        reads(&format!("related.{}", watch.name), &mut keep);
        out.push((watch.gvk.clone(), keep.of_anyone()));
    }
    let mut merged: Vec<(Gvk, Projection)> = Vec::new();
    for (gvk, keep) in out {
        match merged.iter_mut().find(|(g, _)| *g == gvk) {
            Some((_, mine)) => mine.union(&keep),
            None => merged.push((gvk, keep)),
        }
    }
    merged
}

/// Every compiled template of a rule.
fn templates_of(rule: &Rule) -> Vec<&crate::template::TemplateId> {
    let mut out = Vec::new();
    for child in &rule.children {
        out.extend(
            child
                .when
                .iter()
                .chain(&child.for_each)
                .chain(&child.ready_when),
        );
        out.extend(child.template.templates());
    }
    for watch in &rule.watches {
        match &watch.target {
            WatchTarget::Ref { name, namespace } => {
                out.extend(name.template());
                out.extend(namespace.iter().flat_map(Piece::template));
            }
            WatchTarget::Selector {
                match_labels,
                namespace,
                ..
            } => {
                out.extend(match_labels.iter().flat_map(|(_, p)| p.template()));
                out.extend(namespace.iter().flat_map(Piece::template));
            }
        }
    }
    for decorator in &rule.decorators {
        out.extend(decorator.when.iter());
        out.extend(decorator.patch.templates());
    }
    for (_, tree) in rule.vars.iter().chain(&rule.status_fields) {
        out.extend(tree.templates());
    }
    for condition in &rule.conditions {
        out.push(&condition.status);
        out.extend(condition.reason.templates());
        out.extend(condition.message.iter().flat_map(Tree::templates));
    }
    out
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
                        // Of a list of maps, in each item the keys the items set.
                        "spec": {"containers": [{"name": "app", "image": "i"}]}
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
        assert!(p.keeps_kilns_whole());
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
    fn reading_every_child_or_related_object_whole_keeps_them_whole() {
        // `children | tojson` or `children[name]`: minijinja names `children`.
        let mut p = Projection::identity();
        p.keep_read("children", "children.svc");
        assert!(p.keeps_kilns_whole());
        let mut p = Projection::identity();
        p.keep_read("related", "related.creds");
        assert!(p.keeps_kilns_whole());
        // A name that merely starts the same is someone else.
        let mut p = Projection::identity();
        p.keep_read("child", "children.svc");
        assert_eq!(p, Projection::identity());
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

#[cfg(test)]
mod rule_tests {
    use serde_json::json;

    use super::*;

    fn rule_from(text: &str) -> Rule {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.yaml");
        std::fs::write(&file, text).unwrap();
        let mut set = crate::rules::load(&[file]).unwrap_or_else(|d| panic!("{}", d[0]));
        std::sync::Arc::into_inner(set.rules.remove(0)).unwrap()
    }

    fn of<'a>(all: &'a [(Gvk, Projection)], kind: &str) -> &'a Projection {
        &all.iter().find(|(g, _)| g.kind == kind).unwrap().1
    }

    #[test]
    fn the_bench_rule_keeps_its_primary_whole_and_of_the_rest_what_it_sets_and_reads() {
        let rule = rule_from(include_str!("../../tests/bench/webapp.yaml"));
        let all = of_rule(&rule);
        assert_eq!(all.len(), 5);
        assert!(of(&all, "WebApp").is_everything());
        let mut d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"},
            "spec": {"replicas": 1, "revisionHistoryLimit": 10, "strategy": {"type": "RollingUpdate"},
                "selector": {"matchLabels": {"app.kubernetes.io/name": "w"}},
                "template": {"metadata": {"labels": {"x": "y", "app.kubernetes.io/name": "w"},
                        "annotations": {"a": "b", "kiln.dev/config-hash": "h"}},
                    "spec": {"containers": [], "dnsPolicy": "ClusterFirst", "schedulerName": "default"}}},
            "status": {"readyReplicas": 1, "replicas": 1, "conditions": []}
        });
        of(&all, "Deployment").apply(&mut d);
        assert_eq!(
            d["spec"],
            json!({"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": "w"}},
                // Of a map the template writes key by key, only those keys.
                "template": {"metadata": {"labels": {"app.kubernetes.io/name": "w"},
                        "annotations": {"kiln.dev/config-hash": "h"}},
                    "spec": {"containers": []}}})
        );
        // Read by readyWhen and by the status field `readyReplicas`.
        assert_eq!(d["status"], json!({"readyReplicas": 1}));
        let mut s = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "w"},
            "spec": {"ports": [], "selector": {}, "clusterIP": "10.0.0.1", "type": "ClusterIP"},
            "status": {"loadBalancer": {}}});
        of(&all, "Service").apply(&mut s);
        // No `readyWhen`: its type and status are kept, to judge its
        // readiness by kind (a LoadBalancer waits for its address).
        assert_eq!(
            s["spec"],
            json!({"ports": [], "selector": {}, "type": "ClusterIP"})
        );
        assert_eq!(s["status"], json!({"loadBalancer": {}}));
        // The Secret: templates read `related.credentials.data`.
        let mut secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "type": "Opaque", "data": {"password": "cA=="}});
        of(&all, "Secret").apply(&mut secret);
        assert_eq!(secret.get("type"), None);
        assert_eq!(secret["data"]["password"], "cA==");
    }

    fn object(labels: Value, rest: Value) -> DynamicObject {
        let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "ns", "labels": labels}});
        o.as_object_mut()
            .unwrap()
            .extend(rest.as_object().unwrap().clone());
        serde_json::from_value(o).unwrap()
    }

    #[test]
    fn of_a_child_kind_objects_kiln_did_not_make_keep_only_their_identity() {
        let rule = rule_from(include_str!("../../tests/bench/webapp.yaml"));
        let all = of_rule(&rule);
        let big = json!({"data": {"blob": "x".repeat(1000)}});
        // kiln's ConfigMap: its template sets `data`.
        let mut ours = object(json!({"kiln.dev/rule": "webapp"}), big.clone());
        of(&all, "ConfigMap").apply_to(&mut ours);
        assert_eq!(ours.data["data"]["blob"].as_str().map(str::len), Some(1000));
        // Anyone else's: its name, labels and owners, nothing more.
        let mut theirs = object(json!({"app": "other"}), big.clone());
        of(&all, "ConfigMap").apply_to(&mut theirs);
        assert_eq!(theirs.data, json!({}));
        assert_eq!(theirs.metadata.name.as_deref(), Some("c"));
        // A watched kind keeps what templates read of anyone's object.
        let mut secret = object(
            json!({}),
            json!({"data": {"password": "cA=="}, "type": "Opaque"}),
        );
        of(&all, "Secret").apply_to(&mut secret);
        assert_eq!(secret.data, json!({"data": {"password": "cA=="}}));
        // A kind that is a child here and watched by another rule keeps of
        // anyone's what the watch reads.
        let mut watched = Projection::identity();
        watched.keep_path(&["data"]);
        let mut both = of(&all, "ConfigMap").clone();
        both.union(&watched.of_anyone());
        let mut theirs = object(json!({}), big);
        both.apply_to(&mut theirs);
        assert_eq!(
            theirs.data["data"]["blob"].as_str().map(str::len),
            Some(1000)
        );
        assert!(
            !of(&all, "ConfigMap").covers(&both),
            "the union needs a re-list"
        );
    }

    #[test]
    fn a_status_field_reading_a_child_whole_keeps_it_whole() {
        let text = include_str!("../../tests/bench/webapp.yaml").replace(
            "children.deployment.status.readyReplicas | default(0)",
            "children.service | tojson | length",
        );
        let all = of_rule(&rule_from(&text));
        assert!(of(&all, "Service").keeps_kilns_whole());
        assert!(!of(&all, "Deployment").keeps_kilns_whole());
    }

    #[test]
    fn a_childs_creation_timestamp_is_dropped_unless_a_rule_reads_it() {
        let stamped = |kind: &str, labels: Value| {
            let mut o = object(labels, json!({}));
            o.types = Some(kube::api::TypeMeta {
                api_version: "v1".into(),
                kind: kind.into(),
            });
            o.metadata.creation_timestamp =
                Some(serde_json::from_value(json!("2026-11-23T18:44:55Z")).unwrap());
            o
        };
        let rule = rule_from(include_str!("../../tests/bench/webapp.yaml"));
        let all = of_rule(&rule);
        // Children, kiln's or anyone's: the engine never reads it.
        for labels in [json!({"kiln.dev/rule": "webapp"}), json!({})] {
            let mut cm = stamped("ConfigMap", labels);
            of(&all, "ConfigMap").apply_to(&mut cm);
            assert_eq!(cm.metadata.creation_timestamp, None);
            assert_eq!(cm.metadata.name.as_deref(), Some("c"));
        }
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "w", "creationTimestamp": "2026-11-23T18:44:55Z", "generation": 1}});
        of(&all, "Deployment").apply(&mut d);
        assert_eq!(d["metadata"], json!({"name": "w", "generation": 1}));
        // The primary and watched kinds keep it: templates read them freely.
        for kind in ["WebApp", "Secret"] {
            let mut o = stamped(kind, json!({}));
            of(&all, kind).apply_to(&mut o);
            assert!(o.metadata.creation_timestamp.is_some(), "{kind}");
        }
        // A rule that reads it of a child keeps it, and a cache filled
        // without it is re-listed for that rule.
        for read in [
            "children.service.metadata.creationTimestamp",
            "children.service.metadata",
            "children.service",
        ] {
            let text = include_str!("../../tests/bench/webapp.yaml").replace(
                "children.deployment.status.readyReplicas | default(0)",
                &format!("{read} | tojson | length"),
            );
            let reading = of_rule(&rule_from(&text));
            let mut svc = stamped("Service", json!({"kiln.dev/rule": "webapp"}));
            of(&reading, "Service").apply_to(&mut svc);
            assert!(svc.metadata.creation_timestamp.is_some(), "{read}");
            assert!(
                !of(&all, "Service").covers(of(&reading, "Service")),
                "{read}"
            );
        }
    }

    #[test]
    fn of_a_list_of_maps_each_item_keeps_the_keys_any_item_sets_and_satisfied_is_unchanged() {
        let rule = rule_from(include_str!("../../tests/bench/webapp.yaml"));
        let all = of_rule(&rule);
        let live: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/projection/deployment_live.json"
        ))
        .unwrap();
        let mut kept = live.clone();
        of(&all, "Deployment").apply(&mut kept);
        assert_eq!(
            kept["spec"]["template"]["spec"]["containers"],
            json!([{"env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"key": "password", "name": "credentials"}}}],
                "envFrom": [{"configMapRef": {"name": "app-00001-config"}}],
                "image": "nginx:1.27", "name": "app",
                "ports": [{"containerPort": 8080, "name": "http"}]}])
        );
        // What kiln renders is satisfied by the projected object exactly
        // when by the whole one, whatever changed in a list.
        let desired = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "nginx:1.27",
             "ports": [{"name": "http", "containerPort": 8080}],
             "envFrom": [{"configMapRef": {"name": "app-00001-config"}}],
             "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "credentials", "key": "password"}}}]}]}}}});
        let variants = [
            desired.clone(),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.28"}]}}}}),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app"}, {"name": "side"}]}}}}),
            json!({"spec": {"template": {"spec": {"containers": []}}}}),
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app",
                "ports": [{"name": "http", "containerPort": 8080}, {"name": "metrics", "containerPort": 9090}]}]}}}}),
        ];
        for d in &variants {
            assert_eq!(
                crate::engine::diff::satisfied(&kept, d),
                crate::engine::diff::satisfied(&live, d),
                "{d}"
            );
        }
        assert!(crate::engine::diff::satisfied(&kept, &desired));
        // Lists of scalars, of templated items, or empty: kept whole.
        let mut p = Projection::identity();
        p.keep_set_by(&json!({"spec": {"args": ["a"], "empty": [], "mixed": [{"a": 1}, "b"]}}));
        let mut o = json!({"spec": {"args": ["a", "x"], "empty": [{"k": 1}], "mixed": [{"a": 1, "z": 2}, "b"]}});
        let whole = o.clone();
        p.apply(&mut o);
        assert_eq!(o, whole);
        // A rule reading into the list keeps it whole.
        let mut read = of(&all, "Deployment").clone();
        read.keep_read("child.spec.template.spec.containers", "child");
        let mut whole = live.clone();
        read.apply(&mut whole);
        assert_eq!(
            whole["spec"]["template"]["spec"]["containers"],
            live["spec"]["template"]["spec"]["containers"]
        );
        assert!(!of(&all, "Deployment").covers(&read), "widening re-lists");
        assert!(read.covers(of(&all, "Deployment")));
    }

    #[test]
    fn a_list_the_server_lengthened_converges_when_what_it_stored_is_cut_as_the_cache_cuts() {
        use crate::engine::diff::{converged, normalized};
        let mut p = Projection::identity();
        p.keep_set_by(
            &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"},
            "spec": {"containers": [{"name": "app", "image": "i"}]}}),
        );
        let meta = json!({"name": "w", "annotations": {"kiln.dev/applied": "h"}});
        let sent = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"containers": [{"name": "app", "image": "i"}]}});
        // A mutating webhook added a sidecar; the server filled defaults.
        let stored = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"containers": [
                {"name": "app", "image": "i", "imagePullPolicy": "IfNotPresent"},
                {"name": "side", "image": "s", "imagePullPolicy": "IfNotPresent"}]}});
        let mut cached = stored.clone();
        p.apply(&mut cached);
        let mut cut = stored.clone();
        p.apply(&mut cut);
        let known = normalized(&sent, &cut).unwrap();
        assert!(
            converged(&cached, &sent, Some(&known)),
            "0 writes at steady state"
        );
        // What the controller did before cutting: a write loop.
        let whole = normalized(&sent, &stored).unwrap();
        assert!(!converged(&cached, &sent, Some(&whole)));
    }
}
