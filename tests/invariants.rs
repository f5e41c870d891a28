//! One named test per invariant of `docs/architecture.md`, in both dialects,
//! against arcp-mock. Each asserts the tool's execution count as well as the
//! outcome.

mod support;

use std::time::{Duration, Instant};

use arcp_mock::{ConflictSignal, Dialect, ErrorCode, Fault};
use arcp_sdk::{CancelOutcome, Error, Execution, IdempotencyKey};
use serde_json::json;
use support::mock::{client, key_of, mock, submits};

// 1. One key per logical call, reused by every attempt; a fresh envelope id
//    per attempt; the intent re-sent byte-identical.
both_dialects! {
    async fn invariant_1_one_key_fresh_ids_identical_intent(dialect: Dialect) {
        let mock = mock(dialect).start().await.unwrap();
        let client = client(&mock.ws_url(), dialect).connect().await.unwrap();
        mock.inject(Fault::DropOnSubmit);
        mock.inject(Fault::DropOnSubmit);
        let out = client
            .invoke_tool("refund", json!({"order": 4812, "amount": 1.0}))
            .option("max_runtime_sec", json!(30))
            .send()
            .await
            .unwrap();
        assert_eq!(out.attempts, 3);
        let submits = submits(&mock);
        assert_eq!(submits.len(), 3);
        let key = out.key.to_string();
        let payload = serde_json::to_string(&submits[0].payload).unwrap();
        let mut ids = std::collections::HashSet::new();
        for s in &submits {
            assert_eq!(key_of(s).as_deref(), Some(key.as_str()), "same key on every attempt");
            assert_eq!(serde_json::to_string(&s.payload).unwrap(), payload, "identical intent");
            assert!(ids.insert(s.id.clone()), "a fresh envelope id per attempt");
            assert_eq!(s.trace_id.as_deref(), Some(out.trace_id.as_str()), "one trace id per call");
        }
        assert_eq!(mock.executions("refund"), 1);
    }
}

// 2. At most one attempt of a call in flight: a slow answer is waited for,
//    not raced by a second send.
both_dialects! {
    async fn invariant_2_one_attempt_in_flight(dialect: Dialect) {
        let mock = mock(dialect).start().await.unwrap();
        let client = client(&mock.ws_url(), dialect).connect().await.unwrap();
        mock.inject(Fault::DelayReplies(Duration::from_millis(400)));
        let call = tokio::spawn({
            let client = client.clone();
            async move { client.invoke_tool("refund", json!({"order": 1, "ms": 50})).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(submits(&mock).len(), 1, "no second send while the first is unanswered");
        let out = call.await.unwrap().unwrap();
        assert_eq!(out.attempts, 1);
        assert_eq!(submits(&mock).len(), 1);
        assert_eq!(mock.executions("refund"), 1);
    }
}

// 3. Silence is not success: a runtime that stops answering never yields Ok.
both_dialects! {
    async fn invariant_3_silence_is_not_success(dialect: Dialect) {
        let mock = mock(dialect).start().await.unwrap();
        let client = client(&mock.ws_url(), dialect).connect().await.unwrap();
        mock.inject(Fault::BlackHole);
        let started = Instant::now();
        let err = client
            .invoke_tool("refund", json!({"order": 2}))
            .deadline(Duration::from_millis(800))
            .send()
            .await
            .unwrap_err();
        assert!(matches!(err, Error::DeadlineExceeded { .. }), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(mock.executions("refund"), 0);
    }
}

// 4. An error meant for one call never fails another; an error naming no
//    request goes to the oldest request awaiting an answer.
both_dialects! {
    async fn invariant_4_errors_are_attributed_to_their_call(dialect: Dialect) {
        let signal = match dialect {
            Dialect::V1_1 => ConflictSignal::SessionError, // names no request
            _ => ConflictSignal::FailedPrecondition,
        };
        let mock = mock(dialect).conflict_signal(signal).start().await.unwrap();
        let key = IdempotencyKey::new();
        let first = client(&mock.ws_url(), dialect).connect().await.unwrap();
        first
            .invoke_tool("refund", json!({"order": 7}))
            .idempotency_key(key.clone())
            .send()
            .await
            .unwrap();
        // A second process: a conflicting call, then another call sent
        // while the refusal is still on its way (replies are held back), so
        // two requests await an answer when the refusal arrives.
        let second = client(&mock.ws_url(), dialect).connect().await.unwrap();
        mock.inject(Fault::DelayReplies(Duration::from_millis(150)));
        let conflict = tokio::spawn({
            let second = second.clone();
            let key = key.clone();
            async move {
                second
                    .invoke_tool("refund", json!({"order": 9}))
                    .idempotency_key(key)
                    .send()
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let other = tokio::spawn({
            let second = second.clone();
            async move { second.invoke_tool("refund", json!({"order": 8, "ms": 60})).await }
        });
        let conflict = conflict.await.unwrap();
        assert!(matches!(conflict, Err(Error::DuplicateKey { .. })), "{conflict:?}");
        let other = other.await.unwrap().unwrap();
        assert_eq!(other.value, json!({"refunded": 8}), "the other call is untouched");
        assert_eq!(mock.executions("refund"), 2);
    }
}

// 5. A terminal tool error is returned, not retried; a transient rejection
//    before acceptance is retried with the same key, honouring retry_after.
both_dialects! {
    async fn invariant_5_tool_errors_returned_rejections_retried(dialect: Dialect) {
        let mock = mock(dialect).start().await.unwrap();
        let client = client(&mock.ws_url(), dialect).connect().await.unwrap();
        let err = client
            .invoke_tool("fail", json!({"code": "UNAVAILABLE", "retryable": true}))
            .await
            .unwrap_err();
        match &err {
            Error::Tool(e) => {
                assert_eq!(e.code, ErrorCode::Unavailable);
                assert!(e.retryable, "retryability is reported");
                assert!(!e.replayed);
                assert_eq!(e.attempts, 1);
            }
            other => panic!("expected a tool error, got {other:?}"),
        }
        assert_eq!(mock.executions("fail"), 1, "a tool error is not retried");
        assert_eq!(submits(&mock).len(), 1);

        mock.inject(Fault::RejectNextSubmit {
            code: ErrorCode::Unavailable,
            retry_after: Some(Duration::from_millis(300)),
        });
        let started = Instant::now();
        let out = client.invoke_tool("refund", json!({"order": 3})).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(300), "retry_after is a floor");
        assert_eq!(out.attempts, 2);
        let all = submits(&mock);
        assert_eq!(key_of(&all[1]), key_of(&all[2]), "the retry reuses the key");
        assert_eq!(mock.executions("refund"), 1);
    }
}

// 6. Every wait is bounded: handshake timeout, heartbeat loss, deadline.
both_dialects! {
    async fn invariant_6_every_wait_is_bounded(dialect: Dialect) {
        let mock = mock(dialect).heartbeat(Duration::from_millis(100)).start().await.unwrap();
        let client = client(&mock.ws_url(), dialect)
            .heartbeat_interval(Duration::from_millis(100))
            .handshake_timeout(Duration::from_millis(300))
            .connect()
            .await
            .unwrap();
        let call = tokio::spawn({
            let client = client.clone();
            async move {
                client
                    .invoke_tool("refund", json!({"order": 5, "steps": 10, "ms": 100}))
                    .deadline(Duration::from_secs(3))
                    .send()
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        mock.inject(Fault::BlackHole); // silent, connection open
        let started = Instant::now();
        let outcome = call.await.unwrap();
        assert!(
            matches!(outcome, Err(Error::OutcomeUnavailable { .. } | Error::DeadlineExceeded { .. })),
            "{outcome:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(4), "bounded by the deadline");
        assert!(mock.connections() >= 2, "heartbeat loss was detected and a reconnect tried");
        assert_eq!(mock.executions("refund"), 1);

        // A runtime that never answers the handshake: connect retries
        // within its budget, then fails in time with a retryable error.
        let started = Instant::now();
        let err = client_for_black_hole(&mock.ws_url(), dialect).await;
        let took = started.elapsed();
        assert!(took < Duration::from_millis(1_000 + 300), "{took:?} {err:?}");
        assert!(took >= Duration::from_millis(600), "retried, not failed at once: {took:?}");
        assert!(err.is_retryable(), "{err:?}");
    }
}

async fn client_for_black_hole(url: &str, dialect: Dialect) -> Error {
    client(url, dialect)
        .handshake_timeout(Duration::from_millis(300))
        .connect_budget(Duration::from_secs(1))
        .connect()
        .await
        .unwrap_err()
}

// 7. Cancellation is truthful: dispatch and acknowledgement are reported apart.
both_dialects! {
    async fn invariant_7_cancel_is_truthful(dialect: Dialect) {
        let mock = mock(dialect).start().await.unwrap();
        let client = client(&mock.ws_url(), dialect).connect().await.unwrap();
        // Cancelled before it is awaited: stopped, never sent.
        let stopped = client.invoke_tool("refund", json!({"order": 5})).send();
        assert!(matches!(stopped.cancel().await, CancelOutcome::NotDispatched { .. }));
        let stopped = stopped.await;
        assert!(
            matches!(stopped, Err(Error::Cancelled { attempts: 0, .. })),
            "{stopped:?}"
        );
        assert_eq!(stopped.unwrap_err().execution(), Execution::NotRun);
        assert_eq!(mock.executions("refund"), 0);
        let call = client.invoke_tool("refund", json!({"order": 6, "steps": 20, "ms": 50})).send();
        let handle = call.handle();
        let run = tokio::spawn(call);
        while handle.job_id().is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let outcome = handle.cancel().await;
        assert!(outcome.is_dispatched(), "{outcome:?}");
        assert!(outcome.is_acknowledged(), "{outcome:?}");
        let result = run.await.unwrap();
        assert!(matches!(result, Err(Error::Cancelled { .. })), "{result:?}");
        assert_eq!(handle.cancel().await, CancelOutcome::AlreadyFinished);
        assert_eq!(mock.executions("refund"), 1);
    }
}

// 7b. A cancel the runtime never confirms is reported as dispatched, not
//     acknowledged.
both_dialects! {
    async fn invariant_7_unconfirmed_cancel_is_only_dispatched(dialect: Dialect) {
        let mock = mock(dialect).start().await.unwrap();
        let client = client(&mock.ws_url(), dialect)
            .handshake_timeout(Duration::from_millis(300))
            .connect()
            .await
            .unwrap();
        let call = client
            .invoke_tool("refund", json!({"order": 9, "steps": 20, "ms": 50}))
            .deadline(Duration::from_secs(2))
            .send();
        let handle = call.handle();
        let run = tokio::spawn(call);
        while handle.job_id().is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        mock.inject(Fault::BlackHole);
        let outcome = handle.cancel().await;
        assert_eq!(outcome, CancelOutcome::Dispatched);
        assert!(outcome.is_dispatched() && !outcome.is_acknowledged());
        mock.clear_faults();
        let _ = run.await.unwrap();
        assert_eq!(mock.executions("refund"), 1);
    }
}
