//! What kiln does about an object it cannot decode: one WARN line, one
//! Warning Event on the object, and `kiln_undecodable_objects_total{gvk}` —
//! once per object, never its body. The object is left out of the cache, so
//! it is neither reconciled nor mistaken for a child; every other object of
//! its kind goes on.

use std::sync::Arc;

use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};

use super::informer::{Undecodable, UndecodableSink};
use crate::gate;
use crate::metrics::{self, Metrics};

/// The Event reason.
pub(crate) const REASON: &str = "Undecodable";

/// A sink that reports each undecodable object through `recorder` and `metrics`.
pub(crate) fn sink(recorder: Recorder, metrics: Arc<Metrics>) -> UndecodableSink {
    Arc::new(move |u: &Undecodable| {
        let gvk = u.kind.gvk.to_string();
        let object = u.object.metadata.name.clone().unwrap_or_default();
        let namespace = u.object.metadata.namespace.clone().unwrap_or_default();
        tracing::warn!(%gvk, %namespace, %object, why = %u.why, "an object cannot be decoded; kiln leaves it out until it changes");
        metrics
            .undecodable
            .get_or_create(&metrics::label("gvk", &gvk))
            .inc();
        let reference = u.object.object_ref(&u.kind.ar);
        let event = Event {
            type_: EventType::Warning,
            reason: REASON.to_string(),
            note: Some(note(&u.why)),
            action: "Decode".to_string(),
            secondary: None,
        };
        let recorder = recorder.clone();
        // The sink runs inside the watch; the Event must not hold it up.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(error) = gate::publish(&recorder, &event, &reference).await {
                    tracing::warn!(%error, "could not publish an Event");
                }
            });
        }
    })
}

/// The Event's note: what happened and what to do.
fn note(why: &str) -> String {
    format!(
        "kiln cannot decode this object ({why}); it is not reconciled until it changes. Most likely it nests deeper than 128 levels."
    )
}
