//! Seeded soak: many calls, 64 in flight, through a proxy that kills the
//! connection every ~50 frames, against arcp-mock in each replay policy.
//! Checks every outcome's claim about execution against the runtime's
//! records (0 duplicate executions; "did not run" never ran; every execution
//! belongs to a call that says it ran or may have), no call ending more than
//! 100 ms past its deadline, and no state left in the client once every call
//! ended; prints calls, kills, executions, outcomes by kind, peak RSS, wall time.
//!
//! CI runs 1,000 calls per policy. The full soak (10,000 per policy):
//!
//! ```sh
//! ARCP_SOAK_CALLS=10000 cargo test --release --test soak -- --nocapture --test-threads 1
//! ```

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use arcp_mock::{ChaosProxy, Dialect, ReplayPolicy};
use arcp_sdk::{Client, Error, Execution, RetryPolicy};
use serde_json::json;
use support::mock::mock;

fn calls() -> usize {
    std::env::var("ARCP_SOAK_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// Peak resident set size of this process, in KiB (Linux).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

async fn soak(dialect: Dialect, policy: ReplayPolicy, seed: u64) {
    support::init_tracing();
    let calls = calls();
    let mock = mock(dialect).replay_policy(policy).start().await.unwrap();
    let proxy = ChaosProxy::builder(mock.address())
        .seed(seed)
        .kill_every_frames(50)
        .spare_first_frames(2)
        .start()
        .await
        .unwrap();
    let deadline = Duration::from_secs(30);
    let client = Client::builder(proxy.ws_url("/arcp"))
        .dialect(dialect)
        .max_in_flight(64)
        .handshake_timeout(Duration::from_secs(2))
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(5))
                .max_delay(Duration::from_millis(100))
                .max_attempts(60)
                .max_elapsed(Duration::from_secs(2))
                .outcome_poll(Duration::from_millis(20)),
        )
        .connect()
        .await
        .unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = (0..calls)
        .map(|i| {
            let call = client
                .invoke_tool("refund", json!({"order": i}))
                .deadline(deadline)
                .send();
            let key = call.key().cloned().expect("generated keys are valid");
            tokio::spawn(async move {
                let t = Instant::now();
                (key, call.await, t.elapsed())
            })
        })
        .collect();
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut ended = Vec::with_capacity(calls);
    let mut late = 0;
    for task in tasks {
        let (key, outcome, took) = task.await.expect("no call panicked");
        if took > deadline + Duration::from_millis(100) {
            late += 1;
        }
        ended.push((key, outcome));
    }
    // Nothing of a finished call stays behind in the client.
    let stats = client.stats().await;
    client.close().await;
    // Let the runtime finish what it still runs, then check every claim
    // against what it executed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let executed = mock.executions_by_key();
    let mut executions_claimed_or_possible = 0;
    for (key, outcome) in &ended {
        let runs = executed.get(key.as_str()).copied().unwrap_or(0);
        assert!(runs <= 1, "key {key} executed {runs} times");
        let kind = match outcome {
            Ok(out) => {
                assert_eq!(runs, 1, "{key}: a result without an execution");
                assert_eq!(out.key, *key);
                assert_eq!(out.value, json!({"refunded": out.value["refunded"]}));
                "ok".to_owned()
            }
            Err(e) => {
                match e.execution() {
                    Execution::NotRun => assert_eq!(runs, 0, "{key}: {e} but it ran"),
                    Execution::Ran => assert_eq!(runs, 1, "{key}: {e} but it did not run"),
                    _ => {} // may have run, at most once
                }
                assert!(
                    matches!(
                        e,
                        Error::OutcomeUnavailable { .. } | Error::RetriesExhausted { .. }
                    ),
                    "{policy:?}: unexpected outcome {e:?}"
                );
                e.code_name()
            }
        };
        if outcome.is_ok()
            || outcome
                .as_ref()
                .is_err_and(|e| e.execution() != Execution::NotRun)
        {
            executions_claimed_or_possible += runs;
        }
        *outcomes.entry(kind).or_default() += 1;
    }
    let rss = peak_rss_kib();
    println!(
        "{dialect} {policy:?}: {calls} calls, {} kills, {} executions, outcomes {outcomes:?}, \
         late {late}, {stats:?}, peak RSS {} MiB, {:.1} s",
        proxy.report().kills.len(),
        mock.executions("refund"),
        rss.map_or("?".into(), |k| (k / 1024).to_string()),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        executions_claimed_or_possible,
        mock.executions("refund"),
        "every execution belongs to a call that says it ran or may have"
    );
    assert_eq!(late, 0, "no call ended more than 100 ms past its deadline");
    assert_eq!((stats.calls, stats.requests), (0, 0), "{stats:?}");
    assert!(
        stats.cached_outcomes <= calls,
        "the outcome cache holds at most one entry per key: {stats:?}"
    );
    assert!(
        proxy.report().kills.len() > 5,
        "the proxy killed connections"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_v1_1_terminal_replay() {
    soak(Dialect::V1_1, ReplayPolicy::TerminalReplay, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_legacy_accepted_only() {
    soak(Dialect::Legacy, ReplayPolicy::AcceptedOnly, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_legacy_ack_replay() {
    soak(Dialect::Legacy, ReplayPolicy::AckReplay, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_legacy_terminal_only() {
    soak(Dialect::Legacy, ReplayPolicy::TerminalOnly, 4).await;
}
