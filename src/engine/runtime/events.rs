//! Events about objects with long names. kube's recorder names an Event
//! `<object name>.<nanoseconds in hex>`: for a name near the 253-character
//! limit that is no valid name, the API server refuses the Event and the
//! object loses every one. Those Events are created here under a short,
//! deterministic name instead (a prefix of the object's name, a hash of
//! all of it, the time); the Event still regards the object by its full name.

use crate::gate::{self, Warrant};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType, Recorder};

/// The longest name the API server takes.
const MAX_NAME: usize = 253;
/// How much of the object's name a shortened Event name keeps.
const PREFIX: usize = 200;

/// Publishes `event` about `reference` through `recorder`, or, when kube's
/// name for it would be too long, creates it under a name of [`event_name`].
pub(super) async fn publish(
    recorder: &Recorder,
    client: &kube::Client,
    event: &Event,
    reference: &ObjectReference,
) -> Result<(), kube::Error> {
    let name = reference.name.as_deref().unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now();
    let Some(short) = event_name(name, now.as_nanosecond()) else {
        return gate::publish(recorder, event, reference).await;
    };
    let namespace = reference.namespace.as_deref().unwrap_or("default");
    let body = K8sEvent {
        action: Some(event.action.clone()),
        reason: Some(event.reason.clone()),
        note: event.note.clone(),
        event_time: Some(MicroTime(now)),
        regarding: Some(reference.clone()),
        related: event.secondary.clone(),
        reporting_controller: Some("kiln".into()),
        reporting_instance: Some(std::env::var("POD_NAME").unwrap_or_else(|_| "kiln".into())),
        type_: Some(
            match event.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .into(),
        ),
        metadata: ObjectMeta {
            name: Some(short),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        ..K8sEvent::default()
    };
    let events: Api<K8sEvent> = Api::namespaced(client.clone(), namespace);
    gate::create(&events, &PostParams::default(), &body, Warrant::Event)
        .await
        .map(|_| ())
}

/// The name of an Event about the object `name` at `nanos`, when kube's
/// (`<name>.<nanos in hex>`) would be too long: the name's first
/// characters, a hash of all of it and the time. `None`: kube's fits.
pub(super) fn event_name(name: &str, nanos: i128) -> Option<String> {
    let time = format!("{nanos:x}");
    if name.len() + 1 + time.len() <= MAX_NAME {
        return None;
    }
    let mut end = PREFIX.min(name.len());
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    // A DNS subdomain: no `.` or `-` right before the hash's `-`.
    let prefix = name[..end].trim_end_matches(['.', '-']);
    let hash = {
        use std::hash::{Hash, Hasher};
        // Deterministic across processes (no random seed).
        let mut h = std::hash::DefaultHasher::new();
        name.hash(&mut h);
        h.finish()
    };
    Some(format!("{prefix}-{hash:016x}.{time}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_about_a_long_named_object_gets_a_short_deterministic_name() {
        let nanos = 1_700_000_000_123_456_789_i128;
        assert_eq!(event_name("w", nanos), None, "kube's name fits");
        let long = format!("{}.b-{}", "a".repeat(199), "c".repeat(51));
        assert_eq!(long.len(), 253);
        let name = event_name(&long, nanos).unwrap();
        assert!(name.len() <= MAX_NAME, "{}", name.len());
        assert!(name.starts_with(&"a".repeat(199)), "{name}");
        assert!(!name.contains(".-"), "{name}");
        assert_eq!(
            event_name(&long, nanos),
            Some(name.clone()),
            "deterministic"
        );
        let other = format!("{}.b-{}", "a".repeat(199), "d".repeat(51));
        assert_ne!(event_name(&other, nanos), Some(name), "unique per object");
    }
}
