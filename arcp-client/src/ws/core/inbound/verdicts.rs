//! The answers that can end a call: a terminal result, and an error
//! (attributed to the request it answers, then classified). Where a
//! WebSocket call's outcome is decided from the runtime's frames; the rule
//! itself is `classify.rs`, and ending the call is `call_machine.rs`.

use std::sync::Arc;
use std::time::Instant;

use arcp_types::{ErrorReply, Header};
use serde_json::Value;
use tracing::{debug, warn};

use super::{owned, ResultBody};
use crate::cache::{PlainResult, Settled};
use crate::classify::{
    classify_error, failed_result, is_unbound_refusal, read_result, tool_error, Ending,
    ErrorVerdict, Exposure, ResultReading,
};
use crate::outcome::{CancelOutcome, ToolOutput};
use crate::request::Outgoing;
use crate::retry::Decision;
use crate::ws::calls::Phase;
use crate::ws::core::Core;
use crate::ws::ids::{CallId, RequestId};
use crate::ws::requests::ReqKind;

/// The call's tool name (read back from its request: only for the rare
/// error that needs it).
fn tool_of(call: &crate::ws::calls::Call) -> String {
    match call.outgoing() {
        Outgoing::Request(invoke) => invoke.tool.clone(),
        Outgoing::Encoded(e) => e.to_invoke().map(|i| i.tool).unwrap_or_default(),
    }
}

/// Whether a frame's job is the one the call was bound to before it.
fn is_known_job(bound: Option<&str>, named: Option<&str>) -> bool {
    matches!((bound, named), (Some(a), Some(b)) if a == b)
}

impl Core {
    /// A terminal result: the call it names ends with it.
    pub(super) fn on_result(&mut self, header: &Header<'_>, result: ResultBody<'_>, now: Instant) {
        let Some(id) = self.call_for(header, header.correlation_id.as_deref()) else {
            debug!(job_id = ?header.job_id, "a result for a job no call is waiting on; dropped");
            return;
        };
        let foreign = self.is_foreign(header);
        let Some(call) = self.calls.get(&id) else {
            return;
        };
        // A terminal with no acceptance before it on this attempt is a
        // replay only when it is the job the key was bound to: a runtime
        // that lost the key (or another instance) may run it afresh. Not
        // when this call's own attempt started that job (its fresh
        // acceptance): then it is this call's execution, whether it comes
        // on a resumed session's stream or answers a later re-send.
        let unaccepted = matches!(call.phase(), Phase::Sent { .. }) && !call.own_job();
        let known_job = is_known_job(call.job_id().map(|j| &**j), header.job_id.as_deref());
        if let Some(job) = &header.job_id {
            self.calls.bind_job(id, job);
        }
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        // This call's own fresh job is no replay, even as another
        // session's frame (a resume refused, the session replaced).
        let own = known_job && call.own_job();
        let replayed = !own && (call.replayed() || foreign || (unaccepted && known_job));
        let assembly = call.assembly_mut().take();
        let reading = match result {
            ResultBody::Decoded(result) => {
                let streamed = result.extra.get("result_id").and_then(Value::as_str);
                let assembled = match (assembly, streamed) {
                    (Some(a), Some(r)) if a.result_id == r => a.value(),
                    _ => None,
                };
                read_result(result, assembled)
            }
            // An inline value: chunks streamed before it are not used. Handed
            // out in parts, the job id shared (see `Settled`).
            ResultBody::Plain(value) => {
                let plain = PlainResult {
                    value_text: Arc::from(value.get()),
                    job_id: call.job_id().cloned(),
                    key: call.key().clone(),
                    replayed,
                    attempts: call.attempts(),
                };
                self.settle(id, Settled::Plain(plain), now);
                return;
            }
        };
        let key = call.key().clone();
        let job_id = call.job();
        let exposure = call.exposure();
        let outcome = match reading {
            ResultReading::Value(value) => Ok(ToolOutput {
                value,
                job_id,
                key,
                replayed,
                attempts: call.attempts(),
                // The caller's own, set where it awaits the outcome
                // (`Backend::invoke`): not copied here, nor into the cache.
                trace_id: String::new(),
            }),
            ResultReading::Failed { code, message } => {
                let e = failed_result(code, self.config.redact(message));
                Err(tool_error(
                    &key,
                    job_id,
                    e,
                    &ErrorVerdict::JobFailed,
                    exposure,
                    replayed,
                ))
            }
        };
        self.settle(id, Settled::Whole(outcome), now);
    }

    /// An error frame: attributed to a request (by the id it names, its
    /// job, or, naming neither, the oldest request that can draw one),
    /// then read by the request's kind.
    pub(super) fn on_error(&mut self, header: &Header<'_>, e: ErrorReply, now: Instant) {
        let request = e
            .request_id
            .clone()
            .or_else(|| owned(&header.correlation_id));
        let named = request.as_deref().and_then(|r| {
            self.requests
                .get(r)
                .map(|(id, kind)| (RequestId::from(r), id, kind))
        });
        let target = match named {
            Some(t) => Some(t),
            None => match header.job_id.as_deref().and_then(|j| self.calls.by_job(j)) {
                Some(id) => Some((RequestId::from(""), id, ReqKind::Submit)),
                // Names neither: runtimes answer in order (v1.1 Python's
                // `session.error` carries no request id).
                None if request.is_none()
                    && header.job_id.is_none()
                    && !self.echoes_request_ids() =>
                {
                    self.requests
                        .unnamed_error_target(e.code == arcp_types::ErrorCode::DuplicateKey)
                }
                None => None,
            },
        };
        let Some((request, id, kind)) = target else {
            warn!(code = %e.code, message = %self.config.redact(e.message.clone()), "an error for no outstanding request; ignored");
            return;
        };
        match kind {
            ReqKind::Subscribe => {
                self.requests.remove(&request);
                if let Some(call) = self.calls.get_mut(&id) {
                    debug!(parent: call.span(), code = %e.code, "subscribe refused; the ladder re-sends instead");
                    call.subscribe_refused();
                }
            }
            ReqKind::Cancel => {
                self.requests.remove(&request);
                let reason = format!("{}: {}", e.code, self.config.redact(e.message));
                if let Some(call) = self.calls.get_mut(&id) {
                    if let Some(cancel) = call.cancel_mut() {
                        cancel.refused();
                    }
                    call.answer_cancel(CancelOutcome::Refused { reason });
                }
            }
            ReqKind::Submit => self.on_call_error(id, header, e, now),
        }
    }

    /// An error answering a call's submit: the classifier's verdict
    /// decides whether it ends the call, or the call retries with its key.
    fn on_call_error(&mut self, id: CallId, header: &Header<'_>, mut e: ErrorReply, now: Instant) {
        let redactor = self.config.redactor();
        e.message = redactor.redact_owned(e.message);
        if let Some(details) = &mut e.details {
            redactor.redact_json(details);
        }
        let foreign = self.is_foreign(header);
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        let names_job = header.job_id.is_some();
        let accepted = matches!(call.phase(), Phase::Accepted { .. });
        let verdict = classify_error(&e, names_job, accepted);
        let mut freed = false;
        if let Phase::Sent { request, .. } = call.phase() {
            let request = request.clone();
            freed = self.requests.remove(&request).is_some();
        }
        if freed {
            self.answered(now);
        }
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        let unaccepted = matches!(call.phase(), Phase::Sent { .. });
        match verdict {
            ErrorVerdict::DuplicateKey => {
                // This attempt is answered: only an earlier one may have
                // reached the runtime (and made the conflict our own).
                call.queue(now);
                let message = e.message;
                self.end_without_outcome(id, Ending::DuplicateKey { message });
            }
            ErrorVerdict::Transient { floor } if unaccepted => {
                // Refused before acceptance, transiently: this attempt
                // created nothing; retry with the same key.
                call.queue(now);
                let reason = format!("{}: {}", e.code, e.message);
                let decision = call.retried(&self.config.retry, floor, reason, now);
                match decision {
                    Decision::RetryAt(at) => {
                        debug!(parent: call.span(), code = %e.code, delay = ?at - now, "transient refusal; retrying with the same key");
                        call.queue(at);
                        self.rearm(id, now);
                    }
                    Decision::GiveUp(why) => self.give_up(id, why),
                }
            }
            ErrorVerdict::Transient { .. } => {
                debug!(parent: call.span(), code = %e.code, "a transient refusal for a call not awaiting one; ignored");
            }
            verdict => {
                let known_job = is_known_job(call.job_id().map(|j| &**j), header.job_id.as_deref());
                if let Some(job) = &header.job_id {
                    self.calls.bind_job(id, job);
                }
                let Some(call) = self.calls.get(&id) else {
                    return;
                };
                // As for a result: a job this call's own attempt started is not a
                // replay of anything, even as another session's frame.
                let own = known_job && call.own_job();
                let replayed =
                    !own && (call.replayed() || foreign || (names_job && unaccepted && known_job));
                // The legacy runtime's refusal of an unknown tool names a
                // job that was never accepted for this call: not the key's
                // outcome (the runtime did not bind the key to that job).
                // Not run, unless this call (or an earlier one with its key)
                // may have run it. Any other job error before an acceptance
                // (the acceptance lost on the way) is the job's: it ran.
                let refusal_shape = is_unbound_refusal(&e, &tool_of(call));
                let verdict =
                    if names_job && unaccepted && !known_job && !call.replayed() && refusal_shape {
                        ErrorVerdict::Refused
                    } else {
                        verdict
                    };
                // The legacy refusal of an unknown tool, after its fresh
                // acceptance: not the key's outcome. It proves nothing ran
                // when nothing before that acceptance may have.
                let unbound = names_job && !unaccepted && refusal_shape;
                let (verdict, exposure) = match unbound {
                    true if !call.replayed() && !call.exposure().in_doubt => {
                        (ErrorVerdict::Refused, Exposure::default())
                    }
                    true => (ErrorVerdict::Refused, call.exposure()),
                    false => (verdict, call.exposure()),
                };
                let error = tool_error(call.key(), call.job(), e, &verdict, exposure, replayed);
                self.finish(id, Err(error));
            }
        }
    }
}
