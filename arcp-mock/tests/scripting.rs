//! The wiremock-grade controls: faults scoped to a tool or a key, named,
//! ranged and scoped expectations, tools added after start, `reset`, and a
//! tool that drops its own connection. Ground truth is the mock's own
//! execution counts and job records.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arcp_mock::{Expectation, Fault, FaultScope, JobStatus, MockRuntime};
use arcp_types::{Dialect, Message};
use common::*;
use serde_json::{json, Value};

async fn connected(mock: &MockRuntime) -> Client {
    let mut client = Client::connect(mock).await;
    client.handshake("t").await;
    client
}

/// Reads frames until a job terminal; returns it.
async fn terminal(client: &mut Client) -> (arcp_types::Frame, Value) {
    loop {
        let (frame, value) = client.recv().await;
        if is_terminal(&frame) {
            return (frame, value);
        }
    }
}

/// One call on a fresh connection, to its terminal.
async fn call(mock: &MockRuntime, tool: &str, args: Value, key: Option<&str>) -> Value {
    let mut client = connected(mock).await;
    client.submit(tool, args, key).await;
    terminal(&mut client).await.1
}

// ------------------------------------------------------------ scoped faults

#[tokio::test]
async fn a_fault_scoped_to_a_tool_spares_the_other_tools() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = builder(dialect).start().await.unwrap();
        mock.inject_for(FaultScope::tool("echo"), Fault::DropOnSubmit)
            .unwrap();
        // Another tool passes, and does not consume the fault.
        call(&mock, "slow", json!({"ms": 1}), Some("s")).await;
        assert_eq!(mock.executions("slow"), 1, "{dialect}");
        let mut client = connected(&mock).await;
        client.submit("echo", json!(1), Some("e")).await;
        assert!(client.expect_drop().await.is_empty(), "{dialect}");
        assert_eq!(mock.executions("echo"), 0, "{dialect}");
        // One-shot: the retry runs.
        call(&mock, "echo", json!(1), Some("e")).await;
        assert_eq!(mock.executions_for_key("e"), 1, "{dialect}");
    }
}

#[tokio::test]
async fn a_standing_fault_scoped_to_a_key_hits_every_call_with_that_key_only() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    mock.inject_always_for(FaultScope::key("k2"), Fault::DropAfterAccepted)
        .unwrap();
    call(&mock, "echo", json!(1), Some("k1")).await;
    for _ in 0..2 {
        let mut client = connected(&mock).await;
        client.submit("echo", json!(2), Some("k2")).await;
        let seen = client.expect_drop().await;
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0]["type"], "job.accepted");
    }
    call(&mock, "echo", json!(3), None).await;
    // The dropped calls still ran, once: the second was a replay.
    assert_eq!(mock.executions_for_key("k1"), 1);
    assert_eq!(mock.executions_for_key("k2"), 1);
    assert_eq!(mock.total_executions(), 3);
}

#[tokio::test]
async fn a_lost_terminal_scoped_to_a_tool_loses_only_that_tools_answer() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    mock.inject_for(FaultScope::tool("slow"), Fault::DropBeforeTerminal)
        .unwrap();
    call(&mock, "echo", json!(1), Some("e")).await;
    let mut client = connected(&mock).await;
    client.submit("slow", json!({"ms": 1}), Some("s")).await;
    let seen = client.expect_drop().await;
    assert!(
        seen.iter().all(|v| v["type"] != "job.result"),
        "the result was lost: {seen:?}"
    );
    let slow = mock.jobs().into_iter().find(|j| j.tool == "slow").unwrap();
    assert_eq!(slow.status, JobStatus::Completed);
    assert!(!slow.terminal_delivered);
    assert_eq!(mock.executions("slow"), 1);
}

#[tokio::test]
async fn faults_of_a_connection_cannot_be_scoped() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    for fault in [
        Fault::DelayReplies(ms(5_000)),
        Fault::DropAfterFrames(0),
        Fault::DropDuringHandshake,
        Fault::BlackHole,
    ] {
        let error = mock
            .inject_for(FaultScope::tool("echo"), fault.clone())
            .unwrap_err();
        assert_eq!(error.fault(), &fault);
        assert!(
            error
                .to_string()
                .contains("cannot be scoped to tool `echo`"),
            "{error}"
        );
        assert!(mock.inject_always_for(FaultScope::key("k"), fault).is_err());
    }
    // Nothing was injected: a call goes through at once.
    let started = std::time::Instant::now();
    call(&mock, "echo", json!(1), Some("k")).await;
    assert!(started.elapsed() < ms(2_000));
}

// ------------------------------------------------------------- expectations

#[tokio::test]
async fn named_ranged_expectations_are_met_and_reported_by_name() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    mock.expect(
        Expectation::tool("echo")
            .times(1..=2)
            .named("echo once or twice"),
    );
    mock.expect(Expectation::key("a").times(..2).named("key a at most once"));
    mock.expect(Expectation::total().times(3..));
    call(&mock, "echo", json!(1), Some("a")).await;
    call(&mock, "echo", json!(1), Some("b")).await;
    call(&mock, "slow", json!({"ms": 1}), Some("c")).await;
    mock.verify();

    call(&mock, "echo", json!(2), None).await;
    let error = mock.try_verify().unwrap_err();
    assert_eq!(
        error.to_string(),
        "arcp-mock: 1 of 3 expectations not met:\n  \
         - `echo once or twice` (tool `echo`): expected between 1 and 2 executions, got 3"
    );
    std::mem::forget(mock);
}

#[tokio::test]
async fn a_scoped_expectation_counts_only_while_its_guard_lives() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    call(&mock, "echo", json!(1), None).await;
    {
        let guard = mock.expect_scoped(Expectation::tool("echo").times(1).named("phase two"));
        assert_eq!(guard.executions(), 0);
        call(&mock, "echo", json!(2), None).await;
        assert_eq!(guard.executions(), 1);
        guard.try_verify().unwrap();
        // While it lives, the runtime checks it too.
        mock.verify();
    }
    // Dropped: checked and unregistered, so later calls do not count.
    call(&mock, "echo", json!(3), None).await;
    mock.verify();
    assert_eq!(mock.executions("echo"), 3);
}

#[tokio::test]
#[should_panic(expected = "`phase two` (tool `echo`): expected 1 execution, got 0")]
async fn an_unmet_scoped_expectation_panics_when_its_guard_drops() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    call(&mock, "echo", json!(1), None).await;
    let guard = mock.expect_scoped(Expectation::tool("echo").times(1).named("phase two"));
    drop(guard);
}

// -------------------------------------------------------------- late tools

#[tokio::test]
async fn a_tool_added_after_start_is_found_by_later_calls() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    let mut client = connected(&mock).await;
    client.submit("late", json!(1), Some("l")).await;
    let (frame, _) = client.recv().await;
    assert!(
        matches!(frame.message, Message::SessionError(_)),
        "unknown before it is added: {frame:?}"
    );
    mock.add_tool(
        "late",
        |args, _ctx| async move { Ok(json!({"late": args})) },
    );
    client.submit("late", json!(1), Some("l")).await;
    let (_, result) = terminal(&mut client).await;
    assert_eq!(result["payload"]["result"], json!({"late": 1}), "{result}");
    assert_eq!(mock.executions("late"), 1);
    // A later session's welcome lists it.
    let mut other = Client::connect(&mock).await;
    let (_, welcome) = other.handshake("t").await;
    assert!(welcome.to_string().contains("\"late\""), "{welcome}");
}

#[tokio::test]
async fn adding_a_tool_under_a_taken_name_replaces_it() {
    let mock = builder(Dialect::Legacy).start().await.unwrap();
    mock.add_tool("echo", |_args, _ctx| async move { Ok(json!("replaced")) });
    let (frame, _) = {
        let mut client = connected(&mock).await;
        client.submit("echo", json!(1), None).await;
        terminal(&mut client).await
    };
    match frame.message {
        Message::Result(r) => assert_eq!(r.result, Some(json!("replaced"))),
        other => panic!("expected a result, got {other:?}"),
    }
}

// -------------------------------------------------------------------- reset

#[tokio::test]
async fn reset_starts_the_test_over_but_keeps_the_keys_bound() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    call(&mock, "echo", json!(1), Some("k")).await;
    mock.expect_executions("echo", 5);
    let _guard = mock.expect_scoped(Expectation::total().times(7));
    mock.inject_always(Fault::DropOnSubmit);
    mock.inject(Fault::BlackHole);

    mock.reset();

    assert_eq!(mock.executions("echo"), 0);
    assert_eq!(mock.executions_for_key("k"), 0);
    assert_eq!(mock.total_executions(), 0);
    assert!(mock.executions_by_key().is_empty());
    assert!(mock.received().is_empty());
    mock.verify(); // the expectations are gone
                   // The faults and the black hole are gone: the retry of the old key is
                   // answered (replayed, not run), a new key runs.
    let replayed = call(&mock, "echo", json!(1), Some("k")).await;
    assert_eq!(replayed["payload"]["result"], json!(1), "{replayed}");
    assert_eq!(mock.executions("echo"), 0);
    call(&mock, "echo", json!(2), Some("n")).await;
    assert_eq!(mock.executions("echo"), 1);
    // The jobs stay: the history is the runtime's.
    let jobs = mock.jobs();
    assert_eq!(jobs.len(), 2);
    assert!(jobs.iter().all(|j| j.executions == 1));
}

// ------------------------------------------------------ a tool that drops

/// A refund that records its side effect, then loses its connection.
fn losing_refund(dialect: Dialect, side_effects: Arc<AtomicU64>) -> arcp_mock::MockRuntimeBuilder {
    MockRuntime::builder()
        .dialect(dialect)
        .tool("refund", move |args, ctx| {
            let side_effects = Arc::clone(&side_effects);
            async move {
                side_effects.fetch_add(1, Ordering::SeqCst);
                ctx.drop_connection().await;
                Ok(json!({"refunded": args["order"]}))
            }
        })
}

#[tokio::test]
async fn a_tool_that_drops_its_connection_loses_its_answer_after_the_side_effect() {
    let side_effects = Arc::new(AtomicU64::new(0));
    let mock = losing_refund(Dialect::V1_1, Arc::clone(&side_effects))
        .start()
        .await
        .unwrap();
    let mut client = connected(&mock).await;
    client
        .submit("refund", json!({"order": 7}), Some("r"))
        .await;
    let seen = client.expect_drop().await;
    assert!(
        seen.iter().all(|v| v["type"] != "job.result"),
        "no answer before the drop: {seen:?}"
    );
    assert_eq!(side_effects.load(Ordering::SeqCst), 1);
    // The retry with the same key gets the stored result; nothing ran again.
    let mut retried = None;
    for _ in 0..20 {
        let answer = call(&mock, "refund", json!({"order": 7}), Some("r")).await;
        if answer["type"] == "job.result" {
            retried = Some(answer);
            break;
        }
        tokio::time::sleep(ms(20)).await;
    }
    let retried = retried.expect("the retry got the result");
    assert_eq!(retried["payload"]["result"], json!({"refunded": 7}));
    assert_eq!(side_effects.load(Ordering::SeqCst), 1);
    assert_eq!(mock.executions_for_key("r"), 1);
    let job = &mock.jobs()[0];
    assert_eq!(job.status, JobStatus::Completed);
    assert!(job.terminal_delivered, "delivered by the replay");
}

#[tokio::test]
async fn a_legacy_tool_that_drops_its_connection_never_delivers_its_terminal() {
    let side_effects = Arc::new(AtomicU64::new(0));
    let mock = losing_refund(Dialect::Legacy, Arc::clone(&side_effects))
        .start()
        .await
        .unwrap();
    let mut client = connected(&mock).await;
    client
        .submit("refund", json!({"order": 7}), Some("r"))
        .await;
    let seen = client.expect_drop().await;
    assert!(
        seen.iter().all(|v| v["type"] != "job.completed"),
        "{seen:?}"
    );
    tokio::time::sleep(ms(50)).await;
    let job = &mock.jobs()[0];
    assert_eq!(job.status, JobStatus::Completed);
    assert!(!job.terminal_delivered);
    assert_eq!(side_effects.load(Ordering::SeqCst), 1);
    assert_eq!(mock.executions("refund"), 1);
}

#[tokio::test]
async fn over_http_a_tool_that_drops_its_connection_ends_the_response_without_its_answer() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn post(mock: &MockRuntime, body: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(mock.http_address())
            .await
            .unwrap();
        let request = format!(
            "POST /arcp HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        let _ = tokio::time::timeout(WAIT, stream.read_to_end(&mut response)).await;
        String::from_utf8_lossy(&response).into_owned()
    }

    let side_effects = Arc::new(AtomicU64::new(0));
    let mock = losing_refund(Dialect::V1_1, Arc::clone(&side_effects))
        .start()
        .await
        .unwrap();
    let body = Dialect::V1_1.encode(&invoke("refund", json!({"order": 9}), Some("h")));
    let first = post(&mock, &body).await;
    assert!(!first.contains("refunded"), "the answer was lost: {first}");
    assert_eq!(side_effects.load(Ordering::SeqCst), 1);
    // The retry (same key, same body) gets the stored result replayed.
    let mut replayed = String::new();
    for _ in 0..20 {
        replayed = post(&mock, &body).await;
        if replayed.contains("refunded") {
            break;
        }
        tokio::time::sleep(ms(20)).await;
    }
    assert!(replayed.contains("Arcp-Replayed: true"), "{replayed}");
    assert!(replayed.contains("\"refunded\":9"), "{replayed}");
    assert_eq!(side_effects.load(Ordering::SeqCst), 1);
    assert_eq!(mock.executions_for_key("h"), 1);
}
