//! Sessions: v1.1 resume (replay from a sequence, token rotation, refusals,
//! `RESUME_WINDOW_EXPIRED`, `session.ack`), job reattachment, heartbeats,
//! cancellation, and each dialect's handling of bad frames.

mod common;

use std::time::Instant;

use arcp_mock::MockRuntime;
use arcp_types::{Ack, Cancel, Close, Dialect, Frame, Message};
use common::*;
use serde_json::{json, Value};

async fn v1_1(builder: arcp_mock::MockRuntimeBuilder) -> MockRuntime {
    builder
        .token("test-token", "alice")
        .token("other-token", "bob")
        .start()
        .await
        .unwrap()
}

fn seqs(frames: &[(Frame, Value)]) -> Vec<u64> {
    frames
        .iter()
        .filter_map(|(f, _)| f.envelope.event_seq)
        .collect()
}

fn expect_refusal(next: Next, code: &str, message: &str) {
    match next {
        Next::Frame(frame, wire) => {
            assert_eq!(error_code(&frame), code);
            assert_eq!(wire["payload"]["message"], message);
        }
        other => panic!("expected session.error {code}, got {other:?}"),
    }
}

/// Runs `slow` (log, progress, result: seq 1..=3) and returns the frames.
async fn finished_job(client: &mut Client) -> Vec<(Frame, Value)> {
    client.submit("slow", json!({"ms": 1}), None).await;
    let (accepted, _) = client.recv().await;
    client.until_terminal(accepted.job_id().unwrap()).await
}

#[tokio::test]
async fn resume_replays_after_last_seq_and_rotates_the_token() {
    let mock = v1_1(builder(Dialect::V1_1)).await;
    let mut first = Client::connect(&mock).await;
    first.handshake("test-token").await;
    let frames = finished_job(&mut first).await;
    assert_eq!(seqs(&frames), [1, 2, 3]);
    let session_id = first.session_id.clone().unwrap();
    let token = first.resume_token.clone().unwrap();
    drop(first);

    let mut second = Client::connect(&mock).await;
    let Next::Frame(welcome, wire) = second.resume("test-token", &session_id, &token, 1).await
    else {
        panic!("resume refused");
    };
    assert!(matches!(welcome.message, Message::Welcome(_)));
    assert_eq!(wire["session_id"], session_id.as_str());
    let rotated = second.resume_token.clone().unwrap();
    assert_ne!(rotated, token, "the token rotates on every welcome");
    // The buffered envelopes after seq 1, verbatim (same envelope ids).
    let (replayed2, _) = second.recv().await;
    let (replayed3, _) = second.recv().await;
    assert_eq!(replayed2.envelope, frames[1].0.envelope);
    assert_eq!(replayed3.envelope.id, frames[2].0.envelope.id);
    assert_eq!(replayed3.envelope.event_seq, Some(3));
    // New events continue the session's sequence.
    let frames = finished_job(&mut second).await;
    assert_eq!(seqs(&frames), [4, 5, 6]);
    drop(second);

    // F3: the old token is refused, and the session is then forgotten.
    let mut third = Client::connect(&mock).await;
    let next = third.resume("test-token", &session_id, &token, 0).await;
    expect_refusal(next, "PERMISSION_DENIED", "resume_token does not match");
    third.expect_close().await;
    let mut fourth = Client::connect(&mock).await;
    let next = fourth.resume("test-token", &session_id, &rotated, 0).await;
    expect_refusal(
        next,
        "PERMISSION_DENIED",
        &format!("no resumable session for session_id='{session_id}'"),
    );
}

#[tokio::test]
async fn resume_by_another_principal_is_refused() {
    let mock = v1_1(builder(Dialect::V1_1)).await;
    let mut alice = Client::connect(&mock).await;
    alice.handshake("test-token").await;
    let (sid, token) = (
        alice.session_id.clone().unwrap(),
        alice.resume_token.clone().unwrap(),
    );
    drop(alice);
    let mut bob = Client::connect(&mock).await;
    let next = bob.resume("other-token", &sid, &token, 0).await;
    expect_refusal(
        next,
        "PERMISSION_DENIED",
        "resume principal does not match the original session",
    );
    // The session survives a wrong principal: alice can still resume.
    let mut alice = Client::connect(&mock).await;
    assert!(matches!(
        alice.resume("test-token", &sid, &token, 0).await,
        Next::Frame(..)
    ));
}

#[tokio::test]
async fn resume_older_than_the_buffer_is_resume_window_expired() {
    let mock = v1_1(builder(Dialect::V1_1).resume_buffer(2)).await;
    let mut first = Client::connect(&mock).await;
    first.handshake("test-token").await;
    finished_job(&mut first).await; // seq 1 is evicted, 2 and 3 kept
    let (sid, token) = (
        first.session_id.clone().unwrap(),
        first.resume_token.clone().unwrap(),
    );
    drop(first);

    let mut second = Client::connect(&mock).await;
    match second.resume("test-token", &sid, &token, 0).await {
        Next::Frame(frame, _) => assert_eq!(error_code(&frame), "RESUME_WINDOW_EXPIRED"),
        other => panic!("{other:?}"),
    }
    second.expect_close().await;
    // From seq 1 the buffer still covers everything missed.
    let mut third = Client::connect(&mock).await;
    assert!(matches!(
        third.resume("test-token", &sid, &token, 1).await,
        Next::Frame(..)
    ));
    let (two, _) = third.recv().await;
    let (three, _) = third.recv().await;
    assert_eq!(
        (two.envelope.event_seq, three.envelope.event_seq),
        (Some(2), Some(3))
    );
}

#[tokio::test]
async fn session_ack_trims_the_buffer_without_expiring_resume() {
    // F2: after `session.ack 2`, a resume from 0 replays only seq 3.
    let mock = v1_1(builder(Dialect::V1_1)).await;
    let mut first = Client::connect(&mock).await;
    first.handshake("test-token").await;
    finished_job(&mut first).await;
    first.send(&Frame::new(Message::Ack(Ack::new(2)))).await;
    first.expect_silence(ms(50)).await;
    let (sid, token) = (
        first.session_id.clone().unwrap(),
        first.resume_token.clone().unwrap(),
    );
    drop(first);
    let mut second = Client::connect(&mock).await;
    assert!(matches!(
        second.resume("test-token", &sid, &token, 0).await,
        Next::Frame(..)
    ));
    let (only, _) = second.recv().await;
    assert_eq!(only.envelope.event_seq, Some(3));
    second.expect_silence(ms(100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumed_connection_receives_live_events_of_running_jobs() {
    let mock = v1_1(builder(Dialect::V1_1)).await;
    let mut first = Client::connect(&mock).await;
    first.handshake("test-token").await;
    first.submit("slow", json!({"ms": 300}), Some("k")).await;
    let (accepted, _) = first.recv().await;
    let job_id = accepted.job_id().unwrap().to_owned();
    let (log, _) = first.recv().await; // seq 1
    assert_eq!(log.envelope.event_seq, Some(1));
    let (sid, token) = (
        first.session_id.clone().unwrap(),
        first.resume_token.clone().unwrap(),
    );
    drop(first);

    let mut second = Client::connect(&mock).await;
    assert!(matches!(
        second.resume("test-token", &sid, &token, 1).await,
        Next::Frame(..)
    ));
    let frames = second.until_terminal(&job_id).await;
    assert_eq!(
        seqs(&frames),
        [2, 3],
        "progress (buffered or live), then the result"
    );
    assert!(matches!(frames[1].0.message, Message::Result(_)));
    assert_eq!(mock.executions("slow"), 1);
}

#[tokio::test]
async fn without_reattach_events_after_the_drop_are_lost_as_in_python() {
    // Python S4: the resumed connection gets nothing of the running job; a
    // resume from 0 replays only what was sent before the drop; the result
    // is still stored for idempotent replay.
    let mock = v1_1(builder(Dialect::V1_1).resume_reattaches_jobs(false)).await;
    let mut first = Client::connect(&mock).await;
    first.handshake("test-token").await;
    first.submit("slow", json!({"ms": 200}), Some("k3")).await;
    first.recv().await; // accepted
    first.recv().await; // log, seq 1
    first.recv().await; // progress, seq 2
    let (sid, token) = (
        first.session_id.clone().unwrap(),
        first.resume_token.clone().unwrap(),
    );
    drop(first);

    let mut second = Client::connect(&mock).await;
    assert!(matches!(
        second.resume("test-token", &sid, &token, 2).await,
        Next::Frame(..)
    ));
    second.expect_silence(ms(400)).await; // the job ended meanwhile
    let token = second.resume_token.clone().unwrap();
    drop(second);

    let mut third = Client::connect(&mock).await;
    assert!(matches!(
        third.resume("test-token", &sid, &token, 0).await,
        Next::Frame(..)
    ));
    let (one, _) = third.recv().await;
    let (two, _) = third.recv().await;
    assert_eq!(
        (one.envelope.event_seq, two.envelope.event_seq),
        (Some(1), Some(2))
    );
    third.expect_silence(ms(100)).await;

    let mut fresh = Client::connect(&mock).await;
    fresh.handshake("test-token").await;
    fresh.submit("slow", json!({"ms": 200}), Some("k3")).await;
    fresh.recv_type("job.accepted").await;
    let (result, _) = fresh.recv().await;
    assert!(matches!(result.message, Message::Result(_)));
    assert_eq!(mock.executions("slow"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_loss_closes_after_two_silent_intervals() {
    let interval = ms(150);
    let mock = v1_1(builder(Dialect::V1_1).heartbeat(interval)).await;
    let mut client = Client::connect(&mock).await;
    client.handshake("test-token").await;
    let start = Instant::now();
    let seen = client.expect_close().await;
    let elapsed = start.elapsed();
    assert_eq!(seen[0]["type"], "session.ping");
    assert!(
        elapsed >= interval * 2 - ms(30) && elapsed < interval * 2 + ms(500),
        "closed after {elapsed:?}"
    );
}

#[tokio::test]
async fn heartbeats_answered_keep_the_connection_open() {
    let mock = v1_1(builder(Dialect::V1_1).heartbeat(ms(100))).await;
    let mut client = Client::connect(&mock).await;
    client.handshake("test-token").await;
    let start = Instant::now();
    let mut pings = 0;
    while start.elapsed() < ms(500) {
        let (frame, _) = client.recv().await;
        if let Message::Ping(ping) = frame.message {
            pings += 1;
            let pong = Frame::new(Message::Pong(arcp_types::Pong::new(ping.nonce)));
            client.send(&pong).await;
        }
    }
    assert!(pings >= 3, "{pings} pings");
    assert_eq!(mock.live_connections(), 1);

    // Without the `heartbeat` feature in the hello: no pings, no timeout.
    let mut quiet = Client::connect(&mock).await;
    quiet
        .send(&open_frame("test-token", None, no_features()))
        .await;
    quiet.recv().await;
    quiet.expect_silence(ms(350)).await;
}

#[tokio::test]
async fn v1_1_bad_frames_get_invalid_request_and_the_connection_stays() {
    let mock = v1_1(builder(Dialect::V1_1)).await;
    let mut client = Client::connect(&mock).await;
    client.handshake("test-token").await;
    for (text, message) in [
        (
            json!({"arcp": "1.1", "id": "not-a-ulid", "type": "job.submit", "payload": {}}),
            "id must be a ULID or UUIDv7, got 'not-a-ulid'",
        ),
        (
            json!({"arcp": "1.0", "id": arcp_types::new_message_id(), "type": "job.submit", "payload": {}}),
            "arcp must be '1.1', got '1.0'",
        ),
        (
            json!({"arcp": "1.1", "id": arcp_types::new_message_id(), "type": "x.y", "payload": {}}),
            "unknown envelope type: 'x.y'",
        ),
    ] {
        client.send_text(text.to_string()).await;
        let (frame, wire) = client.recv().await;
        assert_eq!(error_code(&frame), "INVALID_REQUEST");
        assert_eq!(wire["payload"]["message"], message);
    }
    client.send_text("{not json".into()).await;
    let (frame, _) = client.recv().await;
    assert_eq!(error_code(&frame), "INVALID_REQUEST");
    // Still serving.
    client.submit("echo", json!(1), None).await;
    client.recv_type("job.result").await;
    // `session.bye` / `session.close`: close frame 1000, as Python.
    client
        .send(&Frame::new(Message::Close(
            Close::default().with_reason("probe.done"),
        )))
        .await;
    client.expect_close().await;
}

#[tokio::test]
async fn legacy_drops_tcp_on_frames_it_cannot_parse() {
    let mock = builder(Dialect::Legacy).start().await.unwrap();
    let bad_frames = [
        json!({"arcp": "1.1", "id": arcp_types::new_message_id(), "type": "arcpx.vendor.thing.v1", "payload": {"x": 1}}),
        json!({"arcp": "1.1", "id": "not-a-msg-id", "type": "tool.invoke", "payload": {"tool": "echo", "arguments": {}}}),
        json!({"arcp": "1.1", "id": arcp_types::new_message_id(), "type": "session.resume", "payload": {"resume_token": "rt_x", "last_event_seq": 1}}),
    ];
    for bad in bad_frames {
        let mut client = Client::connect(&mock).await;
        client.handshake("t").await;
        client.send_text(bad.to_string()).await;
        assert!(client.expect_drop().await.is_empty(), "{bad}");
    }
    // Before session.open, other frames are ignored (s08).
    let mut client = Client::connect(&mock).await;
    client.submit("echo", json!({}), None).await;
    client.expect_silence(ms(100)).await;
    client.handshake("t").await;
}

#[tokio::test]
async fn cancellation_in_each_dialect() {
    // v1.1 as captured: no acknowledgement, a `job.result` cancelled.
    for ack in [false, true] {
        let mock = v1_1(builder(Dialect::V1_1).cancel_ack(ack)).await;
        let mut client = Client::connect(&mock).await;
        client.handshake("test-token").await;
        client.submit("slow", json!({"ms": 5000}), None).await;
        let (accepted, _) = client.recv().await;
        let job_id = accepted.job_id().unwrap().to_owned();
        client.send(&cancel(&job_id)).await;
        let frames = client.until_terminal(&job_id).await;
        let types: Vec<&str> = frames
            .iter()
            .map(|(_, v)| v["type"].as_str().unwrap())
            .filter(|t| *t != "job.event")
            .collect();
        if ack {
            assert_eq!(types, ["job.cancelled", "job.result"]);
        } else {
            assert_eq!(types, ["job.result"]);
        }
        assert_eq!(
            frames.last().unwrap().1["payload"]["final_status"],
            "cancelled"
        );
    }

    // Legacy: cancel.accepted, then job.cancelled; unknown jobs are refused.
    let mock = builder(Dialect::Legacy).start().await.unwrap();
    let mut client = Client::connect(&mock).await;
    client.handshake("t").await;
    client.submit("slow", json!({"ms": 5000}), None).await;
    let (accepted, _) = client.recv().await;
    let job_id = accepted.job_id().unwrap().to_owned();
    client.recv_type("job.started").await;
    client.send(&cancel(&job_id)).await;
    let (_, ack) = client.recv_type("cancel.accepted").await;
    assert_eq!(ack["payload"]["target_id"], job_id.as_str());
    let (_, cancelled) = client.recv_type("job.cancelled").await;
    assert_eq!(cancelled["job_id"], job_id.as_str());
    client.send(&cancel(&job_id)).await;
    let (_, refused) = client.recv_type("cancel.refused").await;
    assert_eq!(refused["payload"]["reason"], "job is no longer in-flight");
}

fn cancel(job_id: &str) -> Frame {
    Frame::new(Message::Cancel(Cancel::new(job_id).with_reason("test")))
}

#[tokio::test]
async fn tool_context_events_in_each_dialect() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = MockRuntime::builder()
            .dialect(dialect)
            .tool("stream", |_args, ctx| async move {
                ctx.progress(1, 4).await;
                ctx.log("warn", "careful").await;
                ctx.metric("tokens.used", 12.0, "tokens").await;
                ctx.event("status", json!({"phase": "thinking"})).await;
                ctx.result_chunk("hel", true).await;
                ctx.result_chunk("lo", false).await;
                assert!(ctx.job_id().starts_with("job_"));
                assert_eq!(ctx.idempotency_key(), Some("k"));
                assert_eq!(ctx.principal(), "anonymous");
                Ok(Value::Null)
            })
            .start()
            .await
            .unwrap();
        let mut client = Client::connect(&mock).await;
        client.handshake("t").await;
        client.submit("stream", json!({}), Some("k")).await;
        let (accepted, _) = client.recv().await;
        let frames = client.until_terminal(accepted.job_id().unwrap()).await;
        let wire: Vec<&Value> = frames.iter().map(|(_, v)| v).collect();
        let result_id = if dialect == Dialect::V1_1 {
            let kinds: Vec<&str> = wire[..6]
                .iter()
                .map(|v| v["payload"]["kind"].as_str().unwrap())
                .collect();
            assert_eq!(
                kinds,
                [
                    "progress",
                    "log",
                    "metric",
                    "status",
                    "result_chunk",
                    "result_chunk"
                ]
            );
            assert_eq!(
                wire[0]["payload"]["body"],
                json!({"current": 1, "total": 4})
            );
            assert_eq!(wire[5]["payload"]["body"]["chunk_seq"], 1);
            wire[4]["payload"]["body"]["result_id"].clone()
        } else {
            let types: Vec<&str> = wire[..7]
                .iter()
                .map(|v| v["type"].as_str().unwrap())
                .collect();
            assert_eq!(
                types,
                [
                    "job.started",
                    "job.progress",
                    "log",
                    "metric",
                    "job.event",
                    "job.result_chunk",
                    "job.result_chunk"
                ]
            );
            assert_eq!(wire[1]["payload"], json!({"percent": 25.0}));
            wire[5]["payload"]["result_id"].clone()
        };
        let terminal = wire.last().unwrap();
        assert_eq!(terminal["payload"]["result_id"], result_id);
        assert!(
            terminal["payload"].get("result").is_none()
                && terminal["payload"].get("value").is_none()
        );
    }
}

#[tokio::test]
async fn panicking_tools_fail_the_job_not_the_mock() {
    let mock = MockRuntime::builder()
        .tool("boom", |_args, _ctx| async move {
            if true {
                panic!("tool bug");
            }
            Ok(Value::Null)
        })
        .start()
        .await
        .unwrap();
    let mut client = Client::connect(&mock).await;
    client.handshake("t").await;
    client.submit("boom", json!({}), None).await;
    let (accepted, _) = client.recv().await;
    let frames = client.until_terminal(accepted.job_id().unwrap()).await;
    assert_eq!(error_code(&frames.last().unwrap().0), "INTERNAL_ERROR");
    assert_eq!(mock.executions("boom"), 1);
}
