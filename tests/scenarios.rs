//! One scenario suite, written once against the client API, run unchanged
//! against the published reference runtimes (Python
//! `agentruntimecontrolprotocol` 1.1.3, v1.1; Rust `arcp-runtime` 2.0.0,
//! legacy) and against arcp-mock in each replay policy. Each scenario asserts
//! what that runtime makes possible, exactly, and in every case: one execution
//! per key, no hang, no other call affected.
//!
//! The published runtimes need `bash interop/setup.sh` (the README's test
//! command runs it); a missing one fails its tests loudly.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use arcp_mock::ChaosProxy;
use arcp_mock::ReplayPolicy;
use arcp_sdk::{Error, IdempotencyKey, RetryPolicy};
use serde_json::json;
use support::targets::{Target, TargetKind};

fn addr(url: &str) -> SocketAddr {
    let host_port = url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .expect("host:port");
    host_port.parse().expect("loopback socket address")
}

async fn happy_path(kind: TargetKind) {
    let peer = Target::start(kind).await;
    let client = peer.client(&peer.url).connect().await.unwrap();
    let out = client
        .invoke_tool("echo", json!({"hello": "world"}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"hello": "world"}));
    assert_eq!(out.attempts, 1);
    assert!(!out.replayed);
    assert!(out.job_id.is_some());
}

/// A second process (a fresh client, empty cache) re-sends a completed call
/// with its key. Python replays the stored result; Rust 2.0.0 replays only
/// `job.accepted`, so the outcome is unavailable. Either way it ran once.
async fn same_key_after_completion(kind: TargetKind) {
    let peer = Target::start(kind).await;
    let key = IdempotencyKey::new();
    let args = peer.counter_args(0, 1, "after-completion");
    let first = peer.client(&peer.url).connect().await.unwrap();
    let out = first
        .invoke_tool("counter", args.clone())
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    assert!(!out.replayed);

    let second = peer.client(&peer.url).connect().await.unwrap();
    let again = second
        .invoke_tool("counter", args)
        .idempotency_key(key.clone())
        .send()
        .await;
    match peer.recovers_lost_outcome() {
        true => {
            let again = again.unwrap();
            // A stored result re-sent with no acceptance before it (the
            // terminal-only family) cannot be told from a fresh execution:
            // it is called a replay only when the runtime marks it so or
            // names the job the key was bound to.
            let unmarked = matches!(peer.kind, TargetKind::Mock(ReplayPolicy::TerminalOnly));
            assert_eq!(again.replayed, !unmarked, "a stored result's replay mark");
            assert_eq!(again.value, out.value);
            assert_eq!(again.job_id, out.job_id);
        }
        false => match again {
            Err(Error::OutcomeUnavailable { key: k, job_id, .. }) => {
                assert_eq!(k, key);
                assert_eq!(job_id, out.job_id, "the original job is named");
            }
            other => panic!("expected OutcomeUnavailable, got {other:?}"),
        },
    }
    assert_eq!(peer.executions().await, 1);
}

async fn conflicting_intent(kind: TargetKind) {
    let peer = Target::start(kind).await;
    let key = IdempotencyKey::new();
    let first = peer.client(&peer.url).connect().await.unwrap();
    first
        .invoke_tool("counter", peer.counter_args(0, 0, "a"))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    let second = peer.client(&peer.url).connect().await.unwrap();
    let err = second
        .invoke_tool("counter", peer.counter_args(0, 0, "DIFFERENT"))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::DuplicateKey { key: ref k, .. } if *k == key),
        "{err:?}"
    );
    // The connection stays usable and other calls are untouched.
    second
        .invoke_tool("echo", json!("still-alive"))
        .await
        .unwrap();
    assert_eq!(peer.executions().await, 1);
}

#[derive(Debug, Clone, Copy)]
enum KillPoint {
    /// The request is held in the proxy and discarded: it never arrives.
    BeforeAccept,
    /// Right after the runtime accepted the call.
    AfterAccept,
    /// After the first job event.
    MidCall,
    /// The job finished while the connection was stalled; its terminal is lost.
    BeforeTerminal,
}

/// Kills the connection at `point`; asserts the outcome the peer makes
/// possible and exactly one execution.
async fn killed(kind: TargetKind, point: KillPoint) {
    support::init_tracing();
    let peer = Target::start(kind).await;
    let proxy = ChaosProxy::builder(addr(&peer.url)).start().await.unwrap();
    let client = peer.client(&proxy.ws_url("/arcp")).connect().await.unwrap();
    let mut call = client
        .invoke_tool("counter", peer.counter_args(1200, 3, "killed"))
        .deadline(Duration::from_secs(20))
        .send();
    let mut events = call.events();
    let handle = call.handle();
    let started = Instant::now();
    let outcome = {
        let run = tokio::spawn(call);
        match point {
            KillPoint::BeforeAccept => {
                proxy.stall(true);
                tokio::time::sleep(Duration::from_millis(100)).await;
                proxy.kill_all();
                proxy.stall(false);
            }
            KillPoint::AfterAccept => {
                wait_until(|| handle.job_id().is_some()).await;
                proxy.kill_all();
            }
            KillPoint::MidCall => {
                events.next().await.expect("a first event");
                proxy.kill_all();
            }
            KillPoint::BeforeTerminal => {
                events.next().await.expect("a first event");
                proxy.stall(true);
                tokio::time::sleep(Duration::from_millis(1600)).await; // the job finishes meanwhile
                proxy.kill_all();
                proxy.stall(false);
            }
        }
        run.await.unwrap()
    };
    let proxy_connections = proxy.report().connections;
    assert!(started.elapsed() < Duration::from_secs(20), "no hang");
    let expect_unavailable =
        !peer.recovers_lost_outcome() && !matches!(point, KillPoint::BeforeAccept);
    match (&outcome, expect_unavailable) {
        (Ok(out), false) => {
            // Recovered by a re-send, or (Python) by resume plus `job.subscribe`
            // with history, which delivers the stored terminal.
            assert!(proxy_connections >= 2, "the client reconnected");
            assert_eq!(out.value["count"], json!(1), "{out:?}");
        }
        (Err(Error::OutcomeUnavailable { job_id, .. }), true) => {
            assert!(job_id.is_some(), "the accepted job is named: {outcome:?}")
        }
        // Killed "before accept" races the proxy: when the submit got
        // through before the stall, a runtime that cannot hand the outcome
        // to a new connection has accepted it, and the honest answer is the
        // named job with its outcome unknown.
        (Err(Error::OutcomeUnavailable { job_id, .. }), false)
            if !peer.recovers_lost_outcome() && matches!(point, KillPoint::BeforeAccept) =>
        {
            assert!(job_id.is_some(), "the accepted job is named: {outcome:?}")
        }
        _ => panic!("{kind:?} {point:?}: unexpected outcome {outcome:?}"),
    }
    assert_eq!(peer.executions().await, 1, "{kind:?} {point:?}");
}

async fn wait_until(f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "condition never held"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Many concurrent calls through a proxy that kills connections on a seeded
/// schedule: every call resolves, none hangs, none runs twice.
async fn concurrent_with_kills(kind: TargetKind) {
    let peer = Target::start(kind).await;
    let proxy = ChaosProxy::builder(addr(&peer.url))
        .seed(7)
        .kill_every_frames(60)
        .spare_first_frames(4)
        .start()
        .await
        .unwrap();
    // Every kill re-sends the unanswered calls, so chaos needs a larger
    // attempt budget than the default test client's; a short elapsed budget
    // keeps runtimes that never replay an outcome from dominating the time.
    let budget = if peer.recovers_lost_outcome() {
        Duration::from_secs(20)
    } else {
        Duration::from_secs(1)
    };
    let client = peer
        .client(&proxy.ws_url("/arcp"))
        .max_in_flight(16)
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(20))
                .max_delay(Duration::from_millis(400))
                .max_attempts(40)
                .max_elapsed(budget)
                .outcome_poll(Duration::from_millis(100)),
        )
        .connect()
        .await
        .unwrap();
    let calls = 300;
    let deadline = Duration::from_secs(90);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..calls {
        let client = client.clone();
        let args = peer.counter_args(20, 1, &format!("c{i}"));
        tasks.push(tokio::spawn(async move {
            client
                .invoke_tool("counter", args)
                .deadline(deadline)
                .send()
                .await
        }));
    }
    let mut ok_counts = std::collections::BTreeSet::new();
    let (mut ok, mut unavailable) = (0u64, 0u64);
    for t in tasks {
        match t.await.unwrap() {
            Ok(out) => {
                ok += 1;
                let count = out.value["count"].as_u64().unwrap();
                assert!(
                    !peer.numbers_executions() || ok_counts.insert(count),
                    "two calls saw the same execution"
                );
            }
            Err(Error::OutcomeUnavailable { .. }) if !peer.recovers_lost_outcome() => {
                unavailable += 1
            }
            Err(e) => panic!("{kind:?}: unexpected outcome {e:?}"),
        }
    }
    assert!(started.elapsed() < deadline, "no hang");
    let executions = peer.executions().await;
    println!(
        "{kind:?}: {calls} calls, 16 in flight, {} kills, {executions} executions, \
         outcomes: {ok} ok, {unavailable} outcome unavailable, {:.1} s",
        proxy.report().kills.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(executions <= calls, "an execution beyond one per key");
    assert!(executions >= ok, "fewer executions than results");
    if peer.recovers_lost_outcome() {
        assert_eq!(
            ok, calls,
            "a replaying runtime gives every lost outcome back"
        );
        assert_eq!(executions, calls);
    }
}

/// The runtime goes silent mid-call (no close): the client detects it and the
/// call ends with a typed outcome before its deadline.
async fn silent_runtime(kind: TargetKind) {
    let peer = Target::start(kind).await;
    let proxy = ChaosProxy::builder(addr(&peer.url)).start().await.unwrap();
    let client = peer
        .client(&proxy.ws_url("/arcp"))
        .heartbeat_interval(Duration::from_millis(300))
        .handshake_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let mut call = client
        .invoke_tool("counter", peer.counter_args(400, 2, "silent"))
        .deadline(Duration::from_secs(6))
        .send();
    let mut events = call.events();
    let run = tokio::spawn(call);
    events.next().await.expect("a first event");
    proxy.stall(true);
    let started = Instant::now();
    let outcome = run.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(7),
        "ended within its deadline"
    );
    match outcome {
        Err(Error::OutcomeUnavailable { .. } | Error::DeadlineExceeded { .. }) => {}
        other => panic!("{kind:?}: expected a typed give-up, got {other:?}"),
    }
    assert_eq!(peer.executions().await, 1);
}

async fn killed_before_accept(kind: TargetKind) {
    killed(kind, KillPoint::BeforeAccept).await
}

async fn killed_after_accept(kind: TargetKind) {
    killed(kind, KillPoint::AfterAccept).await
}

async fn killed_mid_call(kind: TargetKind) {
    killed(kind, KillPoint::MidCall).await
}

async fn killed_before_terminal(kind: TargetKind) {
    killed(kind, KillPoint::BeforeTerminal).await
}

/// Every scenario against every target, as `scenario::target` tests.
macro_rules! for_every_target {
    ($($scenario:ident),* $(,)?) => {$(
        mod $scenario {
            use super::*;
            #[tokio::test]
            async fn python_1_1_3() {
                $scenario(TargetKind::Python).await
            }
            #[tokio::test]
            async fn rust_2_0_0() {
                $scenario(TargetKind::Rust).await
            }
            #[tokio::test]
            async fn mock_terminal_replay() {
                $scenario(TargetKind::Mock(ReplayPolicy::TerminalReplay)).await
            }
            #[tokio::test]
            async fn mock_terminal_only() {
                $scenario(TargetKind::Mock(ReplayPolicy::TerminalOnly)).await
            }
            #[tokio::test]
            async fn mock_accepted_only() {
                $scenario(TargetKind::Mock(ReplayPolicy::AcceptedOnly)).await
            }
            #[tokio::test]
            async fn mock_ack_replay() {
                $scenario(TargetKind::Mock(ReplayPolicy::AckReplay)).await
            }
        }
    )*};
}

for_every_target!(
    happy_path,
    same_key_after_completion,
    conflicting_intent,
    killed_before_accept,
    killed_after_accept,
    killed_mid_call,
    killed_before_terminal,
    concurrent_with_kills,
    silent_runtime,
);

/// `DialectChoice::Auto` finds each published runtime's dialect: the Python
/// runtime answers v1.1; the Rust runtime drops the v1.1 hello, so the client
/// reconnects and speaks legacy.
#[tokio::test]
async fn auto_dialect_finds_each_published_runtime() {
    use arcp_sdk::{Dialect, DialectChoice};
    for (kind, expected) in [
        (TargetKind::Python, Dialect::V1_1),
        (TargetKind::Rust, Dialect::Legacy),
    ] {
        let peer = Target::start(kind).await;
        let client = peer
            .client(&peer.url)
            .dialect(DialectChoice::Auto)
            .connect()
            .await
            .unwrap();
        assert_eq!(client.runtime().unwrap().dialect(), expected, "{kind:?}");
        let out = client
            .invoke_tool("echo", json!({"auto": true}))
            .await
            .unwrap();
        assert_eq!(out.value, json!({"auto": true}));
    }
}
