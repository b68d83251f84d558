//! The status kiln writes on a primary: `observedGeneration`, the conditions
//! `Ready`, `Reconciled` and `Waiting`, and the rule's own fields. Computing it
//! is pure; a condition's `lastTransitionTime` only moves when its status does.

use serde_json::{Map, Value, json};

/// Condition types kiln owns.
pub mod types {
    /// Every child exists and is ready.
    pub const READY: &str = "Ready";
    /// The last reconcile applied everything.
    pub const RECONCILED: &str = "Reconciled";
    /// A required related object is missing.
    pub const WAITING: &str = "Waiting";
}

/// Condition reasons (CamelCase, bounded set: also used as Event reasons).
pub mod reasons {
    /// Every child is ready.
    pub const ALL_READY: &str = "AllChildrenReady";
    /// Some child is missing or not ready yet.
    pub const CHILDREN_NOT_READY: &str = "ChildrenNotReady";
    /// Children applied.
    pub const APPLIED: &str = "Applied";
    /// A required related object is missing.
    pub const DEPENDENCY_MISSING: &str = "DependencyMissing";
    /// Nothing to wait for.
    pub const DEPENDENCIES_PRESENT: &str = "DependenciesPresent";
    /// A template failed for this object.
    pub const TEMPLATE_ERROR: &str = "TemplateError";
    /// The API server refused a write as forbidden.
    pub const FORBIDDEN: &str = "Forbidden";
    /// The API server refused a child as invalid.
    pub const INVALID: &str = "Invalid";
    /// Another field manager owns a field the rule sets, and the rule does not force.
    pub const CONFLICT: &str = "Conflict";
    /// A transient error; retried with backoff.
    pub const APPLY_FAILED: &str = "ApplyFailed";
}

/// How a reconcile went, as far as status is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Children applied; `not_ready` lists children missing or not ready.
    Applied {
        /// `id/name` of each child not ready.
        not_ready: Vec<String>,
    },
    /// Required related objects are missing (described for humans).
    Waiting {
        /// e.g. `Secret default/shop-credentials (related.credentials)`.
        missing: Vec<String>,
    },
    /// The reconcile failed.
    Failed {
        /// One of [`reasons`].
        reason: &'static str,
        /// For humans.
        message: String,
    },
}

/// The conditions for `outcome`, keeping transition times from `previous`.
pub fn conditions(
    outcome: &Outcome,
    previous: &[Value],
    now: &str,
    generation: Option<i64>,
) -> Vec<Value> {
    let (ready, reconciled, waiting) = match outcome {
        Outcome::Applied { not_ready } if not_ready.is_empty() => (
            (
                true,
                reasons::ALL_READY,
                "all children are ready".to_string(),
            ),
            (true, reasons::APPLIED, "all children applied".to_string()),
            (false, reasons::DEPENDENCIES_PRESENT, String::new()),
        ),
        Outcome::Applied { not_ready } => (
            (
                false,
                reasons::CHILDREN_NOT_READY,
                format!("not ready: {}", not_ready.join(", ")),
            ),
            (true, reasons::APPLIED, "all children applied".to_string()),
            (false, reasons::DEPENDENCIES_PRESENT, String::new()),
        ),
        Outcome::Waiting { missing } => {
            let message = format!("waiting for {}", missing.join(", "));
            (
                (false, reasons::DEPENDENCY_MISSING, message.clone()),
                (
                    true,
                    reasons::DEPENDENCY_MISSING,
                    "nothing applied while waiting".to_string(),
                ),
                (true, reasons::DEPENDENCY_MISSING, message),
            )
        }
        Outcome::Failed { reason, message } => (
            (false, *reason, message.clone()),
            (false, *reason, message.clone()),
            (false, reasons::DEPENDENCIES_PRESENT, String::new()),
        ),
    };
    [(types::READY, ready), (types::RECONCILED, reconciled), (types::WAITING, waiting)]
        .into_iter()
        .map(|(kind, (ok, reason, message))| {
            let status = if ok { "True" } else { "False" };
            let since = previous
                .iter()
                .find(|c| c["type"] == kind && c["status"] == status)
                .and_then(|c| c["lastTransitionTime"].as_str())
                .unwrap_or(now);
            let mut c = json!({
                "type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": since,
            });
            if let Some(g) = generation {
                c["observedGeneration"] = json!(g);
            }
            c
        })
        .collect()
}

/// The whole status kiln applies: engine fields plus the rule's fields.
///
/// `field_names` are the rule's status fields. When the reconcile rendered
/// nothing (waiting, failed), their previous values are kept: applying
/// without them would make server-side apply delete them, only to write
/// them back on the next success.
pub fn status(
    outcome: &Outcome,
    previous: &Value,
    fields: &Map<String, Value>,
    field_names: &[&str],
    now: &str,
    generation: Option<i64>,
) -> Value {
    let previous_conditions = previous["conditions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let mut status = match outcome {
        Outcome::Applied { .. } => fields.clone(),
        Outcome::Waiting { .. } | Outcome::Failed { .. } => field_names
            .iter()
            .filter_map(|name| {
                previous
                    .get(*name)
                    .map(|v| ((*name).to_string(), v.clone()))
            })
            .collect(),
    };
    if let Some(g) = generation {
        status.insert("observedGeneration".into(), json!(g));
    }
    status.insert(
        "conditions".into(),
        Value::Array(conditions(outcome, previous_conditions, now, generation)),
    );
    Value::Object(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_type<'a>(cs: &'a [Value], t: &str) -> &'a Value {
        cs.iter().find(|c| c["type"] == t).unwrap()
    }

    #[test]
    fn ready_when_applied_and_all_children_ready() {
        let cs = conditions(&Outcome::Applied { not_ready: vec![] }, &[], "T1", Some(3));
        assert_eq!(by_type(&cs, "Ready")["status"], "True");
        assert_eq!(by_type(&cs, "Reconciled")["reason"], "Applied");
        assert_eq!(by_type(&cs, "Waiting")["status"], "False");
        assert_eq!(by_type(&cs, "Ready")["observedGeneration"], 3);
    }

    #[test]
    fn transition_time_moves_only_on_a_status_change() {
        let first = conditions(
            &Outcome::Applied {
                not_ready: vec!["deployment/shop".into()],
            },
            &[],
            "T1",
            None,
        );
        assert_eq!(by_type(&first, "Ready")["status"], "False");
        let same = conditions(
            &Outcome::Applied {
                not_ready: vec!["service/shop".into()],
            },
            &first,
            "T2",
            None,
        );
        assert_eq!(
            by_type(&same, "Ready")["lastTransitionTime"],
            "T1",
            "still False: time kept"
        );
        assert_eq!(
            by_type(&same, "Ready")["message"],
            "not ready: service/shop"
        );
        let flipped = conditions(&Outcome::Applied { not_ready: vec![] }, &same, "T3", None);
        assert_eq!(by_type(&flipped, "Ready")["lastTransitionTime"], "T3");
        assert_eq!(
            by_type(&flipped, "Reconciled")["lastTransitionTime"],
            "T1",
            "Reconciled stayed True"
        );
    }

    #[test]
    fn rule_fields_are_kept_while_nothing_new_was_rendered() {
        let previous = json!({"url": "http://a", "readyReplicas": 2, "conditions": []});
        let waiting = Outcome::Waiting {
            missing: vec!["x".into()],
        };
        let s = status(
            &waiting,
            &previous,
            &Map::new(),
            &["url", "readyReplicas", "absent"],
            "T",
            Some(1),
        );
        assert_eq!(s["url"], "http://a");
        assert_eq!(s["readyReplicas"], 2);
        assert!(s.get("absent").is_none());
        let mut fresh = Map::new();
        fresh.insert("url".into(), json!("http://b"));
        let s = status(
            &Outcome::Applied { not_ready: vec![] },
            &previous,
            &fresh,
            &["url", "readyReplicas"],
            "T",
            Some(1),
        );
        assert_eq!(s["url"], "http://b");
        assert!(
            s.get("readyReplicas").is_none(),
            "an applied reconcile writes exactly what it rendered"
        );
    }

    #[test]
    fn waiting_and_failure() {
        let w = conditions(
            &Outcome::Waiting {
                missing: vec!["Secret ns/s (related.credentials)".into()],
            },
            &[],
            "T",
            None,
        );
        assert_eq!(by_type(&w, "Waiting")["status"], "True");
        assert_eq!(
            by_type(&w, "Waiting")["message"],
            "waiting for Secret ns/s (related.credentials)"
        );
        let f = conditions(
            &Outcome::Failed {
                reason: reasons::TEMPLATE_ERROR,
                message: "boom".into(),
            },
            &[],
            "T",
            None,
        );
        assert_eq!(by_type(&f, "Reconciled")["status"], "False");
        assert_eq!(by_type(&f, "Reconciled")["reason"], "TemplateError");
    }
}
