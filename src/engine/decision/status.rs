//! The status kiln writes on a primary: `observedGeneration`, the conditions
//! `Ready`, `Reconciled` and `Waiting`, and the rule's own fields. Computing it
//! is pure; a condition's `lastTransitionTime` only moves when its status does.
//!
//! Several rules may select the same object. Each contributes a [`Part`]; the
//! status is composed from every part and written by one field manager, so no
//! rule's apply removes another's fields. `Ready`, `Reconciled` and `Waiting`
//! then aggregate over the rules, and each rule also gets its own conditions,
//! `<rule>.kiln.dev/Ready` and so on, which cannot collide with anyone's.

use serde_json::{Map, Value, json};

use crate::render::RuleCondition;

/// Condition types kiln owns.
pub(crate) mod types {
    /// Every child exists and is ready.
    pub(crate) const READY: &str = "Ready";
    /// The last reconcile applied everything.
    pub(crate) const RECONCILED: &str = "Reconciled";
    /// A required related object is missing.
    pub(crate) const WAITING: &str = "Waiting";
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
    /// A child waits for another child to exist or be ready.
    pub const WAITING_FOR_CHILDREN: &str = "WaitingForChildren";
    /// A child waits for its kind to be served (a CRD not installed yet).
    pub const KIND_NOT_SERVED: &str = "KindNotServed";
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
    /// A watch of a namespaced primary points into another namespace the rule does not name.
    pub const NAMESPACE_NOT_ALLOWED: &str = "NamespaceNotAllowed";
    /// A child's name is held by an object kiln did not create for this primary.
    pub const ALREADY_EXISTS: &str = "AlreadyExists";
    /// An admission policy or webhook denied a write; retried with backoff.
    pub const DENIED: &str = "Denied";
    /// A rule has not reconciled the object since kiln started.
    pub const NOT_RECONCILED_YET: &str = "NotReconciledYet";
    /// The rule's hook failed (an error, a timeout, a status not 2xx, a
    /// body too large or not its JSON), or its answer was refused.
    pub const HOOK_FAILED: &str = "HookFailed";
    /// An external source gave no answer to use (an error, a timeout, an
    /// oversize or undecodable answer): nothing that reads it changes.
    pub const EXTERNAL_UNAVAILABLE: &str = "ExternalUnavailable";
    /// An external source's `readyWhen` does not hold yet: the primary
    /// waits and asks again every interval.
    pub const EXTERNAL_NOT_READY: &str = "ExternalNotReady";
}

/// How a reconcile went, as far as status is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Children applied; `not_ready` lists children missing or not ready.
    Applied {
        /// `id/name` of each child not ready.
        not_ready: Vec<String>,
        /// Children not applied yet because they wait for other children,
        /// e.g. "`ingress` waits for `service` to be ready".
        waiting: Vec<String>,
        /// The kinds some of `waiting` wait for the API server to serve.
        unserved: Vec<String>,
    },
    /// Required related objects are missing (described for humans).
    Waiting {
        /// e.g. `Secret default/shop-credentials (related.credentials)`.
        missing: Vec<String>,
    },
    /// Waiting on the outside world (an external source that failed, or
    /// whose `readyWhen` does not hold): nothing applied or pruned.
    Awaiting {
        /// [`reasons::EXTERNAL_UNAVAILABLE`] or [`reasons::EXTERNAL_NOT_READY`].
        reason: &'static str,
        /// What is awaited, for humans (the Event's note).
        message: String,
        /// What changes from one look to the next (the last answer and its
        /// age, when it is asked again): in the conditions, not the Event.
        detail: String,
    },
    /// The reconcile failed.
    Failed {
        /// One of [`reasons`].
        reason: &'static str,
        /// For humans.
        message: String,
    },
}

/// One rule's contribution to a primary's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// How the rule's last reconcile of the object went.
    pub outcome: Outcome,
    /// The rule's status fields, rendered from `generation`; `None` when the
    /// reconcile rendered nothing (waiting, failed): the fields the object
    /// shows are kept, and `observedGeneration` does not move.
    pub fields: Option<Map<String, Value>>,
    /// The rule's own conditions, rendered with `fields` (empty when
    /// `fields` is `None`: the conditions the object shows are kept).
    pub conditions: Vec<RuleCondition>,
    /// The generation of the object this part was computed from.
    pub generation: Option<i64>,
}

/// A rule selecting the object, as status composition needs it.
#[derive(Debug, Clone, Copy)]
pub struct Contributor<'a> {
    /// The rule's name.
    pub rule: &'a str,
    /// The rule's status field names.
    pub fields: &'a [&'a str],
    /// The types of the rule's own conditions.
    pub conditions: &'a [&'a str],
    /// Its part; `None` when it has not reconciled the object yet (since kiln
    /// started): its fields and conditions are kept as the object shows them.
    pub part: Option<&'a Part>,
}

/// A condition before its transition time is known.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cond {
    status: &'static str,
    reason: String,
    message: String,
}

impl Cond {
    fn new(ok: bool, reason: &str, message: String) -> Self {
        Self {
            status: if ok { "True" } else { "False" },
            reason: reason.to_string(),
            message,
        }
    }

    fn is_true(&self) -> bool {
        self.status == "True"
    }

    /// The condition as the object shows it, or Unknown.
    fn from_live(previous: &[Value], kind: &str) -> Self {
        let found = previous.iter().find(|c| c["type"] == kind);
        let text = |k: &str| {
            found
                .and_then(|c| c[k].as_str())
                .unwrap_or_default()
                .to_string()
        };
        let status = match found.and_then(|c| c["status"].as_str()) {
            Some("True") => "True",
            Some("False") => "False",
            _ => "Unknown",
        };
        let reason = match status {
            "Unknown" => reasons::NOT_RECONCILED_YET.to_string(),
            _ => text("reason"),
        };
        Self {
            status,
            reason,
            message: text("message"),
        }
    }
}

/// Ready, Reconciled, Waiting for one outcome.
fn triple(outcome: &Outcome) -> [Cond; 3] {
    match outcome {
        Outcome::Applied {
            not_ready,
            waiting,
            unserved,
        } if !waiting.is_empty() => {
            let message = format!("waiting: {}", waiting.join("; "));
            let mut unready = not_ready.clone();
            unready.extend(waiting.iter().cloned());
            let unready = format!("not ready: {}", unready.join(", "));
            // A kind not served is what people wait for first: it names
            // the CustomResourceDefinition to install.
            let (ready_reason, reason, ready) = match unserved.as_slice() {
                [] => (
                    reasons::CHILDREN_NOT_READY,
                    reasons::WAITING_FOR_CHILDREN,
                    unready,
                ),
                kinds => (
                    reasons::KIND_NOT_SERVED,
                    reasons::KIND_NOT_SERVED,
                    format!("waiting for {} to be served; {unready}", kinds.join(", ")),
                ),
            };
            [
                Cond::new(false, ready_reason, ready),
                Cond::new(
                    true,
                    reasons::APPLIED,
                    "every child not waiting for another applied".into(),
                ),
                Cond::new(true, reason, message),
            ]
        }
        Outcome::Applied { not_ready, .. } if not_ready.is_empty() => [
            Cond::new(true, reasons::ALL_READY, "all children are ready".into()),
            Cond::new(true, reasons::APPLIED, "all children applied".into()),
            Cond::new(false, reasons::DEPENDENCIES_PRESENT, String::new()),
        ],
        Outcome::Applied { not_ready, .. } => [
            Cond::new(
                false,
                reasons::CHILDREN_NOT_READY,
                format!("not ready: {}", not_ready.join(", ")),
            ),
            Cond::new(true, reasons::APPLIED, "all children applied".into()),
            Cond::new(false, reasons::DEPENDENCIES_PRESENT, String::new()),
        ],
        Outcome::Waiting { missing } => {
            let message = format!("waiting for {}", missing.join(", "));
            [
                Cond::new(false, reasons::DEPENDENCY_MISSING, message.clone()),
                Cond::new(
                    true,
                    reasons::DEPENDENCY_MISSING,
                    "nothing applied while waiting".into(),
                ),
                Cond::new(true, reasons::DEPENDENCY_MISSING, message),
            ]
        }
        Outcome::Awaiting {
            reason,
            message,
            detail,
        } => {
            let message = format!("{message}; {detail}");
            [
                Cond::new(false, reason, message.clone()),
                Cond::new(true, reason, "nothing applied while waiting".into()),
                Cond::new(true, reason, message),
            ]
        }
        Outcome::Failed { reason, message } => [
            Cond::new(false, reason, message.clone()),
            Cond::new(false, reason, message.clone()),
            Cond::new(false, reasons::DEPENDENCIES_PRESENT, String::new()),
        ],
    }
}

/// How a reconcile ended, as a rule's Events read it (`outcome.*`): whether
/// it applied every child not waiting (`reconciled`), whether the primary
/// is `ready`, and the `Ready` condition's reason and message.
pub(crate) fn summary(outcome: &Outcome) -> Value {
    let [ready, ..] = triple(outcome);
    json!({
        "reconciled": matches!(outcome, Outcome::Applied { .. }),
        "ready": ready.is_true(),
        "reason": ready.reason,
        "message": ready.message,
    })
}

const TYPES: [&str; 3] = [types::READY, types::RECONCILED, types::WAITING];

/// The condition type a rule owns on an object it shares with other rules.
pub(crate) fn rule_condition(rule: &str, kind: &str) -> String {
    format!("{rule}.kiln.dev/{kind}")
}

/// Aggregates one condition type over rules: Ready and Reconciled hold when
/// they hold for every rule, Waiting when it holds for any.
fn aggregate(kind: &str, per_rule: &[(&str, &Cond)]) -> Cond {
    let any = kind == types::WAITING;
    let deciding: Vec<&(&str, &Cond)> = per_rule
        .iter()
        .filter(|(_, c)| if any { c.is_true() } else { !c.is_true() })
        .collect();
    let Some((_, first)) = deciding.first() else {
        let (_, first) = per_rule[0];
        return first.clone();
    };
    if per_rule.len() == 1 {
        return (*first).clone();
    }
    let message = deciding
        .iter()
        .map(|(rule, c)| format!("{rule}: {}", c.message))
        .collect::<Vec<_>>()
        .join("; ");
    Cond {
        status: first.status,
        reason: first.reason.clone(),
        message,
    }
}

fn condition(
    kind: &str,
    c: &Cond,
    previous: &[Value],
    now: &str,
    generation: Option<i64>,
) -> Value {
    let since = previous
        .iter()
        .find(|p| p["type"] == kind && p["status"] == c.status)
        .and_then(|p| p["lastTransitionTime"].as_str())
        .unwrap_or(now);
    let mut v = json!({
        "type": kind, "status": c.status, "reason": c.reason, "message": c.message, "lastTransitionTime": since,
    });
    if let Some(g) = generation {
        v["observedGeneration"] = json!(g);
    }
    v
}

/// The conditions for `outcome` of a single rule, keeping transition times
/// from `previous`.
#[cfg(test)]
pub(crate) fn conditions(
    outcome: &Outcome,
    previous: &[Value],
    now: &str,
    generation: Option<i64>,
) -> Vec<Value> {
    let conds = triple(outcome);
    TYPES
        .iter()
        .zip(&conds)
        .map(|(kind, c)| condition(kind, c, previous, now, generation))
        .collect()
}

/// The whole status kiln applies to an object: the fields of every rule
/// selecting it, `observedGeneration` and the conditions.
///
/// A rule that rendered nothing this time (or has not reconciled the object
/// yet) keeps the fields the object shows: applying without them would make
/// server-side apply delete them, only to write them back on the next
/// success. `observedGeneration` moves only when every rule's fields were
/// computed from the same generation or later: it never claims a status
/// that was not computed.
pub fn compose(
    rules: &[Contributor<'_>],
    previous: &Value,
    now: &str,
    generation: Option<i64>,
) -> Value {
    let previous_conditions = previous["conditions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let mut status = fields(rules, previous);
    let per_rule: Vec<[Cond; 3]> = rules
        .iter()
        .map(|r| match r.part {
            Some(p) => triple(&p.outcome),
            None => TYPES.map(|t| Cond::from_live(previous_conditions, &rule_condition(r.rule, t))),
        })
        .collect();
    let mut conditions = Vec::new();
    for (i, kind) in TYPES.iter().enumerate() {
        let each: Vec<(&str, &Cond)> = rules
            .iter()
            .zip(&per_rule)
            .map(|(r, c)| (r.rule, &c[i]))
            .collect();
        if each.is_empty() {
            continue;
        }
        conditions.push(condition(
            kind,
            &aggregate(kind, &each),
            previous_conditions,
            now,
            generation,
        ));
    }
    if rules.len() > 1 {
        for (r, conds) in rules.iter().zip(&per_rule) {
            for (kind, c) in TYPES.iter().zip(conds) {
                let t = rule_condition(r.rule, kind);
                conditions.push(condition(&t, c, previous_conditions, now, generation));
            }
        }
    }
    conditions.extend(rule_conditions(rules, previous_conditions, now, generation));
    status.insert("conditions".into(), Value::Array(conditions));
    Value::Object(status)
}

/// The rules' own conditions: as rendered, with transition times kept from
/// `previous`; a rule that rendered nothing this time keeps what the object
/// shows.
fn rule_conditions(
    rules: &[Contributor<'_>],
    previous: &[Value],
    now: &str,
    generation: Option<i64>,
) -> Vec<Value> {
    let mut out = Vec::new();
    for r in rules {
        match r.part.filter(|p| p.fields.is_some()) {
            Some(p) => out.extend(p.conditions.iter().map(|c| {
                let cond = Cond {
                    status: c.status,
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                };
                condition(&c.type_, &cond, previous, now, generation)
            })),
            None => out.extend(
                r.conditions
                    .iter()
                    .filter_map(|t| previous.iter().find(|c| c["type"] == *t).cloned()),
            ),
        }
    }
    out
}

/// Every rule's status fields, and `observedGeneration` when every rule's
/// fields were computed (the oldest generation among them), else as it was.
fn fields(rules: &[Contributor<'_>], previous: &Value) -> Map<String, Value> {
    let mut status = Map::new();
    let mut observed: Option<i64> = None;
    let mut every_part_computed = !rules.is_empty();
    for r in rules {
        match r
            .part
            .and_then(|p| p.fields.as_ref().map(|f| (f, p.generation)))
        {
            Some((fields, g)) => {
                status.extend(fields.iter().map(|(k, v)| (k.clone(), v.clone())));
                observed = match (observed, g) {
                    (Some(o), Some(g)) => Some(o.min(g)),
                    (_, g) => g.or(observed),
                };
            }
            None => {
                every_part_computed = false;
                for name in r.fields {
                    if let Some(v) = previous.get(*name) {
                        status.insert((*name).to_string(), v.clone());
                    }
                }
            }
        }
    }
    let generation = match (every_part_computed, observed) {
        (true, Some(g)) => Some(json!(g)),
        _ => previous.get("observedGeneration").cloned(),
    };
    if let Some(g) = generation {
        status.insert("observedGeneration".into(), g);
    }
    status
}

/// Whether the object's status already is `desired`: every field kiln
/// composes is there with exactly that value (conditions by type, in any
/// order, beside those other controllers add), and nothing kiln wrote
/// before (`owned`, from kiln's managed fields: a field name, or
/// `conditions/<type>` for a condition) is missing from `desired` — that
/// must leave, which takes a write.
pub(crate) fn converged(live: &Value, desired: &Value, owned: &[String]) -> bool {
    let Some(d) = desired.as_object() else {
        return false;
    };
    let desired_type = |t: &str| {
        d.get("conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == t))
    };
    owned.iter().all(|k| match k.strip_prefix("conditions/") {
        Some(t) => desired_type(t),
        None => d.contains_key(k),
    }) && d.iter().all(|(k, v)| match live.get(k) {
        None => v.is_null(),
        Some(l) if k == "conditions" => conditions_hold(l, v),
        Some(l) => super::diff::equal(l, v),
    })
}

/// Every desired condition is among the live ones, matched by type.
fn conditions_hold(live: &Value, desired: &Value) -> bool {
    let Some(wanted) = desired.as_array() else {
        return super::diff::satisfied(live, desired);
    };
    let have = live.as_array().map(Vec::as_slice).unwrap_or_default();
    wanted.iter().all(|w| {
        have.iter()
            .find(|h| h["type"] == w["type"])
            .is_some_and(|h| super::diff::satisfied(h, w))
    })
}

#[cfg(test)]
mod tests;
