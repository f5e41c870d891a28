//! Choosing the idempotency key yourself, and keys that survive a restart.
//!
//! By default every call gets a fresh random key, which protects the call
//! against retries *within* one process. To be safe across process restarts
//! (a worker re-running a job from its queue, a crashed deploy), the key must
//! come from the work itself:
//!
//! 1. a caller-chosen key, such as `refund-order-4812`, from your own records;
//! 2. `IdempotencyKey::derive(namespace, tool, &args)` (or, for a typed
//!    tool, `Tool::derive_key(namespace, &args)`), a UUIDv5 over the
//!    canonical JSON of the call: the same inputs give the same key in every
//!    process and every release of the SDK.
//!
//! The example "restarts" by dropping the client and building a new one (a new
//! connection, a new session, an empty local cache), which re-issues the same
//! derived key: the runtime replays the stored answer and the tool runs once.
//!
//! Run it: `cargo run --example explicit_key`

use arcp_mock::MockRuntime;
use arcp_sdk::{Client, Error};
use arcp_types::IdempotencyKey;
use serde_json::json;

#[allow(dead_code)] // each example uses part of it
#[path = "support/refund.rs"]
mod refund;

use refund::{refund_runtime, Refund, REFUND};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mock = refund_runtime().await;
    let connect = || Client::builder(mock.ws_url()).connect();

    // 1. A key chosen by the caller, for instance from an order table.
    let client = connect().await?;
    let key = IdempotencyKey::try_from("refund-order-4812").expect("printable ASCII");
    let args = json!({"order": 4812, "cents": 500});
    for round in 1..=2 {
        let out = client
            .invoke_tool("refund", args.clone())
            .idempotency_key(key.clone())
            .send()
            .await?;
        println!(
            "[chosen key]  call {round} with key {}: {} (replayed: {})",
            out.key, out.value, out.replayed
        );
    }
    // The second call never reached the runtime: the client's outcome cache
    // answered it (a runtime would have replayed the same answer).
    println!(
        "[chosen key]  runtime received {} submit(s) with that key; refund executed {} time(s)",
        submits(&mock, key.as_str()),
        mock.executions_for_key(key.as_str())
    );
    assert_eq!(submits(&mock, key.as_str()), 1);
    assert_eq!(mock.executions_for_key(key.as_str()), 1);

    // 2. A key derived from the typed arguments, stable across restarts.
    let args = Refund {
        order: 4813,
        cents: 1250,
    };
    let first = REFUND
        .call(&client, &args)
        .idempotency_key(REFUND.derive_key("orders", &args)?)
        .send()
        .await?;
    println!(
        "[derived key] process 1: key {} -> {:?} (replayed: {})",
        first.key, first.value, first.replayed
    );

    // "Restart": the old client (connection, session, local cache) is gone.
    client.close().await;
    drop(client);
    println!("[derived key] process 1 exits; process 2 starts and re-issues the refund");

    let client = connect().await?;
    // The same refund, rebuilt from scratch; as JSON, field order would not
    // matter either: the key is derived from canonical JSON.
    let same_args = Refund {
        order: 4813,
        cents: 1250,
    };
    assert_eq!(
        REFUND.derive_key("orders", &same_args)?,
        IdempotencyKey::derive("orders", "refund", &json!({"cents": 1250, "order": 4813}))
    );
    let second = REFUND
        .call(&client, &same_args)
        .idempotency_key(REFUND.derive_key("orders", &same_args)?)
        .send()
        .await?;
    println!(
        "[derived key] process 2: key {} -> {:?} (replayed: {}, job {})",
        second.key,
        second.value,
        second.replayed,
        second.job_id.as_deref().unwrap_or("?")
    );
    println!(
        "[derived key] runtime received {} submit(s) with that key; refund executed {} time(s)",
        submits(&mock, first.key.as_str()),
        mock.executions_for_key(first.key.as_str())
    );

    // The claim: same derived key in both processes, one execution, and the
    // second process got the first one's stored answer.
    assert_eq!(first.key, second.key);
    assert_eq!(first.value, second.value);
    assert_eq!(first.job_id, second.job_id);
    assert!(!first.replayed && second.replayed);
    assert_eq!(submits(&mock, first.key.as_str()), 2);
    assert_eq!(mock.executions_for_key(first.key.as_str()), 1);
    assert_eq!(mock.executions("refund"), 2, "one per order");
    println!("ok: each refund ran once, across retries and a restart");
    Ok(())
}

/// How many `job.submit` envelopes carrying `key` the runtime received.
fn submits(mock: &MockRuntime, key: &str) -> usize {
    mock.received()
        .iter()
        .filter(|e| e.kind == "job.submit" && e.payload["idempotency_key"] == key)
        .count()
}
