//! `Flavor`: what differs between the two dialects in the parts both
//! front-ends share (envelope stamping, event and terminal shapes, intent
//! fingerprints, refusals), as methods instead of `if legacy` branches.

use arcp_types::{
    canonical_json, now_rfc3339, Accepted, Dialect, ErrorCode, ErrorReply, Frame, Invoke, JobEvent,
    JobResult, Message, Object,
};
use serde_json::{json, Value};

use super::idempotency::Fingerprint;
use super::jobs::Outcome;
use crate::tool::ToolFailure;

/// The dialect's behaviour where the front-ends share code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// v1.1, as the Python 1.1.3 runtime speaks it.
    V1_1,
    /// The legacy message set, as the Rust 2.0.0 runtime speaks it.
    Legacy,
}

impl Flavor {
    pub(super) fn of(dialect: Dialect) -> Self {
        match dialect {
            Dialect::Legacy => Flavor::Legacy,
            _ => Flavor::V1_1,
        }
    }

    /// A fresh frame. Python sends no envelope timestamp; Rust does.
    pub(super) fn frame(self, message: Message) -> Frame {
        let mut frame = Frame::new(message);
        if self == Flavor::V1_1 {
            frame.envelope.timestamp = None;
        }
        frame
    }

    /// Names the request a reply answers on the envelope (legacy
    /// `correlation_id`; v1.1 replies carry it in their payload, if at all).
    pub(super) fn correlate(self, frame: &mut Frame, request_id: &str) {
        if self == Flavor::Legacy {
            frame.envelope.correlation_id = Some(request_id.to_owned());
        }
    }

    /// Whether every job-related reply is sequenced on its session (the Rust
    /// runtime's writer does that; Python sequences only job events).
    pub(super) fn sequences_replies(self) -> bool {
        self == Flavor::Legacy
    }

    /// Whether a session outlives its connection (v1.1 resume).
    pub(super) fn sessions_outlive_connections(self) -> bool {
        self == Flavor::V1_1
    }

    /// Whether a fresh job is announced with `job.started` after
    /// `job.accepted` (Rust 2.0.0 does; Python does not).
    pub(super) fn announces_start(self) -> bool {
        self == Flavor::Legacy
    }

    /// Whether a submit for an unregistered tool is accepted under a fresh
    /// job and then failed (Rust 2.0.0), rather than refused with a
    /// session-level error (Python 1.1.3).
    pub(super) fn accepts_unknown_tools(self) -> bool {
        self == Flavor::Legacy
    }

    /// Whether a replay re-sends the stored envelope (Python 1.1.3: the
    /// original `job.accepted`, the stored terminal) rather than a fresh
    /// envelope correlated to the new request (Rust 2.0.0).
    pub(super) fn replays_stored_envelopes(self) -> bool {
        self == Flavor::V1_1
    }

    /// A job event (v1.1 with its `ts`).
    pub(super) fn event(self, kind: &str, body: Value) -> Message {
        let mut event = JobEvent::new(kind, body);
        event.ts = (self == Flavor::V1_1).then(now_rfc3339);
        Message::Event(event)
    }

    /// A progress body: v1.1 `{current, total}`; legacy `{percent}`.
    pub(super) fn progress(self, current: u64, total: u64) -> Value {
        match self {
            Flavor::V1_1 => json!({ "current": current, "total": total }),
            Flavor::Legacy => {
                let percent = if total == 0 {
                    100.0
                } else {
                    (current as f64 * 100.0 / total as f64).min(100.0)
                };
                json!({ "percent": percent })
            }
        }
    }

    /// The internal-error code of the dialect.
    pub(super) fn internal_code(self) -> ErrorCode {
        match self {
            Flavor::V1_1 => ErrorCode::InternalError,
            Flavor::Legacy => ErrorCode::Internal,
        }
    }

    /// A fresh request id of the dialect's form.
    pub(super) fn request_id(self) -> String {
        match self {
            Flavor::V1_1 => ulid::Ulid::new().to_string(),
            Flavor::Legacy => format!("msg_{}", ulid::Ulid::new()),
        }
    }

    /// The intent a key is bound to, compared as the dialect's reference
    /// runtime compares it.
    pub(super) fn fingerprint(self, invoke: &Invoke) -> Fingerprint {
        match self {
            Flavor::Legacy => Fingerprint::Text(format!(
                "{}\n{}",
                invoke.tool,
                canonical_json(&invoke.arguments)
            )),
            Flavor::V1_1 => {
                let mut payload = invoke.extra.clone();
                payload.insert("agent".into(), json!(invoke.tool));
                payload.insert("input".into(), invoke.arguments.clone());
                Fingerprint::Payload(Value::Object(payload))
            }
        }
    }

    /// A fresh `job.accepted` (v1.1 with Python's `agent`, `accepted_at`
    /// and `lease`).
    pub(super) fn accepted(self, job_id: &str, request_id: &str, tool: &str) -> Message {
        let extra = match self {
            Flavor::V1_1 => object(json!({
                "agent": tool,
                "accepted_at": now_rfc3339(),
                "lease": {},
            })),
            Flavor::Legacy => Object::new(),
        };
        Message::Accepted(
            Accepted::new(job_id)
                .with_request_id(request_id)
                .with_extra(extra),
        )
    }

    /// A refusal of one request: v1.1 `job.error`, legacy `nack`.
    pub(super) fn refusal(self, error: ErrorReply) -> Message {
        match self {
            Flavor::V1_1 => Message::Error(error),
            Flavor::Legacy => Message::Nack(error),
        }
    }

    /// The terminal message of a finished job, in the dialect's shape.
    pub(super) fn terminal(self, outcome: Outcome, result_id: Option<String>) -> Message {
        let v1_1 = self == Flavor::V1_1;
        let failure = match outcome {
            Outcome::Done(Ok(value)) => {
                let mut extra = Object::new();
                let streamed = result_id.is_some();
                if let Some(id) = result_id {
                    extra.insert("result_id".into(), json!(id));
                }
                if v1_1 {
                    extra.insert("completed_at".into(), json!(now_rfc3339()));
                }
                let result = (!(streamed && value.is_null())).then_some(value);
                return Message::Result(JobResult::new(result).with_extra(extra));
            }
            Outcome::Cancelled => {
                return Message::Cancelled(if v1_1 {
                    object(json!({"completed_at": now_rfc3339()}))
                } else {
                    object(json!({"reason": "cancellation token fired"}))
                });
            }
            Outcome::Done(Err(failure)) => failure,
            Outcome::Panicked => {
                ToolFailure::new(self.internal_code(), "tool panicked").retryable(false)
            }
        };
        let mut extra = Object::new();
        if v1_1 {
            extra.insert("final_status".into(), json!("error"));
            extra.insert("completed_at".into(), json!(now_rfc3339()));
        }
        let mut error = ErrorReply::new(failure.code().clone(), failure.message())
            .with_retryable(failure.is_retryable())
            .with_extra(extra);
        error.details = failure.details_value().cloned();
        Message::Error(error)
    }
}

/// A prefixed ULID, such as `job_01J...`.
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", ulid::Ulid::new())
}

/// A `session.error`-style body: `retryable: false`, `details: null`, no
/// request id (as Python sends them).
pub(crate) fn session_error(code: ErrorCode, message: impl Into<String>) -> ErrorReply {
    ErrorReply::new(code, message)
        .with_retryable(false)
        .with_details(Value::Null)
}

/// An error body naming the request it answers.
pub(crate) fn error_reply(
    code: ErrorCode,
    message: impl Into<String>,
    retryable: bool,
    request_id: Option<&str>,
) -> ErrorReply {
    let mut error = ErrorReply::new(code, message).with_retryable(retryable);
    error.request_id = request_id.map(str::to_owned);
    error
}

/// The map inside a JSON object (empty for anything else).
pub(crate) fn object(value: Value) -> Object {
    match value {
        Value::Object(map) => map,
        _ => Object::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_differ_only_where_the_runtimes_do() {
        assert!(Flavor::V1_1
            .frame(Message::Closed(Object::new()))
            .envelope
            .timestamp
            .is_none());
        assert!(Flavor::Legacy
            .frame(Message::Closed(Object::new()))
            .envelope
            .timestamp
            .is_some());
        assert_eq!(Flavor::Legacy.progress(1, 4), json!({"percent": 25.0}));
        assert_eq!(Flavor::Legacy.progress(1, 0), json!({"percent": 100.0}));
        assert_eq!(
            Flavor::V1_1.progress(1, 4),
            json!({"current": 1, "total": 4})
        );
        assert!(Flavor::Legacy.request_id().starts_with("msg_"));
        let panicked = |f: Flavor| match f.terminal(Outcome::Panicked, None) {
            Message::Error(e) => e.code,
            other => panic!("{other:?}"),
        };
        assert_eq!(panicked(Flavor::V1_1), ErrorCode::InternalError);
        assert_eq!(panicked(Flavor::Legacy), ErrorCode::Internal);
    }
}
