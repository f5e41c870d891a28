//! The same call over the HTTP binding: one `POST` per attempt, the key in
//! the `Idempotency-Key` header, and a response cut short mid-call.
//!
//! Some runtimes sit behind gateways that only speak request/response HTTP.
//! Give the client an `http://` or `https://` URL and it uses the binding in
//! `docs/http-binding.md`: the call keeps one idempotency key across
//! attempts, a broken response is retried with that key, `409` (the first
//! request is still running) means "ask again later", and the runtime's
//! stored answer comes back (marked `Arcp-Replayed: true`; the client knows
//! the job is the one its own first request started, so it reports no
//! replay). The tool runs once.
//!
//! Run it: `cargo run --example http_invoke --features http`

use std::time::Duration;

use arcp_mock::{Fault, MockRuntime};
use arcp_sdk::{Client, Error, RetryPolicy};
use arcp_types::IdempotencyKey;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mock = MockRuntime::builder()
        .tool("refund", |args, ctx| async move {
            // Long enough for the retries to find it still running.
            ctx.sleep(Duration::from_millis(600)).await;
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await
        .expect("the mock runtime binds a loopback port");
    println!("runtime over HTTP at {}", mock.http_url());

    // The first response is cut right after `job.accepted`, as a flaky
    // gateway or network would: the client cannot know the outcome.
    mock.inject(Fault::DropAfterAccepted);

    let client = Client::builder(mock.http_url())
        .retry(RetryPolicy::exponential().outcome_poll(Duration::from_millis(200)))
        .connect()
        .await?;
    let key = IdempotencyKey::try_from("refund-order-4812").expect("printable ASCII");
    let out = client
        .invoke_tool("refund", json!({"order": 4812}))
        .idempotency_key(key.clone())
        .send()
        .await?;

    println!("result: {}", out.value);
    println!(
        "  {} request(s) sent with key {key}; the answer was {}",
        out.attempts,
        if out.replayed {
            "a stored outcome of an earlier call (replayed)"
        } else {
            "this call's own job (its first request started it), not a replay"
        }
    );
    println!(
        "  HTTP requests the runtime saw: {}; times the tool ran: {}",
        mock.http_requests(),
        mock.executions("refund")
    );
    assert_eq!(mock.executions("refund"), 1);
    // The job the first request started is this call's own execution,
    // however its outcome arrives: no replay.
    assert!(out.attempts >= 2 && !out.replayed);

    // The same key with other arguments: the runtime answers 422, which is
    // `Error::DuplicateKey`, never retried. (A fresh client, so that the
    // refusal comes from the runtime rather than the client's outcome cache.)
    let other = Client::builder(mock.http_url()).connect().await?;
    let refused = other
        .invoke_tool("refund", json!({"order": 9999}))
        .idempotency_key(key.clone())
        .send()
        .await;
    match &refused {
        Err(Error::DuplicateKey { message, .. }) => {
            println!("same key, other arguments: DUPLICATE_KEY ({message})")
        }
        other => panic!("expected DuplicateKey, got {other:?}"),
    }
    assert_eq!(mock.executions("refund"), 1);
    println!("ok: the refund ran exactly once");
    Ok(())
}
