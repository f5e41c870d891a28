//! A call's deadline, carried as one value from its start: the instant it
//! passes, the duration the caller gave (what the error names), and the
//! one way a call ends "deadline exceeded". Both transports, the dispatch
//! path and the connection task hold a call to it; each wait it bounds may
//! run a timer of its own, but none computes the instant or builds the
//! error itself.

use std::time::{Duration, Instant};

use crate::classify::{give_up, Ended, Ending};
use crate::error::Error;
use crate::retry::saturating_deadline;

/// When a call must have ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline {
    at: Instant,
    after: Duration,
}

impl Deadline {
    /// `after` from `started`; a duration too large for the clock means
    /// "far ahead", never an overflow.
    pub(crate) fn new(started: Instant, after: Duration) -> Self {
        Deadline {
            at: saturating_deadline(started, after),
            after,
        }
    }

    /// The instant it passes.
    pub(crate) fn at(self) -> Instant {
        self.at
    }

    /// The duration the caller gave (what the error names; tests tell
    /// callers apart by it).
    #[cfg(test)]
    pub(crate) fn after(self) -> Duration {
        self.after
    }

    /// What is left of it at `now` (zero once passed).
    pub(crate) fn remaining(self, now: Instant) -> Duration {
        self.at.saturating_duration_since(now)
    }

    /// Whether it has passed at `now`.
    pub(crate) fn exceeded(self, now: Instant) -> bool {
        now >= self.at
    }

    /// The later of two: a call joined by a second caller lives as long as
    /// its most patient one.
    pub(crate) fn latest(self, other: Deadline) -> Deadline {
        Deadline {
            at: self.at.max(other.at),
            after: self.after.max(other.after),
        }
    }

    /// The error of `call` ended by this deadline, by the one give-up rule
    /// (`DeadlineExceeded`, its execution from what the call exposed).
    pub(crate) fn exceeded_error(self, call: Ended<'_>) -> Error {
        give_up(call, Ending::Deadline(self.after))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::Exposure;
    use crate::error::Execution;

    #[test]
    fn a_deadline_is_its_instant_and_the_duration_given() {
        let t0 = Instant::now();
        let d = Deadline::new(t0, Duration::from_secs(3));
        assert_eq!(d.at(), t0 + Duration::from_secs(3));
        assert_eq!(d.after(), Duration::from_secs(3));
        assert_eq!(
            d.remaining(t0 + Duration::from_secs(1)),
            Duration::from_secs(2)
        );
        assert_eq!(d.remaining(t0 + Duration::from_secs(9)), Duration::ZERO);
        assert!(!d.exceeded(t0 + Duration::from_millis(2999)));
        assert!(d.exceeded(t0 + Duration::from_secs(3)));
        // A huge duration does not overflow the clock.
        let never = Deadline::new(t0, Duration::MAX);
        assert!(never.at() > t0 && !never.exceeded(t0 + Duration::from_secs(86_400)));
    }

    #[test]
    fn the_latest_of_two_keeps_the_later_instant_and_the_longer_duration() {
        let t0 = Instant::now();
        let early = Deadline::new(t0, Duration::from_secs(5));
        let late = Deadline::new(t0 + Duration::from_secs(1), Duration::from_secs(2));
        let both = early.latest(late);
        assert_eq!(both.at(), t0 + Duration::from_secs(5));
        assert_eq!(both.after(), Duration::from_secs(5));
        assert_eq!(late.latest(early), both);
    }

    #[test]
    fn the_error_names_the_deadline_and_what_the_call_exposed() {
        let key = arcp_types::IdempotencyKey::new();
        let d = Deadline::new(Instant::now(), Duration::from_secs(3));
        for (in_doubt, execution) in [(false, Execution::NotRun), (true, Execution::MayHaveRun)] {
            let call = Ended {
                key: &key,
                job_id: None,
                exposure: Exposure {
                    bound: false,
                    in_doubt,
                },
                attempts: 1,
                last_error: None,
            };
            match d.exceeded_error(call) {
                Error::DeadlineExceeded {
                    deadline,
                    execution: got,
                    attempts: 1,
                    ..
                } => {
                    assert_eq!(deadline, Duration::from_secs(3));
                    assert_eq!(got, execution);
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
