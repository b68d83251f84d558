//! The rule set loader: every version a source hands out is validated (the
//! whole set; if anything is invalid nothing changes, every diagnostic is
//! logged, counted and told), its new and changed rules are checked against
//! the cluster (kinds, status schema, permissions; a set the cluster does
//! not let run waits, told and checked again, while the last good set keeps
//! running), their CRDs are applied last, and, once good, it becomes the
//! current rule set. Each engine start installs the current rules' CRDs
//! again, rule by rule ([`round`]).

mod round;

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

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
    /// The engine starts to install the CRDs for, when checking.
    rounds: Option<watch::Receiver<u64>>,
    /// How soon CRDs the API server could not answer for are tried again.
    install_retry: Option<Duration>,
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
            rounds: None,
            install_retry: None,
        })
    }

    /// Checks every new or changed rule with `checker` before it replaces
    /// the running one, and installs the CRDs of the current rules at each
    /// engine start: a rule defining an API runs once its CRD is installed.
    #[must_use]
    pub fn checking(mut self, checker: Checker) -> Self {
        self.checker = Some(checker);
        self.rules.gate();
        self.rounds = Some(self.rules.rounds());
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
        let mut rounds = self.rounds.take();
        loop {
            let waiting = self.pending.is_some();
            let reporting = self.status.is_some();
            let retry = self.install_retry;
            tokio::select! {
                () = &mut shutdown => return,
                () = round::next(rounds.as_mut()) => self.settle().await,
                () = tokio::time::sleep(retry.unwrap_or_default()), if retry.is_some() => self.settle().await,
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

    /// A valid set: current once the cluster lets its new and changed rules
    /// run. Every check that can hold it back runs before its CRDs are
    /// applied, the last step: a set held back has written nothing.
    async fn offer(&mut self, set: RuleSet) {
        let running = self.rules.get();
        let judged = match &self.checker {
            Some(checker) => judge(checker, &running, &set).await,
            None => Judged::Runs(Vec::new()),
        };
        let findings = match judged {
            Judged::Runs(findings) => findings,
            Judged::Waits(findings) => return self.wait_for(set, findings).await,
            Judged::Uninstalled(refusal) if refusal.transient => {
                // The API server could not answer: checked again.
                return self.wait_for(set, uninstalled(&refusal)).await;
            }
            Judged::Uninstalled(refusal) => {
                // A CRD not kiln's, or a change that would break stored
                // objects: as invalid as a broken rule.
                self.refuse(&refusal.diagnostics).await;
                return self.report(Outcome::Refused(&refusal.diagnostics)).await;
            }
        };
        self.pending = None;
        self.metrics.rules_pending.set(0);
        self.mark_refused(BTreeSet::new());
        self.accept(set, &running);
        self.report(Outcome::Running).await;
        for waits in &findings {
            tracing::warn!("{waits}");
            self.teller
                .warn("RuleWaitsForKinds", &waits.to_string())
                .await;
        }
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

    /// Makes `set` current; the CRDs of its rules new or changed from
    /// `running` were just installed.
    fn accept(&self, set: RuleSet, running: &RuleSet) {
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
        let installed: Vec<String> = set
            .rules
            .iter()
            .filter(|r| r.api.is_some())
            .filter(|r| {
                running
                    .get(&r.name)
                    .is_none_or(|o| o.fingerprint != r.fingerprint)
            })
            .map(|r| r.name.clone())
            .collect();
        let round = self.rules.round();
        self.rules.set(set, &installed, round);
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

/// What the cluster says of a new rule set.
enum Judged {
    /// Its new and changed rules may run (some waiting for their kinds),
    /// and their CRDs are applied.
    Runs(Vec<Finding>),
    /// It waits for the cluster; nothing was written.
    Waits(Vec<Finding>),
    /// Its CRDs may not (or could not) be written.
    Uninstalled(crate::api::install::Refusal),
}

/// Asks the cluster about `set`: its CRDs vetted, then its kinds,
/// status schemas and permissions checked; only then are its CRDs applied.
async fn judge(checker: &Checker, running: &RuleSet, set: &RuleSet) -> Judged {
    if let Err(refusal) = checker.vet(running, set).await {
        return Judged::Uninstalled(refusal);
    }
    let findings = checker.check(running, set).await;
    if findings.iter().any(Finding::blocks) {
        return Judged::Waits(findings);
    }
    match checker.install(running, set).await {
        Ok(()) => Judged::Runs(findings),
        Err(refusal) => Judged::Uninstalled(refusal),
    }
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
