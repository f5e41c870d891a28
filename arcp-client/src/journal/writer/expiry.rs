//! Records older than the runtime's memory of keys: never sent again.
//!
//! A runtime keeps an idempotency key for a finite time (the Python
//! runtime 24 hours by default); past it, a re-sent key is a new call and
//! the tool runs again. A record's age counts from its prepare, which comes
//! before its first send: the `sent` mark is written asynchronously (a
//! crash may lose it), so the prepare is the only time known to be no later
//! than the first send. A record re-driven after an outcome-unknown ending
//! keeps that first time.
//!
//! The prepare time is the writer's clock, the age this process's: a record
//! dated ahead of this clock was written on a clock that runs ahead (or
//! this one stepped back). Within [`CLOCK_AHEAD_ALLOWANCE`] it counts as
//! new; beyond it, its age is unknown, and an unknown age is as good as
//! past the retention (never sent again).

use std::time::{Duration, SystemTime};

use crate::journal::{JournalEntry, JournalOutcome, JournalState};

/// How far ahead of this clock a record may be dated and still count as
/// new: clocks kept by NTP differ by far less.
pub(super) const CLOCK_AHEAD_ALLOWANCE: Duration = Duration::from_secs(60);

/// Whether `entry`, prepared at `created_at`, may have been first sent
/// longer ago than the runtime remembers keys (`retention`), at `now`.
pub(super) fn past_key_retention(
    entry: &JournalEntry,
    retention: Duration,
    now: SystemTime,
) -> bool {
    match now.duration_since(entry.created_at) {
        Ok(age) => age >= retention,
        Err(ahead) => ahead.duration() > CLOCK_AHEAD_ALLOWANCE,
    }
}

/// The ending of `entry` past the runtime's key retention, "outcome
/// unknown": the runtime no longer knows its key, so sending it again could
/// run the tool a second time.
pub(super) fn expired_outcome(
    entry: &JournalEntry,
    retention: Duration,
    now: SystemTime,
) -> JournalOutcome {
    let millis = |d: Duration| Duration::from_millis(d.as_millis().try_into().unwrap_or(u64::MAX));
    let age = match now.duration_since(entry.created_at) {
        Ok(age) => format!(
            "first sent up to {:?} ago, longer than the runtime keeps keys",
            millis(age)
        ),
        Err(ahead) => format!(
            "dated {:?} ahead of this clock (written on a clock that runs ahead), so first sent \
             at an unknown time, possibly longer ago than the runtime keeps keys",
            millis(ahead.duration())
        ),
    };
    JournalOutcome::OutcomeUnknown {
        job_id: entry.job_id().map(str::to_owned),
        reason: format!(
            "{age} (runtime_key_retention {retention:?}): not sent again, since the runtime \
             would run it afresh"
        ),
        attempts: entry.attempts,
    }
}

/// `entry` as it ends past the runtime's key retention.
pub(super) fn ended_unknown(
    entry: &JournalEntry,
    retention: Duration,
    now: SystemTime,
) -> JournalEntry {
    let mut ended = entry.clone();
    ended.state = JournalState::Terminal(expired_outcome(entry, retention, now));
    ended.updated_at = now;
    ended
}

#[cfg(test)]
mod tests {
    use super::*;
    use arcp_types::IdempotencyKey;

    #[test]
    fn age_counts_from_the_prepare_and_ends_outcome_unknown() {
        let now = SystemTime::now();
        let mut e = JournalEntry::new(
            IdempotencyKey::new(),
            "t",
            "{}",
            "0",
            Duration::from_secs(1),
        );
        e.created_at = now - Duration::from_secs(100);
        e.updated_at = now;
        e.state = JournalState::Accepted {
            job_id: "job_1".into(),
        };
        assert!(past_key_retention(&e, Duration::from_secs(100), now));
        assert!(!past_key_retention(&e, Duration::from_secs(101), now));
        // Dated ahead of this clock: new within the allowance, of unknown
        // age (as good as past) beyond it.
        e.created_at = now + CLOCK_AHEAD_ALLOWANCE;
        assert!(!past_key_retention(&e, Duration::from_secs(100), now));
        e.created_at = now + CLOCK_AHEAD_ALLOWANCE + Duration::from_secs(1);
        assert!(past_key_retention(&e, Duration::from_secs(100), now));
        match expired_outcome(&e, Duration::from_secs(100), now) {
            JournalOutcome::OutcomeUnknown { reason, .. } => {
                assert!(reason.contains("ahead of this clock"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        e.created_at = now - Duration::from_secs(100);
        let ended = ended_unknown(&e, Duration::from_secs(100), now);
        match ended.state {
            JournalState::Terminal(JournalOutcome::OutcomeUnknown { job_id, reason, .. }) => {
                assert_eq!(job_id.as_deref(), Some("job_1"));
                assert!(reason.contains("runtime_key_retention"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
}
