//! `spec.hooks`: a sync and a finalize hook speaking Metacontroller's
//! CompositeController JSON, and the child kinds the hook may return. The
//! hook's answers are applied by kiln (`engine::decision::hooked`), under
//! the same ownership, placement, budget and status as rendered children.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::spec::{DeletionPolicy, DurationText};

/// Default time a hook has to answer (Metacontroller's).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest `timeout` a rule may set: a worker waits this long at most.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// Default bound on retrying a finalize hook, from the primary's deletion.
pub const DEFAULT_GIVE_UP_AFTER: Duration = Duration::from_secs(3600);
/// Longest `giveUpAfter` a rule may set.
pub const MAX_GIVE_UP_AFTER: Duration = Duration::from_secs(7 * 24 * 3600);
/// Largest answer kiln reads from a hook (the 900 KiB that fits an object).
pub const MAX_BODY: usize = 900 * 1024;
/// Most children one answer may hold.
pub const MAX_CHILDREN: usize = crate::render::MAX_FOR_EACH;

/// `spec.hooks` as written.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawHooks {
    /// Called on every reconcile with Metacontroller's sync request
    /// (`controller`, `parent`, `children`, `related`, `finalizing`); its
    /// answer (`status`, `children`, `resyncAfterSeconds`) is what kiln
    /// applies for the primary.
    #[serde(default)]
    pub sync: Option<RawEndpoint>,
    /// Called while a primary is being deleted (`finalizing: true`), until it
    /// answers `finalized: true`: kiln holds a finalizer on the primary
    /// until then, or until `giveUpAfter`.
    #[serde(default)]
    pub finalize: Option<RawFinalize>,
    /// The kinds the hook may return, each under an id of its own (the id
    /// kiln marks those children with). An answer holding any other kind
    /// is refused whole.
    #[serde(default)]
    pub children: Vec<RawHookChild>,
}

/// Where a hook is, as written.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawEndpoint {
    /// The hook's URL, literal (`http://` or `https://`): kiln POSTs the
    /// request there.
    pub url: String,
    /// How long kiln waits for the answer (default `10s`, at most `60s`).
    #[serde(default)]
    pub timeout: Option<DurationText>,
}

/// The finalize hook, as written.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawFinalize {
    /// The hook's URL, literal (`http://` or `https://`).
    pub url: String,
    /// How long kiln waits for one answer (default `10s`, at most `60s`).
    #[serde(default)]
    pub timeout: Option<DurationText>,
    /// How long after the primary's deletion kiln keeps calling (default
    /// `1h`, at most `168h`); then it gives up, says so in a Warning Event,
    /// and lets go of its finalizer.
    #[serde(default)]
    pub give_up_after: Option<DurationText>,
}

/// A kind the hook may return.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawHookChild {
    /// The id kiln marks these children with; unique among the rule's
    /// children.
    pub id: String,
    /// `group/version` of the kind.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// `Delete` (default): owned by the primary, pruned when the hook stops
    /// returning it. `Orphan`: left behind.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
}

/// A hook's address and time limit, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL, literal.
    pub url: String,
    /// How long one call may take.
    pub timeout: Duration,
}

/// The finalize hook, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finalize {
    /// Where it is.
    pub endpoint: Endpoint,
    /// How long after the deletion kiln keeps calling it.
    pub give_up_after: Duration,
}

/// `spec.hooks`, checked. Its children are among the rule's
/// [`Child`](super::Child)ren (`from_hook`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// The sync hook.
    pub sync: Option<Endpoint>,
    /// The finalize hook.
    pub finalize: Option<Finalize>,
}

/// Why a hook's URL is refused; `None` when it is a literal `http(s)` URL
/// with a host.
pub fn url_refusal(url: &str) -> Option<String> {
    if url.contains("{{") || url.contains("{%") {
        return Some(format!(
            "`{url}` is a template: a hook's URL is literal (the rule's author chooses where kiln sends requests, never a primary's author)"
        ));
    }
    crate::egress::Destination::parse(url)
        .err()
        .map(|e| format!("`{url}`: {e}"))
}

/// A duration within `(0, max]`, or why not.
pub fn bounded(value: Duration, max: Duration, field: &str) -> Result<Duration, String> {
    if value.is_zero() {
        return Err(format!("{field} must be longer than 0"));
    }
    if value > max {
        return Err(format!(
            "{field} is {value:?}: at most {max:?} (one primary's hook must not hold a worker longer)"
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_url_is_literal_http_with_a_host_and_no_credentials() {
        assert_eq!(url_refusal("http://127.0.0.1:8080/sync"), None);
        assert_eq!(url_refusal("https://hooks.example.com/sync"), None);
        let refused = [
            ("http://{{ self.spec.host }}/sync", "is a template"),
            ("ftp://example.com/x", "must start with"),
            ("/sync", "must start with"),
            ("http://user:pw@example.com/x", "must not hold a user"),
            ("http://exa mple.com", "is not a host name"),
            ("http://example.com/sync?x=1", "must not hold `?`"),
        ];
        for (url, why) in refused {
            let got = url_refusal(url).unwrap_or_default();
            assert!(got.contains(why), "{url}: {got}");
        }
    }

    #[test]
    fn hook_durations_are_bounded() {
        let s = Duration::from_secs;
        assert_eq!(bounded(s(10), MAX_TIMEOUT, "timeout"), Ok(s(10)));
        assert!(bounded(s(0), MAX_TIMEOUT, "timeout").is_err());
        assert!(bounded(s(61), MAX_TIMEOUT, "timeout").is_err());
    }
}
