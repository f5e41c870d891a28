//! Recovery: how long a call takes to reach its outcome when its connection
//! is killed mid-call, against `arcp-mock`'s `MockRuntime` (in this process,
//! on loopback) with one-shot `Fault`s, one fresh call per trial.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arcp_mock::{Fault, MockRuntime, ReplayPolicy};
use arcp_sdk::{Client, Dialect, Error, RetryPolicy};
use serde_json::json;

/// One scenario's figures.
pub(crate) struct Row {
    pub name: String,
    pub policy: String,
    pub measured_from: &'static str,
    pub trials: usize,
    pub lat_ms: Vec<f64>,
    pub outcomes: String,
    pub executions_per_call: f64,
}

struct Scenario {
    name: &'static str,
    dialect: Dialect,
    replay: ReplayPolicy,
    reattach: bool,
    fault: Fault,
    /// Measure from the tool's end (the kill happens right after it) instead
    /// of from the call's start.
    from_tool_end: bool,
    policy: RetryPolicy,
    policy_text: &'static str,
    expect_ok: bool,
    slow: bool,
}

fn backoff_10ms() -> RetryPolicy {
    RetryPolicy::exponential().initial_delay(Duration::from_millis(10))
}

fn scenarios() -> Vec<Scenario> {
    let give_up_fast = || {
        RetryPolicy::exponential()
            .initial_delay(Duration::from_millis(10))
            .outcome_poll(Duration::from_millis(10))
            .max_delay(Duration::from_millis(100))
            .max_attempts(4)
    };
    vec![
        Scenario {
            name: "v1.1, killed as the job ends; resumed session re-sends the buffered result (mock default)",
            dialect: Dialect::V1_1,
            replay: ReplayPolicy::TerminalReplay,
            reattach: true,
            fault: Fault::DropBeforeTerminal,
            from_tool_end: true,
            policy: backoff_10ms(),
            policy_text: "initial_delay 10 ms, rest default",
            expect_ok: true,
            slow: false,
        },
        Scenario {
            name: "v1.1, killed as the job ends; resume does not re-attach jobs (as Python 1.1.3): ladder, re-send, replayed result",
            dialect: Dialect::V1_1,
            replay: ReplayPolicy::TerminalReplay,
            reattach: false,
            fault: Fault::DropBeforeTerminal,
            from_tool_end: true,
            policy: backoff_10ms(),
            policy_text: "initial_delay 10 ms, outcome_poll 500 ms (default)",
            expect_ok: true,
            slow: true,
        },
        Scenario {
            name: "same, outcome_poll 10 ms",
            dialect: Dialect::V1_1,
            replay: ReplayPolicy::TerminalReplay,
            reattach: false,
            fault: Fault::DropBeforeTerminal,
            from_tool_end: true,
            policy: backoff_10ms().outcome_poll(Duration::from_millis(10)),
            policy_text: "initial_delay 10 ms, outcome_poll 10 ms",
            expect_ok: true,
            slow: false,
        },
        Scenario {
            name: "legacy (Rust 2.0.0 behaviour), killed on submit before the runtime saw it: re-sent, runs once",
            dialect: Dialect::Legacy,
            replay: ReplayPolicy::AcceptedOnly,
            reattach: false,
            fault: Fault::DropOnSubmit,
            from_tool_end: false,
            policy: backoff_10ms(),
            policy_text: "initial_delay 10 ms, rest default",
            expect_ok: true,
            slow: false,
        },
        Scenario {
            name: "legacy, accepted-only replay, killed after job.accepted: until the typed OutcomeUnavailable",
            dialect: Dialect::Legacy,
            replay: ReplayPolicy::AcceptedOnly,
            reattach: false,
            fault: Fault::DropAfterAccepted,
            from_tool_end: false,
            policy: give_up_fast(),
            policy_text: "initial_delay 10 ms, outcome_poll 10 ms, max_delay 100 ms, max_attempts 4",
            expect_ok: false,
            slow: false,
        },
        Scenario {
            name: "v1.1, accepted-only replay (TS/Go/Java behaviour), no re-attach, killed after job.accepted: until OutcomeUnavailable",
            dialect: Dialect::V1_1,
            replay: ReplayPolicy::AcceptedOnly,
            reattach: false,
            fault: Fault::DropAfterAccepted,
            from_tool_end: false,
            policy: give_up_fast(),
            policy_text: "initial_delay 10 ms, outcome_poll 10 ms, max_delay 100 ms, max_attempts 4",
            expect_ok: false,
            slow: false,
        },
    ]
}

pub(crate) async fn run(trials: usize, slow_trials: usize) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for s in scenarios() {
        rows.push(run_one(&s, if s.slow { slow_trials } else { trials }).await?);
    }
    Ok(rows)
}

async fn run_one(s: &Scenario, trials: usize) -> Result<Row, String> {
    let tool_end: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let end = tool_end.clone();
    let mock = MockRuntime::builder()
        .dialect(s.dialect)
        .replay_policy(s.replay)
        .resume_reattaches_jobs(s.reattach)
        .tool("work", move |args, _ctx| {
            let end = end.clone();
            async move {
                *end.lock().expect("not poisoned") = Some(Instant::now());
                Ok(args)
            }
        })
        .start()
        .await
        .map_err(|e| e.to_string())?;
    let client = Client::builder(mock.ws_url())
        .dialect(s.dialect)
        .retry(s.policy.clone())
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    // One clean call first: connection and caches warm.
    client
        .invoke_tool("work", json!({"warm": true}))
        .await
        .map_err(|e| e.to_string())?;
    let executions_before = mock.executions("work");
    let mut lat_ms = Vec::with_capacity(trials);
    let (mut ok, mut unavailable, mut other) = (0, 0, 0);
    for i in 0..trials {
        mock.clear_faults();
        *tool_end.lock().expect("not poisoned") = None;
        mock.inject(s.fault.clone());
        let start = Instant::now();
        let outcome = tokio::time::timeout(
            Duration::from_secs(60),
            client.invoke_tool("work", json!({"trial": i})),
        )
        .await
        .map_err(|_| format!("{}: trial {i} did not end within 60 s", s.name))?;
        let end = Instant::now();
        match &outcome {
            Ok(_) => ok += 1,
            Err(Error::OutcomeUnavailable { .. }) => unavailable += 1,
            Err(_) => other += 1,
        }
        let from = if s.from_tool_end {
            tool_end.lock().expect("not poisoned").unwrap_or(start)
        } else {
            start
        };
        lat_ms.push(end.duration_since(from).as_secs_f64() * 1e3);
        if outcome.is_ok() != s.expect_ok {
            eprintln!("  [recovery] {}: trial {i}: unexpected {outcome:?}", s.name);
        }
    }
    mock.clear_faults();
    let executions = mock.executions("work") - executions_before;
    client.close().await;
    lat_ms.sort_by(f64::total_cmp);
    Ok(Row {
        name: s.name.to_owned(),
        policy: s.policy_text.to_owned(),
        measured_from: if s.from_tool_end {
            "tool end (the kill)"
        } else {
            "call start (kill ~0.1 ms later)"
        },
        trials,
        lat_ms,
        outcomes: format!("{ok} ok, {unavailable} OutcomeUnavailable, {other} other"),
        executions_per_call: executions as f64 / trials.max(1) as f64,
    })
}
