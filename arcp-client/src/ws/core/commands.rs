//! Commands from client handles: starting a call (the outcome cache, joining
//! a running call with the same key and intent), abandoning one, cancelling
//! a job, closing the client.

use std::sync::Arc;
use std::time::Instant;

use arcp_types::{Frame, IdempotencyKey, Message};
use tokio::sync::oneshot;
use tracing::info;

use crate::cache::{conflict, Cached, Intent, KeyOrigin, Settled};
use crate::classify::Ending;
use crate::deadline::Deadline;
use crate::error::Error;
use crate::outcome::CancelOutcome;
use crate::request::PreparedCall;
use crate::request::{CallRequest, CallShared};
use crate::retry::saturating_deadline;
use crate::telemetry::Answered;
use crate::ws::calls::Call;
use crate::ws::ids::{CallId, RequestId};
use crate::ws::requests::ReqKind;
use crate::ws::waiters::Waiter;

use super::{Command, Core};
use crate::ws::link_state::Link;

impl Core {
    /// Takes a command from a client handle.
    pub(crate) fn command(&mut self, command: Command, now: Instant) {
        match command {
            Command::Invoke(request, reply) => self.start_call(request, reply, now),
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
        // A submit or cancel may have queued a frame behind a stalled
        // write: the bound holds however frames are queued.
        self.check_outbox(now);
    }

    /// Ends every call and the session. Calls that may have run end with
    /// `Interrupted` (their key and job id), the others with `Closed`.
    pub(crate) fn close(&mut self, _now: Instant) {
        if matches!(self.link, Link::Up(_)) {
            self.queue_frame(Frame::new(Message::Close(
                arcp_types::Close::default().with_reason("client closed"),
            )));
        }
        for id in self.calls.ids() {
            self.end_without_outcome(id, Ending::Closed);
        }
        self.fail_ready(Error::Closed);
        self.link = Link::Closed;
    }

    fn start_call(&mut self, mut req: CallRequest, reply: oneshot::Sender<Settled>, now: Instant) {
        let prepared = match req.prepared.take() {
            Some(prepared) => prepared,
            None => {
                req.seal();
                PreparedCall::new(&mut req, None)
            }
        };
        let Intent { fingerprint, size } = prepared.intent;
        let mut waiter = Waiter {
            reply,
            shared: req.shared.clone(),
            deadline: Deadline::new(req.started, req.deadline),
            _events_end: req.events_end,
            joined_sent: false,
        };
        // Answered here, without a request of its own: the span the caller
        // opened says so.
        let answer = |waiter: Waiter, settled: Settled| {
            let how = match settled.error() {
                None => "ok".to_owned(),
                Some(e) => e.code_name().as_str().to_owned(),
            };
            prepared.span.record("outcome", how.as_str());
            info!(parent: &prepared.span, outcome = %how, "call answered without a request");
            let _ = waiter.reply.send(settled);
        };
        if matches!(self.link, Link::Closed) {
            answer(waiter, Err(Error::Closed).into());
            return;
        }
        let key_origin = KeyOrigin::of(req.key_supplied, req.in_doubt);
        // A key generated for this call is in no earlier entry.
        let cached = match key_origin {
            KeyOrigin::Named => self.cache.get(&req.key, fingerprint, now),
            KeyOrigin::Generated => Cached::Miss,
        };
        let (earlier_send, earlier_job) = match cached {
            Cached::Hit(outcome) => {
                waiter.shared.set_answered(Answered::Cache);
                answer(waiter, outcome);
                return;
            }
            Cached::Conflict => {
                answer(waiter, Err(conflict(req.key)).into());
                return;
            }
            Cached::Bound(job) => (true, job),
            Cached::Miss => (req.in_doubt, None),
        };
        if let Some(existing) = self.calls.by_key(&req.key) {
            if let Some(call) = self.calls.get_mut(&existing) {
                if call.fingerprint() == fingerprint {
                    // The same logical call awaited twice: share one outcome,
                    // and the job id once known.
                    if let Some(job) = call.job_id() {
                        waiter.shared.set_job(job);
                    }
                    // From now on the key's fate is shared: whichever caller
                    // gives up first cannot prove the others will not run
                    // it, so none of them may claim "did not run".
                    for w in call.waiters() {
                        w.shared.mark_sent();
                    }
                    waiter.shared.mark_sent();
                    if let Some((until, retention)) = waiter.shared.send_limit() {
                        call.budget_mut().no_send_after(until, retention);
                    }
                    // Joined after a request went out: whatever ran, ran
                    // for an earlier caller.
                    waiter.joined_sent = call.attempts() > 0;
                    // The call lives as long as its most patient caller;
                    // each waiter is held to its own deadline (`step`).
                    call.join(waiter);
                    // Its outcome is recorded on the first caller's span.
                    prepared.span.record("outcome", "joined");
                    // The joined caller's deadline may be the call's next wake.
                    self.rearm(existing, now);
                } else {
                    // Its outcome is unknown yet: another process may have
                    // run this intent under the key. This call sent nothing.
                    let refused = Error::DuplicateKey {
                        key: req.key,
                        message:
                            "the key is in use by a call with a different intent in this client"
                                .into(),
                        attempts: 0,
                        execution: crate::error::Execution::NotSent,
                    };
                    answer(waiter, Err(refused).into());
                }
                return;
            }
        }
        if size > self.config.max_frame_size {
            let limit = self.config.max_frame_size;
            let refused = Error::invalid_call(format!(
                "the request is {size} bytes; the frame size limit is {limit}"
            ));
            answer(waiter, Err(refused).into());
            return;
        }
        if earlier_send {
            waiter.shared.mark_sent();
        }
        // An earlier call with this key and intent may have run it.
        let call = Call::new(
            (req.key.clone(), key_origin),
            req.recorder,
            prepared,
            waiter,
            earlier_send,
            now,
        );
        // A journal record of an earlier process, or the cache's binding of
        // an earlier call, says which job the key is bound to: the call
        // starts bound (and reachable by that job).
        let prior_job = req.prior_job.as_deref().or(earlier_job.as_deref());
        let id = self.calls.insert(call, prior_job);
        self.step(id, now);
    }

    fn abandon(&mut self, key: &IdempotencyKey, shared: &Arc<CallShared>, now: Instant) {
        let Some(id) = self.calls.by_key(key) else {
            return;
        };
        if let Some(call) = self.calls.get_mut(&id) {
            call.waiters_mut()
                .retain(|w| !Arc::ptr_eq(&w.shared, shared));
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
        let Some((id, call)) = self
            .calls
            .by_key(&key)
            .and_then(|id| Some((id, self.calls.get(&id)?)))
            .filter(|(_, c)| c.waiters().iter().any(|w| Arc::ptr_eq(&w.shared, shared)))
        else {
            let _ = reply.send(CancelOutcome::AlreadyFinished);
            return;
        };
        if call.job_id().is_none() {
            let _ = reply.send(CancelOutcome::NotDispatched {
                reason: "the runtime has not accepted the call yet; there is no job to cancel"
                    .into(),
            });
            return;
        }
        let until = saturating_deadline(now, self.config.cancel_timeout);
        let call = self.calls.get_mut(&id).expect("looked up above");
        match call.cancel_mut() {
            Some(cancel) if cancel.is_settled() => {
                let _ = reply.send(CancelOutcome::Acknowledged);
                return;
            }
            Some(cancel) => cancel.join(reply, until),
            None => {
                call.start_cancel(reply, until);
                self.send_cancel(id);
            }
        }
        self.rearm(id, now);
    }

    /// Queues the call's cancel on the live connection, if any.
    pub(super) fn send_cancel(&mut self, id: CallId) {
        if !matches!(self.link, Link::Up(_)) {
            return;
        }
        let Some(call) = self.calls.get(&id) else {
            return;
        };
        let (Some(job_id), Some(cancel)) = (call.job(), call.cancel()) else {
            return;
        };
        if cancel.is_settled() || cancel.request().is_some() {
            return;
        }
        let frame = Frame::new(Message::Cancel(
            arcp_types::Cancel::new(job_id).with_reason("cancelled by the caller"),
        ));
        let request = frame.envelope.id.clone();
        let seq = self.queue_frame(frame);
        self.requests
            .insert(RequestId::from(request.as_str()), id, ReqKind::Cancel);
        self.outbox.track_cancel(seq, id);
        if let Some(cancel) = self.calls.get_mut(&id).and_then(|c| c.cancel_mut()) {
            cancel.queued(request, seq);
        }
    }
}
