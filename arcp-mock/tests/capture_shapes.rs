//! The mock's envelopes have the same fields and JSON types as the captured
//! envelopes of the real runtimes: Python 1.1.3 for v1.1, Rust 2.0.0 for the
//! legacy dialect. Each test drives the mock into a situation a capture shows
//! and compares the envelope of the same type.

mod common;

use arcp_mock::{ConflictSignal, MockRuntime, ReplayPolicy};
use arcp_types::{Cancel, Close, Dialect, Frame, Message};
use common::*;
use serde_json::{json, Value};

const OPAQUE: &[&str] = &["payload.result", "payload.value", "payload.input"];

fn shape(mock: &Value, captured: &Value) {
    assert_same_shape(mock, captured, OPAQUE, &[]);
}

fn is_type(v: &Value, kind: &str) -> bool {
    v["type"] == kind
}

fn code_is(v: &Value, code: &str) -> bool {
    v["payload"]["code"] == code
}

// -------------------------------------------------------------------- v1.1

async fn v1_1(builder: arcp_mock::MockRuntimeBuilder) -> (MockRuntime, Client) {
    let mock = builder.token("test-token", "alice").start().await.unwrap();
    let mut client = Client::connect(&mock).await;
    client.handshake("test-token").await;
    (mock, client)
}

#[tokio::test]
async fn v1_1_welcome_with_and_without_heartbeat() {
    let mock = builder(Dialect::V1_1)
        .heartbeat(ms(1500))
        .start()
        .await
        .unwrap();
    let mut client = Client::connect(&mock).await;
    let (_, welcome) = client.handshake("any").await;
    let captured = capture(Dialect::V1_1, "welcome with heartbeat", |v| {
        is_type(v, "session.welcome") && v["payload"]["heartbeat_interval_sec"].is_number()
    });
    assert_same_shape(
        &welcome,
        &captured,
        OPAQUE,
        &["payload.heartbeat_interval_ms"],
    );
    assert_eq!(welcome["payload"]["heartbeat_interval_sec"], 2);
    assert_eq!(welcome["payload"]["heartbeat_interval_ms"], 1500);

    // F5: a hello without the heartbeat feature gets no heartbeat fields.
    let mut client = Client::connect(&mock).await;
    client.send(&open_frame("any", None, no_features())).await;
    let (_, welcome) = client.recv().await;
    let captured = capture(Dialect::V1_1, "welcome without heartbeat", |v| {
        is_type(v, "session.welcome") && v["payload"].get("heartbeat_interval_sec").is_none()
    });
    shape(&welcome, &captured);
}

#[tokio::test]
async fn v1_1_pong_accepted_event_result_and_error() {
    let (_mock, mut client) = v1_1(builder(Dialect::V1_1)).await;
    client.ping("n1").await;
    let (_, pong) = client.recv().await;
    shape(
        &pong,
        &capture(Dialect::V1_1, "pong", |v| is_type(v, "session.pong")),
    );

    client.submit("slow", json!({"ms": 1}), None).await;
    let (accepted, accepted_wire) = client.recv().await;
    shape(
        &accepted_wire,
        &capture(Dialect::V1_1, "accepted", |v| is_type(v, "job.accepted")),
    );
    let job_id = accepted.job_id().unwrap().to_owned();
    let frames = client.until_terminal(&job_id).await;
    let log = &frames[0].1;
    shape(
        log,
        &capture(Dialect::V1_1, "log event", |v| {
            is_type(v, "job.event") && v["payload"]["body"]["message"] == "echo started"
        }),
    );
    let result = &frames.last().unwrap().1;
    shape(
        result,
        &capture(Dialect::V1_1, "result", |v| is_type(v, "job.result")),
    );

    client.submit("fail", json!({}), None).await;
    let (accepted, _) = client.recv().await;
    let frames = client.until_terminal(accepted.job_id().unwrap()).await;
    let error = &frames.last().unwrap().1;
    shape(
        error,
        &capture(Dialect::V1_1, "job.error", |v| is_type(v, "job.error")),
    );
}

#[tokio::test]
async fn v1_1_terminal_replay_matches_python() {
    let (mock, mut first) = v1_1(builder(Dialect::V1_1)).await;
    let request = first.submit("echo", json!({"a": 1}), Some("k1")).await;
    let (accepted, accepted_wire) = first.recv().await;
    let job_id = accepted.job_id().unwrap().to_owned();
    let frames = first.until_terminal(&job_id).await;
    let (_, original_result) = frames.last().unwrap().clone();

    // A new connection (new session) resubmits the same intent.
    let mut second = Client::connect(&mock).await;
    second.handshake("test-token").await;
    let retry = second.submit("echo", json!({"a": 1}), Some("k1")).await;
    let (_, replayed_accepted) = second.recv().await;
    let (_, replayed_result) = second.recv().await;

    let captured_replay = capture(Dialect::V1_1, "replayed accepted", |v| {
        is_type(v, "job.accepted") && v["id"] == "01M81BSXFEEEEX2RH3TM0Y71HB"
    });
    shape(&replayed_accepted, &captured_replay);
    // The original envelope, with the new request id in the payload.
    assert_eq!(replayed_accepted["id"], accepted_wire["id"]);
    assert_eq!(replayed_accepted["session_id"], accepted_wire["session_id"]);
    assert_eq!(replayed_accepted["job_id"], job_id.as_str());
    assert_eq!(replayed_accepted["payload"]["request_id"], retry.as_str());
    assert_ne!(retry, request);

    let captured_result = capture(Dialect::V1_1, "replayed result", |v| {
        is_type(v, "job.result") && v["id"] == "01M81BSXFFTC6HE89QYA8XTAWA"
    });
    shape(&replayed_result, &captured_result);
    assert_eq!(replayed_result["id"], original_result["id"]);
    assert_eq!(replayed_result["payload"], original_result["payload"]);
    // A fresh event_seq, of the new session.
    assert_eq!(replayed_result["event_seq"], 1);
    assert_eq!(mock.executions("echo"), 1);
}

#[tokio::test]
async fn v1_1_session_errors() {
    let (_mock, mut client) = v1_1(builder(Dialect::V1_1)).await;
    client.submit("echo", json!(1), Some("k")).await;
    let (accepted, _) = client.recv().await;
    client.until_terminal(accepted.job_id().unwrap()).await;
    client.submit("echo", json!(2), Some("k")).await;
    let (frame, dup) = client.recv().await;
    assert!(matches!(frame.message, Message::SessionError(_)));
    shape(
        &dup,
        &capture(Dialect::V1_1, "DUPLICATE_KEY", |v| {
            code_is(v, "DUPLICATE_KEY")
        }),
    );
    assert_eq!(
        dup["payload"]["message"],
        "idempotency key 'k' already used with different parameters"
    );

    client.submit("nope", json!({}), None).await;
    let (_, unknown) = client.recv().await;
    shape(
        &unknown,
        &capture(Dialect::V1_1, "AGENT_NOT_AVAILABLE", |v| {
            code_is(v, "AGENT_NOT_AVAILABLE")
        }),
    );
    assert_eq!(unknown["payload"]["message"], "unknown agent: nope");

    client
        .send_text(
            json!({"arcp": "1.1", "id": arcp_types::new_message_id(), "type": "tool.invoke",
                   "payload": {"tool": "echo", "arguments": {}}})
            .to_string(),
        )
        .await;
    let (_, invalid) = client.recv().await;
    shape(
        &invalid,
        &capture(Dialect::V1_1, "unknown type", |v| {
            v["payload"]["message"] == "unknown envelope type: 'tool.invoke'"
        }),
    );
    assert_eq!(
        invalid["payload"]["message"],
        "unknown envelope type: 'tool.invoke'"
    );

    let mock = builder(Dialect::V1_1)
        .token("test-token", "alice")
        .start()
        .await
        .unwrap();
    let mut bad = Client::connect(&mock).await;
    bad.send(&open_frame("wrong-token", None, Value::Null))
        .await;
    let seen = bad.expect_close().await;
    shape(
        &seen[0],
        &capture(Dialect::V1_1, "UNAUTHENTICATED", |v| {
            code_is(v, "UNAUTHENTICATED")
        }),
    );
}

#[tokio::test]
async fn v1_1_cancelled_result_and_runtime_ping() {
    let (_mock, mut client) = v1_1(builder(Dialect::V1_1).heartbeat(ms(200))).await;
    client.submit("slow", json!({"ms": 5000}), None).await;
    let (accepted, _) = client.recv_type("job.accepted").await;
    let job_id = accepted.job_id().unwrap().to_owned();
    client
        .send(&Frame::new(Message::Cancel(
            Cancel::new(job_id.clone()).with_reason("probe"),
        )))
        .await;
    let (_, cancelled) = client.recv_type("job.result").await;
    shape(
        &cancelled,
        &capture(Dialect::V1_1, "cancelled result", |v| {
            v["payload"]["final_status"] == "cancelled"
        }),
    );
    let (_, ping) = client.recv_type("session.ping").await;
    shape(
        &ping,
        &capture(Dialect::V1_1, "runtime ping", |v| {
            is_type(v, "session.ping")
        }),
    );
}

// ------------------------------------------------------------------ legacy

async fn legacy(builder: arcp_mock::MockRuntimeBuilder) -> (MockRuntime, Client, Value) {
    let mock = builder
        .token("secret-token", "alice")
        .start()
        .await
        .unwrap();
    let mut client = Client::connect(&mock).await;
    let (_, welcome) = client.handshake("secret-token").await;
    (mock, client, welcome)
}

fn legacy_builder() -> arcp_mock::MockRuntimeBuilder {
    builder(Dialect::Legacy).tool("counter", |args, ctx| async move {
        ctx.metric("cost.tick", 0.0, "USD").await;
        Ok(json!({"arguments": args, "count": 1}))
    })
}

#[tokio::test]
async fn legacy_handshake_and_rejection() {
    let (mock, mut client, welcome) = legacy(legacy_builder()).await;
    shape(
        &welcome,
        &capture(Dialect::Legacy, "session.accepted", |v| {
            is_type(v, "session.accepted")
        }),
    );
    assert_eq!(welcome["payload"]["capabilities"]["subscriptions"], false);
    let ping_id = client.ping("n1").await;
    let (_, pong) = client.recv().await;
    shape(
        &pong,
        &capture(Dialect::Legacy, "session.pong", |v| {
            is_type(v, "session.pong")
        }),
    );
    assert_eq!(pong["correlation_id"], ping_id.as_str());

    let mut bad = Client::connect(&mock).await;
    bad.send(&open_frame("wrong-token", None, Value::Null))
        .await;
    let (_, rejected) = bad.recv().await;
    shape(
        &rejected,
        &capture(Dialect::Legacy, "session.rejected", |v| {
            is_type(v, "session.rejected") && v["payload"]["message"] == "unknown bearer token"
        }),
    );
    // Rust 2.0.0 keeps the connection: a second open succeeds.
    let (frame, _) = bad.handshake("secret-token").await;
    assert!(matches!(frame.message, Message::Welcome(_)));
}

#[tokio::test]
async fn legacy_job_lifecycle_and_accepted_only_replay() {
    let (_mock, mut client, _) = legacy(legacy_builder()).await;
    let request = client
        .submit("counter", json!({"ticks": 1}), Some("key-counter-1"))
        .await;
    let (accepted, accepted_wire) = client.recv().await;
    let job_id = accepted.job_id().unwrap().to_owned();
    let captured_accepted = capture(Dialect::Legacy, "fresh job.accepted", |v| {
        is_type(v, "job.accepted") && v.get("idempotency_key").is_none()
    });
    shape(&accepted_wire, &captured_accepted);
    assert_eq!(accepted_wire["correlation_id"], request.as_str());
    assert_eq!(accepted_wire["event_seq"], 1);

    let frames = client.until_terminal(&job_id).await;
    let kinds: Vec<&str> = frames
        .iter()
        .map(|(_, v)| v["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["job.started", "metric", "job.completed"]);
    for (_, wire) in &frames {
        let kind = wire["type"].as_str().unwrap();
        shape(wire, &capture(Dialect::Legacy, kind, |v| is_type(v, kind)));
        assert_eq!(wire["correlation_id"], request.as_str());
    }
    let seqs: Vec<u64> = frames
        .iter()
        .map(|(_, v)| v["event_seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [2, 3, 4]);

    // Same key, same intent: only job.accepted, original job, key echoed.
    let retry = client
        .submit("counter", json!({"ticks": 1}), Some("key-counter-1"))
        .await;
    let (_, replayed) = client.recv().await;
    let captured_replay = capture(Dialect::Legacy, "replayed job.accepted", |v| {
        is_type(v, "job.accepted") && v.get("idempotency_key").is_some()
    });
    shape(&replayed, &captured_replay);
    assert_eq!(replayed["job_id"], job_id.as_str());
    assert_eq!(replayed["correlation_id"], retry.as_str());
    assert_eq!(replayed["idempotency_key"], "key-counter-1");
    client.expect_silence(ms(150)).await;
}

#[tokio::test]
async fn legacy_failures_conflict_and_unknown_tool() {
    let (_mock, mut client, _) = legacy(legacy_builder()).await;
    client.submit("fail", json!({}), Some("key-fail-1")).await;
    let (accepted, _) = client.recv().await;
    let frames = client.until_terminal(accepted.job_id().unwrap()).await;
    let failed = &frames.last().unwrap().1;
    shape(
        failed,
        &capture(Dialect::Legacy, "job.failed", |v| {
            is_type(v, "job.failed") && code_is(v, "PERMISSION_DENIED")
        }),
    );

    let request = client
        .submit("echo", json!({"x": 1}), Some("key-fail-1"))
        .await;
    let (_, conflict) = client.recv().await;
    shape(
        &conflict,
        &capture(Dialect::Legacy, "FAILED_PRECONDITION", |v| {
            code_is(v, "FAILED_PRECONDITION")
        }),
    );
    assert_eq!(conflict["correlation_id"], request.as_str());
    assert_eq!(conflict["idempotency_key"], "key-fail-1");
    assert!(conflict.get("job_id").is_none());
    assert_eq!(
        conflict["payload"]["message"],
        "idempotency key key-fail-1 already bound to a different command intent"
    );

    client
        .submit("no-such-tool", json!({}), Some("key-unknown-1"))
        .await;
    let (_, accepted) = client.recv().await;
    let (_, not_found) = client.recv().await;
    assert_eq!(accepted["type"], "job.accepted");
    shape(
        &not_found,
        &capture(Dialect::Legacy, "NOT_FOUND", |v| code_is(v, "NOT_FOUND")),
    );
    assert_eq!(
        not_found["payload"]["message"],
        "tool not registered: no-such-tool"
    );
}

#[tokio::test]
async fn legacy_session_close_cancels_and_drops() {
    let (_mock, mut client, _) = legacy(legacy_builder()).await;
    client
        .submit("slow", json!({"ms": 5000}), Some("key-close"))
        .await;
    client.recv_type("job.started").await;
    client
        .send(&Frame::new(Message::Close(
            Close::default().with_reason("bye"),
        )))
        .await;
    let seen = client.expect_drop().await;
    let cancelled = seen
        .iter()
        .find(|v| is_type(v, "job.cancelled"))
        .expect("job.cancelled before the drop");
    shape(
        cancelled,
        &capture(Dialect::Legacy, "job.cancelled", |v| {
            is_type(v, "job.cancelled")
        }),
    );
}

#[tokio::test]
async fn other_conflict_signals_and_policies_use_codec_shapes() {
    // Nack (legacy) carries code/message and the request as correlation_id.
    let (_mock, mut client, _) = legacy(
        legacy_builder()
            .conflict_signal(ConflictSignal::Nack)
            .replay_policy(ReplayPolicy::AckReplay),
    )
    .await;
    client.submit("echo", json!(1), Some("k")).await;
    let (accepted, _) = client.recv().await;
    client.until_terminal(accepted.job_id().unwrap()).await;
    let retry = client.submit("echo", json!(1), Some("k")).await;
    let (frame, ack) = client.recv().await;
    assert_eq!(ack["type"], "ack");
    assert_eq!(ack["payload"]["replay"], true);
    assert_eq!(ack["payload"]["job_id"], accepted.job_id().unwrap());
    assert_eq!(frame.request_id(), Some(retry.as_str()));
    let other = client.submit("echo", json!(2), Some("k")).await;
    let (frame, nack) = client.recv().await;
    assert_eq!(nack["type"], "nack");
    assert_eq!(error_code(&frame), "DUPLICATE_KEY");
    assert_eq!(nack["correlation_id"], other.as_str());
    let captured_nack = capture(Dialect::Legacy, "nack", |v| is_type(v, "nack"));
    // The captured nack is about a job; compare the payloads.
    assert_same_shape(&nack["payload"], &captured_nack["payload"], &[], &[]);
    assert!(nack.get("job_id").is_none());
}

#[test]
#[should_panic(expected = "`payload.retryable` is string in the mock, bool in the capture")]
fn shape_comparison_catches_type_drift() {
    let captured = json!({"type": "x", "payload": {"code": "A", "retryable": false}});
    let mock = json!({"type": "x", "payload": {"code": "A", "retryable": "no"}});
    assert_same_shape(&mock, &captured, &[], &[]);
}

#[test]
#[should_panic(expected = "missing `job_id`")]
fn shape_comparison_catches_missing_fields() {
    let captured = json!({"type": "x", "job_id": "j", "payload": {}});
    let mock = json!({"type": "x", "payload": {}});
    assert_same_shape(&mock, &captured, &[], &[]);
}
