//! The per-call state machine: `step`, the one place that decides what a
//! call does next (send, wait for a window slot, climb the recovery ladder,
//! give up), and how a call ends (`finish`, `hand_out_replies`, `forget`).

use std::borrow::Cow;
use std::time::Instant;

use arcp_types::{Frame, Header, Message, Subscribe};
use tracing::{debug, info, warn};

use crate::cache::{Outcome, Settled};
use crate::classify::{give_up, Ending};
use crate::error::{Error, Execution};
use crate::outcome::CancelOutcome;
use crate::retry::{saturating_deadline, Decision, Exhausted};
use crate::ws::calls::{Call, Phase};
use crate::ws::ids::{CallId, RequestId};
use crate::ws::requests::ReqKind;

use super::Core;
use crate::ws::link_state::Link;

impl Core {
    /// Decides what call `id` does next. Idempotent: timers may fire late
    /// or twice.
    pub(super) fn step(&mut self, id: CallId, now: Instant) {
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        // A caller whose own deadline has passed before the call's (a
        // joined caller less patient than another) is answered alone.
        if !call.deadline().exceeded(now) {
            for waiter in call.take_expired_waiters(now) {
                // Joined callers are all marked sent: none of them may
                // claim "did not run" for a shared key.
                let mut ended = call.ended();
                ended.exposure.in_doubt |= waiter.shared.abandon();
                let error = waiter.deadline.exceeded_error(ended);
                self.replies.push((waiter.reply, Err(error).into()));
            }
        }
        call.waiters_mut().retain(|w| !w.shared.is_abandoned());
        if !call.is_wanted() {
            debug!(parent: call.span(), "call abandoned by its callers");
            let cancel = call.cancel_so_far("the caller gave up before the cancel was written");
            call.answer_cancel(cancel);
            // The key may be bound on the runtime: another intent under it
            // must not be sent from this client.
            if call.exposure_now().unresolved() == Execution::MayHaveRun {
                let (key, fingerprint) = (call.key().clone(), call.fingerprint());
                let job = call.job_id().cloned();
                // Its acceptance may still come, naming the job.
                if let (None, Phase::Sent { request, .. }) = (&job, call.phase()) {
                    self.given_up
                        .insert(request.clone(), key.clone(), fingerprint);
                }
                self.cache.remember_binding(key, fingerprint, job, now);
            }
            self.forget(id, now);
            return;
        }
        if call.deadline().exceeded(now) {
            let error = call.deadline().exceeded_error(call.ended());
            self.finish(id, Err(error));
            return;
        }
        let cancel_due = call.cancel().is_some_and(|c| c.is_due(now));
        if cancel_due {
            let outcome = call.cancel_so_far(&format!(
                "the cancel could not be written to a connection within {:?}; \
                 it is sent when the connection is back while the call is live",
                self.config.cancel_timeout
            ));
            call.answer_cancel(outcome);
        }
        let policy = &self.config.retry;
        match *call.phase() {
            Phase::Queued { not_before } => {
                // The next attempt starts no sooner than its backoff and
                // the connection's next dial allow.
                let mut at = not_before.max(now);
                if let Link::Down { next_dial } = self.link {
                    at = at.max(next_dial);
                }
                let decision =
                    call.budget()
                        .judge(policy, call.attempts(), at, call.deadline().at(), now);
                if let Decision::GiveUp(why) = decision {
                    self.give_up(id, why);
                    return;
                }
                if now >= not_before {
                    self.try_send(id, now);
                }
            }
            Phase::Accepted {
                ladder_at: Some(at),
            } => {
                if let Err(why) = call.budget().ladder_may_go_on(policy, now) {
                    self.give_up(id, why);
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
        // Every send of the key, whatever scheduled it, before the runtime
        // may have forgotten the key.
        let limit = self
            .calls
            .get(&id)
            .map(|call| call.budget().may_send_at(now));
        if let Some(Err(why)) = limit {
            self.give_up(id, why);
            return;
        }
        let outbox_room = self.outbox_has_room();
        let Link::Up(up) = &mut self.link else {
            // Waiting for a connection is retrying.
            if let Some(call) = self.calls.get_mut(&id) {
                call.budget_mut().start(&self.config.retry, now);
            }
            return;
        };
        if !up.has_room() || !outbox_room {
            up.wait_for_room(id);
            return;
        }
        let dialect = up.dialect();
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        // The payload is encoded once per dialect and re-sent byte-identical;
        // only the envelope (id, timestamp, session) is new.
        if let Err(e) = call.outgoing_mut().prepare(dialect) {
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
        call.waiters_mut().retain(|w| w.shared.mark_sent());
        if call.waiters().is_empty() {
            self.forget(id, now);
            return;
        }
        // The first send starts the runtime's memory of the key.
        let attempt = call.send_attempt(self.config.runtime_key_retention, now);
        let Some(encoded) = call.outgoing().encoded() else {
            return;
        };
        arcp_types::write_new_message_id_and_timestamp(&mut self.message_id, &mut self.timestamp);
        let request = RequestId::from(self.message_id.as_str());
        let mut header = Header::outgoing(&request, &self.timestamp);
        let mut trace = [0; 32];
        header.trace_id = Some(Cow::Borrowed(call.trace_id().write(&mut trace)));
        header.session_id = self.session.id().map(Cow::Borrowed);
        let text = encoded.frame_with(&header);
        debug!(parent: call.span(), attempt, %request, "request sent");
        up.on_submit_sent(now);
        let seq = self.queue_text(text);
        if let Some(call) = self.calls.get_mut(&id) {
            call.on_wire(request.clone(), seq);
        }
        self.requests.insert(request, id, ReqKind::Submit);
    }

    /// Sends calls that were waiting for the window, oldest first.
    pub(super) fn fill_window(&mut self, now: Instant) {
        loop {
            if !self.outbox_has_room() {
                return;
            }
            let Link::Up(up) = &mut self.link else {
                return;
            };
            let Some(id) = up.next_with_room() else {
                return;
            };
            self.step(id, now);
        }
    }

    /// A request of the call left the unanswered set: its slot is free and
    /// the window grows by one (slow start).
    pub(super) fn answered(&mut self, now: Instant) {
        if let Link::Up(up) = &mut self.link {
            up.on_answered(now, self.config.max_in_flight);
        }
    }

    /// The job was accepted but its outcome is not coming on the live
    /// stream: subscribe (where the runtime offers it), else re-send with
    /// the same key; a runtime that never hands an outcome to a new
    /// request gets one confirming re-send.
    fn ladder_step(&mut self, id: CallId, now: Instant) {
        let (generation, subscribe_ok, carries) = match &self.link {
            Link::Up(up) => (
                Some(up.generation()),
                up.profile().supports_subscribe,
                up.profile().replays_terminal || up.profile().supports_subscribe,
            ),
            _ => (None, false, true),
        };
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        let wait = call
            .ladder_mut()
            .get_or_insert_with(|| Box::new(self.config.retry.ladder()))
            .next_ceiling();
        let subscribe_on = generation
            .filter(|&g| subscribe_ok && call.may_subscribe_on(g) && call.job_id().is_some());
        if let Some(generation) = subscribe_on {
            call.ladder_at(saturating_deadline(now, wait));
            let frame = Frame::new(Message::Subscribe(
                Subscribe::new(call.job().expect("checked above"))
                    .with_from_event_seq(0)
                    .with_history(true),
            ));
            debug!(parent: call.span(), "subscribing to the job's stream with history");
            let request = frame.envelope.id.clone();
            call.subscribing(generation, request.clone());
            self.queue_frame(frame);
            self.requests
                .insert(RequestId::from(request), id, ReqKind::Subscribe);
            return;
        }
        if !carries {
            if call.confirming() {
                self.give_up_permanent(id);
                return;
            }
            call.confirm();
        }
        debug!(parent: call.span(), "no outcome on the live stream; re-sending with the same key");
        call.failed("the runtime answered with job.accepted only; no outcome was delivered".into());
        call.queue(now);
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

    /// Ends a call whose retry budget is spent (`why` names the limit). A
    /// next attempt past the call's deadline means the deadline cannot be
    /// kept: the call ends now as the deadline would end it.
    pub(super) fn give_up(&mut self, id: CallId, why: Exhausted) {
        if let Exhausted::Deadline { .. } = why {
            let Some(call) = self.calls.get(&id) else {
                return;
            };
            let error = call.deadline().exceeded_error(call.ended());
            self.finish(id, Err(error));
            return;
        }
        // Past the key's retention, asking again cannot help: the journal
        // ends the record "outcome unknown" instead of re-driving it.
        let permanent = matches!(why, Exhausted::KeyRetention { .. });
        self.give_up_with(id, &why.to_string(), permanent);
    }

    /// Ends a call without its outcome, by the one give-up rule.
    fn give_up_with(&mut self, id: CallId, reason: &str, permanent: bool) {
        let ending = Ending::BudgetSpent {
            reason: reason.to_owned(),
            permanent,
        };
        self.end_without_outcome(id, ending);
    }

    /// Ends a call that did not get the runtime's terminal, by the one
    /// give-up rule ([`give_up`]).
    pub(super) fn end_without_outcome(&mut self, id: CallId, ending: Ending) {
        let Some(call) = self.calls.get(&id) else {
            return;
        };
        let error = give_up(call.ended(), ending);
        self.finish(id, Err(error));
    }

    /// Resolves a call: answers every waiter, caches a terminal outcome,
    /// and removes all state of the call.
    pub(super) fn finish(&mut self, id: CallId, outcome: Outcome) {
        self.settle(id, outcome.into(), Instant::now());
    }

    /// [`finish`](Self::finish) with an outcome whose value may still be
    /// text (see [`Settled`]).
    /// `now` is the caller's reading of the clock, if it has one.
    pub(super) fn settle(&mut self, id: CallId, mut settled: Settled, now: Instant) {
        let Some(mut call) = self.forget(id, now) else {
            return;
        };
        settled = settled.with_attempts(call.attempts());
        match settled.error() {
            None => {
                call.span().record("outcome", "ok");
                info!(parent: call.span(), attempts = call.attempts(), replayed = settled.replayed_result(), "call succeeded")
            }
            Some(e) => {
                call.span().record("outcome", e.code_name().as_str());
                info!(parent: call.span(), attempts = call.attempts(), execution = %e.execution(), error = %e, "call failed")
            }
        }
        if call.dropped_events() > 0 {
            warn!(parent: call.span(), dropped = call.dropped_events(), "events dropped: the caller did not drain the event stream");
        }
        self.cache.insert(
            call.key().clone(),
            call.fingerprint(),
            &settled,
            call.key_origin(),
            now,
        );
        let cancel = match settled.error() {
            Some(Error::Cancelled { .. }) => CancelOutcome::Acknowledged,
            // The job reached its own end: nothing is left to cancel.
            None | Some(Error::Tool(_) | Error::DuplicateKey { .. }) => {
                CancelOutcome::AlreadyFinished
            }
            // The client stopped waiting; the job may still run.
            Some(_) => call.cancel_so_far("the call ended before the cancel was written"),
        };
        call.answer_cancel(cancel);
        // Clones for joined callers; the last one takes the outcome itself.
        // A caller that joined after a request went out gets it as a
        // replay.
        let mut waiters = call.take_waiters();
        let last = waiters.pop();
        for waiter in waiters {
            let settled = settled.clone();
            let settled = if waiter.joined_sent {
                settled.replayed()
            } else {
                settled
            };
            self.replies.push((waiter.reply, settled));
        }
        if let Some(waiter) = last {
            let settled = if waiter.joined_sent {
                settled.replayed()
            } else {
                settled
            };
            self.replies.push((waiter.reply, settled));
        }
    }

    /// Hands the outcomes of the calls finished since the last time to
    /// their callers. The driver does so after handling everything that
    /// woke it (and, in a long read turn, every so many frames): callers
    /// then start their next calls while the driver waits, instead of
    /// contending with it for the rest of its turn (measured: about a
    /// tenth less CPU per call at 64 in flight than one hand-out per frame).
    /// Returns how many callers got theirs.
    pub(crate) fn hand_out_replies(&mut self) -> usize {
        let n = self.replies.len();
        for (reply, outcome) in self.replies.drain(..) {
            let _ = reply.send(outcome);
        }
        n
    }

    /// Removes every trace of a call (maps, requests, window) and returns it.
    fn forget(&mut self, id: CallId, now: Instant) -> Option<Box<Call>> {
        let call = self.calls.remove(id)?;
        if let Phase::Sent { request, .. } = call.phase() {
            if self.requests.remove(request).is_some() {
                self.answered(now);
            }
        }
        if let Some(request) = call.subscribe_request() {
            self.requests.remove(request);
        }
        if let Some(request) = call.cancel().and_then(|c| c.request()) {
            self.requests.orphan_cancel(request);
        }
        if let Link::Up(up) = &mut self.link {
            up.forget_waiting(id);
        }
        Some(call)
    }
}
