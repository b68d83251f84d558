//! How the engine runs: the settings `kiln run` and tests hand it. A leaf.

use std::time::Duration;

/// How the engine runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Server-side apply field manager.
    pub field_manager: String,
    /// Watch only these namespaces (empty: all).
    pub namespaces: Vec<String>,
    /// Workers per rule.
    pub concurrency: usize,
    /// How often a rule waiting for its kinds asks discovery again.
    pub kind_retry: Duration,
    /// How long in-flight reconciles may take to finish on shutdown.
    pub shutdown_grace: Duration,
    /// Cache of each child and watched kind only what rules set and read;
    /// on unless `KILN_CACHE_PROJECTION=0` (for debugging:
    /// whole objects in the cache).
    pub project_cache: bool,
    /// kiln's own namespace, where it keeps what tenants may not write
    /// (the first load of a rule with `takeExisting: false`: `since.rs`).
    pub state_namespace: String,
    /// The guarded client every hook is called through
    /// (`crate::egress`): loopback, link-local, cloud metadata and the API
    /// server are refused; only tests allow a server on loopback
    /// (`AddressPolicy::allowing_loopback_for_tests`).
    pub egress: crate::egress::Client,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            field_manager: "kiln".to_string(),
            namespaces: Vec::new(),
            concurrency: 4,
            kind_retry: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(30),
            project_cache: std::env::var_os("KILN_CACHE_PROJECTION").is_none_or(|v| v != "0"),
            state_namespace: own_namespace(),
            egress: crate::egress::Client::new(crate::egress::AddressPolicy::default()),
        }
    }
}

/// kiln's own namespace: its service account's, else `default`.
pub(super) fn own_namespace() -> String {
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "default".to_string())
}
