//! `spec.hooks`: a sync and a finalize hook speaking Metacontroller's
//! CompositeController JSON, and the child kinds the hook may return. The
//! hook's answers are applied by kiln (`engine::decision::hooked`), under
//! the same ownership, placement, budget and status as rendered children.

use std::time::Duration;

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

    /// The diagnostics of a rule with `hooks` (indented under `spec`).
    fn refused(hooks: &str) -> String {
        let text = format!(
            "apiVersion: kiln.dev/v1alpha1\nkind: Rule\nmetadata: {{name: h}}\nspec:\n  for: {{apiVersion: example.com/v1, kind: HelloWorld}}\n  children:\n    - id: pods\n      template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: x}}}}\n{hooks}"
        );
        let source = crate::rules::load::Source {
            file: "rule.yaml".into(),
            text,
        };
        match crate::rules::load_sources(vec![source]) {
            Ok(_) => String::new(),
            Err(d) => d
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    #[test]
    fn a_rule_s_hooks_are_checked_when_it_loads() {
        let ok = "  hooks:\n    sync: {url: 'http://h.example/sync'}\n    children: [{id: made, apiVersion: v1, kind: Pod}]\n";
        assert_eq!(refused(ok), "");
        let cases = [
            ("  hooks: {}\n", "neither a `sync` nor a `finalize`"),
            (
                "  hooks:\n    sync: {url: 'http://{{ self.spec.h }}/x'}\n    children: [{id: a, apiVersion: v1, kind: Pod}]\n",
                "is a template",
            ),
            (
                "  hooks:\n    sync: {url: 'http://h/x'}\n",
                "needs the kinds it may return",
            ),
            (
                "  hooks:\n    sync: {url: 'http://h/x', timeout: 5m}\n    children: [{id: a, apiVersion: v1, kind: Pod}]\n",
                "at most 60s",
            ),
            (
                "  hooks:\n    finalize: {url: 'http://h/x', giveUpAfter: 0s}\n",
                "longer than 0",
            ),
            (
                "  hooks:\n    sync: {url: 'http://h/x'}\n    children: [{id: pods, apiVersion: v1, kind: Pod}]\n",
                "duplicate child id `pods`",
            ),
            (
                "  hooks:\n    sync: {url: 'http://h/x'}\n    children: [{id: a, apiVersion: v1, kind: Pod}, {id: b, apiVersion: v1, kind: Pod}]\n",
                "listed twice",
            ),
        ];
        for (hooks, why) in cases {
            let got = refused(hooks);
            assert!(got.contains(why), "{hooks}: {got}");
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
