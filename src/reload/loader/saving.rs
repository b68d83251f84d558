//! The accepted set saved in the cluster, and the finalizer releases it
//! owes: written only by the replica that runs the engine, when the set
//! changed (and once each time this replica starts to run it, to read what
//! is still owed), retried after a failure with a bounded exponential
//! backoff.

use std::time::{Duration, Instant};

use super::Loader;
use crate::reload::accepted::Accepted;
use crate::reload::release::{self, Release, Releaser};
use crate::reload::saved::{Saved, SavedError};
use crate::reload::tell::Speaks;
use crate::rules::Backoff;

/// How often the loader looks whether the accepted set is to be saved
/// (the replica that accepted it may not have led then), or releases
/// carried out.
pub(super) const EVERY: Duration = Duration::from_secs(5);

/// How soon a failed save or release is tried again: from [`EVERY`],
/// doubling up to five minutes.
const RETRY: Backoff = Backoff {
    initial: EVERY,
    max: Duration::from_secs(300),
};

/// The accepted set saved in the cluster by the replica that runs the engine.
pub(super) struct Saving {
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
    /// The releases the saved set owes (`None`: not read since this
    /// replica started to run the engine).
    releasing: Option<Vec<Release>>,
    /// Releases carried out since the set was last saved.
    released: Vec<Release>,
    /// Carries the releases out (`None`: not here, as in tests).
    releaser: Option<Releaser>,
    /// The last release failure told, so that it is told once.
    release_told: Option<String>,
    /// The releases under way, beside the loader (a kind with many objects
    /// holds no reload back): what was done, and why the rest was not.
    task: Option<tokio::task::JoinHandle<Released>>,
    save_retry: Retry,
    release_retry: Retry,
}

/// What a round of releases did: the releases done, and why the others
/// were not.
type Released = (Vec<Release>, Vec<String>);

/// When a task that failed is tried again.
#[derive(Debug, Default)]
struct Retry {
    failures: u32,
    at: Option<Instant>,
}

impl Retry {
    fn due(&self, now: Instant) -> bool {
        self.at.is_none_or(|at| now >= at)
    }

    fn failed(&mut self, now: Instant, jitter: f64) {
        let wait = crate::engine::backoff::delay(RETRY, self.failures, jitter);
        self.failures = self.failures.saturating_add(1);
        self.at = Some(now + wait);
    }

    fn succeeded(&mut self) {
        *self = Self::default();
    }
}

impl Loader {
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
        self.saving = Some(Saving {
            saved,
            source,
            speaks,
            last: last.as_ref().ok().cloned().flatten(),
            unread: matches!(last, Err(SavedError::Api { .. })),
            told: None,
            releasing: None,
            released: Vec::new(),
            releaser: None,
            release_told: None,
            task: None,
            save_retry: Retry::default(),
            release_retry: Retry::default(),
        });
        self
    }

    /// Lets go, with `releaser`, of the finalizers the saved set owes (set
    /// after [`Loader::saving`]).
    #[must_use]
    pub fn releasing(mut self, releaser: Releaser) -> Self {
        if let Some(saving) = &mut self.saving {
            saving.releaser = Some(releaser);
        }
        self
    }

    /// Saves the accepted set when it changed since last saved (or when
    /// this replica has not read what the saved set owes since it started
    /// to run the engine), if this replica runs the engine; then carries
    /// out the releases owed. An error is told once and tried again later.
    pub async fn save(&mut self) {
        let Some(saving) = &mut self.saving else {
            return;
        };
        if !(saving.speaks)() {
            // Another replica may save (and release) meanwhile: read again
            // when leading, and release nothing more now.
            saving.releasing = None;
            if let Some(task) = saving.task.take() {
                task.abort();
            }
            return;
        }
        let changed = saving.last.as_ref() != Some(&self.accepted)
            || saving.releasing.is_none()
            || !saving.released.is_empty();
        let now = Instant::now();
        if changed && saving.save_retry.due(now) {
            if saving.unread && !self.unread_is_kept().await {
                return;
            }
            let Some(saving) = &mut self.saving else {
                return;
            };
            let (accepted, running) = (&self.accepted, self.rules.get());
            let done = saving.released.clone();
            let owe = |saved: &Accepted, pending: &[Release]| {
                release::owed(saved, pending, accepted, &running, &done)
            };
            match saving.saved.write(&saving.source, accepted, owe).await {
                Ok(releasing) => {
                    tracing::info!(saved = %saving.saved.place(), rules = accepted.rules.len(), releasing = releasing.len(), "saved the accepted rules");
                    saving.last = Some(accepted.clone());
                    saving.told = None;
                    saving.releasing = Some(releasing);
                    saving.released.clear();
                    saving.save_retry.succeeded();
                }
                Err(error) => {
                    saving
                        .save_retry
                        .failed(now, crate::engine::backoff::jitter());
                    let why = error.to_string();
                    if saving.told.as_ref() != Some(&why) {
                        tracing::error!(%error, "could not save the accepted rules; a restart with invalid rules would not find them");
                        self.teller.warn("AcceptedRulesNotSaved", &why).await;
                        saving.told = Some(why);
                    }
                }
            }
        }
        self.release().await;
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

    /// Carries out the releases the saved set owes, beside the loader
    /// (those done are taken out of it at the next save); a failure is told
    /// once per distinct error, and the release stays owed.
    async fn release(&mut self) {
        let Some(saving) = &mut self.saving else {
            return;
        };
        let now = Instant::now();
        if let Some(task) = saving.task.take_if(|t| t.is_finished()) {
            let (done, failures) = task.await.unwrap_or_default();
            saving.released.extend(done);
            if failures.is_empty() {
                saving.release_retry.succeeded();
                saving.release_told = None;
            } else {
                saving
                    .release_retry
                    .failed(now, crate::engine::backoff::jitter());
                let why = failures.join("; ");
                if saving.release_told.as_ref() != Some(&why) {
                    tracing::error!(%why, "could not let go of the finalizers of rules that no longer run on a kind: deleting those objects hangs until kiln may list and patch them; tried again");
                    let note = format!(
                        "{} finalizer release(s) owed, tried again: {why}. Grant kiln list and patch on the old kind until they are done.",
                        failures.len()
                    );
                    self.teller.warn("FinalizersNotReleased", &note).await;
                    saving.release_told = Some(why);
                }
            }
        }
        let owed: Vec<Release> = saving
            .releasing
            .iter()
            .flatten()
            .filter(|r| !saving.released.contains(r))
            .cloned()
            .collect();
        let pending = i64::try_from(owed.len()).unwrap_or(i64::MAX);
        self.metrics.releases_pending.set(pending);
        let Some(releaser) = saving.releaser.clone() else {
            return;
        };
        if saving.task.is_some() || owed.is_empty() || !saving.release_retry.due(now) {
            return;
        }
        saving.task = Some(tokio::spawn(async move {
            let mut released: Released = Default::default();
            for r in owed {
                match releaser.release(&r).await {
                    Ok(objects) => {
                        tracing::info!(release = %r, objects, "let go of the finalizer of a rule that no longer runs on that kind");
                        released.0.push(r);
                    }
                    Err(error) => released.1.push(error.to_string()),
                }
            }
            released
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_save_waits_longer_each_time_up_to_five_minutes() {
        let start = Instant::now();
        let mut retry = Retry::default();
        assert!(retry.due(start));
        let mut waits = Vec::new();
        for _ in 0..9 {
            retry.failed(start, 0.5);
            let at = retry.at.unwrap();
            assert!(!retry.due(start));
            assert!(retry.due(at));
            waits.push((at - start).as_secs());
        }
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        retry.succeeded();
        assert!(retry.due(start), "a success tries again at the next tick");
    }
}
