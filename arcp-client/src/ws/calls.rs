//! One logical call inside the connection core: its phase (each carrying
//! its own data), its waiters, its cancel request, and the facts the
//! execution rule reads.
//!
//! ```text
//!  Queued { not_before } ──send──▶ Sent { request, seq } ──job.accepted──▶ Accepted { job, ladder }
//!     ▲  │                           │   │                                    │   │
//!     │  │ budget spent: give up     │   └ transient refusal ─▶ Queued        │   └ terminal ─▶ done
//!     │  ▼                           └ terminal / refusal / DUPLICATE_KEY     │
//!     └──────── connection lost, or the ladder re-sends ◀─────────────────────┘
//! ```

mod troubles;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arcp_types::IdempotencyKey;
use tokio::sync::oneshot;

use self::troubles::Troubles;
use super::assembly::Assembly;
use super::cancel::CancelState;
use super::ids::RequestId;
use super::timers::TimerSlot;
use super::waiters::{Waiter, Waiters};
use crate::attempts::{Attempts, NextAttempt};
use crate::cache::KeyOrigin;
use crate::classify::Exposure;
use crate::config::RetryPolicy;
use crate::deadline::Deadline;
use crate::outcome::CancelOutcome;
use crate::request::{CallRecorder, Outgoing, PreparedCall, TraceId};
use crate::retry::{Decision, RetryBudget, Schedule};

/// Where a call stands. Each phase carries its own data.
#[derive(Debug)]
pub(crate) enum Phase {
    /// Waiting to be (re)sent, not before the instant: for backoff, a
    /// connection, or a slot in the send window.
    Queued { not_before: Instant },
    /// An attempt is on the connection, unanswered. `seq` is its place in
    /// the transmit order: written to the socket once the driver reports it
    /// flushed.
    Sent { request: RequestId, seq: u64 },
    /// Bound to a job. `ladder_at` is set when the live stream cannot be
    /// trusted to deliver the terminal (the acceptance was a replay, or the
    /// connection was resumed): then the recovery ladder takes its next step.
    Accepted { ladder_at: Option<Instant> },
}

/// One logical call. Its fields are its own: its phase and its attempts
/// record change only through its methods, one per step.
pub(crate) struct Call {
    key: IdempotencyKey,
    /// Whether a caller could name the key before the call ends (the
    /// outcome cache keeps only those calls' outcomes).
    key_origin: KeyOrigin,
    trace_id: TraceId,
    /// What the call sends: every attempt re-sends the same bytes
    /// (invariant 1 by construction).
    outgoing: Outgoing,
    fingerprint: u64,
    waiters: Waiters,
    recorder: Option<Box<dyn CallRecorder>>,
    phase: Phase,
    /// Sends, the job (shared with the call's waiters and the job index),
    /// exposure, replayed, the last error, the retry budget, the events
    /// delivered (`attempts.rs`).
    record: Attempts,
    /// What went wrong so far; boxed and absent until something does.
    troubles: Option<Box<Troubles>>,
    /// Its most patient caller's.
    deadline: Deadline,
    /// Boxed, like the other rarely used parts: most calls never retry.
    ladder: Option<Box<Schedule>>,
    /// Accepted when its connection died: a resumed session may deliver
    /// the outcome without a re-send.
    awaiting_resume: bool,
    /// The runtime cannot hand this job's outcome to a new request: the
    /// next replayed acceptance ends the call (one confirming re-send).
    confirming: bool,
    cancel: Option<Box<CancelState>>,
    assembly: Option<Box<Assembly>>,
    span: tracing::Span,
    /// The call's timer: its instant and current heap entry (`timers.rs`).
    timer: TimerSlot,
}

impl Call {
    /// A call about to be queued for its first send: its key, its journal
    /// recorder, `prepared`'s intent, `waiter` its first caller (whose
    /// deadline and send limit it starts with). `in_doubt`: an earlier
    /// call or process may have sent the key.
    pub(crate) fn new(
        (key, key_origin): (IdempotencyKey, KeyOrigin),
        recorder: Option<Box<dyn CallRecorder>>,
        prepared: PreparedCall,
        waiter: Waiter,
        in_doubt: bool,
        now: Instant,
    ) -> Self {
        let record = Attempts::new(in_doubt, waiter.shared.send_limit());
        Call {
            key,
            key_origin,
            trace_id: prepared.trace_id,
            outgoing: prepared.outgoing,
            fingerprint: prepared.intent.fingerprint,
            deadline: waiter.deadline,
            waiters: Waiters::one(waiter),
            recorder,
            phase: Phase::Queued { not_before: now },
            record,
            troubles: None,
            ladder: None,
            awaiting_resume: false,
            confirming: false,
            cancel: None,
            assembly: None,
            span: prepared.span,
            timer: TimerSlot::default(),
        }
    }

    // ----- its phase, one method per change ------------------------------------

    /// Where the call stands.
    pub(crate) fn phase(&self) -> &Phase {
        &self.phase
    }

    /// Waits to be (re)sent, not before `not_before`.
    pub(crate) fn queue(&mut self, not_before: Instant) {
        self.phase = Phase::Queued { not_before };
    }

    /// Counts an attempt about to be written at `now` and tells its
    /// waiters and the journal; the first starts the key's send limit
    /// (`retention`). [`on_wire`](Self::on_wire) follows once the frame
    /// is queued.
    pub(crate) fn send_attempt(&mut self, retention: Duration, now: Instant) -> u32 {
        let record = self.record.sent(retention, now);
        let attempts = self.record.count();
        self.span.record("attempt", attempts);
        for waiter in &self.waiters {
            waiter.shared.set_attempts(attempts);
        }
        record.write(&self.key, self.recorder.as_deref());
        attempts
    }

    /// The attempt is on the connection as `request`, `seq` in the
    /// transmit order.
    pub(crate) fn on_wire(&mut self, request: RequestId, seq: u64) {
        self.phase = Phase::Sent { request, seq };
    }

    /// Accepted (bound to its job); `ladder_at` when the live stream cannot
    /// be trusted to deliver the terminal. Returns the phase it leaves.
    pub(crate) fn accept(&mut self, ladder_at: Option<Instant>) -> Phase {
        std::mem::replace(&mut self.phase, Phase::Accepted { ladder_at })
    }

    /// Accepted, and the recovery ladder takes its next step at `at`.
    pub(crate) fn ladder_at(&mut self, at: Instant) {
        self.phase = Phase::Accepted {
            ladder_at: Some(at),
        };
    }

    // ----- what it is and who waits ---------------------------------------------

    /// The call's idempotency key.
    pub(crate) fn key(&self) -> &IdempotencyKey {
        &self.key
    }

    /// Whether a caller could name the key before the call ends.
    pub(crate) fn key_origin(&self) -> KeyOrigin {
        self.key_origin
    }

    /// Its trace id, written into every attempt.
    pub(crate) fn trace_id(&self) -> &TraceId {
        &self.trace_id
    }

    /// What every attempt sends.
    pub(crate) fn outgoing(&self) -> &Outgoing {
        &self.outgoing
    }

    /// What every attempt sends, to encode it for a dialect.
    pub(crate) fn outgoing_mut(&mut self) -> &mut Outgoing {
        &mut self.outgoing
    }

    /// Its intent's fingerprint in the outcome cache.
    pub(crate) fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// Its callers.
    pub(crate) fn waiters(&self) -> &Waiters {
        &self.waiters
    }

    /// Its callers, to drop those that gave up.
    pub(crate) fn waiters_mut(&mut self) -> &mut Waiters {
        &mut self.waiters
    }

    /// Another caller of the same key and intent joins: the call lives as
    /// long as its most patient caller (each is held to its own deadline).
    /// That caller named the key, so the key may be repeated.
    pub(crate) fn join(&mut self, waiter: Waiter) {
        self.key_origin = KeyOrigin::Named;
        self.deadline = self.deadline.latest(waiter.deadline);
        self.waiters.push(waiter);
    }

    /// Its callers, taken to answer them as it ends.
    pub(crate) fn take_waiters(&mut self) -> Waiters {
        std::mem::take(&mut self.waiters)
    }

    /// Its most patient caller's deadline.
    pub(crate) fn deadline(&self) -> Deadline {
        self.deadline
    }

    /// Its tracing span.
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Its timer (`timers.rs`).
    pub(crate) fn timer(&self) -> &TimerSlot {
        &self.timer
    }

    /// Its timer, to arm or clear.
    pub(crate) fn timer_mut(&mut self) -> &mut TimerSlot {
        &mut self.timer
    }

    /// The cancel asked for, if any.
    pub(crate) fn cancel(&self) -> Option<&CancelState> {
        self.cancel.as_deref()
    }

    /// The cancel asked for, to join, answer or re-send it.
    pub(crate) fn cancel_mut(&mut self) -> Option<&mut CancelState> {
        self.cancel.as_deref_mut()
    }

    /// `reply`'s caller asks for a cancel of the call's job, answered by
    /// `until` (the first ask; later ones [`join`](CancelState::join)).
    pub(crate) fn start_cancel(&mut self, reply: oneshot::Sender<CancelOutcome>, until: Instant) {
        self.cancel = Some(Box::new(CancelState::new(reply, until)));
    }

    /// A streamed result being put back together.
    pub(crate) fn assembly_mut(&mut self) -> &mut Option<Box<Assembly>> {
        &mut self.assembly
    }

    /// The recovery ladder's schedule, once climbed.
    pub(crate) fn ladder_mut(&mut self) -> &mut Option<Box<Schedule>> {
        &mut self.ladder
    }

    /// Accepted when its connection died: a resumed session may deliver
    /// the outcome without a re-send.
    pub(crate) fn await_resume(&mut self) {
        self.awaiting_resume = true;
    }

    /// Whether it was waiting for a resumed session, and no longer.
    pub(crate) fn take_awaiting_resume(&mut self) -> bool {
        std::mem::take(&mut self.awaiting_resume)
    }

    /// Whether its next replayed acceptance ends it (one confirming
    /// re-send: the runtime cannot hand this job's outcome to a new
    /// request).
    pub(crate) fn confirming(&self) -> bool {
        self.confirming
    }

    /// The next replayed acceptance ends it.
    pub(crate) fn confirm(&mut self) {
        self.confirming = true;
    }

    /// The request-level closes its written attempts met: (count, last
    /// code, reason, whether the last was alone on its connection).
    pub(crate) fn rejections(&self) -> Option<(u32, u16, String, bool)> {
        self.troubles.as_ref().map(|t| t.rejections.clone())
    }

    // ----- its attempts record ---------------------------------------------------

    /// Requests sent.
    pub(crate) fn attempts(&self) -> u32 {
        self.record.count()
    }

    /// The job the key is bound to.
    pub(crate) fn job_id(&self) -> Option<&Arc<str>> {
        self.record.job()
    }

    /// What the settled attempts exposed (not counting one on the
    /// connection; [`exposure_now`](Self::exposure_now) does).
    pub(crate) fn exposure(&self) -> Exposure {
        self.record.exposure()
    }

    /// An attempt on the connection was lost unanswered, or another caller
    /// of the key may have sent it: the call may have run.
    pub(crate) fn in_doubt(&mut self) {
        self.record.lost();
    }

    /// Whether the runtime's answers show a stored outcome (see
    /// `ToolError::replayed`).
    pub(crate) fn replayed(&self) -> bool {
        self.record.replayed()
    }

    /// The latest acceptance shows a stored outcome, or a fresh one.
    pub(crate) fn set_replayed(&mut self, replayed: bool) {
        self.record.set_replayed(replayed);
    }

    /// The bound job was just accepted as a fresh execution of this call.
    pub(crate) fn accepted_fresh(&mut self) {
        self.record.accepted_fresh();
    }

    /// Whether the bound job is this call's own fresh execution: a
    /// terminal of it is never a replay.
    pub(crate) fn own_job(&self) -> bool {
        self.record.own_job()
    }

    /// The retry budget.
    pub(crate) fn budget(&self) -> &RetryBudget {
        self.record.budget()
    }

    /// The retry budget, to start its clock or set a send limit.
    pub(crate) fn budget_mut(&mut self) -> &mut RetryBudget {
        self.record.budget_mut()
    }

    /// Keeps `reason` as the last error, for the final report.
    pub(crate) fn failed(&mut self, reason: String) {
        self.record.failed(reason);
    }

    /// An attempt was refused for `reason`; the next waits the backoff's
    /// delay, at least `floor`: the budget's decision.
    pub(crate) fn retried(
        &mut self,
        policy: &RetryPolicy,
        floor: Option<Duration>,
        reason: String,
        now: Instant,
    ) -> Decision {
        let deadline_at = self.deadline.at();
        self.record.retried(
            policy,
            NextAttempt::Backoff { floor },
            reason,
            deadline_at,
            now,
        )
    }

    /// Whether the event at (`epoch`, `seq`) is new; a new one is
    /// remembered.
    pub(crate) fn event(&mut self, epoch: u64, seq: u64) -> bool {
        self.record.event(epoch, seq)
    }

    /// Events the callers did not take in time.
    pub(crate) fn events_dropped(&mut self, n: u64) {
        self.record.events_dropped(n);
    }

    /// Events the callers did not take in time.
    pub(crate) fn dropped_events(&self) -> u64 {
        self.record.dropped_events()
    }

    /// The call's troubles, allocated on first use.
    fn troubles_mut(&mut self) -> &mut Troubles {
        self.troubles.get_or_insert_with(Box::default)
    }

    /// Whether the recovery ladder may subscribe to the job on connection
    /// `generation` (no subscribe refused, none sent on it yet).
    pub(crate) fn may_subscribe_on(&self, generation: u64) -> bool {
        self.troubles
            .as_ref()
            .is_none_or(|t| t.may_subscribe_on(generation))
    }

    /// A subscribe with history goes out on connection `generation` as
    /// `request` (answered or lost: [`take_subscribe_request`](Self::take_subscribe_request)).
    pub(crate) fn subscribing(&mut self, generation: u64, request: String) {
        self.troubles_mut().subscribing(generation, request);
    }

    /// The runtime refused the subscribe: it is forgotten, and the ladder
    /// re-sends instead from now on.
    pub(crate) fn subscribe_refused(&mut self) {
        self.troubles_mut().subscribe_refused();
    }

    /// A connection closed with request-level `code` while this call's
    /// attempt was written and unanswered (`alone`: no other request was
    /// outstanding). Returns how many such closes the call has met.
    pub(crate) fn rejected(&mut self, code: u16, reason: String, alone: bool) -> u32 {
        self.troubles_mut().rejected(code, reason, alone)
    }

    /// The outstanding `job.subscribe`, if any.
    pub(crate) fn subscribe_request(&self) -> Option<&str> {
        self.troubles.as_ref()?.subscribe_request.as_deref()
    }

    /// Forgets the outstanding `job.subscribe` (answered, or lost with its
    /// connection), returning its id.
    pub(crate) fn take_subscribe_request(&mut self) -> Option<String> {
        self.troubles.as_mut()?.subscribe_request.take()
    }

    /// When the call next needs a look: its deadline (its most patient
    /// caller's) or an earlier waiter's own,
    /// its phase's instant,
    /// the end of its retry budget while it waits to retry (queued, or on
    /// the recovery ladder), its cancel's bound.
    ///
    /// A queued call whose `not_before` has passed waits for a connection
    /// or a send-window slot: those events step it, not a timer (a timer at
    /// a past instant would fire on every turn). For the same reason the
    /// budget's end is no wake for a call waiting for an answer: the budget
    /// does not end that wait, and once passed it would wake it every turn.
    pub(crate) fn next_wake(&self, now: Instant) -> Instant {
        let mut at = self.deadline.at();
        for waiter in &self.waiters {
            at = at.min(waiter.deadline.at());
        }
        let retrying = match self.phase {
            Phase::Queued { not_before } => {
                if not_before > now {
                    at = at.min(not_before);
                }
                true
            }
            Phase::Accepted {
                ladder_at: Some(ladder),
            } => {
                at = at.min(ladder);
                true
            }
            Phase::Sent { .. } | Phase::Accepted { ladder_at: None } => false,
        };
        if let Some(end) = self.budget().ends_at().filter(|_| retrying) {
            at = at.min(end);
        }
        // A call waiting to send ends when its key's send limit passes.
        if let Some(limit) = self.budget().send_limit().filter(|_| retrying) {
            at = at.min(limit);
        }
        if let Some(until) = self.cancel().and_then(CancelState::answer_by) {
            at = at.min(until);
        }
        at
    }

    /// The call's exposure if it ended now: an attempt on the connection
    /// (queued frames are still written, even at close) may reach the
    /// runtime, so it counts as in doubt.
    pub(crate) fn exposure_now(&self) -> Exposure {
        self.record
            .exposure_with(matches!(self.phase, Phase::Sent { .. }))
    }

    /// Removes and returns the waiters whose own deadline has passed.
    pub(crate) fn take_expired_waiters(&mut self, now: Instant) -> Vec<Waiter> {
        if self.waiters.iter().all(|w| !w.deadline.exceeded(now)) {
            return Vec::new();
        }
        let mut expired = Vec::new();
        for waiter in std::mem::take(&mut self.waiters) {
            if waiter.deadline.exceeded(now) {
                expired.push(waiter);
            } else {
                self.waiters.push(waiter);
            }
        }
        expired
    }

    /// The call as an ending names it (key, job, exposure now, attempts,
    /// last error), for the give-up rule.
    pub(crate) fn ended(&self) -> crate::classify::Ended<'_> {
        self.record
            .ended(&self.key, matches!(self.phase, Phase::Sent { .. }))
    }

    /// Whether any caller still wants the outcome.
    pub(crate) fn is_wanted(&self) -> bool {
        self.waiters.iter().any(Waiter::is_live)
    }

    /// Records the job id, for this call, every waiter and the journal (a
    /// job new to the call). Returns it, and the job id it replaces (an
    /// attempt after a lost one may be bound to another job): the call
    /// table drops that one from its index (`call_table.rs`, the one
    /// caller).
    pub(super) fn bind(&mut self, job_id: &str) -> (Arc<str>, Option<Arc<str>>) {
        let bound = self.record.bound(job_id);
        if bound.record != crate::attempts::Record::Nothing {
            self.span.record("job_id", job_id);
        }
        for waiter in &self.waiters {
            waiter.shared.set_job(&bound.job);
        }
        bound.record.write(&self.key, self.recorder.as_deref());
        (bound.job, bound.replaced)
    }

    /// An owned copy of the job id, for an outcome or an error.
    pub(crate) fn job(&self) -> Option<String> {
        self.record.job().map(|job| job.to_string())
    }

    /// What a cancel not confirmed by the runtime amounts to: dispatched
    /// once some copy reached a socket, else not dispatched (`why`).
    pub(crate) fn cancel_so_far(&self, why: &str) -> CancelOutcome {
        match self.cancel() {
            Some(c) if c.is_written() => CancelOutcome::Dispatched,
            _ => CancelOutcome::NotDispatched { reason: why.into() },
        }
    }

    /// Answers every cancel waiter.
    pub(crate) fn answer_cancel(&mut self, outcome: CancelOutcome) {
        if let Some(cancel) = self.cancel_mut() {
            cancel.answer(outcome);
        }
    }
}
