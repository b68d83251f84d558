//! What kiln remembers of each source: per request (keyed by the request
//! as rendered, shared by every primary that makes it) the last good answer
//! and the last failure, and per source when the next request may go
//! (its rate limit, held longer by a server's `Retry-After`). A failure
//! never replaces a good answer: it is kept beside it, and the answer is
//! used only while fresh (or, when the rule opts in, while younger than
//! its `lastGood.maxAge`). Pure: every method takes the time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The longest a failed request is held before it is tried again.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Requests remembered per source; the least recently used go first
/// beyond it.
pub const MAX_ENTRIES: usize = 10_000;
/// Bytes of good answers remembered per source (as they came, JSON), the
/// least recently used going first beyond it: primaries asking many
/// different large answers cost their source's cache, never the process.
pub const MAX_BYTES: usize = 64 * 1024 * 1024;

/// A request's failure as remembered: never data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// What went wrong, for status (no credential, no body).
    pub message: String,
    /// Its bounded class (metrics).
    pub class: &'static str,
    /// Not tried again before.
    pub retry_at: Instant,
}

#[derive(Debug, Clone, Default)]
struct Entry {
    good: Option<(Value, Instant)>,
    /// The good answer's size as it came.
    bytes: usize,
    failure: Option<Failed>,
    failures: u32,
    used: Option<Instant>,
}

/// One source's requests.
#[derive(Debug, Default)]
pub struct SourceCache {
    entries: HashMap<String, Entry>,
    /// The sum of the entries' `bytes`.
    bytes: usize,
    next_allowed: Option<Instant>,
}

/// What the cache says of a request now.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// A good answer younger than the interval.
    Fresh {
        /// The answer.
        value: Value,
        /// Its age.
        age: Duration,
    },
    /// The last request failed and is not tried again yet.
    Failing {
        /// The failure.
        failed: Failed,
        /// The last good answer and its age, if any.
        good: Option<(Value, Duration)>,
    },
    /// Ask now.
    Ask,
    /// Ask, but not before this (the source's rate limit).
    Wait {
        /// When the source may be asked.
        until: Instant,
        /// The last good answer and its age, if any.
        good: Option<(Value, Duration)>,
    },
}

impl SourceCache {
    /// What to do about `key` at `now`, answers being good for `interval`.
    pub fn lookup(&mut self, key: &str, now: Instant, interval: Duration) -> Lookup {
        let entry = self.entries.get_mut(key);
        let good = entry
            .as_ref()
            .and_then(|e| e.good.as_ref())
            .map(|(v, at)| (v.clone(), now.saturating_duration_since(*at)));
        if let Some(e) = entry {
            e.used = Some(now);
            if let Some(failed) = e.failure.as_ref().filter(|f| now < f.retry_at) {
                return Lookup::Failing {
                    failed: failed.clone(),
                    good,
                };
            }
            if let Some((value, age)) = good.clone().filter(|(_, age)| *age < interval) {
                return Lookup::Fresh { value, age };
            }
        }
        match self.next_allowed {
            Some(until) if now < until => Lookup::Wait { until, good },
            _ => Lookup::Ask,
        }
    }

    /// Notes that a request goes now: the next may go `min_interval` later.
    pub fn asking(&mut self, now: Instant, min_interval: Duration) {
        let next = now + min_interval;
        self.next_allowed = Some(self.next_allowed.map_or(next, |n| n.max(next)));
    }

    /// Records a good answer to `key`, `bytes` long as it came.
    pub fn succeeded(&mut self, key: &str, value: Value, bytes: usize, now: Instant) {
        self.make_room(key, bytes);
        let entry = self.entries.entry(key.to_string()).or_default();
        self.bytes = self.bytes - entry.bytes + bytes;
        entry.bytes = bytes;
        entry.good = Some((value, now));
        entry.failure = None;
        entry.failures = 0;
        entry.used = Some(now);
    }

    /// Records a failure of `key`: held for a backoff that doubles with
    /// each failure in a row, or what the server asked (`retry_after`),
    /// which also holds the whole source. The good answer stays as it was.
    pub fn failed(
        &mut self,
        key: &str,
        message: String,
        class: &'static str,
        retry_after: Option<Duration>,
        now: Instant,
    ) -> Failed {
        self.make_room(key, 0);
        let entry = self.entries.entry(key.to_string()).or_default();
        entry.failures = entry.failures.saturating_add(1);
        entry.used = Some(now);
        let backoff =
            Duration::from_secs(1u64 << entry.failures.min(10).saturating_sub(1)).min(MAX_BACKOFF);
        let wait = retry_after.map_or(backoff, |r| r.max(backoff));
        if let Some(r) = retry_after {
            let until = now + r;
            self.next_allowed = Some(self.next_allowed.map_or(until, |n| n.max(until)));
        }
        let failed = Failed {
            message,
            class,
            retry_at: now + wait,
        };
        entry.failure = Some(failed.clone());
        failed
    }

    /// Forgets requests unused for longer than `keep`.
    pub fn sweep(&mut self, now: Instant, keep: Duration) {
        self.entries.retain(|_, e| {
            e.used
                .is_some_and(|u| now.saturating_duration_since(u) <= keep)
        });
        self.bytes = self.entries.values().map(|e| e.bytes).sum();
    }

    /// How many requests are remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops the least recently used requests (not `key`) while a new
    /// answer of `bytes` would pass [`MAX_ENTRIES`] or [`MAX_BYTES`].
    fn make_room(&mut self, key: &str, bytes: usize) {
        let held = self.entries.get(key).map_or(0, |e| e.bytes);
        loop {
            let count = self.entries.len() + usize::from(!self.entries.contains_key(key));
            if count <= MAX_ENTRIES && self.bytes - held + bytes <= MAX_BYTES {
                return;
            }
            let oldest = self
                .entries
                .iter()
                .filter(|(k, _)| k.as_str() != key)
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            let Some(k) = oldest else { return };
            if let Some(e) = self.entries.remove(&k) {
                self.bytes -= e.bytes;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn an_answer_is_shared_until_it_is_older_than_the_interval() {
        let mut c = SourceCache::default();
        let t0 = Instant::now();
        assert_eq!(c.lookup("k", t0, MINUTE), Lookup::Ask);
        c.asking(t0, Duration::from_secs(1));
        c.succeeded("k", json!({"state": "pending"}), 20, t0);
        let later = t0 + Duration::from_secs(10);
        assert_eq!(
            c.lookup("k", later, MINUTE),
            Lookup::Fresh {
                value: json!({"state": "pending"}),
                age: Duration::from_secs(10)
            }
        );
        assert_eq!(c.lookup("k", t0 + MINUTE, MINUTE), Lookup::Ask);
    }

    #[test]
    fn a_failure_never_replaces_the_good_answer_and_is_held_with_backoff() {
        let mut c = SourceCache::default();
        let t0 = Instant::now();
        c.succeeded("k", json!("good"), 6, t0);
        let t1 = t0 + MINUTE;
        let f = c.failed("k", "answered 500".into(), "status_5xx", None, t1);
        assert_eq!(f.retry_at, t1 + Duration::from_secs(1));
        match c.lookup("k", t1, MINUTE) {
            Lookup::Failing { failed, good } => {
                assert_eq!(failed.message, "answered 500");
                assert_eq!(good, Some((json!("good"), MINUTE)));
            }
            other => panic!("{other:?}"),
        }
        let f2 = c.failed("k", "answered 500".into(), "status_5xx", None, t1);
        assert_eq!(f2.retry_at, t1 + Duration::from_secs(2));
        for _ in 0..20 {
            c.failed("k", "x".into(), "timeout", None, t1);
        }
        assert_eq!(c.lookup("k", t1 + MAX_BACKOFF, MINUTE), Lookup::Ask);
        assert!(matches!(
            c.lookup("k", t1 + Duration::from_secs(299), MINUTE),
            Lookup::Failing { .. }
        ));
    }

    #[test]
    fn retry_after_holds_the_whole_source() {
        let mut c = SourceCache::default();
        let t0 = Instant::now();
        c.failed(
            "a",
            "throttled".into(),
            "throttled",
            Some(Duration::from_secs(40)),
            t0,
        );
        let t1 = t0 + Duration::from_secs(5);
        assert!(
            matches!(c.lookup("b", t1, MINUTE), Lookup::Wait { until, .. } if until == t0 + Duration::from_secs(40))
        );
        assert_eq!(
            c.lookup("b", t0 + Duration::from_secs(40), MINUTE),
            Lookup::Ask
        );
    }

    #[test]
    fn the_rate_limit_spaces_requests_and_old_entries_go() {
        let mut c = SourceCache::default();
        let t0 = Instant::now();
        c.asking(t0, Duration::from_secs(2));
        assert!(matches!(
            c.lookup("b", t0 + Duration::from_secs(1), MINUTE),
            Lookup::Wait { .. }
        ));
        c.succeeded("a", json!(1), 1, t0);
        c.sweep(t0 + Duration::from_secs(3600), MINUTE);
        assert!(c.is_empty());
    }

    #[test]
    fn many_large_answers_cost_the_source_s_cache_only() {
        let mut c = SourceCache::default();
        let t0 = Instant::now();
        let big = MAX_BYTES / 4 + 1;
        for i in 0..10 {
            c.succeeded(&format!("k{i}"), json!(i), big, t0 + Duration::from_secs(i));
        }
        assert_eq!(c.len(), 3, "the newest that fit");
        assert!(c.bytes <= MAX_BYTES);
        let later = t0 + Duration::from_secs(10);
        assert!(matches!(
            c.lookup("k9", later, MINUTE),
            Lookup::Fresh { .. }
        ));
        assert_eq!(c.lookup("k0", later, MINUTE), Lookup::Ask);
    }
}
