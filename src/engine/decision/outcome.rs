//! How a reconcile ends: the Event a plan that went through raises (or
//! clears), and what a failed write becomes — the status that says so, the
//! Warning, the retry or the failure handed to the backoff.
//!
//! Pure: the controller carries an ending out
//! (`runtime/controller/execute.rs`), the status write included, and hands
//! that write's result back to [`Failed::next`].

use std::time::Duration;

use super::failure::Failure;
use super::plan::{self, Next, Plan, Raise};
use super::status::Part;
use crate::rules::Requeue;

/// What becomes of the primary's last Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Report {
    /// Raise this one (once per distinct reason and message).
    Raise(Raise),
    /// None, and the last one is forgotten: the next failure or wait is
    /// raised again even when it repeats the last.
    Clear,
    /// None, and the last one stands (a failure retried with backoff
    /// raises nothing and does not repeat what it already said).
    Keep,
}

/// The end of a reconcile, besides its status and its retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ending {
    /// The reason of a reconcile that ended failed (its failure metric's label).
    pub failed: Option<&'static str>,
    /// The Event.
    pub report: Report,
}

/// How a reconcile whose writes all went through ends: a waiting plan
/// raises a Normal Event, a failed one a Warning (and counts as failed),
/// success clears the last Event.
pub(crate) fn succeeded(plan: &Plan) -> Ending {
    match plan.event() {
        Some(event) => Ending {
            failed: event.warning.then_some(event.reason),
            report: Report::Raise(event),
        },
        None => Ending {
            failed: None,
            report: Report::Clear,
        },
    }
}

/// How a reconcile ends once a write of its plan failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failed {
    /// The failure, with every Secret value the reconcile saw redacted
    /// (the API server may quote a value back, and a value may come from
    /// a Secret).
    pub failure: Failure,
    /// The rule's status part that says so, to write now.
    pub status: Part,
    /// The metric and the Event.
    pub ending: Ending,
    /// When to look again (`None`: backoff).
    retry: Option<Next>,
    /// The slow retry of a standing disagreement.
    slow: Duration,
}

/// What `failure` of a write of `plan` becomes: the status says so; a
/// standing disagreement or a permanent failure raises a Warning and is
/// retried slowly or once something changes, a denial raises a Warning
/// and backs off, anything else backs off quietly. `secrets` are kept out
/// of every message.
pub(crate) fn failed(
    plan: &Plan,
    failure: Failure,
    secrets: &[String],
    requeue: &Requeue,
) -> Failed {
    let failure = Failure {
        message: crate::redact::redact(&failure.message, secrets),
        ..failure
    };
    let reason = failure.category.reason();
    let slow = requeue.on_error.max;
    let retry = failure.category.retry(slow);
    let report = if retry.is_some() || failure.category.told() {
        Report::Raise(Raise {
            warning: true,
            reason,
            message: failure.message.clone(),
        })
    } else {
        Report::Keep
    };
    Failed {
        status: plan::failed(plan, reason, failure.message.clone()),
        ending: Ending {
            failed: Some(reason),
            report,
        },
        failure,
        retry,
        slow,
    }
}

impl Failed {
    /// The result of the reconcile once [`status`](Self::status) was
    /// `written`: the retry of the failure; the failure itself (backoff)
    /// when it has none; a status write that failed for a while (it backs
    /// off) when the failure's retry is slow. A status refused for good
    /// does not change the retry: the Event says why.
    pub(crate) fn next(self, written: Result<(), Failure>) -> Result<Next, Failure> {
        match (self.retry, written) {
            (Some(next), Ok(())) => Ok(next),
            (Some(next), Err(e)) if e.category.retry(self.slow).is_some() => Ok(next),
            (Some(_), Err(e)) => Err(e),
            (None, _) => Err(self.failure),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::decision::failure::Category;
    use crate::engine::decision::status::{Outcome, reasons};

    const SLOW: Duration = Duration::from_secs(300);

    fn a_plan() -> Plan {
        Plan {
            apply: Vec::new(),
            reown: Vec::new(),
            prune: Vec::new(),
            touch: Vec::new(),
            status: Part {
                outcome: Outcome::Applied {
                    not_ready: Vec::new(),
                    waiting: Vec::new(),
                    unserved: Vec::new(),
                },
                fields: Some(serde_json::Map::new()),
                conditions: Vec::new(),
                generation: Some(3),
            },
            next: Next::After(Duration::from_secs(600)),
            children: Vec::new(),
            suspended: false,
            hook_failed: None,
            finalized: false,
        }
    }

    fn a(category: Category) -> Failure {
        Failure::new(
            category,
            "applying ConfigMap team/shop: password hunter2 refused",
        )
    }

    fn warning(reason: &'static str) -> Report {
        Report::Raise(Raise {
            warning: true,
            reason,
            message: "applying ConfigMap team/shop: password [redacted] refused".into(),
        })
    }

    /// The status write went through.
    const WRITTEN: Result<(), Failure> = Ok(());

    #[test]
    fn a_failed_write_raises_a_warning_only_when_a_retry_could_not_fix_it_alone() {
        use Category::*;
        // failure → Event, result
        let table = [
            (Conflict, warning(reasons::CONFLICT), Ok(Next::After(SLOW))),
            (
                Forbidden,
                warning(reasons::FORBIDDEN),
                Ok(Next::After(SLOW)),
            ),
            (Invalid, warning(reasons::INVALID), Ok(Next::Done)),
            (Denied, warning(reasons::DENIED), Err(Denied)),
            (Transient, Report::Keep, Err(Transient)),
            (LeaseLost, Report::Keep, Err(LeaseLost)),
        ];
        let requeue = Requeue::default();
        for (category, report, result) in table {
            let failed = failed(&a_plan(), a(category), &["hunter2".into()], &requeue);
            assert_eq!(failed.ending.report, report, "{category:?}");
            assert_eq!(failed.ending.failed, Some(category.reason()));
            let next = failed.next(WRITTEN).map_err(|f| f.category);
            assert_eq!(next, result, "{category:?}");
        }
    }

    #[test]
    fn the_status_says_why_without_the_secret_and_keeps_the_last_fields() {
        let plan = a_plan();
        let failed = failed(
            &plan,
            a(Category::Conflict),
            &["hunter2".into()],
            &Requeue::default(),
        );
        let message = "applying ConfigMap team/shop: password [redacted] refused";
        assert_eq!(
            failed.status.outcome,
            Outcome::Failed {
                reason: reasons::CONFLICT,
                message: message.into()
            }
        );
        assert_eq!(failed.status.fields, None, "the fields shown are kept");
        assert_eq!(failed.status.generation, Some(3));
        assert_eq!(failed.failure.message, message);
        let backoff = super::failed(
            &plan,
            a(Category::Transient),
            &["hunter2".into()],
            &Requeue::default(),
        );
        assert_eq!(backoff.next(WRITTEN).unwrap_err().message, message);
    }

    #[test]
    fn a_status_refused_for_good_keeps_the_retry_a_status_failing_for_now_backs_off() {
        use Category::*;
        // status write → result, of a conflict (retried slowly)
        let table = [
            (Ok(()), Ok(Next::After(SLOW))),
            (Err(Invalid), Ok(Next::After(SLOW))),
            (Err(Forbidden), Ok(Next::After(SLOW))),
            (Err(Transient), Err(Transient)),
            (Err(LeaseLost), Err(LeaseLost)),
            (Err(Denied), Err(Denied)),
        ];
        for (written, result) in table {
            let failed = failed(&a_plan(), a(Conflict), &[], &Requeue::default());
            let written = written.map_err(|c| Failure::new(c, "writing status").in_status());
            let next = failed.next(written.clone());
            assert_eq!(next.map_err(|f| f.category), result, "{written:?}");
        }
        // Backing off already: the failure, whatever the status write did.
        let failed = failed(&a_plan(), a(Transient), &[], &Requeue::default());
        let written = Err(Failure::new(Invalid, "writing status").in_status());
        assert_eq!(failed.next(written).unwrap_err().category, Transient);
    }

    #[test]
    fn a_plan_that_went_through_raises_what_it_says_and_success_clears_the_last_event() {
        let done = a_plan();
        assert_eq!(
            succeeded(&done),
            Ending {
                failed: None,
                report: Report::Clear
            }
        );
        let mut waiting = a_plan();
        waiting.status.outcome = Outcome::Waiting {
            missing: vec!["Secret team/creds".into()],
        };
        let ending = succeeded(&waiting);
        assert_eq!(ending.failed, None, "waiting is no failure");
        assert!(matches!(
            ending.report,
            Report::Raise(Raise { warning: false, .. })
        ));
        let mut refused = a_plan();
        refused.status.outcome = Outcome::Failed {
            reason: reasons::TEMPLATE_ERROR,
            message: "no".into(),
        };
        let ending = succeeded(&refused);
        assert_eq!(ending.failed, Some(reasons::TEMPLATE_ERROR));
        assert!(matches!(
            ending.report,
            Report::Raise(Raise { warning: true, .. })
        ));
    }
}
