//! The status of `Rule` resources: after each load, each Rule says whether
//! its current generation runs (`Ready`), why not (`Refused` with the
//! diagnostics, or waiting for the cluster), and which generation runs
//! (`observedGeneration`), with `lastTransitionTime` on each condition, and
//! how many primaries it selects and children it manages. A status already
//! as computed is not written; each change of `Ready` is an Event on the
//! Rule.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::census::Census;
use super::precheck::Finding;
use super::resources::{Offered, RuleObject, Seen, file_of};
use super::tell::Speaks;
use crate::gate::{self, Warrant};
use crate::rules::Diagnostic;

/// What became of the last version of the rules.
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    /// It runs.
    Running,
    /// These rules' new versions are refused: each keeps its last
    /// accepted version, if any; the others run.
    Refused(&'a [Diagnostic]),
    /// It is valid but waits for the cluster.
    Waiting(&'a [Finding]),
}

/// How often the counts of primaries and children are brought up to date.
pub const REFRESH: std::time::Duration = std::time::Duration::from_secs(10);

/// Writes the status of every Rule after each load, and its counts every
/// [`REFRESH`]; tells each change of `Ready` as an Event on the Rule.
pub struct StatusWriter {
    /// Decoded without the spec: one Rule too deep to decode is written too.
    api: Api<RuleObject>,
    offered: Offered,
    /// The generation of each rule that runs.
    running: BTreeMap<String, i64>,
    /// Each Rule's status after the last load, without counts.
    computed: BTreeMap<String, Value>,
    /// The status last written, by rule.
    written: BTreeMap<String, Value>,
    census: Option<Census>,
    events: Option<(Recorder, Speaks)>,
    /// Rules whose `Ready` changed while this replica did not speak: told
    /// once it does.
    untold: std::collections::BTreeSet<String>,
}

impl StatusWriter {
    /// For the Rules a [`RuleResources`](super::resources::RuleResources) hands out.
    pub fn new(client: Client, offered: Offered) -> Self {
        Self {
            api: Api::all(client),
            offered,
            running: BTreeMap::new(),
            computed: BTreeMap::new(),
            written: BTreeMap::new(),
            census: None,
            events: None,
            untold: std::collections::BTreeSet::new(),
        }
    }

    /// Counts each rule's primaries and children with `census`.
    #[must_use]
    pub fn counting(mut self, census: Census) -> Self {
        self.census = Some(census);
        self
    }

    /// Tells each change of a Rule's `Ready` as an Event on it, while `speaks`.
    #[must_use]
    pub fn telling(mut self, client: &Client, speaks: Speaks) -> Self {
        let reporter = Reporter {
            controller: "kiln".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        self.events = Some((Recorder::new(client.clone(), reporter), speaks));
        self
    }

    fn offered(&self) -> BTreeMap<String, Seen> {
        self.offered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The generation of each rule that runs (the accepted set, rule by rule).
    pub fn running(&mut self, generations: BTreeMap<String, i64>) {
        self.running = generations;
    }

    /// Writes each Rule's status after `outcome` (0 writes when none changed).
    pub async fn after(&mut self, outcome: Outcome<'_>) {
        let offered = self.offered();
        self.computed = offered
            .iter()
            .map(|(name, seen)| {
                let status = status_of(name, seen, self.running.get(name).copied(), outcome);
                (name.clone(), status)
            })
            .collect();
        self.refresh().await;
    }

    /// The rules named no longer run (refused after they were loaded: their
    /// CRD at an engine start).
    pub fn stopped(&mut self, names: &[String]) {
        for name in names {
            self.running.remove(name);
        }
    }

    /// Writes each Rule's status with its counts as they are now, where it
    /// changed.
    pub async fn refresh(&mut self) {
        let offered = self.offered();
        self.tell_untold(&offered).await;
        let counts = self.census.as_ref().and_then(|census| census());
        let now = now();
        for (name, seen) in &offered {
            let Some(computed) = self.computed.get(name) else {
                continue;
            };
            let mut status = with_transitions(computed, &seen.status, &now);
            if let Some(count) = counts.as_ref().and_then(|c| c.get(name)) {
                status["primaries"] = json!(count.primaries);
                status["children"] = json!(count.children);
            }
            if holds(&seen.status, &status) || self.written.get(name) == Some(&status) {
                continue;
            }
            if self.write(name, &status).await {
                self.tell(name, seen, &status).await;
                self.written.insert(name.clone(), status);
            }
        }
        self.written.retain(|name, _| offered.contains_key(name));
    }

    async fn write(&self, name: &str, status: &Value) -> bool {
        let mut patch = status.clone();
        if patch.get("observedGeneration").is_none() {
            patch["observedGeneration"] = Value::Null;
        }
        let body = json!({"status": patch});
        let pp = PatchParams::default();
        let patch = Patch::Merge(&body);
        match gate::patch_status(&self.api, name, &pp, &patch, Warrant::RuleStatus).await {
            Ok(_) => true,
            Err(error) => {
                tracing::warn!(rule = %name, %error, "could not write the Rule's status");
                false
            }
        }
    }

    /// An Event on the Rule when its `Ready` changed from what was read
    /// (remembered until this replica speaks).
    async fn tell(&mut self, name: &str, seen: &Seen, status: &Value) {
        let Some((_, speaks)) = &self.events else {
            return;
        };
        let ready = |s: &Value| ready_of(s).map(|c| (c["status"].clone(), c["reason"].clone()));
        if ready(&seen.status) == ready(status) {
            return;
        }
        if !speaks() {
            self.untold.insert(name.to_string());
            return;
        }
        self.untold.remove(name);
        self.publish(name, seen, status).await;
    }

    /// The Events on the Rules whose `Ready` changed while this replica
    /// did not speak, as their status stands now.
    async fn tell_untold(&mut self, offered: &BTreeMap<String, Seen>) {
        let speaking = self.events.as_ref().is_some_and(|(_, speaks)| speaks());
        if !speaking || self.untold.is_empty() {
            return;
        }
        for name in std::mem::take(&mut self.untold) {
            if let (Some(seen), Some(status)) = (offered.get(&name), self.written.get(&name)) {
                self.publish(&name, seen, status).await;
            }
        }
    }

    /// An Event on the Rule saying its `Ready` now.
    async fn publish(&self, name: &str, seen: &Seen, status: &Value) {
        let (Some((recorder, _)), Some(now)) = (&self.events, ready_of(status)) else {
            return;
        };
        let event = Event {
            type_: if now["status"] == "True" {
                EventType::Normal
            } else {
                EventType::Warning
            },
            reason: now["reason"].as_str().unwrap_or("Unknown").to_string(),
            note: now["message"]
                .as_str()
                .map(|m| m.chars().take(1000).collect()),
            action: "Load".into(),
            secondary: None,
        };
        let reference = ObjectReference {
            api_version: Some("kiln.dev/v1alpha1".into()),
            kind: Some("Rule".into()),
            name: Some(name.to_string()),
            uid: Some(seen.uid.clone()),
            ..ObjectReference::default()
        };
        if let Err(error) = gate::publish(recorder, &event, &reference).await {
            tracing::warn!(rule = %name, %error, "could not publish an Event on the Rule");
        }
    }
}

fn ready_of(status: &Value) -> Option<&Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

/// Whether `seen` already holds every field of `status`.
fn holds(seen: &Value, status: &Value) -> bool {
    status
        .as_object()
        .is_some_and(|fields| fields.iter().all(|(k, v)| seen.get(k) == Some(v)))
}

/// `computed`'s conditions with their `lastTransitionTime`: kept from
/// `seen` where the condition's status did not change, `now` where it did.
fn with_transitions(computed: &Value, seen: &Value, now: &str) -> Value {
    let mut status = computed.clone();
    if let Some(conditions) = status["conditions"].as_array_mut() {
        for c in conditions {
            let before = seen["conditions"]
                .as_array()
                .and_then(|old| old.iter().find(|o| o["type"] == c["type"]));
            let since = match before {
                Some(old) if old["status"] == c["status"] => old["lastTransitionTime"].clone(),
                _ => Value::Null,
            };
            c["lastTransitionTime"] = match since {
                Value::String(_) => since,
                _ => json!(now),
            };
        }
    }
    status
}

/// The time now, as Kubernetes writes it (RFC 3339, whole seconds).
fn now() -> String {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The status of the Rule `name`, read as `seen`, of which generation
/// `running` runs, after `outcome`.
pub fn status_of(name: &str, seen: &Seen, running: Option<i64>, outcome: Outcome<'_>) -> Value {
    let current = running == Some(seen.generation);
    let (mine, others) = problems(name, outcome);
    let keeps = match running {
        Some(g) => format!("generation {g} keeps running"),
        None => "no generation of it runs".to_string(),
    };
    let (ready, refused) = if !mine.is_empty() && matches!(outcome, Outcome::Refused(_)) {
        let why = mine.join("; ");
        (
            condition(
                "Ready",
                false,
                "Refused",
                &format!("generation {} is refused; {keeps}: {why}", seen.generation),
            ),
            condition("Refused", true, "Invalid", &why),
        )
    } else if current {
        (
            condition(
                "Ready",
                true,
                "Running",
                &format!("generation {} runs", seen.generation),
            ),
            condition("Refused", false, "Valid", ""),
        )
    } else if !mine.is_empty() {
        let why = mine.join("; ");
        (
            condition(
                "Ready",
                false,
                "Waiting",
                &format!(
                    "generation {} waits for the cluster; {keeps}: {why}",
                    seen.generation
                ),
            ),
            condition("Refused", false, "Valid", ""),
        )
    } else {
        let why = if others.is_empty() {
            "the rule set waits for the cluster".to_string()
        } else {
            format!("other rules are invalid: {}", others.join("; "))
        };
        (
            condition(
                "Ready",
                false,
                "SetRefused",
                &format!("generation {} waits; {keeps}; {why}", seen.generation),
            ),
            condition("Refused", false, "Valid", ""),
        )
    };
    let mut status = json!({"conditions": [ready, refused]});
    if let Some(g) = running {
        status["observedGeneration"] = json!(g);
    }
    status
}

/// What `outcome` holds against the Rule `name` (its own problems), and
/// against the other rules of the set, each described.
fn problems(name: &str, outcome: Outcome<'_>) -> (Vec<String>, Vec<String>) {
    match outcome {
        Outcome::Running => (Vec::new(), Vec::new()),
        Outcome::Refused(diagnostics) => {
            let file = file_of(name);
            let (mine, others): (Vec<&Diagnostic>, Vec<&Diagnostic>) = diagnostics
                .iter()
                .partition(|d| d.rule.as_deref() == Some(name) || d.file == file);
            (describe(&mine), describe(&others))
        }
        Outcome::Waiting(findings) => {
            let mine = findings
                .iter()
                .filter(|f| f.blocks() && f.rule() == name)
                .map(ToString::to_string)
                .collect();
            (mine, Vec::new())
        }
    }
}

fn describe(diagnostics: &[&Diagnostic]) -> Vec<String> {
    diagnostics
        .iter()
        .map(|d| match d.path.as_str() {
            "" => format!("{}: {}", d.location(), d.message),
            path => format!("{}: {path}: {}", d.location(), d.message),
        })
        .collect()
}

fn condition(kind: &str, status: bool, reason: &str, message: &str) -> Value {
    let message: String = message.chars().take(1000).collect();
    json!({
        "type": kind,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(generation: i64) -> Seen {
        Seen {
            uid: String::new(),
            generation,
            status: Value::Null,
            text: String::new(),
        }
    }

    fn refusal(rule: &str) -> Diagnostic {
        let mut d = Diagnostic::new(
            &file_of(rule),
            "",
            None,
            "spec.children[0]".into(),
            "unknown field".into(),
        );
        d.rule = Some(rule.into());
        d
    }

    #[test]
    fn a_refused_edit_names_the_generation_that_keeps_running() {
        let diags = [refusal("a")];
        let s = status_of("a", &seen(2), Some(1), Outcome::Refused(&diags));
        assert_eq!(s["observedGeneration"], 1);
        assert_eq!(s["conditions"][0]["reason"], "Refused");
        assert_eq!(s["conditions"][1]["status"], "True");
        let why = s["conditions"][1]["message"].as_str().unwrap();
        assert!(
            why.contains("rule/a") && why.contains("spec.children[0]"),
            "{why}"
        );
        // Another rule whose running generation is current stays Ready.
        let b = status_of("b", &seen(4), Some(4), Outcome::Refused(&diags));
        assert_eq!(b["conditions"][0]["status"], "True");
        // A new rule held back by another's refusal is not Ready, not refused.
        let c = status_of("c", &seen(1), None, Outcome::Refused(&diags));
        assert_eq!(c["conditions"][0]["reason"], "SetRefused");
        assert_eq!(c["conditions"][1]["status"], "False");
        assert!(c.get("observedGeneration").is_none());
    }

    #[test]
    fn a_running_rule_is_ready_at_its_generation() {
        let s = status_of("a", &seen(3), Some(3), Outcome::Running);
        assert_eq!(s["observedGeneration"], 3);
        assert_eq!(s["conditions"][0]["status"], "True");
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let seen = json!({"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Refused", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        ]});
        let now = "2026-02-02T00:00:00Z";
        let same = with_transitions(
            &status_of("a", &seen_at(3), Some(3), Outcome::Running),
            &seen,
            now,
        );
        assert_eq!(
            same["conditions"][0]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        let diags = [refusal("a")];
        let refused = status_of("a", &seen_at(4), Some(3), Outcome::Refused(&diags));
        let changed = with_transitions(&refused, &seen, now);
        assert_eq!(changed["conditions"][0]["lastTransitionTime"], now);
        assert_eq!(changed["conditions"][1]["lastTransitionTime"], now);
        // Fields kiln does not write (counts it cannot tell) are left alone.
        let mut read = same.clone();
        read["primaries"] = json!(5);
        assert!(holds(&read, &same));
        assert!(!holds(&same, &read));
    }

    fn seen_at(generation: i64) -> Seen {
        seen(generation)
    }
}
