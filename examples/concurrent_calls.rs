//! Many concurrent calls on one connection through a chaos proxy; every call
//! executes exactly once.
//!
//! 200 `charge` calls share one client (one WebSocket, at most 32 in flight,
//! the rest wait for a slot). Between the client and the embedded mock runtime
//! a `ChaosProxy` kills the connection abruptly every ~100 WebSocket frames, on
//! a schedule drawn from a seed. Each kill strands dozens of calls at once,
//! some before the runtime saw them, some mid-execution, some with the result
//! in flight. The client reconnects, resumes the session and re-sends each
//! unfinished call with its own key; the runtime deduplicates. In the end each
//! of the 200 keys executed once: no charge lost, none doubled.
//!
//! Run it: `cargo run --example concurrent_calls`
//! (change `SEED` to get another, equally reproducible, kill schedule)

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use arcp_mock::{ChaosProxy, MockRuntime};
use arcp_sdk::{Client, RetryPolicy};
use serde_json::json;

const CALLS: u64 = 200;
const SEED: u64 = 7;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mock = MockRuntime::builder()
        .tool("charge", |args, ctx| async move {
            // 5..=45 ms of "work", varied per call so completions interleave.
            let n = args["n"].as_u64().unwrap_or(0);
            ctx.sleep(Duration::from_millis(5 + (n * 37) % 41)).await;
            Ok(json!({"charged": n}))
        })
        .start()
        .await?;
    let proxy = ChaosProxy::builder(mock.address())
        .seed(SEED)
        .kill_every_frames(100)
        .start()
        .await?;

    let client = Client::builder(proxy.ws_url("/arcp"))
        .max_in_flight(32)
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(20))
                .max_delay(Duration::from_millis(500))
                // Every kill costs each call in flight one attempt: allow plenty.
                .max_attempts(20),
        )
        .connect()
        .await?;

    let started = Instant::now();
    let calls: Vec<_> = (0..CALLS)
        .map(|n| {
            let client = client.clone();
            tokio::spawn(async move { client.invoke_tool("charge", json!({"n": n})).await })
        })
        .collect();
    let mut outputs = Vec::new();
    for (n, call) in (0..CALLS).zip(calls) {
        let out = call.await?.map_err(|e| format!("charge {n} failed: {e}"))?;
        assert_eq!(out.value, json!({"charged": n}));
        outputs.push(out);
    }
    let elapsed = started.elapsed();

    let report = proxy.report();
    let mut by_attempts = BTreeMap::new();
    for out in &outputs {
        *by_attempts.entry(out.attempts).or_insert(0) += 1;
    }
    let replayed = outputs.iter().filter(|o| o.replayed).count();
    println!("{CALLS} calls, max 32 in flight, chaos seed {SEED}: done in {elapsed:.2?}");
    println!(
        "proxy:   {} connection(s), {} killed, {} frames forwarded",
        report.connections,
        report.kills.len(),
        report.frames_forwarded
    );
    let kills: Vec<String> = report
        .kills
        .iter()
        .map(|k| k.after_frames.to_string())
        .collect();
    println!("         kills came after {} frames", kills.join(", "));
    let histogram: Vec<String> = by_attempts
        .iter()
        .map(|(a, n)| format!("{n} took {a}"))
        .collect();
    println!("client:  attempts per call: {}", histogram.join(", "));
    println!("client:  {replayed} answer(s) marked replayed (an earlier attempt may have started the job)");
    let once = outputs
        .iter()
        .filter(|o| mock.executions_for_key(o.key.as_str()) == 1)
        .count();
    println!(
        "runtime: {} executions in all; {once} of {CALLS} keys executed exactly once",
        mock.total_executions()
    );

    // The claim: despite the kills, every call ran exactly once.
    assert!(!report.kills.is_empty(), "the proxy did kill connections");
    assert_eq!(once as u64, CALLS);
    assert_eq!(mock.total_executions(), CALLS);
    println!("ok: every charge ran exactly once");
    Ok(())
}
