//! Chaos: 1,000 calls, 32 in flight, through a proxy that kills the
//! connection every ~50 frames on a seeded schedule. Every call resolves,
//! each key executes exactly once, and no call waits past its deadline.

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use arcp_mock::{ChaosProxy, Dialect, ReplayPolicy};
use arcp_sdk::{Client, RetryPolicy};
use serde_json::json;
use support::mock::mock;

async fn chaos(dialect: Dialect, policy: ReplayPolicy, calls: usize, seed: u64) {
    let mock = mock(dialect).replay_policy(policy).start().await.unwrap();
    let proxy = ChaosProxy::builder(mock.address())
        .seed(seed)
        .kill_every_frames(50)
        .spare_first_frames(2)
        .start()
        .await
        .unwrap();
    let deadline = Duration::from_secs(60);
    let client = Client::builder(proxy.ws_url("/arcp"))
        .dialect(dialect)
        .max_in_flight(32)
        .handshake_timeout(Duration::from_secs(2))
        // Each kill re-sends every unaccepted call, so a call may be cut many
        // times in a row: a generous attempt budget, a short backoff.
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(5))
                .max_delay(Duration::from_millis(100))
                .max_attempts(100)
                .max_elapsed(Duration::from_secs(30))
                .outcome_poll(Duration::from_millis(50)),
        )
        .connect()
        .await
        .unwrap();
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(calls);
    for i in 0..calls {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let out = client
                .invoke_tool("refund", json!({"order": i}))
                .deadline(deadline)
                .send()
                .await;
            (i, out, t.elapsed())
        }));
    }
    let mut keys = HashSet::new();
    let mut attempts = 0u64;
    for task in tasks {
        let (i, out, took) = task.await.unwrap();
        let out = out.unwrap_or_else(|e| panic!("call {i}: {e:?}"));
        assert_eq!(out.value, json!({"refunded": i}));
        assert!(took <= deadline, "call {i} waited past its deadline");
        assert!(keys.insert(out.key.to_string()));
        attempts += u64::from(out.attempts);
    }
    let report = proxy.report();
    for key in &keys {
        assert_eq!(
            mock.executions_for_key(key),
            1,
            "key {key} ran more than once"
        );
    }
    assert_eq!(mock.executions("refund"), calls as u64);
    assert!(
        report.kills.len() >= 10,
        "the proxy did kill connections: {report:?}"
    );
    println!(
        "{dialect}: {calls} calls, {} kills, {attempts} sends, {} executions, {:.1} s",
        report.kills.len(),
        mock.executions("refund"),
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_1000_calls_v1_1_terminal_replay() {
    chaos(Dialect::V1_1, ReplayPolicy::TerminalReplay, 1000, 7).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_1000_calls_legacy_terminal_only() {
    chaos(Dialect::Legacy, ReplayPolicy::TerminalOnly, 1000, 11).await;
}
