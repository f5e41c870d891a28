//! ARCP v1.1 (`session.hello`, `job.submit`, `job.result`, ...).

use std::borrow::Cow;

use serde_json::{json, Value};

use super::outcome_readers::{self, lean_or_full, LeanResult};
use super::{
    decode_open, from_payload, object_payload, rename, to_payload, DecodeError, Head, Payload,
    PayloadScope,
};
use crate::message::*;
use crate::Envelope;

/// Features this SDK can use when the runtime offers them.
const DEFAULT_FEATURES: &[&str] = &[
    "heartbeat",
    "ack",
    "list_jobs",
    "subscribe",
    "progress",
    "result_chunk",
];

pub(super) fn decode(
    head: Head<'_>,
    payload: Payload<'_>,
    scope: PayloadScope,
) -> Result<Message, DecodeError> {
    let k = head.kind;
    let message = match k {
        "session.hello" => Message::Open(decode_open(from_payload(k, payload)?)),
        "session.welcome" => Message::Welcome(from_payload(k, payload)?),
        "session.error" => Message::SessionError(from_payload(k, payload)?),
        "session.ping" => Message::Ping(from_payload(k, payload)?),
        "session.pong" => Message::Pong(from_payload(k, payload)?),
        "session.ack" => Message::Ack(from_payload(k, payload)?),
        "session.close" | "session.bye" => Message::Close(from_payload(k, payload)?),
        "session.closed" => Message::Closed(object_payload(k, payload)?),
        "session.list_jobs" => Message::ListJobs(object_payload(k, payload)?),
        "session.jobs" => Message::Jobs(object_payload(k, payload)?),
        "job.submit" => {
            let mut payload = payload.into_value(k)?;
            rename(&mut payload, "agent", "tool");
            rename(&mut payload, "input", "arguments");
            Message::Invoke(from_payload(k, payload)?)
        }
        "job.accepted" => Message::Accepted(match scope {
            PayloadScope::OutcomeOnly => outcome_readers::accepted(k, payload)?,
            _ => from_payload(k, payload)?,
        }),
        "job.event" => Message::Event(match scope {
            PayloadScope::OutcomeOnly => outcome_readers::event(k, payload)?,
            _ => from_payload(k, payload)?,
        }),
        "job.result" => job_result(k, payload, scope)?,
        "job.error" => Message::Error(from_payload(k, payload)?),
        "job.cancel" => {
            let mut body = object_payload(k, payload)?;
            if !body.contains_key("job_id") {
                if let Some(job_id) = head.job_id {
                    body.insert("job_id".into(), Value::String(job_id.to_owned()));
                }
            }
            Message::Cancel(from_payload(k, Value::Object(body))?)
        }
        "job.cancelled" => Message::CancelAccepted(object_payload(k, payload)?),
        "job.subscribe" => Message::Subscribe(from_payload(k, payload)?),
        "job.subscribed" => Message::Subscribed(object_payload(k, payload)?),
        "job.unsubscribe" => Message::Unsubscribe(object_payload(k, payload)?),
        _ => {
            let payload = payload.into_value(k)?;
            Message::Unknown(Unknown {
                kind: k.to_owned(),
                payload,
            })
        }
    };
    Ok(message)
}

/// A `job.result`: its `final_status` picks the variant (the encoder
/// writes it back); `error` / `timed_out` stay on the result for the
/// caller to read.
fn job_result(k: &str, payload: Payload<'_>, scope: PayloadScope) -> Result<Message, DecodeError> {
    let cancelled =
        |extra: &Object| extra.get("final_status").and_then(Value::as_str) == Some("cancelled");
    // A successful (or unnamed) status is implied by the variant.
    let drop_success = |extra: &mut Object| {
        if matches!(
            extra.get("final_status").map(Value::as_str),
            Some(Some("success") | None)
        ) {
            extra.remove("final_status");
        }
    };
    let cancelled_body = |mut body: Object| {
        body.remove("final_status");
        Message::Cancelled(body)
    };
    match payload {
        // The common case in one parse; a cancelled job's body (rare) is
        // read again from the same text, verbatim.
        Payload::Raw(raw) => {
            let mut result: JobResult = match scope {
                PayloadScope::OutcomeOnly => lean_or_full(
                    || Ok(from_payload::<LeanResult>(k, Payload::Raw(raw))?.0),
                    || from_payload(k, Payload::Raw(raw)),
                )?,
                _ => from_payload(k, Payload::Raw(raw))?,
            };
            if cancelled(&result.extra) {
                return Ok(cancelled_body(object_payload(k, Payload::Raw(raw))?));
            }
            drop_success(&mut result.extra);
            Ok(Message::Result(result))
        }
        Payload::Tree(tree) => {
            let mut body = object_payload(k, tree)?;
            if cancelled(&body) {
                return Ok(cancelled_body(body));
            }
            drop_success(&mut body);
            Ok(Message::Result(from_payload(k, Value::Object(body))?))
        }
    }
}

/// The fields of a `job.submit` payload, borrowed from `invoke` (the
/// named fields first: on a clash with an `extra` field they win).
pub(super) fn invoke_fields<'a>(
    invoke: &'a Invoke,
    fields: &mut super::Fields<'a>,
) -> (&'static str, Option<String>) {
    use super::FieldValue::{Json, Str};
    fields.push(("agent", Str(&invoke.tool)));
    fields.push(("input", Json(&invoke.arguments)));
    if let Some(key) = &invoke.idempotency_key {
        fields.push(("idempotency_key", Str(key)));
    }
    for (k, v) in &invoke.extra {
        fields.push((k.as_str(), Json(v)));
    }
    ("job.submit", None)
}

pub(super) fn encode(frame: &Frame, envelope: &mut Envelope) -> (Cow<'static, str>, Value) {
    let (kind, payload) = match &frame.message {
        Message::Open(open) => {
            let mut payload = to_payload(open);
            if open.capabilities.is_null() {
                payload["capabilities"] =
                    json!({"encodings": ["json"], "features": DEFAULT_FEATURES});
            }
            ("session.hello", payload)
        }
        Message::Welcome(w) => {
            envelope
                .session_id
                .get_or_insert_with(|| w.session_id.clone());
            ("session.welcome", to_payload(w))
        }
        Message::SessionError(e) | Message::Rejected(e) | Message::Nack(e) => {
            ("session.error", to_payload(e))
        }
        Message::Ping(p) => ("session.ping", to_payload(p)),
        Message::Pong(p) => ("session.pong", to_payload(p)),
        Message::Ack(a) => ("session.ack", to_payload(a)),
        Message::Close(c) => ("session.close", to_payload(c)),
        Message::Closed(o) | Message::Evicted(o) => ("session.closed", Value::Object(o.clone())),
        Message::ListJobs(o) => ("session.list_jobs", Value::Object(o.clone())),
        Message::Jobs(o) => ("session.jobs", Value::Object(o.clone())),
        Message::Resume(o) => ("resume", Value::Object(o.clone())),
        Message::Invoke(invoke) => {
            let mut payload = to_payload(invoke);
            rename(&mut payload, "tool", "agent");
            rename(&mut payload, "arguments", "input");
            ("job.submit", payload)
        }
        Message::Accepted(a) => {
            envelope.job_id.get_or_insert_with(|| a.job_id.clone());
            ("job.accepted", to_payload(a))
        }
        Message::Started(o) => (
            "job.event",
            json!({"kind": "status", "body": {"phase": "started", "detail": o}}),
        ),
        Message::Event(e) => ("job.event", to_payload(e)),
        Message::Result(r) => {
            let mut payload = to_payload(r);
            if let Some(map) = payload.as_object_mut() {
                map.entry("final_status")
                    .or_insert_with(|| json!("success"));
            }
            ("job.result", payload)
        }
        Message::Error(e) => ("job.error", to_payload(e)),
        Message::Cancelled(o) => {
            let mut payload = o.clone();
            payload
                .entry("final_status")
                .or_insert_with(|| json!("cancelled"));
            ("job.result", Value::Object(payload))
        }
        Message::Cancel(c) => {
            envelope.job_id = Some(c.job_id.clone());
            let mut payload = to_payload(c);
            if let Some(map) = payload.as_object_mut() {
                map.remove("job_id");
            }
            ("job.cancel", payload)
        }
        Message::CancelAccepted(o) | Message::CancelRefused(o) => {
            ("job.cancelled", Value::Object(o.clone()))
        }
        Message::Subscribe(s) => ("job.subscribe", to_payload(s)),
        Message::Subscribed(o) => ("job.subscribed", Value::Object(o.clone())),
        Message::Unsubscribe(o) => ("job.unsubscribe", Value::Object(o.clone())),
        Message::Receipt(r) => ("ack", to_payload(r)),
        Message::Unknown(u) => return (Cow::Owned(u.kind.clone()), u.payload.clone()),
    };
    (Cow::Borrowed(kind), payload)
}
