//! Hot reload: the rule set changes while kiln runs, safely.
//!
//! One [`RuleSource`] (files and directories, a mounted ConfigMap among
//! them, a ConfigMap read through the API, or `Rule` resources) feeds one
//! [`Loader`] per process, which accepts each version rule by rule
//! ([`accepted`]) and keeps what runs in the [`CurrentRules`] cell and, in
//! the cluster, in a ConfigMap of kiln's own ([`Saved`]). Every engine start
//! reads that cell and a [`Follower`] applies its changes to the running
//! engine, so the first load, reloads, a restart and an engine started
//! again after the leader Lease was won back all run the same rules. A
//! refused rule keeps its last accepted version (or does not run): every
//! diagnostic is logged and counted, and told as a Warning Event on the
//! rules ConfigMap when one is named.

pub mod accepted;
pub mod census;
pub mod current;
pub mod follow;
pub mod loader;
pub mod plan;
pub mod precheck;
pub mod release;
pub mod resources;
pub mod saved;
pub mod source;
pub mod status;
pub mod tell;
pub mod watch;

pub use accepted::Accepted;
pub use current::CurrentRules;
pub use follow::Follower;
pub use loader::{Loader, Refusal, load};
pub use plan::{Plan, plan};
pub use precheck::{Checker, Finding};
pub use resources::RuleResources;
pub use saved::Saved;
pub use source::{Files, RuleSource, RulesConfigMap, Version, configmap_sources};
pub use status::StatusWriter;
pub use tell::Teller;

use crate::rules::Diagnostic;

/// How reloads behave.
#[derive(Debug, Clone)]
pub struct ReloadOptions {
    /// How often a valid rule set the cluster does not let run yet (a
    /// permission missing, a status field its CRD lacks) is checked again.
    pub recheck: std::time::Duration,
    /// Delete the children of a removed rule (default: they stay).
    pub prune_on_rule_removal: bool,
    /// Accept a source with no rules (every rule stops). Default: refused like
    /// an invalid set, so a mistyped key or a vanished directory cannot stop
    /// every rule (and, with pruning, delete every child).
    pub allow_empty: bool,
    /// This process serves the CRD conversion webhook (`--conversion-addr`
    /// with its endpoint). Without it, a rule whose API has several versions
    /// is refused like an invalid one: the API server would convert its
    /// objects without the rule's templates, dropping fields.
    pub serves_conversion: bool,
}

impl Default for ReloadOptions {
    fn default() -> Self {
        Self {
            recheck: std::time::Duration::from_secs(10),
            prune_on_rule_removal: false,
            allow_empty: false,
            serves_conversion: false,
        }
    }
}

/// The problem with a source that holds no rules.
pub fn empty_set() -> Diagnostic {
    Diagnostic::new(
        std::path::Path::new("<rules>"),
        "",
        None,
        String::new(),
        "the rule source holds no rules (no `*.yaml` or `*.yml` file or ConfigMap key): an empty set is refused like an invalid one (start kiln with --allow-empty-rules to allow it)".into(),
    )
}
