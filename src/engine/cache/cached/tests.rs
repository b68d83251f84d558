use serde_json::json;

use super::*;

const UID: &str = "0b6f2d6e-3c1a-4f0e-9a57-1d2c3b4a5f60";

fn deployment() -> DynamicObject {
    serde_json::from_value(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "ns", "uid": UID, "resourceVersion": "7",
                "labels": {"kiln.dev/rule": "webapp", "a:b": "3:x", "": ""},
                "ownerReferences": [{"apiVersion": "demo.kiln.dev/v1", "kind": "WebApp", "name": "w", "uid": "u1", "controller": true}],
                "managedFields": [{"manager": "kiln", "operation": "Apply", "subresource": "status",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:ready": {}}}}]
            },
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "app", "image": "x"}]}}},
            "status": {"readyReplicas": 1}
        }))
        .unwrap()
}

#[test]
fn caching_a_borrowed_object_leaves_it_as_it_was_and_caches_the_same() {
    let mut obj = deployment();
    let cached = Cached::of(&mut obj);
    assert_eq!(obj, deployment());
    assert_eq!(cached, Cached::new(deployment()));
}

#[test]
fn an_object_decodes_back_to_what_was_cached() {
    let obj = deployment();
    let cached = Cached::new(obj.clone());
    let back = cached.decode();
    assert_eq!(back.metadata, obj.metadata);
    assert_eq!(back.data, obj.data);
    assert_eq!(back.types, obj.types);
    assert_eq!(cached.uid().map(Uid::to_string).as_deref(), Some(UID));
    assert!(matches!(cached.uid(), Some(Uid::Uuid(_))));
    assert_eq!(cached.labels().get("kiln.dev/rule"), Some("webapp"));
    assert_eq!(cached.labels().get("a:b"), Some("3:x"));
    assert_eq!(cached.labels().get(""), Some(""));
    assert_eq!(cached.labels().get("kiln.dev"), None);
    assert_eq!(
        cached.key(),
        ObjKey {
            namespace: Some("ns".into()),
            name: "web".into()
        }
    );
    for apart in [
        "\"web\"",
        UID,
        "ownerReferences",
        "apiVersion",
        "kiln.dev/rule",
    ] {
        assert!(
            !cached.text().contains(apart),
            "{apart} is kept apart: {}",
            cached.text()
        );
    }
    // Every object of a kind shares its apiVersion and kind.
    let other = Cached::new(deployment());
    assert!(Arc::ptr_eq(
        cached.types.as_ref().unwrap(),
        other.types.as_ref().unwrap()
    ));
}

#[test]
fn odd_metadata_decodes_back_as_it_was() {
    // Cluster-scoped, no name but a generateName, a uid and a resource
    // version that are not the usual UUID and number, an empty namespace.
    let odd = [
        json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"generateName": "gen-", "uid": "ABC", "resourceVersion": "007"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "x", "namespace": "", "uid": UID.to_uppercase(),
                                "resourceVersion": "18446744073709551616"}}),
        json!({"metadata": {"name": "bare"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "é", "namespace": "ns", "labels": {}, "resourceVersion": "0"}}),
    ];
    for obj in odd {
        let obj: DynamicObject = serde_json::from_value(obj).unwrap();
        let back = Cached::new(obj.clone()).decode();
        let mut expected = obj.metadata.clone();
        // An empty label set reads back as none.
        expected.labels = expected.labels.filter(|l| !l.is_empty());
        assert_eq!(back.metadata, expected);
        assert_eq!(back.data, obj.data);
        assert_eq!(Cached::new(obj.clone()).key(), ObjKey::of(&obj));
    }
}

#[test]
fn a_uid_is_16_bytes_only_when_it_prints_back_the_same() {
    assert!(matches!(Uid::new(UID), Uid::Uuid(_)));
    assert_eq!(Uid::new(UID).to_string(), UID);
    for other in [
        "u1",
        "",
        &UID.to_uppercase(),
        "0b6f2d6e-3c1a-4f0e-9a57-1d2c3b4a5f6",
        "0b6f2d6e-3c1a-4f0e-9a57-1d2c3b4a5f6g",
        "0b6f2d6e3c1a-4f0e-9a57-1d2c3b4a5f60x",
        "0b6f2d6e-3c1a-4f0e-9a57-1d2c3b4a5f6é",
    ] {
        assert!(matches!(Uid::new(other), Uid::Other(_)), "{other}");
        assert_eq!(Uid::new(other).to_string(), other);
    }
    for text in [
        "0",
        "7",
        "123456789",
        "007",
        "",
        "-1",
        "1a",
        "18446744073709551616",
    ] {
        assert_eq!(Version::new(text).to_string(), text);
    }
    assert!(matches!(Version::new("123"), Version::Number(123)));
}

#[test]
fn owners_are_each_indexed_once() {
    let mut obj = deployment();
    obj.metadata.owner_references = None;
    obj.metadata
        .labels
        .get_or_insert_default()
        .insert(crate::render::OWNER_UID_LABEL.into(), "u1".into());
    let cached = Cached::new(obj.clone());
    let owners: Vec<_> = cached.owners().collect();
    assert_eq!(owners, [&Uid::new("u1")], "an `outside` child's primary");
    // An orphaned child names its primary in an annotation.
    obj.metadata
        .labels
        .get_or_insert_default()
        .remove(crate::render::OWNER_UID_LABEL);
    obj.metadata
        .annotations
        .get_or_insert_default()
        .insert(crate::render::PRIMARY_UID_ANNOTATION.into(), UID.into());
    let cached = Cached::new(obj.clone());
    assert_eq!(cached.owners().collect::<Vec<_>>(), [&Uid::new(UID)]);
    assert_eq!(cached.decode().metadata, obj.metadata);
    // The mark's uid is the reference's: held once, with the reference.
    let mut obj = deployment();
    obj.metadata
        .labels
        .get_or_insert_default()
        .insert(crate::render::OWNER_UID_LABEL.into(), "u1".into());
    let cached = Cached::new(obj.clone());
    assert_eq!(cached.owners().collect::<Vec<_>>(), [&Uid::new("u1")]);
    assert_eq!(cached.owners.len(), 1);
    assert_eq!(cached.decode().metadata, obj.metadata);
}

#[test]
fn owner_references_decode_back_in_order_with_their_uids_indexed_once() {
    let reference = |uid: &str, name: &str, controller: Option<bool>| OwnerReference {
        api_version: "demo.kiln.dev/v1".into(),
        kind: "WebApp".into(),
        name: name.into(),
        uid: uid.into(),
        controller,
        block_owner_deletion: controller.map(|c| !c),
    };
    let mut obj = deployment();
    obj.metadata.owner_references = Some(vec![
        reference(UID, "a", Some(true)),
        reference("u2", "b", None),
        reference(UID, "c", Some(false)),
    ]);
    let cached = Cached::new(obj.clone());
    let owners: Vec<_> = cached.owners().collect();
    assert_eq!(owners, [&Uid::new(UID), &Uid::new("u2")]);
    assert_eq!(cached.decode().metadata, obj.metadata);
    // No list and an empty list stay apart.
    for refs in [None, Some(Vec::new())] {
        let mut obj = deployment();
        obj.metadata.owner_references = refs;
        let cached = Cached::new(obj.clone());
        assert_eq!(cached.owners().count(), 0);
        assert_eq!(cached.decode().metadata, obj.metadata);
        assert!(!cached.same_but_version(&Cached::new(deployment())));
    }
}

#[test]
fn a_cached_record_fits_jemallocs_128_byte_class_with_its_arc() {
    // Arc's two counts and the record: 12000 of them at the bench's
    // N=3000, 160 bytes each before owners and references were merged.
    assert!(std::mem::size_of::<Cached>() + 16 <= 128);
    assert_eq!(std::mem::size_of::<Owner>(), 56);
}

#[test]
fn only_a_new_resource_version_is_the_same_but_version() {
    let a = Cached::new(deployment());
    let mut moved = deployment();
    moved.metadata.resource_version = Some("8".into());
    assert!(a.same_but_version(&Cached::new(moved.clone())));
    assert!(!a.same_version(&Cached::new(moved.clone())));
    moved.data["status"]["readyReplicas"] = json!(2);
    assert!(!a.same_but_version(&Cached::new(moved)));
    let mut relabelled = deployment();
    relabelled
        .metadata
        .labels
        .get_or_insert_default()
        .insert("x".into(), "y".into());
    assert!(!a.same_but_version(&Cached::new(relabelled)));
}

#[test]
fn to_value_is_the_json_of_the_decoded_object_key_order_included() {
    let objects = [
        serde_json::to_value(deployment()).unwrap(),
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"generateName": "gen-", "uid": "ABC", "resourceVersion": "007",
                            "annotations": {"z": "1", "a": "2"}, "finalizers": ["f"],
                            "deletionTimestamp": "2026-11-28T10:00:00Z"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "x", "namespace": "", "uid": UID.to_uppercase(),
                            "resourceVersion": "18446744073709551616", "ownerReferences": []},
               "data": {"b": "1", "a": "2"}, "binaryData": {}, "immutable": true}),
        json!({"metadata": {"name": "bare"}, "zeta": 1, "alpha": [1, {"y": 2, "x": 1}]}),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "é", "namespace": "ns", "labels": {}, "resourceVersion": "0",
                            "creationTimestamp": "2026-01-02T03:04:05Z", "generation": 3},
               "type": "Opaque", "data": {"k": "dg=="}}),
    ];
    for obj in objects {
        let obj: DynamicObject = serde_json::from_value(obj).unwrap();
        let cached = Cached::new(obj);
        let through_decode = serde_json::to_string(&serde_json::to_value(cached.decode()).unwrap());
        assert_eq!(
            serde_json::to_string(&cached.to_value()).unwrap(),
            through_decode.unwrap()
        );
    }
}

#[test]
fn a_resource_version_is_compared_as_it_prints() {
    let cached = Cached::new(deployment());
    assert!(cached.is_version("7"));
    assert!(!cached.is_version("07") && !cached.is_version("8"));
}
