//! `status`: the rule's own status fields and conditions.

use super::*;

impl<'a> Checker<'a> {
    pub(super) fn status_fields(
        &mut self,
        watches: &[String],
        ids: &[String],
    ) -> Vec<(String, Tree)> {
        let Some(status) = &self.raw.spec.status else {
            return Vec::new();
        };
        let scope = Scope {
            roots: &[
                "self", "related", "external", "children", "rule", "vars", "ready",
            ],
        };
        let mut out = Vec::new();
        for (name, value) in &status.fields {
            let at = [key("spec"), key("status"), key("fields"), key(name)];
            if ENGINE_STATUS_FIELDS.contains(&name.as_str()) {
                self.error(
                    &at,
                    format!("status field `{name}` is written by the engine; choose another name"),
                );
                continue;
            }
            if let Some(tree) = self.tree(&at, value, &scope, watches, ids) {
                out.push((name.clone(), tree));
            }
        }
        out
    }

    pub(super) fn conditions(&mut self, watches: &[String], ids: &[String]) -> Vec<Condition> {
        let Some(status) = &self.raw.spec.status else {
            return Vec::new();
        };
        let scope = Scope {
            roots: &[
                "self", "related", "external", "children", "rule", "vars", "ready",
            ],
        };
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for (i, c) in status.conditions.iter().enumerate() {
            let at = |k: &str| {
                vec![
                    key("spec"),
                    key("status"),
                    key("conditions"),
                    Step::Index(i),
                    key(k),
                ]
            };
            let t = &c.type_;
            if ENGINE_CONDITIONS.contains(&t.as_str()) || t.contains(".kiln.dev/") {
                self.error(
                    &at("type"),
                    format!("condition `{t}` is written by the engine; choose another type"),
                );
            } else if !is_condition_type(t) {
                self.error(
                    &at("type"),
                    format!(
                        "condition type `{}` must be letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit, at most 316 characters",
                        t.escape_debug()
                    ),
                );
            } else if !seen.insert(t.clone()) {
                self.error(&at("type"), format!("duplicate condition `{t}`"));
            }
            let reason = &c.reason;
            if !reason.contains('{') && !is_condition_reason(reason) {
                self.error(
                    &at("reason"),
                    format!(
                        "reason `{}` must be CamelCase: a letter, then letters, digits, `_`, `,` or `:`",
                        reason.escape_debug()
                    ),
                );
            }
            let text = |s: &str| Value::String(s.to_string());
            let status = self.expr(&at("status"), &c.status, &scope, watches, ids);
            let reason = self.tree(&at("reason"), &text(reason), &scope, watches, ids);
            let message = match &c.message {
                Some(m) => self
                    .tree(&at("message"), &text(m), &scope, watches, ids)
                    .map(Some),
                None => Some(None),
            };
            if let (Some(status), Some(reason), Some(message)) = (status, reason, message) {
                out.push(Condition {
                    type_: t.clone(),
                    status,
                    reason,
                    message,
                });
            }
        }
        out
    }
}
