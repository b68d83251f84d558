//! What both kube-rs contenders share (`main.rs`, the WebApp controller;
//! `rules.rs`, the rules axis's): conditions, backoff, the managed-by label.

use std::time::Duration;

use clap::Parser;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// First retry delay after a failed reconcile; doubles per failure up to `MAX_BACKOFF`.
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Longest retry delay after failed reconciles.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Label key every child carries, naming the controller that manages it.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// A status condition (the subset of `metav1.Condition` this controller sets).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    reason: String,
    last_transition_time: String,
}

/// `conditions` with `(type, status, reason)` set, keeping `lastTransitionTime`
/// when the condition's status did not change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    ok: bool,
    reason: &str,
    now: &str,
) {
    let status = if ok { "True" } else { "False" };
    let condition = Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        last_transition_time: now.into(),
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) if c.status == status => c.reason = condition.reason,
        Some(c) => *c = condition,
        None => conditions.push(condition),
    }
}

/// Command-line flags, the same for every contender.
#[derive(Parser, Debug)]
pub struct Contract {
    /// Watch and write only in this namespace.
    #[arg(long)]
    pub namespace: String,
    /// Reconcile at most this many WebApps at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: u16,
    /// After a successful reconcile with everything ready, reconcile again after this many seconds.
    #[arg(long, default_value_t = 90)]
    pub resync_seconds: u64,
    /// Server-side apply field manager.
    #[arg(long, default_value = "kube-rs-bench")]
    pub field_manager: String,
}

/// Logs at `warn` unless `RUST_LOG` says otherwise.
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
}
