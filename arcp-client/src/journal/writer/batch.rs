//! The writer thread: its loop (batches, back-off; renewals and purges are
//! in `upkeep.rs`), and each batch in named steps: commit (merge
//! transitions, decide prepares, one transaction), answer, requeue, serve.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

use arcp_types::IdempotencyKey;
use tokio::sync::oneshot;
use tracing::{debug, warn};

use super::commit::Committed;
use super::expiry::{expired_outcome, past_key_retention};
use super::queue::{Claimed, DriveGuard, DurableReply, Pending, PrepareReply, Prepared, Request};
use super::state::Writer;
use super::upkeep::extend_lease;
use super::{CLOSE_TIMEOUT, RECOVER_BATCH, RETRY_FIRST, RETRY_MAX, TRANSITION_LINGER};
use crate::journal::redaction::unrecoverable_outcome;
use crate::journal::{
    ClaimPosition, Journal, JournalEntry, JournalError, JournalErrorKind, JournalWrite, PurgeReport,
};
use crate::sync::{lock, wait_timeout};

/// One batch taken from the queue.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) prepares: Vec<(JournalEntry, PrepareReply)>,
    pub(super) transitions: HashMap<IdempotencyKey, Pending>,
    pub(super) durable: Vec<(IdempotencyKey, DurableReply)>,
    pub(super) requests: Vec<Request>,
}

impl Writer {
    pub(super) fn run(mut self, ready: oneshot::Sender<Result<PurgeReport, JournalError>>) {
        match self.purge() {
            Ok(report) => {
                if ready.send(Ok(report)).is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        }
        let mut next_purge = Instant::now() + self.retention.purge_interval;
        // Nothing is held yet: the first lease runs from now.
        if let Some(journal) = self.journal.as_deref() {
            extend_lease(&self.shared, journal, Instant::now());
        }
        let lease_interval = self.journal.as_deref().and_then(|j| j.lease_interval());
        let mut next_renew = lease_interval.map(|every| Instant::now() + every);
        loop {
            let (batch, closing) = {
                let mut q = lock(&self.shared.queue);
                // Sleep until there is something to commit: a prepare or a
                // request (someone waits), a transition due, a renewal or
                // a purge.
                let mut due = false;
                loop {
                    if !q.prepares.is_empty() || !q.requests.is_empty() || q.closing {
                        break;
                    }
                    let now = Instant::now();
                    let next_due = q.next_due(now);
                    if next_due.is_some_and(|at| at <= now) {
                        due = true;
                        break;
                    }
                    let wake_at = [Some(next_purge), next_renew, next_due]
                        .into_iter()
                        .flatten()
                        .min()
                        .unwrap_or(next_purge);
                    if now >= wake_at {
                        break;
                    }
                    q.asleep_until = Some(wake_at);
                    q = wait_timeout(&self.shared.wake, q, wake_at - now);
                    q.asleep_until = None;
                }
                // Only transitions due: nobody waits for them, so let them
                // ride on the next commit a prepare needs anyway (one fsync
                // for both) if one comes soon.
                let linger_until = Instant::now() + TRANSITION_LINGER;
                while due && q.prepares.is_empty() && q.requests.is_empty() && !q.closing {
                    let now = Instant::now();
                    if now >= linger_until {
                        break;
                    }
                    q.asleep_until = Some(linger_until);
                    q = wait_timeout(&self.shared.wake, q, linger_until - now);
                    q.asleep_until = None;
                }
                let all = q.closing || !q.requests.is_empty();
                // `durable` is taken whole: each waiter's terminal was queued
                // with it, under this lock, and a terminal is always due.
                let batch = Batch {
                    prepares: std::mem::take(&mut q.prepares),
                    transitions: q.take_transitions(Instant::now(), all),
                    durable: std::mem::take(&mut q.durable),
                    requests: std::mem::take(&mut q.requests),
                };
                if q.closing && batch.prepares.is_empty() && batch.transitions.is_empty() {
                    q.stopped = true;
                }
                (batch, q.stopped)
            };
            self.shared.space.notify_waiters();
            let close_waiters = self.process(batch);
            if !close_waiters.is_empty() || closing {
                self.stop();
                for waiter in close_waiters {
                    let _ = waiter.send(());
                }
                return;
            }
            if let (Some(every), Some(at)) = (lease_interval, next_renew) {
                if Instant::now() >= at {
                    self.renew();
                    next_renew = Some(Instant::now() + every);
                }
            }
            if let Some(delay) = self.retry_delay {
                self.back_off(delay);
            }
            if Instant::now() >= next_purge {
                if let Err(e) = self.purge() {
                    warn!(error = %e, "journal purge failed; retrying at the next interval");
                }
                next_purge = Instant::now() + self.retention.purge_interval;
            }
        }
    }

    /// Waits `delay` before retrying a batch the store could not take
    /// (closing too: a store that refuses connections at once would make
    /// the drain a busy loop).
    pub(super) fn back_off(&self, delay: Duration) {
        let until = Instant::now() + delay;
        let mut q = lock(&self.shared.queue);
        while !q.stopped {
            let now = Instant::now();
            if now >= until {
                break;
            }
            q = wait_timeout(&self.shared.wake, q, until - now);
        }
    }

    /// Closes the journal and fails whatever is still queued.
    pub(super) fn stop(&mut self) {
        let leftover = {
            let mut q = lock(&self.shared.queue);
            q.stopped = true;
            Batch {
                prepares: std::mem::take(&mut q.prepares),
                transitions: std::mem::take(&mut q.transitions),
                durable: std::mem::take(&mut q.durable),
                requests: std::mem::take(&mut q.requests),
            }
        };
        // Commit what can still be committed before letting go of the file.
        let waiters = self.process(leftover);
        self.journal = None;
        for waiter in waiters {
            let _ = waiter.send(());
        }
        self.shared.space.notify_waiters();
        debug!(journal = %self.shared.location, "journal closed");
    }

    /// Commits one batch and answers its requests. Returns the waiters of
    /// a requested close (answered once the journal is closed).
    pub(super) fn process(&mut self, batch: Batch) -> Vec<oneshot::Sender<()>> {
        let Some(journal) = self.journal.take() else {
            let err = self.shared.closed_error();
            for (_, reply) in batch.prepares {
                let _ = reply.send(Err(err.clone()));
            }
            for (_, reply) in batch.durable {
                let _ = reply.send(Err(err.clone()));
            }
            answer_closed(batch.requests, &err);
            return Vec::new();
        };
        let waiters = self.process_with(journal.as_ref(), batch);
        self.journal = Some(journal);
        waiters
    }

    /// One batch, in named steps: drop the prepares nobody waits for,
    /// [`commit`](Self::commit) (merge transitions, decide prepares, one
    /// transaction), then [`answer`](Self::answer) the waiters, or
    /// [`requeue`](Self::requeue) the batch when the store is unavailable;
    /// then serve the requests.
    pub(super) fn process_with(
        &mut self,
        journal: &dyn Journal,
        batch: Batch,
    ) -> Vec<oneshot::Sender<()>> {
        let Batch {
            prepares,
            transitions,
            durable,
            requests,
        } = batch;
        // A prepare whose caller stopped waiting is not written: nobody
        // would send it, and its caller may have been told it did not run
        // (that record comes in a later batch, and must find no prepare
        // after it).
        let prepares: Vec<(JournalEntry, PrepareReply)> = prepares
            .into_iter()
            .filter(|(_, reply)| !reply.is_closed())
            .collect();
        match self.commit(journal, &prepares, &transitions) {
            Ok(committed) => {
                self.retry_delay = None;
                self.unavailable_since = None;
                // The store answers again after this client's leases lapsed
                // (its drivers stopped): renew now, so the calls prepared
                // here are driven instead of stopping at once.
                if self.lease_lapsed() {
                    self.renew_on(journal);
                }
                self.answer(committed, prepares, durable);
            }
            Err(unavailable) => self.requeue(unavailable, prepares, transitions, durable),
        }
        self.serve(journal, requests)
    }

    /// Answers a committed batch's waiters.
    pub(super) fn answer(
        &mut self,
        committed: Committed,
        prepares: Vec<(JournalEntry, PrepareReply)>,
        durable: Vec<(IdempotencyKey, DurableReply)>,
    ) {
        let Committed {
            decisions,
            result,
            transitions,
            refused,
            doubtful,
        } = committed;
        for (key, reply) in durable {
            let answer = match &transitions {
                Err(e) => Err(e.clone()),
                Ok(()) if doubtful.contains(&key) => Err(JournalError::new(
                    JournalErrorKind::Io,
                    &self.shared.location,
                    format!(
                        "call {key}: its record is another caller's to finish, or may still \
                         be landing from a commit whose answer was lost"
                    ),
                )),
                Ok(()) if refused.contains(&key) => Err(JournalError::new(
                    JournalErrorKind::Fenced,
                    &self.shared.location,
                    format!("call {key}: another worker owns it; its outcome was not recorded"),
                )),
                Ok(()) => Ok(()),
            };
            let _ = reply.send(answer);
        }
        let mut driving = Vec::new();
        for ((entry, reply), (decision, wrote)) in prepares.into_iter().zip(decisions) {
            let key = entry.key;
            let answer = match (decision, &result) {
                (Ok(_), Err(e)) if wrote => Err(e.clone()),
                (Ok(Prepared::Proceed(prior)), Ok(())) => {
                    if refused.contains(&key) {
                        Err(JournalError::new(
                            JournalErrorKind::Fenced,
                            &self.shared.location,
                            format!("call {key}: another live worker owns it"),
                        ))
                    } else {
                        driving.push(key);
                        Ok(Prepared::Proceed(prior))
                    }
                }
                (d, _) => d,
            };
            let _ = reply.send(answer);
        }
        if !driving.is_empty() {
            // Driven here again: an old fence no longer applies.
            let mut fenced = lock(&self.shared.fenced);
            for key in &driving {
                fenced.remove(key);
            }
        }
        self.shared.fence(
            refused
                .into_iter()
                .filter(|k| !driving.contains(k))
                .collect(),
        );
    }

    /// Puts a batch the store could not take back in the queue, ahead of
    /// what came since, and backs off before the next try. Its callers keep
    /// waiting, each within its own deadline (a caller that gives up is
    /// dropped from the queue, see [`process_with`](Self::process_with)). A
    /// stopped journal answers them with the store's error instead.
    pub(super) fn requeue(
        &mut self,
        unavailable: JournalError,
        prepares: Vec<(JournalEntry, PrepareReply)>,
        transitions: HashMap<IdempotencyKey, Pending>,
        durable: Vec<(IdempotencyKey, DurableReply)>,
    ) {
        // These prepares' commit may still land.
        for (entry, _) in &prepares {
            self.may_land(entry);
        }
        let since = *self.unavailable_since.get_or_insert_with(Instant::now);
        let mut q = lock(&self.shared.queue);
        // Every handle is gone and the store stays away: stop waiting for it.
        if q.closing && since.elapsed() >= CLOSE_TIMEOUT {
            q.stopped = true;
        }
        if q.stopped {
            drop(q);
            for (_, reply) in prepares {
                let _ = reply.send(Err(unavailable.clone()));
            }
            for (_, reply) in durable {
                let _ = reply.send(Err(unavailable.clone()));
            }
            return;
        }
        let newer = std::mem::replace(&mut q.prepares, prepares);
        q.prepares.extend(newer);
        for (key, older) in transitions {
            let merged = match q.transitions.remove(&key) {
                Some(newer) => older.then(newer),
                None => older,
            };
            q.transitions.insert(key, merged);
        }
        let newer = std::mem::replace(&mut q.durable, durable);
        q.durable.extend(newer);
        drop(q);
        let delay = self
            .retry_delay
            .map_or(RETRY_FIRST, |d| (d * 2).min(RETRY_MAX));
        self.retry_delay = Some(delay);
        warn!(
            journal = %self.shared.location,
            error = %unavailable,
            retry_in = ?delay,
            "the journal is unavailable; its writes wait (each call within its deadline)"
        );
    }

    /// Serves the batch's requests (reads, claims, removals, a close).
    /// Returns the waiters of a requested close.
    pub(super) fn serve(
        &mut self,
        journal: &dyn Journal,
        requests: Vec<Request>,
    ) -> Vec<oneshot::Sender<()>> {
        let mut close = Vec::new();
        for request in requests {
            match request {
                Request::Get(key, reply) => {
                    let _ = reply.send(journal.get(&key));
                }
                Request::Unfinished(after, reply) => {
                    // Calls this client drives, and those it is preparing: a
                    // prepare retried after the store went away may have
                    // landed without this journal knowing it holds it.
                    let mut driving: HashSet<IdempotencyKey> =
                        lock(&self.shared.driving).keys().cloned().collect();
                    driving.extend(self.unsure.iter().cloned());
                    driving.extend(
                        lock(&self.shared.queue)
                            .prepares
                            .iter()
                            .map(|(e, _)| e.key.clone()),
                    );
                    // In batches: a worker never takes more at once than it
                    // can start driving soon (a fleet's other workers take
                    // the rest).
                    let limit = self.retention.max_records.min(RECOVER_BATCH);
                    let claimed =
                        journal
                            .claim_after(limit, &driving, after.as_ref())
                            .map(|entries| Claimed {
                                last: entries.iter().map(ClaimPosition::of).max(),
                                calls: self
                                    .end_expired(journal, entries)
                                    .into_iter()
                                    .map(|e| {
                                        // Recovered here: an old fence no
                                        // longer applies.
                                        lock(&self.shared.fenced).remove(&e.key);
                                        let held = DriveGuard::new(&self.shared, &e.key);
                                        (e, held)
                                    })
                                    .collect(),
                            });
                    // A `recover` that gave up waiting (cancelled, timed
                    // out) never hands these calls to anyone: give them back.
                    if let Err(Ok(claimed)) = reply.send(claimed) {
                        for (e, held) in claimed.calls {
                            drop(held);
                            self.shared.note(&e.key, |p| p.released = true);
                        }
                    }
                }
                Request::Discard(key, reply) => {
                    let _ = reply.send(self.discard(journal, &key));
                }
                Request::Close(reply) => close.push(reply),
            }
        }
        close
    }

    /// Of the claimed `entries`, those prepared longer ago than the runtime
    /// remembers keys, and those whose arguments the redaction hook changed
    /// (re-sent, they would send other arguments under the key), are ended
    /// "outcome unknown" instead of being handed out (re-sent, they would
    /// run afresh); the rest are returned. One whose ending cannot be
    /// written stays unfinished, and is not handed out either.
    pub(super) fn end_expired(
        &self,
        journal: &dyn Journal,
        entries: Vec<JournalEntry>,
    ) -> Vec<JournalEntry> {
        let now = SystemTime::now();
        let retention = self.runtime_key_retention;
        let (expired, live): (Vec<JournalEntry>, Vec<JournalEntry>) = entries
            .into_iter()
            .partition(|e| past_key_retention(e, retention, now) || e.is_redacted());
        if expired.is_empty() {
            return live;
        }
        let writes: Vec<JournalWrite> = expired
            .iter()
            .map(|e| {
                let outcome = if past_key_retention(e, retention, now) {
                    warn!(
                        key = %e.key,
                        tool = %e.tool,
                        "unfinished call older than the runtime's key retention: ended outcome \
                         unknown, not re-sent"
                    );
                    expired_outcome(e, retention, now)
                } else {
                    warn!(
                        key = %e.key,
                        tool = %e.tool,
                        "unfinished call whose recorded arguments were redacted: ended outcome \
                         unknown (not recoverable), not re-sent"
                    );
                    unrecoverable_outcome(e)
                };
                JournalWrite::Terminal {
                    key: e.key.clone(),
                    outcome,
                    at: now,
                }
            })
            .collect();
        if let Err(e) = journal.apply(&writes) {
            warn!(error = %e, "journal write failed; the expired calls stay unfinished (never re-sent)");
        }
        live
    }
}

pub(super) fn answer_closed(requests: Vec<Request>, err: &JournalError) {
    for request in requests {
        match request {
            Request::Get(_, reply) => {
                let _ = reply.send(Err(err.clone()));
            }
            Request::Unfinished(_, reply) => {
                let _ = reply.send(Err(err.clone()));
            }
            Request::Discard(_, reply) => {
                let _ = reply.send(Err(err.clone()));
            }
            Request::Close(reply) => {
                let _ = reply.send(());
            }
        }
    }
}
