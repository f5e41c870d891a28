//! One test per row of the replay matrix (`docs/architecture.md`): what the
//! client makes of each answer a runtime gives to a retried request. Each
//! asserts the outcome and the tool's execution count.

mod support;

use std::time::Duration;

use arcp_mock::{ConflictSignal, Dialect, ErrorCode, Fault, MockRuntime, Preset, ReplayPolicy};
use arcp_sdk::{Error, IdempotencyKey};
use serde_json::{json, Value};
use support::mock::{client, mock, submits};

/// Completes `tool(args)` under `key` in one client, then re-sends it from a
/// fresh client (a restarted process: no outcome cache) and returns that
/// second outcome.
async fn resend_after_completion(
    mock: &MockRuntime,
    dialect: Dialect,
    tool: &str,
    args: Value,
    key: &IdempotencyKey,
) -> Result<arcp_sdk::ToolOutput, Error> {
    let first = client(&mock.ws_url(), dialect).connect().await.unwrap();
    let _ = first
        .invoke_tool(tool, args.clone())
        .idempotency_key(key.clone())
        .send()
        .await;
    let second = client(&mock.ws_url(), dialect).connect().await.unwrap();
    second
        .invoke_tool(tool, args)
        .idempotency_key(key.clone())
        .send()
        .await
}

#[tokio::test]
async fn replayed_terminal_result_v1_1() {
    let mock = mock(Dialect::V1_1)
        .replay_policy(ReplayPolicy::TerminalReplay)
        .start()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let out = resend_after_completion(&mock, Dialect::V1_1, "refund", json!({"order": 1}), &key)
        .await
        .unwrap();
    assert!(out.replayed);
    assert_eq!(out.value, json!({"refunded": 1}));
    assert_eq!(mock.executions("refund"), 1);
}

#[tokio::test]
async fn replayed_terminal_result_legacy_tool_result() {
    let mock = mock(Dialect::Legacy)
        .replay_policy(ReplayPolicy::TerminalOnly)
        .start()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let out = resend_after_completion(&mock, Dialect::Legacy, "refund", json!({"order": 2}), &key)
        .await
        .unwrap();
    assert_eq!(out.value, json!({"refunded": 2}));
    // A result with no acceptance first may be a stored one, or a fresh
    // execution whose acceptance was lost: not called a replay unless the
    // runtime marks it or names the job the key was bound to.
    assert!(!out.replayed, "{out:?}");
    assert_eq!(mock.executions("refund"), 1);
}

#[tokio::test]
async fn replayed_terminal_error_is_a_tool_error_marked_replayed() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let key = IdempotencyKey::new();
    let err = resend_after_completion(
        &mock,
        Dialect::V1_1,
        "fail",
        json!({"code": "PERMISSION_DENIED"}),
        &key,
    )
    .await
    .unwrap_err();
    match err {
        Error::Tool(e) => {
            assert_eq!(e.code, ErrorCode::PermissionDenied);
            assert!(e.replayed, "{e:?}");
        }
        other => panic!("expected a replayed tool error, got {other:?}"),
    }
    assert_eq!(mock.executions("fail"), 1);
}

/// Every conflict signal any runtime family uses is `DuplicateKey`, never retried.
async fn duplicate_key(dialect: Dialect, signal: ConflictSignal) {
    let mock = mock(dialect).conflict_signal(signal).start().await.unwrap();
    let key = IdempotencyKey::new();
    let first = client(&mock.ws_url(), dialect).connect().await.unwrap();
    first
        .invoke_tool("refund", json!({"order": 1}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    let second = client(&mock.ws_url(), dialect).connect().await.unwrap();
    let before = submits(&mock).len();
    let err = second
        .invoke_tool("refund", json!({"order": 2}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::DuplicateKey { key: k, .. } if *k == key),
        "{signal:?}: {err:?}"
    );
    assert_eq!(submits(&mock).len(), before + 1, "never retried");
    assert_eq!(mock.executions("refund"), 1);
}

#[tokio::test]
async fn duplicate_key_from_session_error_without_request_id() {
    duplicate_key(Dialect::V1_1, ConflictSignal::SessionError).await;
}

#[tokio::test]
async fn duplicate_key_from_job_error() {
    duplicate_key(Dialect::V1_1, ConflictSignal::JobError).await;
}

#[tokio::test]
async fn duplicate_key_from_legacy_failed_precondition() {
    duplicate_key(Dialect::Legacy, ConflictSignal::FailedPrecondition).await;
}

#[tokio::test]
async fn duplicate_key_from_job_failed() {
    duplicate_key(Dialect::Legacy, ConflictSignal::DuplicateKeyFailed).await;
}

#[tokio::test]
async fn duplicate_key_from_nack() {
    duplicate_key(Dialect::Legacy, ConflictSignal::Nack).await;
}

/// Accepted-only replay (Rust 2.0.0, TS, Go, Java): the ladder runs out and
/// names the original job; never a hang, never a second execution.
/// A runtime that replays only `job.accepted` and offers no `job.subscribe`
/// (the v1.1 TS/Go/Java family, the legacy Rust runtime): nothing can hand
/// the stored outcome to a second client, so it ends `OutcomeUnavailable`.
async fn accepted_only(dialect: Dialect, policy: ReplayPolicy) {
    let mock = mock(dialect)
        .replay_policy(policy)
        .subscribe(false)
        .start()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let first = client(&mock.ws_url(), dialect).connect().await.unwrap();
    let original = first
        .invoke_tool("refund", json!({"order": 3}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    let second = client(&mock.ws_url(), dialect).connect().await.unwrap();
    let started = std::time::Instant::now();
    let err = second
        .invoke_tool("refund", json!({"order": 3}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    match &err {
        Error::OutcomeUnavailable { key: k, job_id, .. } => {
            assert_eq!(*k, key);
            if policy != ReplayPolicy::AckReplay {
                assert_eq!(*job_id, original.job_id, "the original job is named");
            }
        }
        other => panic!("{policy:?}: expected OutcomeUnavailable, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "bounded by the retry budget"
    );
    assert!(
        submits(&mock).len() > 2,
        "the ladder re-sent with the same key"
    );
    assert_eq!(mock.executions("refund"), 1);
}

#[tokio::test]
async fn accepted_only_replay_legacy() {
    accepted_only(Dialect::Legacy, ReplayPolicy::AcceptedOnly).await;
}

#[tokio::test]
async fn accepted_only_replay_v1_1() {
    accepted_only(Dialect::V1_1, ReplayPolicy::AcceptedOnly).await;
}

/// The same accepted-only replay from a v1.1 runtime that offers
/// `job.subscribe` with history (as Python 1.1.3 does): the client
/// subscribes to the named job and gets its stored terminal.
#[tokio::test]
async fn accepted_only_replay_with_subscribe_v1_1() {
    let mock = mock(Dialect::V1_1)
        .replay_policy(ReplayPolicy::AcceptedOnly)
        .start()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let first = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let original = first
        .invoke_tool("refund", json!({"order": 3}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    let second = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let out = second
        .invoke_tool("refund", json!({"order": 3}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(out.value, original.value);
    assert_eq!(out.job_id, original.job_id, "the original job");
    assert!(
        out.replayed,
        "the acceptance named a job bound in another session"
    );
    assert_eq!(out.attempts, 1, "subscribing needed no re-send");
    assert!(
        mock.received().iter().any(|e| e.kind == "job.subscribe"),
        "the outcome came through job.subscribe"
    );
    assert_eq!(mock.executions("refund"), 1);
}

#[tokio::test]
async fn ack_with_replay_legacy() {
    accepted_only(Dialect::Legacy, ReplayPolicy::AckReplay).await;
}

/// Accepted-only while the job still runs, then the stored terminal once it
/// finished (the Python runtime): the ladder's re-send after backoff gets it.
/// The job is the call's own (accepted fresh on its first attempt): no
/// replay.
#[tokio::test]
async fn accepted_while_running_then_terminal_replay() {
    // Python 1.1.3's replay and resume (no live events after a resume),
    // without job.subscribe, so only a re-send can fetch the stored terminal.
    let mock = mock(Dialect::V1_1)
        .preset(Preset::Python113)
        .subscribe(false)
        .start()
        .await
        .unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    mock.inject(Fault::DropAfterAccepted);
    let out = client
        .invoke_tool("refund", json!({"order": 4, "steps": 2, "ms": 150}))
        .send()
        .await
        .unwrap();
    assert!(!out.replayed, "{out:?}");
    assert!(
        out.attempts >= 3,
        "re-sent at least once while the job still ran: {out:?}"
    );
    assert_eq!(out.value, json!({"refunded": 4}));
    assert_eq!(mock.executions("refund"), 1);
}

/// A repeated call with a finished key is answered from the client's outcome
/// cache, even against a runtime that replays only `job.accepted`.
#[tokio::test]
async fn outcome_cache_answers_a_repeated_key() {
    let mock = mock(Dialect::Legacy).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::Legacy)
        .connect()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let call = || {
        client
            .invoke_tool("refund", json!({"order": 5}))
            .idempotency_key(key.clone())
            .send()
    };
    let first = call().await.unwrap();
    let again = call().await.unwrap();
    assert!(!first.replayed && again.replayed);
    assert_eq!(again.value, first.value);
    assert_eq!(submits(&mock).len(), 1, "answered locally");
    let other = client
        .invoke_tool("refund", json!({"order": 6}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    assert!(matches!(other, Error::DuplicateKey { .. }), "{other:?}");
    assert_eq!(mock.executions("refund"), 1);
}

/// The cache keeps only the binding of a finished call under a generated
/// key: a repeat under that key (taken from the outcome) is answered by the
/// runtime, which replays the terminal (v1.1: a replay, though on the
/// session that ran the key the runtime does not mark it) or only the
/// acceptance (legacy: the outcome cannot be had, and the call may have
/// run). Either way the tool ran once.
#[tokio::test]
async fn a_generated_keys_repeat_is_answered_by_the_runtime() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = mock(dialect).start().await.unwrap();
        let client = client(&mock.ws_url(), dialect).connect().await.unwrap();
        let first = client
            .invoke_tool("refund", json!({"order": 5}))
            .send()
            .await
            .unwrap();
        let again = client
            .invoke_tool("refund", json!({"order": 5}))
            .idempotency_key(first.key.clone())
            .deadline(Duration::from_secs(3))
            .send()
            .await;
        // The runtime answered (legacy: after one confirming re-send).
        assert!(submits(&mock).len() >= 2, "{dialect:?}");
        if dialect == Dialect::V1_1 {
            let again = again.unwrap();
            assert!(!first.replayed && again.replayed, "{again:?}");
            assert_eq!(again.value, first.value);
        } else {
            let e = again.unwrap_err();
            assert_eq!(e.execution(), arcp_sdk::Execution::MayHaveRun, "{e:?}");
        }
        assert_eq!(mock.executions("refund"), 1, "{dialect:?}");
    }
}

/// Two calls with the same key at once in one client share one execution.
#[tokio::test]
async fn same_key_twice_in_flight_shares_one_outcome() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let a = client
        .invoke_tool("refund", json!({"order": 7, "ms": 100}))
        .idempotency_key(key.clone())
        .send();
    let b = client
        .invoke_tool("refund", json!({"order": 7, "ms": 100}))
        .idempotency_key(key.clone())
        .send();
    let (a, b) = tokio::join!(a, b);
    assert_eq!(a.unwrap().value, b.unwrap().value);
    assert_eq!(mock.executions("refund"), 1);
}

/// A `DuplicateKey` refusal is not the key's outcome: the same client can
/// still ask for the key's real call and gets its stored answer.
#[tokio::test]
async fn a_refused_intent_does_not_poison_the_key() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let key = IdempotencyKey::new();
    let a = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let b = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let call = |c: &arcp_sdk::Client, order: u64| {
        c.invoke_tool("refund", json!({"order": order}))
            .idempotency_key(key.clone())
            .send()
    };
    call(&a, 500).await.unwrap();
    assert!(matches!(
        call(&b, 5000).await,
        Err(Error::DuplicateKey { .. })
    ));
    let stored = call(&b, 500).await.unwrap();
    assert!(stored.replayed);
    assert_eq!(stored.value, json!({"refunded": 500}));
    assert_eq!(mock.executions("refund"), 1);
}

/// The call's first attempt was accepted as a fresh job; its connection
/// dropped and, with no subscription to re-attach, a re-send got the
/// runtime's stored acceptance of that same job, then its result. The
/// result is this call's own execution: not a replay.
#[tokio::test]
async fn a_re_sent_call_answered_with_its_own_fresh_job_is_not_a_replay() {
    let mock = mock(Dialect::V1_1)
        .preset(Preset::Python113)
        .subscribe(false)
        .start()
        .await
        .unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    mock.inject(Fault::DropAfterAccepted);
    let out = client
        .invoke_tool("refund", json!({"order": 9, "ms": 100}))
        .deadline(Duration::from_secs(8))
        .send()
        .await
        .unwrap();
    assert_eq!(mock.executions_for_key(out.key.as_str()), 1);
    assert_eq!(mock.jobs().len(), 1, "one job, the call's own");
    assert!(out.attempts >= 2, "{out:?}");
    assert!(!out.replayed, "{out:?}");
}
