//! One named regression test per defect found at the edges of a session
//! (the first connection, reconnects, cancels, id-less errors, replayed
//! errors, request-level closes, accepted-only runtimes). Each checks what
//! the runtime actually executed, not only what the call returned.

mod support;

use std::time::{Duration, Instant};

use arcp_mock::{ChaosProxy, Dialect, Fault, JobStatus, Preset};
use arcp_sdk::{CancelOutcome, Error, Execution, IdempotencyKey, RetryPolicy};
use serde_json::json;
use support::mock::{client, cut_off, mock, submits};

/// The first connection meets a flaky network: `connect()` rides it out.
#[tokio::test]
async fn the_first_connection_is_retried_through_a_flaky_network() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    // Every connection is cut after a few hundred bytes, three times over.
    let proxy = ChaosProxy::builder(mock.address())
        .seed(7)
        .kill_every_bytes(300)
        .max_kills(3)
        .start()
        .await
        .unwrap();
    let client = client(&proxy.ws_url("/arcp"), Dialect::V1_1)
        .connect()
        .await
        .expect("connect retries transient failures");
    let out = client
        .invoke_tool("refund", json!({"order": 1}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"refunded": 1}));
    assert!(!proxy.report().kills.is_empty(), "the network did cut");
    assert_eq!(mock.executions("refund"), 1);
}

/// A refused credential on the first connection is definitive: no retries.
#[tokio::test]
async fn refused_credentials_fail_connect_at_once() {
    let mock = mock(Dialect::V1_1)
        .token("right", "alice")
        .start()
        .await
        .unwrap();
    let started = Instant::now();
    let err = client(&mock.ws_url(), Dialect::V1_1)
        .bearer_token("wrong")
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unauthenticated { .. }), "{err:?}");
    assert_eq!(err.execution(), Execution::NotRun);
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(mock.connections(), 1, "not retried");
}

/// The task serves deadlines while it reconnects into a black hole with a
/// long handshake timeout.
#[tokio::test]
async fn a_deadline_holds_while_the_task_reconnects() {
    let mock = mock(Dialect::V1_1)
        .heartbeat(Duration::from_millis(100))
        .start()
        .await
        .unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .heartbeat_interval(Duration::from_millis(100))
        .handshake_timeout(Duration::from_secs(4))
        .connect()
        .await
        .unwrap();
    let call = client
        .invoke_tool("refund", json!({"order": 2, "steps": 20, "ms": 100}))
        .deadline(Duration::from_secs(1))
        .send();
    let started = Instant::now();
    let handle = call.handle();
    let run = tokio::spawn(call);
    handle.accepted().await.expect("accepted");
    mock.inject(Fault::BlackHole);
    let outcome = run.await.unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1_100), "{took:?}");
    let err = outcome.unwrap_err();
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err}");
    // close() is served at once as well.
    let started = Instant::now();
    client.close().await;
    assert!(started.elapsed() < Duration::from_millis(700));
    assert_eq!(mock.executions("refund"), 1);
}

/// The deadline covers waiting for an in-flight slot.
#[tokio::test]
async fn a_deadline_covers_waiting_for_an_in_flight_slot() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .max_in_flight(1)
        .connect()
        .await
        .unwrap();
    let long = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke_tool("refund", json!({"order": 1, "ms": 1_500}))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let err = client
        .invoke_tool("echo", json!({"n": 2}))
        .deadline(Duration::from_millis(300))
        .send()
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_millis(400), "{took:?}");
    assert!(matches!(err, Error::DeadlineExceeded { .. }), "{err:?}");
    assert_eq!(err.execution(), Execution::NotRun);
    long.await.unwrap().unwrap();
    assert_eq!(mock.executions("echo"), 0);
}

/// After a cancel (whose request stays in the table until answered), an
/// id-less `session.error DUPLICATE_KEY` still reaches the call it answers.
#[tokio::test]
async fn an_idless_error_after_a_cancel_reaches_its_call() {
    let mock = mock(Dialect::V1_1)
        .preset(Preset::Python113)
        .cancel_ack(false)
        .start()
        .await
        .unwrap();
    let first = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    first
        .invoke_tool("echo", json!({"a": 1}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    // A long call, cancelled; the runtime does not confirm the cancel.
    let long = first
        .invoke_tool("refund", json!({"order": 3, "steps": 10, "ms": 100}))
        .send();
    let handle = long.handle();
    let long = tokio::spawn(long);
    handle.accepted().await.unwrap();
    let _ = handle.cancel().await;
    // A conflicting intent on the first key, from another client (so the
    // outcome cache does not answer it): the runtime's id-less refusal.
    let other = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let started = Instant::now();
    let err = other
        .invoke_tool("echo", json!({"a": 2}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DuplicateKey { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
    let _ = long.await;
    assert_eq!(mock.executions("echo"), 1);
}

/// A stored tool error replayed without `job.accepted` first is the call's
/// terminal outcome (not retried, even when the error is marked retryable):
/// the key's tool ran.
#[tokio::test]
async fn a_replayed_retryable_tool_error_is_terminal() {
    let mock = mock(Dialect::Legacy)
        .preset(Preset::PhpNewer)
        .start()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let args = json!({"code": "UNAVAILABLE", "retryable": true});
    let first = client(&mock.ws_url(), Dialect::Legacy)
        .connect()
        .await
        .unwrap();
    let e1 = first
        .invoke_tool("fail", args.clone())
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    let Error::Tool(e1) = e1 else {
        panic!("{e1:?}")
    };
    assert!(!e1.replayed);
    let second = client(&mock.ws_url(), Dialect::Legacy)
        .connect()
        .await
        .unwrap();
    let e2 = second
        .invoke_tool("fail", args)
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    // The stored terminal re-sent with no acceptance before it: the job's
    // error, so the key's tool ran. Not called a replay: the runtime does
    // not mark it, and this process never saw the key bound to that job.
    let Error::Tool(e2) = e2 else {
        panic!("{e2:?}")
    };
    assert_eq!(e2.execution, Execution::Ran, "{e2:?}");
    assert_eq!(e2.attempts, 1, "not re-sent as if it were transient");
    assert!(!e2.replayed, "{e2:?}");
    assert_eq!(mock.executions("fail"), 1);
}

/// A cached tool error answers a repeated key as a replay.
#[tokio::test]
async fn a_cached_tool_error_is_marked_replayed() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    for replayed in [false, true] {
        let err = client
            .invoke_tool("fail", json!({}))
            .idempotency_key(key.clone())
            .send()
            .await
            .unwrap_err();
        let Error::Tool(e) = err else {
            panic!("{err:?}")
        };
        assert_eq!(e.replayed, replayed);
    }
    assert_eq!(mock.executions("fail"), 1);
}

/// `replayed` stays false for a first execution whose earlier attempt was
/// lost before it reached the tool.
#[tokio::test]
async fn a_first_execution_after_a_lost_attempt_is_not_a_replay() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    mock.inject(Fault::DropOnSubmit);
    let out = client
        .invoke_tool("refund", json!({"order": 5}))
        .await
        .unwrap();
    assert!(!out.replayed, "{out:?}");
    assert_eq!(out.attempts, 2);
    assert_eq!(mock.executions("refund"), 1);
}

/// A reconnect answered with 429 (then 401) after acceptance keeps the
/// "may have run, retry later with this key" meaning and the job id.
#[tokio::test]
async fn a_refused_reconnect_after_acceptance_keeps_the_key_and_job() {
    for status in [429, 401] {
        let mock = mock(Dialect::V1_1).start().await.unwrap();
        let client = client(&mock.ws_url(), Dialect::V1_1)
            .retry(
                RetryPolicy::exponential()
                    .initial_delay(Duration::from_millis(10))
                    .max_delay(Duration::from_millis(100))
                    .max_elapsed(Duration::from_millis(800)),
            )
            .connect()
            .await
            .unwrap();
        mock.inject_always(Fault::RefuseUpgrade {
            status,
            retry_after: None,
        });
        mock.inject(Fault::DropAfterAccepted);
        let err = client
            .invoke_tool("refund", json!({"order": 6, "ms": 50}))
            .deadline(Duration::from_secs(3))
            .send()
            .await
            .unwrap_err();
        assert_eq!(err.execution(), Execution::MayHaveRun, "{status}: {err:?}");
        assert!(err.is_retryable(), "{status}: {err:?}");
        let job_id = match &err {
            Error::OutcomeUnavailable { job_id, .. } | Error::DeadlineExceeded { job_id, .. } => {
                job_id.clone()
            }
            other => panic!("{status}: {other:?}"),
        };
        assert!(job_id.is_some(), "{status}: the job id is kept: {err:?}");
        assert!(!err.to_string().contains("Some("), "{err}");
        assert_eq!(mock.executions("refund"), 1);
    }
}

/// A runtime that closes with 1009 (message too big) because of the
/// request itself: a typed, non-retryable error; the tool never ran.
#[tokio::test]
async fn a_request_closed_with_1009_is_rejected_not_retried() {
    let mock = mock(Dialect::V1_1)
        .max_inbound_frame_size(2_000)
        .start()
        .await
        .unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let started = Instant::now();
    let err = client
        .invoke_tool("echo", json!({"blob": "x".repeat(4_000)}))
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::RequestRejected {
                close_code: 1009,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.execution(), Execution::NotRun);
    assert!(!err.is_retryable());
    assert!(
        err.attempts().unwrap_or(0) <= 2,
        "at most one confirming re-send: {err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(mock.executions("echo"), 0);
    // The connection is usable for other calls afterwards.
    client
        .invoke_tool("echo", json!({"small": true}))
        .await
        .unwrap();
}

/// A runtime that never replays terminals and cannot resume (Rust 2.0.0):
/// a call cut after acceptance ends fast with `OutcomeUnavailable`.
#[tokio::test]
async fn an_accepted_only_runtime_ends_fast_after_a_cut() {
    let mock = mock(Dialect::Legacy)
        .preset(Preset::Rust200)
        .start()
        .await
        .unwrap();
    let client = client(&mock.ws_url(), Dialect::Legacy)
        .retry(RetryPolicy::exponential().max_attempts(10))
        .connect()
        .await
        .unwrap();
    mock.inject(Fault::DropAfterAccepted);
    let started = Instant::now();
    let err = client
        .invoke_tool("refund", json!({"order": 7, "ms": 200}))
        .send()
        .await
        .unwrap_err();
    let took = started.elapsed();
    match &err {
        Error::OutcomeUnavailable { job_id, .. } => assert!(job_id.is_some()),
        other => panic!("{other:?}"),
    }
    assert!(took < Duration::from_millis(2_500), "{took:?}");
    assert!(
        err.attempts().unwrap_or(0) <= 2,
        "one confirming re-send: {err:?}"
    );
    assert_eq!(mock.executions("refund"), 1);
}

/// Cancel on a silent runtime is bounded by the cancel timeout and
/// reported dispatched (it was written), not acknowledged.
#[tokio::test]
async fn cancel_is_bounded_on_a_silent_runtime() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .cancel_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let call = client
        .invoke_tool("refund", json!({"order": 8, "steps": 20, "ms": 50}))
        .deadline(Duration::from_secs(5))
        .send();
    let handle = call.handle();
    let run = tokio::spawn(call);
    handle.accepted().await.unwrap();
    mock.inject(Fault::BlackHole);
    let started = Instant::now();
    let outcome = handle.cancel().await;
    assert!(started.elapsed() < Duration::from_millis(800));
    assert_eq!(outcome, CancelOutcome::Dispatched);
    mock.clear_faults();
    run.abort();
}

/// A cancel asked for while the connection is down is sent once it is
/// back, while the call is live: the job ends cancelled.
#[tokio::test]
async fn a_cancel_while_disconnected_is_sent_after_reconnecting() {
    let mock = mock(Dialect::V1_1)
        .preset(Preset::Python113)
        .resume_reattaches_jobs(true)
        .start()
        .await
        .unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .cancel_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let call = client
        .invoke_tool("refund", json!({"order": 9, "steps": 30, "ms": 50}))
        .deadline(Duration::from_secs(6))
        .send();
    let handle = call.handle();
    let run = tokio::spawn(call);
    let job_id = handle.accepted().await.unwrap();
    cut_off(&mock).await;
    let outcome = handle.cancel().await;
    assert!(
        matches!(outcome, CancelOutcome::NotDispatched { .. }),
        "nothing could be written: {outcome:?}"
    );
    mock.clear_faults();
    let result = run.await.unwrap();
    assert!(matches!(result, Err(Error::Cancelled { .. })), "{result:?}");
    let job = mock
        .jobs()
        .into_iter()
        .find(|j| j.job_id == job_id)
        .unwrap();
    assert_eq!(job.status, JobStatus::Cancelled);
    assert_eq!(mock.executions("refund"), 1);
}

/// A same-key caller who joins a call in flight learns its job id.
#[tokio::test]
async fn a_joined_caller_can_await_acceptance() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let args = json!({"order": 10, "ms": 300});
    let first = client
        .invoke_tool("refund", args.clone())
        .idempotency_key(key.clone())
        .send();
    let first_handle = first.handle();
    let first = tokio::spawn(first);
    let job = first_handle.accepted().await.unwrap();
    let second = client
        .invoke_tool("refund", args)
        .idempotency_key(key)
        .send();
    let second_handle = second.handle();
    let second = tokio::spawn(second);
    assert_eq!(second_handle.accepted().await, Some(job.clone()));
    let (a, b) = (
        first.await.unwrap().unwrap(),
        second.await.unwrap().unwrap(),
    );
    assert_eq!(a.value, b.value);
    assert_eq!(b.job_id, Some(job));
    assert_eq!(mock.executions("refund"), 1);
}

/// Joined callers keep their own deadlines: the impatient one is answered
/// at its deadline (may have run: the key's fate is shared), the other
/// still gets the result, and the tool ran once.
#[tokio::test]
async fn a_joined_caller_is_held_to_its_own_deadline() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = mock(dialect).start().await.unwrap();
        let client = client(&mock.ws_url(), dialect).connect().await.unwrap();
        let key = IdempotencyKey::new();
        let args = json!({"order": 11, "ms": 700});
        let first = client
            .invoke_tool("refund", args.clone())
            .idempotency_key(key.clone())
            .deadline(Duration::from_secs(10))
            .send();
        let first_handle = first.handle();
        let first = tokio::spawn(first);
        first_handle.accepted().await.unwrap();
        let deadline = Duration::from_millis(200);
        let started = Instant::now();
        let second = client
            .invoke_tool("refund", args)
            .idempotency_key(key)
            .deadline(deadline)
            .send()
            .await;
        let waited = started.elapsed();
        assert!(
            matches!(
                second,
                Err(Error::DeadlineExceeded {
                    execution: Execution::MayHaveRun,
                    ..
                })
            ),
            "{dialect}: {second:?}"
        );
        assert!(
            waited >= deadline && waited < deadline + Duration::from_millis(100),
            "{dialect}: answered after {waited:?} for a deadline of {deadline:?}"
        );
        let first = first.await.unwrap();
        assert!(first.is_ok(), "{dialect}: {first:?}");
        assert_eq!(mock.executions("refund"), 1, "{dialect}");
    }
}

/// A call made while the client closes over a stalled connection is
/// answered at once (`Closed`: it never reaches the runtime), not after the
/// close's bounded writes: its deadline is kept.
#[tokio::test]
async fn a_call_made_while_closing_over_a_stalled_connection_keeps_its_deadline() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let proxy = ChaosProxy::builder(mock.address()).start().await.unwrap();
    let client = client(&proxy.ws_url("/arcp"), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    proxy.stall(true);
    // Enough to fill the socket buffers: the connection task's write stalls.
    let pad = "x".repeat(1 << 20);
    let mut senders = Vec::new();
    for i in 0..24 {
        let (client, pad) = (client.clone(), pad.clone());
        senders.push(tokio::spawn(async move {
            client
                .invoke_tool("echo", json!({"i": i, "pad": pad}))
                .deadline(Duration::from_secs(10))
                .send()
                .await
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let closing = {
        let client = client.clone();
        tokio::spawn(async move { client.close().await })
    };
    // Time for the close to reach the connection task (a call that got in
    // before it is held to its deadline by the task instead).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let deadline = Duration::from_millis(100);
    let started = Instant::now();
    let late = client
        .invoke_tool("refund", json!({"order": 99}))
        .deadline(deadline)
        .send()
        .await;
    let waited = started.elapsed();
    let Err(e) = &late else {
        panic!("a call on a closing client succeeded: {late:?}");
    };
    assert!(
        waited < deadline + Duration::from_millis(100),
        "answered after {waited:?} for a deadline of {deadline:?}: {e:?}"
    );
    proxy.stall(false);
    closing.await.unwrap();
    for sender in senders {
        let _ = sender.await;
    }
    assert_eq!(mock.executions("refund"), 0);
}

/// Stray and duplicate frames for finished jobs (and a cancel's late
/// answer) are dropped: the connection task keeps serving calls.
#[tokio::test]
async fn stray_frames_for_finished_calls_are_dropped() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = mock(dialect).start().await.unwrap();
        let client = client(&mock.ws_url(), dialect).connect().await.unwrap();
        for i in 0..5 {
            mock.inject(Fault::StrayFrames);
            let call = client
                .invoke_tool("refund", json!({"order": i, "ms": 20}))
                .send();
            let handle = call.handle();
            let run = tokio::spawn(call);
            if i % 2 == 0 {
                handle.accepted().await;
                let _ = handle.cancel().await;
            }
            let _ = run.await.unwrap();
        }
        let out = client.invoke_tool("echo", json!({"still": "alive"})).await;
        assert!(out.is_ok(), "{dialect}: {out:?}");
        assert!(submits(&mock).len() >= 6);
    }
}

/// The runtime accepted the first attempt but the acceptance was lost with
/// the connection; the re-send is answered `job.accepted` only (the job is
/// still running) on a resumed session that does not carry the job's live
/// events (Python 1.1.3). The client must not trust the live stream: it
/// subscribes or re-sends until the outcome arrives.
#[tokio::test]
async fn an_acceptance_after_a_lost_attempt_does_not_trust_the_live_stream() {
    let mock = mock(Dialect::V1_1)
        .preset(Preset::Python113)
        .start()
        .await
        .unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    // The acceptance is held back, then the connection dies under it.
    mock.inject(Fault::DelayReplies(Duration::from_millis(300)));
    let call = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke_tool("refund", json!({"order": 11, "steps": 4, "ms": 200}))
                .deadline(Duration::from_secs(10))
                .send()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    mock.kill_connections();
    let started = Instant::now();
    let out = call.await.unwrap().expect("the outcome is recovered");
    assert_eq!(out.value, json!({"refunded": 11}));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(mock.executions("refund"), 1);
}

/// A call whose caller gave up after sending keeps its key bound to its
/// intent in this client: against a runtime that does not signal conflicts
/// (it replays the stored outcome of the first intent), another intent
/// under that key is refused instead of getting someone else's result.
#[tokio::test]
async fn an_abandoned_call_keeps_its_key_bound_in_the_client() {
    let mock = mock(Dialect::Legacy)
        .preset(Preset::PhpNewer)
        .start()
        .await
        .unwrap();
    let client = client(&mock.ws_url(), Dialect::Legacy)
        .connect()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let first = client
        .invoke_tool("refund", json!({"order": 12, "ms": 300}))
        .idempotency_key(key.clone())
        .deadline(Duration::from_millis(100))
        .send()
        .await
        .unwrap_err();
    assert_eq!(first.execution(), Execution::MayHaveRun, "{first:?}");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = client
        .invoke_tool("refund", json!({"order": 13}))
        .idempotency_key(key)
        .send()
        .await;
    assert!(
        matches!(second, Err(Error::DuplicateKey { .. })),
        "{second:?}"
    );
    assert_eq!(mock.executions("refund"), 1);
}

/// A repeated call with the key and intent of a call whose outcome stayed
/// unknown is the same logical call: if it gives up before sending, it
/// still may have run (the first one may have run it), never "not run".
#[tokio::test]
async fn a_repeat_of_a_call_with_an_unknown_outcome_never_claims_not_run() {
    let mock = mock(Dialect::Legacy)
        .preset(Preset::Rust200)
        .start()
        .await
        .unwrap();
    let client = client(&mock.ws_url(), Dialect::Legacy)
        .connect()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let args = json!({"order": 14, "ms": 100});
    mock.inject(Fault::DropAfterAccepted);
    let first = client
        .invoke_tool("refund", args.clone())
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    assert_eq!(first.execution(), Execution::MayHaveRun, "{first:?}");
    // No connection can be had now: the repeat cannot even be sent.
    cut_off(&mock).await;
    let again = client
        .invoke_tool("refund", args)
        .idempotency_key(key)
        .deadline(Duration::from_millis(300))
        .send()
        .await
        .unwrap_err();
    assert_eq!(again.execution(), Execution::MayHaveRun, "{again:?}");
    mock.clear_faults();
    assert_eq!(mock.executions("refund"), 1);
}
