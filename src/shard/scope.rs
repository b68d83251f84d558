//! Which objects a sharded replica's caches keep: the ingest filter.
//!
//! - A primary of a *sharded kind* is kept when its bucket is of interest.
//! - A child kiln made for a primary of a sharded kind (kiln's rule label
//!   and the primary's uid: owner label, primary annotation or controller
//!   owner reference) is kept when its primary's bucket is.
//! - Everything else is kept: objects of no primary (foreign objects), and
//!   every object of a kind some rule reads (`watches`, `namespaceSelector`),
//!   kiln's children of other rules included, so "own only what you
//!   created" and every `watches` lookup see them all.
//!
//! A kind is sharded when rules use it only as a primary: a kind some rule
//! also reads (`watches`, `namespaceSelector`) or makes (a child) is cached
//! in full, so no rule ever takes "not in my share" for "absent".

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};

use std::borrow::Cow;

use kube::api::DynamicObject;

use super::Shard;
use crate::rules::{Gvk, Rule};

/// The kinds that are sharded, from the rules running.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Roles {
    /// Kinds used only as primaries.
    sharded: HashSet<Gvk>,
    /// Rule name → its primary kind, for the rules whose primary kind is sharded.
    rules: HashMap<String, Gvk>,
    /// Kinds some rule reads (`watches`, `namespaceSelector`): cached in
    /// full, children of sharded rules included, or a rule reading them
    /// would take "not in my share" for "absent".
    read: HashSet<Gvk>,
}

impl Roles {
    /// The roles of `rules`' kinds.
    pub fn of<'a>(rules: impl IntoIterator<Item = &'a Rule>) -> Self {
        let rules: Vec<&Rule> = rules.into_iter().collect();
        let mut read: HashSet<Gvk> = rules
            .iter()
            .flat_map(|r| r.watches.iter().map(|w| w.gvk.clone()))
            .collect();
        if rules.iter().any(|r| r.primary.namespace_selector.is_some()) {
            read.insert(crate::rules::namespace_gvk());
        }
        let mut other: HashSet<&Gvk> = read.iter().collect();
        for rule in &rules {
            other.extend(rule.children.iter().map(|c| &c.gvk));
        }
        let sharded: HashSet<Gvk> = rules
            .iter()
            .map(|r| &r.primary.gvk)
            .filter(|g| !other.contains(g))
            .cloned()
            .collect();
        let rules = rules
            .iter()
            .filter(|r| sharded.contains(&r.primary.gvk))
            .map(|r| (r.name.clone(), r.primary.gvk.clone()))
            .collect();
        Self {
            sharded,
            rules,
            read,
        }
    }

    /// The uid whose bucket decides whether `obj` (of kind `gvk`) is kept;
    /// `None`: kept whatever the share.
    pub fn shard_uid<'o>(&self, gvk: &Gvk, obj: &'o DynamicObject) -> Option<Cow<'o, str>> {
        if self.sharded.contains(gvk) {
            return obj.metadata.uid.as_deref().map(Cow::Borrowed);
        }
        if self.read.contains(gvk) {
            return None;
        }
        // kiln's mark names the rule and the primary it was made for.
        let mark = crate::ownership::read(&obj.metadata)?;
        let primary = self.rules.get(&mark.rule)?;
        let owned = matches!(mark.placement, crate::ownership::Placement::Owned { .. });
        if owned && !mark.kind_is(&primary.api_version(), &primary.kind) {
            return None;
        }
        Some(Cow::Owned(mark.uid))
    }
}

/// The ingest filter of a sharded replica.
#[derive(Debug)]
pub struct Scope {
    shard: Arc<Shard>,
    rules: RwLock<HashMap<String, Arc<Rule>>>,
    roles: RwLock<Roles>,
}

impl Scope {
    /// The filter for `shard`'s share, with no rule yet.
    pub fn new(shard: Arc<Shard>) -> Self {
        Self {
            shard,
            rules: RwLock::default(),
            roles: RwLock::default(),
        }
    }

    /// A rule runs (or changed); returns whether the kinds' roles changed,
    /// in which case the caches must be listed again.
    pub fn set_rule(&self, rule: &Arc<Rule>) -> bool {
        let mut rules = self.rules.write().unwrap_or_else(PoisonError::into_inner);
        rules.insert(rule.name.clone(), rule.clone());
        self.recompute(&rules)
    }

    /// A rule stopped; returns whether the kinds' roles changed.
    pub fn remove_rule(&self, name: &str) -> bool {
        let mut rules = self.rules.write().unwrap_or_else(PoisonError::into_inner);
        rules.remove(name);
        self.recompute(&rules)
    }

    fn recompute(&self, rules: &HashMap<String, Arc<Rule>>) -> bool {
        let roles = Roles::of(rules.values().map(AsRef::as_ref));
        let mut current = self.roles.write().unwrap_or_else(PoisonError::into_inner);
        let changed = *current != roles;
        *current = roles;
        changed
    }

    /// Whether the cache of `gvk` keeps `obj`.
    pub fn keeps(&self, gvk: &Gvk, obj: &DynamicObject) -> bool {
        let roles = self.roles.read().unwrap_or_else(PoisonError::into_inner);
        roles
            .shard_uid(gvk, obj)
            .is_none_or(|uid| self.shard.interested(&uid))
    }

    /// The share of `gvk` to ask the API server for (as a shard selector):
    /// the buckets of interest, for a kind cached by its own uid (a sharded
    /// kind); `None` for every other kind (children are cached by their
    /// primary's uid, which the API server cannot select on).
    pub fn server_share(&self, gvk: &Gvk) -> Option<super::ring::Buckets> {
        let roles = self.roles.read().unwrap_or_else(PoisonError::into_inner);
        roles.sharded.contains(gvk).then(|| self.shard.interest())
    }

    /// The share.
    pub fn shard(&self) -> &Arc<Shard> {
        &self.shard
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rule(yaml: &str) -> Arc<Rule> {
        let set = crate::rules::load_sources_with(
            vec![crate::rules::load::Source {
                file: "r.yaml".into(),
                text: yaml.into(),
            }],
            Vec::new(),
        )
        .unwrap();
        set.rules[0].clone()
    }

    const WIDGETS: &str = r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: widgets}
spec:
  for: {apiVersion: test.kiln.dev/v1, kind: Widget}
  children:
    - id: main
      template:
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: "{{ self.metadata.name }}"}
"#;

    fn obj(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
        Gvk {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }

    #[test]
    fn primaries_and_their_children_are_sharded_foreign_objects_are_not() {
        let roles = Roles::of([&*rule(WIDGETS)]);
        let widget = gvk("test.kiln.dev", "v1", "Widget");
        let cm = gvk("", "v1", "ConfigMap");
        let w = obj(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "uid": "u1"}}));
        assert_eq!(roles.shard_uid(&widget, &w).as_deref(), Some("u1"));
        let child = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "w", "labels": {"kiln.dev/rule": "widgets"},
            "ownerReferences": [{"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
                "name": "w", "uid": "u1", "controller": true}]}}));
        assert_eq!(roles.shard_uid(&cm, &child).as_deref(), Some("u1"));
        let foreign = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "ownerReferences": [{"apiVersion": "apps/v1",
                "kind": "Deployment", "name": "d", "uid": "u9", "controller": true}]}}));
        assert_eq!(roles.shard_uid(&cm, &foreign), None);
        let outside = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "o", "labels": {"kiln.dev/rule": "widgets",
            "kiln.dev/owner-uid": "u2"}}}));
        assert_eq!(roles.shard_uid(&cm, &outside).as_deref(), Some("u2"));
    }

    #[test]
    fn only_a_sharded_kind_is_asked_of_the_server_by_its_share() {
        let shard = Shard::new(std::time::Duration::from_secs(10));
        shard.set_interest(0b1010);
        let scope = Scope::new(shard);
        scope.set_rule(&rule(WIDGETS));
        let widget = gvk("test.kiln.dev", "v1", "Widget");
        assert_eq!(scope.server_share(&widget), Some(0b1010));
        assert_eq!(scope.server_share(&gvk("", "v1", "ConfigMap")), None);
        assert_eq!(scope.server_share(&gvk("", "v1", "Secret")), None);
    }

    #[test]
    fn a_kind_some_rule_reads_or_makes_is_cached_in_full() {
        let reader = rule(
            r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: reader}
spec:
  for: {apiVersion: v1, kind: Secret}
  watches:
    - name: w
      apiVersion: test.kiln.dev/v1
      kind: Widget
      selector: {matchLabels: {a: b}}
  children: []
"#,
        );
        let roles = Roles::of([&*rule(WIDGETS), &*reader]);
        let widget = gvk("test.kiln.dev", "v1", "Widget");
        let w = obj(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "uid": "u1"}}));
        assert_eq!(roles.shard_uid(&widget, &w), None);
        assert!(roles.sharded.contains(&gvk("", "v1", "Secret")));
    }

    #[test]
    fn children_of_a_kind_another_rule_reads_are_cached_in_full() {
        let counter = rule(
            r#"
apiVersion: kiln.dev/v1alpha1
kind: Rule
metadata: {name: counter}
spec:
  for: {apiVersion: v1, kind: Secret}
  watches:
    - name: made
      apiVersion: v1
      kind: ConfigMap
      selector: {matchLabels: {kiln.dev/rule: widgets}}
  children: []
"#,
        );
        let cm = gvk("", "v1", "ConfigMap");
        let child = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "w", "labels": {"kiln.dev/rule": "widgets",
            "kiln.dev/owner-uid": "u1"}}}));
        let alone = Roles::of([&*rule(WIDGETS)]);
        assert_eq!(alone.shard_uid(&cm, &child).as_deref(), Some("u1"));
        let both = Roles::of([&*rule(WIDGETS), &*counter]);
        assert_eq!(both.shard_uid(&cm, &child), None, "another rule reads it");
        let widget = gvk("test.kiln.dev", "v1", "Widget");
        let w = obj(json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget",
            "metadata": {"name": "w", "uid": "u1"}}));
        assert_eq!(
            both.shard_uid(&widget, &w).as_deref(),
            Some("u1"),
            "still sharded"
        );
        assert!(both.sharded.contains(&gvk("", "v1", "Secret")));
    }
}
