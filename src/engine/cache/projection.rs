//! What of a cached object the engine needs: the paths rules set (their
//! child templates) and read (`readyWhen`, `children.<id>.…` in templates),
//! everything else dropped at ingest.
//!
//! A projection is a tree of field names; a leaf keeps the whole subtree
//! under it. `apiVersion`, `kind` and `metadata` are always kept (names,
//! labels, owner references, the managed fields the informer already
//! filtered). A path a rule reads only in part (`children.x[key]`, a bare
//! `children.x`) keeps everything under the part that is known, so an
//! expression kiln cannot see through never loses a field it reads.
//!
//! Of a kind used only for children, `metadata.creationTimestamp` is dropped
//! too unless a rule reads it or the child has a `history` (kept newest
//! first by it); what a history class's `when` reads of `child` is kept.
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
/// template reads of `related.<name>`; a kind a decorator patches, a kind a
/// hook returns and, for a rule with hooks, each watched kind: whole.
/// A kind named twice gets the union.
pub(crate) fn of_rule(rule: &Rule) -> Vec<(Gvk, Projection)> {
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
        // A hook is sent its children whole, and its answer is compared
        // with all of the live child.
        if child.from_hook {
            out.push((child.gvk.clone(), Projection::everything()));
            continue;
        }
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
        // `history` files live children by what its `when`s read of
        // `child`, and keeps the newest by creation time.
        for class in &child.history {
            for reference in class.when.iter().flat_map(|w| rule.templates.references(w)) {
                keep.keep_read(&reference, "child");
            }
        }
        if !child.history.is_empty() {
            keep.keep_path(&["metadata", "creationTimestamp"]);
        }
        out.push((child.gvk.clone(), keep.without_stamps_unread()));
    }
    for watch in &rule.watches {
        let decorated = rule
            .decorators
            .iter()
            .any(|d| matches!(&d.target, DecoratorTarget::Related(n) if *n == watch.name));
        // A hook is sent the related objects whole.
        let mut keep = if decorated || rule.hook.is_some() {
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
                .chain(&child.ready_when)
                .chain(
                    child
                        .history
                        .iter()
                        .flat_map(|h| h.when.iter().chain([&h.keep])),
                ),
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
mod tests;

#[cfg(test)]
mod rule_tests;
