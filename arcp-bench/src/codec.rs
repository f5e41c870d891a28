//! Codec cost: encode and decode of the envelopes of one call, per dialect,
//! through `arcp-types` as the client uses it, next to single-pass floors
//! (borrowed structs, no `serde_json::Value` tree) that show what is left.

use std::hint::black_box;
use std::time::Instant;

use arcp_types::{Dialect, Frame, IdempotencyKey, Invoke, Message, PayloadScope};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::stats::median;

pub(crate) struct Row {
    pub dialect: Dialect,
    pub what: String,
    pub bytes: usize,
    pub ns: f64,
}

/// ns per iteration of `f`: median of 5 batches.
fn time<F: FnMut()>(iters: usize, mut f: F) -> f64 {
    for _ in 0..iters / 10 {
        f();
    }
    let mut per = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        per.push(t.elapsed().as_nanos() as f64 / iters as f64);
    }
    median(&per)
}

#[derive(Serialize)]
struct WireInvoke<'a> {
    arcp: &'a str,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    timestamp: &'a str,
    session_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    idempotency_key: Option<&'a str>,
    trace_id: &'a str,
    payload: WirePayload<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum WirePayload<'a> {
    Legacy {
        tool: &'a str,
        arguments: &'a Value,
    },
    V11 {
        agent: &'a str,
        input: &'a Value,
        idempotency_key: &'a str,
    },
}

#[derive(Deserialize)]
#[allow(dead_code)] // read only to be parsed
struct WireHead<'a> {
    #[serde(rename = "type", borrow)]
    kind: &'a str,
    #[serde(borrow)]
    id: &'a str,
    #[serde(borrow, default)]
    session_id: Option<&'a str>,
    #[serde(borrow, default)]
    job_id: Option<&'a str>,
    #[serde(borrow, default)]
    correlation_id: Option<&'a str>,
    #[serde(default)]
    event_seq: Option<u64>,
    #[serde(borrow)]
    payload: &'a RawValue,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct WireBody<'a> {
    #[serde(borrow, default)]
    job_id: Option<&'a str>,
    #[serde(borrow, default)]
    request_id: Option<&'a str>,
    #[serde(default)]
    value: Option<Value>,
    #[serde(default)]
    result: Option<Value>,
}

pub(crate) fn run(iters: usize) -> Vec<Row> {
    let mut rows = Vec::new();
    let args = crate::clients::echo_args();
    let args_text = serde_json::to_string(&args).unwrap_or_default();
    for dialect in [Dialect::Legacy, Dialect::V1_1] {
        let key = IdempotencyKey::new().to_string();
        let invoke = Invoke::new("echo", args.clone()).with_idempotency_key(key.clone());
        let session = format!("sess_{}", ulid::Ulid::new());
        let trace = arcp_types::new_trace_id();
        let attempt = || {
            let mut frame = Frame::new(Message::Invoke(invoke.clone()));
            frame.envelope.session_id = Some(session.clone());
            frame.envelope.trace_id = Some(trace.clone());
            frame
        };
        let frame = attempt();
        let text = dialect.encode(&frame);
        // What the client does now: the payload once per call, then each
        // attempt a fresh envelope around it.
        let encoded = dialect.encode_invoke(&invoke);
        rows.push(Row {
            dialect,
            what: "request, as sent: a fresh envelope (id, timestamp, session, trace) around the payload encoded once"
                .into(),
            bytes: text.len(),
            ns: time(iters, || {
                let mut header = arcp_types::Envelope::new("");
                header.session_id = Some(session.clone());
                header.trace_id = Some(trace.clone());
                black_box(encoded.frame(black_box(&header)));
            }),
        });
        rows.push(Row {
            dialect,
            what: "request: Dialect::encode_invoke (once per call)".into(),
            bytes: encoded.payload().len(),
            ns: time(iters, || {
                black_box(dialect.encode_invoke(black_box(&invoke)));
            }),
        });
        rows.push(Row {
            dialect,
            what: "request: Frame::new + Invoke clone + Dialect::encode (the full encoder, one attempt)"
                .into(),
            bytes: text.len(),
            ns: time(iters, || {
                black_box(dialect.encode(&attempt()));
            }),
        });
        rows.push(Row {
            dialect,
            what: "request: Dialect::encode alone".into(),
            bytes: text.len(),
            ns: time(iters, || {
                black_box(dialect.encode(black_box(&frame)));
            }),
        });
        rows.push(Row {
            dialect,
            what: "request: serde_json::to_string(&Invoke) (once per call: fingerprint and size check)".into(),
            bytes: 0,
            ns: time(iters, || {
                black_box(serde_json::to_string(black_box(&invoke)).ok());
            }),
        });
        let (id, ts) = (frame.envelope.id.clone(), arcp_types::now_rfc3339());
        let wire = WireInvoke {
            arcp: "1.1",
            id: &id,
            kind: if dialect == Dialect::Legacy {
                "tool.invoke"
            } else {
                "job.submit"
            },
            timestamp: &ts,
            session_id: &session,
            idempotency_key: (dialect == Dialect::Legacy).then_some(key.as_str()),
            trace_id: &trace,
            payload: if dialect == Dialect::Legacy {
                WirePayload::Legacy {
                    tool: "echo",
                    arguments: &args,
                }
            } else {
                WirePayload::V11 {
                    agent: "echo",
                    input: &args,
                    idempotency_key: &key,
                }
            },
        };
        rows.push(Row {
            dialect,
            what: "request: single-pass floor (borrowed struct -> to_string)".into(),
            bytes: serde_json::to_string(&wire).map_or(0, |s| s.len()),
            ns: time(iters, || {
                black_box(serde_json::to_string(black_box(&wire)).ok());
            }),
        });
        let replies = crate::fast_server::sample_replies(dialect == Dialect::Legacy, &args_text);
        let total: usize = replies.iter().map(String::len).sum();
        rows.push(Row {
            dialect,
            what: format!(
                "replies: Dialect::decode of the {} frames of one call",
                replies.len()
            ),
            bytes: total,
            ns: time(iters, || {
                for r in &replies {
                    black_box(dialect.decode(black_box(r)).ok());
                }
            }),
        });
        rows.push(Row {
            dialect,
            what: "replies: decode_header + decode_payload(PayloadScope::OutcomeOnly), as the client reads an unwatched call's".into(),
            bytes: total,
            ns: time(iters, || {
                for r in &replies {
                    if let Ok((header, payload)) = dialect.decode_header(black_box(r)) {
                        black_box(dialect.decode_payload(&header, payload, PayloadScope::OutcomeOnly).ok());
                        black_box(header);
                    }
                }
            }),
        });
        rows.push(Row {
            dialect,
            what: "replies: floor (borrowed header + RawValue payload, then the payload)".into(),
            bytes: total,
            ns: time(iters, || {
                for r in &replies {
                    if let Ok(h) = serde_json::from_str::<WireHead>(black_box(r)) {
                        black_box(serde_json::from_str::<WireBody>(h.payload.get()).ok());
                        black_box(h);
                    }
                }
            }),
        });
    }
    rows
}
