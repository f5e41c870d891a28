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
//! written on a clock that runs ahead (another worker's, or this one's
//! before it stepped back) looks younger than it is. So the retention is
//! used less a margin for that ([`clock_margin`]: a tenth of it, at most
//! [`CLOCK_AHEAD_ALLOWANCE`]), and a record dated further ahead of this
//! clock than the margin has an unknown age, as good as past the retention
//! (never sent again).

use std::time::{Duration, SystemTime};

use crate::journal::{JournalEntry, JournalOutcome, JournalState};

/// The most the margin for clocks that run ahead takes off a retention:
/// clocks kept by NTP differ by far less.
pub(super) const CLOCK_AHEAD_ALLOWANCE: Duration = Duration::from_secs(60);

/// How far ahead of this clock a writer's clock may run, for `retention`:
/// a tenth of it, at most [`CLOCK_AHEAD_ALLOWANCE`].
pub(super) fn clock_margin(retention: Duration) -> Duration {
    (retention / 10).min(CLOCK_AHEAD_ALLOWANCE)
}

/// How long a key first prepared at `first` (on the writer's clock) may
/// still be sent at `now`: the retention less the margin, less the age.
pub(super) fn send_time_left(first: SystemTime, retention: Duration, now: SystemTime) -> Duration {
    let margin = clock_margin(retention);
    let usable = retention - margin;
    match now.duration_since(first) {
        Ok(age) => usable.saturating_sub(age),
        Err(ahead) if ahead.duration() <= margin => usable,
        Err(_) => Duration::ZERO,
    }
}

/// Whether `entry`, prepared at `created_at`, may have been first sent
/// longer ago than the runtime remembers keys (`retention`), at `now`.
pub(super) fn past_key_retention(
    entry: &JournalEntry,
    retention: Duration,
    now: SystemTime,
) -> bool {
    send_time_left(entry.created_at, retention, now).is_zero()
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
        // Past a retention less its margin (a tenth, at most a minute).
        assert!(past_key_retention(&e, Duration::from_secs(100), now));
        assert!(past_key_retention(&e, Duration::from_secs(111), now));
        assert!(!past_key_retention(&e, Duration::from_secs(112), now));
        // The margin is at most a minute.
        let mut old = e.clone();
        old.created_at = now - Duration::from_secs(940);
        assert!(past_key_retention(&old, Duration::from_secs(1000), now));
        old.created_at = now - Duration::from_secs(939);
        assert!(!past_key_retention(&old, Duration::from_secs(1000), now));
        // Dated ahead of this clock: new within the margin, of unknown age
        // (as good as past) beyond it.
        let day = Duration::from_secs(86_400);
        e.created_at = now + CLOCK_AHEAD_ALLOWANCE;
        assert!(!past_key_retention(&e, day, now));
        assert_eq!(
            send_time_left(e.created_at, day, now),
            day - CLOCK_AHEAD_ALLOWANCE
        );
        e.created_at = now + CLOCK_AHEAD_ALLOWANCE + Duration::from_secs(1);
        assert!(past_key_retention(&e, day, now));
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
