//! Retry across a disconnect: the connection dies in the middle of a call, the
//! client reconnects, and the tool still runs exactly once.
//!
//! An embedded mock runtime hosts a slow `refund` tool that reports progress.
//! As soon as the first progress event reaches the client, the mock drops every
//! connection abruptly (no close frame, as a crashed load balancer would). The
//! client reconnects and resumes the session; the job that was already running
//! keeps reporting to it (had the runtime lost track, the client would re-send
//! the call with the same idempotency key and get the stored outcome). Either
//! way the refund is not paid twice.
//!
//! Run it (no setup needed):
//!
//! ```sh
//! cargo run --example retry_across_disconnect
//! RUST_LOG=arcp_sdk=debug cargo run --example retry_across_disconnect  # every client step
//! ```

use std::time::{Duration, Instant};

use arcp_mock::MockRuntime;
use arcp_sdk::{Client, EventBody, RetryPolicy};

// The refund tool's arguments and result, as the application types them.
#[allow(dead_code)] // each example uses part of it
#[path = "support/refund.rs"]
mod refund;

use refund::{refunded, Refund, Refunded, REFUND};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();

    // A runtime with one slow tool: three steps of 300 ms, each reported.
    let mock = MockRuntime::builder()
        .tool("refund", |args, ctx| async move {
            for step in 1..=3 {
                ctx.progress(step, 3).await;
                ctx.sleep(Duration::from_millis(300)).await;
            }
            Ok(refunded(&args))
        })
        .start()
        .await?;
    println!("runtime: mock listening on {}", mock.ws_url());

    let client = Client::builder(mock.ws_url())
        .bearer_token("demo-token")
        .retry(RetryPolicy::exponential().max_delay(Duration::from_secs(1)))
        .connect()
        .await?;

    let started = Instant::now();
    let order = Refund {
        order: 4812,
        cents: 500,
    };
    let mut call = REFUND.call(&client, &order).send();
    let key = call
        .key()
        .cloned()
        .expect("a generated key is always valid");
    println!("client:  refund order 4812 with idempotency key {key}");

    // Watch the call's events; cut the connection on the first one.
    let mut events = call.events();
    let watch = async {
        let mut killed = false;
        while let Some(event) = events.next().await {
            if let EventBody::Progress { current, total, .. } = event.typed() {
                let total = total.unwrap_or(0.0);
                println!("runtime: refund progress {current}/{total}");
            }
            if !killed {
                killed = true;
                mock.kill_connections();
                println!("network: connection killed mid-call (the refund is still running)");
            }
        }
    };
    let (out, ()) = tokio::join!(call, watch);
    let out = out?;

    println!(
        "client:  got {:?} after {:.1} s",
        out.value,
        started.elapsed().as_secs_f64()
    );
    println!(
        "         job:          {}",
        out.job_id.as_deref().unwrap_or("?")
    );
    println!(
        "         attempts:     {} (same key each time)",
        out.attempts
    );
    println!(
        "         replayed:     {} (true when the answer is a stored one)",
        out.replayed
    );
    println!("         connections:  {}", mock.connections());
    println!(
        "runtime: refund executed {} time(s)",
        mock.executions("refund")
    );

    // The claim: the call survived the cut, was sent again, and ran once.
    assert_eq!(
        out.value,
        Refunded {
            refunded: 4812,
            cents: 500
        }
    );
    assert!(mock.connections() >= 2, "the client reconnected");
    assert_eq!(mock.executions("refund"), 1, "the refund ran exactly once");
    println!("ok: one refund, despite the dropped connection");
    Ok(())
}
