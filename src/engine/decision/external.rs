//! What a reconcile does about its external sources' answers: never act
//! on a failed one (every child is left exactly as it is: nothing
//! created, changed or pruned), wait while a source's `readyWhen` does not
//! hold, and look again when the soonest answer is due.

use std::time::Duration;

use minijinja::Value as JinjaValue;

use super::status::{Outcome, reasons};
use crate::external::{Answer, State};
use crate::render::Inputs;
use crate::rules::Rule;

/// How much of an answer a waiting status quotes.
const QUOTED: usize = 200;

/// The outcome of a reconcile its sources hold back, if they do, and when
/// to look again (`None`: when something changes): a request that cannot
/// be rendered (a template error), a source without an answer to use, or
/// a `readyWhen` that does not hold. `inputs` hold the answers' values.
pub(super) fn gate(
    rule: &Rule,
    this: &JinjaValue,
    answers: &[Answer],
    inputs: &Inputs,
) -> Option<(Outcome, Option<Duration>)> {
    if let Some(why) = answers.iter().find_map(|a| match &a.state {
        State::Unrenderable(why) => Some(why.clone()),
        _ => None,
    }) {
        let outcome = Outcome::Failed {
            reason: reasons::TEMPLATE_ERROR,
            message: why,
        };
        return Some((outcome, None));
    }
    let failed: Vec<(String, Duration)> = answers
        .iter()
        .filter_map(|a| match &a.state {
            State::Failed { error, retry_in } => Some((
                format!("external.{} ({}): {error}", a.name, a.request),
                *retry_in,
            )),
            _ => None,
        })
        .collect();
    if !failed.is_empty() {
        let retry = failed.iter().map(|(_, r)| *r).min().unwrap_or_default();
        let lines: Vec<String> = failed.into_iter().map(|(m, _)| m).collect();
        let outcome = Outcome::Awaiting {
            reason: reasons::EXTERNAL_UNAVAILABLE,
            message: lines.join("; "),
            detail: format!("asked again in {}s", retry.as_secs().max(1)),
        };
        return Some((outcome, Some(retry.max(Duration::from_secs(1)))));
    }
    not_ready(rule, this, answers, inputs)
}

/// The first source whose `readyWhen` does not hold, as a wait.
fn not_ready(
    rule: &Rule,
    this: &JinjaValue,
    answers: &[Answer],
    inputs: &Inputs,
) -> Option<(Outcome, Option<Duration>)> {
    let mut ctx = None;
    for source in &rule.external {
        let Some(id) = &source.ready_when else {
            continue;
        };
        let Some(answer) = answers.iter().find(|a| a.name == source.name) else {
            continue;
        };
        let ctx = ctx.get_or_insert_with(|| crate::render::context(rule, this, inputs));
        match rule.templates.eval_bool(id, ctx) {
            Ok(true) => continue,
            Ok(false) => {
                let message = format!(
                    "external.{} ({}): waiting until `{}`",
                    answer.name,
                    answer.request,
                    rule.templates.source_of(id).unwrap_or_default(),
                );
                let outcome = Outcome::Awaiting {
                    reason: reasons::EXTERNAL_NOT_READY,
                    message,
                    detail: last_answer(answer),
                };
                let again = answer.again_in().unwrap_or(source.interval);
                return Some((outcome, Some(again.max(Duration::from_secs(1)))));
            }
            Err(e) => {
                let outcome = Outcome::Failed {
                    reason: reasons::TEMPLATE_ERROR,
                    message: e.to_string(),
                };
                return Some((outcome, None));
            }
        }
    }
    None
}

/// The last answer and its age, quoted short.
fn last_answer(answer: &Answer) -> String {
    let (value, age) = match &answer.state {
        State::Fresh { value, age, .. } | State::Stale { value, age, .. } => (value, age),
        _ => return "no answer".into(),
    };
    let mut text = value.to_string();
    if text.len() > QUOTED {
        let cut = (0..=QUOTED)
            .rev()
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0);
        text.truncate(cut);
        text.push('…');
    }
    format!("last answer {}s ago: {text}", age.as_secs())
}

/// When the soonest answer is due again (the primary is looked at then,
/// so a change outside is seen within a source's interval).
pub(super) fn due(answers: &[Answer]) -> Option<Duration> {
    answers
        .iter()
        .filter_map(Answer::again_in)
        .min()
        .map(|d| d.max(Duration::from_secs(1)))
}
