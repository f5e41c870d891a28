//! The I/O-free connection core, in quinn-proto's shape: no socket, no
//! `await`, no clock of its own. The driver feeds it commands, dial
//! results, frames, flush reports and the time; it answers with frames to
//! write (`take_transmit`), the next instant it needs a look
//! (`poll_timeout`), whether to dial (`poll_dial`) or drop the connection
//! (`take_drop`). Outcomes go to each caller's oneshot, handed out once
//! per wake-up (`hand_out_replies`).
//!
//! One turn of the driver (`driver.rs`) calls, in this order:
//!
//! 1. `take_drop` (the core found the connection dead: drop the socket),
//!    `is_closed` (end the loop), `poll_dial` (start a dial),
//!    `has_transmit` / `take_transmit` (start a write with every queued
//!    frame, when the writer is idle), `poll_timeout` (the instant to wake
//!    at);
//! 2. one input, whichever came first: `command` (and the commands already
//!    waiting), `on_established` / `on_dial_failed`, `on_text` /
//!    `on_activity` / `on_lost` (and the frames already received),
//!    `on_flushed` / `on_lost`, or the timer;
//! 3. `handle_timeout(now)`, every turn whatever woke it (timers, liveness,
//!    the send window, acks), then `hand_out_replies`.
//!
//! Each input may queue frames and change timers; nothing is written or
//! awaited until the next turn's step 1.
//!
//! The state is in owned types, each with private fields and its
//! invariants next to it: the link and the live connection
//! (`link_state.rs`), the request table (`requests.rs`), the outbox and
//! its sequence numbers (`outbox.rs`), the timers (`timers.rs`), the
//! session and liveness (`session.rs`), each call (`calls.rs`).
//!
//! This file holds the core's state and what the driver asks of it (what
//! to write, when to look, whether to dial) and the time; the rest of
//! `impl Core` is split by concern into its child modules in `core/`:
//! `commands.rs` (client handles), `link_events.rs` (handshakes, dial
//! failures, flushes, losses), `inbound.rs` (frames from the runtime;
//! results and errors in `inbound/verdicts.rs`) and `call_machine.rs`
//! (`step`, the one place that decides what a call does next, and how a
//! call ends; timers only say *when* to look); its unit tests are
//! `core/tests.rs`.
//!
//! The core's fields are private: only this file and its children read
//! them. The rest of `ws/` (the driver, the connector, the transport)
//! reaches the core through its methods; what the shell and the core tell
//! each other about the link (the dial to make, how it went, a loss) are
//! plain records in `link_io.rs`.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arcp_types::{Dialect, Frame, IdempotencyKey, Message};
use tokio::sync::oneshot;

use super::call_table::CallTable;
use super::dialer::Dialer;
use super::given_up::GivenUpSubmits;
use super::ids::CallId;
use super::link_io::{DialPlan, Loss};
use super::link_state::{Link, WINDOW_AFTER_LOSS};
use super::outbox::Outbox;
use super::requests::Requests;
use super::session::{LivenessAction, Session};
use super::timers::TimerTable;
use crate::cache::{OutcomeCache, Settled};
use crate::config::{Config, DialectChoice};
use crate::connection_events::ConnectionEvent;
use crate::error::Error;
use crate::outcome::CancelOutcome;
use crate::profile::RuntimeProfile;
use crate::request::{CallRequest, CallShared};
use crate::retry::saturating_deadline;
use crate::stats::ClientStats;

mod call_machine;
mod commands;
mod inbound;
mod link_events;

/// Requests from client handles. Nearly every one is an `Invoke`: the
/// size difference wastes little.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Command {
    /// Run a call; its outcome goes to the sender. The request travels by
    /// value: its box is freed by the caller that allocated it, not by the
    /// connection task on another thread (a block freed on another thread
    /// contends for the allocator's lock; measured).
    Invoke(CallRequest, oneshot::Sender<Settled>),
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

/// How often calls waiting for the send window are re-checked.
const WINDOW_RECHECK: Duration = Duration::from_millis(50);

/// The connection core.
pub(crate) struct Core {
    config: Arc<Config>,
    /// The calls, by id, key and job (`call_table.rs`).
    calls: CallTable,
    requests: Requests,
    /// Submits of calls given up before their acceptance (`given_up.rs`).
    given_up: GivenUpSubmits,
    timers: TimerTable,
    cache: OutcomeCache,
    session: Session,
    link: Link,
    generation: u64,
    outbox: Outbox,
    /// When to dial again after a loss or a failed dial (`dialer.rs`).
    dialer: Dialer,
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
    /// The id and timestamp of the envelope being written, reused so that
    /// writing a request allocates only its shared id and its text.
    message_id: String,
    timestamp: String,
    /// The dialect callers encode their requests for
    /// ([`PreparedCall`](crate::request::PreparedCall)):
    /// the configured one, or the first session's (a client keeps it).
    dialect: Arc<OnceLock<Dialect>>,
    /// Outcomes of calls finished in this turn, not yet handed out
    /// ([`Core::hand_out_replies`]).
    replies: Vec<(oneshot::Sender<Settled>, Settled)>,
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
        let budget = saturating_deadline(now, config.connect_budget);
        let dialer = Dialer::new(&config);
        let config_dialect = match config.dialect {
            DialectChoice::V1_1 => Some(Dialect::V1_1),
            DialectChoice::Legacy => Some(Dialect::Legacy),
            DialectChoice::Auto => None,
        };
        Core {
            cache: OutcomeCache::new(config.outcome_cache_capacity, config.outcome_cache_ttl)
                .with_max_bytes(config.outcome_cache_bytes),
            config,
            calls: CallTable::default(),
            requests: Requests::default(),
            given_up: GivenUpSubmits::default(),
            timers: TimerTable::default(),
            session: Session::default(),
            link: Link::Down { next_dial: now },
            generation: 0,
            message_id: String::new(),
            timestamp: String::new(),
            replies: Vec::new(),
            dialect: Arc::new(match config_dialect {
                Some(dialect) => OnceLock::from(dialect),
                None => OnceLock::new(),
            }),
            outbox: Outbox::default(),
            dialer,
            ready: ready.map(|r| (r, budget)),
            window_after_loss: WINDOW_AFTER_LOSS,
            drop_reason: None,
            close_replies: Vec::new(),
            profile_out,
            events,
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

    /// Calls in progress (sent or waiting to be).
    pub(crate) fn calls_waiting(&self) -> usize {
        self.calls.len()
    }

    /// Whether reads should re-arm TCP_QUICKACK: the runtime may write a
    /// reply in pieces ([`RuntimeProfile::writes_in_pieces`]) and something
    /// still waits for it. With nothing waiting, the ACK rides on the next
    /// request instead: an ACK of its own is a packet through both ends'
    /// network stacks, a fifth of a call's client CPU at one in flight.
    pub(crate) fn wants_quickack(&self) -> bool {
        let awaited = !self.calls.is_empty() || self.requests.len() > 0;
        awaited && self.session.profile().is_none_or(|p| p.writes_in_pieces)
    }

    /// How many calls wait for the runtime's next bytes, for the ACK rule
    /// (`ack.rs`): none when the runtime writes each reply whole (see
    /// [`Core::wants_quickack`]).
    pub(crate) fn calls_awaiting_runtime(&self) -> usize {
        if self.wants_quickack() {
            self.calls.len().max(self.requests.len())
        } else {
            0
        }
    }

    /// Requests the runtime has not answered yet (submits not yet
    /// accepted, subscribes, cancels), for the ACK rule (`ack.rs`).
    pub(crate) fn requests_unanswered(&self) -> usize {
        self.requests.len()
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
        self.outbox.hand_to_writer(into)
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
        let dialects = match (self.session.dialect(), self.config.dialect) {
            (Some(d), _) => vec![d],
            (None, DialectChoice::Legacy) => vec![Dialect::Legacy],
            (None, DialectChoice::Auto) => vec![Dialect::V1_1, Dialect::Legacy],
            (None, _) => vec![Dialect::V1_1],
        };
        self.link = Link::Dialing;
        Some(DialPlan {
            dialects,
            resume: self.session.resume_request(),
            had_session: self.session.dialect().is_some(),
        })
    }

    fn wants_connection(&self) -> bool {
        self.ready.is_some() || !self.calls.is_empty()
    }

    /// The next instant the core needs `handle_timeout`.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let mut at = self.timers.next_deadline();
        let mut min = |t: Instant| at = Some(at.map_or(t, |a: Instant| a.min(t)));
        if let Some((_, budget)) = &self.ready {
            min(*budget);
        }
        if let Some(t) = self.cache.next_expiry() {
            min(t);
        }
        match &self.link {
            Link::Down { next_dial } if self.wants_connection() => min(*next_dial),
            Link::Up(up) => {
                if let Some(t) = up.live().next_wake(self.config.response_timeout) {
                    min(t);
                }
                if up.has_waiting() {
                    min(saturating_deadline(Instant::now(), WINDOW_RECHECK));
                }
                if up.profile().accepts_ack {
                    if let Some(t) = up.live().next_ack(self.session.last_event_seq()) {
                        min(t);
                    }
                }
            }
            _ => {}
        }
        at
    }

    // ----- time -----------------------------------------------------------------

    /// Serves every timer due at `now`.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.cache.expire(now);
        if let Some((_, budget)) = &self.ready {
            if now >= *budget && !matches!(self.link, Link::Up(_)) {
                let error = self.connect_give_up();
                self.fail_ready(error);
            }
        }
        // Take the due timers first: a step re-arms at a later instant
        // only, but a bug there must cost a spin of one turn, not a hang.
        let calls = &self.calls;
        let due = self
            .timers
            .pop_expired(now, |id| calls.get(&id).map(|c| c.timer()));
        for id in due {
            if let Some(call) = self.calls.get_mut(&id) {
                call.timer_mut().clear();
            }
            self.step(id, now);
        }
        let mut action = LivenessAction::None;
        if let Link::Up(up) = &mut self.link {
            action = up.live_mut().check(now, self.config.response_timeout);
        }
        match action {
            LivenessAction::Dead(reason) => self.lose(Loss::Network(reason.into()), now, true),
            LivenessAction::Ping => {
                self.queue_frame(Frame::new(Message::Ping(
                    arcp_types::Ping::new(arcp_types::new_message_id())
                        .with_sent_at(arcp_types::now_rfc3339()),
                )));
            }
            LivenessAction::None => {}
        }
        self.fill_window(now);
        self.maybe_ack(now);
        self.compact();
        // Re-sends, pings and acks may have queued behind a stalled write.
        self.check_outbox(now);
    }

    // ----- plumbing ----------------------------------------------------------------

    /// Arms the call's timer at its next wake, if that changed.
    fn rearm(&mut self, id: CallId, now: Instant) {
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        let at = call.next_wake(now);
        self.timers.schedule(call.timer_mut(), id, at);
    }

    /// Drops stale timer entries once the heap has doubled (amortised O(1)).
    fn compact(&mut self) {
        let calls = &self.calls;
        self.timers
            .compact(calls.len(), |id| calls.get(&id).map(|c| c.timer()));
    }

    /// Encodes and queues a frame on the live connection; returns its
    /// transmit seq.
    fn queue_frame(&mut self, mut frame: Frame) -> u64 {
        let Link::Up(up) = &self.link else {
            return self.outbox.last_queued();
        };
        frame.envelope.session_id = self.session.id().map(str::to_owned);
        self.outbox.push(up.dialect().encode(&frame))
    }

    /// Queues an already encoded frame on the live connection; returns its
    /// transmit seq.
    fn queue_text(&mut self, text: String) -> u64 {
        if matches!(self.link, Link::Up(_)) {
            return self.outbox.push(text);
        }
        self.outbox.last_queued()
    }

    fn maybe_ack(&mut self, now: Instant) {
        let seq = self.session.last_event_seq();
        let due = match &self.link {
            Link::Up(up) => up.profile().accepts_ack && up.live().ack_due(seq, now),
            _ => false,
        };
        if due {
            self.queue_frame(Frame::new(Message::Ack(arcp_types::Ack::new(seq))));
            if let Link::Up(up) = &mut self.link {
                up.live_mut().acked(seq, now);
            }
        }
    }

    /// The key of the call bound to `job`, for tests.
    #[cfg(test)]
    fn key_of_job(&self, job: &str) -> Option<IdempotencyKey> {
        self.calls
            .by_job(job)
            .and_then(|id| self.calls.get(&id))
            .map(|c| c.key().clone())
    }

    /// The first caller's shared state of the call bound to `job`, for tests.
    #[cfg(test)]
    fn shared_of_job(&self, job: &str) -> Option<Arc<CallShared>> {
        let call = self.calls.by_job(job).and_then(|id| self.calls.get(&id))?;
        call.waiters().iter().next().map(|w| w.shared.clone())
    }

    /// What the core holds (`Client::stats`).
    pub(crate) fn stats(&self) -> ClientStats {
        ClientStats {
            calls: self.calls.len(),
            requests: self.requests.len(),
            cached_outcomes: self.cache.len(),
        }
    }
}

/// The same error with a note on why it is final.
fn with_context(error: Error, context: &str) -> Error {
    match error {
        Error::Connect {
            url,
            message,
            source,
            ..
        } => Error::Connect {
            url,
            message: format!("{message}; {context}"),
            retryable: true,
            source,
        },
        Error::Handshake {
            url,
            message,
            source,
            ..
        } => Error::Handshake {
            url,
            message: format!("{message}; {context}"),
            retryable: true,
            source,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests;
