//! Streaming the progress and log events of one call while awaiting its result.
//!
//! `client.invoke_tool(..).send()` returns an `Invocation`: a future of the outcome
//! that also hands out the call's event stream (`call.events()`, taken before
//! awaiting) and a cloneable handle (`call.handle()`) to read the job id from
//! another task. Events are typed with `event.typed()` (progress, log, metric,
//! result chunk, other) and deduplicated across reconnects; the stream ends
//! when the call does.
//!
//! Here a `reindex` tool on the embedded mock runtime reports five progress
//! steps, a log line at each step and a cost metric; a spawned task prints them
//! as they arrive while the main task awaits the result.
//!
//! Run it: `cargo run --example progress_events`

use std::time::{Duration, Instant};

use arcp_mock::MockRuntime;
use arcp_sdk::{Client, Error, EventBody};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mock = MockRuntime::builder()
        .tool("reindex", |args, ctx| async move {
            let shards = args["shards"].as_u64().unwrap_or(1);
            for shard in 1..=shards {
                ctx.sleep(Duration::from_millis(100)).await;
                ctx.log("info", format!("shard {shard} reindexed")).await;
                ctx.progress(shard, shards).await;
            }
            ctx.metric("cost", 0.002 * shards as f64, "USD").await;
            Ok(json!({"documents": 1000 * shards}))
        })
        .start()
        .await
        .expect("the mock runtime binds a loopback port");
    let client = Client::builder(mock.ws_url()).connect().await?;

    let started = Instant::now();
    let mut call = client
        .invoke_tool("reindex", json!({"shards": 5}))
        .deadline(Duration::from_secs(10))
        .send();
    let mut events = call.events();
    let handle = call.handle();
    println!(
        "client: reindex started with key {}",
        handle.key().expect("valid key")
    );

    // A separate task renders the events; it returns what it saw.
    let printer = tokio::spawn(async move {
        let mut progress = Vec::new();
        let mut logs = 0;
        while let Some(event) = events.next().await {
            let t = started.elapsed().as_secs_f64();
            let job = handle.job_id().unwrap_or_default();
            match event.typed() {
                EventBody::Progress { current, total, .. } => {
                    let total = total.unwrap_or(0.0);
                    println!("{t:4.1}s {job} progress {current}/{total}");
                    progress.push(current);
                }
                EventBody::Log { level, message } => {
                    println!("{t:4.1}s {job} log [{level}] {message}");
                    logs += 1;
                }
                EventBody::Metric { name, value, unit } => {
                    println!(
                        "{t:4.1}s {job} metric {name} = {value} {}",
                        unit.unwrap_or_default()
                    );
                }
                other => println!("{t:4.1}s {job} other event {other:?}"),
            }
        }
        println!("       (event stream ended with the call)");
        (progress, logs)
    });

    let out = call.await?;
    let (progress, logs) = printer.await.expect("the printer task does not panic");
    println!(
        "client: result {} after {:.1} s (attempts: {})",
        out.value,
        started.elapsed().as_secs_f64(),
        out.attempts
    );

    // The claim: every event arrived, in order, before the stream ended.
    assert_eq!(progress, [1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(logs, 5);
    assert_eq!(out.value, json!({"documents": 5000}));
    assert_eq!(mock.executions("reindex"), 1);
    println!("ok: 5 progress events, 5 log lines and a metric, then the result");
    Ok(())
}
