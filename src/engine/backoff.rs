//! Per-object exponential backoff for transient errors, with jitter so that
//! many objects failing together do not retry in lockstep.

use std::time::Duration;

use crate::rules::Backoff;

/// The delay before retry number `attempt` (from 0): `initial * 2^attempt`,
/// capped at `max`, then moved by up to ±10% according to `jitter` in [0, 1).
pub(crate) fn delay(bounds: Backoff, attempt: u32, jitter: f64) -> Duration {
    let base = bounds.initial.as_secs_f64() * 2f64.powi(attempt.min(62) as i32);
    let capped = base.min(bounds.max.as_secs_f64());
    let factor = 1.0 + 0.2 * (jitter.clamp(0.0, 1.0) - 0.5);
    Duration::from_secs_f64((capped * factor).min(bounds.max.as_secs_f64()).max(0.0))
}

/// A jitter value in [0, 1) that differs between calls without a random
/// number generator dependency.
pub(crate) fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut x = u64::from(nanos) ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    (x % 10_000) as f64 / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Backoff = Backoff {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(300),
    };

    #[test]
    fn doubles_from_initial_and_caps_at_max() {
        let d: Vec<u64> = (0..12).map(|a| delay(B, a, 0.5).as_secs()).collect();
        assert_eq!(d, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(delay(B, u32::MAX, 0.5), Duration::from_secs(300));
    }

    #[test]
    fn jitter_moves_at_most_ten_percent_and_never_past_max() {
        assert_eq!(delay(B, 3, 0.0), Duration::from_secs_f64(7.2));
        assert_eq!(delay(B, 3, 1.0), Duration::from_secs_f64(8.8));
        assert_eq!(delay(B, 20, 1.0), Duration::from_secs(300));
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j));
        }
    }
}
