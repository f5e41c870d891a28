//! A journal in memory: lookups and the journal's bookkeeping without
//! durability. For tests, and for processes that only want
//! [`Client::lookup`](crate::Client::lookup).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use arcp_types::IdempotencyKey;

use crate::sync::lock;

use super::{
    ClaimPosition, Journal, JournalEntry, JournalError, JournalState, JournalWrite, PurgeReport,
    Retention,
};

/// A [`Journal`] in memory. It survives nothing (not even the client): a
/// restarted process finds it empty. Bounded by the client's [`Retention`].
///
/// ```
/// # async fn demo() -> Result<(), arcp_sdk::Error> {
/// use arcp_sdk::{Client, MemoryJournal};
/// let client = Client::builder("ws://127.0.0.1:7777/arcp")
///     .journal(MemoryJournal::new())
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct MemoryJournal {
    records: Mutex<HashMap<IdempotencyKey, JournalEntry>>,
}

impl MemoryJournal {
    /// An empty journal.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<IdempotencyKey, JournalEntry>> {
        // A panic while holding the lock cannot leave a half-applied batch
        // (see `apply`), so a poisoned map is still consistent.
        lock(&self.records)
    }
}

impl Journal for MemoryJournal {
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError> {
        let mut records = self.lock();
        for write in writes {
            apply_one(&mut records, write);
        }
        Ok(())
    }

    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError> {
        Ok(self.lock().get(key).cloned())
    }

    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        let records = self.lock();
        let mut out: Vec<JournalEntry> = records
            .values()
            .filter(|e| !e.is_terminal())
            .cloned()
            .collect();
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.key.cmp(&b.key)));
        out.truncate(limit);
        Ok(out)
    }

    fn claim_after(
        &self,
        limit: usize,
        driving: &HashSet<IdempotencyKey>,
        after: Option<&ClaimPosition>,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        let records = self.lock();
        let mut out: Vec<&JournalEntry> = records
            .values()
            .filter(|e| !e.is_terminal() && !driving.contains(&e.key))
            .filter(|e| after.is_none_or(|after| after.is_before(e)))
            .collect();
        // The `limit` first in the claim order, without sorting (or
        // cloning) the rest: a claim costs one scan however deep the pass.
        let order = |a: &&JournalEntry, b: &&JournalEntry| {
            (a.created_at, &a.key).cmp(&(b.created_at, &b.key))
        };
        if out.len() > limit && limit > 0 {
            out.select_nth_unstable_by(limit - 1, order);
        }
        out.truncate(limit);
        out.sort_unstable_by(order);
        Ok(out.into_iter().cloned().collect())
    }

    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError> {
        let mut records = self.lock();
        let mut report = PurgeReport::default();
        let older =
            |e: &JournalEntry, ttl| now.duration_since(e.updated_at).is_ok_and(|age| age > ttl);
        records.retain(|_, e| {
            let (expired, counter) = if e.is_terminal() {
                (
                    older(e, retention.terminal_ttl),
                    &mut report.expired_terminal,
                )
            } else {
                (
                    older(e, retention.unfinished_ttl),
                    &mut report.expired_unfinished,
                )
            };
            if expired {
                *counter += 1;
            }
            !expired
        });
        if records.len() > retention.max_records {
            let mut terminal: Vec<(SystemTime, IdempotencyKey)> = records
                .values()
                .filter(|e| e.is_terminal())
                .map(|e| (e.updated_at, e.key.clone()))
                .collect();
            terminal.sort();
            let excess = records.len() - retention.max_records;
            for (_, key) in terminal.into_iter().take(excess) {
                records.remove(&key);
                report.evicted += 1;
            }
        }
        report.remaining = records.len() as u64;
        report.unfinished = records.values().filter(|e| !e.is_terminal()).count() as u64;
        Ok(report)
    }

    fn location(&self) -> String {
        "memory".into()
    }
}

/// One write, with the semantics documented on [`Journal::apply`].
fn apply_one(records: &mut HashMap<IdempotencyKey, JournalEntry>, write: &JournalWrite) {
    match write {
        JournalWrite::Prepare(entry) => {
            records.insert(entry.key.clone(), entry.clone());
        }
        JournalWrite::Remove { key } => {
            records.remove(key);
        }
        // One client owns everything: nothing to give up.
        JournalWrite::Release { .. } => {}
        JournalWrite::Sent { key, .. }
        | JournalWrite::Accepted { key, .. }
        | JournalWrite::Terminal { key, .. } => {
            if let Some(e) = records.get_mut(key) {
                transition(e, write);
            }
        }
    }
}

/// Applies a `Sent`, `Accepted` or `Terminal` write to one record (the
/// others are ignored): the state only moves forward.
pub(crate) fn transition(e: &mut JournalEntry, write: &JournalWrite) {
    match write {
        JournalWrite::Sent { attempts, at, .. } if !e.is_terminal() => {
            e.attempts = e.attempts.max(*attempts);
            if e.state == JournalState::Prepared {
                e.state = JournalState::Sent;
            }
            e.updated_at = *at;
        }
        JournalWrite::Accepted { job_id, at, .. } if !e.is_terminal() => {
            e.state = JournalState::Accepted {
                job_id: job_id.clone(),
            };
            e.updated_at = *at;
        }
        // A terminal record is final: a second outcome changes nothing.
        JournalWrite::Terminal { outcome, at, .. } if !e.is_terminal() => {
            e.attempts = e.attempts.max(outcome.attempts());
            e.state = JournalState::Terminal(outcome.clone());
            e.updated_at = *at;
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::journal::JournalWrite;

    #[test]
    fn a_claim_after_a_place_hands_out_the_oldest_after_it_in_order() {
        let journal = MemoryJournal::new();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        // 50 records, two per instant, written in a scrambled order.
        let writes: Vec<JournalWrite> = (0..50)
            .map(|i| (i * 37) % 50)
            .map(|i: u64| {
                let key = IdempotencyKey::try_from(format!("k{i:02}")).unwrap();
                let mut e = JournalEntry::new(
                    key,
                    "t",
                    "{}",
                    "0123456789abcdef0123456789abcdef",
                    Duration::from_secs(1),
                );
                e.created_at = t0 + Duration::from_secs(i / 2);
                JournalWrite::Prepare(e)
            })
            .collect();
        journal.apply(&writes).unwrap();
        let driving: HashSet<IdempotencyKey> = [IdempotencyKey::try_from("k11").unwrap()].into();
        let keys = |after: Option<&ClaimPosition>| -> Vec<String> {
            journal
                .claim_after(5, &driving, after)
                .unwrap()
                .iter()
                .map(|e| e.key.as_str().to_owned())
                .collect()
        };
        assert_eq!(keys(None), ["k00", "k01", "k02", "k03", "k04"]);
        let place = ClaimPosition {
            created_at: t0 + Duration::from_secs(4),
            key: IdempotencyKey::try_from("k08").unwrap(),
        };
        // After k08 (same instant: k09), and never k11 (driven here).
        assert_eq!(keys(Some(&place)), ["k09", "k10", "k12", "k13", "k14"]);
        let last = ClaimPosition {
            created_at: t0 + Duration::from_secs(24),
            key: IdempotencyKey::try_from("k49").unwrap(),
        };
        assert!(keys(Some(&last)).is_empty());
    }
}
