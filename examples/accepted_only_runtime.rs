//! A runtime that replays only `job.accepted`: the recovery ladder, and
//! `Error::OutcomeUnavailable` when the outcome cannot be had.
//!
//! The published Rust runtime (legacy dialect), like the TS, Go and Java ones,
//! answers a retried key with `job.accepted` for the original job and never
//! with its stored result. If the connection drops just before the result is
//! sent, the client cannot get it back: it waits on the live stream, re-sends
//! with the same key after growing pauses, and when the retry budget is spent
//! it ends with `OutcomeUnavailable { key, job_id }`. That is an honest answer:
//! the tool ran (once); what is unknown is only its result. Keep the key (and
//! job id): asking again with it never runs the tool a second time.
//!
//! The mock plays that runtime (`Dialect::Legacy`, `ReplayPolicy::AcceptedOnly`)
//! and drops the connection instead of sending the result
//! (`Fault::DropBeforeTerminal`). A short `RetryPolicy` ends it in a few seconds.
//!
//! Run it: `cargo run --example accepted_only_runtime`
//! (`RUST_LOG=arcp_sdk=debug` shows the client's reasoning at each step.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arcp_mock::{Dialect, Fault, MockRuntime, ReplayPolicy};
use arcp_sdk::{Client, Error, RetryPolicy};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let mock = MockRuntime::builder()
        .dialect(Dialect::Legacy)
        .replay_policy(ReplayPolicy::AcceptedOnly)
        .tool("refund", |args, ctx| async move {
            ctx.sleep(Duration::from_millis(200)).await;
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await?;
    mock.inject(Fault::DropBeforeTerminal);

    let started = Instant::now();
    let client = Client::builder(mock.ws_url())
        .dialect(Dialect::Legacy)
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(100))
                .max_delay(Duration::from_secs(1))
                .outcome_poll(Duration::from_millis(250))
                .max_attempts(5)
                .max_elapsed(Duration::from_secs(3)),
        )
        .connect()
        .await?;

    // Print what the client sends, as the runtime receives it, while the call
    // runs. Each `tool.invoke` after the first is answered with `job.accepted`
    // for the original job, and nothing more.
    let done = AtomicBool::new(false);
    let call = async {
        let outcome = client.invoke_tool("refund", json!({"order": 4812})).await;
        done.store(true, Ordering::Release);
        outcome
    };
    let trace = async {
        let mut seen = 0;
        while !done.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            for envelope in mock.received().into_iter().skip(seen) {
                seen += 1;
                let note = match (envelope.kind.as_str(), envelope.idempotency_key) {
                    ("tool.invoke", Some(key)) => format!("refund, key {key}"),
                    ("session.open", _) if seen > 1 => "reconnect (no resume in legacy)".into(),
                    _ => String::new(),
                };
                let t = started.elapsed().as_secs_f64();
                println!("{t:5.2}s client -> runtime: {:12} {note}", envelope.kind);
            }
        }
    };
    let (outcome, ()) = tokio::join!(call, trace);

    let Err(Error::OutcomeUnavailable {
        key,
        job_id,
        reason,
        ..
    }) = outcome
    else {
        panic!("expected OutcomeUnavailable, got {outcome:?}");
    };
    let job_id = job_id.expect("the runtime named the job when it accepted it");
    println!(
        "{:5.2}s client gives up: OUTCOME_UNAVAILABLE",
        started.elapsed().as_secs_f64()
    );
    println!("       key:    {key}  (keep it: asking again with it is always safe)");
    println!("       job:    {job_id}");
    println!("       reason: {reason}");
    println!(
        "runtime: refund executed {} time(s)",
        mock.executions("refund")
    );
    assert_eq!(mock.executions("refund"), 1, "it ran exactly once");

    // Later: ask again with the key. The runtime recognises the job (same job
    // id) and does not run it again; this runtime still keeps the result to
    // itself, so it is its job records, by job id, that hold the answer.
    let later = client
        .invoke_tool("refund", json!({"order": 4812}))
        .idempotency_key(key.clone())
        .deadline(Duration::from_secs(1))
        .send()
        .await;
    let Err(later) = later else {
        panic!("this runtime never replays the result, got {later:?}");
    };
    println!(
        "later, same key: accepted as job {} again (no new run), result still withheld: {}",
        later.job_id().unwrap_or("?"),
        later.code_name()
    );
    println!(
        "runtime: refund executed {} time(s)",
        mock.executions("refund")
    );
    assert_eq!(later.job_id(), Some(job_id.as_str()), "the same job");
    assert_eq!(
        mock.executions("refund"),
        1,
        "asking again did not re-run it"
    );
    println!("ok: ran once; the outcome is unavailable, and the key names it for later");
    Ok(())
}
