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

use super::accepted::{self, Accepted};
use super::current::CurrentRules;
use super::precheck::{Checker, Finding};
use super::saved::{Saved, SavedError};
use super::source::{RuleSource, Version};
use super::status::{Outcome, StatusWriter};
use super::tell::{Speaks, Teller};
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

/// Follows a rule source into the current rule set.
pub struct Loader {
    rules: CurrentRules,
    /// What runs, rule by rule (saved in the cluster when `saved` is set).
    accepted: Accepted,
    options: ReloadOptions,
    metrics: Arc<Metrics>,
    teller: Teller,
    checker: Option<Checker>,
    last_seen: u64,
    /// A valid set the cluster does not let run yet, and what it said.
    pending: Option<Pending>,
    /// Writes the status of the Rule resources after each load, when they are the source.
    status: Option<StatusWriter>,
    /// The rules whose latest version is refused (`kiln_rule_edit_refused`).
    edit_refused: BTreeSet<String>,
    /// What the first load refused, told once the loader runs (`None`: told).
    first_refused: Option<Vec<Diagnostic>>,
    /// Where the accepted set is saved, and what is saved there.
    saving: Option<Saving>,
    /// What was refused while this replica did not speak (a standby, or
    /// the first load before the engine runs): told once it does.
    untold: Vec<Diagnostic>,
    /// The engine starts to install the CRDs for, when checking.
    rounds: Option<watch::Receiver<u64>>,
    /// How soon CRDs the API server could not answer for are tried again.
    install_retry: Option<Duration>,
}

/// A set waiting for the cluster: the rules, what they are, what was
/// refused on the way and what the cluster said.
#[derive(Clone)]
struct Pending {
    set: RuleSet,
    accepted: Accepted,
    refused: Vec<Diagnostic>,
    findings: Vec<Finding>,
}

/// The accepted set saved in the cluster by the replica that runs the engine.
struct Saving {
    saved: Saved,
    /// The rule source, as saved with the set.
    source: String,
    speaks: Speaks,
    /// The set last saved (or read back at start).
    last: Option<Accepted>,
    /// The saved set could not be read at start: read before anything is
    /// written over it.
    unread: bool,
    /// The last error told, so that it is told once.
    told: Option<String>,
}

/// How often the accepted set is saved when it changed (the replica that
/// accepted it may not have led then).
const SAVE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

impl Loader {
    /// The first load, with no accepted set before it: each valid rule
    /// runs; `Err` when none is valid (or the source holds none).
    pub fn first(
        version: Version,
        options: ReloadOptions,
        metrics: Arc<Metrics>,
        teller: Teller,
    ) -> Result<Self, Refusal> {
        let last_seen = fingerprint(&version);
        let composed = accepted::compose(&version, &Accepted::default(), &options)?;
        let mut loader = Self::on(composed.set, composed.accepted, options, metrics, teller);
        loader.last_seen = last_seen;
        loader.first_refused = Some(composed.refused);
        Ok(loader)
    }

    /// Starts on the accepted set saved in the cluster, each saved rule
    /// that still compiles (`Err` when none does); the source's version is
    /// then accepted over it ([`Loader::settle`]), as a reload is.
    pub fn resume(
        saved: Accepted,
        options: ReloadOptions,
        metrics: Arc<Metrics>,
        teller: Teller,
    ) -> Result<Self, Refusal> {
        let none = Accepted::default();
        let composed = accepted::compose(&saved.to_version(), &none, &options)?;
        for d in &composed.refused {
            tracing::warn!(location = %d.location(), "a saved rule no longer compiles: {}", d.message);
        }
        let mut loader = Self::on(composed.set, composed.accepted, options, metrics, teller);
        loader.first_refused = None;
        Ok(loader)
    }

    fn on(
        set: RuleSet,
        accepted: Accepted,
        options: ReloadOptions,
        metrics: Arc<Metrics>,
        teller: Teller,
    ) -> Self {
        metrics.rules_loaded.set(set.rules.len() as i64);
        metrics.last_good_load.set(now_unix() as f64);
        Self {
            rules: CurrentRules::new(set),
            accepted,
            options,
            metrics,
            teller,
            checker: None,
            last_seen: 0,
            pending: None,
            status: None,
            edit_refused: BTreeSet::new(),
            first_refused: Some(Vec::new()),
            saving: None,
            untold: Vec::new(),
            rounds: None,
            install_retry: None,
        }
    }

    /// Accepts the source's first version over the saved set (`None`: the
    /// source could not be read, `why`: the saved set keeps running).
    pub async fn settle(&mut self, version: Result<Version, String>) {
        match version {
            Ok(version) => self.consider(version).await,
            Err(why) => {
                let d = Diagnostic::new(
                    std::path::Path::new("<rules>"),
                    "",
                    None,
                    String::new(),
                    format!("{why}; the last accepted rules run"),
                );
                self.refuse(std::slice::from_ref(&d)).await;
            }
        }
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

    /// Saves each accepted set in `saved` (rules read from `source`),
    /// while `speaks`; `last` is what it held when read at start (`Err`: it
    /// could not be read, and nothing is written over a set saved there).
    #[must_use]
    pub fn saving(
        mut self,
        saved: Saved,
        source: String,
        speaks: Speaks,
        last: &Result<Option<Accepted>, SavedError>,
    ) -> Self {
        let unread = matches!(last, Err(SavedError::Api { .. }));
        self.saving = Some(Saving {
            saved,
            source,
            speaks,
            last: last.as_ref().ok().cloned().flatten(),
            unread,
            told: None,
        });
        self
    }

    async fn report(&mut self, outcome: Outcome<'_>) {
        if let Some(status) = &mut self.status {
            status.running(self.accepted.generations());
            status.after(outcome).await;
        }
    }

    /// The current rule set this loader keeps.
    pub fn rules(&self) -> CurrentRules {
        self.rules.clone()
    }

    /// What runs, rule by rule.
    pub fn accepted(&self) -> &Accepted {
        &self.accepted
    }

    /// Follows `source` until `shutdown` resolves or the source ends.
    pub async fn run(
        mut self,
        mut source: Box<dyn RuleSource>,
        shutdown: impl Future<Output = ()>,
    ) {
        futures::pin_mut!(shutdown);
        self.tell_first().await;
        let mut census = tokio::time::interval(super::status::REFRESH);
        let mut saves = tokio::time::interval(SAVE_EVERY);
        let mut rounds = self.rounds.take();
        loop {
            let waiting = self.pending.is_some();
            let reporting = self.status.is_some();
            let saving = self.saving.is_some();
            let retry = self.install_retry;
            tokio::select! {
                () = &mut shutdown => return,
                () = round::next(rounds.as_mut()) => self.install_round().await,
                () = tokio::time::sleep(retry.unwrap_or_default()), if retry.is_some() => self.install_round().await,
                _ = census.tick(), if reporting => {
                    if let Some(status) = &mut self.status {
                        status.refresh().await;
                    }
                }
                _ = saves.tick() => {
                    self.tell_untold().await;
                    if saving {
                        self.save().await;
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

    /// Tells what the first load refused, if not told yet.
    async fn tell_first(&mut self) {
        match self.first_refused.take() {
            None => {}
            Some(refused) if refused.is_empty() => self.report(Outcome::Running).await,
            Some(refused) => {
                self.refuse(&refused).await;
                self.mark_refused(by_rule(&refused).into_keys().collect());
                self.report(Outcome::Refused(&refused)).await;
            }
        }
    }

    /// Saves the accepted set when it changed since last saved, if this
    /// replica runs the engine; an error is told once and tried again.
    pub async fn save(&mut self) {
        let Some(saving) = &mut self.saving else {
            return;
        };
        if !(saving.speaks)() || saving.last.as_ref() == Some(&self.accepted) {
            return;
        }
        if saving.unread && !self.unread_is_kept().await {
            return;
        }
        let Some(saving) = &mut self.saving else {
            return;
        };
        match saving.saved.write(&saving.source, &self.accepted).await {
            Ok(()) => {
                tracing::info!(saved = %saving.saved.place(), rules = self.accepted.rules.len(), "saved the accepted rules");
                saving.last = Some(self.accepted.clone());
                saving.told = None;
            }
            Err(error) => {
                let why = error.to_string();
                if saving.told.as_ref() != Some(&why) {
                    tracing::error!(%error, "could not save the accepted rules; a restart with invalid rules would not find them");
                    self.teller.warn("AcceptedRulesNotSaved", &why).await;
                    saving.told = Some(why);
                }
            }
        }
    }

    /// Whether a save may go on, when the saved set could not be read at
    /// start: only once it is read and holds no other set for this source.
    /// One it holds was accepted before this process, which did not start
    /// from it (a rule refused now may have its last accepted version
    /// there): it is kept whole until a restart reads it, and told once.
    async fn unread_is_kept(&mut self) -> bool {
        let Some(saving) = &mut self.saving else {
            return false;
        };
        let why = match saving.saved.read(&saving.source).await {
            Ok(Some(set)) if set != self.accepted => format!(
                "the accepted rules saved in {} could not be read when kiln started, so it does not run them: they are kept as saved, not replaced by the rules it runs, until kiln restarts and reads them",
                saving.saved.place()
            ),
            Ok(_) | Err(SavedError::Undecodable { .. } | SavedError::NotKilns { .. }) => {
                saving.unread = false;
                return true;
            }
            Err(error) => error.to_string(),
        };
        if saving.told.as_ref() != Some(&why) {
            tracing::error!("{why}");
            self.teller.warn("AcceptedRulesNotSaved", &why).await;
            saving.told = Some(why);
        }
        false
    }

    /// Loads a new version of the rules, unless it is the one already seen:
    /// each rule whose new version is refused keeps its accepted version.
    pub async fn consider(&mut self, version: Version) {
        let seen = fingerprint(&version);
        if seen == self.last_seen {
            return;
        }
        self.last_seen = seen;
        // A newer version supersedes one waiting for the cluster.
        self.pending = None;
        self.metrics.rules_pending.set(0);
        self.tell_first().await;
        self.untold.clear();
        match accepted::compose(&version, &self.accepted, &self.options) {
            Ok(composed) => {
                if !composed.refused.is_empty() {
                    self.refuse(&composed.refused).await;
                }
                let (set, accepted, refused) = (composed.set, composed.accepted, composed.refused);
                self.offer(set, accepted, refused).await;
            }
            Err(refusal) => {
                let diagnostics = refusal.diagnostics();
                self.refuse(&diagnostics).await;
                self.mark_refused(by_rule(&diagnostics).into_keys().collect());
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
        if let Some(p) = self.pending.clone() {
            self.offer(p.set, p.accepted, p.refused).await;
        }
    }

    /// Whether a valid set waits for the cluster.
    pub fn waiting(&self) -> bool {
        self.pending.is_some()
    }

    /// A composed set (`refused`: what was refused composing it): current
    /// once the cluster lets its new and changed rules run. Every check
    /// that can hold it back runs before its CRDs are applied, the last
    /// step: a set held back has written nothing. A rule whose CRD is
    /// refused (not kiln's, or a change that would break stored objects)
    /// keeps its running version, alone.
    async fn offer(&mut self, set: RuleSet, accepted: Accepted, mut refused: Vec<Diagnostic>) {
        let Some(checker) = self.checker.clone() else {
            return self.accept(set, accepted, &refused, &[]).await;
        };
        let running = self.rules.get();
        let (mut set, mut accepted) = (set, accepted);
        // Each round drops or replaces at least one rule, so it ends.
        for _ in 0..=set.rules.len() {
            let findings = match judge(&checker, &running, &set).await {
                Judged::Runs(findings) => {
                    return self.accept(set, accepted, &refused, &findings).await;
                }
                Judged::Waits(findings) => findings,
                // The API server could not answer: checked again.
                Judged::Uninstalled(refusal) if refusal.transient => uninstalled(&refusal),
                Judged::Uninstalled(refusal) => {
                    // As invalid as a broken rule, for that rule only.
                    self.refuse(&refusal.diagnostics).await;
                    let blamed: BTreeSet<String> =
                        by_rule(&refusal.diagnostics).into_keys().collect();
                    refused.extend(refusal.diagnostics);
                    let narrowed = accepted.replacing(&blamed, &self.accepted);
                    match narrowed.compile() {
                        Ok(fewer) if narrowed != accepted => (set, accepted) = (fewer, narrowed),
                        _ => break,
                    }
                    continue;
                }
            };
            let pending = Pending {
                set,
                accepted,
                refused,
                findings,
            };
            return self.wait_for(pending).await;
        }
        // Nothing of it can run: the running rules stay as they are.
        self.mark_refused(by_rule(&refused).into_keys().collect());
        self.report(Outcome::Refused(&refused)).await;
    }

    /// Keeps a set waiting for the cluster, saying why once per distinct answer.
    async fn wait_for(&mut self, pending: Pending) {
        let told = self
            .pending
            .as_ref()
            .is_some_and(|p| p.findings == pending.findings);
        self.metrics.rules_pending.set(1);
        let mut refused: BTreeSet<String> = by_rule(&pending.refused).into_keys().collect();
        let waiting = pending.findings.iter().filter(|f| f.blocks());
        refused.extend(waiting.map(|f| f.rule().to_string()));
        self.mark_refused(refused);
        if !told {
            self.hold_back(&pending.findings).await;
            self.report(Outcome::Waiting(&pending.findings)).await;
        }
        self.pending = Some(pending);
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

    /// `set` runs: it becomes current, and is saved when this replica runs
    /// the engine. `refused`: the rules that keep their running version.
    async fn accept(
        &mut self,
        set: RuleSet,
        accepted: Accepted,
        refused: &[Diagnostic],
        findings: &[Finding],
    ) {
        self.pending = None;
        self.metrics.rules_pending.set(0);
        self.mark_refused(by_rule(refused).into_keys().collect());
        // Every new version refused: nothing changes, nothing is counted.
        let same = super::plan(&self.rules.get(), &set).is_empty() && accepted == self.accepted;
        if !same {
            self.replace(set, accepted);
        }
        match refused {
            [] => self.report(Outcome::Running).await,
            _ => self.report(Outcome::Refused(refused)).await,
        }
        for waits in findings {
            tracing::warn!("{waits}");
            self.teller
                .warn("RuleWaitsForKinds", &waits.to_string())
                .await;
        }
        self.save().await;
    }

    /// `set` becomes current.
    fn replace(&mut self, set: RuleSet, accepted: Accepted) {
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
        let running = self.rules.get();
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
        self.accepted = accepted;
    }

    async fn refuse(&mut self, diagnostics: &[Diagnostic]) {
        self.mark_refused(by_rule(diagnostics).into_keys().collect());
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
            "rules refused; each keeps its last accepted version, if any, and the other rules take their new one"
        );
        if self.teller.speaking() {
            self.tell(diagnostics).await;
        } else {
            self.untold.extend_from_slice(diagnostics);
        }
    }

    /// Tells what was refused while this replica did not speak, once it does.
    async fn tell_untold(&mut self) {
        if !self.untold.is_empty() && self.teller.speaking() {
            let untold = std::mem::take(&mut self.untold);
            self.tell(&untold).await;
        }
    }

    /// The Warning Events of a refusal: one per refused rule, so `kubectl
    /// describe` names each, and one for the whole.
    async fn tell(&self, diagnostics: &[Diagnostic]) {
        for (rule, problems) in by_rule(diagnostics).iter().take(MAX_RULE_EVENTS) {
            let note = format!(
                "rule {rule} is refused; its last accepted version, if any, keeps running: {}",
                problems.join("; ")
            );
            self.teller.warn("RuleRefused", &note).await;
        }
        let summary: Vec<String> = diagnostics
            .iter()
            .take(5)
            .map(|d| format!("{}: {}", d.location(), d.message))
            .collect();
        let note = format!(
            "{} problem(s); each refused rule keeps its last accepted version, if any. {}",
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
    version.generations.hash(&mut h);
    h.finish()
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
