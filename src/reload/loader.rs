//! The rule set loader: every version a source hands out is validated (the
//! whole set; if anything is invalid nothing changes, every diagnostic is
//! logged, counted and told), its new and changed rules are checked against
//! the cluster (kinds, status schema, permissions; a set the cluster does
//! not let run waits, told and checked again, while the last good set keeps
//! running) and, once good, it becomes the current rule set.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::current::CurrentRules;
use super::precheck::{Checker, Finding};
use super::source::{RuleSource, Version};
use super::status::{Outcome, StatusWriter};
use super::tell::Teller;
use super::{ReloadOptions, empty_set};
use crate::metrics::Metrics;
use crate::rules::{self, Diagnostic, RuleSet};

/// Why a version of the rules was not loaded.
#[derive(Debug)]
pub enum Refusal {
    /// Some rule is invalid: every problem.
    Invalid(Vec<Diagnostic>),
    /// The source holds no rules (and empty sets are not allowed).
    Empty,
}

impl Refusal {
    /// The problems, an empty set being one.
    pub fn diagnostics(&self) -> Vec<Diagnostic> {
        match self {
            Self::Invalid(d) => d.clone(),
            Self::Empty => vec![empty_set()],
        }
    }
}

/// Validates a version of the rules.
pub fn load(version: Version, allow_empty: bool) -> Result<RuleSet, Refusal> {
    match rules::load_sources_with(version.sources, version.read_errors) {
        Ok(set) if set.rules.is_empty() && !allow_empty => Err(Refusal::Empty),
        Ok(set) => Ok(set),
        Err(diagnostics) => Err(Refusal::Invalid(diagnostics)),
    }
}

/// Validates a version of the rules for this process: also refused, a rule
/// whose API needs the conversion webhook when the process serves none.
fn load_for(version: Version, options: &ReloadOptions) -> Result<RuleSet, Refusal> {
    let set = load(version, options.allow_empty)?;
    if options.serves_conversion {
        return Ok(set);
    }
    let refused = crate::api::served::refused_without_webhook(&set);
    if refused.is_empty() {
        Ok(set)
    } else {
        Err(Refusal::Invalid(refused))
    }
}

/// Follows a rule source into the current rule set.
pub struct Loader {
    rules: CurrentRules,
    options: ReloadOptions,
    metrics: Arc<Metrics>,
    teller: Teller,
    checker: Option<Checker>,
    last_seen: u64,
    /// A valid set the cluster does not let run yet, and what it said.
    pending: Option<(RuleSet, Vec<Finding>)>,
    /// Writes the status of Rule resources after each load, when they are the source.
    status: Option<StatusWriter>,
    /// The rules whose latest version is refused (`kiln_rule_edit_refused`).
    edit_refused: BTreeSet<String>,
}

impl Loader {
    /// The first load: it must be valid (there is no last good set to keep).
    pub fn first(
        version: Version,
        options: ReloadOptions,
        metrics: Arc<Metrics>,
        teller: Teller,
    ) -> Result<Self, Refusal> {
        let last_seen = fingerprint(&version);
        let set = load_for(version, &options)?;
        metrics.rules_loaded.set(set.rules.len() as i64);
        metrics.last_good_load.set(now_unix() as f64);
        Ok(Self {
            rules: CurrentRules::new(set),
            options,
            metrics,
            teller,
            checker: None,
            last_seen,
            pending: None,
            status: None,
            edit_refused: BTreeSet::new(),
        })
    }

    /// Checks every new or changed rule with `checker` before it replaces
    /// the running one.
    #[must_use]
    pub fn checking(mut self, checker: Checker) -> Self {
        self.checker = Some(checker);
        self
    }

    /// Writes the status of the Rule resources after each load.
    #[must_use]
    pub fn reporting(mut self, status: StatusWriter) -> Self {
        self.status = Some(status);
        self
    }

    async fn report(&mut self, outcome: Outcome<'_>) {
        if let Some(status) = &mut self.status {
            status.after(outcome).await;
        }
    }

    /// The current rule set this loader keeps.
    pub fn rules(&self) -> CurrentRules {
        self.rules.clone()
    }

    /// Follows `source` until `shutdown` resolves or the source ends.
    pub async fn run(
        mut self,
        mut source: Box<dyn RuleSource>,
        shutdown: impl Future<Output = ()>,
    ) {
        futures::pin_mut!(shutdown);
        // The first load ran.
        self.report(Outcome::Running).await;
        let mut census = tokio::time::interval(super::status::REFRESH);
        loop {
            let waiting = self.pending.is_some();
            let reporting = self.status.is_some();
            tokio::select! {
                () = &mut shutdown => return,
                _ = census.tick(), if reporting => {
                    if let Some(status) = &mut self.status {
                        status.refresh().await;
                    }
                }
                version = source.next() => match version {
                    Some(version) => self.consider(version).await,
                    None => return,
                },
                () = tokio::time::sleep(self.options.recheck), if waiting => self.recheck().await,
            }
        }
    }

    /// Loads a new version of the rules, unless it is the one already seen.
    pub async fn consider(&mut self, version: Version) {
        let seen = fingerprint(&version);
        if seen == self.last_seen {
            return;
        }
        self.last_seen = seen;
        // A newer version supersedes one waiting for the cluster.
        self.pending = None;
        self.metrics.rules_pending.set(0);
        match load_for(version, &self.options) {
            Ok(set) => self.offer(set).await,
            Err(refusal) => {
                let diagnostics = refusal.diagnostics();
                self.refuse(&diagnostics).await;
                self.report(Outcome::Refused(&diagnostics)).await;
            }
        }
    }

    /// Sets `kiln_rule_edit_refused` for the rules `now` (and only them).
    fn mark_refused(&mut self, now: BTreeSet<String>) {
        let gauge = |rule: &str| {
            self.metrics
                .rule_edit_refused
                .get_or_create(&crate::metrics::label("rule", rule))
                .clone()
        };
        for gone in self.edit_refused.difference(&now) {
            gauge(gone).set(0);
        }
        for rule in &now {
            gauge(rule).set(1);
        }
        self.edit_refused = now;
    }

    /// Checks the set waiting for the cluster again.
    pub async fn recheck(&mut self) {
        if let Some((set, _)) = self.pending.clone() {
            self.offer(set).await;
        }
    }

    /// Whether a valid set waits for the cluster.
    pub fn waiting(&self) -> bool {
        self.pending.is_some()
    }

    /// A valid set: current once the cluster lets its new and changed rules run.
    async fn offer(&mut self, set: RuleSet) {
        let findings = match &self.checker {
            Some(checker) => {
                let running = self.rules.get();
                if let Err(refusal) = checker.install(&running, &set).await {
                    if !refusal.transient {
                        // A CRD change that would break stored objects: as
                        // invalid as a broken rule.
                        self.refuse(&refusal.diagnostics).await;
                        self.report(Outcome::Refused(&refusal.diagnostics)).await;
                        return;
                    }
                    // The API server could not answer: checked again.
                    self.wait_for(set, uninstalled(&refusal)).await;
                    return;
                }
                checker.check(&running, &set).await
            }
            None => Vec::new(),
        };
        if !findings.iter().any(Finding::blocks) {
            self.pending = None;
            self.metrics.rules_pending.set(0);
            self.mark_refused(BTreeSet::new());
            self.accept(set);
            self.report(Outcome::Running).await;
            for waits in &findings {
                tracing::warn!("{waits}");
                self.teller
                    .warn("RuleWaitsForKinds", &waits.to_string())
                    .await;
            }
            return;
        }
        self.wait_for(set, findings).await;
    }

    /// Keeps `set` waiting for the cluster, saying why once per distinct answer.
    async fn wait_for(&mut self, set: RuleSet, findings: Vec<Finding>) {
        let told = self.pending.as_ref().is_some_and(|(_, f)| *f == findings);
        self.metrics.rules_pending.set(1);
        let waiting = findings
            .iter()
            .filter(|f| f.blocks())
            .map(|f| f.rule().to_string());
        self.mark_refused(waiting.collect());
        if !told {
            self.hold_back(&findings).await;
            self.report(Outcome::Waiting(&findings)).await;
        }
        self.pending = Some((set, findings));
    }

    /// Says why a valid set does not run yet (once per distinct answer).
    async fn hold_back(&self, findings: &[Finding]) {
        let m = &self.metrics;
        m.reload_total
            .get_or_create(&crate::metrics::label("result", "refused"))
            .inc();
        let blocking: Vec<String> = findings
            .iter()
            .filter(|f| f.blocks())
            .map(ToString::to_string)
            .collect();
        for why in &blocking {
            tracing::error!("{why}");
        }
        tracing::error!(
            problems = blocking.len(),
            kiln_rules_reload_total_refused = m.reloads("refused"),
            "the new rules cannot run in this cluster; the last good rules keep running, the new ones are checked again every {:?}",
            self.options.recheck
        );
        let note = format!(
            "{} problem(s); the last good rules keep running and the new ones are checked again every {}s. {}",
            blocking.len(),
            self.options.recheck.as_secs(),
            blocking.join("; ")
        );
        self.teller.warn("RulesRefused", &note).await;
    }

    fn accept(&self, set: RuleSet) {
        let m = &self.metrics;
        m.reload_total
            .get_or_create(&crate::metrics::label("result", "success"))
            .inc();
        m.rules_loaded.set(set.rules.len() as i64);
        m.last_good_load.set(now_unix() as f64);
        let names: Vec<&str> = set.rules.iter().map(|r| r.name.as_str()).collect();
        tracing::info!(
            rules = ?names, kiln_rules_loaded = set.rules.len(),
            kiln_rules_reload_total_success = m.reloads("success"), "rules reloaded"
        );
        self.rules.set(set);
    }

    async fn refuse(&mut self, diagnostics: &[Diagnostic]) {
        let per_rule = by_rule(diagnostics);
        self.mark_refused(per_rule.keys().cloned().collect());
        // One Event per refused rule, so `kubectl describe` names each.
        for (rule, problems) in per_rule.iter().take(MAX_RULE_EVENTS) {
            let note = format!(
                "rule {rule} is refused; its last good version, if any, keeps running: {}",
                problems.join("; ")
            );
            self.teller.warn("RuleRefused", &note).await;
        }
        let m = &self.metrics;
        m.reload_total
            .get_or_create(&crate::metrics::label("result", "error"))
            .inc();
        for d in diagnostics {
            tracing::error!(location = %d.location(), "{}", d.message);
        }
        tracing::error!(
            problems = diagnostics.len(),
            kiln_rules_reload_total_error = m.reloads("error"),
            "the new rules are invalid; the last good rules keep running"
        );
        let summary: Vec<String> = diagnostics
            .iter()
            .take(5)
            .map(|d| format!("{}: {}", d.location(), d.message))
            .collect();
        let note = format!(
            "{} problem(s); the last good rules keep running. {}",
            diagnostics.len(),
            summary.join("; ")
        );
        self.teller.warn("InvalidRules", &note).await;
    }
}

/// At most this many per-rule Events for one refused version.
const MAX_RULE_EVENTS: usize = 20;

/// Each refused rule's problems, by rule name (by file when the rule has
/// no name yet).
fn by_rule(diagnostics: &[Diagnostic]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in diagnostics {
        let rule = d
            .rule
            .clone()
            .unwrap_or_else(|| d.file.display().to_string());
        let problem = match d.path.as_str() {
            "" => format!("{}: {}", d.location(), d.message),
            path => format!("{}: {path}: {}", d.location(), d.message),
        };
        out.entry(rule).or_default().push(problem);
    }
    out
}

/// A transient failure to install the CRDs of a set, as what blocks it.
fn uninstalled(refusal: &crate::api::install::Refusal) -> Vec<Finding> {
    refusal
        .diagnostics
        .iter()
        .map(|d| Finding::Blocks {
            rule: d.rule.clone().unwrap_or_default(),
            why: d.message.clone(),
        })
        .collect()
}

/// What identifies a version's content.
pub(super) fn fingerprint(version: &Version) -> u64 {
    let mut h = DefaultHasher::new();
    for s in &version.sources {
        s.file.hash(&mut h);
        s.text.hash(&mut h);
    }
    for d in &version.read_errors {
        d.to_string().hash(&mut h);
    }
    h.finish()
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
