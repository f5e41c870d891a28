//! [`Writer`]: the writer thread's state, which the loop (`batch.rs`) and
//! the commit steps (`commit.rs`) both work on; and what becomes of the
//! queue when the writer ends, however it ends.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arcp_types::IdempotencyKey;

use super::late_writes::{LateWrites, MAX_LANDING};
use super::queue::Shared;
use crate::journal::rows::to_millis;
use crate::journal::{Journal, JournalEntry, Retention};
use crate::sync::lock;

/// The writer thread's state.
pub(super) struct Writer {
    /// `None` once closed.
    pub(super) journal: Option<Box<dyn Journal>>,
    pub(super) shared: Arc<Shared>,
    pub(super) retention: Retention,
    /// Records in the journal (from the last purge, plus inserts since).
    pub(super) records: u64,
    /// Set while the store is unavailable: how long to wait before the
    /// next try.
    pub(super) retry_delay: Option<Duration>,
    /// Since when the store has been unavailable.
    pub(super) unavailable_since: Option<Instant>,
    /// Keys whose prepare was in a commit whose fate is unknown (the store
    /// did not answer): their record may land late, so a "did not run"
    /// terminal for them is never taken as durable. Pruned when the key's
    /// prepare commits, or its call ends (terminal or release).
    pub(super) unsure: HashSet<IdempotencyKey>,
    /// The prepares (trace id, prepare time in ms) whose commit went
    /// unanswered, by key: their record may land late whatever became of
    /// their call (a release does not stop it), so until the key's record
    /// is committed, another call's prepare of the key is in doubt.
    pub(super) landing: HashMap<IdempotencyKey, Vec<(String, i64)>>,
    /// Keys with a write in a commit the store did not answer, which may
    /// land at any later time over the key's record as it is then.
    pub(super) late_writes: LateWrites,
    /// How long the runtime remembers a key: a record prepared longer ago
    /// is never sent again (the runtime would run it afresh).
    pub(super) runtime_key_retention: Duration,
}

impl Writer {
    /// `entry`'s prepare went out in a commit that was not answered: its
    /// record may land late.
    pub(super) fn may_land(&mut self, entry: &JournalEntry) {
        self.unsure.insert(entry.key.clone());
        // Past the bound the marks are dropped: a later prepare of one of
        // those keys is then not in doubt for them, but a key with no
        // record never proves "did not run" anyway (it says "not sent").
        if self.landing.len() >= MAX_LANDING && !self.landing.contains_key(&entry.key) {
            self.landing.clear();
        }
        let mark = (entry.trace_id.clone(), to_millis(entry.created_at));
        let marks = self.landing.entry(entry.key.clone()).or_default();
        if !marks.contains(&mark) {
            marks.push(mark);
        }
    }

    /// `key`'s record is committed: a late prepare of it finds it there
    /// and inserts nothing.
    pub(super) fn landed(&mut self, key: &IdempotencyKey) {
        self.unsure.remove(key);
        self.landing.remove(key);
    }

    /// What a prepare of a key with no record knows of it: in doubt if
    /// another call's prepare of the key may still land (a recovery would
    /// send that record).
    pub(super) fn prior_of_new(&self, entry: &JournalEntry) -> super::queue::Prior {
        let own = (entry.trace_id.clone(), to_millis(entry.created_at));
        // Or a late write of the key (a removal, say) may have taken away
        // the record of a call that ran.
        let in_doubt = self
            .landing
            .get(&entry.key)
            .is_some_and(|marks| marks.iter().any(|mark| *mark != own))
            || self.late_writes.may_overwrite(&entry.key);
        super::queue::Prior {
            in_doubt,
            ..super::queue::Prior::default()
        }
    }
}

impl Drop for Writer {
    /// However the writer ends (even by a panic in a `Journal`
    /// implementation), nothing waits on it forever: queued work is
    /// dropped, which fails each waiter with `JOURNAL_CLOSED`.
    fn drop(&mut self) {
        let leftover = {
            let mut q = lock(&self.shared.queue);
            let leftover = std::mem::take(&mut *q);
            q.stopped = true;
            q.closing = true;
            leftover
        };
        drop(leftover);
        self.shared.space.notify_waiters();
    }
}
