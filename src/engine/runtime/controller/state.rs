//! What the controller keeps per primary between reconciles, kept small.

use super::*;

/// What the controller keeps per primary between reconciles; dropped with it.
/// Kept small (48 bytes): what most primaries never need sits behind
/// [`PrimaryState::rare`], allocated only while in use.
#[derive(Debug, Default)]
pub(super) struct PrimaryState {
    /// Fingerprint of spec and metadata last queued, so status-only updates
    /// do not re-render.
    pub(super) fingerprint: Option<u64>,
    /// The last condition reported as an Event, so Events are not repeated.
    pub(super) reported: Option<Box<str>>,
    /// Transient failures of children's writes in a row (their backoff's exponent).
    pub(super) failures: u32,
    /// Transient failures of the status write in a row, counted apart so
    /// that a refused status never slows the retries of a child.
    pub(super) status_failures: u32,
    /// Normalised children, recent writes and a pause; `None` while all empty.
    pub(super) rare: Option<Box<Rare>>,
}

/// The part of [`PrimaryState`] that is empty for most primaries most of the time.
/// Every primary that writes holds one for [`budget::WINDOW`] (all of them
/// while the bench converges), so what fewer need sits behind `rarer`:
/// 40 bytes instead of 120.
#[derive(Debug, Default)]
pub(super) struct Rare {
    /// The writes made within the last [`budget::WINDOW`].
    pub(super) window: budget::Window,
    /// Normalised children and a pause; `None` while both empty.
    pub(super) rarer: Option<Box<Rarer>>,
}

/// The part of [`Rare`] only primaries with normalised children or a
/// paused write hold.
#[derive(Debug, Default)]
pub(super) struct Rarer {
    /// How the server stored children it normalises.
    pub(super) known: Known,
    /// While set and in the future: writes paused, with this explanation.
    pub(super) paused: Option<(std::time::Instant, String)>,
}

impl Rare {
    /// Forgets writes older than [`budget::WINDOW`] and a pause that is over.
    pub(super) fn expire(&mut self, now: std::time::Instant) {
        self.window.expire(now);
        if let Some(rarer) = &mut self.rarer {
            if rarer
                .paused
                .as_ref()
                .is_some_and(|(until, _)| *until <= now)
            {
                rarer.paused = None;
            }
            if rarer.known.is_empty() && rarer.paused.is_none() {
                self.rarer = None;
            }
        }
    }

    /// What the budget says of `writes` made `now` (budget.rs), the pause
    /// in force and the writes that fell out of the window forgotten first.
    pub(super) fn judge(
        &mut self,
        now: std::time::Instant,
        writes: &[budget::Write],
    ) -> budget::Verdict {
        self.expire(now);
        let paused = self.paused().map(|(_, why)| why.clone());
        self.window.judge(now, paused.as_deref(), writes)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.window.is_empty() && self.rarer.is_none()
    }

    /// How the server stored children it normalises (none: empty).
    pub(super) fn known(&self) -> Option<&Known> {
        self.rarer.as_ref().map(|r| &r.known)
    }

    /// The part fewer primaries need, allocated on first use.
    pub(super) fn rarer(&mut self) -> &mut Rarer {
        self.rarer.get_or_insert_with(Box::default)
    }

    /// The pause in force, if any (as of the last [`expire`](Self::expire)).
    pub(super) fn paused(&self) -> Option<&(std::time::Instant, String)> {
        self.rarer.as_ref().and_then(|r| r.paused.as_ref())
    }
}

impl PrimaryState {
    /// A reconcile succeeded: every retry count starts again, and what
    /// expired by `now` is freed.
    pub(super) fn succeeded(&mut self, now: std::time::Instant) {
        self.failures = 0;
        self.status_failures = 0;
        self.tidy(now);
    }

    /// The rarely used part, allocated on first use.
    pub(super) fn rare(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Drops what expired by `now`, and the rarely used part once empty.
    pub(super) fn tidy(&mut self, now: std::time::Instant) {
        if let Some(rare) = &mut self.rare {
            rare.expire(now);
            if rare.is_empty() {
                self.rare = None;
            }
        }
    }

    /// A reconcile failed in `stage`; returns that stage's retry number (from
    /// 0). A status failure means the children's writes went through.
    pub(super) fn failed(&mut self, stage: Stage) -> u32 {
        let count = match stage {
            Stage::Children => &mut self.failures,
            Stage::Status => {
                self.failures = 0;
                &mut self.status_failures
            }
        };
        let before = *count;
        *count = before.saturating_add(1);
        before
    }
}
