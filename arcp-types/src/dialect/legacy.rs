//! RFC-0001 v2 (`session.open`, `tool.invoke`, `job.completed`, ...), as the
//! published Rust runtime 2.0.0 speaks it.
//!
//! Differences from v1.1 that this codec hides:
//! - the idempotency key travels on the envelope, not in the payload (the
//!   Rust runtime ignores a key in the payload);
//! - the request a reply answers is the envelope's `correlation_id`;
//! - names: `client.kind`/`runtime.kind` for `name`, `value` for `result`,
//!   `target_id` for a cancel's `job_id`; events are separate types.

use std::borrow::Cow;

use serde_json::{json, Value};

use super::{
    from_payload, object_payload, outcome_readers, rename, rename_in, to_payload, DecodeError,
    Head, Payload, PayloadScope,
};
use crate::message::*;
use crate::Envelope;

pub(super) fn decode(
    head: Head<'_>,
    payload: Payload<'_>,
    scope: PayloadScope,
) -> Result<Message, DecodeError> {
    let k = head.kind;
    let correlation = || head.correlation_id.map(str::to_owned);
    let with_request = |mut e: ErrorReply| {
        e.request_id = e.request_id.or_else(correlation);
        e
    };
    // A legacy event's payload is its body.
    let event = |kind: &str, payload: Payload<'_>| -> Result<Message, DecodeError> {
        let body = match scope {
            PayloadScope::OutcomeOnly => {
                outcome_readers::legacy_event_body(kind, || payload.into_value(k))?
            }
            _ => payload.into_value(k)?,
        };
        Ok(Message::Event(JobEvent {
            kind: kind.to_owned(),
            ts: None,
            body,
            extra: Object::new(),
        }))
    };
    let message = match k {
        "session.open" => {
            let mut payload = payload.into_value(k)?;
            rename_in(&mut payload, "client", "kind", "name");
            Message::Open(super::decode_open(from_payload(k, payload)?))
        }
        "session.accepted" => {
            let mut payload = payload.into_value(k)?;
            rename_in(&mut payload, "runtime", "kind", "name");
            Message::Welcome(from_payload(k, payload)?)
        }
        "session.rejected" | "session.unauthenticated" => {
            Message::Rejected(with_request(from_payload(k, payload)?))
        }
        "session.evicted" => Message::Evicted(object_payload(k, payload)?),
        "session.close" => Message::Close(from_payload(k, payload)?),
        "session.ping" | "ping" => Message::Ping(from_payload(k, payload)?),
        "session.pong" | "pong" => Message::Pong(from_payload(k, payload)?),
        "session.ack" => Message::Ack(from_payload(k, payload)?),
        "session.list_jobs" => Message::ListJobs(object_payload(k, payload)?),
        "session.jobs" => Message::Jobs(object_payload(k, payload)?),
        "resume" => Message::Resume(object_payload(k, payload)?),
        "ack" => Message::Receipt(from_payload(k, payload)?),
        "nack" => Message::Nack(with_request(from_payload(k, payload)?)),
        "tool.invoke" => {
            let mut invoke: Invoke = from_payload(k, payload)?;
            // A key inside the payload is not the key (the runtime ignores
            // it); keep it as an opaque payload field.
            if let Some(in_payload) = invoke.idempotency_key.take() {
                invoke
                    .extra
                    .insert("idempotency_key".into(), Value::String(in_payload));
            }
            invoke.idempotency_key = head.idempotency_key.map(str::to_owned);
            Message::Invoke(invoke)
        }
        "job.accepted" => {
            Message::Accepted(match scope {
                // The request it answers stays in the header's
                // `correlation_id` (where a receiver of replies looks).
                PayloadScope::OutcomeOnly => outcome_readers::accepted(k, payload)?,
                _ => {
                    let mut accepted: Accepted = from_payload(k, payload)?;
                    accepted.request_id = accepted.request_id.or_else(correlation);
                    accepted
                }
            })
        }
        "job.started" => Message::Started(match scope {
            PayloadScope::OutcomeOnly => Object::new(),
            _ => object_payload(k, payload)?,
        }),
        "job.progress" => event("progress", payload)?,
        "metric" => event("metric", payload)?,
        "log" => event("log", payload)?,
        "job.result_chunk" => event("result_chunk", payload)?,
        "job.event" => Message::Event(match scope {
            PayloadScope::OutcomeOnly => outcome_readers::event(k, payload)?,
            _ => from_payload(k, payload)?,
        }),
        "job.completed" => {
            let completed: Completed = from_payload(k, payload)?;
            let mut result = completed.into_result();
            if scope == PayloadScope::OutcomeOnly {
                outcome_readers::keep_result_fields(&mut result);
            }
            Message::Result(result)
        }
        // An alias of `job.completed` (rare): read in full, then trimmed.
        "tool.result" => {
            let mut result = from_payload(k, payload)?;
            if scope == PayloadScope::OutcomeOnly {
                outcome_readers::keep_result_fields(&mut result);
            }
            Message::Result(result)
        }
        "job.failed" | "tool.error" => Message::Error(with_request(from_payload(k, payload)?)),
        "job.cancelled" => Message::Cancelled(object_payload(k, payload)?),
        "cancel" => {
            let mut body = object_payload(k, payload)?;
            if body.get("target").and_then(Value::as_str) == Some("job") {
                body.remove("target");
            }
            if let Some(id) = body.remove("target_id") {
                body.insert("job_id".into(), id);
            } else if let Some(job_id) = head.job_id {
                body.entry("job_id")
                    .or_insert_with(|| Value::String(job_id.to_owned()));
            }
            Message::Cancel(from_payload(k, Value::Object(body))?)
        }
        "cancel.accepted" => Message::CancelAccepted(object_payload(k, payload)?),
        "cancel.refused" => Message::CancelRefused(object_payload(k, payload)?),
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

/// The fields of a `tool.invoke` payload, borrowed from `invoke`, and the
/// key for the envelope (a key inside the payload is only an opaque field).
pub(super) fn invoke_fields<'a>(
    invoke: &'a Invoke,
    fields: &mut super::Fields<'a>,
) -> (&'static str, Option<String>) {
    use super::FieldValue::{Json, Str};
    fields.push(("tool", Str(&invoke.tool)));
    fields.push(("arguments", Json(&invoke.arguments)));
    for (k, v) in &invoke.extra {
        fields.push((k.as_str(), Json(v)));
    }
    ("tool.invoke", invoke.idempotency_key.clone())
}

pub(super) fn encode(frame: &Frame, envelope: &mut Envelope) -> (Cow<'static, str>, Value) {
    // Replies name the request they answer in `correlation_id`.
    let mut error = |e: &ErrorReply| {
        if e.request_id.is_some() {
            envelope.correlation_id = e.request_id.clone();
        }
        let mut payload = to_payload(e);
        if let Some(map) = payload.as_object_mut() {
            map.remove("request_id");
        }
        payload
    };
    let (kind, payload) = match &frame.message {
        Message::Open(open) => {
            let mut payload = to_payload(open);
            rename_in(&mut payload, "client", "name", "kind");
            if open.capabilities.is_null() {
                payload["capabilities"] = json!({"streaming": true, "durable_jobs": true});
            }
            ("session.open", payload)
        }
        Message::Welcome(w) => {
            envelope
                .session_id
                .get_or_insert_with(|| w.session_id.clone());
            let mut payload = to_payload(w);
            rename_in(&mut payload, "runtime", "name", "kind");
            ("session.accepted", payload)
        }
        Message::Rejected(e) | Message::SessionError(e) => ("session.rejected", error(e)),
        Message::Nack(e) => ("nack", error(e)),
        Message::Error(e) => ("job.failed", error(e)),
        Message::Evicted(o) | Message::Closed(o) => ("session.evicted", Value::Object(o.clone())),
        Message::Close(c) => ("session.close", to_payload(c)),
        Message::Ping(p) => ("session.ping", to_payload(p)),
        Message::Pong(p) => ("session.pong", to_payload(p)),
        Message::Ack(a) => ("session.ack", to_payload(a)),
        Message::ListJobs(o) => ("session.list_jobs", Value::Object(o.clone())),
        Message::Jobs(o) => ("session.jobs", Value::Object(o.clone())),
        Message::Resume(o) => ("resume", Value::Object(o.clone())),
        Message::Receipt(r) => ("ack", to_payload(r)),
        Message::Invoke(invoke) => {
            envelope.idempotency_key = invoke.idempotency_key.clone();
            let mut payload = to_payload(invoke);
            if let Some(map) = payload.as_object_mut() {
                map.remove("idempotency_key");
                if let Some(in_payload) = invoke.extra.get("idempotency_key") {
                    map.insert("idempotency_key".into(), in_payload.clone());
                }
            }
            ("tool.invoke", payload)
        }
        Message::Accepted(a) => {
            envelope.job_id.get_or_insert_with(|| a.job_id.clone());
            if a.request_id.is_some() {
                envelope.correlation_id = a.request_id.clone();
            }
            let mut payload = to_payload(a);
            if let Some(map) = payload.as_object_mut() {
                map.remove("request_id");
            }
            ("job.accepted", payload)
        }
        Message::Started(o) => ("job.started", Value::Object(o.clone())),
        Message::Event(e) => match e.kind.as_str() {
            "progress" if e.ts.is_none() && e.extra.is_empty() => ("job.progress", e.body.clone()),
            "metric" if e.ts.is_none() && e.extra.is_empty() => ("metric", e.body.clone()),
            "log" if e.ts.is_none() && e.extra.is_empty() => ("log", e.body.clone()),
            "result_chunk" if e.ts.is_none() && e.extra.is_empty() => {
                ("job.result_chunk", e.body.clone())
            }
            _ => ("job.event", to_payload(e)),
        },
        // `job.completed` names the result `value`; a result that also has an
        // unrelated `value` field can only travel as `tool.result`.
        Message::Result(r) if r.extra.contains_key("value") => ("tool.result", to_payload(r)),
        Message::Result(r) => {
            let mut payload = to_payload(r);
            rename(&mut payload, "result", "value");
            ("job.completed", payload)
        }
        Message::Cancelled(o) => ("job.cancelled", Value::Object(o.clone())),
        Message::Cancel(c) => {
            let mut payload = to_payload(c);
            rename(&mut payload, "job_id", "target_id");
            if let Some(map) = payload.as_object_mut() {
                map.insert("target".into(), json!("job"));
            }
            ("cancel", payload)
        }
        Message::CancelAccepted(o) => ("cancel.accepted", Value::Object(o.clone())),
        Message::CancelRefused(o) => ("cancel.refused", Value::Object(o.clone())),
        Message::Subscribe(s) => ("job.subscribe", to_payload(s)),
        Message::Subscribed(o) => ("job.subscribed", Value::Object(o.clone())),
        Message::Unsubscribe(o) => ("job.unsubscribe", Value::Object(o.clone())),
        Message::Unknown(u) => return (Cow::Owned(u.kind.clone()), u.payload.clone()),
    };
    (Cow::Borrowed(kind), payload)
}

/// A `job.completed` payload, read in one pass: the result is named `value`
/// here (a `null` value is no result); a `result` field, should a runtime
/// send one as well, counts only without a `value`. A repeated `value` is
/// read as an object with repeated keys is (the last one counts), as
/// decoding through a tree does.
struct Completed {
    value: Option<Value>,
    result: Option<Value>,
    extra: Object,
}

impl<'de> serde::Deserialize<'de> for Completed {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Completed;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a job.completed payload object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Completed, A::Error> {
                let (mut value, mut result, mut extra) = (None, None, Object::new());
                while let Some(key) = map.next_key::<crate::extra_fields::Key<'de>>()? {
                    match key.as_str() {
                        // `Value` reads `null` as `Value::Null`: present.
                        "value" => value = Some(map.next_value::<Value>()?),
                        "result" => {
                            if result.is_some() {
                                return Err(serde::de::Error::duplicate_field("result"));
                            }
                            result = Some(map.next_value::<Option<Value>>()?);
                        }
                        _ => {
                            let v = map.next_value()?;
                            extra.insert(key.into_string(), v);
                        }
                    }
                }
                Ok(Completed {
                    value,
                    result: result.flatten(),
                    extra,
                })
            }
        }
        d.deserialize_map(V)
    }
}

impl Completed {
    fn into_result(self) -> JobResult {
        let result = match self.value {
            Some(value) => Some(value).filter(|v| !v.is_null()),
            None => self.result,
        };
        JobResult {
            result,
            extra: self.extra,
        }
    }
}
