//! Frames from the runtime, into the core: attribution (by the request a
//! frame names, then its job, then, for errors naming neither, the oldest
//! request that can draw one) and the classifier's verdicts.
//!
//! This file decodes a frame and routes it by its message: acceptances,
//! events, cancel replies, subscriptions, session ends. Results and errors,
//! which can end a call, are `inbound/verdicts.rs`.
//!
//! A frame for no live call (a finished call, an unknown job, a stale
//! request) is logged and dropped: nothing here can fail a call it does not
//! belong to, and nothing panics.

use std::time::Instant;

use arcp_types::{Decoded, Frame, Header, JobEvent, JobResult, Message, PayloadScope, Pong};
use serde_json::Value;
use tracing::{debug, warn};

use super::Core;
use crate::error::Error;
use crate::outcome::{CancelOutcome, InvocationEvent};
use crate::retry::saturating_deadline;
use crate::telemetry;
use crate::ws::assembly::Assembly;
use crate::ws::calls::Phase;
use crate::ws::ids::CallId;
use crate::ws::link_io::Loss;
use crate::ws::link_state::Link;
use crate::ws::requests::ReqKind;

mod verdicts;

/// A terminal result: decoded, or only its inline value's text.
enum ResultBody<'a> {
    Decoded(JobResult),
    Plain(arcp_types::RawJson<'a>),
}

impl Core {
    /// A text frame from the live connection. The header is read first: a
    /// frame for a call nobody watches is decoded only for what deciding
    /// its outcome needs ([`PayloadScope::OutcomeOnly`]), so the fields and event
    /// bodies only a watcher reads are never built; and a plainly
    /// successful result for such a call is not decoded at all: its value
    /// goes to the caller as text (see [`Settled`]).
    pub(crate) fn on_text(&mut self, text: &str, now: Instant) {
        let Link::Up(up) = &self.link else {
            return;
        };
        let dialect = up.dialect();
        match dialect.decode_with(text, |header| self.scope_for(header)) {
            Ok((header, Decoded::Message(message), scope)) => {
                self.handle_frame(&header, message, scope, now)
            }
            Ok((header, Decoded::PlainResult(value), _)) => {
                if self.frame_arrived(&header, now) {
                    self.on_result(&header, ResultBody::Plain(value), now);
                }
            }
            Err(e) => {
                self.link.note_inbound(now);
                // A decoding error may quote the frame: redacted.
                warn!(error = %self.config.redact(e.to_string()), "skipping a frame that does not decode");
            }
        }
        // A frame may have queued an answer (a pong) behind a stalled write.
        self.check_outbox(now);
    }

    /// A decoded frame from the live connection: its header (borrowed from
    /// the frame's text) and its message.
    pub(crate) fn handle_frame(
        &mut self,
        header: &Header<'_>,
        message: Message,
        scope: PayloadScope,
        now: Instant,
    ) {
        if !self.frame_arrived(header, now) {
            return;
        }
        match message {
            Message::Ping(ping) => {
                self.queue_frame(Frame::new(Message::Pong(
                    Pong::new(ping.nonce).with_received_at(arcp_types::now_rfc3339()),
                )));
            }
            Message::Accepted(accepted) => {
                let request = (accepted.request_id.as_deref()).or(header.correlation_id.as_deref());
                let marked = header.idempotency_key.is_some() && self.key_echo_marks_replay();
                self.on_accepted(header, request, Some(accepted.job_id), marked, now);
            }
            Message::Receipt(receipt) if receipt.replay => {
                // An older runtime's "duplicate" answer: bound, no outcome.
                let job = receipt.job_id.or_else(|| owned(&header.job_id));
                let request = header.correlation_id.as_deref();
                self.on_accepted(header, request, job, true, now);
            }
            Message::Event(event) => self.on_event(header, event, scope, now),
            Message::Result(result) => self.on_result(header, ResultBody::Decoded(result), now),
            Message::Cancelled(_) => {
                if let Some(id) = self.call_for(header, header.correlation_id.as_deref()) {
                    if let Some(call) = self.calls.get(&id) {
                        let error = Error::Cancelled {
                            key: call.key().clone(),
                            job_id: call.job().or_else(|| owned(&header.job_id)),
                            attempts: call.attempts(),
                        };
                        self.finish(id, Err(error));
                    }
                }
            }
            Message::Error(e)
            | Message::Nack(e)
            | Message::SessionError(e)
            | Message::Rejected(e) => self.on_error(header, e, now),
            Message::CancelAccepted(_) => self.on_cancel_reply(header, CancelOutcome::Acknowledged),
            Message::CancelRefused(body) => {
                let reason = body
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("refused")
                    .to_owned();
                let reason = self.config.redact(reason);
                self.on_cancel_reply(header, CancelOutcome::Refused { reason });
            }
            Message::Subscribed(_) => {
                if let Some(request) = header.correlation_id.as_deref() {
                    if let Some((id, ReqKind::Subscribe)) = self.requests.get(request) {
                        self.requests.remove(request);
                        if let Some(call) = self.calls.get_mut(&id) {
                            call.take_subscribe_request();
                        }
                    }
                }
            }
            Message::Evicted(_) | Message::Closed(_) => {
                self.session.forget();
                self.lose(
                    Loss::Network("the runtime ended the session".into()),
                    now,
                    true,
                );
            }
            other => {
                debug!(message = ?std::mem::discriminant(&other), "ignoring a frame the client does not act on")
            }
        }
    }

    fn key_echo_marks_replay(&self) -> bool {
        matches!(&self.link, Link::Up(up) if up.profile().key_echo_marks_replay)
    }

    fn echoes_request_ids(&self) -> bool {
        matches!(&self.link, Link::Up(up) if up.profile().echoes_request_id_on_errors)
    }

    /// A frame re-sent from another session (a replayed, stored answer).
    fn is_foreign(&self, header: &Header<'_>) -> bool {
        matches!(
            (header.session_id.as_deref(), self.session.id()),
            (Some(theirs), Some(ours)) if theirs != ours
        )
    }

    /// The call a frame is about: by the request it names, else by job.
    fn call_for(&self, header: &Header<'_>, request: Option<&str>) -> Option<CallId> {
        request
            .and_then(|r| self.requests.get(r))
            .map(|(id, _)| id)
            .or_else(|| header.job_id.as_deref().and_then(|j| self.calls.by_job(j)))
            .filter(|id| self.calls.contains_key(id))
    }

    /// Removes the call's subscribe request once a frame of its job shows
    /// the subscription works (it can no longer draw an unnamed error).
    fn subscription_answered(&mut self, id: CallId) {
        if let Some(request) = self
            .calls
            .get_mut(&id)
            .and_then(|c| c.take_subscribe_request())
        {
            self.requests.remove(&request);
        }
    }

    fn on_accepted(
        &mut self,
        header: &Header<'_>,
        request: Option<&str>,
        job_id: Option<String>,
        marked: bool,
        now: Instant,
    ) {
        let id = match request {
            Some(r) => match self.requests.get(r) {
                Some((id, ReqKind::Submit)) => Some(id),
                _ => None,
            },
            // No request named: runtimes answer in order.
            None => match self.requests.oldest_drawing() {
                Some((_, id, ReqKind::Submit)) => Some(id),
                _ => None,
            },
        };
        let Some(id) = id else {
            // The acceptance of a call its caller gave up on: the key's
            // binding keeps the job.
            let given_up = request.and_then(|r| self.given_up.take(r));
            if let (Some((key, fingerprint)), Some(job)) = (given_up, &job_id) {
                let job = Some(std::sync::Arc::from(job.as_str()));
                self.cache.remember_binding(key, fingerprint, job, now);
                return;
            }
            debug!(
                ?request,
                ?job_id,
                "an acceptance for no outstanding request; dropped"
            );
            return;
        };
        let foreign = self.is_foreign(header);
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        if !matches!(call.phase(), Phase::Sent { .. }) {
            return;
        }
        let known_job = matches!((call.job_id(), &job_id), (Some(a), Some(b)) if **a == **b);
        if let (Some(before), Some(now)) = (call.job_id(), &job_id) {
            if !known_job {
                warn!(
                    parent: call.span(),
                    key = %call.key(),
                    before = %before,
                    now = %now,
                    "the runtime accepted the call as another job for the same key: it ran again"
                );
            }
        }
        // The answer shows a stored binding: another session's frame, a
        // runtime's replay mark, or the job an earlier attempt was bound to.
        let stored = foreign || marked || known_job;
        // A replay, unless that job is this call's own fresh execution
        // (accepted on an earlier attempt): its stored acceptance, answering
        // a re-send, names no earlier execution.
        let replay = stored && !(known_job && call.own_job());
        // The latest acceptance decides: one of another job than an
        // earlier attempt's is a new execution, whatever that one showed.
        call.set_replayed(replay);
        if replay {
            telemetry::accepted_replay();
        }
        // After an attempt lost unanswered, this acceptance may name a job
        // that attempt created on a connection that is gone: its live stream
        // may never reach this one (a resumed session need not re-attach
        // running jobs), so the recovery ladder watches it. Not a replay,
        // though: the job may as well be new.
        let untrusted = stored || call.exposure().in_doubt;
        if let Some(job) = job_id.as_deref() {
            self.calls.bind_job(id, job);
        }
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        if !replay && job_id.is_some() {
            call.accepted_fresh();
        }
        let ladder_at = if untrusted {
            call.budget_mut().start(&self.config.retry, now);
            let wait = call
                .ladder_mut()
                .get_or_insert_with(|| Box::new(self.config.retry.ladder()))
                .next_ceiling();
            Some(saturating_deadline(now, wait))
        } else {
            None
        };
        debug!(parent: call.span(), job_id = ?call.job_id(), replay, "accepted");
        let sent = call.accept(ladder_at);
        if let Phase::Sent { request, .. } = sent {
            self.requests.remove(&request);
        }
        self.answered(now);
        self.rearm(id, now);
    }

    /// What of a frame's payload to keep: all of it when the call it names
    /// has a watcher.
    fn scope_for(&self, header: &Header<'_>) -> PayloadScope {
        let watched = self
            .call_for(header, header.correlation_id.as_deref())
            .and_then(|id| self.calls.get(&id))
            .is_some_and(|call| call.waiters().iter().any(|w| w.shared.is_watched()));
        if watched {
            PayloadScope::All
        } else {
            PayloadScope::OutcomeOnly
        }
    }

    fn on_event(
        &mut self,
        header: &Header<'_>,
        event: JobEvent,
        scope: PayloadScope,
        now: Instant,
    ) {
        let Some(id) = self.call_for(header, None) else {
            debug!(job_id = ?header.job_id, "an event for a job no call is waiting on; dropped");
            return;
        };
        self.subscription_answered(id);
        let epoch = self.session.epoch();
        let limit = self.config.max_result_size;
        let retry = &self.config.retry;
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        // Any event of the job (even a repeat) shows its stream reaches us:
        // the ladder waits again instead of re-sending.
        if let Phase::Accepted { ladder_at: Some(_) } = call.phase() {
            let wait = call
                .ladder_mut()
                .get_or_insert_with(|| Box::new(retry.ladder()))
                .current();
            call.ladder_at(saturating_deadline(now, wait));
        }
        if let Some(seq) = header.event_seq {
            if !call.event(epoch, seq) {
                self.rearm(id, now);
                return; // already delivered (replay after resume or subscribe)
            }
        }
        if event.kind == "result_chunk" {
            let typed = event.typed();
            if let arcp_types::EventBody::ResultChunk {
                result_id,
                encoding,
                ..
            } = &typed
            {
                call.assembly_mut()
                    .get_or_insert_with(|| {
                        Box::new(Assembly::new(result_id.clone(), encoding == "base64"))
                    })
                    .push(&typed, limit);
            }
        }
        // Decoded without its body: nobody watched when it arrived (a
        // watcher that came since starts with the next event).
        if scope != PayloadScope::All {
            self.rearm(id, now);
            return;
        }
        let event = InvocationEvent {
            event_seq: header.event_seq,
            event,
        };
        let mut dropped = 0;
        for waiter in call.waiters() {
            if !waiter.shared.deliver(&event) {
                dropped += 1;
            }
        }
        call.events_dropped(dropped);
        self.rearm(id, now);
    }

    /// What every frame does on arrival: it proves the connection alive and
    /// advances the session's event sequence. False once the link is not up.
    fn frame_arrived(&mut self, header: &Header<'_>, now: Instant) -> bool {
        self.link.note_inbound(now);
        if !matches!(self.link, Link::Up(_)) {
            return false;
        }
        if let Some(seq) = header.event_seq {
            self.session.saw_event(seq);
        }
        true
    }

    fn on_cancel_reply(&mut self, header: &Header<'_>, outcome: CancelOutcome) {
        let by_request =
            header
                .correlation_id
                .as_deref()
                .and_then(|r| match self.requests.get(r) {
                    Some((id, ReqKind::Cancel)) => Some((r.to_owned(), id)),
                    _ => None,
                });
        let (request, id) = match by_request {
            Some((r, id)) => (Some(r), id),
            None => match header.job_id.as_deref().and_then(|j| self.calls.by_job(j)) {
                Some(id) => (None, id),
                None => return,
            },
        };
        if let Some(r) = request {
            self.requests.remove(&r);
        }
        if let Some(call) = self.calls.get_mut(&id) {
            if let Some(cancel) = call.cancel_mut() {
                cancel.answered();
            }
            call.answer_cancel(outcome);
        }
    }
}

/// An owned copy of a borrowed header field.
fn owned(field: &Option<std::borrow::Cow<'_, str>>) -> Option<String> {
    field.as_deref().map(str::to_owned)
}
