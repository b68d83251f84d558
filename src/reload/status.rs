//! The status of `Rule` resources: after each load, each Rule says whether
//! its current generation runs (`Ready`), why not (`Refused` with the
//! diagnostics, or waiting for the cluster), and which generation runs
//! (`observedGeneration`). A status already as computed is not written.

use std::collections::BTreeMap;

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::precheck::Finding;
use super::resources::{Offered, Seen, file_of, rule_resource};
use crate::rules::Diagnostic;

/// What became of the last version of the rules.
#[derive(Debug, Clone, Copy)]
pub enum Outcome<'a> {
    /// It runs.
    Running,
    /// It is invalid: the last good set keeps running.
    Refused(&'a [Diagnostic]),
    /// It is valid but waits for the cluster.
    Waiting(&'a [Finding]),
}

/// Writes the status of every Rule after each load.
pub struct StatusWriter {
    api: Api<DynamicObject>,
    offered: Offered,
    /// The generation of each rule that runs.
    running: BTreeMap<String, i64>,
    /// The status last written, by rule.
    written: BTreeMap<String, Value>,
}

impl StatusWriter {
    /// For the Rules a [`RuleResources`](super::resources::RuleResources) hands out.
    pub fn new(client: Client, offered: Offered) -> Self {
        Self {
            api: Api::all_with(client, &rule_resource()),
            offered,
            running: BTreeMap::new(),
            written: BTreeMap::new(),
        }
    }

    /// Writes each Rule's status after `outcome` (0 writes when none changed).
    pub async fn after(&mut self, outcome: Outcome<'_>) {
        let offered = self
            .offered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if matches!(outcome, Outcome::Running) {
            self.running = offered
                .iter()
                .map(|(n, s)| (n.clone(), s.generation))
                .collect();
        }
        for (name, seen) in &offered {
            let status = status_of(name, seen, self.running.get(name).copied(), outcome);
            if status == seen.status || self.written.get(name) == Some(&status) {
                continue;
            }
            let mut patch = status.clone();
            if patch.get("observedGeneration").is_none() {
                patch["observedGeneration"] = Value::Null;
            }
            let body = json!({"status": patch});
            match self
                .api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
                .await
            {
                Ok(_) => {
                    self.written.insert(name.clone(), status);
                }
                Err(error) => {
                    tracing::warn!(rule = %name, %error, "could not write the Rule's status")
                }
            }
        }
        self.written.retain(|name, _| offered.contains_key(name));
    }
}

/// The status of the Rule `name`, read as `seen`, of which generation
/// `running` runs, after `outcome`.
pub fn status_of(name: &str, seen: &Seen, running: Option<i64>, outcome: Outcome<'_>) -> Value {
    let current = running == Some(seen.generation);
    let (mine, others): (Vec<String>, Vec<String>) = match outcome {
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
    };
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
}
