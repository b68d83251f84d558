//! What one source gave one primary's reconcile: a fresh answer, a last
//! good one used after a failure (when the rule opts in), or a failure.
//! The decision reads these; only a fresh or an allowed last good answer
//! is ever data.

use std::time::Duration;

use minijinja::Value as JinjaValue;
use serde_json::Value;

use crate::rules::Rule;

/// One source's part of a reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The source's name (`external.<name>`).
    pub name: String,
    /// The request, as status shows it (`GET https://…/vpc-1`; no credentials).
    pub request: String,
    /// What came of it.
    pub state: State,
}

/// What came of a request.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// An answer younger than the source's interval.
    Fresh {
        /// The answer.
        value: Value,
        /// Its age.
        age: Duration,
        /// When it is asked for again.
        refresh_in: Duration,
    },
    /// The request failed; the last good answer, younger than the rule's
    /// `lastGood.maxAge`, stands in.
    Stale {
        /// The last good answer.
        value: Value,
        /// Its age.
        age: Duration,
        /// Why the request failed.
        error: String,
        /// When it is tried again.
        retry_in: Duration,
    },
    /// No answer to use: nothing that reads it may change.
    Failed {
        /// Why, for status (no credential, no body).
        error: String,
        /// When it is tried again.
        retry_in: Duration,
    },
    /// The request could not be rendered for this primary (a template
    /// error): permanent for these inputs.
    Unrenderable(String),
}

impl Answer {
    /// The answer templates see, if there is one to use.
    pub fn value(&self) -> Option<&Value> {
        match &self.state {
            State::Fresh { value, .. } | State::Stale { value, .. } => Some(value),
            State::Failed { .. } | State::Unrenderable(_) => None,
        }
    }

    /// When this source wants the primary looked at again.
    pub fn again_in(&self) -> Option<Duration> {
        match &self.state {
            State::Fresh { refresh_in, .. } => Some(*refresh_in),
            State::Stale { retry_in, .. } | State::Failed { retry_in, .. } => Some(*retry_in),
            State::Unrenderable(_) => None,
        }
    }
}

/// The answers of a reader that asks no source (`kiln explain`, `kiln
/// diff`): each request as it would be sent, and that it was not.
pub fn not_asked(rule: &Rule, primary: &JinjaValue) -> Vec<Answer> {
    super::asked::all(rule, primary)
        .into_iter()
        .filter_map(|(i, asked)| {
            let source = rule.external.get(i)?;
            let (request, state) = match asked {
                Ok(a) => (
                    a.shown,
                    State::Failed {
                        error: "not asked here (only `kiln run` asks external sources)".into(),
                        retry_in: Duration::ZERO,
                    },
                ),
                Err(why) => (
                    format!("{} {}", source.method.as_str(), source.destination),
                    State::Unrenderable(why),
                ),
            };
            Some(Answer {
                name: source.name.clone(),
                request,
                state,
            })
        })
        .collect()
}
