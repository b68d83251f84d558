//! The ownership of a created-once child follows its rule's
//! `deletionPolicy`, although kiln never applies that child again.
//!
//! A child with `updatePolicy: CreateOnce` that exists is never written by
//! server-side apply, so a change of its `deletionPolicy` would never reach
//! it: a child created with `Delete` that the rule now says to `Orphan`
//! would keep its owner reference, and the garbage collector would delete it
//! with its primary — the very object the rule author asked to keep. So its
//! ownership alone is changed, with a merge patch conditioned on the
//! `resourceVersion` kiln read, which touches nothing but the owner
//! reference to this primary and the two annotations naming it.
//!
//! Pure: whether a child needs it ([`needed`]) and the patch ([`patch`]).

use serde_json::{Map, Value, json};

use crate::engine::key::ObjKey;
use crate::render::{DesiredChild, PRIMARY_NAME_ANNOTATION, PRIMARY_UID_ANNOTATION};
use crate::rules::Gvk;

/// A created-once child whose ownership differs from its rule's policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Reown {
    /// Its kind.
    pub gvk: Gvk,
    /// Its namespace and name.
    pub key: ObjKey,
    /// Its uid, as cached: the patch applies to this object only.
    pub uid: Option<String>,
    /// What it becomes.
    pub to: Ownership,
}

/// The ownership a created-once child is given.
#[derive(Debug, Clone, PartialEq)]
pub enum Ownership {
    /// `deletionPolicy: Orphan`: the owner reference to the primary goes,
    /// the annotations naming the primary (uid, name) come.
    Orphan {
        /// The primary's uid.
        uid: String,
        /// The primary's name.
        name: Value,
    },
    /// `deletionPolicy: Delete`: the owner reference comes, the annotations
    /// naming the primary go.
    Owned {
        /// The controller owner reference to the primary.
        reference: Value,
    },
}

impl Ownership {
    /// For messages: what the child becomes.
    pub fn describe(&self) -> &'static str {
        match self {
            Self::Orphan { .. } => "orphaning",
            Self::Owned { .. } => "owning",
        }
    }

    fn uid(&self) -> Option<&str> {
        match self {
            Self::Orphan { uid, .. } => Some(uid),
            Self::Owned { reference } => reference["uid"].as_str(),
        }
    }
}

/// Whether the live child `live` (created once, never applied again) must
/// change owner to match `desired`, as rendered now with its policy's
/// owner reference or annotations. An `outside` child (neither) never does;
/// nor does one another controller owns.
pub(crate) fn needed(desired: &DesiredChild, live: &Value) -> Option<Reown> {
    let meta = &desired.object["metadata"];
    let to = if let Some(reference) = meta["ownerReferences"].get(0) {
        let uid = reference["uid"].as_str()?;
        if references(live, uid) || controlled(live) {
            return None;
        }
        Ownership::Owned {
            reference: reference.clone(),
        }
    } else {
        let uid = meta["annotations"][PRIMARY_UID_ANNOTATION].as_str()?;
        if !references(live, uid) {
            return None;
        }
        Ownership::Orphan {
            uid: uid.to_string(),
            name: meta["annotations"][PRIMARY_NAME_ANNOTATION].clone(),
        }
    };
    Some(Reown {
        gvk: desired.gvk.clone(),
        key: super::live::key_of(desired),
        uid: live["metadata"]["uid"].as_str().map(str::to_string),
        to,
    })
}

/// The merge patch that gives `live` (just read from the API server) the
/// ownership `to`, conditioned on its `resourceVersion`; `None` when it has
/// it already, or when another controller owns it (an object has one
/// controller: kiln does not take it).
pub(crate) fn patch(live: &Value, to: &Ownership) -> Option<Value> {
    let uid = to.uid()?;
    let refs = live["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let (references, annotations) = match to {
        Ownership::Orphan { uid, name } => {
            if !references(live, uid) {
                return None;
            }
            let rest: Vec<Value> = refs
                .into_iter()
                .filter(|r| r["uid"].as_str() != Some(uid.as_str()))
                .collect();
            let rest = if rest.is_empty() {
                Value::Null
            } else {
                Value::Array(rest)
            };
            let mut annotations = Map::new();
            annotations.insert(PRIMARY_UID_ANNOTATION.into(), Value::String(uid.clone()));
            annotations.insert(PRIMARY_NAME_ANNOTATION.into(), name.clone());
            (rest, annotations)
        }
        Ownership::Owned { reference } => {
            if references(live, uid) || controlled(live) {
                return None;
            }
            let mut all = refs;
            all.push(reference.clone());
            let mut annotations = Map::new();
            annotations.insert(PRIMARY_UID_ANNOTATION.into(), Value::Null);
            annotations.insert(PRIMARY_NAME_ANNOTATION.into(), Value::Null);
            (Value::Array(all), annotations)
        }
    };
    Some(json!({
        "metadata": {
            "resourceVersion": live["metadata"]["resourceVersion"],
            "ownerReferences": references,
            "annotations": annotations,
        }
    }))
}

/// Whether `live` has an owner reference to `uid`.
fn references(live: &Value, uid: &str) -> bool {
    live["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["uid"].as_str() == Some(uid)))
}

/// Whether some controller owns `live`.
fn controlled(live: &Value) -> bool {
    live["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["controller"] == true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(uid: &str) -> Value {
        json!({"apiVersion": "test.kiln.dev/v1", "kind": "Widget", "name": "w",
               "uid": uid, "controller": true, "blockOwnerDeletion": true})
    }

    fn desired(meta: Value) -> DesiredChild {
        let mut metadata = json!({"name": "w", "namespace": "ns"});
        if let (Some(m), Some(extra)) = (metadata.as_object_mut(), meta.as_object()) {
            m.extend(extra.clone());
        }
        DesiredChild {
            id: "c".into(),
            gvk: Gvk {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
            },
            namespace: Some("ns".into()),
            name: "w".into(),
            object: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}),
            generated: Vec::new(),
        }
    }

    fn owned_by_policy() -> DesiredChild {
        desired(json!({"ownerReferences": [reference("u1")]}))
    }

    fn orphan_by_policy() -> DesiredChild {
        desired(
            json!({"annotations": {PRIMARY_UID_ANNOTATION: "u1", PRIMARY_NAME_ANNOTATION: "w"}}),
        )
    }

    fn live(meta: Value) -> Value {
        let mut metadata =
            json!({"name": "w", "namespace": "ns", "uid": "c1", "resourceVersion": "7"});
        if let (Some(m), Some(extra)) = (metadata.as_object_mut(), meta.as_object()) {
            m.extend(extra.clone());
        }
        json!({"metadata": metadata})
    }

    #[test]
    fn a_child_created_owned_that_the_rule_now_orphans_loses_only_its_reference_to_the_primary() {
        let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "o9"});
        let now = live(json!({"ownerReferences": [other.clone(), reference("u1")]}));
        let reown = needed(&orphan_by_policy(), &now).unwrap();
        assert_eq!(reown.uid.as_deref(), Some("c1"));
        assert_eq!(reown.key.name, "w");
        assert_eq!(
            patch(&now, &reown.to).unwrap(),
            json!({"metadata": {
                "resourceVersion": "7",
                "ownerReferences": [other],
                "annotations": {PRIMARY_UID_ANNOTATION: "u1", PRIMARY_NAME_ANNOTATION: "w"},
            }})
        );
        let alone = live(json!({"ownerReferences": [reference("u1")]}));
        assert_eq!(
            patch(&alone, &reown.to).unwrap()["metadata"]["ownerReferences"],
            Value::Null,
            "the last reference goes with the field"
        );
    }

    #[test]
    fn a_child_created_orphan_that_the_rule_now_deletes_gets_the_reference_and_loses_the_annotations()
     {
        let now = live(
            json!({"annotations": {PRIMARY_UID_ANNOTATION: "u1", PRIMARY_NAME_ANNOTATION: "w"}}),
        );
        let reown = needed(&owned_by_policy(), &now).unwrap();
        assert_eq!(
            patch(&now, &reown.to).unwrap(),
            json!({"metadata": {
                "resourceVersion": "7",
                "ownerReferences": [reference("u1")],
                "annotations": {PRIMARY_UID_ANNOTATION: null, PRIMARY_NAME_ANNOTATION: null},
            }})
        );
    }

    #[test]
    fn a_child_whose_ownership_matches_its_policy_is_left_alone() {
        let owned = live(json!({"ownerReferences": [reference("u1")]}));
        assert_eq!(needed(&owned_by_policy(), &owned), None);
        let orphan = live(json!({"annotations": {PRIMARY_UID_ANNOTATION: "u1"}}));
        assert_eq!(needed(&orphan_by_policy(), &orphan), None);
        // An `outside` child: neither reference nor annotations rendered.
        assert_eq!(needed(&desired(json!({})), &owned), None);
    }

    #[test]
    fn kiln_never_adds_itself_beside_another_controller() {
        let mut theirs = reference("z9");
        theirs["kind"] = json!("Other");
        let now = live(json!({"ownerReferences": [theirs]}));
        assert_eq!(needed(&owned_by_policy(), &now), None);
        let to = Ownership::Owned {
            reference: reference("u1"),
        };
        assert_eq!(patch(&now, &to), None);
    }

    #[test]
    fn the_patch_is_none_when_the_object_read_again_already_has_the_ownership() {
        let to = Ownership::Orphan {
            uid: "u1".into(),
            name: json!("w"),
        };
        assert_eq!(patch(&live(json!({})), &to), None);
    }
}
