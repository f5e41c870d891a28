//! What happens on the link, in the core: a handshake completed, a dial
//! failed (the connect budget), writes flushed, the connection lost (what
//! becomes of every call on it). When to dial again is the dialer's
//! (`dialer.rs`); the link's states are `link_state.rs`.

use std::time::Instant;

use tracing::{info, warn};

use crate::classify::Ending;
use crate::connection_events::ConnectionEvent;
use crate::error::Error;
use crate::retry::saturating_deadline;
use crate::sync::lock;
use crate::telemetry::{self};
use crate::ws::calls::Phase;
use crate::ws::ids::CallId;
use crate::ws::session::Liveness;

use super::{with_context, Core};
use crate::ws::dialer::{AfterDialFailure, LostLink};
use crate::ws::link_io::{DialFailure, Established, Loss};
use crate::ws::link_state::{Link, Up, WINDOW_AFTER_LOSS};

impl Core {
    /// The driver completed a handshake.
    pub(crate) fn on_established(&mut self, est: Established, now: Instant) {
        let _ = self.dialect.set(est.dialect);
        let resumed = self
            .session
            .install(est.dialect, &est.welcome, est.resuming);
        let profile = self.session.profile().cloned().expect("installed above");
        self.generation += 1;
        self.dialer.connected();
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
        *lock(&self.profile_out) = Some(profile.clone());
        let live = Liveness::new(&self.config, &profile, &est.welcome, now);
        let window = if self.ready.is_some() {
            self.config.max_in_flight
        } else {
            self.window_after_loss.min(self.config.max_in_flight)
        };
        self.link = Link::Up(Box::new(Up::new(
            self.generation,
            est.dialect,
            profile.clone(),
            live,
            window,
            now,
        )));
        if let Some((ready, _)) = self.ready.take() {
            let _ = ready.send(Ok(profile.clone()));
        }
        let mut ids: Vec<CallId> = self.calls.ids();
        ids.sort_unstable();
        let ladder_first = self.config.retry.outcome_poll;
        for &id in &ids {
            let Some(call) = self.calls.get_mut(&id) else {
                continue;
            };
            if call.take_awaiting_resume() {
                if resumed {
                    // The resumed session may deliver the outcome (buffered
                    // or live): wait for it before re-sending.
                    let wait = call
                        .ladder_mut()
                        .get_or_insert_with(|| Box::new(self.config.retry.ladder()))
                        .next_ceiling()
                        .max(ladder_first);
                    call.ladder_at(saturating_deadline(now, wait));
                } else if !profile.replays_terminal && !profile.supports_subscribe {
                    // Nothing carries the job to this session: one
                    // confirming re-send, then the outcome is unknown.
                    call.confirm();
                }
            }
        }
        for id in ids {
            if self.calls.get(&id).is_some_and(|c| c.cancel().is_some()) {
                self.send_cancel(id);
            }
            self.step(id, now);
        }
    }

    /// The driver's dial failed.
    pub(crate) fn on_dial_failed(&mut self, failure: DialFailure, now: Instant) {
        warn!(error = %failure.error, transient = failure.transient, "connecting failed");
        // `connect()`'s budget binds only until the first session.
        let ever = self.session.profile().is_some();
        let connect_budget = self.ready.as_ref().map(|(_, budget)| *budget);
        let next = self.dialer.dial_failed(
            failure.transient,
            failure.floor,
            connect_budget.filter(|_| !ever),
            now,
        );
        let AfterDialFailure::Retry {
            at,
            delay,
            attempt,
            past_connect_budget,
        } = next
        else {
            if self.ready.is_some() {
                self.fail_ready(failure.error.clone());
            }
            // Definitive: calls that may have run keep their key and job id;
            // the others end with the refusal itself (nothing was sent).
            for id in self.calls.ids() {
                self.end_without_outcome(id, Ending::ConnectFailed(failure.error.clone()));
            }
            self.link = if self.is_closed() {
                Link::Closed
            } else {
                Link::Down { next_dial: now }
            };
            return;
        };
        let message = failure.error.to_string();
        telemetry::reconnecting();
        self.emit(|| ConnectionEvent::Reconnecting {
            at: std::time::SystemTime::now(),
            attempt,
            delay,
        });
        let ids: Vec<CallId> = self.calls.ids();
        for &id in &ids {
            if let Some(call) = self.calls.get_mut(&id) {
                call.budget_mut().start(&self.config.retry, now);
                call.failed(message.clone());
            }
        }
        if past_connect_budget {
            let budget = self.config.connect_budget;
            self.fail_ready(with_context(
                failure.error,
                &format!("gave up after retrying for the connect budget of {budget:?}"),
            ));
            return;
        }
        self.link = if self.is_closed() {
            Link::Closed
        } else {
            Link::Down { next_dial: at }
        };
        for id in ids {
            self.step(id, now);
        }
    }

    /// The error `connect()` ends with when its budget runs out mid-dial.
    pub(super) fn connect_give_up(&self) -> Error {
        Error::Connect {
            url: crate::config::shown_url(&self.config.url),
            message: format!(
                "no session within the connect budget of {:?}",
                self.config.connect_budget
            ),
            retryable: true,
            source: Some(crate::error::ErrorSource::new(std::io::Error::from(
                std::io::ErrorKind::TimedOut,
            ))),
        }
    }

    /// Ends `connect()` with `error`; the core is then done unless calls
    /// are waiting.
    pub(super) fn fail_ready(&mut self, error: Error) {
        if let Some((ready, _)) = self.ready.take() {
            let _ = ready.send(Err(error));
            if self.calls.is_empty() {
                self.link = Link::Closed;
            }
        }
    }

    /// A frame that carries no message (a WebSocket ping or pong) arrived.
    pub(crate) fn on_activity(&mut self, now: Instant) {
        self.link.note_inbound(now);
    }

    /// The driver reports frames written up to transmit seq `upto`.
    pub(crate) fn on_flushed(&mut self, upto: u64, now: Instant) {
        if let Link::Up(up) = &mut self.link {
            up.live_mut().note_outbound(now);
        }
        let calls = &mut self.calls;
        self.outbox.on_flushed(upto, |id| {
            if let Some(cancel) = calls.get_mut(&id).and_then(|c| c.cancel_mut()) {
                cancel.flushed();
            }
        });
    }

    /// Drops the link when the frames waiting for the writer exceed the
    /// outbox bound (`max_outbox_bytes`, at least one frame's worth): a
    /// runtime that keeps sending (pings to answer) and stops reading would
    /// otherwise grow them without end while the write is stalled. The
    /// calls are re-driven with their keys on a new connection; what was
    /// handed to the writer may have run, what was not was never sent.
    pub(crate) fn check_outbox(&mut self, now: Instant) {
        let bound = self.outbox_bound();
        let queued = self.outbox.queued_bytes();
        if queued > bound && matches!(self.link, Link::Up(_)) {
            let reason = format!(
                "the runtime stopped reading: {queued} bytes wait to be written, past the \
                 outbox bound of {bound}"
            );
            self.lose(Loss::Network(reason), now, true);
        }
    }

    /// The outbox bound: `max_outbox_bytes`, at least one frame's worth.
    fn outbox_bound(&self) -> usize {
        self.config.max_outbox_bytes.max(self.config.max_frame_size)
    }

    /// Whether a submit may be queued now: the outbox is empty, or has room
    /// for a frame of the largest size. A submit that may not waits with
    /// the calls waiting for the send window, so the application's submits
    /// never grow the outbox past its bound while the write is stalled
    /// (slow, or a runtime that stopped reading): they wait for the writer,
    /// within their deadlines, and a stalled write ends at `write_timeout`.
    pub(super) fn outbox_has_room(&self) -> bool {
        let queued = self.outbox.queued_bytes();
        queued == 0 || queued.saturating_add(self.config.max_frame_size) <= self.outbox_bound()
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
        // At once after a useful connection, else after a backoff
        // (`dialer.rs`).
        let redial = self.dialer.lost(
            LostLink {
                useful: up.was_useful(),
                lived: up.lived(now),
                answered: up.answered(),
            },
            now,
        );
        let delay = redial.delay;
        self.link = Link::Down {
            next_dial: redial.at,
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
        self.outbox.discard_on_loss();
        let alone = up.at_most_one_unanswered();
        self.window_after_loss = match loss {
            Loss::Rejected { .. } => 1,
            Loss::Network(_) => WINDOW_AFTER_LOSS,
        };
        let policy = &self.config.retry;
        let mut rejected = Vec::new();
        let outbox = &self.outbox;
        for (&id, call) in self.calls.iter_mut() {
            match call.phase() {
                Phase::Sent { seq, .. } => {
                    // Only a request never handed to the writer is proven
                    // not to have reached the runtime.
                    let written = outbox.was_handed(*seq);
                    // A close saying the frame could not be taken in (too
                    // big, malformed, unsupported), of a request alone on
                    // its connection, answers that request: refused, not
                    // run. A policy close (1008) does not: an auth proxy
                    // that expires tokens on long-lived sockets closes
                    // after forwarding the request. Any other written
                    // request may have run.
                    let refused_alone =
                        alone && matches!(loss, Loss::Rejected { code, .. } if code != 1008);
                    if written && !refused_alone {
                        call.in_doubt();
                    }
                    if let (Loss::Rejected { code, reason }, true) = (&loss, written) {
                        let rejections = call.rejected(*code, reason.clone(), alone);
                        if rejections >= 2 && alone {
                            rejected.push(id);
                        }
                    }
                    call.queue(now);
                }
                Phase::Accepted { .. } => {
                    call.await_resume();
                    call.queue(now);
                }
                Phase::Queued { .. } => {}
            }
            call.take_subscribe_request();
            if let Some(cancel) = call.cancel_mut() {
                cancel.connection_lost();
            }
            call.budget_mut().start(policy, now);
            call.failed(format!("connection lost: {reason}"));
        }
        for id in rejected {
            let Some(call) = self.calls.get(&id) else {
                continue;
            };
            let Some((_, close_code, reason, _)) = call.rejections() else {
                continue;
            };
            // Not run only if no earlier attempt may have run: a call
            // accepted before its connection dropped keeps its job id.
            self.end_without_outcome(id, Ending::RequestRejected { close_code, reason });
        }
        for id in self.calls.ids() {
            self.rearm(id, now);
        }
    }
}
