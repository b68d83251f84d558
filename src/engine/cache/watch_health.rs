//! How one watch is doing: how long to wait before its next try, whether it
//! has been failing long enough to make kiln unready, and whether a failure
//! may be logged now.
//!
//! kube's own stream backoff resets on every `Ok` item, and its watcher emits
//! `Init` before each list, so a list that keeps failing (403, a body it
//! cannot decode) was retried about once a second for ever and logged every
//! time. Here only progress resets the backoff —
//! a finished list, or a change — and a failing watch logs once, then at
//! most once a [`LOG_EVERY`] with the count it kept quiet.

use std::time::{Duration, Instant};

use crate::engine::backoff;
use crate::rules::Backoff;

/// The retry bounds of a failing list or watch (kube's default is 0.8 s to 30 s).
pub(super) const RETRY: Backoff = Backoff {
    initial: Duration::from_secs(1),
    max: Duration::from_secs(30),
};

/// A failing watch logs at most this often.
pub(super) const LOG_EVERY: Duration = Duration::from_secs(60);

/// A watch failing for longer than this makes kiln unready: a blip (a watch
/// closed by the server, one refused reconnection) does not.
pub(super) const UNREADY_AFTER: Duration = Duration::from_secs(5);

/// The state of one watch stream.
#[derive(Debug, Default)]
pub(super) struct WatchHealth {
    failures: u32,
    failing_since: Option<Instant>,
    last_logged: Option<Instant>,
    quiet: u32,
    last_error: String,
}

/// What to do about one failure.
#[derive(Debug, PartialEq)]
pub(super) struct Verdict {
    /// Wait this long before the next try.
    pub retry_in: Duration,
    /// Log it now, saying how many failures went unlogged since the last line.
    pub log: Option<u32>,
}

impl WatchHealth {
    /// A failure at `now`, with `jitter` in [0, 1).
    pub(super) fn failed(&mut self, now: Instant, error: &str, jitter: f64) -> Verdict {
        let retry_in = backoff::delay(RETRY, self.failures, jitter);
        self.failures = self.failures.saturating_add(1);
        self.failing_since.get_or_insert(now);
        self.last_error = error.to_string();
        let due = self
            .last_logged
            .is_none_or(|t| now.duration_since(t) >= LOG_EVERY);
        let log = if due {
            self.last_logged = Some(now);
            Some(std::mem::take(&mut self.quiet))
        } else {
            self.quiet = self.quiet.saturating_add(1);
            None
        };
        Verdict { retry_in, log }
    }

    /// The list finished or a change arrived: the watch works again.
    pub(super) fn progressed(&mut self) {
        self.failures = 0;
        self.failing_since = None;
        self.last_logged = None;
        self.quiet = 0;
    }

    /// Why the watch makes kiln unready at `now`, if it does.
    pub(super) fn trouble(&self, now: Instant) -> Option<String> {
        let since = self.failing_since?;
        let failing = now.duration_since(since);
        (failing >= UNREADY_AFTER).then(|| {
            format!(
                "failing for {}s ({} tries): {}",
                failing.as_secs(),
                self.failures,
                self.last_error
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn a_list_that_keeps_failing_backs_off_to_the_cap() {
        let mut h = WatchHealth::default();
        let t0 = Instant::now();
        let waits: Vec<u64> = (0..8)
            .map(|_| h.failed(t0, "forbidden", 0.5).retry_in.as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[test]
    fn only_progress_resets_the_backoff() {
        let mut h = WatchHealth::default();
        let t0 = Instant::now();
        h.failed(t0, "e", 0.5);
        h.failed(t0, "e", 0.5);
        assert_eq!(h.failed(t0, "e", 0.5).retry_in, secs(4.0));
        h.progressed();
        assert_eq!(h.failed(t0, "e", 0.5).retry_in, secs(1.0));
    }

    #[test]
    fn a_failing_watch_logs_once_then_once_a_minute_with_the_count_it_kept_quiet() {
        let mut h = WatchHealth::default();
        let t0 = Instant::now();
        assert_eq!(h.failed(t0, "e", 0.5).log, Some(0));
        for s in 1..10 {
            assert_eq!(h.failed(t0 + secs(f64::from(s)), "e", 0.5).log, None);
        }
        assert_eq!(h.failed(t0 + LOG_EVERY, "e", 0.5).log, Some(9));
        assert_eq!(h.failed(t0 + LOG_EVERY + secs(1.0), "e", 0.5).log, None);
    }

    #[test]
    fn a_blip_keeps_kiln_ready_a_lasting_failure_does_not() {
        let mut h = WatchHealth::default();
        let t0 = Instant::now();
        assert_eq!(h.trouble(t0), None);
        h.failed(t0, "connection refused", 0.5);
        assert_eq!(h.trouble(t0 + secs(1.0)), None);
        let why = h.trouble(t0 + UNREADY_AFTER + secs(1.0)).unwrap();
        assert!(
            why.contains("failing for 6s") && why.contains("connection refused"),
            "{why}"
        );
        h.progressed();
        assert_eq!(h.trouble(t0 + secs(60.0)), None);
    }
}
