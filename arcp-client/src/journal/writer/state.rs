//! [`Writer`]: the writer thread's state, which the loop (`batch.rs`) and
//! the commit steps (`commit.rs`) both work on; and what becomes of the
//! queue when the writer ends, however it ends.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arcp_types::IdempotencyKey;

use super::queue::Shared;
use crate::journal::{Journal, Retention};
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
    /// How long the runtime remembers a key: a record prepared longer ago
    /// is never sent again (the runtime would run it afresh).
    pub(super) runtime_key_retention: Duration,
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
