//! Reading an attempt's answer: one envelope (`application/json`) or a
//! stream of them (`application/x-ndjson`), each decoded for what the call
//! needs, up to the attempt's next step.

use std::sync::Arc;

use arcp_types::{
    Decoded, Dialect, ErrorCode, ErrorReply, Header, JobEvent, JobResult, Message, PayloadScope,
    RawJson,
};
use futures_util::FutureExt;
use hyper::body::Incoming;
use tracing::{debug, warn};

use super::{HttpCall, Next};
use crate::attempts::Record;
use crate::cache::Outcome;
use crate::classify::{
    classify_error, failed_result, read_result, tool_error, Ending, ErrorVerdict, ResultReading,
};
use crate::error::Error;
use crate::http::{describe, read_capped, BodyChunks, ReadError};
use crate::outcome::{InvocationEvent, ToolOutput};

impl HttpCall<'_> {
    /// `application/json`: one envelope, normally the terminal.
    pub(super) async fn read_single(&mut self, response: &mut Incoming, marked: bool) -> Next {
        let limit = self.config().max_frame_size;
        let body = match read_capped(response, limit).await {
            Ok(body) => body,
            Err(ReadError::Transport(e)) => {
                self.record.lost();
                return Next::Lost {
                    floor: None,
                    reason: format!("the response was cut off: {e}"),
                };
            }
            Err(ReadError::TooLarge) => {
                self.record.lost();
                return Next::Lost {
                    floor: None,
                    reason: format!("the response is over the {limit}-byte frame limit"),
                };
            }
        };
        let read = std::str::from_utf8(&body)
            .map_err(|e| e.to_string())
            .and_then(|text| self.on_text(text, marked).map_err(|e| e.to_string()));
        match read {
            Ok(Some(next)) => next,
            Ok(None) => self.no_terminal("the response held no terminal envelope"),
            Err(e) => {
                self.record.lost();
                Next::Lost {
                    floor: None,
                    reason: format!("the response is not an ARCP envelope: {e}"),
                }
            }
        }
    }

    /// `application/x-ndjson`: envelopes, one per line, up to the terminal.
    /// A line is bounded by the frame size limit. Lines whole within a
    /// chunk are read where they are; only a line cut between chunks is
    /// put together in a buffer.
    pub(super) async fn read_stream(&mut self, response: &mut Incoming, marked: bool) -> Next {
        let next = self.read_lines(response, marked).await;
        // What follows the terminal (the stream's end, sent with it) is
        // read when it comes at once: the connection then goes back to the
        // pool before this caller's next call looks for one (else the pool
        // opens another connection). The HTTP client's connection task
        // reads it: it gets two turns at most. What has not come by then is
        // left to the HTTP client, which drains or closes the connection.
        let (mut reads, mut turns) = (0, 0);
        while reads < 8 {
            match response.next_chunk().now_or_never() {
                Some(Ok(Some(_))) => reads += 1,
                Some(_) => break,
                None if turns < 2 => {
                    turns += 1;
                    tokio::task::yield_now().await;
                }
                None => break,
            }
        }
        next
    }

    async fn read_lines(&mut self, response: &mut Incoming, marked: bool) -> Next {
        let limit = self.config().max_frame_size;
        let mut partial: Vec<u8> = Vec::new();
        loop {
            match response.next_chunk().await {
                Ok(Some(chunk)) => {
                    let mut rest: &[u8] = &chunk;
                    if !partial.is_empty() {
                        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
                            partial.extend_from_slice(rest);
                            if partial.len() > limit {
                                return self.line_too_long(limit);
                            }
                            continue;
                        };
                        partial.extend_from_slice(&rest[..end]);
                        rest = &rest[end + 1..];
                        let line = std::mem::take(&mut partial);
                        if let Some(next) = self.on_line(&line, marked) {
                            return next;
                        }
                    }
                    while let Some(end) = rest.iter().position(|&b| b == b'\n') {
                        if let Some(next) = self.on_line(&rest[..end], marked) {
                            return next;
                        }
                        rest = &rest[end + 1..];
                    }
                    partial.extend_from_slice(rest);
                    if partial.len() > limit {
                        return self.line_too_long(limit);
                    }
                }
                Ok(None) => {
                    // The last line may lack its newline.
                    if let Some(next) = self.on_line(&partial, marked) {
                        return next;
                    }
                    return self
                        .no_terminal("the response stream ended before a terminal envelope");
                }
                Err(e) => {
                    self.record.lost();
                    return Next::Lost {
                        floor: None,
                        reason: format!("the response stream broke: {}", describe(&e)),
                    };
                }
            }
        }
    }

    fn line_too_long(&mut self, limit: usize) -> Next {
        self.record.lost();
        Next::Lost {
            floor: None,
            reason: format!("an NDJSON line is over the {limit}-byte frame limit"),
        }
    }

    /// A complete response without a terminal: accepted only (the key is
    /// bound; ask again later), or nothing usable (treated as lost).
    fn no_terminal(&mut self, reason: &str) -> Next {
        if self.accepted_now {
            Next::Pending {
                floor: None,
                reason: format!("{reason}: the runtime answered with job.accepted only"),
            }
        } else {
            self.record.lost();
            Next::Lost {
                floor: None,
                reason: reason.to_owned(),
            }
        }
    }

    fn on_line(&mut self, line: &[u8], marked: bool) -> Option<Next> {
        let text = match std::str::from_utf8(line) {
            Ok(text) => text.trim(),
            Err(_) => {
                warn!("skipping an NDJSON line that is not UTF-8");
                return None;
            }
        };
        if text.is_empty() {
            return None;
        }
        match self.on_text(text, marked) {
            Ok(next) => next,
            Err(e) => {
                warn!(error = %self.redact(e.to_string()), "skipping an NDJSON line that does not decode");
                None
            }
        }
    }

    /// One envelope's text, decoded for what the call needs: in full when
    /// someone watches the call's events, else only what decides the
    /// outcome ([`PayloadScope::OutcomeOnly`], as over WebSocket), a plainly successful
    /// result's value kept as text. Returns the call's next step when the
    /// envelope ends the attempt.
    fn on_text(
        &mut self,
        text: &str,
        marked: bool,
    ) -> Result<Option<Next>, arcp_types::DecodeError> {
        let dialect = Dialect::V1_1;
        let scope = if self.req.shared.is_watched() {
            PayloadScope::All
        } else {
            PayloadScope::OutcomeOnly
        };
        // An event nobody watches changes nothing (this binding assembles
        // no result from events): it is not decoded. (Not counted either:
        // should a watcher come later, a re-sent stream may show it events
        // it has not seen, never one twice.)
        if scope == PayloadScope::OutcomeOnly && arcp_types::peek_kind(text) == Some("job.event") {
            return Ok(None);
        }
        Ok(match dialect.decode_with(text, |_| scope)? {
            (header, Decoded::PlainResult(value), _) => {
                Some(Next::Done(self.on_plain_result(&header, value, marked)))
            }
            (header, Decoded::Message(message), _) => self.on_frame(&header, message, marked),
        })
    }

    /// One decoded envelope of the answer. Returns the call's next step
    /// when the envelope ends the attempt.
    pub(super) fn on_frame(
        &mut self,
        header: &Header<'_>,
        message: Message,
        marked: bool,
    ) -> Option<Next> {
        match message {
            Message::Accepted(accepted) => {
                let known = matches!(&self.bound_before, Some(Some(before)) if **before == *accepted.job_id);
                self.bind(&accepted.job_id);
                // Unmarked, of a job the key was not bound to before this
                // attempt: this call's own execution.
                if !marked && !known {
                    self.record.accepted_fresh();
                }
                self.accepted_now = true;
                None
            }
            Message::Event(event) => {
                self.on_event(header, event);
                None
            }
            Message::Result(result) => Some(Next::Done(self.on_result(header, result, marked))),
            Message::Cancelled(_) => {
                if let Some(job) = header.job_id.as_deref() {
                    self.bind(job);
                }
                Some(Next::Done(Err(Error::Cancelled {
                    key: self.req.key.clone(),
                    job_id: self.job(),
                    attempts: 0,
                })))
            }
            Message::Error(e)
            | Message::SessionError(e)
            | Message::Nack(e)
            | Message::Rejected(e) => Some(self.on_error(header, e, marked)),
            other => {
                debug!(message = ?std::mem::discriminant(&other), "ignoring an unexpected envelope");
                None
            }
        }
    }

    /// Whether this attempt's answer is a stored outcome: the runtime
    /// marked it so (`marked`), or the key was bound to a job before the
    /// attempt and the answer is that job's; never for a job an attempt of
    /// this call started (accepted unmarked, fresh). An answer from another job is
    /// a new execution (the runtime lost its record of the key and ran the
    /// call again), as over WebSocket; after an attempt that was merely
    /// lost, or a 409 that named no job (another instance may answer the
    /// next attempt and run the call afresh), the answer may as well be a
    /// first execution.
    fn replayed(&self, marked: bool) -> bool {
        // The job one of this call's attempts started is its own execution,
        // whatever the runtime marks on a later attempt's answer.
        if self.record.own_job() {
            return false;
        }
        marked
            || match &self.bound_before {
                Some(Some(before)) => self.record.job() == Some(before),
                None | Some(None) => false,
            }
    }

    /// Records the job the runtime bound the key to; the journal records
    /// a job new to the call.
    pub(super) fn bind(&mut self, job_id: &str) {
        let bound = self.record.bound(job_id);
        if let Some(before) = &bound.replaced {
            warn!(
                key = %self.req.key,
                before = &**before,
                now = job_id,
                "the runtime answered with another job for the same key: the call ran again"
            );
        }
        if bound.record != Record::Nothing {
            self.req.shared.set_job(&bound.job);
        }
        bound
            .record
            .write(&self.req.key, self.req.recorder.as_deref());
    }

    /// An owned copy of the job id, for an outcome or an error.
    fn job(&self) -> Option<String> {
        self.record.job().map(|job| job.to_string())
    }

    /// Whether an event is new: `event_seq` is per job in the binding, so
    /// a stream re-sent on a later attempt is deduplicated too.
    fn seen_event(&mut self, event_seq: Option<u64>) -> bool {
        event_seq.is_none_or(|seq| self.record.event(0, seq))
    }

    fn on_event(&mut self, header: &Header<'_>, event: JobEvent) {
        if !self.seen_event(header.event_seq) {
            return;
        }
        let event = InvocationEvent {
            event_seq: header.event_seq,
            event,
        };
        if !self.req.shared.deliver(&event) {
            self.record.events_dropped(1);
        }
    }

    /// A plainly successful result ([`Dialect::plain_result_value`]): what
    /// [`on_result`](Self::on_result) makes of it, its value left as text
    /// for the caller to parse once.
    fn on_plain_result(
        &mut self,
        header: &Header<'_>,
        value: RawJson<'_>,
        marked: bool,
    ) -> Outcome {
        if let Some(job) = header.job_id.as_deref() {
            self.bind(job);
        }
        self.value_text = Some(Arc::from(value.get()));
        Ok(ToolOutput {
            value: serde_json::Value::Null,
            job_id: self.job(),
            key: self.req.key.clone(),
            replayed: self.replayed(marked),
            attempts: self.record.count(),
            // Set with the outcome (`into_outcome` leaves it empty).
            trace_id: String::new(),
        })
    }

    fn on_result(&mut self, header: &Header<'_>, result: JobResult, marked: bool) -> Outcome {
        if let Some(job) = header.job_id.as_deref() {
            self.bind(job);
        }
        let replayed = self.replayed(marked);
        let key = self.req.key.clone();
        let value = match read_result(result, None) {
            ResultReading::Value(value) => value,
            ResultReading::Failed { code, message } => {
                let e = failed_result(code, self.redact(message));
                return Err(tool_error(
                    &key,
                    self.job(),
                    e,
                    &ErrorVerdict::JobFailed,
                    self.exposure(),
                    replayed,
                ));
            }
        };
        Ok(ToolOutput {
            value,
            job_id: self.job(),
            key,
            replayed,
            attempts: self.record.count(),
            // Set with the outcome, as for a plain result.
            trace_id: String::new(),
        })
    }

    fn on_error(&mut self, header: &Header<'_>, mut e: ErrorReply, marked: bool) -> Next {
        e.message = self.redact(std::mem::take(&mut e.message));
        if let Some(details) = &mut e.details {
            self.redactor().redact_json(details);
        }
        let names_job = header.job_id.is_some();
        let verdict = classify_error(&e, names_job, self.accepted_now);
        // Only the runtime's refusal of the request itself says anything of
        // the credentials or the key; a job's own error is the tool's.
        let refusal = !matches!(verdict, ErrorVerdict::JobFailed);
        if refusal {
            // This request was answered: it ran nothing.
            self.in_flight = false;
        }
        if refusal && e.code == ErrorCode::Unauthenticated {
            return Next::Done(Err(self.end(Ending::Unauthenticated { message: e.message })));
        }
        match verdict {
            ErrorVerdict::DuplicateKey => {
                Next::Done(Err(self.end(Ending::DuplicateKey { message: e.message })))
            }
            // Refused before acceptance, transiently: no job was created by
            // this attempt; retry with the same key.
            ErrorVerdict::Transient { floor } => Next::Transient {
                floor,
                reason: format!("{}: {}", e.code, e.message),
            },
            verdict => {
                if let Some(job) = header.job_id.as_deref() {
                    self.bind(job);
                }
                // A job's error with no acceptance before it is a replay
                // only when it is the job the key was bound to (above).
                let replayed = self.replayed(marked);
                Next::Done(Err(tool_error(
                    &self.req.key,
                    self.job(),
                    e,
                    &verdict,
                    self.exposure(),
                    replayed,
                )))
            }
        }
    }
}

pub(super) fn is_error(message: &Message) -> bool {
    matches!(
        message,
        Message::Error(_) | Message::SessionError(_) | Message::Nack(_) | Message::Rejected(_)
    )
}
