//! What a member does with its buckets on each round, pure.
//!
//! A member publishes in its Lease the buckets it *lists*: those it holds
//! and those it is claiming. It writes for a bucket only once the claim is
//! *active*: a read of the other Leases made after the claim was published
//! showed no other live member listing that bucket. Of two members that
//! claim one bucket at once, each reads after its own publication, so at
//! least one sees the other and withdraws: never both active.

use super::ring::Buckets;

/// What one round sees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Round {
    /// The buckets the ring gives this member now.
    pub assigned: Buckets,
    /// The buckets this member's Lease lists on the server (pending and active).
    pub listed: Buckets,
    /// The buckets this member writes for (a subset of `listed`).
    pub active: Buckets,
    /// The union of what every *other live* member's Lease lists, read
    /// after `listed` was published.
    pub others: Buckets,
    /// The buckets this member's caches hold in full.
    pub covered: Buckets,
}

/// What to do in this round, in this order: stop writing for `release`
/// (wait for writes in flight), `activate`, then publish `listed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Step {
    /// Active buckets to stop writing for (no longer assigned).
    pub release: Buckets,
    /// Listed buckets that become active now (no one else lists them).
    pub activate: Buckets,
    /// What the Lease lists after this round.
    pub listed: Buckets,
    /// What the caches must hold: every bucket listed or assigned.
    pub interest: Buckets,
}

/// The round's decision.
pub fn step(r: Round) -> Step {
    let release = r.active & !r.assigned;
    let pending = r.listed & !r.active & r.assigned;
    // A pending claim someone else also lists is withdrawn; it is tried
    // again once the other has let go (views converge within a round).
    let activate = pending & !r.others & r.covered;
    let withdrawn = pending & r.others;
    let keep = (r.active & r.assigned) | (pending & !withdrawn);
    let claim = r.assigned & !r.listed & !r.others & r.covered;
    let listed = keep | claim;
    Step {
        release,
        activate,
        listed,
        interest: r.assigned | listed | r.active,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_assigned_bucket_is_listed_first_and_active_only_on_the_next_round() {
        let r = Round {
            assigned: 0b1,
            covered: 0b1,
            ..Round::default()
        };
        let s = step(r);
        assert_eq!((s.activate, s.listed), (0, 0b1));
        let s = step(Round {
            listed: s.listed,
            ..r
        });
        assert_eq!((s.activate, s.listed), (0b1, 0b1));
    }

    #[test]
    fn a_bucket_another_member_lists_is_never_claimed_until_it_lets_go() {
        let r = Round {
            assigned: 0b11,
            others: 0b10,
            covered: 0b11,
            ..Round::default()
        };
        assert_eq!(step(r).listed, 0b01);
        let r = Round { listed: 0b11, ..r };
        let s = step(r);
        assert_eq!(s.activate, 0b01, "the contested claim is not activated");
        assert_eq!(s.listed, 0b01, "and is withdrawn");
    }

    #[test]
    fn two_members_claiming_at_once_never_both_activate() {
        // Both published a claim on bucket 0 (their views of the group
        // differed); each reads the other's claim: neither activates, both
        // withdraw, and the one the settled ring names claims again.
        let contested = Round {
            assigned: 1,
            listed: 1,
            others: 1,
            covered: 1,
            ..Round::default()
        };
        let s = step(contested);
        assert_eq!((s.activate, s.listed), (0, 0));
        let s = step(Round {
            listed: 0,
            others: 0,
            ..contested
        });
        assert_eq!((s.activate, s.listed), (0, 1));
    }

    #[test]
    fn a_bucket_no_longer_assigned_is_released_and_unlisted() {
        let s = step(Round {
            assigned: 0b01,
            listed: 0b11,
            active: 0b11,
            covered: 0b11,
            ..Round::default()
        });
        assert_eq!(s.release, 0b10);
        assert_eq!(s.listed, 0b01);
        assert_eq!(
            s.interest, 0b11,
            "the cache keeps it until the release is published"
        );
    }

    #[test]
    fn caches_must_cover_a_bucket_before_it_is_claimed_or_activated() {
        let r = Round {
            assigned: 0b1,
            ..Round::default()
        };
        let s = step(r);
        assert_eq!((s.listed, s.interest), (0, 0b1));
        let s = step(Round { listed: 0b1, ..r });
        assert_eq!(s.activate, 0);
    }
}
