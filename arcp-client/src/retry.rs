//! The retry schedule: capped exponential backoff with full jitter, and
//! the retry budget (`budget.rs`: retry when, or give up why).
//!
//! Classification (what is retried) is `classify.rs`; this module only
//! decides *when* and *how often*, and how far ahead an instant may be
//! pushed without overflowing (`saturating_deadline`).

mod budget;

use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};
use rand::Rng;

use crate::config::RetryPolicy;

pub(crate) use budget::{Decision, Exhausted, RetryBudget};

impl RetryPolicy {
    /// Retry delays: ceilings from `initial_delay`, doubling, through backon.
    pub(crate) fn schedule(&self) -> Schedule {
        Schedule::new(self.initial_delay, self.max_delay)
    }

    /// Recovery-ladder waits: from `outcome_poll`, doubling.
    pub(crate) fn ladder(&self) -> Schedule {
        Schedule::new(self.outcome_poll, self.max_delay)
    }
}

/// One call's (or the connection's) position in the backoff sequence.
pub(crate) struct Schedule {
    ceilings: backon::ExponentialBackoff,
    last: Duration,
}

impl Schedule {
    fn new(first: Duration, max: Duration) -> Self {
        Schedule {
            ceilings: ExponentialBuilder::default()
                .with_min_delay(first)
                .with_max_delay(max.max(first))
                .with_factor(2.0)
                .without_max_times()
                .build(),
            last: first,
        }
    }

    /// The next ceiling itself, without jitter (for patient waits, where
    /// spreading load is not the point).
    pub(crate) fn next_ceiling(&mut self) -> Duration {
        let ceiling = self.ceilings.next().unwrap_or(self.last);
        self.last = ceiling;
        ceiling
    }

    /// The ceiling last handed out.
    pub(crate) fn current(&self) -> Duration {
        self.last
    }

    /// The next wait: uniform in `[0, ceiling]`, at least `floor`.
    pub(crate) fn next_delay(&mut self, floor: Option<Duration>) -> Duration {
        let ceiling = self.ceilings.next().unwrap_or(self.last);
        self.last = ceiling;
        let jittered = rand::rng().random_range(Duration::ZERO..=ceiling);
        floor.map_or(jittered, |f| jittered.max(f))
    }
}

impl std::fmt::Debug for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schedule")
            .field("last", &self.last)
            .finish()
    }
}

/// `at + d`, or a time far enough ahead to mean "never" when a huge
/// user-given duration would overflow (no panic on `Duration::MAX`).
pub(crate) fn saturating_deadline(at: Instant, d: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);
    at.checked_add(d.min(FAR))
        .or_else(|| at.checked_add(Duration::from_secs(86_400)))
        .unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_jittered_below_a_doubling_capped_ceiling() {
        let policy = RetryPolicy::exponential()
            .initial_delay(Duration::from_millis(10))
            .max_delay(Duration::from_millis(80));
        let mut s = policy.schedule();
        let ceilings = [10, 20, 40, 80, 80, 80];
        for ceiling in ceilings {
            let d = s.next_delay(None);
            assert!(d <= Duration::from_millis(ceiling), "{d:?} > {ceiling} ms");
        }
    }

    #[test]
    fn retry_after_is_a_floor() {
        let mut s = RetryPolicy::exponential()
            .initial_delay(Duration::from_millis(1))
            .schedule();
        assert!(s.next_delay(Some(Duration::from_millis(500))) >= Duration::from_millis(500));
    }

    #[test]
    fn a_saturating_deadline_never_overflows() {
        let now = Instant::now();
        assert!(saturating_deadline(now, Duration::MAX) > now);
        assert_eq!(
            saturating_deadline(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
    }

    #[test]
    fn builders_clamp_nonsense() {
        let p = RetryPolicy::exponential()
            .max_attempts(0)
            .initial_delay(Duration::ZERO);
        assert_eq!(p.max_attempts, 1);
        assert!(p.initial_delay > Duration::ZERO);
    }
}
