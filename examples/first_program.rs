//! The READMEs' first program, verbatim: typed calls of the `refund` tool
//! on a runtime at `ws://127.0.0.1:7777/arcp`. Unlike the other examples it
//! needs a runtime running there: `arcp mock serve --port 7777` (from a
//! clone: `cargo run -p arcp-cli -- mock serve --port 7777`), then
//! `cargo run --example first_program`. `tests/readme.rs` checks that the
//! READMEs show this file.

use std::time::Duration;

use arcp_sdk::{Client, Error, RetryPolicy, Tool};
use serde::{Deserialize, Serialize};

#[derive(Serialize)]
struct Refund {
    order: u64,
    cents: u64,
}

#[derive(Deserialize)]
struct Refunded {
    refunded: u64,
}

// A tool's name with its argument and result types.
const REFUND: Tool<Refund, Refunded> = Tool::new("refund");

#[tokio::main]
async fn main() -> Result<(), Error> {
    let client = Client::builder("ws://127.0.0.1:7777/arcp")
        .bearer_token(std::env::var("ARCP_TOKEN").unwrap_or_default())
        .retry(
            RetryPolicy::exponential()
                .max_attempts(8)
                .max_delay(Duration::from_secs(5)),
        )
        .connect()
        .await?;

    // The common case: a fresh key (UUIDv7), retries and replays handled.
    let args = Refund {
        order: 4812,
        cents: 500,
    };
    let out = REFUND.call(&client, &args).await?;
    println!(
        "refunded order {} ({} attempt(s))",
        out.value.refunded, out.attempts
    );

    // A key stable across process restarts (UUIDv5 of the intent), a
    // deadline, and the job's progress events while it runs.
    let key = REFUND.derive_key("orders", &args)?;
    let mut call = REFUND
        .call(&client, &args)
        .idempotency_key(key)
        .deadline(Duration::from_secs(30))
        .send();
    let mut events = call.events();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            println!("{:?}", event.typed());
        }
    });
    let out = call.await?;
    println!(
        "refunded order {} (replayed: {})",
        out.value.refunded, out.replayed
    );

    // Without a descriptor: JSON in and out.
    let out = client
        .invoke_tool("refund", serde_json::json!({"order": 4813, "cents": 100}))
        .await?;
    println!("refunded: {}", out.value);
    Ok(())
}
