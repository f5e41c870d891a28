//! Metrics under chaos, in the Prometheus text format: 40 calls against an
//! embedded mock runtime behind a connection killer, then every figure the
//! client reported (calls by outcome and by whether the tool ran, replays
//! by kind, sessions, reconnects, latency, bytes).
//!
//! arcp-sdk reports through the `metrics` facade (its `metrics`
//! feature); the application picks the exporter. Here it is
//! `metrics-exporter-prometheus`, rendered once at the end; a service
//! would serve `handle.render()` on its `/metrics` endpoint.
//!
//! ```sh
//! cargo run --example metrics_prometheus --features metrics
//! ```

use std::time::Duration;

use arcp_mock::{ChaosProxy, MockRuntime};
use arcp_sdk::{Client, IdempotencyKey, RetryPolicy};
use metrics_exporter_prometheus::PrometheusBuilder;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let handle = PrometheusBuilder::new().install_recorder()?;

    let mock = MockRuntime::builder()
        .tool("refund", |args, ctx| async move {
            ctx.sleep(Duration::from_millis(20)).await;
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await?;
    // Cut some connections after a few hundred bytes: reconnects, resumes
    // and replays happen on their own.
    let proxy = ChaosProxy::builder(mock.address())
        .seed(7)
        .kill_every_frames(25)
        .start()
        .await?;

    let client = Client::builder(proxy.ws_url("/arcp"))
        .retry(RetryPolicy::exponential().max_delay(Duration::from_millis(200)))
        .connect()
        .await?;
    let mut keys = Vec::new();
    for order in 0..40 {
        let key = IdempotencyKey::new();
        let _ = client
            .invoke_tool("refund", json!({"order": order}))
            .idempotency_key(key.clone())
            .send()
            .await;
        keys.push((key, order));
    }
    // Five calls again (answered by the client's outcome cache), and one
    // key reused for another intent (refused: DUPLICATE_KEY).
    for (key, order) in keys.iter().take(5) {
        let _ = client
            .invoke_tool("refund", json!({"order": order}))
            .idempotency_key(key.clone())
            .send()
            .await;
    }
    if let Some((key, _)) = keys.first() {
        let _ = client
            .invoke_tool("refund", json!({"order": -1}))
            .idempotency_key(key.clone())
            .send()
            .await;
    }
    client.close().await;

    println!("{}", handle.render());
    println!(
        "# the mock ran `refund` {} times for 40 distinct calls",
        mock.executions("refund")
    );
    Ok(())
}
