//! The retry budget: one rule, for every transport (WebSocket calls, HTTP
//! calls, artifact fetches), that says when a call's next attempt may start
//! or why it gives up. Pure: no I/O, no clock of its own (`now` is passed
//! in); the jitter is the backoff schedule's.
//!
//! The budget counts sends of the request (`max_attempts`) and time from the
//! call's first failure (`max_elapsed`, the clock started by
//! [`RetryBudget::start`]); the call's own deadline bounds it too. An
//! attempt may start at an instant `at` only while all three hold:
//!
//! | the call, deciding on an attempt at `at` | the budget says |
//! |---|---|
//! | `attempts >= max_attempts` | give up: [`Exhausted::Attempts`] |
//! | `at` is at or after the budget's end (`max_elapsed` after the first failure) | give up: [`Exhausted::Elapsed`] |
//! | `at` is at or after the call's deadline | give up: [`Exhausted::Deadline`] (the call ends `DeadlineExceeded` now: its deadline cannot be kept) |
//! | otherwise | [`Decision::RetryAt`]`(at)` |
//! | after a failure at `now` | `at` = `now` + the backoff's next delay (full jitter under a doubling ceiling), at least the runtime's floor (`Retry-After`, `retry_after`) |
//! | a call waiting for something that is no retry delay (a connection, the job's live stream) | checked when it stops waiting, and at the budget's end |
//! | the recovery ladder's re-sends (looks for an outcome the runtime holds) | time only: [`RetryBudget::ladder_may_go_on`] |
//! | `at` is at or after the key's send limit (its first send, or its journal record's prepare, plus the runtime's key retention) | give up: [`Exhausted::KeyRetention`], on the ladder too |
//!
//! **The key's send limit.** A runtime forgets a key some time after it
//! first saw it (`runtime_key_retention`); a send after that is a new call,
//! and the tool runs again. So no send of a key, first or re-send, may
//! start at or after (first send) + retention: the limit is set from the
//! journal's record (its prepare precedes its first send, in this process
//! or an earlier one) and by the call's own first send
//! ([`RetryBudget::sent`]), the earlier of the two winning.
//!
//! **One give-up timing.** A call gives up as soon as its next attempt is
//! known to fall outside the budget: at once when the attempt's time is
//! drawn and lands after the budget's end or the deadline (a `Retry-After`
//! of an hour, say), not when that instant passes. The caller is told now
//! instead of waiting for an attempt that will never be made, and the
//! error names the limit (backon's total delay and Go's `backoff`
//! `MaxElapsedTime` stop the same way). A call whose next attempt waits on
//! something else (the connection's next dial, a job's stream) cannot know
//! that instant ahead: it gives up when the budget's end passes while it
//! still waits. Waiting for the answer to an attempt already sent is no
//! retry: the budget does not end it (the deadline does).

use std::fmt;
use std::time::{Duration, Instant};

use super::{saturating_deadline, Schedule};
use crate::config::RetryPolicy;

/// What the budget says of a call's next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Send the next attempt at this instant (or when a connection is
    /// there, if later).
    RetryAt(Instant),
    /// Stop retrying; the call ends by the give-up rule (`classify.rs`).
    GiveUp(Exhausted),
}

/// Which limit of the budget ended a call. Its `Display` is the reason both
/// transports give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exhausted {
    /// `max` requests were sent.
    Attempts { max: u32 },
    /// The next attempt could not start within `max` of the first failure;
    /// `wait`: how far ahead it was drawn, when it was.
    Elapsed {
        max: Duration,
        wait: Option<Duration>,
    },
    /// The next attempt, `wait` ahead, would start at or after the call's
    /// deadline.
    Deadline { wait: Duration },
    /// The next attempt would start at or after the key's send limit: the
    /// key was first sent (or prepared) `retention` or more before, and the
    /// runtime may have forgotten it.
    KeyRetention { retention: Duration },
}

impl fmt::Display for Exhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exhausted::Attempts { max } => {
                write!(f, "the retry budget of {max} attempt(s) is spent")
            }
            Exhausted::Elapsed {
                max,
                wait: Some(wait),
            } => write!(
                f,
                "the next attempt ({wait:?} from now) would fall after the retry budget of {max:?}"
            ),
            Exhausted::Elapsed { max, wait: None } => {
                write!(f, "the retry budget of {max:?} is spent")
            }
            Exhausted::Deadline { wait } => write!(
                f,
                "the next attempt ({wait:?} from now) would pass the call's deadline"
            ),
            Exhausted::KeyRetention { retention } => write!(
                f,
                "the key was first sent {retention:?} or more before the next attempt, longer \
                 than the runtime keeps keys (runtime_key_retention): not sent again, since the \
                 runtime would run it afresh"
            ),
        }
    }
}

/// One call's retry budget: when its time runs out, and its place in the
/// backoff sequence. Both are set at the first failure: a call that goes
/// through first time carries two empty fields.
#[derive(Debug, Default)]
pub(crate) struct RetryBudget {
    /// `max_elapsed` after the first failure.
    ends_at: Option<Instant>,
    /// Boxed: most calls never retry.
    backoff: Option<Box<Schedule>>,
    /// No send of the key at or after this instant (module docs).
    send_limit: Option<SendLimit>,
}

/// The key's send limit: the instant, and the retention it came from (what
/// the give-up names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SendLimit {
    until: Instant,
    retention: Duration,
}

impl RetryBudget {
    /// Starts the budget's clock at the call's first failure; later
    /// failures leave it (a long call that fails late still gets its whole
    /// budget, and nothing restarts it).
    pub(crate) fn start(&mut self, policy: &RetryPolicy, now: Instant) {
        if self.ends_at.is_none() {
            self.ends_at = Some(saturating_deadline(now, policy.max_elapsed));
        }
    }

    /// No send of the key at or after `until` (the runtime forgets it
    /// then); the earliest limit set wins.
    pub(crate) fn no_send_after(&mut self, until: Instant, retention: Duration) {
        if self.send_limit.is_none_or(|limit| until < limit.until) {
            self.send_limit = Some(SendLimit { until, retention });
        }
    }

    /// A send of the key at `now`: the first one starts the runtime's
    /// memory of the key, `retention` long (later ones leave the limit).
    pub(crate) fn sent(&mut self, retention: Duration, now: Instant) {
        self.no_send_after(saturating_deadline(now, retention), retention);
    }

    /// Whether the key may be sent at `at`: before its send limit.
    pub(crate) fn may_send_at(&self, at: Instant) -> Result<(), Exhausted> {
        match self.send_limit {
            Some(limit) if at >= limit.until => Err(Exhausted::KeyRetention {
                retention: limit.retention,
            }),
            _ => Ok(()),
        }
    }

    /// The key's send limit, once set.
    pub(crate) fn send_limit(&self) -> Option<Instant> {
        self.send_limit.map(|limit| limit.until)
    }

    /// When the budget's time runs out, once started.
    pub(crate) fn ends_at(&self) -> Option<Instant> {
        self.ends_at
    }

    /// After a failure at `now` with `attempts` sent: starts the clock,
    /// draws the backoff's next delay (at least `floor`, the runtime's
    /// `Retry-After`) and judges an attempt then.
    pub(crate) fn after_failure(
        &mut self,
        policy: &RetryPolicy,
        attempts: u32,
        floor: Option<Duration>,
        deadline_at: Instant,
        now: Instant,
    ) -> Decision {
        self.start(policy, now);
        if attempts >= policy.max_attempts {
            // No delay is drawn for an attempt that will not be made.
            return Decision::GiveUp(Exhausted::Attempts {
                max: policy.max_attempts,
            });
        }
        let delay = self
            .backoff
            .get_or_insert_with(|| Box::new(policy.schedule()))
            .next_delay(floor);
        self.judge(
            policy,
            attempts,
            saturating_deadline(now, delay),
            deadline_at,
            now,
        )
    }

    /// After a failure at `now` whose next attempt waits `wait`, a delay
    /// not drawn from the backoff (an HTTP call's pause on the recovery
    /// ladder): starts the clock and judges an attempt then.
    // The HTTP binding's alone.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn after_wait(
        &mut self,
        policy: &RetryPolicy,
        attempts: u32,
        wait: Duration,
        deadline_at: Instant,
        now: Instant,
    ) -> Decision {
        self.start(policy, now);
        self.judge(
            policy,
            attempts,
            saturating_deadline(now, wait),
            deadline_at,
            now,
        )
    }

    /// Whether an attempt may start at `at` (the table at the top of this
    /// module), `attempts` sent so far. An unstarted budget has no time
    /// limit yet: nothing failed.
    pub(crate) fn judge(
        &self,
        policy: &RetryPolicy,
        attempts: u32,
        at: Instant,
        deadline_at: Instant,
        now: Instant,
    ) -> Decision {
        let wait = at.saturating_duration_since(now);
        if attempts >= policy.max_attempts {
            Decision::GiveUp(Exhausted::Attempts {
                max: policy.max_attempts,
            })
        } else if self.ends_at.is_some_and(|end| at >= end) {
            Decision::GiveUp(Exhausted::Elapsed {
                max: policy.max_elapsed,
                wait: (!wait.is_zero()).then_some(wait),
            })
        } else if at >= deadline_at {
            Decision::GiveUp(Exhausted::Deadline { wait })
        } else if let Err(why) = self.may_send_at(at) {
            Decision::GiveUp(why)
        } else {
            Decision::RetryAt(at)
        }
    }

    /// Whether the recovery ladder may take its next step at `now`: its
    /// re-sends look for an outcome the runtime holds, so only the budget's
    /// time bounds them, not the attempts; and the key's send limit, like
    /// every send.
    pub(crate) fn ladder_may_go_on(
        &self,
        policy: &RetryPolicy,
        now: Instant,
    ) -> Result<(), Exhausted> {
        match self.ends_at {
            Some(end) if now >= end => Err(Exhausted::Elapsed {
                max: policy.max_elapsed,
                wait: None,
            }),
            _ => self.may_send_at(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::exponential()
            .initial_delay(Duration::from_millis(1))
            .max_delay(Duration::from_millis(1))
            .max_attempts(3)
            .max_elapsed(Duration::from_secs(2))
    }

    const FAR: Duration = Duration::from_secs(3600);

    /// Row: `attempts >= max_attempts` gives up, whatever the time.
    #[test]
    fn the_attempt_limit_ends_the_call() {
        let (t0, policy) = (Instant::now(), policy());
        let mut budget = RetryBudget::default();
        let decision = budget.after_failure(&policy, 3, None, t0 + FAR, t0);
        assert_eq!(decision, Decision::GiveUp(Exhausted::Attempts { max: 3 }));
        assert_eq!(
            decision_text(decision),
            "the retry budget of 3 attempt(s) is spent"
        );
        // The clock started all the same: the first failure is this one.
        assert_eq!(budget.ends_at(), Some(t0 + Duration::from_secs(2)));
    }

    /// Row: after a failure, the next attempt is `now` + the jittered delay,
    /// at least the floor; the runtime's floor is honoured exactly.
    #[test]
    fn a_retry_is_at_the_backoff_delay_at_least_the_floor() {
        let (t0, policy) = (Instant::now(), policy());
        let mut budget = RetryBudget::default();
        let floor = Duration::from_millis(300);
        let decision = budget.after_failure(&policy, 1, Some(floor), t0 + FAR, t0);
        assert_eq!(decision, Decision::RetryAt(t0 + floor));
        // Without a floor: full jitter under the 1 ms ceiling.
        match budget.after_failure(&policy, 1, None, t0 + FAR, t0) {
            Decision::RetryAt(at) => assert!(at <= t0 + Duration::from_millis(1)),
            other => panic!("{other:?}"),
        }
    }

    /// Row: an attempt drawn after the budget's end gives up at once (the
    /// one give-up timing), naming the limit and how far ahead it was.
    #[test]
    fn an_attempt_past_the_budget_gives_up_at_once() {
        let (t0, policy) = (Instant::now(), policy());
        let mut budget = RetryBudget::default();
        let decision = budget.after_failure(&policy, 1, Some(FAR), t0 + 2 * FAR, t0);
        assert_eq!(
            decision,
            Decision::GiveUp(Exhausted::Elapsed {
                max: Duration::from_secs(2),
                wait: Some(FAR),
            })
        );
        assert_eq!(
            decision_text(decision),
            "the next attempt (3600s from now) would fall after the retry budget of 2s"
        );
    }

    /// Row: the budget's clock starts at the first failure and nothing
    /// restarts it; its end itself is outside (the budget is `[start, end)`).
    #[test]
    fn the_clock_runs_from_the_first_failure() {
        let (t0, policy) = (Instant::now(), policy());
        let mut budget = RetryBudget::default();
        let end = t0 + Duration::from_secs(2);
        budget.start(&policy, t0);
        budget.start(&policy, t0 + Duration::from_secs(1));
        assert_eq!(budget.ends_at(), Some(end));
        let before = end - Duration::from_millis(1);
        assert_eq!(
            budget.judge(&policy, 1, before, t0 + FAR, before),
            Decision::RetryAt(before)
        );
        assert_eq!(
            budget.judge(&policy, 1, end, t0 + FAR, end),
            Decision::GiveUp(Exhausted::Elapsed {
                max: Duration::from_secs(2),
                wait: None,
            })
        );
        // Nothing failed yet: no time limit.
        let fresh = RetryBudget::default();
        assert_eq!(
            fresh.judge(&policy, 0, t0 + FAR, t0 + 2 * FAR, t0),
            Decision::RetryAt(t0 + FAR)
        );
    }

    /// Row: an attempt at or after the call's deadline gives up at once.
    #[test]
    fn an_attempt_past_the_deadline_gives_up_at_once() {
        let (t0, policy) = (Instant::now(), policy().max_elapsed(FAR));
        let mut budget = RetryBudget::default();
        let wait = Duration::from_secs(5);
        let deadline = t0 + Duration::from_secs(3);
        let decision = budget.after_wait(&policy, 1, wait, deadline, t0);
        assert_eq!(decision, Decision::GiveUp(Exhausted::Deadline { wait }));
        assert_eq!(
            decision_text(decision),
            "the next attempt (5s from now) would pass the call's deadline"
        );
        let wait = Duration::from_secs(1);
        assert_eq!(
            budget.after_wait(&policy, 1, wait, deadline, t0),
            Decision::RetryAt(t0 + wait)
        );
    }

    /// Row: the recovery ladder is bounded by the budget's time only.
    #[test]
    fn the_ladder_is_bounded_by_time_not_attempts() {
        let (t0, policy) = (Instant::now(), policy());
        let mut budget = RetryBudget::default();
        assert_eq!(budget.ladder_may_go_on(&policy, t0 + FAR), Ok(()));
        budget.start(&policy, t0);
        assert_eq!(budget.ladder_may_go_on(&policy, t0), Ok(()));
        assert_eq!(
            budget.ladder_may_go_on(&policy, t0 + Duration::from_secs(2)),
            Err(Exhausted::Elapsed {
                max: Duration::from_secs(2),
                wait: None,
            })
        );
    }

    /// Row: no send at or after the key's send limit, whatever else the
    /// budget allows: the first send starts it, a journal's earlier record
    /// sets an earlier one, and a later send never extends it.
    #[test]
    fn no_send_at_or_after_the_key_retention() {
        let (t0, policy) = (Instant::now(), policy().max_elapsed(FAR).max_attempts(100));
        let retention = Duration::from_secs(1);
        let mut budget = RetryBudget::default();
        // Nothing sent yet: no limit.
        assert_eq!(budget.may_send_at(t0 + FAR), Ok(()));
        budget.sent(retention, t0);
        // A later send does not move it.
        budget.sent(retention, t0 + Duration::from_millis(900));
        assert_eq!(budget.send_limit(), Some(t0 + retention));
        let before = t0 + Duration::from_millis(999);
        assert_eq!(
            budget.judge(&policy, 1, before, t0 + FAR, t0),
            Decision::RetryAt(before)
        );
        let limited = Decision::GiveUp(Exhausted::KeyRetention { retention });
        assert_eq!(
            budget.judge(&policy, 1, t0 + retention, t0 + FAR, t0),
            limited
        );
        // A retry drawn past the limit (a long floor) gives up at once.
        assert_eq!(
            budget.after_failure(&policy, 1, Some(Duration::from_secs(2)), t0 + FAR, t0),
            limited
        );
        let text = decision_text(limited);
        assert!(text.contains("runtime_key_retention"), "{text}");
        // The ladder's re-sends too, though the budget's time goes on.
        budget.start(&policy, t0);
        assert_eq!(budget.ladder_may_go_on(&policy, before), Ok(()));
        assert_eq!(
            budget.ladder_may_go_on(&policy, t0 + retention),
            Err(Exhausted::KeyRetention { retention })
        );
        // A journal record prepared earlier sets an earlier limit; a later
        // one does not replace it.
        let mut budget = RetryBudget::default();
        let recorded = t0 + Duration::from_millis(300);
        budget.no_send_after(recorded, retention);
        budget.sent(retention, t0 + Duration::from_millis(100));
        assert_eq!(budget.send_limit(), Some(recorded));
        assert_eq!(
            budget.judge(&policy, 1, recorded, t0 + FAR, t0),
            Decision::GiveUp(Exhausted::KeyRetention { retention })
        );
    }

    fn decision_text(decision: Decision) -> String {
        match decision {
            Decision::GiveUp(why) => why.to_string(),
            Decision::RetryAt(_) => panic!("a retry, not a give-up"),
        }
    }
}
