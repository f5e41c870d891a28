//! Every replay policy and conflict signal, after completion and while the
//! original still runs, and the intent fingerprints of both runtime families.

mod common;

use arcp_mock::{ConflictSignal, MockRuntime, MockRuntimeBuilder, ReplayPolicy};
use arcp_types::{Dialect, Message};
use common::*;
use serde_json::json;

async fn start(builder: MockRuntimeBuilder) -> MockRuntime {
    builder
        .token("alice-token", "alice")
        .token("bob-token", "bob")
        .start()
        .await
        .unwrap()
}

async fn session(mock: &MockRuntime, token: &str) -> Client {
    let mut client = Client::connect(mock).await;
    client.handshake(token).await;
    client
}

/// Submits, waits for the terminal; returns the job id.
async fn run_to_end(client: &mut Client, tool: &str, args: serde_json::Value, key: &str) -> String {
    client.submit(tool, args, Some(key)).await;
    let (accepted, _) = client.recv_type("job.accepted").await;
    let job_id = accepted.job_id().unwrap().to_owned();
    client.until_terminal(&job_id).await;
    job_id
}

#[tokio::test]
async fn terminal_replay_while_running_sends_accepted_only_forever() {
    // Python S3: a duplicate from another session while the job runs.
    let mock = start(builder(Dialect::V1_1)).await;
    let mut a = session(&mock, "alice-token").await;
    let mut b = session(&mock, "alice-token").await;
    a.submit("slow", json!({"ms": 300}), Some("k2")).await;
    let (accepted, _) = a.recv_type("job.accepted").await;
    let job_id = accepted.job_id().unwrap().to_owned();
    b.submit("slow", json!({"ms": 300}), Some("k2")).await;
    let (dup, _) = b.recv().await;
    assert_eq!(dup.job_id(), Some(job_id.as_str()));
    a.until_terminal(&job_id).await;
    // The duplicate never gets the terminal, even after the job ended.
    b.expect_silence(ms(200)).await;
    assert_eq!(mock.executions("slow"), 1);
    assert_eq!(mock.executions_for_key("k2"), 1);
}

#[tokio::test]
async fn terminal_replay_replays_stored_errors() {
    let mock = start(builder(Dialect::V1_1)).await;
    let mut client = session(&mock, "alice-token").await;
    run_to_end(
        &mut client,
        "fail",
        json!({"code": "PERMISSION_DENIED"}),
        "kf",
    )
    .await;
    let retry = client
        .submit("fail", json!({"code": "PERMISSION_DENIED"}), Some("kf"))
        .await;
    let (accepted, _) = client.recv().await;
    assert_eq!(accepted.request_id(), Some(retry.as_str()));
    let (error, wire) = client.recv().await;
    assert_eq!(error_code(&error), "PERMISSION_DENIED");
    assert_eq!(wire["payload"]["final_status"], "error");
    assert_eq!(mock.executions("fail"), 1);
}

#[tokio::test]
async fn accepted_only_never_sends_the_terminal() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = start(builder(dialect).replay_policy(ReplayPolicy::AcceptedOnly)).await;
        let mut client = session(&mock, "alice-token").await;
        let job_id = run_to_end(&mut client, "echo", json!({"x": 1}), "k").await;
        let mut other = session(&mock, "alice-token").await;
        let retry = other.submit("echo", json!({"x": 1}), Some("k")).await;
        let (accepted, _) = other.recv().await;
        assert!(
            matches!(accepted.message, Message::Accepted(_)),
            "{dialect}"
        );
        assert_eq!(accepted.job_id(), Some(job_id.as_str()));
        assert_eq!(accepted.request_id(), Some(retry.as_str()));
        other.expect_silence(ms(150)).await;
        assert_eq!(mock.executions("echo"), 1);
    }
}

#[tokio::test]
async fn legacy_defaults_to_accepted_only_for_an_in_flight_duplicate() {
    // Rust s03: a second connection resubmits while the job runs.
    let mock = start(builder(Dialect::Legacy)).await;
    let mut a = session(&mock, "alice-token").await;
    let mut b = session(&mock, "alice-token").await;
    a.submit("slow", json!({"ms": 200}), Some("key-counter-1"))
        .await;
    let (accepted, _) = a.recv_type("job.accepted").await;
    b.submit("slow", json!({"ms": 200}), Some("key-counter-1"))
        .await;
    let (dup, wire) = b.recv().await;
    assert_eq!(dup.job_id(), accepted.job_id());
    assert_eq!(wire["idempotency_key"], "key-counter-1");
    a.until_terminal(accepted.job_id().unwrap()).await;
    b.expect_silence(ms(150)).await;
    assert_eq!(mock.executions("slow"), 1);
}

#[tokio::test]
async fn legacy_terminal_replay_sends_accepted_and_completed() {
    let mock = start(builder(Dialect::Legacy).replay_policy(ReplayPolicy::TerminalReplay)).await;
    let mut client = session(&mock, "alice-token").await;
    let job_id = run_to_end(&mut client, "echo", json!({"x": 1}), "k").await;
    let retry = client.submit("echo", json!({"x": 1}), Some("k")).await;
    let (accepted, _) = client.recv().await;
    let (completed, wire) = client.recv().await;
    assert!(matches!(accepted.message, Message::Accepted(_)));
    assert_eq!(wire["type"], "job.completed");
    assert_eq!(wire["payload"]["value"], json!({"x": 1}));
    assert_eq!(wire["job_id"], job_id.as_str());
    assert_eq!(completed.request_id(), Some(retry.as_str()));
}

#[tokio::test]
async fn terminal_only_resends_the_terminal_even_for_in_flight_duplicates() {
    let mock = start(builder(Dialect::Legacy).replay_policy(ReplayPolicy::TerminalOnly)).await;
    let mut client = session(&mock, "alice-token").await;
    // After completion: the terminal only, correlated to the retry.
    run_to_end(&mut client, "echo", json!(1), "done").await;
    let retry = client.submit("echo", json!(1), Some("done")).await;
    let (frame, wire) = client.recv().await;
    assert_eq!(wire["type"], "job.completed");
    assert_eq!(frame.request_id(), Some(retry.as_str()));

    // While running: the duplicate gets the terminal when the job ends.
    let mut other = session(&mock, "alice-token").await;
    client
        .submit("slow", json!({"ms": 200}), Some("running"))
        .await;
    let (accepted, _) = client.recv_type("job.accepted").await;
    let dup = other
        .submit("slow", json!({"ms": 200}), Some("running"))
        .await;
    let (frame, wire) = other.recv().await;
    assert_eq!(wire["type"], "job.completed");
    assert_eq!(frame.request_id(), Some(dup.as_str()));
    assert_eq!(frame.job_id(), accepted.job_id());
    assert_eq!(mock.executions("slow"), 1);
}

#[tokio::test]
async fn ack_replay_acknowledges_with_replay_flag() {
    let mock = start(builder(Dialect::Legacy).replay_policy(ReplayPolicy::AckReplay)).await;
    let mut client = session(&mock, "alice-token").await;
    client.submit("slow", json!({"ms": 200}), Some("k")).await;
    let (accepted, _) = client.recv_type("job.accepted").await;
    let retry = client.submit("slow", json!({"ms": 200}), Some("k")).await;
    let (ack, wire) = client.recv_type("ack").await;
    assert_eq!(wire["payload"]["replay"], true);
    assert_eq!(ack.request_id(), Some(retry.as_str()));
    assert_eq!(ack.job_id(), accepted.job_id());
    assert_eq!(mock.executions("slow"), 1);
}

#[tokio::test]
async fn conflict_signals() {
    // v1.1 JobError: job.error DUPLICATE_KEY naming the request.
    let mock = start(builder(Dialect::V1_1).conflict_signal(ConflictSignal::JobError)).await;
    let mut client = session(&mock, "alice-token").await;
    run_to_end(&mut client, "echo", json!(1), "k").await;
    let request = client.submit("echo", json!(2), Some("k")).await;
    let (frame, wire) = client.recv().await;
    assert_eq!(wire["type"], "job.error");
    assert_eq!(error_code(&frame), "DUPLICATE_KEY");
    assert_eq!(wire["payload"]["request_id"], request.as_str());
    assert_eq!(wire["payload"]["retryable"], false);

    // v1.1 default: session.error with no request id.
    let mock = start(builder(Dialect::V1_1)).await;
    let mut client = session(&mock, "alice-token").await;
    run_to_end(&mut client, "echo", json!(1), "k").await;
    client.submit("echo", json!(2), Some("k")).await;
    let (frame, wire) = client.recv().await;
    assert_eq!(wire["type"], "session.error");
    assert_eq!(error_code(&frame), "DUPLICATE_KEY");
    assert_eq!(frame.request_id(), None);

    // Legacy DuplicateKeyFailed: job.failed DUPLICATE_KEY, no job_id.
    let mock =
        start(builder(Dialect::Legacy).conflict_signal(ConflictSignal::DuplicateKeyFailed)).await;
    let mut client = session(&mock, "alice-token").await;
    run_to_end(&mut client, "echo", json!(1), "k").await;
    let request = client.submit("echo", json!(2), Some("k")).await;
    let (frame, wire) = client.recv().await;
    assert_eq!(wire["type"], "job.failed");
    assert_eq!(error_code(&frame), "DUPLICATE_KEY");
    assert_eq!(wire["correlation_id"], request.as_str());
    assert_eq!(wire["idempotency_key"], "k");
    assert!(wire.get("job_id").is_none());
}

#[tokio::test]
async fn v1_1_fingerprint_is_the_whole_payload_compared_like_python() {
    let mock = start(builder(Dialect::V1_1)).await;
    let mut client = session(&mock, "alice-token").await;
    run_to_end(&mut client, "echo", json!({"tag": "a", "n": 1}), "k1").await;

    // Same dict, other key order and 1.0 for 1: the same intent (replay).
    client
        .submit("echo", json!({"n": 1.0, "tag": "a"}), Some("k1"))
        .await;
    let (frame, _) = client.recv().await;
    assert!(matches!(frame.message, Message::Accepted(_)));
    let (frame, _) = client.recv().await;
    assert!(matches!(frame.message, Message::Result(_)));

    // `lease_request: {}` present vs absent: a different intent.
    let mut with_lease = invoke("echo", json!({"tag": "a", "n": 1}), Some("k1"));
    if let Message::Invoke(i) = &mut with_lease.message {
        i.extra.insert("lease_request".into(), json!({}));
    }
    client.submit_frame(with_lease).await;
    let (frame, _) = client.recv().await;
    assert_eq!(error_code(&frame), "DUPLICATE_KEY");
    assert_eq!(mock.executions("echo"), 1);
}

#[tokio::test]
async fn legacy_fingerprint_is_tool_and_serialized_arguments() {
    let mock = start(builder(Dialect::Legacy)).await;
    let mut client = session(&mock, "alice-token").await;
    run_to_end(
        &mut client,
        "echo",
        json!({"msg": "hi", "n": 1}),
        "key-echo-1",
    )
    .await;

    // Other key order: same serialization (sorted keys), accepted-only replay.
    client
        .submit("echo", json!({"n": 1, "msg": "hi"}), Some("key-echo-1"))
        .await;
    let (frame, _) = client.recv().await;
    assert!(matches!(frame.message, Message::Accepted(_)));
    // 1.0 is not 1; another tool is another intent.
    for (tool, args) in [
        ("echo", json!({"msg": "hi", "n": 1.0})),
        ("slow", json!({"msg": "hi", "n": 1})),
    ] {
        client.submit(tool, args, Some("key-echo-1")).await;
        let (frame, _) = client.recv().await;
        assert_eq!(error_code(&frame), "FAILED_PRECONDITION");
    }
    assert_eq!(mock.total_executions(), 1);
}

#[tokio::test]
async fn keys_are_scoped_by_principal_and_keyless_submits_always_execute() {
    let mock = start(builder(Dialect::V1_1)).await;
    let mut alice = session(&mock, "alice-token").await;
    let mut bob = session(&mock, "bob-token").await;
    let a = run_to_end(&mut alice, "echo", json!(1), "shared").await;
    let b = run_to_end(&mut bob, "echo", json!(1), "shared").await;
    assert_ne!(a, b);
    assert_eq!(mock.executions_for_key("shared"), 2);

    for _ in 0..2 {
        alice.submit("echo", json!(1), None).await;
        let (accepted, _) = alice.recv_type("job.accepted").await;
        alice.until_terminal(accepted.job_id().unwrap()).await;
    }
    assert_eq!(mock.executions("echo"), 4);
    assert_eq!(mock.total_executions(), 4);
}

#[tokio::test]
async fn legacy_unknown_tool_fails_without_binding_the_key() {
    let mock = start(builder(Dialect::Legacy)).await;
    let mut client = session(&mock, "alice-token").await;
    let mut job_ids = Vec::new();
    for _ in 0..2 {
        client
            .submit("no-such-tool", json!({}), Some("key-unknown-1"))
            .await;
        let (accepted, _) = client.recv().await;
        let (failed, _) = client.recv().await;
        assert_eq!(error_code(&failed), "NOT_FOUND");
        job_ids.push(accepted.job_id().unwrap().to_owned());
    }
    assert_ne!(
        job_ids[0], job_ids[1],
        "a fresh job each time, as Rust 2.0.0"
    );
    assert_eq!(mock.total_executions(), 0);
}
