//! The `metrics` feature, counted exactly: a seeded schedule of faults
//! against arcp-mock, and every figure the client reported checked against
//! what the calls returned, what `Client::events()` told, and what the mock
//! really did (its connection log and job table).
//!
//! One test per binary: the recorder is process-wide.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use arcp_mock::{Dialect, ErrorCode, Fault, MockRuntime, Preset};
use arcp_sdk::{ConnectionEvent, Error, IdempotencyKey, ToolOutput};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use serde_json::json;
use support::mock::{client, mock};

/// A small deterministic generator (xorshift64*), so a failing seed replays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// What one seed's calls did, as the metrics should count it.
#[derive(Default, Debug)]
struct Expected {
    started: u64,
    /// (outcome label, execution class) -> calls.
    ended: BTreeMap<(String, String), u64>,
    terminal_replays: u64,
    cache_replays: u64,
    duplicate_keys: u64,
}

fn label(result: &Result<ToolOutput, Error>) -> (String, String) {
    match result {
        Ok(_) => ("ok".into(), "ran".into()),
        Err(Error::Tool(e)) => ("tool_error".into(), e.execution.as_str().into()),
        Err(e) => (e.code_name().to_lowercase(), e.execution().as_str().into()),
    }
}

/// One metric of a snapshot: kind, name, labels, value.
type Metric = (MetricKind, String, Vec<(String, String)>, DebugValue);

/// Counters (summed over labels not given) and histogram sample counts.
struct Figures(Vec<Metric>);

impl Figures {
    fn take(snapshotter: &Snapshotter) -> Figures {
        Figures(
            snapshotter
                .snapshot()
                .into_vec()
                .into_iter()
                .map(|(ck, _, _, value)| {
                    let (kind, key) = ck.into_parts();
                    let labels = key
                        .labels()
                        .map(|l| (l.key().to_owned(), l.value().to_owned()))
                        .collect();
                    (kind, key.name().to_owned(), labels, value)
                })
                .collect(),
        )
    }

    fn counter(&self, name: &str, with: &[(&str, &str)]) -> u64 {
        self.0
            .iter()
            .filter(|(kind, n, labels, _)| {
                *kind == MetricKind::Counter
                    && n == name
                    && with
                        .iter()
                        .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, _, _, v)| match v {
                DebugValue::Counter(c) => *c,
                _ => 0,
            })
            .sum()
    }

    fn samples(&self, name: &str) -> Vec<f64> {
        self.0
            .iter()
            .filter(|(kind, n, _, _)| *kind == MetricKind::Histogram && n == name)
            .flat_map(|(_, _, _, v)| match v {
                DebugValue::Histogram(xs) => xs.iter().map(|x| x.into_inner()).collect(),
                _ => Vec::new(),
            })
            .collect()
    }

    fn ended(&self) -> BTreeMap<(String, String), u64> {
        let mut out = BTreeMap::new();
        for (kind, name, labels, value) in &self.0 {
            if *kind != MetricKind::Counter || name != "arcp_client_calls_ended_total" {
                continue;
            }
            let get = |k: &str| {
                labels
                    .iter()
                    .find(|(lk, _)| lk == k)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            if let DebugValue::Counter(c) = value {
                if *c > 0 {
                    *out.entry((get("outcome"), get("execution"))).or_default() += c;
                }
            }
        }
        out
    }
}

/// Terminal frames the mock sent on the connections of the sessions in
/// `sessions`: every one is a stored outcome when those sessions only
/// repeat finished calls.
fn mock_terminals_sent_to(mock: &MockRuntime, sessions: &[String]) -> u64 {
    mock.connection_log()
        .iter()
        .filter(|conn| {
            conn.sent.iter().any(|e| {
                e.kind == "session.welcome"
                    && [e.session_id.as_deref(), e.payload["session_id"].as_str()]
                        .into_iter()
                        .flatten()
                        .any(|id| sessions.iter().any(|s| s == id))
            })
        })
        .flat_map(|conn| conn.sent.iter())
        .filter(|e| matches!(e.kind.as_str(), "job.result" | "job.error"))
        .count() as u64
}

async fn run_seed(seed: u64, snapshotter: &Snapshotter) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    // Odd seeds: a runtime whose resumed session does not re-attach
    // running jobs (as Python 1.1.3), so lost terminals come back as
    // replays; even seeds: one that re-attaches them (live, not replays).
    let builder = mock(Dialect::V1_1);
    let builder = if seed % 2 == 1 {
        builder.preset(Preset::Python113)
    } else {
        builder
    };
    let mock = builder.start().await.unwrap();
    let first = client(&mock.ws_url(), Dialect::V1_1).connect_lazy();
    // Another process with the same keys: no shared cache, so the runtime
    // answers its repeats with stored terminals.
    let other = client(&mock.ws_url(), Dialect::V1_1).connect_lazy();
    let client = first;
    let mut events = client.events();
    let mut other_events = other.events();
    let mut expected = Expected::default();
    let mut done: Vec<(IdempotencyKey, u64)> = Vec::new();
    let mut other_did: Vec<IdempotencyKey> = Vec::new();
    for order in 0..30u64 {
        let choice = rng.below(9);
        let (key, args, cached) = match choice {
            // The same call from the other process: a stored terminal.
            8 if !done.is_empty() => {
                let (key, order) = done[rng.below(done.len() as u64) as usize].clone();
                let result = other
                    .invoke_tool("refund", json!({"order": order, "ms": 20}))
                    .idempotency_key(key.clone())
                    .send()
                    .await;
                expected.started += 1;
                *expected.ended.entry(label(&result)).or_default() += 1;
                let out = result.unwrap_or_else(|e| panic!("seed {seed}, call {order}: {e}"));
                assert!(out.replayed, "seed {seed}: a stored terminal is a replay");
                // Its second repeat of a key is answered by its own cache.
                if other_did.contains(&key) {
                    expected.cache_replays += 1;
                } else {
                    expected.terminal_replays += 1;
                    other_did.push(key);
                }
                continue;
            }
            // The same call again: this client's cache answers.
            6 if !done.is_empty() => {
                let (key, order) = done[rng.below(done.len() as u64) as usize].clone();
                (key, json!({"order": order, "ms": 20}), true)
            }
            // The same key for another intent: refused from the cache.
            7 if !done.is_empty() => {
                let (key, _) = done[rng.below(done.len() as u64) as usize].clone();
                (key, json!({"order": 10_000 + order}), true)
            }
            _ => {
                match choice {
                    1 => mock.inject(Fault::DropAfterAccepted),
                    2 => mock.inject(Fault::DropOnSubmit),
                    3 => mock.inject(Fault::DropBeforeTerminal),
                    4 => mock.inject(Fault::RejectNextSubmit {
                        code: ErrorCode::Unavailable,
                        retry_after: None,
                    }),
                    _ => {}
                }
                (
                    IdempotencyKey::new(),
                    json!({"order": order, "ms": 20}),
                    false,
                )
            }
        };
        let result = client
            .invoke_tool("refund", args)
            .idempotency_key(key.clone())
            .send()
            .await;
        mock.clear_faults();
        expected.started += 1;
        *expected.ended.entry(label(&result)).or_default() += 1;
        match &result {
            Ok(out) if cached => {
                assert!(out.replayed, "seed {seed}: a cache answer is a replay");
                expected.cache_replays += 1;
            }
            Ok(out) => {
                expected.terminal_replays += u64::from(out.replayed);
                done.push((key, order));
            }
            Err(Error::DuplicateKey { .. }) => expected.duplicate_keys += 1,
            Err(e) => panic!("seed {seed}, call {order}: {e}"),
        }
    }
    client.close().await;
    other.close().await;
    let figures = Figures::take(snapshotter);

    let context = format!("seed {seed}: {expected:?}");
    eprintln!("{context}");
    assert_eq!(
        figures.counter("arcp_client_calls_started_total", &[]),
        expected.started,
        "{context}"
    );
    assert_eq!(figures.ended(), expected.ended, "{context}");
    assert_eq!(
        figures.counter("arcp_client_replays_total", &[("kind", "terminal")]),
        expected.terminal_replays,
        "{context}"
    );
    assert_eq!(
        figures.counter("arcp_client_replays_total", &[("kind", "cache")]),
        expected.cache_replays,
        "{context}"
    );
    assert_eq!(
        figures.counter("arcp_client_duplicate_keys_total", &[]),
        expected.duplicate_keys,
        "{context}"
    );
    assert_eq!(
        figures.samples("arcp_client_call_duration_seconds").len() as u64,
        expected.started,
        "{context}"
    );
    // Every tool ran once per fresh call, whatever the faults.
    let fresh = done.len() as u64;
    assert_eq!(mock.executions("refund"), fresh, "{context}");

    // Sessions and reconnects: as the events told, and as the mock saw.
    let mut connected = 0;
    let mut reconnecting = 0;
    let mut other_sessions = Vec::new();
    for (events, is_other) in [(&mut events, false), (&mut other_events, true)] {
        while let Ok(Some(event)) = tokio::time::timeout(Duration::ZERO, events.next()).await {
            match event {
                ConnectionEvent::Connected { session_id, .. } => {
                    connected += 1;
                    if is_other {
                        other_sessions.push(session_id);
                    }
                }
                ConnectionEvent::Reconnecting { .. } => reconnecting += 1,
                _ => {}
            }
        }
    }
    assert_eq!(
        expected.terminal_replays,
        mock_terminals_sent_to(&mock, &other_sessions),
        "{context}: the client's terminal replays are the terminals the mock replayed"
    );
    let welcomed = mock
        .connection_log()
        .iter()
        .filter(|c| c.sent.iter().any(|e| e.kind == "session.welcome"))
        .count() as u64;
    assert_eq!(
        figures.counter("arcp_client_sessions_total", &[]),
        connected,
        "{context}"
    );
    assert_eq!(
        connected, welcomed,
        "{context}: one session per mock welcome"
    );
    assert_eq!(
        figures.counter("arcp_client_reconnects_total", &[]),
        reconnecting,
        "{context}"
    );
    assert!(
        figures.counter("arcp_client_bytes_sent_total", &[]) > 0
            && figures.counter("arcp_client_bytes_received_total", &[]) > 0,
        "{context}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_exactly_what_happened_under_seeded_faults() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder in this binary");
    let first: u64 = std::env::var("ARCP_METRICS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let seeds: u64 = std::env::var("ARCP_METRICS_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    for seed in first..first + seeds {
        run_seed(seed, &snapshotter).await;
    }
}
