//! Which replica handles which primary, pure: a primary's bucket is the top
//! bits of the 64-bit FNV-1a hash of its uid (the hash the API server's
//! `shardRange(object.metadata.uid, …)` uses, so a bucket is one contiguous
//! hash range), and buckets go to live members by rendezvous
//! (highest-random-weight) hashing, so a member joining or leaving moves
//! about 1/N of them.

/// How many buckets the hash space is cut into (one bit each in a `u64`).
pub const BUCKETS: u32 = 64;

/// A set of buckets, one bit per bucket.
pub type Buckets = u64;

/// 64-bit FNV-1a of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The bucket of a uid: the top six bits of its hash.
pub fn bucket_of(uid: &str) -> u32 {
    u32::try_from(fnv1a64(uid.as_bytes()) >> (64 - BUCKETS.trailing_zeros())).unwrap_or(0)
}

/// Whether `set` holds `bucket`.
pub fn contains(set: Buckets, bucket: u32) -> bool {
    bucket < BUCKETS && set & (1 << bucket) != 0
}

/// The buckets of `set`, lowest first.
pub fn members_of(set: Buckets) -> impl Iterator<Item = u32> {
    (0..BUCKETS).filter(move |b| contains(set, *b))
}

/// The weight of `member` for `bucket`: highest wins.
fn weight(member: &str, bucket: u32) -> u64 {
    let mut key = Vec::with_capacity(member.len() + 5);
    key.extend_from_slice(member.as_bytes());
    key.push(0);
    key.extend_from_slice(&bucket.to_le_bytes());
    // FNV-1a alone mixes the last bytes poorly; a final avalanche
    // (splitmix64's) spreads them over the whole word.
    let mut z = fnv1a64(&key);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The buckets assigned to `me` when `members` (`me` among them) are live.
pub fn assigned(me: &str, members: &[String]) -> Buckets {
    let mut set = 0;
    for bucket in 0..BUCKETS {
        let winner = members
            .iter()
            .max_by(|a, b| weight(a, bucket).cmp(&weight(b, bucket)).then(b.cmp(a)));
        if winner.is_some_and(|w| w == me) {
            set |= 1 << bucket;
        }
    }
    set
}

/// The hash ranges `[start, end)` covered by `set`, adjacent buckets
/// merged; `end` is `None` for the range that runs to the top of the space.
pub fn ranges(set: Buckets) -> Vec<(u64, Option<u64>)> {
    let width = 1u64 << (64 - BUCKETS.trailing_zeros());
    let mut out: Vec<(u64, Option<u64>)> = Vec::new();
    for b in members_of(set) {
        let start = u64::from(b) * width;
        let end = start.checked_add(width);
        match out.last_mut() {
            Some((_, last_end)) if *last_end == Some(start) => *last_end = end,
            _ => out.push((start, end)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("kiln-{i}")).collect()
    }

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn every_bucket_goes_to_exactly_one_member() {
        for n in 1..6 {
            let members = names(n);
            let sets: Vec<Buckets> = members.iter().map(|m| assigned(m, &members)).collect();
            let union = sets.iter().fold(0, |a, s| a | s);
            assert_eq!(union, u64::MAX, "{n} members cover every bucket");
            assert_eq!(
                sets.iter().map(|s| s.count_ones()).sum::<u32>(),
                BUCKETS,
                "{n} members share none"
            );
        }
    }

    #[test]
    fn a_member_joining_moves_about_one_share_and_only_to_itself() {
        let three = names(3);
        let four = names(4);
        let mut moved = 0;
        for m in &three {
            let before = assigned(m, &three);
            let after = assigned(m, &four);
            assert_eq!(
                after & !before,
                0,
                "{m} gained buckets when a fourth joined"
            );
            moved += (before & !after).count_ones();
        }
        assert_eq!(moved, assigned("kiln-3", &four).count_ones());
        // About 1/4 of 64 (16), never a reshuffle.
        assert!((8..=24).contains(&moved), "moved {moved} buckets");
        for m in &three {
            let share = assigned(m, &three).count_ones();
            assert!((12..=32).contains(&share), "{m} holds {share} of 64");
        }
    }

    /// Over many groups of random identities (as pods' names are), a
    /// fourth member takes about a quarter of the buckets, and only from
    /// the three; each of three holds about a third.
    #[test]
    fn over_many_identities_a_fourth_member_takes_about_a_quarter() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut name = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            format!("kiln-{:08x}", seed >> 32)
        };
        let groups = 500;
        let (mut moved, mut third) = (0u32, 0u32);
        for _ in 0..groups {
            let three: Vec<String> = (0..3).map(|_| name()).collect();
            let mut four = three.clone();
            four.push(name());
            for m in &three {
                let before = assigned(m, &three);
                let after = assigned(m, &four);
                assert_eq!(after & !before, 0, "{m} gained buckets");
                moved += (before & !after).count_ones();
            }
            third += assigned(&three[0], &three).count_ones();
        }
        let per_group = f64::from(moved) / f64::from(groups);
        assert!(
            (15.0..=17.0).contains(&per_group),
            "a fourth took {per_group} of 64 buckets on average, not about 16"
        );
        let share = f64::from(third) / f64::from(groups);
        assert!(
            (20.3..=22.3).contains(&share),
            "one of three held {share} of 64 on average, not about 21.3"
        );
    }

    #[test]
    fn a_member_leaving_hands_only_its_own_buckets_over() {
        let four = names(4);
        let three = names(3);
        for m in &three {
            let before = assigned(m, &four);
            assert_eq!(before & !assigned(m, &three), 0, "{m} lost a bucket");
        }
    }

    #[test]
    fn buckets_are_contiguous_hash_ranges() {
        assert_eq!(ranges(0), vec![]);
        assert_eq!(ranges(u64::MAX), vec![(0, None)]);
        let width = 1u64 << 58;
        assert_eq!(
            ranges(0b1011),
            vec![(0, Some(2 * width)), (3 * width, Some(4 * width))]
        );
        let uid = "6d1c1b9e-0d7e-4a7c-9a51-6b2d2f6b9f11";
        let hash = fnv1a64(uid.as_bytes());
        let b = bucket_of(uid);
        let (start, end) = ranges(1 << b)[0];
        assert!(hash >= start && end.is_none_or(|e| hash < e));
        assert!(contains(1 << b, b) && !contains(0, b) && !contains(u64::MAX, 64));
    }
}
