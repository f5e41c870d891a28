//! Callers of one client that share a key before either call ended: a
//! second caller joining a call in flight, a repeat of a call its caller
//! gave up on, and a cancel of a call still waiting for its slot.
//! Each outcome tells the truth about the key, checked against what the
//! mock executed.

mod support;

use std::time::Duration;

use arcp_mock::{Dialect, Preset};
use arcp_sdk::{Client, Error, Execution};
use serde_json::json;
use support::mock::{client, mock};

/// A mock of the published runtime that speaks `dialect`, and a client of
/// it with `max_in_flight` calls in flight at most.
async fn start(dialect: Dialect, max_in_flight: usize) -> (arcp_mock::MockRuntime, Client) {
    let preset = match dialect {
        Dialect::V1_1 => Preset::Python113,
        _ => Preset::Rust200,
    };
    let mock = mock(dialect).preset(preset).start().await.unwrap();
    let client = client(&mock.ws_url(), dialect)
        .max_in_flight(max_in_flight)
        .connect()
        .await
        .unwrap();
    (mock, client)
}

/// A second caller of the same key and intent, while the first caller's
/// call runs, is answered with that call's outcome: not its own run.
#[tokio::test]
async fn a_caller_joining_a_call_in_flight_is_told_it_is_a_replay() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let (mock, client) = start(dialect, 64).await;
        let key = arcp_sdk::IdempotencyKey::new();
        let args = json!({"order": 3, "ms": 400});
        let first = client
            .invoke_tool("refund", args.clone())
            .idempotency_key(key.clone())
            .send();
        let handle = first.handle();
        let first = tokio::spawn(first);
        handle.accepted().await.expect("accepted");
        let second = client
            .invoke_tool("refund", args)
            .idempotency_key(key.clone())
            .send()
            .await
            .unwrap();
        let first = first.await.unwrap().unwrap();
        assert_eq!(mock.executions_for_key(key.as_str()), 1);
        assert!(!first.replayed, "{dialect:?}: {first:?}");
        assert!(second.replayed, "{dialect:?}: {second:?}");
    }
}

/// A caller gives up on its call as soon as it is handed over (before the
/// runtime accepts it); the tool runs. A repeat of the key on the same
/// session gets the runtime's unmarked replay of that job (Python 1.1.3
/// keeps the stored acceptance): a replay, not a fresh run.
#[tokio::test]
async fn a_repeat_of_a_call_given_up_on_reads_as_a_replay() {
    let (mock, client) = start(Dialect::V1_1, 64).await;
    for round in 0..5u64 {
        let args = json!({"order": 100 + round, "ms": 50});
        let first = client.invoke_tool("refund", args.clone()).send();
        let key = first.key().cloned().unwrap();
        // Polled once (handed to the connection), then dropped.
        assert!(tokio::time::timeout(Duration::ZERO, first).await.is_err());
        tokio::time::sleep(Duration::from_millis(300)).await;
        if mock.executions_for_key(key.as_str()) == 0 {
            continue; // nothing went out: nothing to replay
        }
        let again = client
            .invoke_tool("refund", args)
            .idempotency_key(key.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(mock.executions_for_key(key.as_str()), 1);
        assert!(again.replayed, "round {round}: {again:?}");
    }
}

/// A call waiting for its in-flight slot, being awaited, is cancelled: it
/// is never sent, and says so.
#[tokio::test]
async fn a_call_cancelled_while_it_waits_for_a_slot_is_never_sent() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let (mock, client) = start(dialect, 1).await;
        let blocker = tokio::spawn(
            client
                .invoke_tool("refund", json!({"order": 5, "ms": 400}))
                .send(),
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let waiting = client
            .invoke_tool("refund", json!({"order": 6}))
            .deadline(Duration::from_secs(5))
            .send();
        let key = waiting.key().cloned().unwrap();
        let handle = waiting.handle();
        let waiting = tokio::spawn(waiting);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let cancel = handle.cancel().await;
        let outcome = waiting.await.unwrap();
        blocker.await.unwrap().unwrap();
        assert_eq!(
            mock.executions_for_key(key.as_str()),
            0,
            "{dialect:?}: {cancel:?} {outcome:?}"
        );
        let err = outcome.expect_err("cancelled before it was sent");
        assert!(
            matches!(err, Error::Cancelled { .. }),
            "{dialect:?}: {err:?}"
        );
        assert_eq!(err.execution(), Execution::NotRun, "{err:?}");
        assert!(!cancel.is_dispatched(), "{cancel:?}");
    }
}
