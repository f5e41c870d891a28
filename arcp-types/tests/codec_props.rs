//! Property tests: arbitrary domain messages round-trip through each codec,
//! arbitrary input never panics a decoder, and the one-pass decoder (payload
//! parsed from its raw text) agrees with decoding a parsed tree.

use arcp_types::*;
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::{Map, Value};

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Extra fields, named so they never collide with a modelled field.
fn extra() -> impl Strategy<Value = Map<String, Value>> {
    btree_map("x_[a-z]{1,5}", json_value(), 0..3).prop_map(|m| m.into_iter().collect())
}

fn object() -> impl Strategy<Value = Map<String, Value>> {
    extra()
}

fn ident() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_.-]{1,16}"
}

fn code() -> impl Strategy<Value = ErrorCode> {
    prop_oneof![
        proptest::sample::select(ErrorCode::known().cloned().collect::<Vec<_>>()),
        "arcpx\\.[a-z]{1,8}\\.[A-Z_]{1,8}".prop_map(|s| ErrorCode::parse(&s)),
    ]
}

fn error_reply() -> impl Strategy<Value = ErrorReply> {
    (
        code(),
        ".{0,20}",
        proptest::option::of(any::<bool>()),
        proptest::option::of(json_leaf()),
        proptest::option::of(ident()),
        extra(),
    )
        .prop_map(|(code, message, retryable, details, request_id, extra)| {
            let mut e = ErrorReply::new(code, message).with_extra(extra);
            e.retryable = retryable;
            e.details = details;
            e.request_id = request_id;
            e
        })
}

fn peer() -> impl Strategy<Value = PeerInfo> {
    (ident(), ident(), extra())
        .prop_map(|(name, version, extra)| PeerInfo::new(name, version).with_extra(extra))
}

fn event(legacy_plain: bool) -> impl Strategy<Value = JobEvent> {
    let kinds = prop_oneof![
        Just("progress".to_owned()),
        Just("log".to_owned()),
        Just("metric".to_owned()),
        Just("result_chunk".to_owned()),
        "[a-z_]{1,10}",
    ];
    (kinds, proptest::option::of(ident()), json_value(), extra()).prop_map(
        move |(kind, ts, body, extra)| {
            if legacy_plain {
                JobEvent::new(kind, body)
            } else {
                let mut event = JobEvent::new(kind, body).with_extra(extra);
                event.ts = ts;
                event
            }
        },
    )
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (
            ident(),
            json_value(),
            proptest::option::of(ident()),
            extra()
        )
            .prop_map(|(tool, arguments, idempotency_key, extra)| {
                let mut invoke = Invoke::new(tool, arguments).with_extra(extra);
                invoke.idempotency_key = idempotency_key;
                Message::Invoke(invoke)
            }),
        (ident(), proptest::option::of(ident()), extra()).prop_map(
            |(job_id, request_id, extra)| {
                let mut accepted = Accepted::new(job_id).with_extra(extra);
                accepted.request_id = request_id;
                Message::Accepted(accepted)
            }
        ),
        prop_oneof![event(true), event(false)].prop_map(Message::Event),
        (proptest::option::of(json_leaf()), extra())
            .prop_map(|(result, extra)| Message::Result(JobResult::new(result).with_extra(extra))),
        error_reply().prop_map(Message::Error),
        error_reply().prop_map(Message::Nack),
        (ident(), proptest::option::of(ident()), extra()).prop_map(|(nonce, sent_at, extra)| {
            let mut ping = Ping::new(nonce).with_extra(extra);
            ping.sent_at = sent_at;
            Message::Ping(ping)
        }),
        (ident(), proptest::option::of(ident()), extra()).prop_map(
            |(ping_nonce, received_at, extra)| {
                let mut pong = Pong::new(ping_nonce).with_extra(extra);
                pong.received_at = received_at;
                Message::Pong(pong)
            }
        ),
        (any::<u64>(), extra())
            .prop_map(|(seq, extra)| Message::Ack(Ack::new(seq).with_extra(extra))),
        (ident(), proptest::option::of(ident()), extra()).prop_map(|(job_id, reason, extra)| {
            let mut cancel = Cancel::new(job_id).with_extra(extra);
            cancel.reason = reason;
            Message::Cancel(cancel)
        }),
        (
            ident(),
            peer(),
            proptest::option::of(ident()),
            proptest::option::of(any::<u64>()),
            object()
        )
            .prop_map(|(session_id, runtime, resume_token, hb, caps)| {
                let mut welcome =
                    Welcome::new(session_id, runtime).with_capabilities(Value::Object(caps));
                welcome.resume_token = resume_token;
                welcome.heartbeat_interval_sec = hb;
                Message::Welcome(welcome)
            }),
        (peer(), proptest::option::of(ident()), object()).prop_map(|(client, token, caps)| {
            let auth = token.map(Auth::bearer).unwrap_or_else(Auth::none);
            Message::Open(Open::new(client, auth).with_capabilities(Value::Object(caps)))
        }),
        (
            ident(),
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<bool>())
        )
            .prop_map(|(job_id, from_event_seq, history)| {
                let mut sub = Subscribe::new(job_id);
                sub.from_event_seq = from_event_seq;
                sub.history = history;
                Message::Subscribe(sub)
            }),
        object().prop_map(Message::Started),
        object().prop_map(Message::Cancelled),
        ("x\\.[a-z]{1,8}", json_value())
            .prop_map(|(kind, payload)| Message::Unknown(Unknown::new(kind, payload))),
    ]
}

/// Messages a dialect cannot express; everything else must round-trip.
fn expressible(dialect: Dialect, m: &Message) -> bool {
    match (dialect, m) {
        // v1.1 has no `job.started`; it travels as a status event.
        (Dialect::V1_1, Message::Started(_)) => false,
        // v1.1 has no `nack`; it is sent as `session.error`.
        (Dialect::V1_1, Message::Nack(_)) => false,
        // v1.1 has no generic receipt.
        _ => true,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn domain_messages_round_trip_through_each_codec(m in message()) {
        for dialect in [Dialect::V1_1, Dialect::Legacy] {
            if !expressible(dialect, &m) {
                continue;
            }
            let frame = Frame::new(m.clone());
            let text = dialect.encode(&frame);
            let back = dialect.decode(&text).map_err(|e| TestCaseError::fail(format!("{dialect}: {e}\n{text}")))?;
            prop_assert_eq!(&back.message, &m, "{} via {}", dialect, text);
            prop_assert_eq!(&back.envelope.id, &frame.envelope.id);
        }
    }

    #[test]
    fn a_request_encoded_once_matches_the_full_encoder(m in message()) {
        let Message::Invoke(invoke) = &m else { return Ok(()) };
        for dialect in [Dialect::V1_1, Dialect::Legacy] {
            let mut frame = Frame::new(m.clone());
            frame.envelope.session_id = Some("sess_1".into());
            frame.envelope.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
            let spliced = dialect.encode_invoke(invoke).frame(&frame.envelope);
            prop_assert_eq!(spliced, dialect.encode(&frame), "{}", dialect);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_a_decoder(bytes in vec(any::<u8>(), 0..256)) {
        let text = String::from_utf8_lossy(&bytes);
        for dialect in [Dialect::V1_1, Dialect::Legacy] {
            let _ = dialect.decode(&text);
        }
    }

    #[test]
    fn arbitrary_json_with_known_types_never_panics(
        kind in proptest::sample::select(vec![
            "session.hello", "session.welcome", "session.error", "session.open", "session.accepted",
            "session.rejected", "job.submit", "tool.invoke", "job.accepted", "job.event", "job.result",
            "job.error", "job.failed", "job.completed", "job.cancel", "cancel", "ack", "nack",
            "session.ping", "session.pong", "session.ack", "job.progress", "metric", "tool.result",
        ]),
        payload in json_value(),
        seq in any::<i64>(),
    ) {
        let text = serde_json::json!({
            "arcp": "1.1", "id": "msg_x", "type": kind, "event_seq": seq, "payload": payload
        }).to_string();
        for dialect in [Dialect::V1_1, Dialect::Legacy] {
            // Typed error or a frame: never a panic.
            let _ = dialect.decode(&text);
        }
    }

    #[test]
    fn one_pass_decoding_agrees_with_decoding_a_tree(
        kind in prop_oneof![
            // The hot types, where the one-pass decoder has its own steps.
            proptest::sample::select(vec!["job.result", "job.completed", "job.accepted", "job.event"]),
            proptest::sample::select(KNOWN_TYPES.to_vec()),
        ],
        mut body in object(),
        // Fields whose handling differs by type: renamed, moved or dropped.
        status in proptest::option::of(proptest::sample::select(vec![
            Value::from("success"), Value::from("cancelled"), Value::from("error"), Value::Null,
        ])),
        value in proptest::option::of(prop_oneof![Just(Value::Null), json_value()]),
        result in proptest::option::of(prop_oneof![Just(Value::Null), json_value()]),
        job_id in proptest::option::of(json_value()),
        kind_field in proptest::option::of(ident()),
        bare in any::<bool>(),
    ) {
        for (name, field) in [
            ("final_status", status),
            ("value", value),
            ("result", result),
            ("job_id", job_id),
            ("kind", kind_field.map(Value::from)),
        ] {
            if let Some(field) = field {
                body.insert(name.into(), field);
            }
        }
        let payload = if bare { Value::Null } else { Value::Object(body) };
        let text = serde_json::json!({
            "arcp": "1.1", "id": "msg_x", "type": kind, "job_id": "job_1",
            "correlation_id": "msg_w", "payload": payload,
        }).to_string();
        for dialect in [Dialect::V1_1, Dialect::Legacy] {
            agree(dialect, &text)?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Frames written as runtimes write them, payload last, which
    /// [`Dialect::decode_with`] reads in one pass over the payload; with
    /// one byte of the payload changed, fields after it, or text after the
    /// frame: it agrees with the two-step reading on all of them.
    #[test]
    fn frames_ending_with_their_payload_read_in_one_pass_agree(
        kind in proptest::sample::select(vec![
            "job.accepted", "job.event", "job.result", "job.completed", "job.started", "log",
            "job.progress", "session.pong", "x.unknown",
        ]),
        mut body in object(),
        status in proptest::option::of(proptest::sample::select(vec!["success", "error", "cancelled"])),
        result in proptest::option::of(json_value()),
        event_kind in proptest::option::of(proptest::sample::select(vec!["log", "result_chunk", "progress"])),
        edit in proptest::option::of((any::<prop::sample::Index>(), 0..3u8, proptest::sample::select(
            b"\"{}[]:,0123456789.-+eEtrufalsn \\\t\nx".to_vec(),
        ))),
        after in proptest::sample::select(vec!["", " ", ",\"x\":1", ",\"job_id\":\"j2\"", ",\"payload\":{}", "} ", "}{}"]),
    ) {
        if let Some(status) = status {
            body.insert("final_status".into(), Value::from(status));
        }
        if let Some(result) = result {
            body.insert("result".into(), result.clone());
            body.insert("value".into(), result);
        }
        if let Some(event_kind) = event_kind {
            body.insert("kind".into(), Value::from(event_kind));
        }
        body.insert("job_id".into(), Value::from("job_1"));
        let mut payload = Value::Object(body).to_string().into_bytes();
        if let Some((at, op, byte)) = edit {
            let at = at.index(payload.len());
            match op {
                0 => payload[at] = byte,
                1 => payload.insert(at, byte),
                _ => {
                    payload.remove(at);
                }
            }
        }
        // The edits keep it UTF-8 only where they touch ASCII; skip the rest.
        let Ok(payload) = String::from_utf8(payload) else { return Ok(()) };
        let text = format!(
            r#"{{"arcp":"1.1","id":"msg_x","type":"{kind}","job_id":"job_1","correlation_id":"msg_w","event_seq":3,"payload":{payload}{after}}}"#
        );
        for dialect in [Dialect::V1_1, Dialect::Legacy] {
            decode_with_agrees(dialect, &text)?;
        }
    }
}

const KNOWN_TYPES: &[&str] = &[
    "session.hello",
    "session.welcome",
    "session.error",
    "session.open",
    "session.accepted",
    "session.rejected",
    "session.closed",
    "job.submit",
    "tool.invoke",
    "job.accepted",
    "job.event",
    "job.result",
    "job.error",
    "job.failed",
    "job.completed",
    "job.cancel",
    "job.cancelled",
    "cancel",
    "ack",
    "nack",
    "session.ping",
    "session.pong",
    "session.ack",
    "job.progress",
    "metric",
    "log",
    "tool.result",
    "tool.error",
    "job.subscribe",
    "x.unknown",
];

/// Both decoders give the same frame, or both refuse it.
fn agree(dialect: Dialect, text: &str) -> Result<(), TestCaseError> {
    let one_pass = dialect.decode(text);
    let tree = serde_json::from_str::<Envelope>(text)
        .map_err(|e| e.to_string())
        .and_then(|envelope| dialect.decode_envelope(envelope).map_err(|e| e.to_string()));
    match (one_pass, tree) {
        (Ok(a), Ok(b)) => prop_assert_eq!(a, b, "{} {}", dialect, text),
        (Err(_), Err(_)) => {}
        (a, b) => prop_assert!(false, "{dialect}: one pass {a:?}, tree {b:?}: {text}"),
    }
    decode_with_agrees(dialect, text)?;
    lean_agrees(dialect, text)
}

/// [`Dialect::decode_with`] gives what reading the header, then the
/// payload, gives (for either scope), and refuses what that refuses, with
/// the same error.
fn decode_with_agrees(dialect: Dialect, text: &str) -> Result<(), TestCaseError> {
    for scope in [PayloadScope::All, PayloadScope::OutcomeOnly] {
        let steps = dialect.decode_header(text).and_then(|(header, payload)| {
            if scope == PayloadScope::OutcomeOnly {
                if let Some(value) = dialect.plain_result_value(&header, payload) {
                    return Ok((header, Decoded::PlainResult(value)));
                }
            }
            let message = dialect.decode_payload(&header, payload, scope)?;
            Ok((header, Decoded::Message(message)))
        });
        let one = dialect.decode_with(text, |_| scope);
        match (one, steps) {
            (Ok((header, read, read_scope)), Ok(expected)) => {
                prop_assert_eq!(read_scope, scope);
                prop_assert_eq!((header, read), expected, "{} {:?} {}", dialect, scope, text);
            }
            (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string(), "{}", text),
            (a, b) => prop_assert!(
                false,
                "{dialect} {scope:?}: decode_with {a:?}, steps {b:?}: {text}"
            ),
        }
    }
    Ok(())
}

/// A frame decoded with [`PayloadScope::OutcomeOnly`] is the full decoding minus what
/// that mode documents it skips; it never refuses a frame the full
/// decoding accepts.
fn lean_agrees(dialect: Dialect, text: &str) -> Result<(), TestCaseError> {
    plain_value_agrees(dialect, text)?;
    let Ok(full) = dialect.decode_borrowed(text) else {
        return Ok(());
    };
    let (header, payload) = dialect.decode_header(text).unwrap();
    let lean = dialect
        .decode_payload(&header, payload, PayloadScope::OutcomeOnly)
        .map_err(|e| TestCaseError::fail(format!("{dialect}: lean refused {e}: {text}")))?;
    let expected = match full.1 {
        Message::Accepted(mut a) => {
            a.extra.clear();
            if dialect == Dialect::Legacy {
                // The request it answers: the payload's own field only (a
                // receiver of replies reads the header's correlation id).
                let envelope: Value = serde_json::from_str(text).unwrap();
                a.request_id = envelope["payload"]["request_id"]
                    .as_str()
                    .map(str::to_owned);
            }
            Message::Accepted(a)
        }
        Message::Event(mut e) => {
            e.extra.clear();
            e.ts = None;
            if e.kind != "result_chunk" {
                e.body = Value::Null;
            }
            Message::Event(e)
        }
        Message::Started(_) => Message::Started(Default::default()),
        Message::Result(mut r) if r.result.is_some() => {
            r.extra.retain(|name, _| {
                ["final_status", "code", "message", "result_id", "result_ref"]
                    .contains(&name.as_str())
            });
            Message::Result(r)
        }
        other => other,
    };
    prop_assert_eq!(lean, expected, "{} {}", dialect, text);
    Ok(())
}

/// Where [`Dialect::plain_result_value`] gives a value, the full decoding
/// accepts the frame, reads that same value, and no failure status.
fn plain_value_agrees(dialect: Dialect, text: &str) -> Result<(), TestCaseError> {
    let Ok((header, payload)) = dialect.decode_header(text) else {
        return Ok(());
    };
    let Some(raw) = dialect.plain_result_value(&header, payload) else {
        return Ok(());
    };
    let value: Value = serde_json::from_str(raw.get()).unwrap();
    // What the client would decode instead (nobody watches the call).
    match dialect.decode_payload(&header, payload, PayloadScope::OutcomeOnly) {
        Ok(Message::Result(r)) => {
            prop_assert_eq!(r.result.as_ref(), Some(&value), "{} {}", dialect, text)
        }
        other => prop_assert!(false, "{dialect}: plain value, lean {other:?}: {text}"),
    }
    match dialect.decode_borrowed(text) {
        Ok((_, Message::Result(r))) => {
            prop_assert_eq!(r.result.as_ref(), Some(&value), "{} {}", dialect, text);
            let status = r.extra.get("final_status");
            prop_assert!(
                status.is_none() || status == Some(&Value::from("success")),
                "{dialect}: plain value with status {status:?}: {text}"
            );
        }
        other => prop_assert!(false, "{dialect}: plain value, decoded {other:?}: {text}"),
    }
    Ok(())
}

#[test]
fn plain_result_values_are_taken_only_when_plain() {
    let frame = |kind: &str, payload: &str| {
        format!(r#"{{"arcp":"1.1","id":"m1","type":"{kind}","job_id":"j1","payload":{payload}}}"#)
    };
    let plain = |dialect: Dialect, kind: &str, payload: &str| {
        let text = frame(kind, payload);
        let (header, raw) = dialect.decode_header(&text).unwrap();
        plain_value_agrees(dialect, &text).unwrap();
        dialect
            .plain_result_value(&header, raw)
            .map(|v| v.get().to_owned())
    };
    let v11 = |payload: &str| plain(Dialect::V1_1, "job.result", payload);
    let legacy_value = |payload: &str| plain(Dialect::Legacy, "job.completed", payload);
    assert_eq!(
        v11(r#"{"result":{"a":[1,2]},"x":1}"#).as_deref(),
        Some(r#"{"a":[1,2]}"#)
    );
    assert_eq!(
        v11(r#"{"final_status":"success","result":7}"#).as_deref(),
        Some("7")
    );
    // What building values refuses: numbers out of range (anywhere in the
    // payload), nesting past the parser's limit counted from the payload.
    let deep = |levels: usize| format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
    for declined in [
        r#"{"result":1e400}"#.to_owned(),
        format!(r#"{{"result":{}}}"#, "9".repeat(400)),
        r#"{"result":1,"code":1e400}"#.to_owned(),
        format!(r#"{{"result":{}}}"#, deep(127)),
    ] {
        assert_eq!(v11(&declined), None, "{declined}");
    }
    assert!(v11(&format!(r#"{{"result":{}}}"#, deep(100))).is_some());
    assert_eq!(legacy_value(r#"{"value":1,"meta":-1e400}"#), None);
    for declined in [
        r#"{"final_status":"error","result":7,"message":"boom"}"#,
        r#"{"final_status":"cancelled","result":7}"#,
        r#"{"final_status":"timed_out","result":7}"#,
        r#"{"result":null,"result_ref":"r1"}"#,
        r#"{"result_id":"r1"}"#,
        r#"{"result":1,"result":2}"#,
        r#"[1]"#,
    ] {
        assert_eq!(v11(declined), None, "{declined}");
    }
    let legacy = legacy_value;
    assert_eq!(legacy(r#"{"value":"x"}"#).as_deref(), Some(r#""x""#));
    assert_eq!(
        legacy(r#"{"result":{"b":2}}"#).as_deref(),
        Some(r#"{"b":2}"#)
    );
    assert_eq!(
        legacy(r#"{"value":"x","result":1}"#).as_deref(),
        Some(r#""x""#)
    );
    for declined in [
        r#"{"value":null,"result":1}"#,
        r#"{"value":1,"value":2}"#,
        "{}",
    ] {
        assert_eq!(legacy(declined), None, "{declined}");
    }
    // Other kinds and the other dialect's result are never taken.
    assert_eq!(
        plain(Dialect::Legacy, "job.result", r#"{"result":1}"#),
        None
    );
    assert_eq!(
        plain(Dialect::V1_1, "job.completed", r#"{"value":1}"#),
        None
    );
    assert_eq!(
        plain(Dialect::Legacy, "tool.result", r#"{"result":1}"#),
        None
    );
}

#[test]
fn one_pass_decoding_agrees_on_every_captured_frame() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let mut files = vec![std::path::PathBuf::from(root).join("python-runtime-1.1.3.jsonl")];
    files.push(std::path::PathBuf::from(root).join("python-runtime-1.1.3-resume.jsonl"));
    for entry in std::fs::read_dir(format!("{root}/rust-runtime-2.0.0")).unwrap() {
        files.push(entry.unwrap().path());
    }
    let mut frames = 0;
    for file in files {
        let dialect = if file.to_string_lossy().contains("python") {
            Dialect::V1_1
        } else {
            Dialect::Legacy
        };
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let Ok(record) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            // Python's captures keep the wire text, Rust's the parsed envelope.
            let text = match (&record["raw"], &record["env"]) {
                (Value::String(raw), _) => raw.clone(),
                (_, env @ Value::Object(_)) => env.to_string(),
                _ => continue,
            };
            agree(dialect, &text).unwrap();
            frames += 1;
        }
    }
    assert!(frames > 100, "only {frames} captured frames");
}

#[test]
fn a_legacy_result_with_a_value_field_round_trips() {
    let text =
        r#"{"arcp":"1.1","id":"msg_1","type":"tool.result","payload":{"result":1,"value":2}}"#;
    let frame = Dialect::Legacy.decode(text).unwrap();
    let again = Dialect::Legacy
        .decode(&Dialect::Legacy.encode(&frame))
        .unwrap();
    assert_eq!(again.message, frame.message);
}

#[test]
fn garbage_frames_give_typed_errors() {
    for text in [
        "",
        "null",
        "[]",
        "{",
        r#"{"id":"x"}"#,
        r#"{"arcp":"1.1","id":"m","type":"job.accepted","payload":{"job_id":7}}"#,
    ] {
        for dialect in [Dialect::V1_1, Dialect::Legacy] {
            let err = dialect.decode(text).expect_err(text);
            assert!(!err.to_string().is_empty());
        }
    }
    let err = Dialect::V1_1
        .decode(r#"{"arcp":"1.1","id":"m","type":"job.accepted","payload":{"job_id":7}}"#)
        .unwrap_err();
    assert!(err.to_string().contains("job.accepted"), "{err}");
    let huge = r#"{"arcp":"1.1","id":"m","type":"job.event","event_seq":1e400,"payload":{}}"#;
    assert!(Dialect::V1_1.decode(huge).is_err());
}

#[test]
fn a_legacy_completed_value_is_the_result_and_a_null_one_is_none() {
    let result = |payload: &str| {
        let text =
            format!(r#"{{"arcp":"1.1","id":"m","type":"job.completed","payload":{payload}}}"#);
        match Dialect::Legacy.decode(&text).unwrap().message {
            Message::Result(r) => r,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        result(r#"{"value":{"a":1}}"#).result,
        Some(serde_json::json!({"a": 1}))
    );
    assert_eq!(result(r#"{"value":null}"#).result, None);
    assert_eq!(
        result(r#"{"value":2,"result":1}"#).result,
        Some(Value::from(2))
    );
    let r = result(r#"{"result":1,"completed_at":"t"}"#);
    assert_eq!(r.result, Some(Value::from(1)));
    assert_eq!(r.extra["completed_at"], "t");
    // A repeated `value`: the last one, on the text path as through a tree.
    assert_eq!(
        result(r#"{"value":1,"value":2}"#).result,
        Some(Value::from(2))
    );
    assert_eq!(result(r#"{"value":1,"value":null}"#).result, None);
    let text = r#"{"arcp":"1.1","id":"m","type":"job.completed","payload":{"value":1,"value":2}}"#;
    let tree: arcp_types::Envelope = serde_json::from_str(text).unwrap();
    match Dialect::Legacy.decode_envelope(tree).unwrap().message {
        Message::Result(r) => assert_eq!(r.result, Some(Value::from(2))),
        other => panic!("{other:?}"),
    }
}
