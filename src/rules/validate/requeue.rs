//! `requeue`: when a primary is looked at again.

use super::*;

impl<'a> Checker<'a> {
    pub(super) fn requeue(&mut self) -> Requeue {
        let r = &self.raw.spec.requeue;
        let d = Requeue::default();
        let at = |k: &str| vec![key("spec"), key("requeue"), key(k)];
        let resync = r
            .resync
            .as_ref()
            .and_then(|s| self.duration(&at("resync"), s));
        let waiting = r
            .waiting
            .as_ref()
            .and_then(|s| self.duration(&at("waiting"), s))
            .unwrap_or(d.waiting);
        if waiting.is_zero() {
            self.error(&at("waiting"), "requeue.waiting must be more than 0");
        }
        let mut on_error = d.on_error;
        if let Some(b) = &r.on_error {
            let at = |k: &str| vec![key("spec"), key("requeue"), key("onError"), key(k)];
            let initial = b
                .initial
                .as_ref()
                .and_then(|s| self.duration(&at("initial"), s))
                .unwrap_or(on_error.initial);
            let max = b
                .max
                .as_ref()
                .and_then(|s| self.duration(&at("max"), s))
                .unwrap_or(on_error.max);
            if initial.is_zero() {
                self.error(&at("initial"), "onError.initial must be more than 0");
            }
            if initial > max {
                self.error(
                    &at("max"),
                    format!("onError.max ({max:?}) is shorter than onError.initial ({initial:?})"),
                );
            }
            on_error = Backoff { initial, max };
        }
        Requeue {
            resync,
            waiting,
            on_error,
        }
    }

    /// `spec.requeue.at`: a template seeing what status sees.
    pub(super) fn requeue_at(&mut self, watches: &[String], ids: &[String]) -> Option<Tree> {
        let value = self.raw.spec.requeue.at.as_ref()?;
        let at = [key("spec"), key("requeue"), key("at")];
        if !matches!(value, Value::String(_) | Value::Array(_)) {
            self.error(
                &at,
                "requeue.at is a template giving an RFC 3339 time, or a list of them",
            );
            return None;
        }
        let scope = Scope {
            roots: &[
                "self", "related", "external", "children", "rule", "vars", "ready",
            ],
        };
        let tree = self.tree(&at, value, &scope, watches, ids)?;
        // Without templates it is known now: a time, or refused.
        if let Tree::Value(literal) = &tree
            && let Err(why) = crate::template::time::earliest(literal)
        {
            self.error(&at, format!("requeue.at: {why}"));
        }
        Some(tree)
    }

    pub(super) fn duration(
        &mut self,
        at: &[Step],
        text: &DurationText,
    ) -> Option<std::time::Duration> {
        duration::parse(&text.0)
            .map_err(|why| self.error(at, why))
            .ok()
    }
}
