//! Seeded soak: many calls, 64 in flight, through a proxy that kills the
//! connection every ~50 frames, against arcp-mock in each replay policy.
//! Asserts 0 duplicate executions, 0 lost calls, 0 hung calls, bounded memory,
//! and prints calls, kills, executions, outcomes by kind, peak RSS, wall time.
//!
//! CI runs 1,000 calls per policy. The full soak (10,000 per policy):
//!
//! ```sh
//! ARCP_SOAK_CALLS=10000 cargo test --release --test soak -- --nocapture --test-threads 1
//! ```

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use arcp::client::{Client, Error, RetryPolicy};
use arcp::mock::{ChaosProxy, Dialect, ReplayPolicy};
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
                .invoke("refund", json!({"order": i}))
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
    let mut hung = 0;
    for task in tasks {
        let (key, outcome, took) = task.await.expect("no call panicked");
        if took > deadline + Duration::from_secs(1) {
            hung += 1;
        }
        let executions = mock.executions_for_key(key.as_str());
        assert!(executions <= 1, "key {key} executed {executions} times");
        let kind = match &outcome {
            Ok(out) => {
                assert_eq!(executions, 1, "a result without an execution");
                assert_eq!(out.key, key);
                "ok".to_owned()
            }
            Err(e @ (Error::OutcomeUnavailable { .. } | Error::RetriesExhausted { .. })) => {
                e.code_name()
            }
            Err(e) => panic!("{policy:?}: unexpected outcome {e:?}"),
        };
        *outcomes.entry(kind).or_default() += 1;
    }
    let resolved: u64 = outcomes.values().sum();
    let rss = peak_rss_kib();
    println!(
        "{dialect} {policy:?}: {calls} calls, {} kills, {} executions, outcomes {outcomes:?}, \
         hung {hung}, peak RSS {} MiB, {:.1} s",
        proxy.report().kills.len(),
        mock.executions("refund"),
        rss.map_or("?".into(), |k| (k / 1024).to_string()),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(resolved, calls as u64, "every call resolved (none lost)");
    assert_eq!(hung, 0, "no call waited past its deadline");
    assert!(
        proxy.report().kills.len() > 5,
        "the proxy killed connections"
    );
    if let Some(kib) = rss {
        assert!(
            kib < 1024 * 1024,
            "memory stays bounded: peak RSS {kib} KiB"
        );
    }
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
