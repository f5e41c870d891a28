//! What the writer is asked to do, and the state it shares with the
//! client's handles: the queue (prepares, merged transitions, durable
//! waiters, requests), the calls driven here and those fenced.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arcp_types::IdempotencyKey;
use tokio::sync::{oneshot, watch, Notify};
use tracing::warn;

use super::MARK_DELAY;
use crate::journal::rows::to_millis;
use crate::journal::{
    ClaimPosition, JournalEntry, JournalError, JournalErrorKind, JournalOutcome, JournalState,
    JournalWrite,
};
use crate::sync::lock;

/// What `prepare` decided.
#[derive(Debug, PartialEq)]
pub(super) enum Prepared {
    /// Send the call: a new record, or a record with this intent that an
    /// earlier attempt (this process's or another's) may have sent.
    Proceed(Prior),
    /// The key already ended with this intent: the recorded outcome.
    Answer(JournalEntry),
    /// The key is recorded with a different intent.
    Conflict(JournalEntry),
}

pub(super) enum Request {
    Get(
        IdempotencyKey,
        oneshot::Sender<Result<Option<JournalEntry>, JournalError>>,
    ),
    /// A claim for a recovery, of the calls after a place in the claim
    /// order (a recovery pass's last claim) or from the start.
    Unfinished(
        Option<ClaimPosition>,
        oneshot::Sender<Result<Claimed, JournalError>>,
    ),
    Discard(IdempotencyKey, oneshot::Sender<Result<bool, JournalError>>),
    Close(oneshot::Sender<()>),
}

/// What a claim for a recovery brought.
#[derive(Default)]
pub(crate) struct Claimed {
    /// The calls handed out, oldest first, each counted as driven here
    /// while its guard lives (until its own prepare counts it).
    pub(crate) calls: Vec<(JournalEntry, DriveGuard)>,
    /// The place of the last call the claim took, handed out or not (it
    /// may have ended calls past the runtime's key retention instead):
    /// `None` when it took none, so nothing is left to claim.
    pub(crate) last: Option<ClaimPosition>,
}

/// Transitions recorded for one key since the last commit.
#[derive(Default, Clone)]
pub(super) struct Pending {
    pub(super) sent: Option<(u32, SystemTime)>,
    pub(super) accepted: Option<(String, SystemTime)>,
    pub(super) terminal: Option<(JournalOutcome, SystemTime)>,
    /// The client stopped driving the call without an outcome.
    pub(super) released: bool,
    /// When the oldest of these transitions was noted: sent and accepted
    /// marks wait up to [`MARK_DELAY`] from then for the call's end, so a
    /// call that ends soon writes one record change instead of three.
    pub(super) since: Option<Instant>,
}

impl Pending {
    /// These transitions followed by `newer` ones, as one.
    pub(super) fn then(self, newer: Pending) -> Pending {
        Pending {
            sent: match (self.sent, newer.sent) {
                (Some(a), Some(b)) => Some(if b.0 >= a.0 { b } else { a }),
                (a, b) => b.or(a),
            },
            released: newer.released || (self.released && newer.terminal.is_none()),
            accepted: newer.accepted.or(self.accepted),
            terminal: newer.terminal.or(self.terminal),
            since: match (self.since, newer.since) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }

    /// By when these transitions must be committed: at once for an end
    /// (a terminal, a release), else [`MARK_DELAY`] after the oldest mark.
    pub(super) fn due(&self) -> Option<Instant> {
        if self.terminal.is_some() || self.released {
            return None;
        }
        self.since
            .map(|since| crate::retry::saturating_deadline(since, MARK_DELAY))
    }

    /// Whether these transitions are to be committed with a batch taken
    /// at `now`.
    pub(super) fn is_due(&self, now: Instant) -> bool {
        self.due().is_none_or(|due| due <= now)
    }

    /// The writes these transitions make. A terminal write carries the
    /// attempts and the job (every store takes the higher count and keeps
    /// a known job), so the sent and accepted marks of a call that ended
    /// since the last commit ride in it: one statement per call instead of
    /// three.
    pub(super) fn writes(self, key: &IdempotencyKey) -> Vec<JournalWrite> {
        if let Some((outcome, at)) = self.terminal {
            return vec![JournalWrite::Terminal {
                key: key.clone(),
                outcome,
                at,
            }];
        }
        let mut out = Vec::with_capacity(3);
        if let Some((attempts, at)) = self.sent {
            out.push(JournalWrite::Sent {
                key: key.clone(),
                attempts,
                at,
            });
        }
        if let Some((job_id, at)) = self.accepted {
            out.push(JournalWrite::Accepted {
                key: key.clone(),
                job_id,
                at,
            });
        }
        if self.released {
            out.push(JournalWrite::Release { key: key.clone() });
        }
        out
    }
}

/// What the journal knew of a key before this call: whether an earlier
/// attempt may have sent it, the job the runtime bound it to, and when its
/// record was first prepared (no later than its first send).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Prior {
    pub(super) in_doubt: bool,
    pub(super) job_id: Option<String>,
    /// `None`: a new record, prepared by this call.
    pub(super) first_prepared: Option<SystemTime>,
}

impl Prior {
    /// What `existing`, a record with this intent that is unfinished or
    /// ended with its outcome unknown, says of `entry`'s call: it may have
    /// run, unless it is this very call's own record, still only prepared
    /// (its prepare committed, though the store's answer was lost).
    pub(super) fn of(existing: &JournalEntry, entry: &JournalEntry) -> Prior {
        // Stores keep times in milliseconds.
        let own = existing.trace_id == entry.trace_id
            && to_millis(existing.created_at) == to_millis(entry.created_at)
            && existing.state == JournalState::Prepared;
        Prior {
            in_doubt: !own,
            job_id: existing.job_id().map(str::to_owned),
            first_prepared: Some(existing.created_at),
        }
    }
}

pub(super) type PrepareReply = oneshot::Sender<Result<Prepared, JournalError>>;

/// Told once a terminal write is durable, or why it is not.
pub(super) type DurableReply = oneshot::Sender<Result<(), JournalError>>;

#[derive(Default)]
pub(super) struct Queue {
    pub(super) prepares: Vec<(JournalEntry, PrepareReply)>,
    /// Transitions per key, merged; each committed once
    /// [due](Pending::is_due) (or with a batch that reads or closes).
    pub(super) transitions: HashMap<IdempotencyKey, Pending>,
    /// Callers waiting for their terminal write to be durable.
    pub(super) durable: Vec<(IdempotencyKey, DurableReply)>,
    pub(super) requests: Vec<Request>,
    /// Every handle is gone: drain and stop.
    pub(super) closing: bool,
    /// The writer stopped; nothing is accepted any more.
    pub(super) stopped: bool,
    /// Until when the writer sleeps, while it does: a producer wakes it
    /// only if it would not wake in time by itself (each wake is a system
    /// call, and a call notes up to three transitions).
    pub(super) asleep_until: Option<Instant>,
}

impl Queue {
    /// The earliest instant a queued transition is due (`now` if one is).
    pub(super) fn next_due(&self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for p in self.transitions.values() {
            let due = p.due().map_or(now, |d| d.max(now));
            if due == now {
                return Some(now);
            }
            next = Some(next.map_or(due, |n| n.min(due)));
        }
        next
    }

    /// The transitions a batch taken at `now` commits: every one when
    /// `all` (a read must see what was noted before it, a close leaves
    /// nothing behind), else those due.
    pub(super) fn take_transitions(
        &mut self,
        now: Instant,
        all: bool,
    ) -> HashMap<IdempotencyKey, Pending> {
        if all {
            return std::mem::take(&mut self.transitions);
        }
        self.transitions.extract_if(|_, p| p.is_due(now)).collect()
    }
}

pub(super) struct Shared {
    pub(super) queue: Mutex<Queue>,
    pub(super) wake: Condvar,
    /// Signalled after the writer takes a batch (room for transitions).
    pub(super) space: Notify,
    pub(super) location: String,
    /// Soft bound on keys with pending transitions.
    pub(super) capacity: usize,
    /// Calls another worker owns now: their drivers here stop.
    pub(super) fenced: Mutex<HashSet<IdempotencyKey>>,
    /// Calls this client drives right now (from prepare to outcome), with
    /// how many drivers each: `recover` never hands them out again.
    pub(super) driving: Mutex<HashMap<IdempotencyKey, usize>>,
    /// Bumped when `fenced` grows (a watch: a driver that subscribed
    /// before checking `fenced` misses no change).
    pub(super) fence: watch::Sender<u64>,
    /// When this client's authority over the calls it drives lapses unless
    /// a renewal succeeds first (`None`: it never lapses). Drivers stop at
    /// that instant on their own (`JournalHandle::fenced`), whatever the
    /// writer thread is blocked on.
    pub(super) lease: watch::Sender<Option<Instant>>,
    /// How long the runtime keeps a key: no send of it after its record's
    /// first prepare plus this.
    pub(super) runtime_key_retention: Duration,
}

impl Shared {
    pub(super) fn closed_error(&self) -> JournalError {
        JournalError::new(
            JournalErrorKind::Closed,
            &self.location,
            "the journal was closed with its client",
        )
    }

    /// Records a transition without waiting (the connection task's path).
    pub(super) fn note(&self, key: &IdempotencyKey, f: impl FnOnce(&mut Pending)) {
        let mut q = lock(&self.queue);
        if q.stopped {
            return;
        }
        let p = q.transitions.entry(key.clone()).or_default();
        f(p);
        p.since.get_or_insert_with(Instant::now);
        let due = p.due();
        self.wake_writer(q, due);
    }

    /// Wakes the writer if it sleeps past `due` (`None`: now), releasing
    /// the queue first.
    pub(super) fn wake_writer(&self, q: std::sync::MutexGuard<'_, Queue>, due: Option<Instant>) {
        let wake = q
            .asleep_until
            .is_some_and(|until| due.is_none_or(|due| until > due));
        drop(q);
        if wake {
            self.wake.notify_one();
        }
    }

    /// Marks `keys` as owned elsewhere and wakes their drivers. Only keys a
    /// driver here drives are kept: the set holds nothing once they stop
    /// ([`DriveGuard`]'s drop prunes it).
    pub(super) fn fence(&self, keys: Vec<IdempotencyKey>) {
        let fenced = {
            // In the order `DriveGuard::drop` takes them: a driver that stops
            // meanwhile prunes what this adds.
            let driving = lock(&self.driving);
            let keys: Vec<IdempotencyKey> = keys
                .into_iter()
                .filter(|k| driving.contains_key(k))
                .collect();
            let n = keys.len();
            lock(&self.fenced).extend(keys);
            n
        };
        if fenced == 0 {
            return;
        }
        warn!(
            journal = %self.location,
            calls = fenced,
            "another worker owns these calls now (this worker lost its lease); they stop here"
        );
        self.fence.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub(super) fn request(&self, request: Request) -> Result<(), JournalError> {
        let mut q = lock(&self.queue);
        if q.stopped {
            return Err(self.closed_error());
        }
        q.requests.push(request);
        self.wake_writer(q, None);
        Ok(())
    }
}

pub(super) fn pending_writes(key: &IdempotencyKey, p: &Pending) -> Vec<JournalWrite> {
    p.clone().writes(key)
}

/// A call this client drives: while it lives, `recover` does not hand the
/// call out again (dropped when the call ends, however it ends).
pub(crate) struct DriveGuard {
    shared: Arc<Shared>,
    key: IdempotencyKey,
}

impl DriveGuard {
    /// Counts `key` as driven here once more.
    pub(super) fn new(shared: &Arc<Shared>, key: &IdempotencyKey) -> Self {
        *lock(&shared.driving).entry(key.clone()).or_default() += 1;
        DriveGuard {
            shared: shared.clone(),
            key: key.clone(),
        }
    }
}

impl Drop for DriveGuard {
    fn drop(&mut self) {
        let mut driving = lock(&self.shared.driving);
        if let Some(n) = driving.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                driving.remove(&self.key);
                // Nobody here drives it any more: its fence stops nothing.
                lock(&self.shared.fenced).remove(&self.key);
            }
        }
    }
}
