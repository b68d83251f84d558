//! Each engine start (at process start, after the leader Lease is won back,
//! on a standby taking over) begins a round: the CRD of every current rule
//! that defines an API is vetted and installed again before that rule runs
//! on the new engine, rule by rule. A rule whose CRD is refused (not kiln's,
//! or a change that would break stored objects) is refused as a reload
//! refuses it (diagnostics, `RuleRefused` Events, `kiln_rule_edit_refused`)
//! and taken out of the current rules; the others run. A CRD the API server
//! could not answer for is tried again, its rule waiting meanwhile.

use std::time::Duration;

use tokio::sync::watch;

use super::Loader;
use crate::api::install;
use crate::reload::status::Outcome;
use crate::rules::Diagnostic;

/// The longest wait before CRDs the API server could not answer for are
/// tried again.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// Resolves when the next round begins (never without rounds).
pub(super) async fn next(rounds: Option<&mut watch::Receiver<u64>>) {
    let Some(rounds) = rounds else {
        return std::future::pending().await;
    };
    if rounds.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

impl Loader {
    /// Installs the CRD of every current rule that defines an API and has
    /// not been installed in the latest round; refuses, rule by rule, those
    /// whose CRD is refused.
    pub(super) async fn install_round(&mut self) {
        let Some(checker) = &self.checker else {
            return;
        };
        let round = self.rules.round();
        let mut refused = Vec::new();
        let mut unanswered = false;
        for rule in self.rules.current().uninstalled(round) {
            let Some(api) = rule.api.as_deref() else {
                continue;
            };
            match checker.installer().install(api).await {
                Ok(()) => self.rules.installed(&rule, round),
                Err(error) if error.transient() => {
                    tracing::warn!(rule = %rule.name, %error, "the rule's CRD could not be installed yet: the rule waits, and it is tried again");
                    unanswered = true;
                }
                Err(error) => refused.push(install::diagnostic(&rule, &error)),
            }
        }
        self.install_retry = unanswered.then(|| {
            self.install_retry
                .map_or(Duration::from_secs(1), |d| (d * 2).min(MAX_RETRY))
        });
        if !refused.is_empty() {
            self.refuse_running(&refused).await;
        }
    }

    /// Refuses the current rules the diagnostics are about: they stop, are
    /// no longer accepted (so the next version takes each as a new rule,
    /// refused alone), and are refused as a reload refuses a rule.
    async fn refuse_running(&mut self, diagnostics: &[Diagnostic]) {
        let names: Vec<String> = diagnostics.iter().filter_map(|d| d.rule.clone()).collect();
        self.rules.without(&names);
        self.accepted.rules.retain(|e| !names.contains(&e.name));
        if let Some(status) = &mut self.status {
            status.stopped(&names);
        }
        self.refuse(diagnostics).await;
        self.report(Outcome::Refused(diagnostics)).await;
    }
}
