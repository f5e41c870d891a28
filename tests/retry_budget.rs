//! The retry budget, through the public API on both transports: a call
//! gives up as soon as its next attempt cannot start within the budget
//! (attempts, time since the first failure, or the call's deadline), says
//! which limit ended it in the same words on WebSocket and HTTP, and a call
//! that waits for its job after the budget's end waits idle.
//! Checked against arcp-mock's execution counts.

mod support;

use std::time::{Duration, Instant};

use arcp_mock::{Dialect, Fault, MockRuntime};
use arcp_sdk::{Client, Error, Execution, RetryPolicy};
use arcp_types::ErrorCode;
use serde_json::json;
use support::mock::mock;

/// The two transports, as a client reaches the same mock over each.
#[derive(Debug, Clone, Copy)]
enum Transport {
    Ws,
    Http,
}

const TRANSPORTS: [Transport; 2] = [Transport::Ws, Transport::Http];

fn policy() -> RetryPolicy {
    RetryPolicy::exponential()
        .initial_delay(Duration::from_millis(5))
        .max_delay(Duration::from_millis(100))
        .max_attempts(1000)
        .max_elapsed(Duration::from_secs(2))
        .outcome_poll(Duration::from_millis(20))
}

async fn client(mock: &MockRuntime, transport: Transport, policy: RetryPolicy) -> Client {
    let url = match transport {
        Transport::Ws => mock.ws_url(),
        Transport::Http => mock.http_url(),
    };
    Client::builder(url)
        .dialect(Dialect::V1_1)
        .handshake_timeout(Duration::from_secs(2))
        .retry(policy)
        .connect()
        .await
        .unwrap()
}

/// Every submit refused before acceptance, retryably, with `retry_after`.
fn refuse_every_submit(mock: &MockRuntime, retry_after: Option<Duration>) {
    mock.inject_always(Fault::RejectNextSubmit {
        code: ErrorCode::Unavailable,
        retry_after,
    });
}

/// Runs one `refund` call with `deadline`; returns its outcome and how
/// long it took.
async fn call(
    client: &Client,
    deadline: Duration,
) -> (Result<arcp_sdk::ToolOutput, Error>, Duration) {
    let started = Instant::now();
    let outcome = client
        .invoke_tool("refund", json!({"order": 1}))
        .deadline(deadline)
        .send()
        .await;
    (outcome, started.elapsed())
}

/// The `last_error` of a `RetriesExhausted`, or a panic naming what came.
fn exhausted(outcome: &Result<arcp_sdk::ToolOutput, Error>, transport: Transport) -> (u32, &str) {
    match outcome {
        Err(Error::RetriesExhausted {
            attempts,
            last_error,
            ..
        }) => (*attempts, last_error.as_str()),
        other => panic!("{transport:?}: expected RetriesExhausted, got {other:?}"),
    }
}

/// Every submit refused with `retry_after`: the call ends at once, before
/// the budget's end and the deadline, with `RetriesExhausted` naming the
/// limit the next attempt would have passed, on both transports.
async fn a_retry_after_past_a_limit_ends_the_call_at_once(
    retry_after: Duration,
    max_elapsed: Duration,
    deadline: Duration,
    named: &str,
) {
    for transport in TRANSPORTS {
        let mock = mock(Dialect::V1_1).start().await.unwrap();
        let client = client(&mock, transport, policy().max_elapsed(max_elapsed)).await;
        refuse_every_submit(&mock, Some(retry_after));
        let (outcome, took) = call(&client, deadline).await;
        let (attempts, last_error) = exhausted(&outcome, transport);
        assert_eq!(attempts, 1, "{transport:?}");
        assert!(last_error.contains(named), "{transport:?}: {last_error}");
        assert_eq!(outcome.unwrap_err().execution(), Execution::NotRun);
        // Not kept waiting (2 s or more) for an attempt that would never
        // be made.
        assert!(
            took < Duration::from_secs(1),
            "{transport:?}: took {took:?}"
        );
        assert_eq!(mock.executions("refund"), 0, "{transport:?}");
    }
}

#[tokio::test]
async fn a_retry_after_past_the_budget_ends_the_call_at_once_on_both_transports() {
    let (retry_after, max_elapsed) = (Duration::from_secs(30), Duration::from_secs(2));
    let named = "would fall after the retry budget of 2s";
    a_retry_after_past_a_limit_ends_the_call_at_once(
        retry_after,
        max_elapsed,
        Duration::from_secs(60),
        named,
    )
    .await;
}

/// A retry that would start past the call's deadline: the deadline cannot
/// be kept, so the call ends at once, as the deadline would end it
/// (`DeadlineExceeded`, a timeout), not at the deadline instant.
#[tokio::test]
async fn a_retry_after_past_the_deadline_ends_the_call_at_once_on_both_transports() {
    for transport in TRANSPORTS {
        let mock = mock(Dialect::V1_1).start().await.unwrap();
        let client = client(
            &mock,
            transport,
            policy().max_elapsed(Duration::from_secs(60)),
        )
        .await;
        refuse_every_submit(&mock, Some(Duration::from_secs(5)));
        let (outcome, took) = call(&client, Duration::from_secs(3)).await;
        let err = outcome.unwrap_err();
        let Error::DeadlineExceeded {
            attempts, deadline, ..
        } = err
        else {
            panic!("{transport:?}: expected DeadlineExceeded, got {err:?}");
        };
        assert_eq!(
            (attempts, deadline),
            (1, Duration::from_secs(3)),
            "{transport:?}"
        );
        assert!(err.is_timeout(), "{transport:?}");
        assert_eq!(err.execution(), Execution::NotRun, "{transport:?}");
        assert!(
            took < Duration::from_secs(1),
            "{transport:?}: took {took:?}"
        );
        assert_eq!(mock.executions("refund"), 0, "{transport:?}");
    }
}

#[tokio::test]
async fn the_attempt_limit_is_named_the_same_way_on_both_transports() {
    for transport in TRANSPORTS {
        let mock = mock(Dialect::V1_1).start().await.unwrap();
        let client = client(&mock, transport, policy().max_attempts(3)).await;
        // Over HTTP a 429 (a bare 503 may come from a proxy that forwarded
        // the request: an exposure).
        mock.inject_always(Fault::RejectNextSubmit {
            code: ErrorCode::ResourceExhausted,
            retry_after: None,
        });
        let (outcome, _) = call(&client, Duration::from_secs(30)).await;
        let (attempts, last_error) = exhausted(&outcome, transport);
        assert_eq!(attempts, 3, "{transport:?}");
        assert!(
            last_error.contains("the retry budget of 3 attempt(s) is spent")
                && last_error.contains("RESOURCE_EXHAUSTED"),
            "{transport:?}: {last_error}"
        );
        assert_eq!(mock.executions("refund"), 0, "{transport:?}");
    }
}

/// Every connection dies as the submit arrives (before it runs): the call
/// retries until its 2 s budget is spent, not until its 30 s deadline.
#[tokio::test]
async fn a_call_whose_every_connection_drops_ends_within_its_retry_budget() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = client(&mock, Transport::Ws, policy()).await;
    mock.inject_always(Fault::DropOnSubmit);
    let (outcome, took) = call(&client, Duration::from_secs(30)).await;
    let err = outcome.unwrap_err();
    // Each attempt was written and lost unanswered: it may have run.
    let Error::OutcomeUnavailable {
        ref reason,
        attempts,
        ..
    } = err
    else {
        panic!("expected OutcomeUnavailable, got {err:?}");
    };
    assert_eq!(err.execution(), Execution::MayHaveRun);
    assert!(attempts > 1, "it retried: {attempts}");
    assert!(reason.contains("retry budget of 2s"), "{reason}");
    // Within the budget plus one attempt's time, and not given up early.
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(3),
        "took {took:?}"
    );
    assert_eq!(mock.executions("refund"), 0, "dropped before it ran");
}

/// No connection can be had (every handshake dropped): nothing is sent,
/// and the call ends `RetriesExhausted`, not run, within its budget.
#[tokio::test]
async fn a_call_that_never_gets_a_connection_ends_within_its_retry_budget() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    mock.inject_always(Fault::DropDuringHandshake);
    let client = Client::builder(mock.ws_url())
        .dialect(Dialect::V1_1)
        .handshake_timeout(Duration::from_secs(2))
        .retry(policy())
        .connect_lazy();
    let (outcome, took) = call(&client, Duration::from_secs(30)).await;
    let (attempts, last_error) = exhausted(&outcome, Transport::Ws);
    assert_eq!(attempts, 0, "nothing was sent");
    assert!(last_error.contains("retry budget of 2s"), "{last_error}");
    assert_eq!(outcome.unwrap_err().execution(), Execution::NotRun);
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(3),
        "took {took:?}"
    );
    assert_eq!(mock.executions("refund"), 0);
}

/// CPU time of the calling thread.
fn thread_cpu_time() -> Duration {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// A refusal starts the budget's clock; the retry is accepted and the job
/// runs well past the budget's end. Waiting for its result is not a retry:
/// the call ends with it, and the connection task sleeps meanwhile (it
/// used to wake at the budget's passed end on every turn, spinning).
/// The test's runtime is single-threaded, so the client's connection task
/// and the mock run on this thread, and its CPU time is theirs.
#[tokio::test]
async fn a_call_waiting_for_its_job_past_the_budget_waits_idle() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let policy = policy().max_elapsed(Duration::from_millis(200));
    let client = client(&mock, Transport::Ws, policy).await;
    mock.inject(Fault::RejectNextSubmit {
        code: ErrorCode::Unavailable,
        retry_after: None,
    });
    let cpu = thread_cpu_time();
    let started = Instant::now();
    let outcome = client
        .invoke_tool("refund", json!({"order": 1, "ms": 2000}))
        .deadline(Duration::from_secs(30))
        .send()
        .await;
    let (took, cpu) = (started.elapsed(), thread_cpu_time() - cpu);
    let out = outcome.expect("the job's result");
    assert_eq!(out.attempts, 2, "refused once, then accepted");
    assert!(took >= Duration::from_secs(2), "took {took:?}");
    assert!(
        cpu < Duration::from_millis(300),
        "{cpu:?} of CPU in {took:?}"
    );
    assert_eq!(mock.executions("refund"), 1);
}
