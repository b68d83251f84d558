use std::sync::Mutex as StdMutex;

use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use super::*;
use crate::rules::Gvk;

/// An informer with no watch task, fed events by hand.
fn informer() -> Arc<Informer> {
    let gvk = Gvk {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
    };
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "ConfigMap"),
        "configmaps",
    );
    let kind = Arc::new(Kind {
        gvk,
        ar,
        namespaced: true,
        has_status: false,
    });
    Informer::unstarted(kind, vec![None], None)
}

fn cm(name: &str, owner: Option<&str>) -> DynamicObject {
    let mut meta = json!({"name": name, "namespace": "ns"});
    if let Some(uid) = owner {
        meta["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "X", "name": "o", "uid": uid}]);
    }
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}))
        .unwrap()
}

/// Subscribes to `i`: each change as `+name` or `-name`, in order.
fn record(i: &Informer) -> Arc<StdMutex<Vec<String>>> {
    let seen = Arc::new(StdMutex::new(Vec::new()));
    let log = seen.clone();
    i.subscribe(Arc::new(move |c: &Change<'_>| {
        let entry = match c {
            Change::Applied(o) => format!("+{}", o.name_any()),
            Change::Deleted(o) => format!("-{}", o.name_any()),
        };
        log.lock().unwrap().push(entry);
    }));
    seen
}

#[test]
fn a_relist_after_410_emits_the_deletions_it_missed_and_fixes_the_owner_index() {
    let i = informer();
    let seen = record(&i);
    // First list: a and b, both owned by u1.
    i.handle(0, Event::Init);
    i.handle(0, Event::InitApply(cm("a", Some("u1"))));
    i.handle(0, Event::InitApply(cm("b", Some("u1"))));
    i.handle(0, Event::InitDone);
    assert!(i.is_synced());
    assert_eq!(i.owned_by("u1").len(), 2);
    // The watch expires (410 Gone); meanwhile b was deleted and c created.
    // The watcher re-lists: kiln must notice b's deletion it never saw.
    seen.lock().unwrap().clear();
    i.handle(0, Event::Init);
    i.handle(0, Event::InitApply(cm("a", Some("u1"))));
    i.handle(0, Event::InitApply(cm("c", Some("u2"))));
    i.handle(0, Event::InitDone);
    let mut events = seen.lock().unwrap().clone();
    events.sort();
    assert_eq!(events, ["+a", "+c", "-b"]);
    let mut names: Vec<String> = i.list().iter().map(|o| o.name_any()).collect();
    names.sort();
    assert_eq!(names, ["a", "c"]);
    assert_eq!(i.owned_by("u1").len(), 1);
    assert_eq!(i.owned_by("u2").len(), 1);
    // Ordinary events after the re-list keep working.
    i.handle(0, Event::Delete(cm("a", Some("u1"))));
    assert!(i.owned_by("u1").is_empty());
    assert!(
        i.get(&ObjKey {
            namespace: Some("ns".into()),
            name: "a".into()
        })
        .is_none()
    );
}

/// What the watch sends: a decoded object.
fn incoming(o: DynamicObject) -> Incoming {
    Incoming {
        object: o,
        undecodable: None,
    }
}

#[test]
fn a_scoped_cache_notes_the_names_it_left_out_until_they_go() {
    let plain = informer();
    let keep: Keep = Arc::new(|_, o: &DynamicObject| {
        o.owner_references()
            .first()
            .is_none_or(|r| r.uid != "theirs")
    });
    let i = Informer::unstarted_with(
        plain.kind.clone(),
        vec![None],
        None,
        Some(keep),
        Vec::new(),
        String::new(),
        0,
    );
    let key = |name: &str| ObjKey {
        namespace: Some("ns".into()),
        name: name.into(),
    };
    i.accept(0, Event::Init);
    i.accept(0, Event::InitApply(incoming(cm("mine", Some("ours")))));
    i.accept(0, Event::InitApply(incoming(cm("other", Some("theirs")))));
    assert!(
        i.may_hold_unseen(&key("free")),
        "unsynced: nothing is known absent"
    );
    i.accept(0, Event::InitDone);
    assert!(!i.may_hold_unseen(&key("free")));
    assert!(i.may_hold_unseen(&key("other")), "left out, so maybe there");
    assert!(i.entry(&key("other")).is_none());
    // It becomes this replica's: cached, no longer noted; the note
    // goes only once it is stored, so no reader finds it in neither.
    let seen = Arc::new(StdMutex::new(Vec::new()));
    let (log, reader) = (seen.clone(), i.clone());
    let id = i.subscribe(Arc::new(move |c: &Change<'_>| {
        if let Change::Applied(o) = c {
            let k = ObjKey::of(o);
            log.lock()
                .unwrap()
                .push((reader.entry(&k).is_some(), reader.may_hold_unseen(&k)));
        }
    }));
    i.accept(0, Event::Apply(incoming(cm("other", Some("ours")))));
    assert_eq!(*seen.lock().unwrap(), [(true, true)], "stored, still noted");
    i.unsubscribe(id);
    assert!(!i.may_hold_unseen(&key("other")));
    // And another replica's again, then deleted.
    i.accept(0, Event::Apply(incoming(cm("other", Some("theirs")))));
    assert!(i.may_hold_unseen(&key("other")));
    i.accept(0, Event::Delete(incoming(cm("other", Some("theirs")))));
    assert!(!i.may_hold_unseen(&key("other")));
    // An unscoped cache notes nothing: it holds every object.
    plain.accept(0, Event::Init);
    plain.accept(0, Event::InitApply(incoming(cm("x", Some("theirs")))));
    plain.accept(0, Event::InitDone);
    assert!(!plain.may_hold_unseen(&key("y")));
    assert!(plain.elsewhere.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_rescope_relist_hands_on_only_what_changed_and_marks_its_epoch() {
    let i = informer();
    i.handle(0, Event::Init);
    i.handle(0, Event::InitApply(cm("a", Some("u1"))));
    i.handle(0, Event::InitApply(cm("b", Some("u1"))));
    i.handle(0, Event::InitDone);
    assert_eq!(i.listed_epoch(), 0);
    let seen = record(&i);
    // The share changed: b is out of scope now, c came in, a is as it was.
    i.restart(1);
    i.handle(0, Event::Init);
    i.handle(0, Event::InitApply(cm("a", Some("u1"))));
    i.handle(0, Event::InitApply(cm("c", Some("u2"))));
    i.handle(0, Event::InitDone);
    let mut events = seen.lock().unwrap().clone();
    events.sort();
    assert_eq!(events, ["+c", "-b"], "an unchanged object queued work");
    assert_eq!(i.listed_epoch(), 1);
    // A later re-list (a 410) hands everything on again.
    seen.lock().unwrap().clear();
    i.handle(0, Event::Init);
    i.handle(0, Event::InitApply(cm("a", Some("u1"))));
    i.handle(0, Event::InitApply(cm("c", Some("u2"))));
    i.handle(0, Event::InitDone);
    assert_eq!(seen.lock().unwrap().len(), 2);
}
