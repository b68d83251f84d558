//! A rule's own Events (`spec.events`), rendered for a reconcile that
//! ended: each one whose `when` holds, with its message.

use minijinja::Value as JinjaValue;
use serde_json::Value;

use crate::rules::Rule;
use crate::template::{Budget, RenderError};

/// One of the rule's Events, rendered.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RenderedEvent {
    /// CamelCase.
    pub reason: String,
    /// A Warning (else Normal).
    pub warning: bool,
    /// For humans.
    pub message: String,
}

/// The rule's Events for a reconcile of `this` that ended as `outcome`
/// (`reconciled`, `ready`, `reason`, `message`): per Event, `Some` while its
/// `when` holds.
pub fn events(
    rule: &Rule,
    this: &JinjaValue,
    outcome: &Value,
) -> Result<Vec<Option<RenderedEvent>>, RenderError> {
    let ctx = minijinja::context! {
        self => this.clone(),
        rule => minijinja::context! { name => rule.name.clone() },
        outcome => JinjaValue::from(minijinja::value::Serde(outcome)),
        __kiln_now => crate::template::time::current().to_string(),
    };
    let set = &rule.templates;
    let mut budget = Budget::default();
    let mut out = Vec::with_capacity(rule.events.len());
    for e in &rule.events {
        if !set.eval_bool(&e.when, &ctx)? {
            out.push(None);
            continue;
        }
        let message = match e.message.render(set, &ctx, &mut budget)? {
            Value::String(s) => s,
            other => other.to_string(),
        };
        out.push(Some(RenderedEvent {
            reason: e.reason.clone(),
            warning: e.warning,
            message,
        }));
    }
    Ok(out)
}
