//! The same key with a different intent is refused with `Error::DuplicateKey`.
//!
//! An idempotency key names one logical call: one tool with one set of
//! arguments. Re-using it for *different* arguments is a bug in the caller
//! (two intents sharing a key), and the runtime refuses it rather than
//! guessing which one you meant: nothing runs, and the call ends with
//! `Error::DuplicateKey`. It is never retried, because retrying cannot help.
//!
//! What to do: if it really is a new intent (a second, different refund),
//! give it a new key (a fresh one, or one derived from the new arguments). If
//! it was meant to be the same call, send the original arguments again: that
//! is always safe and gets the stored answer.
//!
//! Run it: `cargo run --example duplicate_key`

use arcp_sdk::{Client, Error};
use arcp_types::IdempotencyKey;
use serde_json::json;

#[allow(dead_code)] // each example uses part of it
#[path = "support/refund.rs"]
mod refund;

use refund::refund_runtime;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mock = refund_runtime().await;
    let client = Client::builder(mock.ws_url()).connect().await?;

    let key = IdempotencyKey::try_from("refund-order-4812").expect("printable ASCII");
    let refund = |cents: u64| {
        client
            .invoke_tool("refund", json!({"order": 4812, "cents": cents}))
            .idempotency_key(key.clone())
            .send()
    };

    let out = refund(500).await?;
    println!(
        "refund 500 cents with key {key}: {} (job {})",
        out.value,
        out.job_id.as_deref().unwrap_or("?")
    );

    // Same key, different arguments: this client remembers the key's intent
    // and refuses locally, without a round trip.
    let local = refund(5000).await;
    println!(
        "refund 5000 cents with the same key, same client: {}",
        describe(&local)
    );
    assert!(matches!(local, Err(Error::DuplicateKey { .. })));

    // Another client (another process, say) knows nothing of the key: the
    // runtime itself refuses the conflicting intent.
    let other = Client::builder(mock.ws_url()).connect().await?;
    let remote = other
        .invoke_tool("refund", json!({"order": 4812, "cents": 5000}))
        .idempotency_key(key.clone())
        .send()
        .await;
    println!(
        "refund 5000 cents with the same key, other client: {}",
        describe(&remote)
    );
    let Err(Error::DuplicateKey { key: refused, .. }) = &remote else {
        panic!("expected DuplicateKey, got {remote:?}");
    };
    assert_eq!(refused, &key);
    println!(
        "  -> nothing ran; refund executions so far: {}",
        mock.executions("refund")
    );
    assert_eq!(mock.executions("refund"), 1);

    // Fix A: it is the same refund after all. Same key, same arguments: safe,
    // and answered with the stored outcome of the one execution.
    let again = client
        .invoke_tool("refund", json!({"order": 4812, "cents": 500}))
        .idempotency_key(key.clone())
        .send()
        .await?;
    println!(
        "same key, original arguments: {} (replayed: {})",
        again.value, again.replayed
    );
    assert!(again.replayed && again.job_id == out.job_id);

    // Fix B: it is a second, different refund. It needs its own key.
    let args = json!({"order": 4812, "cents": 5000, "reason": "second refund"});
    let new_key = IdempotencyKey::derive("orders", "refund", &args);
    let second = other
        .invoke_tool("refund", args)
        .idempotency_key(new_key.clone())
        .send()
        .await?;
    println!(
        "new key {new_key}: {} (replayed: {})",
        second.value, second.replayed
    );

    println!(
        "refund executed {} time(s): the first refund and the second",
        mock.executions("refund")
    );
    assert_eq!(mock.executions("refund"), 2);
    assert_eq!(mock.executions_for_key(key.as_str()), 1);
    println!("ok: a conflicting key never runs the tool; a new intent gets a new key");
    Ok(())
}

fn describe(outcome: &Result<arcp_sdk::ToolOutput, Error>) -> String {
    match outcome {
        Ok(out) => format!("ok {}", out.value),
        Err(Error::DuplicateKey { message, .. }) => format!("DUPLICATE_KEY ({message})"),
        Err(e) => e.to_string(),
    }
}
