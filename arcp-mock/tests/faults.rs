//! Each injected fault, connection control, and the received-frames log.

mod common;

use std::time::Instant;

use arcp_mock::{ErrorCode, Fault, MockRuntime};
use arcp_types::{Dialect, Message};
use common::*;
use serde_json::json;

async fn connected(mock: &MockRuntime) -> Client {
    let mut client = Client::connect(mock).await;
    client.handshake("t").await;
    client
}

#[tokio::test]
async fn drop_on_submit_drops_before_executing() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    let mut client = connected(&mock).await;
    mock.inject(Fault::DropOnSubmit);
    client.submit("echo", json!(1), Some("k")).await;
    assert!(client.expect_drop().await.is_empty());
    assert_eq!(mock.executions("echo"), 0);
    // One-shot: the retry goes through and executes once.
    let mut client = connected(&mock).await;
    client.submit("echo", json!(1), Some("k")).await;
    client.recv_type("job.result").await;
    assert_eq!(mock.executions_for_key("k"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_after_accepted_keeps_the_job_running() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = builder(dialect).start().await.unwrap();
        let mut client = connected(&mock).await;
        mock.inject(Fault::DropAfterAccepted);
        client.submit("slow", json!({"ms": 100}), Some("k")).await;
        let seen = client.expect_drop().await;
        assert_eq!(seen.len(), 1, "{dialect}: {seen:?}");
        assert_eq!(seen[0]["type"], "job.accepted");
        let job_id = seen[0]["job_id"].as_str().unwrap().to_owned();
        tokio::time::sleep(ms(250)).await;
        assert_eq!(mock.executions("slow"), 1);
        // The retry is answered from the stored job.
        let mut client = connected(&mock).await;
        client.submit("slow", json!({"ms": 100}), Some("k")).await;
        let (accepted, _) = client.recv().await;
        assert_eq!(accepted.job_id(), Some(job_id.as_str()));
        if dialect == Dialect::V1_1 {
            let (result, _) = client.recv().await;
            assert!(matches!(result.message, Message::Result(_)));
        }
        assert_eq!(mock.executions("slow"), 1);
    }
}

#[tokio::test]
async fn drop_before_terminal_stores_the_terminal() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    let mut client = connected(&mock).await;
    let (sid, token) = (
        client.session_id.clone().unwrap(),
        client.resume_token.clone().unwrap(),
    );
    mock.inject(Fault::DropBeforeTerminal);
    client.submit("slow", json!({"ms": 50}), Some("k")).await;
    let seen = client.expect_drop().await;
    let types: Vec<&str> = seen.iter().map(|v| v["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["job.accepted", "job.event", "job.event"]);
    // Resume delivers it from the session buffer (seq 3) ...
    let mut resumed = Client::connect(&mock).await;
    assert!(matches!(
        resumed.resume("t", &sid, &token, 2).await,
        Next::Frame(..)
    ));
    let (result, _) = resumed.recv().await;
    assert!(matches!(result.message, Message::Result(_)));
    assert_eq!(result.envelope.event_seq, Some(3));
    // ... and an idempotent retry replays it.
    let mut other = connected(&mock).await;
    other.submit("slow", json!({"ms": 50}), Some("k")).await;
    other.recv_type("job.result").await;
    assert_eq!(mock.executions("slow"), 1);
}

#[tokio::test]
async fn drop_after_frames_counts_outbound_frames() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    let mut client = connected(&mock).await;
    mock.inject(Fault::DropAfterFrames(2));
    client.submit("slow", json!({"ms": 10}), None).await;
    let seen = client.expect_drop().await;
    assert_eq!(seen.len(), 2, "accepted and the log event, then the drop");

    // 0: the next frame is not sent at all.
    let mut client = connected(&mock).await;
    mock.inject(Fault::DropAfterFrames(0));
    client.ping("n").await;
    assert!(client.expect_drop().await.is_empty());

    // Standing: every connection drops after its own first frame.
    mock.inject_always(Fault::DropAfterFrames(1));
    for _ in 0..2 {
        let mut client = Client::connect(&mock).await;
        client
            .send(&open_frame("t", None, serde_json::Value::Null))
            .await;
        let seen = client.expect_drop().await;
        assert_eq!(seen[0]["type"], "session.welcome");
    }
    mock.clear_faults();
    connected(&mock).await.ping("n").await;
}

#[tokio::test]
async fn drop_during_handshake_is_one_shot() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = builder(dialect).start().await.unwrap();
        mock.inject(Fault::DropDuringHandshake);
        let mut client = Client::connect(&mock).await;
        client
            .send(&open_frame("t", None, serde_json::Value::Null))
            .await;
        assert!(client.expect_drop().await.is_empty());
        let (welcome, _) = Client::connect(&mock).await.handshake("t").await;
        assert!(matches!(welcome.message, Message::Welcome(_)));
        assert_eq!(mock.connections(), 2);
    }
}

#[tokio::test]
async fn delay_replies_delays_the_next_frame() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    let mut client = connected(&mock).await;
    mock.inject(Fault::DelayReplies(ms(200)));
    let start = Instant::now();
    client.ping("slow").await;
    client.recv().await;
    assert!(start.elapsed() >= ms(200), "{:?}", start.elapsed());
    let start = Instant::now();
    client.ping("fast").await;
    client.recv().await;
    assert!(start.elapsed() < ms(150), "one-shot: {:?}", start.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_next_submit_refuses_before_acceptance() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = builder(dialect).start().await.unwrap();
        let mut client = connected(&mock).await;
        mock.inject(Fault::RejectNextSubmit {
            code: ErrorCode::Unavailable,
            retry_after: Some(ms(250)),
        });
        let request = client.submit("echo", json!(1), Some("k")).await;
        let (frame, wire) = client.recv().await;
        let expected = if dialect == Dialect::V1_1 {
            "job.error"
        } else {
            "nack"
        };
        assert_eq!(wire["type"], expected);
        assert_eq!(frame.request_id(), Some(request.as_str()));
        let (Message::Error(error) | Message::Nack(error)) = &frame.message else {
            panic!("{frame:?}");
        };
        assert_eq!(error.code, ErrorCode::Unavailable);
        assert!(error.is_retryable());
        assert_eq!(error.retry_after(), Some(ms(250)));
        assert!(wire.get("job_id").is_none());
        assert_eq!(mock.executions("echo"), 0);
        // The key was not bound: the retry executes.
        client.submit("echo", json!(1), Some("k")).await;
        let (accepted, _) = client.recv_type("job.accepted").await;
        client.until_terminal(accepted.job_id().unwrap()).await;
        assert_eq!(mock.executions("echo"), 1);
    }
}

#[tokio::test]
async fn black_hole_stops_answering_and_pinging_without_closing() {
    let mock = builder(Dialect::V1_1)
        .heartbeat(ms(100))
        .start()
        .await
        .unwrap();
    let mut client = connected(&mock).await;
    mock.inject(Fault::BlackHole);
    client.submit("echo", json!(1), None).await;
    client.ping("lost").await;
    // Longer than the heartbeat-loss timeout: no ping, no close, no answer.
    client.expect_silence(ms(400)).await;
    assert_eq!(
        mock.executions("echo"),
        0,
        "inbound frames are not processed"
    );
    assert_eq!(mock.live_connections(), 1);
    assert_eq!(
        mock.received().len(),
        3,
        "hello, submit and ping were received"
    );
    mock.inject(Fault::Recover);
    client.ping("back").await;
    let (pong, _) = client.recv_type("session.pong").await;
    let Message::Pong(pong) = pong.message else {
        unreachable!()
    };
    assert_eq!(pong.ping_nonce, "back");
}

#[tokio::test]
async fn the_silence_of_a_black_hole_does_not_count_as_heartbeat_loss() {
    let mock = builder(Dialect::V1_1)
        .heartbeat(ms(100))
        .start()
        .await
        .unwrap();
    let mut client = connected(&mock).await;
    mock.inject(Fault::BlackHole);
    client.expect_silence(ms(400)).await;
    mock.inject(Fault::Recover);
    // Long enough for the heartbeat watch to look again: the connection
    // must still be there, with a fresh two intervals.
    tokio::time::sleep(ms(60)).await;
    client.ping("back").await;
    let (pong, _) = client.recv_type("session.pong").await;
    let Message::Pong(pong) = pong.message else {
        unreachable!()
    };
    assert_eq!(pong.ping_nonce, "back");
}

#[tokio::test]
async fn one_shot_faults_are_fifo() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    mock.inject(Fault::DropOnSubmit);
    mock.inject(Fault::RejectNextSubmit {
        code: ErrorCode::ResourceExhausted,
        retry_after: None,
    });
    let mut client = connected(&mock).await;
    client.submit("echo", json!(1), None).await;
    client.expect_drop().await;
    let mut client = connected(&mock).await;
    client.submit("echo", json!(1), None).await;
    let (frame, wire) = client.recv().await;
    assert_eq!(error_code(&frame), "RESOURCE_EXHAUSTED");
    assert!(wire["payload"].get("details").is_none());
    client.submit("echo", json!(1), None).await;
    client.recv_type("job.result").await;
}

#[tokio::test]
async fn kill_connections_drops_every_socket_and_counts() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    let mut a = connected(&mock).await;
    let mut b = connected(&mock).await;
    assert_eq!((mock.connections(), mock.live_connections()), (2, 2));
    mock.kill_connections();
    a.expect_drop().await;
    b.expect_drop().await;
    tokio::time::sleep(ms(20)).await;
    assert_eq!((mock.connections(), mock.live_connections()), (2, 0));
}

#[tokio::test]
async fn received_shows_every_attempt() {
    // The assertion a retrying client's test makes: same key, byte-identical
    // payload, fresh envelope id on every attempt.
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    mock.inject(Fault::DropOnSubmit);
    let frame = invoke("echo", json!({"order": 4812}), Some("refund-1"));
    for _ in 0..2 {
        let mut client = connected(&mock).await;
        let mut attempt = frame.clone();
        attempt.envelope.id = arcp_types::new_message_id();
        client.submit_frame(attempt).await;
        client.next().await; // the drop, then job.accepted
    }
    let submits: Vec<_> = mock
        .received()
        .into_iter()
        .filter(|e| e.kind == "job.submit")
        .collect();
    assert_eq!(submits.len(), 2);
    assert_eq!(submits[0].payload, submits[1].payload);
    assert_eq!(submits[0].payload["idempotency_key"], "refund-1");
    assert_ne!(submits[0].id, submits[1].id);
    assert_eq!(mock.executions_for_key("refund-1"), 1);
}

#[tokio::test]
async fn dropping_the_mock_closes_everything() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    let url = mock.ws_url();
    let mut client = connected(&mock).await;
    client.submit("slow", json!({"ms": 10_000}), None).await;
    client.recv_type("job.accepted").await;
    drop(mock);
    client.expect_drop().await;
    assert!(tokio_tungstenite::connect_async(&url).await.is_err());
}
