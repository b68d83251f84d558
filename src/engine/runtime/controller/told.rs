//! The rule's own Events (`spec.events`), recorded when a reconcile ends:
//! each while its `when` holds, once per generation of the primary and
//! message, so a steady primary is not told the same again every resync.

use super::*;
use crate::engine::decision::status::Outcome;
use crate::render::events::RenderedEvent;

impl RuleController {
    /// Records the rule's Events for a reconcile of `obj` that ended as
    /// `outcome`. A template that fails is logged; the reconcile stands.
    pub(super) async fn tell(&self, obj: &DynamicObject, outcome: &Outcome) {
        if self.rule.events.is_empty() {
            return;
        }
        let Ok(primary) = serde_json::to_value(obj) else {
            return;
        };
        let summary = status::summary(outcome);
        let rendered = crate::template::limits::render_stack(|| {
            render::events::events(&self.rule, &to_jinja(&primary), &summary)
        });
        let rendered = match rendered {
            Ok(r) => r,
            Err(error) => {
                tracing::warn!(rule = %self.rule.name, object = %ObjKey::of(obj), %error, "an Event of the rule does not render");
                return;
            }
        };
        let generation = obj.metadata.generation.unwrap_or_default();
        let due = self.due(&ObjKey::of(obj), generation, &rendered);
        for event in due {
            let kind = if event.warning {
                EventType::Warning
            } else {
                EventType::Normal
            };
            self.publish(obj, kind, &event.reason, &event.message).await;
        }
    }

    /// Of the Events rendered, those not told yet for this generation and
    /// message; remembers them, and forgets each whose `when` no longer holds.
    fn due(
        &self,
        key: &ObjKey,
        generation: i64,
        rendered: &[Option<RenderedEvent>],
    ) -> Vec<RenderedEvent> {
        let mut told = lock(&self.told);
        let last = told
            .entry(key.clone())
            .or_insert_with(|| vec![None; rendered.len()]);
        last.resize(rendered.len(), None);
        let mut due = Vec::new();
        for (slot, event) in last.iter_mut().zip(rendered) {
            let print = event.as_ref().map(|e| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (generation, e).hash(&mut h);
                h.finish()
            });
            if print.is_some() && print != *slot {
                due.extend(event.clone());
            }
            *slot = print;
        }
        due
    }
}
