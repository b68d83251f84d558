//! What kiln stamps on the children it makes, and reading it back.
//!
//! A child carries a [`Mark`]: the rule that made it, its id in the rule,
//! the primary it was made for and how it is tied to that primary
//! ([`Placement`]): an owner reference (owned), kiln's annotations in place
//! of one (orphaned: it outlives its primary), or kiln's owner label (an
//! `outside` child, in another namespace or cluster-scoped, where no owner
//! reference can point). [`stamp`] writes a mark (the render), [`read`]
//! reads one (the caches' owner index, the child event handler, prune,
//! the stranger check, the shard scope and `kiln explain`), so every
//! answer to "is this kiln's child of primary P?" comes from one place.
//!
//! A mark is a hint for finding children, never proof on its own: anyone
//! who may write an object can copy kiln's labels and annotations onto it.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Map, Value, json};

use crate::render::{
    CHILD_LABEL, MANAGED_BY, MANAGED_BY_LABEL, OWNER_ANNOTATION, OWNER_UID_LABEL,
    PRIMARY_NAME_ANNOTATION, PRIMARY_UID_ANNOTATION, RULE_LABEL,
};

/// How a child is tied to its primary.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Placement {
    /// A controller owner reference to the primary (the garbage collector
    /// deletes the child with it).
    Owned {
        /// The primary's `apiVersion`.
        api_version: String,
        /// The primary's kind.
        kind: String,
    },
    /// `deletionPolicy: Orphan`: kiln's annotations name the primary, no
    /// owner reference; the child outlives it.
    Orphaned,
    /// `outside: true`: kiln's owner label holds the primary's uid and an
    /// annotation names it (no owner reference can cross namespaces or
    /// scopes); kiln deletes it through the primary's finalizer.
    Outside {
        /// The primary's `apiVersion`.
        api_version: String,
        /// The primary's kind.
        kind: String,
        /// The primary's namespace (`None`: cluster-scoped).
        namespace: Option<String>,
    },
}

/// What kiln stamps on a child it makes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mark {
    /// The rule that made it.
    pub rule: String,
    /// Its id in the rule.
    pub child: String,
    /// The primary's name.
    pub name: String,
    /// The primary's uid (empty: the primary has none yet, as in
    /// `kiln render` of a file; then only the labels are stamped).
    pub uid: String,
    /// How it is tied to the primary.
    pub placement: Placement,
}

/// A metadata map that is not a map.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metadata.{0} must render to a map")]
pub struct NotAMap(&'static str);

impl Mark {
    /// Whether this is the mark of a child of `rule` for the primary `uid`.
    pub fn of(&self, rule: &str, uid: &str) -> bool {
        self.rule == rule && self.uid == uid && !uid.is_empty()
    }

    /// Whether the primary is of this kind, as far as the mark says (an
    /// orphaned child's annotations do not name the kind).
    pub fn kind_is(&self, api_version: &str, kind: &str) -> bool {
        match &self.placement {
            Placement::Owned {
                api_version: a,
                kind: k,
            }
            | Placement::Outside {
                api_version: a,
                kind: k,
                ..
            } => a == api_version && k == kind,
            Placement::Orphaned => true,
        }
    }

    /// The primary's namespace: an `outside` child's mark names it; an
    /// owned or orphaned child lives in it (`child_namespace`) when the
    /// primary kind is `namespaced`.
    pub fn primary_namespace(
        &self,
        child_namespace: Option<&str>,
        namespaced: bool,
    ) -> Option<String> {
        match &self.placement {
            Placement::Outside { namespace, .. } => namespace.clone(),
            _ if namespaced => child_namespace.map(str::to_string),
            _ => None,
        }
    }

    /// Whether kiln leaves the child behind when its primary goes.
    pub fn orphaned(&self) -> bool {
        self.placement == Placement::Orphaned
    }
}

/// Writes `mark` into a child's `metadata`: kiln's labels, then the owner
/// reference, annotations or owner label its placement needs.
pub fn stamp(meta: &mut Map<String, Value>, mark: &Mark) -> Result<(), NotAMap> {
    let labels = map_at(meta, "labels")?;
    // A template's own `managed-by` (Helm, another controller) is its
    // author's value; kiln tracks its objects by its `kiln.dev/*` marks.
    labels
        .entry(MANAGED_BY_LABEL)
        .or_insert_with(|| Value::String(MANAGED_BY.into()));
    labels.insert(RULE_LABEL.into(), Value::String(mark.rule.clone()));
    labels.insert(CHILD_LABEL.into(), Value::String(mark.child.clone()));
    let uid = (!mark.uid.is_empty()).then(|| Value::String(mark.uid.clone()));
    match &mark.placement {
        Placement::Owned { api_version, kind } => {
            if let Some(uid) = uid {
                let reference = json!({
                    "apiVersion": api_version,
                    "kind": kind,
                    "name": mark.name,
                    "uid": uid,
                    "controller": true,
                    "blockOwnerDeletion": true,
                });
                meta.insert("ownerReferences".into(), Value::Array(vec![reference]));
            }
        }
        Placement::Orphaned => {
            if let Some(uid) = uid {
                let annotations = map_at(meta, "annotations")?;
                annotations.insert(PRIMARY_UID_ANNOTATION.into(), uid);
                annotations.insert(
                    PRIMARY_NAME_ANNOTATION.into(),
                    Value::String(mark.name.clone()),
                );
            }
        }
        Placement::Outside {
            api_version,
            kind,
            namespace,
        } => {
            if let Some(uid) = uid {
                map_at(meta, "labels")?.insert(OWNER_UID_LABEL.into(), uid);
            }
            let at = namespace
                .as_deref()
                .map_or_else(|| mark.name.clone(), |ns| format!("{ns}/{}", mark.name));
            let described = format!("{api_version} {kind} {at}");
            map_at(meta, "annotations")?.insert(OWNER_ANNOTATION.into(), Value::String(described));
        }
    }
    Ok(())
}

/// The map at `meta[field]`, made when absent.
fn map_at<'m>(
    meta: &'m mut Map<String, Value>,
    field: &'static str,
) -> Result<&'m mut Map<String, Value>, NotAMap> {
    meta.entry(field)
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or(NotAMap(field))
}

/// The metadata a mark is read from.
pub trait Meta {
    /// A label's value.
    fn label(&self, key: &str) -> Option<&str>;
    /// An annotation's value.
    fn annotation(&self, key: &str) -> Option<&str>;
    /// The controller owner reference: `apiVersion`, kind, name, uid.
    fn controller(&self) -> Option<(&str, &str, &str, &str)>;
}

impl Meta for ObjectMeta {
    fn label(&self, key: &str) -> Option<&str> {
        get(self.labels.as_ref(), key)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        get(self.annotations.as_ref(), key)
    }

    fn controller(&self) -> Option<(&str, &str, &str, &str)> {
        self.owner_references
            .iter()
            .flatten()
            .find(|o: &&OwnerReference| o.controller == Some(true))
            .map(|o| {
                (
                    o.api_version.as_str(),
                    o.kind.as_str(),
                    o.name.as_str(),
                    o.uid.as_str(),
                )
            })
    }
}

/// An object's `metadata` as JSON (files, the API server's answers).
impl Meta for Value {
    fn label(&self, key: &str) -> Option<&str> {
        self["labels"][key].as_str()
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self["annotations"][key].as_str()
    }

    fn controller(&self) -> Option<(&str, &str, &str, &str)> {
        let found = self["ownerReferences"]
            .as_array()?
            .iter()
            .find(|o| o["controller"] == true)?;
        Some((
            found["apiVersion"].as_str()?,
            found["kind"].as_str()?,
            found["name"].as_str()?,
            found["uid"].as_str()?,
        ))
    }
}

fn get<'m>(map: Option<&'m BTreeMap<String, String>>, key: &str) -> Option<&'m str> {
    map?.get(key).map(String::as_str)
}

/// The mark on an object's metadata, if it has one: kiln's rule label and,
/// by precedence, a controller owner reference, an orphaned child's
/// annotations or an `outside` child's owner label.
pub fn read<M: Meta + ?Sized>(meta: &M) -> Option<Mark> {
    let rule = meta.label(RULE_LABEL)?.to_string();
    let child = meta.label(CHILD_LABEL).unwrap_or_default().to_string();
    let mark = |name: &str, uid: &str, placement| Mark {
        rule: rule.clone(),
        child: child.clone(),
        name: name.to_string(),
        uid: uid.to_string(),
        placement,
    };
    if let Some((api_version, kind, name, uid)) = meta.controller() {
        let placement = Placement::Owned {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        };
        return Some(mark(name, uid, placement));
    }
    if let Some(uid) = meta.annotation(PRIMARY_UID_ANNOTATION) {
        let name = meta.annotation(PRIMARY_NAME_ANNOTATION).unwrap_or_default();
        return Some(mark(name, uid, Placement::Orphaned));
    }
    let uid = meta.label(OWNER_UID_LABEL)?;
    let described = meta.annotation(OWNER_ANNOTATION).unwrap_or_default();
    let mut words = described.split(' ');
    let (api_version, kind, at) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    );
    let (namespace, name) = match at.split_once('/') {
        Some((ns, name)) => (Some(ns.to_string()), name),
        None => (None, at),
    };
    let placement = Placement::Outside {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        namespace,
    };
    Some(mark(name, uid, placement))
}

/// Whether `meta` is marked as a child of `rule` for the primary `uid`.
pub fn child_of<M: Meta + ?Sized>(meta: &M, rule: &str, uid: &str) -> bool {
    read(meta).is_some_and(|m| m.of(rule, uid))
}

/// Whether an owned or orphaned child marked for a primary in
/// `primary_namespace` sits where kiln can have put it, so its mark may be
/// believed: cluster-scoped, or in the primary's namespace (only those who
/// may write there can plant it, and they may change the primary too), or
/// anywhere for a cluster-scoped primary's. Marks are copied easily: a
/// tenant's object in its own namespace naming another tenant's primary is
/// not that primary's child, never read, pruned or waited for. (An
/// `outside` child is believed only at the key its rule renders for the
/// primary: `engine::decision::placed`.)
pub fn in_place(child_namespace: Option<&str>, primary_namespace: Option<&str>) -> bool {
    child_namespace.is_none() || primary_namespace.is_none() || child_namespace == primary_namespace
}

/// Who holds an object found where kiln would make `rule`'s child of the
/// primary `uid`, unless it is that very child: "controlled by <kind>
/// <name>", or "not created by kiln".
pub fn holder<M: Meta + ?Sized>(meta: &M, rule: &str, uid: &str) -> Option<String> {
    let mark = read(meta);
    if mark.as_ref().is_some_and(|m| m.of(rule, uid)) {
        return None;
    }
    Some(match (meta.controller(), mark) {
        (Some((_, kind, name, _)), _) => format!("controlled by {kind} {name}"),
        // Another primary's `outside` or orphaned child: say whose.
        (None, Some(m)) => {
            let whose = match &m.placement {
                Placement::Outside {
                    kind,
                    namespace: Some(ns),
                    ..
                } => format!("{kind} {ns}/{}", m.name),
                Placement::Outside { kind, .. } => format!("{kind} {}", m.name),
                _ => m.name.clone(),
            };
            format!("made by kiln for {whose} (rule {})", m.rule)
        }
        (None, None) => "not created by kiln".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn name() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9-]{0,20}"
    }

    fn placement() -> impl Strategy<Value = Placement> {
        let api_version = prop_oneof![Just("v1".to_string()), "[a-z]{1,8}\\.dev/v[1-9]"];
        let kind = "[A-Z][a-zA-Z]{0,12}";
        prop_oneof![
            (api_version.clone(), kind).prop_map(|(api_version, kind)| Placement::Owned {
                api_version,
                kind: kind.to_string()
            }),
            Just(Placement::Orphaned),
            (api_version, kind, proptest::option::of(name())).prop_map(
                |(api_version, kind, namespace)| Placement::Outside {
                    api_version,
                    kind: kind.to_string(),
                    namespace
                }
            ),
        ]
    }

    fn mark() -> impl Strategy<Value = Mark> {
        (name(), name(), name(), "[a-f0-9-]{1,36}", placement()).prop_map(
            |(rule, child, name, uid, placement)| Mark {
                rule,
                child,
                name,
                uid,
                placement,
            },
        )
    }

    /// What the template may have rendered already: labels and annotations
    /// of its own, or none.
    fn rendered() -> impl Strategy<Value = Map<String, Value>> {
        (any::<bool>(), any::<bool>()).prop_map(|(labels, annotations)| {
            let mut meta = Map::new();
            meta.insert("name".into(), json!("child"));
            if labels {
                meta.insert("labels".into(), json!({"app": "x"}));
            }
            if annotations {
                meta.insert("annotations".into(), json!({"note": "y"}));
            }
            meta
        })
    }

    proptest! {
        #[test]
        fn stamp_then_read_gives_back_the_same_mark(mark in mark(), mut meta in rendered()) {
            stamp(&mut meta, &mark).unwrap();
            let json = Value::Object(meta);
            prop_assert_eq!(read(&json), Some(mark.clone()));
            // The same through typed metadata, as the caches hold it.
            let typed: ObjectMeta = serde_json::from_value(json).unwrap();
            prop_assert_eq!(read(&typed), Some(mark.clone()));
            prop_assert!(child_of(&typed, &mark.rule, &mark.uid));
            prop_assert!(!child_of(&typed, &mark.rule, "another-uid"));
            prop_assert!(!child_of(&typed, "another-rule", &mark.uid));
        }
    }

    #[test]
    fn an_object_without_kilns_rule_label_has_no_mark() {
        let meta = json!({"labels": {OWNER_UID_LABEL: "u1"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u1", "controller": true}]});
        assert_eq!(read(&meta), None);
    }

    #[test]
    fn a_primary_without_a_uid_gets_kilns_labels_only() {
        let mut meta = Map::new();
        let mark = Mark {
            rule: "r".into(),
            child: "c".into(),
            name: "p".into(),
            uid: String::new(),
            placement: Placement::Owned {
                api_version: "v1".into(),
                kind: "X".into(),
            },
        };
        stamp(&mut meta, &mark).unwrap();
        assert!(meta.get("ownerReferences").is_none());
        assert_eq!(meta["labels"][RULE_LABEL], "r");
        assert!(Value::Object(meta).label(RULE_LABEL).is_some());
    }

    #[test]
    fn a_mark_in_another_tenants_namespace_is_not_believed() {
        assert!(in_place(Some("a"), Some("a")));
        assert!(!in_place(Some("b"), Some("a")), "planted in b");
        assert!(in_place(None, Some("a")), "cluster-scoped");
        assert!(in_place(Some("b"), None), "a cluster-scoped primary's");
    }

    #[test]
    fn the_holder_of_a_name_is_said_by_its_mark() {
        let mut meta = Map::new();
        let mark = Mark {
            rule: "space".into(),
            child: "ns".into(),
            name: "first".into(),
            uid: "u1".into(),
            placement: Placement::Outside {
                api_version: "test.kiln.dev/v1".into(),
                kind: "Widget".into(),
                namespace: Some("team".into()),
            },
        };
        stamp(&mut meta, &mark).unwrap();
        let meta = Value::Object(meta);
        assert_eq!(holder(&meta, "space", "u1"), None, "its own child");
        assert_eq!(
            holder(&meta, "space", "u2").as_deref(),
            Some("made by kiln for Widget team/first (rule space)")
        );
        assert_eq!(
            holder(&json!({}), "space", "u2").as_deref(),
            Some("not created by kiln")
        );
    }

    #[test]
    fn labels_that_are_not_a_map_are_refused() {
        let mut meta = Map::new();
        meta.insert("labels".into(), json!("x"));
        let mark = Mark {
            rule: "r".into(),
            child: "c".into(),
            name: "p".into(),
            uid: "u".into(),
            placement: Placement::Orphaned,
        };
        assert_eq!(stamp(&mut meta, &mark), Err(NotAMap("labels")));
    }
}
