//! `children[].history`, checked and compiled.

use serde_json::Value;

use super::{Checker, Scope, key};
use crate::rules::history::HistoryClass;
use crate::rules::spec::RawChild;
use crate::yaml::Step;

/// What `when` and `keep` may read: the primary's world, and `child`.
const ROOTS: &[&str] = &[
    "self", "related", "external", "children", "rule", "vars", "ready", "child",
];

impl Checker<'_> {
    /// The child's `history` classes, each `keep` a non-negative integer or
    /// an expression.
    pub(super) fn history(
        &mut self,
        at: &[Step],
        c: &RawChild,
        watches: &[String],
        ids: &[String],
    ) -> Vec<HistoryClass> {
        let scope = Scope { roots: ROOTS };
        let mut out = Vec::new();
        for (i, h) in c.history.iter().enumerate() {
            let at = [at, &[key("history"), Step::Index(i)]].concat();
            let with = |k: &str| [at.as_slice(), &[key(k)]].concat();
            let when = h
                .when
                .as_ref()
                .and_then(|e| self.expr(&with("when"), e, &scope, watches, ids));
            let source = match &h.keep {
                Value::Number(n) if n.as_u64().is_some() => n.to_string(),
                Value::String(e) => e.clone(),
                other => {
                    self.error(
                        &with("keep"),
                        format!("`keep` must be a non-negative integer or an expression giving one, not {other}"),
                    );
                    continue;
                }
            };
            if let Some(keep) = self.expr(&with("keep"), &source, &scope, watches, ids) {
                out.push(HistoryClass { when, keep });
            }
        }
        out
    }
}
