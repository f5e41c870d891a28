//! The retry schedule: capped exponential backoff with full jitter.
//!
//! Classification (what is retried) lives with the call state machine; this
//! module only decides *when* and *how often*.

use std::time::Duration;

use std::time::Instant;

use backon::{BackoffBuilder, ExponentialBuilder};
use rand::Rng;

/// How a call is retried across failures.
///
/// Delays follow capped exponential backoff (`initial_delay`, doubled per
/// retry, at most `max_delay`) with *full jitter*: each wait is uniform in
/// `[0, ceiling]`, which spreads reconnect storms of many clients. A
/// `retry_after` hint from the runtime is a floor for the next wait.
///
/// The budget counts sends of the request (`max_attempts`) and wall time
/// since the call started (`max_elapsed`); a failed connect or handshake costs
/// time, not an attempt. The defaults carry a call through several network
/// cuts in a row and still end with a typed outcome within about a minute.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub(crate) initial_delay: Duration,
    pub(crate) max_delay: Duration,
    pub(crate) max_attempts: u32,
    pub(crate) max_elapsed: Duration,
    pub(crate) outcome_poll: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
            max_attempts: 10,
            max_elapsed: Duration::from_secs(60),
            outcome_poll: Duration::from_millis(500),
        }
    }
}

impl RetryPolicy {
    /// Exponential backoff with the default bounds (100 ms initial, 5 s cap,
    /// 10 attempts, 60 s elapsed).
    pub fn exponential() -> Self {
        RetryPolicy::default()
    }

    /// No retries: one attempt, no waiting.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The first delay's ceiling.
    pub fn initial_delay(mut self, d: Duration) -> Self {
        self.initial_delay = d.max(Duration::from_millis(1));
        self
    }

    /// The cap on any single delay.
    pub fn max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d.max(Duration::from_millis(1));
        self
    }

    /// How many times the request may be sent, in all (at least 1).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// How long a call may keep retrying, from its first failure (a long
    /// call that fails late still gets the whole budget).
    pub fn max_elapsed(mut self, d: Duration) -> Self {
        self.max_elapsed = d;
        self
    }

    /// How long a call that the runtime accepted again after a retry (a
    /// replayed `job.accepted`) waits for its outcome on the live stream
    /// before the next recovery step (subscribe, then re-send with the same
    /// key). Doubles per step up to `max_delay`; every job event resets the
    /// wait. Default 500 ms.
    pub fn outcome_poll(mut self, d: Duration) -> Self {
        self.outcome_poll = d.max(Duration::from_millis(1));
        self
    }

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
pub(crate) fn later(at: Instant, d: Duration) -> Instant {
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
    fn later_never_overflows() {
        let now = Instant::now();
        assert!(later(now, Duration::MAX) > now);
        assert_eq!(
            later(now, Duration::from_secs(1)),
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
