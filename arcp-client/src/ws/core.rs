//! The I/O-free connection core, in quinn-proto's shape: no socket, no
//! `await`, no clock of its own. The driver feeds it commands, dial
//! results, frames, flush reports and the time; it answers with frames to
//! write (`take_transmit`), the next instant it needs a look
//! (`poll_timeout`), whether to dial (`poll_dial`) or drop the connection
//! (`take_drop`). Outcomes go straight to each caller's oneshot.
//!
//! The link is a state of its own, so a call's deadline, `close()` and
//! `cancel()` are served whatever the network does:
//!
//! ```text
//!  Down { next_dial } ──poll_dial──▶ Dialing ──on_established──▶ Up ──on_lost / dead──▶ Down
//!        ▲                              │
//!        └──── on_dial_failed (backoff) ┘        any state ──close──▶ Closed
//! ```
//!
//! Inbound frames are handled in `inbound.rs`; this file holds commands,
//! the link and the per-call state machine (`step`, the one place that
//! decides what a call does next; timers only say *when* to look).

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arcp_types::{
    Dialect, Frame, Header, IdempotencyKey, Message, ResumeRequest, Subscribe, Welcome,
};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use super::attribution::{ReqKind, RequestId, Requests};
use super::calls::{Call, CallId, CancelState, Phase, PreparedCall, Waiter};
use super::session::{Liveness, LivenessAction, Session, ACK_EVERY};
use crate::cache::{conflict, Cached, Intent, Outcome, OutcomeCache};
use crate::classify::{give_up, Exposure};
use crate::config::{Config, DialectChoice};
use crate::error::{Error, Execution};
use crate::outcome::{CancelOutcome, ClientStats, ConnectionEvent};
use crate::profile::RuntimeProfile;
use crate::request::{CallRequest, CallShared};
use crate::retry::{later, Schedule};
use crate::telemetry::{self, Answered};
use crate::FastMap;

/// Requests from client handles.
pub(crate) enum Command {
    /// Run a call; its outcome goes to the sender.
    Invoke(Box<CallRequest>, oneshot::Sender<Outcome>),
    /// Cancel the job of the call with this key, if the caller behind
    /// `shared` waits on it (a same-key call refused as a duplicate must
    /// not cancel the call that holds the key).
    Cancel {
        key: IdempotencyKey,
        shared: Arc<CallShared>,
        reply: oneshot::Sender<CancelOutcome>,
    },
    /// The caller behind `shared` gave up (deadline, or dropped the future).
    Abandon {
        key: IdempotencyKey,
        shared: Arc<CallShared>,
    },
    /// Close the session; calls still in flight end.
    Close { reply: oneshot::Sender<()> },
    /// Report what the core holds.
    Stats { reply: oneshot::Sender<ClientStats> },
}

/// What the driver should dial.
#[derive(Debug, Clone)]
pub(crate) struct DialPlan {
    /// Dialects to try, in order (two in `Auto` before the first session).
    pub(crate) dialects: Vec<Dialect>,
    pub(crate) resume: Option<ResumeRequest>,
}

/// A completed handshake.
pub(crate) struct Established {
    pub(crate) dialect: Dialect,
    pub(crate) welcome: Welcome,
    /// A resume was asked for (the welcome says whether it was granted).
    pub(crate) resuming: bool,
    /// The runtime refused a resume on the way (then this is a new session).
    pub(crate) resume_refused: Option<String>,
}

/// A dial that produced no session.
#[derive(Debug)]
pub(crate) struct DialFailure {
    pub(crate) error: Error,
    /// Whether dialing again may work.
    pub(crate) transient: bool,
    /// The runtime's `Retry-After`, a floor for the next dial.
    pub(crate) floor: Option<Duration>,
}

/// Why the connection ended.
#[derive(Debug)]
pub(crate) enum Loss {
    /// The network or the runtime dropped it.
    Network(String),
    /// The runtime closed it because of something we sent (WebSocket close
    /// 1002, 1003, 1007, 1008 or 1009).
    Rejected { code: u16, reason: String },
}

pub(super) enum Link {
    /// No connection; dial (when there is work) not before the instant.
    Down { next_dial: Instant },
    /// The driver is dialing.
    Dialing,
    /// A session is established on a live connection.
    Up(Box<Up>),
    /// The client closed.
    Closed,
}

pub(super) struct Up {
    pub(super) generation: u64,
    pub(super) dialect: Dialect,
    pub(super) profile: RuntimeProfile,
    pub(super) live: Liveness,
    /// The connection carried something after its handshake (the reconnect
    /// backoff restarts only then).
    pub(super) useful: bool,
    /// Requests on this connection not yet answered, and how many may be:
    /// after a loss the window restarts small and grows by one per answer
    /// (slow start), so a reconnect does not flood a flaky link.
    pub(super) unanswered: usize,
    pub(super) window: usize,
    pub(super) window_queue: VecDeque<CallId>,
}

/// Unanswered requests allowed right after a connection loss.
const WINDOW_AFTER_LOSS: usize = 4;
/// How often calls waiting for the send window are re-checked.
const WINDOW_RECHECK: Duration = Duration::from_millis(50);
/// The timer heap is never compacted below this size.
const TIMER_COMPACT_MIN: usize = 1024;

/// The connection core.
pub(crate) struct Core {
    pub(super) config: Arc<Config>,
    pub(super) calls: FastMap<CallId, Box<Call>>,
    by_key: FastMap<IdempotencyKey, CallId>,
    pub(super) by_job: FastMap<Arc<str>, CallId>,
    pub(super) requests: Requests,
    timers: BinaryHeap<Reverse<(Instant, CallId, u32)>>,
    cache: OutcomeCache,
    pub(super) session: Session,
    pub(super) link: Link,
    generation: u64,
    next_id: CallId,
    outbox: Vec<String>,
    queued_seq: u64,
    /// Frames up to this seq were handed to the writer: they may have
    /// reached the runtime even if the connection died before the flush
    /// was reported.
    handed_seq: u64,
    /// Frames up to this seq were reported written.
    flushed_seq: u64,
    /// Cancels queued and not yet reported written: (transmit seq, call).
    cancel_writes: Vec<(u64, CallId)>,
    reconnect: Option<Schedule>,
    /// `connect()` waits on this until the first session, or the budget.
    ready: Option<(oneshot::Sender<Result<RuntimeProfile, Error>>, Instant)>,
    /// The window size after the next loss (1 after a request-level close).
    window_after_loss: usize,
    drop_reason: Option<String>,
    close_replies: Vec<oneshot::Sender<()>>,
    /// What `Client::runtime()` reads.
    profile_out: Arc<Mutex<Option<RuntimeProfile>>>,
    /// `Client::events()` listeners (sending costs nothing without any).
    events: tokio::sync::broadcast::Sender<ConnectionEvent>,
    /// Dials since the last established session.
    dials: u32,
    /// The id and timestamp of the envelope being written, reused so that
    /// writing a request allocates only its shared id and its text.
    message_id: String,
    timestamp: String,
    /// The dialect callers encode their requests for ([`PreparedCall`]):
    /// the configured one, or the first session's (a client keeps it).
    dialect: Arc<OnceLock<Dialect>>,
    /// Outcomes of calls finished in this turn, not yet handed out
    /// ([`Core::hand_out_replies`]).
    replies: Vec<(oneshot::Sender<Outcome>, Outcome)>,
}

impl Core {
    /// A core. With `ready`, it dials at once and reports the first
    /// session (or the failure, within `connect_budget`); without, it dials
    /// when the first call arrives.
    pub(crate) fn new(
        config: Arc<Config>,
        ready: Option<oneshot::Sender<Result<RuntimeProfile, Error>>>,
        profile_out: Arc<Mutex<Option<RuntimeProfile>>>,
        events: tokio::sync::broadcast::Sender<ConnectionEvent>,
        now: Instant,
    ) -> Self {
        let budget = later(now, config.connect_budget);
        let config_dialect = match config.dialect {
            DialectChoice::V1_1 => Some(Dialect::V1_1),
            DialectChoice::Legacy => Some(Dialect::Legacy),
            DialectChoice::Auto => None,
        };
        Core {
            cache: OutcomeCache::new(config.outcome_cache_capacity, config.outcome_cache_ttl),
            config,
            calls: FastMap::default(),
            by_key: FastMap::default(),
            by_job: FastMap::default(),
            requests: Requests::default(),
            timers: BinaryHeap::new(),
            session: Session::default(),
            link: Link::Down { next_dial: now },
            generation: 0,
            next_id: 0,
            message_id: String::new(),
            timestamp: String::new(),
            replies: Vec::new(),
            dialect: Arc::new(match config_dialect {
                Some(dialect) => OnceLock::from(dialect),
                None => OnceLock::new(),
            }),
            outbox: Vec::new(),
            queued_seq: 0,
            handed_seq: 0,
            flushed_seq: 0,
            cancel_writes: Vec::new(),
            reconnect: None,
            ready: ready.map(|r| (r, budget)),
            window_after_loss: WINDOW_AFTER_LOSS,
            drop_reason: None,
            close_replies: Vec::new(),
            profile_out,
            events,
            dials: 0,
        }
    }

    /// The dialect callers should encode requests for, once known: shared
    /// with the client's handle, read on every call.
    pub(crate) fn dialect_hint(&self) -> Arc<OnceLock<Dialect>> {
        self.dialect.clone()
    }

    /// Tells `Client::events()` listeners, if there are any.
    fn emit(&self, event: impl FnOnce() -> ConnectionEvent) {
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(event());
        }
    }

    // ----- what the driver asks -------------------------------------------------

    /// Whether the core is done (closed, or the first connect failed).
    pub(crate) fn is_closed(&self) -> bool {
        matches!(self.link, Link::Closed)
    }

    /// Replies owed to `close()` callers, once the driver has closed the socket.
    pub(crate) fn take_close_replies(&mut self) -> Vec<oneshot::Sender<()>> {
        std::mem::take(&mut self.close_replies)
    }

    /// Whether reads should re-arm TCP_QUICKACK (the runtime may write in
    /// pieces; see [`RuntimeProfile::writes_in_pieces`]).
    pub(crate) fn wants_quickack(&self) -> bool {
        self.session
            .profile
            .as_ref()
            .is_none_or(|p| p.writes_in_pieces)
    }

    /// Whether the core decided to drop the connection (and reads no more
    /// of its frames).
    pub(crate) fn drop_pending(&self) -> bool {
        self.drop_reason.is_some()
    }

    /// Whether the connection should be dropped (the core found it dead).
    pub(crate) fn take_drop(&mut self) -> Option<String> {
        self.drop_reason.take()
    }

    /// Frames to write, in order; returns the transmit seq of the last one.
    pub(crate) fn take_transmit(&mut self, into: &mut Vec<String>) -> u64 {
        into.append(&mut self.outbox);
        self.handed_seq = self.queued_seq;
        self.queued_seq
    }

    /// Whether frames wait to be written.
    pub(crate) fn has_transmit(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Whether to dial now, and how.
    pub(crate) fn poll_dial(&mut self, now: Instant) -> Option<DialPlan> {
        let Link::Down { next_dial } = self.link else {
            return None;
        };
        if now < next_dial || !self.wants_connection() {
            return None;
        }
        let dialects = match (self.session.dialect, self.config.dialect) {
            (Some(d), _) => vec![d],
            (None, DialectChoice::Legacy) => vec![Dialect::Legacy],
            (None, DialectChoice::Auto) => vec![Dialect::V1_1, Dialect::Legacy],
            (None, _) => vec![Dialect::V1_1],
        };
        self.link = Link::Dialing;
        Some(DialPlan {
            dialects,
            resume: self.session.resume_request(),
        })
    }

    fn wants_connection(&self) -> bool {
        self.ready.is_some() || !self.calls.is_empty()
    }

    /// The next instant the core needs `handle_timeout`.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let mut at = self.timers.peek().map(|Reverse((t, _, _))| *t);
        let mut min = |t: Instant| at = Some(at.map_or(t, |a: Instant| a.min(t)));
        if let Some((_, budget)) = &self.ready {
            min(*budget);
        }
        match &self.link {
            Link::Down { next_dial } if self.wants_connection() => min(*next_dial),
            Link::Up(up) => {
                if let Some(t) = up.live.next_wake(self.config.response_timeout) {
                    min(t);
                }
                if !up.window_queue.is_empty() {
                    min(later(Instant::now(), WINDOW_RECHECK));
                }
                if up.profile.accepts_ack && self.session.last_event_seq > up.live.acked_seq {
                    min(up.live.last_ack + ACK_EVERY);
                }
            }
            _ => {}
        }
        at
    }

    // ----- time -----------------------------------------------------------------

    /// Serves every timer due at `now`.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        if let Some((_, budget)) = &self.ready {
            if now >= *budget && !matches!(self.link, Link::Up(_)) {
                let error = self.connect_give_up();
                self.fail_ready(error);
            }
        }
        // Take the due timers first: a step re-arms at a later instant
        // only, but a bug there must cost a spin of one turn, not a hang.
        let mut due = Vec::new();
        while let Some(Reverse((at, id, gen))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            if self.calls.get(&id).is_some_and(|c| c.timer_gen == gen) {
                due.push(id);
            }
        }
        for id in due {
            if let Some(call) = self.calls.get_mut(&id) {
                call.timer = None;
            }
            self.step(id, now);
        }
        let mut action = LivenessAction::None;
        if let Link::Up(up) = &mut self.link {
            action = up.live.check(now, self.config.response_timeout);
        }
        match action {
            LivenessAction::Dead(reason) => self.lose(Loss::Network(reason.into()), now, true),
            LivenessAction::Ping => {
                self.queue_frame(Frame::new(Message::Ping(arcp_types::Ping {
                    nonce: arcp_types::new_message_id(),
                    sent_at: Some(arcp_types::now_rfc3339()),
                    extra: Default::default(),
                })));
            }
            LivenessAction::None => {}
        }
        self.fill_window(now);
        self.maybe_ack(now);
        self.compact();
    }

    // ----- commands ----------------------------------------------------------------

    /// Takes a command from a client handle.
    pub(crate) fn command(&mut self, command: Command, now: Instant) {
        match command {
            Command::Invoke(request, reply) => self.start_call(*request, reply, now),
            Command::Cancel { key, shared, reply } => self.cancel(key, &shared, reply, now),
            Command::Abandon { key, shared } => self.abandon(&key, &shared, now),
            Command::Close { reply } => {
                self.close_replies.push(reply);
                self.close(now);
            }
            Command::Stats { reply } => {
                let _ = reply.send(self.stats());
            }
        }
    }

    /// Ends every call and the session. Calls that may have run end with
    /// `Interrupted` (their key and job id), the others with `Closed`.
    pub(crate) fn close(&mut self, _now: Instant) {
        if matches!(self.link, Link::Up(_)) {
            self.queue_frame(Frame::new(Message::Close(arcp_types::Close {
                reason: Some("client closed".into()),
                extra: Default::default(),
            })));
        }
        let ids: Vec<CallId> = self.calls.keys().copied().collect();
        for id in ids {
            let error = match self.calls.get(&id) {
                Some(call) if call.exposure_now().unresolved() == Execution::MayHaveRun => {
                    Error::Interrupted {
                        key: call.key.clone(),
                        job_id: call.job(),
                        attempts: call.attempts,
                    }
                }
                _ => Error::Closed,
            };
            self.finish(id, Err(error));
        }
        self.fail_ready(Error::Closed);
        self.link = Link::Closed;
    }

    fn start_call(&mut self, mut req: CallRequest, reply: oneshot::Sender<Outcome>, now: Instant) {
        let prepared = match req.prepared.take() {
            Some(prepared) => prepared,
            None => {
                req.seal();
                PreparedCall::new(&mut req, None)
            }
        };
        let Intent { fingerprint, size } = prepared.intent;
        let waiter = Waiter {
            reply,
            shared: req.shared.clone(),
            _events_end: req.events_end,
        };
        // Answered here, without a request of its own: the span the caller
        // opened says so.
        let answer = |waiter: Waiter, outcome: Outcome| {
            let how = match &outcome {
                Ok(_) => "ok".to_owned(),
                Err(e) => e.code_name().as_str().to_owned(),
            };
            prepared.span.record("outcome", how.as_str());
            info!(parent: &prepared.span, outcome = %how, "call answered without a request");
            let _ = waiter.reply.send(outcome);
        };
        if matches!(self.link, Link::Closed) {
            answer(waiter, Err(Error::Closed));
            return;
        }
        let earlier_send = match self.cache.get(&req.key, fingerprint, now) {
            Cached::Hit(outcome) => {
                waiter.shared.set_answered(Answered::Cache);
                answer(waiter, outcome);
                return;
            }
            Cached::Conflict => {
                answer(waiter, Err(conflict(req.key)));
                return;
            }
            Cached::Bound => true,
            Cached::Miss => req.in_doubt,
        };
        if let Some(&existing) = self.by_key.get(&req.key) {
            if let Some(call) = self.calls.get_mut(&existing) {
                if call.fingerprint == fingerprint {
                    // The same logical call awaited twice: share one outcome,
                    // and the job id once known.
                    if let Some(job) = &call.job_id {
                        waiter.shared.set_job(job);
                    }
                    // From now on the key's fate is shared: whichever caller
                    // gives up first cannot prove the others will not run
                    // it, so none of them may claim "did not run".
                    for w in &call.waiters {
                        w.shared.mark_sent();
                    }
                    waiter.shared.mark_sent();
                    // The call lives as long as its most patient caller;
                    // each caller's own deadline is enforced on its side.
                    call.deadline_at = call.deadline_at.max(later(req.started, req.deadline));
                    call.deadline = call.deadline.max(req.deadline);
                    call.waiters.push(waiter);
                    // Its outcome is recorded on the first caller's span.
                    prepared.span.record("outcome", "joined");
                } else {
                    answer(
                        waiter,
                        Err(Error::DuplicateKey {
                            key: req.key,
                            message:
                                "the key is in use by a call with a different intent in this client"
                                    .into(),
                            attempts: 0,
                        }),
                    );
                }
                return;
            }
        }
        if size > self.config.max_frame_size {
            let limit = self.config.max_frame_size;
            answer(
                waiter,
                Err(Error::InvalidCall(format!(
                    "the request is {size} bytes; the frame size limit is {limit}"
                ))),
            );
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        if earlier_send {
            waiter.shared.mark_sent();
        }
        let call = Call {
            key: req.key.clone(),
            trace_id: prepared.trace_id,
            outgoing: prepared.outgoing,
            fingerprint,
            waiters: vec![waiter],
            recorder: req.recorder,
            phase: Phase::Queued { not_before: now },
            attempts: 0,
            job_id: None,
            // An earlier call with this key and intent may have run it.
            exposure: Exposure {
                bound: false,
                in_doubt: earlier_send,
            },
            replayed: false,
            troubles: None,
            deadline_at: later(req.started, req.deadline),
            deadline: req.deadline,
            budget_at: None,
            backoff: None,
            ladder: None,
            awaiting_resume: false,
            confirming: false,
            cancel: None,
            last_event: None,
            dropped_events: 0,
            assembly: None,
            span: prepared.span,
            timer: None,
            timer_gen: 0,
        };
        self.by_key.insert(req.key, id);
        self.calls.insert(id, Box::new(call));
        self.step(id, now);
    }

    fn abandon(&mut self, key: &IdempotencyKey, shared: &Arc<CallShared>, now: Instant) {
        let Some(&id) = self.by_key.get(key) else {
            return;
        };
        if let Some(call) = self.calls.get_mut(&id) {
            call.waiters.retain(|w| !Arc::ptr_eq(&w.shared, shared));
        }
        self.step(id, now);
    }

    fn cancel(
        &mut self,
        key: IdempotencyKey,
        shared: &Arc<CallShared>,
        reply: oneshot::Sender<CancelOutcome>,
        now: Instant,
    ) {
        let Some(call) = self
            .by_key
            .get(&key)
            .and_then(|id| self.calls.get(id))
            .filter(|c| c.waiters.iter().any(|w| Arc::ptr_eq(&w.shared, shared)))
        else {
            let _ = reply.send(CancelOutcome::AlreadyFinished);
            return;
        };
        let id = self.by_key[&key];
        if call.job_id.is_none() {
            let _ = reply.send(CancelOutcome::NotDispatched {
                reason: "the runtime has not accepted the call yet; there is no job to cancel"
                    .into(),
            });
            return;
        }
        let until = later(now, self.config.cancel_timeout);
        let call = self.calls.get_mut(&id).expect("looked up above");
        match &mut call.cancel {
            Some(cancel) if cancel.settled => {
                let _ = reply.send(CancelOutcome::Acknowledged);
                return;
            }
            Some(cancel) => {
                cancel.waiters.push(reply);
                cancel.until = cancel.until.max(until);
            }
            None => {
                call.cancel = Some(Box::new(CancelState {
                    waiters: vec![reply],
                    until,
                    request: None,
                    written: false,
                    settled: false,
                }));
                self.send_cancel(id);
            }
        }
        self.rearm(id, now);
    }

    /// Queues the call's cancel on the live connection, if any.
    fn send_cancel(&mut self, id: CallId) {
        if !matches!(self.link, Link::Up(_)) {
            return;
        }
        let Some(call) = self.calls.get(&id) else {
            return;
        };
        let (Some(job_id), Some(cancel)) = (call.job(), &call.cancel) else {
            return;
        };
        if cancel.settled || cancel.request.is_some() {
            return;
        }
        let frame = Frame::new(Message::Cancel(arcp_types::Cancel {
            job_id,
            reason: Some("cancelled by the caller".into()),
            extra: Default::default(),
        }));
        let request = frame.envelope.id.clone();
        let seq = self.queue_frame(frame);
        self.requests
            .insert(RequestId::from(request.as_str()), id, ReqKind::Cancel);
        self.cancel_writes.push((seq, id));
        if let Some(cancel) = self.calls.get_mut(&id).and_then(|c| c.cancel.as_mut()) {
            cancel.request = Some((request, seq));
        }
    }

    // ----- the link ------------------------------------------------------------------

    /// The driver completed a handshake.
    pub(crate) fn on_established(&mut self, est: Established, now: Instant) {
        let _ = self.dialect.set(est.dialect);
        let resumed = self
            .session
            .install(est.dialect, &est.welcome, est.resuming);
        let profile = self.session.profile.clone().expect("installed above");
        self.generation += 1;
        self.dials = 0;
        // Refused with an error (then a fresh session was opened), or
        // answered with a new session instead of the old one.
        let refused = est.resume_refused.clone().or_else(|| {
            (est.resuming && !resumed)
                .then(|| "the runtime opened a new session instead of resuming".to_owned())
        });
        telemetry::session(resumed);
        if let Some(reason) = refused {
            telemetry::resume_refused();
            self.emit(|| ConnectionEvent::ResumeRefused {
                at: std::time::SystemTime::now(),
                reason,
            });
        }
        self.emit(|| ConnectionEvent::Connected {
            at: std::time::SystemTime::now(),
            runtime: profile.name.clone(),
            version: profile.version.clone(),
            dialect: est.dialect,
            session_id: est.welcome.session_id.clone(),
            resumed,
        });
        info!(
            runtime = %profile.name,
            version = %profile.version,
            dialect = %est.dialect,
            session = %est.welcome.session_id,
            resumed,
            "session established"
        );
        *self.profile_out.lock().unwrap_or_else(|e| e.into_inner()) = Some(profile.clone());
        let live = Liveness::new(&self.config, &profile, &est.welcome, now);
        let window = if self.ready.is_some() {
            self.config.max_in_flight
        } else {
            self.window_after_loss.min(self.config.max_in_flight)
        };
        self.link = Link::Up(Box::new(Up {
            generation: self.generation,
            dialect: est.dialect,
            profile: profile.clone(),
            live,
            useful: false,
            unanswered: 0,
            window,
            window_queue: VecDeque::new(),
        }));
        if let Some((ready, _)) = self.ready.take() {
            let _ = ready.send(Ok(profile.clone()));
        }
        let mut ids: Vec<CallId> = self.calls.keys().copied().collect();
        ids.sort_unstable();
        let ladder_first = self.config.retry.outcome_poll;
        for &id in &ids {
            let Some(call) = self.calls.get_mut(&id) else {
                continue;
            };
            if std::mem::take(&mut call.awaiting_resume) {
                if resumed {
                    // The resumed session may deliver the outcome (buffered
                    // or live): wait for it before re-sending.
                    let wait = call
                        .ladder
                        .get_or_insert_with(|| Box::new(self.config.retry.ladder()))
                        .next_ceiling()
                        .max(ladder_first);
                    call.phase = Phase::Accepted {
                        ladder_at: Some(later(now, wait)),
                    };
                } else if !profile.replays_terminal && !profile.supports_subscribe {
                    // Nothing carries the job to this session: one
                    // confirming re-send, then the outcome is unknown.
                    call.confirming = true;
                }
            }
        }
        for id in ids {
            if self.calls.get(&id).is_some_and(|c| c.cancel.is_some()) {
                self.send_cancel(id);
            }
            self.step(id, now);
        }
    }

    /// The driver's dial failed.
    pub(crate) fn on_dial_failed(&mut self, failure: DialFailure, now: Instant) {
        warn!(error = %failure.error, transient = failure.transient, "connecting failed");
        let ever = self.session.profile.is_some();
        if !failure.transient {
            if self.ready.is_some() {
                self.fail_ready(failure.error.clone());
            }
            // Definitive: calls that may have run keep their key and job id;
            // the others end with the refusal itself (nothing was sent).
            let ids: Vec<CallId> = self.calls.keys().copied().collect();
            for id in ids {
                let Some(call) = self.calls.get(&id) else {
                    continue;
                };
                let error = match call.exposure_now().unresolved() {
                    Execution::NotRun => failure.error.clone(),
                    _ => give_up(
                        &call.key,
                        call.job_id.as_deref(),
                        call.exposure_now(),
                        call.attempts,
                        &format!("reconnecting failed for good ({})", failure.error),
                        call.last_error(),
                        false,
                    ),
                };
                self.finish(id, Err(error));
            }
            self.reconnect = None;
            self.link = if self.is_closed() {
                Link::Closed
            } else {
                Link::Down { next_dial: now }
            };
            return;
        }
        let delay = self
            .reconnect
            .get_or_insert_with(|| self.config.retry.schedule())
            .next_delay(failure.floor);
        let message = failure.error.to_string();
        self.dials += 1;
        let attempt = self.dials + 1;
        telemetry::reconnecting();
        self.emit(|| ConnectionEvent::Reconnecting {
            at: std::time::SystemTime::now(),
            attempt,
            delay,
        });
        let ids: Vec<CallId> = self.calls.keys().copied().collect();
        for &id in &ids {
            if let Some(call) = self.calls.get_mut(&id) {
                call.start_recovery(now, self.config.retry.max_elapsed);
                call.troubles_mut().last_error = Some(message.clone());
            }
        }
        if let Some((_, budget)) = &self.ready {
            if later(now, delay) >= *budget && !ever {
                let budget = self.config.connect_budget;
                self.fail_ready(with_context(
                    failure.error,
                    &format!("gave up after retrying for the connect budget of {budget:?}"),
                ));
                return;
            }
        }
        self.link = if self.is_closed() {
            Link::Closed
        } else {
            Link::Down {
                next_dial: later(now, delay),
            }
        };
        for id in ids {
            self.step(id, now);
        }
    }

    /// The error `connect()` ends with when its budget runs out mid-dial.
    fn connect_give_up(&self) -> Error {
        Error::Connect {
            url: self.config.url.clone(),
            message: format!(
                "no session within the connect budget of {:?}",
                self.config.connect_budget
            ),
            retryable: true,
        }
    }

    /// Ends `connect()` with `error`; the core is then done unless calls
    /// are waiting.
    fn fail_ready(&mut self, error: Error) {
        if let Some((ready, _)) = self.ready.take() {
            let _ = ready.send(Err(error));
            if self.calls.is_empty() {
                self.link = Link::Closed;
            }
        }
    }

    /// A frame that carries no message (a WebSocket ping or pong) arrived.
    pub(crate) fn on_activity(&mut self, now: Instant) {
        touch(&mut self.link, now);
    }

    /// The driver reports frames written up to transmit seq `upto`.
    pub(crate) fn on_flushed(&mut self, upto: u64, now: Instant) {
        self.flushed_seq = self.flushed_seq.max(upto);
        if let Link::Up(up) = &mut self.link {
            up.live.last_outbound = now;
        }
        let flushed = self.flushed_seq;
        let calls = &mut self.calls;
        self.cancel_writes.retain(|&(seq, id)| {
            if seq > flushed {
                return true;
            }
            if let Some(cancel) = calls.get_mut(&id).and_then(|c| c.cancel.as_mut()) {
                cancel.written = true;
            }
            false
        });
    }

    /// The connection ended (reported by the driver).
    pub(crate) fn on_lost(&mut self, loss: Loss, now: Instant) {
        self.lose(loss, now, false);
    }

    /// Drops the connection: requests on it are forgotten, and each call is
    /// recovered with its key on the next one. `ours`: the core decided.
    pub(super) fn lose(&mut self, loss: Loss, now: Instant, ours: bool) {
        let Link::Up(up) = std::mem::replace(&mut self.link, Link::Down { next_dial: now }) else {
            return;
        };
        let reason = match &loss {
            Loss::Network(reason) => reason.clone(),
            Loss::Rejected { code, reason } => {
                format!("the runtime closed the connection with code {code} ({reason})")
            }
        };
        warn!(%reason, calls = self.calls.len(), "connection lost");
        self.emit(|| ConnectionEvent::Disconnected {
            at: std::time::SystemTime::now(),
            reason: reason.clone(),
        });
        if ours {
            self.drop_reason = Some(reason.clone());
        }
        // A connection that carried nothing after its handshake: back off
        // before the next dial; otherwise reconnect at once.
        let delay = if up.useful {
            self.reconnect = None;
            Duration::ZERO
        } else {
            self.reconnect
                .get_or_insert_with(|| self.config.retry.schedule())
                .next_delay(None)
        };
        self.link = Link::Down {
            next_dial: later(now, delay),
        };
        if !self.calls.is_empty() {
            telemetry::reconnecting();
            self.emit(|| ConnectionEvent::Reconnecting {
                at: std::time::SystemTime::now(),
                attempt: 1,
                delay,
            });
        }
        self.requests.clear();
        self.outbox.clear();
        self.cancel_writes.clear();
        let alone = up.unanswered <= 1;
        self.window_after_loss = match loss {
            Loss::Rejected { .. } => 1,
            Loss::Network(_) => WINDOW_AFTER_LOSS,
        };
        let handed = self.handed_seq;
        let max_elapsed = self.config.retry.max_elapsed;
        let mut rejected = Vec::new();
        for (&id, call) in self.calls.iter_mut() {
            match &call.phase {
                Phase::Sent { seq, .. } => {
                    // Only a request never handed to the writer is proven
                    // not to have reached the runtime.
                    let written = *seq <= handed;
                    call.exposure.in_doubt |= written;
                    if let (Loss::Rejected { code, reason }, true) = (&loss, written) {
                        let rejections = &mut call.troubles_mut().rejections;
                        rejections.0 += 1;
                        rejections.1 = *code;
                        rejections.2 = reason.clone();
                        rejections.3 = alone;
                        if rejections.0 >= 2 && alone {
                            rejected.push(id);
                        }
                    }
                    call.phase = Phase::Queued { not_before: now };
                }
                Phase::Accepted { .. } => {
                    call.awaiting_resume = true;
                    call.phase = Phase::Queued { not_before: now };
                }
                Phase::Queued { .. } => {}
            }
            call.take_subscribe_request();
            if let Some(cancel) = &mut call.cancel {
                cancel.request = None;
            }
            call.start_recovery(now, max_elapsed);
            call.troubles_mut().last_error = Some(format!("connection lost: {reason}"));
        }
        for id in rejected {
            let Some(call) = self.calls.get(&id) else {
                continue;
            };
            let Some((_, code, reason, _)) = call.troubles.as_ref().map(|t| t.rejections.clone())
            else {
                continue;
            };
            let error = Error::RequestRejected {
                key: call.key.clone(),
                close_code: code,
                reason,
                attempts: call.attempts,
            };
            self.finish(id, Err(error));
        }
        let ids: Vec<CallId> = self.calls.keys().copied().collect();
        for id in ids {
            self.rearm(id, now);
        }
    }

    // ----- the per-call state machine ------------------------------------------------

    /// Decides what call `id` does next. Idempotent: timers may fire late
    /// or twice.
    pub(super) fn step(&mut self, id: CallId, now: Instant) {
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        call.waiters.retain(|w| !w.shared.is_abandoned());
        if !call.is_wanted() {
            debug!(parent: &call.span, "call abandoned by its callers");
            let cancel = call.cancel_so_far("the caller gave up before the cancel was written");
            call.answer_cancel(cancel);
            // The key may be bound on the runtime: another intent under it
            // must not be sent from this client.
            if call.exposure_now().unresolved() == Execution::MayHaveRun {
                let (key, fingerprint) = (call.key.clone(), call.fingerprint);
                self.cache.remember_binding(key, fingerprint, now);
            }
            self.forget(id);
            return;
        }
        if now >= call.deadline_at {
            let error = Error::DeadlineExceeded {
                key: call.key.clone(),
                job_id: call.job(),
                deadline: call.deadline,
                attempts: call.attempts,
                execution: call.exposure_now().unresolved(),
            };
            self.finish(id, Err(error));
            return;
        }
        let cancel_due = call
            .cancel
            .as_ref()
            .is_some_and(|c| now >= c.until && !c.waiters.is_empty());
        if cancel_due {
            let outcome = call.cancel_so_far(&format!(
                "the cancel could not be written to a connection within {:?}; \
                 it is sent when the connection is back while the call is live",
                self.config.cancel_timeout
            ));
            call.answer_cancel(outcome);
        }
        let max_attempts = self.config.retry.max_attempts;
        match call.phase {
            Phase::Queued { not_before } => {
                if call.budget_spent(now, max_attempts) {
                    self.give_up(id, "the retry budget is spent");
                    return;
                }
                if now >= not_before {
                    self.try_send(id, now);
                }
            }
            Phase::Accepted {
                ladder_at: Some(at),
            } => {
                if call.budget_spent(now, u32::MAX) {
                    self.give_up(id, "the retry budget is spent");
                    return;
                }
                if now >= at {
                    self.ladder_step(id, now);
                }
            }
            Phase::Sent { .. } | Phase::Accepted { ladder_at: None } => {}
        }
        self.rearm(id, now);
    }

    /// Sends the call's next attempt, or queues it for the send window.
    fn try_send(&mut self, id: CallId, now: Instant) {
        let Link::Up(up) = &mut self.link else {
            // Waiting for a connection is retrying.
            if let Some(call) = self.calls.get_mut(&id) {
                call.start_recovery(now, self.config.retry.max_elapsed);
            }
            return;
        };
        if up.unanswered >= up.window {
            if !up.window_queue.contains(&id) {
                up.window_queue.push_back(id);
            }
            return;
        }
        let dialect = up.dialect;
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        // The payload is encoded once per dialect and re-sent byte-identical;
        // only the envelope (id, timestamp, session) is new.
        if let Err(e) = call.outgoing.prepare(dialect) {
            // Only re-encoding for another dialect can fail, and a client
            // keeps the dialect of its first session: this does not happen.
            // Should it, an earlier attempt may have run: the give-up rule
            // says so.
            let reason =
                format!("the request could not be re-encoded for the {dialect} dialect: {e}");
            self.give_up_with(id, &reason, true);
            return;
        }
        // Mark every live waiter sent before writing: a waiter that gave
        // up first is dropped, and nothing goes out if none is left.
        call.waiters.retain(|w| w.shared.mark_sent());
        if call.waiters.is_empty() {
            self.forget(id);
            return;
        }
        call.attempts += 1;
        call.span.record("attempt", call.attempts);
        for waiter in &call.waiters {
            waiter.shared.set_attempts(call.attempts);
        }
        if let Some(recorder) = &call.recorder {
            recorder.sent(&call.key, call.attempts);
        }
        let Some(encoded) = call.outgoing.encoded() else {
            return;
        };
        arcp_types::write_new_message_id(&mut self.message_id);
        let request = RequestId::from(self.message_id.as_str());
        arcp_types::write_now_rfc3339(&mut self.timestamp);
        let mut header = Header::outgoing(&request, &self.timestamp);
        let mut trace = [0; 32];
        header.trace_id = Some(Cow::Borrowed(call.trace_id.write(&mut trace)));
        header.session_id = self.session.id.as_deref().map(Cow::Borrowed);
        let text = encoded.frame_with(&header);
        debug!(parent: &call.span, attempt = call.attempts, %request, "request sent");
        up.unanswered += 1;
        if up.live.awaiting_since.is_none() {
            up.live.awaiting_since = Some(now);
        }
        let seq = self.queue_text(text);
        if let Some(call) = self.calls.get_mut(&id) {
            call.phase = Phase::Sent {
                request: request.clone(),
                seq,
            };
        }
        self.requests.insert(request, id, ReqKind::Submit);
    }

    /// Sends calls that were waiting for the window, oldest first.
    fn fill_window(&mut self, now: Instant) {
        loop {
            let Link::Up(up) = &mut self.link else {
                return;
            };
            if up.unanswered >= up.window {
                return;
            }
            let Some(id) = up.window_queue.pop_front() else {
                return;
            };
            self.step(id, now);
        }
    }

    /// A request of the call left the unanswered set: its slot is free and
    /// the window grows by one (slow start).
    pub(super) fn answered(&mut self, now: Instant) {
        if let Link::Up(up) = &mut self.link {
            up.unanswered = up.unanswered.saturating_sub(1);
            up.live.awaiting_since = (up.unanswered > 0).then_some(now);
            up.window = (up.window + 1).min(self.config.max_in_flight);
            up.useful = true;
        }
    }

    /// The job was accepted but its outcome is not coming on the live
    /// stream: subscribe (where the runtime offers it), else re-send with
    /// the same key; a runtime that never hands an outcome to a new
    /// request gets one confirming re-send.
    fn ladder_step(&mut self, id: CallId, now: Instant) {
        let (generation, subscribe_ok, carries) = match &self.link {
            Link::Up(up) => (
                Some(up.generation),
                up.profile.supports_subscribe,
                up.profile.replays_terminal || up.profile.supports_subscribe,
            ),
            _ => (None, false, true),
        };
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        let wait = call
            .ladder
            .get_or_insert_with(|| Box::new(self.config.retry.ladder()))
            .next_ceiling();
        let troubles = call.troubles_mut();
        let subscribe = subscribe_ok
            && !troubles.subscribe_refused
            && generation.is_some()
            && troubles.subscribed_on != generation
            && call.job_id.is_some();
        if subscribe {
            call.troubles_mut().subscribed_on = generation;
            call.phase = Phase::Accepted {
                ladder_at: Some(later(now, wait)),
            };
            let frame = Frame::new(Message::Subscribe(Subscribe {
                job_id: call.job().expect("checked above"),
                from_event_seq: Some(0),
                history: Some(true),
                extra: Default::default(),
            }));
            debug!(parent: &call.span, "subscribing to the job's stream with history");
            let request = frame.envelope.id.clone();
            call.troubles_mut().subscribe_request = Some(request.clone());
            self.queue_frame(frame);
            self.requests
                .insert(RequestId::from(request), id, ReqKind::Subscribe);
            return;
        }
        if !carries {
            if call.confirming {
                self.give_up_permanent(id);
                return;
            }
            call.confirming = true;
        }
        debug!(parent: &call.span, "no outcome on the live stream; re-sending with the same key");
        call.troubles_mut().last_error =
            Some("the runtime answered with job.accepted only; no outcome was delivered".into());
        call.phase = Phase::Queued { not_before: now };
        self.try_send(id, now);
    }

    /// Ends a call whose job the runtime will never report to us.
    pub(super) fn give_up_permanent(&mut self, id: CallId) {
        self.give_up_with(
            id,
            "the runtime replays only job.accepted for this job and nothing carries its outcome \
             to this session",
            true,
        );
    }

    fn give_up(&mut self, id: CallId, reason: &str) {
        self.give_up_with(id, reason, false);
    }

    /// Ends a call without its outcome, by the one give-up rule.
    fn give_up_with(&mut self, id: CallId, reason: &str, permanent: bool) {
        let Some(call) = self.calls.get(&id) else {
            return;
        };
        // A permanent give-up names its reason alone: the last transport
        // error does not explain it.
        let last = (!permanent).then_some(call.last_error()).flatten();
        let error = give_up(
            &call.key,
            call.job_id.as_deref(),
            call.exposure_now(),
            call.attempts,
            reason,
            last,
            permanent,
        );
        self.finish(id, Err(error));
    }

    /// Resolves a call: answers every waiter, caches a terminal outcome,
    /// and removes all state of the call.
    pub(super) fn finish(&mut self, id: CallId, outcome: Outcome) {
        let Some(mut call) = self.forget(id) else {
            return;
        };
        let outcome = outcome.map_err(|e| e.with_attempts(call.attempts));
        match &outcome {
            Ok(out) => {
                call.span.record("outcome", "ok");
                info!(parent: &call.span, attempts = out.attempts, replayed = out.replayed, "call succeeded")
            }
            Err(e) => {
                call.span.record("outcome", e.code_name().as_str());
                info!(parent: &call.span, attempts = call.attempts, execution = %e.execution(), error = %e, "call failed")
            }
        }
        if call.dropped_events > 0 {
            warn!(parent: &call.span, dropped = call.dropped_events, "events dropped: the caller did not drain the event stream");
        }
        self.cache
            .insert(call.key.clone(), call.fingerprint, &outcome, Instant::now());
        let cancel = match &outcome {
            Err(Error::Cancelled { .. }) => CancelOutcome::Acknowledged,
            // The job reached its own end: nothing is left to cancel.
            Ok(_) | Err(Error::Tool(_) | Error::DuplicateKey { .. }) => {
                CancelOutcome::AlreadyFinished
            }
            // The client stopped waiting; the job may still run.
            Err(_) => call.cancel_so_far("the call ended before the cancel was written"),
        };
        call.answer_cancel(cancel);
        // Clones for joined callers; the last one takes the outcome itself.
        let mut waiters = call.waiters;
        let last = waiters.pop();
        for waiter in waiters {
            self.replies.push((waiter.reply, outcome.clone()));
        }
        if let Some(waiter) = last {
            self.replies.push((waiter.reply, outcome));
        }
    }

    /// Hands the outcomes of the calls finished since the last time to
    /// their callers. The driver does so once per wake-up, after handling
    /// everything that woke it: callers then start their next calls while
    /// the driver waits, instead of contending with it for the rest of its
    /// turn (measured: about a tenth less CPU per call at 64 in flight).
    pub(crate) fn hand_out_replies(&mut self) {
        for (reply, outcome) in self.replies.drain(..) {
            let _ = reply.send(outcome);
        }
    }

    /// Removes every trace of a call (maps, requests, window) and returns it.
    fn forget(&mut self, id: CallId) -> Option<Box<Call>> {
        let call = self.calls.remove(&id)?;
        if self.by_key.get(&call.key) == Some(&id) {
            self.by_key.remove(&call.key);
        }
        if let Some(job) = &call.job_id {
            if self.by_job.get(job) == Some(&id) {
                self.by_job.remove(job);
            }
        }
        if let Phase::Sent { request, .. } = &call.phase {
            if self.requests.remove(request).is_some() {
                self.answered(Instant::now());
            }
        }
        if let Some(request) = call.subscribe_request() {
            self.requests.remove(request);
        }
        if let Some((request, _)) = call.cancel.as_ref().and_then(|c| c.request.as_ref()) {
            self.requests.remove(request);
        }
        if let Link::Up(up) = &mut self.link {
            up.window_queue.retain(|&q| q != id);
        }
        Some(call)
    }

    // ----- plumbing ----------------------------------------------------------------

    /// Arms the call's timer at its next wake, if that changed.
    pub(super) fn rearm(&mut self, id: CallId, now: Instant) {
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        let at = call.next_wake(now);
        if call.timer == Some(at) {
            return;
        }
        call.timer = Some(at);
        call.timer_gen = call.timer_gen.wrapping_add(1);
        self.timers.push(Reverse((at, id, call.timer_gen)));
    }

    /// Drops stale timer entries once the heap has doubled (amortised O(1)).
    fn compact(&mut self) {
        if self.timers.len() > 2 * self.calls.len() + TIMER_COMPACT_MIN {
            let calls = &self.calls;
            self.timers
                .retain(|Reverse((_, id, gen))| calls.get(id).is_some_and(|c| c.timer_gen == *gen));
        }
    }

    /// Encodes and queues a frame on the live connection; returns its
    /// transmit seq.
    pub(super) fn queue_frame(&mut self, mut frame: Frame) -> u64 {
        let Link::Up(up) = &self.link else {
            return self.queued_seq;
        };
        frame.envelope.session_id = self.session.id.clone();
        self.outbox.push(up.dialect.encode(&frame));
        self.queued_seq += 1;
        self.queued_seq
    }

    /// Queues an already encoded frame on the live connection; returns its
    /// transmit seq.
    fn queue_text(&mut self, text: String) -> u64 {
        if matches!(self.link, Link::Up(_)) {
            self.outbox.push(text);
            self.queued_seq += 1;
        }
        self.queued_seq
    }

    fn maybe_ack(&mut self, now: Instant) {
        let seq = self.session.last_event_seq;
        let due = match &self.link {
            Link::Up(up) => {
                up.profile.accepts_ack
                    && seq > up.live.acked_seq
                    && now.saturating_duration_since(up.live.last_ack) >= ACK_EVERY
            }
            _ => false,
        };
        if due {
            self.queue_frame(Frame::new(Message::Ack(arcp_types::Ack {
                last_processed_seq: seq,
                extra: Default::default(),
            })));
            if let Link::Up(up) = &mut self.link {
                up.live.acked_seq = seq;
                up.live.last_ack = now;
            }
        }
    }

    /// The key of the call bound to `job`, for tests.
    #[cfg(test)]
    pub(crate) fn key_of_job(&self, job: &str) -> Option<IdempotencyKey> {
        self.by_job
            .get(job)
            .and_then(|id| self.calls.get(id))
            .map(|c| c.key.clone())
    }

    /// The first caller's shared state of the call bound to `job`, for tests.
    #[cfg(test)]
    pub(crate) fn shared_of_job(&self, job: &str) -> Option<Arc<CallShared>> {
        let call = self.by_job.get(job).and_then(|id| self.calls.get(id))?;
        call.waiters.first().map(|w| w.shared.clone())
    }

    /// What the core holds (`Client::stats`).
    pub(crate) fn stats(&self) -> ClientStats {
        ClientStats {
            calls: self.calls.len(),
            requests: self.requests.len(),
            timers: self.timers.len(),
            cached_outcomes: self.cache.len(),
        }
    }
}

/// The same error with a note on why it is final.
fn with_context(error: Error, context: &str) -> Error {
    match error {
        Error::Connect { url, message, .. } => Error::Connect {
            url,
            message: format!("{message}; {context}"),
            retryable: true,
        },
        Error::Handshake { url, message, .. } => Error::Handshake {
            url,
            message: format!("{message}; {context}"),
            retryable: true,
        },
        other => other,
    }
}

/// Marks the time of any inbound frame on the live link.
pub(super) fn touch(link: &mut Link, now: Instant) {
    if let Link::Up(up) = link {
        up.live.last_inbound = now;
    }
}
