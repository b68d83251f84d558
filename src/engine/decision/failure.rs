//! Why a write of a reconcile failed, sorted once: the category decides the
//! condition reason, the Event, the metric label and how the primary is
//! retried.

use std::time::Duration;

use super::plan::Next;
use super::status::reasons;

/// The kinds of failure, each with one retry policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    /// Another field manager owns a field the rule sets, and the rule does not force.
    Conflict,
    /// The API server refused the write (RBAC).
    Forbidden,
    /// The API server refused the object as invalid: permanent for this object.
    Invalid,
    /// An admission policy or webhook denied the write: it may be lifted
    /// without anything kiln watches changing, so it is retried with backoff
    /// (and at once when the primary or child changes).
    Denied,
    /// Anything else (5xx, 429, timeouts, connection errors): retried with backoff.
    Transient,
    /// This replica no longer holds the lease: it must not write.
    LeaseLost,
    /// The rule's hook failed or its answer was refused: nothing was
    /// applied; retried with backoff.
    Hook,
}

impl Category {
    /// The condition and Event reason.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Conflict => reasons::CONFLICT,
            Self::Forbidden => reasons::FORBIDDEN,
            Self::Invalid => reasons::INVALID,
            Self::Denied => reasons::DENIED,
            Self::Transient | Self::LeaseLost => reasons::APPLY_FAILED,
            Self::Hook => reasons::HOOK_FAILED,
        }
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Conflict => "conflict",
            Self::Forbidden => "forbidden",
            Self::Invalid => "invalid",
            Self::Denied => "denied",
            Self::Transient => "error",
            Self::LeaseLost => "lease_lost",
            Self::Hook => "hook",
        }
    }

    /// When to try again: `None` means backoff. A standing disagreement
    /// (conflict, RBAC) is retried slowly; an invalid object when it changes.
    pub fn retry(self, slow: Duration) -> Option<Next> {
        match self {
            Self::Conflict | Self::Forbidden => Some(Next::After(slow)),
            Self::Invalid => Some(Next::Done),
            Self::Transient | Self::LeaseLost | Self::Denied | Self::Hook => None,
        }
    }

    /// Whether a failure retried with backoff is still told in a Warning
    /// Event (once per distinct message): nothing kiln watches may change
    /// when it is lifted (an admission denial, a hook's own trouble).
    pub fn told(self) -> bool {
        matches!(self, Self::Denied | Self::Hook)
    }
}

/// Which writes of a reconcile failed. Each has its own retry count, so a
/// status the server keeps refusing never slows the retries of a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stage {
    /// Applying or pruning children.
    #[default]
    Children,
    /// Writing the primary's status.
    Status,
}

/// A failed write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    /// What kind of failure.
    pub category: Category,
    /// For humans: what was being written, and the API server's words.
    pub message: String,
    /// Which writes failed.
    pub stage: Stage,
}

impl Failure {
    /// A failure of `category`.
    pub fn new(category: Category, message: impl Into<String>) -> Self {
        Self {
            category,
            message: message.into(),
            stage: Stage::Children,
        }
    }

    /// The same failure, of the status write.
    #[must_use]
    pub fn in_status(self) -> Self {
        Self {
            stage: Stage::Status,
            ..self
        }
    }

    /// Sorts an API error for a write described by `what` (e.g. `applying
    /// ConfigMap ns/x`). `forced`: the write forced conflicts, so a 409 is a
    /// race, not a standing disagreement. The API's `reason` decides first;
    /// the code and message where the server gives no telling reason (server-side
    /// apply answers some permanent refusals with a bare 500).
    pub fn of(error: &kube::Error, what: &str, forced: bool) -> Self {
        let category = match error {
            // ValidatingAdmissionPolicy: "… denied request: …"; webhooks:
            // "admission webhook \"…\" denied the request: …" (422 or 403).
            kube::Error::Api(s)
                if s.message.contains("denied request")
                    || s.message.contains("denied the request") =>
            {
                Category::Denied
            }
            kube::Error::Api(s) if (s.code == 409 || s.reason == "Conflict") && !forced => {
                Category::Conflict
            }
            kube::Error::Api(s) if s.code == 403 || s.reason == "Forbidden" => Category::Forbidden,
            kube::Error::Api(s)
                if s.code == 422
                    || s.code == 400
                    || s.code == 413
                    || PERMANENT_REASONS.contains(&s.reason.as_str())
                    || refused_content(&s.message) =>
            {
                Category::Invalid
            }
            _ => Category::Transient,
        };
        let message = match (error, category) {
            (kube::Error::Api(s), Category::Forbidden) => {
                format!("{what}: forbidden: {}", s.message)
            }
            (kube::Error::Api(s), Category::Transient) => {
                format!("{what}: {} (HTTP {})", s.message, s.code)
            }
            (kube::Error::Api(s), _) => format!("{what}: {}", s.message),
            (other, _) => format!("{what}: {other}"),
        };
        Self {
            category,
            message,
            stage: Stage::Children,
        }
    }
}

/// API `reason`s that say the same write can never succeed.
const PERMANENT_REASONS: &[&str] = &[
    "Invalid",
    "BadRequest",
    "RequestEntityTooLarge",
    "UnsupportedMediaType",
    "NotAcceptable",
    "MethodNotAllowed",
];

/// Whether an API server's answer (often an HTTP 500) says the content of
/// the write is what it refuses, so the same write can never succeed: a
/// value of the wrong type for the schema, a field the schema does not
/// declare, an object too large to store.
fn refused_content(message: &str) -> bool {
    [
        "failed to create typed patch object",
        "field not declared in schema",
        "request is too large",
        "too large",
    ]
    .iter()
    .any(|m| message.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, "")
                .with_code(code)
                .boxed(),
        )
    }

    fn api_with_reason(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, reason)
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn api_errors_are_sorted_by_what_a_retry_could_change() {
        let slow = Duration::from_secs(300);
        let cases = [
            (
                api(409, "conflict"),
                false,
                Category::Conflict,
                Some(Next::After(slow)),
            ),
            (api(409, "conflict"), true, Category::Transient, None),
            (
                api(403, "no"),
                true,
                Category::Forbidden,
                Some(Next::After(slow)),
            ),
            (api(422, "bad"), true, Category::Invalid, Some(Next::Done)),
            (
                api(
                    500,
                    "failed to create typed patch object (x): .status.conditions: field not declared in schema",
                ),
                true,
                Category::Invalid,
                Some(Next::Done),
            ),
            (
                api(500, "etcdserver: request is too large"),
                true,
                Category::Invalid,
                Some(Next::Done),
            ),
            (
                api(413, "Request entity too large: limit is 3145728"),
                true,
                Category::Invalid,
                Some(Next::Done),
            ),
            (
                api(
                    500,
                    "failed to create typed patch object: .spec.x: expected string",
                ),
                true,
                Category::Invalid,
                Some(Next::Done),
            ),
            (api(500, "etcd timeout"), true, Category::Transient, None),
            (
                api(
                    422,
                    "configmaps \"x\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no",
                ),
                true,
                Category::Denied,
                None,
            ),
            (
                api(
                    403,
                    "admission webhook \"v.example.com\" denied the request: no",
                ),
                true,
                Category::Denied,
                None,
            ),
            (api(429, "slow down"), true, Category::Transient, None),
            (
                api_with_reason(500, "Invalid", "the object is not valid"),
                true,
                Category::Invalid,
                Some(Next::Done),
            ),
            (
                api_with_reason(500, "RequestEntityTooLarge", "limit is 3145728"),
                true,
                Category::Invalid,
                Some(Next::Done),
            ),
            (
                api_with_reason(500, "InternalError", "etcd leader changed"),
                true,
                Category::Transient,
                None,
            ),
        ];
        for (error, forced, category, retry) in cases {
            let f = Failure::of(&error, "applying ConfigMap a/b", forced);
            assert_eq!(f.category, category, "{error}");
            assert_eq!(f.category.retry(slow), retry, "{error}");
            assert!(
                f.message.starts_with("applying ConfigMap a/b: "),
                "{}",
                f.message
            );
        }
    }
}
