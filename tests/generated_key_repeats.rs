//! A repeat under a key generated for an earlier call (taken from its
//! outcome, error or handle) tells the truth about whether the tool ran
//! for it, though the outcome cache keeps only such a call's binding (its
//! intent and job), not its outcome. Ground truth: the mock's execution
//! counts.

mod support;

use std::time::Duration;

use arcp_mock::{Dialect, Fault, Preset};
use arcp_sdk::{Client, Error, Execution, ToolOutput};
use serde_json::{json, Value};
use support::mock::{client, cut_off, mock};

async fn start(dialect: Dialect, preset: Preset) -> (arcp_mock::MockRuntime, Client) {
    let mock = mock(dialect).preset(preset).start().await.unwrap();
    let client = client(&mock.ws_url(), dialect).connect().await.unwrap();
    (mock, client)
}

async fn again(
    client: &Client,
    args: Value,
    key: &arcp_sdk::IdempotencyKey,
) -> Result<ToolOutput, Error> {
    client
        .invoke_tool("refund", args)
        .idempotency_key(key.clone())
        .deadline(Duration::from_secs(3))
        .send()
        .await
}

/// Same intent, same session: the tool ran once (for the first call), and
/// the runtime's unmarked replay reads as a replay.
#[tokio::test]
async fn a_repeat_under_a_generated_key_reads_as_a_replay() {
    for (dialect, preset) in [
        (Dialect::V1_1, Preset::Python113),
        (Dialect::Legacy, Preset::PhpNewer),
    ] {
        let (mock, client) = start(dialect, preset).await;
        let first = client
            .invoke_tool("refund", json!({"order": 5}))
            .send()
            .await
            .unwrap();
        let again = again(&client, json!({"order": 5}), &first.key)
            .await
            .unwrap();
        assert_eq!(mock.executions("refund"), 1);
        assert!(again.replayed, "{preset:?}: {again:?}");
    }
}

/// The same on a resumed session (the connection cut between the calls),
/// and after a fault the first call recovered from.
#[tokio::test]
async fn a_repeat_after_a_resume_or_a_fault_reads_as_a_replay() {
    for fault in [
        None,
        Some(Fault::DropAfterAccepted),
        Some(Fault::DropOnSubmit),
    ] {
        let (mock, client) = start(Dialect::V1_1, Preset::Python113).await;
        if let Some(f) = fault.clone() {
            mock.inject(f);
        }
        let first = client
            .invoke_tool("refund", json!({"order": 6, "ms": 100}))
            .send()
            .await
            .unwrap();
        if fault.is_none() {
            mock.kill_connections();
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let again = again(&client, json!({"order": 6, "ms": 100}), &first.key)
            .await
            .unwrap();
        assert_eq!(mock.executions("refund"), 1);
        assert!(again.replayed, "{fault:?}: {again:?}");
    }
}

/// A tool error repeated under `err.key()` is the first call's, replayed.
#[tokio::test]
async fn a_tool_error_repeated_under_its_key_reads_as_a_replay() {
    let (mock, client) = start(Dialect::V1_1, Preset::Python113).await;
    let e1 = client
        .invoke_tool("fail", json!({}))
        .send()
        .await
        .unwrap_err();
    let e2 = client
        .invoke_tool("fail", json!({}))
        .idempotency_key(e1.key().unwrap().clone())
        .send()
        .await
        .unwrap_err();
    assert_eq!(mock.executions("fail"), 1);
    let Error::Tool(t) = e2 else { panic!("{e2:?}") };
    assert!(t.replayed, "{t:?}");
}

/// Another intent under a generated key, against runtimes that do not
/// signal conflicts (the newer PHP runtime re-sends the stored terminal of
/// the first intent, the older an `ack` replay), is refused in the client:
/// it never gets the first intent's result.
#[tokio::test]
async fn another_intent_under_a_generated_key_is_refused() {
    for preset in [Preset::PhpNewer, Preset::PhpOlder] {
        let (mock, client) = start(Dialect::Legacy, preset).await;
        // The key taken from an outcome.
        let first = client
            .invoke_tool("refund", json!({"order": 1}))
            .send()
            .await
            .unwrap();
        let other = again(&client, json!({"order": 2}), &first.key).await;
        assert_eq!(mock.executions("refund"), 1);
        assert!(
            matches!(other, Err(Error::DuplicateKey { .. })),
            "{preset:?}: {other:?}"
        );
        // The key taken from a handle while the call runs.
        let inv = client
            .invoke_tool("refund", json!({"order": 3, "ms": 200}))
            .send();
        let key = inv.handle().key().unwrap().clone();
        inv.await.unwrap();
        let other = again(&client, json!({"order": 4}), &key).await;
        assert_eq!(mock.executions("refund"), 2);
        assert!(
            matches!(other, Err(Error::DuplicateKey { .. })),
            "{preset:?}: {other:?}"
        );
    }
}

/// A byte bound too small for a binding with its job id keeps the binding
/// without it: a repeat that cannot be sent still says "may have run".
#[tokio::test]
async fn a_binding_fits_a_small_byte_bound() {
    let mock = mock(Dialect::Legacy)
        .preset(Preset::Rust200)
        .start()
        .await
        .unwrap();
    let client = client(&mock.ws_url(), Dialect::Legacy)
        .tuning(arcp_sdk::tuning::Tuning::new().outcome_cache_bytes(180))
        .connect()
        .await
        .unwrap();
    let args = json!({"order": 14, "ms": 300});
    let first = client
        .invoke_tool("refund", args.clone())
        .deadline(Duration::from_millis(100))
        .send()
        .await
        .unwrap_err();
    assert_eq!(first.execution(), Execution::MayHaveRun, "{first:?}");
    cut_off(&mock).await;
    let again = client
        .invoke_tool("refund", args)
        .idempotency_key(first.key().unwrap().clone())
        .deadline(Duration::from_millis(300))
        .send()
        .await
        .unwrap_err();
    mock.clear_faults();
    assert_eq!(again.execution(), Execution::MayHaveRun, "{again:?}");
}
