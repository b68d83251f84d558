//! What a render makes besides children: the rule's own conditions and the
//! instant `spec.requeue.at` asks to wake at.

use minijinja::Value as JinjaValue;
use serde_json::Value;

use super::{RenderFailure, RuleCondition, Wake};
use crate::template::{Budget, RenderError};

/// The [`Wake`] a rendered `spec.requeue.at` asks for: its earliest
/// instant after `now`. An instant not after `now` asks for none: this
/// render is at or after it, so it has come (it fires once, never in a loop).
pub(super) fn wake_at(value: &Value, now: jiff::Timestamp) -> Result<Option<Wake>, RenderFailure> {
    use crate::template::time;
    let at =
        time::earliest_after(value, now).map_err(|why| RenderError::new("spec.requeue.at", why))?;
    Ok(at.map(|at| Wake {
        at,
        after: time::wait_until(now, at),
    }))
}

/// Renders one of the rule's conditions: its status from a boolean or the
/// text `True`/`False`/`Unknown`, a CamelCase reason, a message.
pub(super) fn render_condition(
    c: &crate::rules::Condition,
    set: &crate::template::TemplateSet,
    ctx: &JinjaValue,
    budget: &mut Budget,
) -> Result<RuleCondition, RenderError> {
    let path = c.status.path();
    let status = match set.eval(&c.status, ctx, budget)? {
        Value::Bool(true) => "True",
        Value::Bool(false) => "False",
        Value::String(s) if s == "True" => "True",
        Value::String(s) if s == "False" => "False",
        Value::String(s) if s == "Unknown" => "Unknown",
        other => {
            return Err(RenderError::new(
                path,
                format!(
                    "a condition's status must be true, false, `True`, `False` or `Unknown`, got {other}"
                ),
            ));
        }
    };
    let text = |tree: &crate::template::Tree, budget: &mut Budget| -> Result<String, RenderError> {
        match tree.render(set, ctx, budget)? {
            Value::String(s) => Ok(s),
            v @ (Value::Number(_) | Value::Bool(_)) => Ok(v.to_string()),
            other => Err(RenderError::new(
                path,
                format!("expected text, got {other}"),
            )),
        }
    };
    let reason = text(&c.reason, budget)?;
    if !crate::rules::is_condition_reason(&reason) {
        return Err(RenderError::new(
            path,
            format!(
                "condition `{}`: reason `{}` is not CamelCase (a letter, then letters, digits, `_`, `,` or `:`)",
                c.type_,
                reason.escape_debug()
            ),
        ));
    }
    let message = match &c.message {
        Some(m) => text(m, budget)?,
        None => String::new(),
    };
    Ok(RuleCondition {
        type_: c.type_.clone(),
        status,
        reason,
        message,
    })
}
