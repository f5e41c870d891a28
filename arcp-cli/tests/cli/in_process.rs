//! `arcp invoke` against a `MockRuntime` started by the test, with faults:
//! connections killed mid-call, terminals lost, deadlines, refusals.

use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use arcp_mock::{ChaosProxy, Dialect, ErrorCode, Fault, MockRuntime, ReplayPolicy, ToolFailure};
use serde_json::{json, Value};

use crate::support::{
    arcp, assert_error_contract, assert_ok_contract, bin, invoke_json, runtime, single_json_object,
    ChildGuard,
};

/// A mock with a `slow` tool: sleeps `ms` milliseconds, with two progress
/// events, and returns its arguments.
fn slow_mock(builder: arcp_mock::MockRuntimeBuilder) -> arcp_mock::MockRuntimeBuilder {
    builder.tool("slow", |args: Value, ctx| async move {
        let ms = args["ms"].as_u64().unwrap_or(0);
        ctx.progress(1, 2).await;
        ctx.sleep(Duration::from_millis(ms)).await;
        ctx.progress(2, 2).await;
        if args["fail"].as_bool() == Some(true) {
            return Err(ToolFailure::new("ABORTED", "asked to fail"));
        }
        Ok(json!({"slept_ms": ms}))
    })
}

#[test]
fn a_connection_dropped_after_acceptance_still_runs_the_tool_once() {
    let rt = runtime();
    let mock = rt
        .block_on(slow_mock(MockRuntime::builder()).start())
        .unwrap();
    mock.inject(Fault::DropAfterAccepted);
    let out = invoke_json(
        "slow",
        &mock.ws_url(),
        &["--args", r#"{"ms": 150}"#, "--key", "drop-1"],
    )
    .assert()
    .code(0)
    .get_output()
    .clone();
    let map = single_json_object(&out.stdout);
    assert_ok_contract(&map);
    assert_eq!(map["result"], json!({"slept_ms": 150}));
    assert_eq!(map["key"], "drop-1");
    assert_eq!(mock.executions("slow"), 1);
    assert_eq!(mock.executions_for_key("drop-1"), 1);
    assert!(mock.connections() >= 2, "the connection was not dropped");
}

#[test]
fn a_connection_killed_mid_call_by_a_proxy_still_runs_the_tool_once() {
    let rt = runtime();
    let (mock, proxy) = rt.block_on(async {
        let mock = slow_mock(MockRuntime::builder()).start().await.unwrap();
        let proxy = ChaosProxy::builder(mock.address()).start().await.unwrap();
        (mock, proxy)
    });
    let url = proxy.ws_url("/arcp");
    let child = StdCommand::new(bin())
        .args(["invoke", "slow", "--url", &url, "--json", "--key", "kill-1"])
        .args(["--args", r#"{"ms": 400}"#])
        .env_remove("ARCP_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut guard = ChildGuard(Some(child));
    // Kill the connection while the tool runs.
    let started = Instant::now();
    while mock.executions("slow") == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the call never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    proxy.kill_all();
    let out = guard.0.take().unwrap().wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let map = single_json_object(&out.stdout);
    assert_ok_contract(&map);
    assert_eq!(map["result"], json!({"slept_ms": 400}));
    assert!(!proxy.report().kills.is_empty(), "nothing was killed");
    assert_eq!(mock.executions("slow"), 1, "the tool ran twice");
    assert_eq!(mock.executions_for_key("kill-1"), 1);
}

#[test]
fn a_lost_terminal_on_an_accepted_only_runtime_exits_4() {
    let rt = runtime();
    let mock = rt
        .block_on(
            slow_mock(MockRuntime::builder())
                .dialect(Dialect::Legacy)
                .replay_policy(ReplayPolicy::AcceptedOnly)
                .start(),
        )
        .unwrap();
    mock.inject(Fault::DropBeforeTerminal);
    let started = Instant::now();
    let out = invoke_json(
        "slow",
        &mock.ws_url(),
        &[
            "--args",
            r#"{"ms": 10}"#,
            "--key",
            "lost-1",
            "--max-attempts",
            "2",
            "--dialect",
            "legacy",
        ],
    )
    .assert()
    .code(4)
    .get_output()
    .clone();
    let map = single_json_object(&out.stdout);
    assert_error_contract(&map);
    assert_eq!(map["code"], "OUTCOME_UNAVAILABLE");
    assert_eq!(map["key"], "lost-1");
    assert!(map["job_id"].is_string(), "{map:?}");
    assert_eq!(map["attempts"], 2, "{map:?}");
    assert_eq!(mock.executions("slow"), 1, "the tool ran twice");
    assert!(started.elapsed() < Duration::from_secs(8));
}

#[test]
fn a_lost_terminal_on_a_v1_1_accepted_only_runtime_exits_4() {
    let rt = runtime();
    let mock = rt
        .block_on(
            slow_mock(MockRuntime::builder())
                .replay_policy(ReplayPolicy::AcceptedOnly)
                .resume_reattaches_jobs(false)
                // No job.subscribe either (the TS/Go/Java family): nothing
                // hands the outcome to the reconnected client.
                .subscribe(false)
                .start(),
        )
        .unwrap();
    mock.inject(Fault::DropBeforeTerminal);
    let out = invoke_json(
        "slow",
        &mock.ws_url(),
        &["--args", r#"{"ms": 10}"#, "--max-attempts", "2"],
    )
    .assert()
    .code(4)
    .get_output()
    .clone();
    let map = single_json_object(&out.stdout);
    assert_error_contract(&map);
    assert_eq!(map["code"], "OUTCOME_UNAVAILABLE");
    assert_eq!(mock.executions("slow"), 1);
}

#[test]
fn a_tool_error_after_a_dropped_connection_is_still_exit_2() {
    let rt = runtime();
    let mock = rt
        .block_on(slow_mock(MockRuntime::builder()).start())
        .unwrap();
    mock.inject(Fault::DropAfterAccepted);
    let out = invoke_json(
        "slow",
        &mock.ws_url(),
        &["--args", r#"{"ms": 50, "fail": true}"#],
    )
    .assert()
    .code(2)
    .get_output()
    .clone();
    let map = single_json_object(&out.stdout);
    assert_error_contract(&map);
    assert_eq!(map["code"], "ABORTED");
    assert_eq!(mock.executions("slow"), 1);
}

#[test]
fn a_passed_deadline_after_the_send_exits_4_may_have_run() {
    let rt = runtime();
    let mock = rt
        .block_on(slow_mock(MockRuntime::builder()).start())
        .unwrap();
    let started = Instant::now();
    let out = invoke_json(
        "slow",
        &mock.ws_url(),
        &["--args", r#"{"ms": 5000}"#, "--deadline", "0.3"],
    )
    .assert()
    .code(4)
    .get_output()
    .clone();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the deadline was not kept"
    );
    let map = single_json_object(&out.stdout);
    assert_error_contract(&map);
    assert_eq!(map["code"], "DEADLINE_EXCEEDED");
    assert!(map["job_id"].is_string(), "{map:?}");
    assert_eq!(map["attempts"], 1);
    // Accepted, then the deadline: it may have run.
    assert_eq!(map["ran"], "may_have_run");
}

#[test]
fn a_deadline_before_anything_was_sent_says_not_run() {
    // A dead port over HTTP: every connect is refused until the deadline.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/arcp", dead.local_addr().unwrap());
    drop(dead);
    let out = invoke_json("echo", &url, &["--deadline", "0.5"])
        .assert()
        .code(3)
        .get_output()
        .clone();
    let map = single_json_object(&out.stdout);
    assert_error_contract(&map);
    assert_eq!(map["code"], "DEADLINE_EXCEEDED");
    assert_eq!(map["attempts"], 0);
    assert_eq!(map["ran"], "not_run", "{map:?}");
    // The human form says so too, not "may have run".
    let human = arcp(["invoke", "echo", "--url", &url, "--deadline", "0.5"])
        .assert()
        .code(3)
        .get_output()
        .clone();
    let stderr = String::from_utf8_lossy(&human.stderr);
    assert!(stderr.contains("nothing ran"), "{stderr}");
    assert!(stderr.contains("or without"), "{stderr}");
    assert!(!stderr.contains("may have run"), "{stderr}");
    // With a key of the user's: an earlier call with it may have run. Not
    // sent; the hint offers no new key.
    let out = invoke_json("echo", &url, &["--deadline", "0.5", "--key", "mine-1"])
        .assert()
        .code(6)
        .get_output()
        .clone();
    let map = single_json_object(&out.stdout);
    assert_eq!(map["ran"], "not_sent", "{map:?}");
    let human = arcp([
        "invoke",
        "echo",
        "--url",
        &url,
        "--deadline",
        "0.5",
        "--key",
        "mine-1",
    ])
    .assert()
    .code(6)
    .get_output()
    .clone();
    let stderr = String::from_utf8_lossy(&human.stderr);
    assert!(stderr.contains("same --key"), "{stderr}");
    assert!(!stderr.contains("or without"), "{stderr}");
}

#[test]
fn refused_every_time_exits_3_with_retries_exhausted_and_the_attempt_count() {
    let rt = runtime();
    let mock = rt
        .block_on(slow_mock(MockRuntime::builder()).start())
        .unwrap();
    mock.inject_always(Fault::RejectNextSubmit {
        code: ErrorCode::Unavailable,
        retry_after: None,
    });
    let out = invoke_json("slow", &mock.ws_url(), &["--max-attempts", "3"])
        .assert()
        .code(3)
        .get_output()
        .clone();
    let map = single_json_object(&out.stdout);
    assert_error_contract(&map);
    assert_eq!(map["code"], "RETRIES_EXHAUSTED");
    assert_eq!(map["attempts"], 3);
    assert!(map["job_id"].is_null());
    assert_eq!(mock.executions("slow"), 0);
}

#[test]
fn an_interrupted_wait_reports_the_key_to_resume_with() {
    let rt = runtime();
    let mock = rt
        .block_on(slow_mock(MockRuntime::builder()).start())
        .unwrap();
    let child = StdCommand::new(bin())
        .args([
            "invoke",
            "slow",
            "--url",
            &mock.ws_url(),
            "--json",
            "--key",
            "int-1",
        ])
        .args(["--args", r#"{"ms": 300}"#])
        .env_remove("ARCP_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut guard = ChildGuard(Some(child));
    let started = Instant::now();
    while mock.executions("slow") == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the call never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let pid = guard.child().id().to_string();
    assert!(StdCommand::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let out = guard.0.take().unwrap().wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let map = single_json_object(&out.stdout);
    assert_error_contract(&map);
    assert_eq!(map["code"], "INTERRUPTED");
    assert_eq!(map["key"], "int-1");
    assert!(map["job_id"].is_string(), "{map:?}");
    assert_eq!(map["attempts"], 1);

    // The job was not cancelled: the same key gets its outcome, without a
    // second execution.
    std::thread::sleep(Duration::from_millis(400));
    let out = invoke_json(
        "slow",
        &mock.ws_url(),
        &["--args", r#"{"ms": 300}"#, "--key", "int-1"],
    )
    .assert()
    .code(0)
    .get_output()
    .clone();
    let again = single_json_object(&out.stdout);
    assert_eq!(again["result"], json!({"slept_ms": 300}));
    assert_eq!(again["replayed"], true);
    assert_eq!(again["job_id"], map["job_id"]);
    assert_eq!(mock.executions("slow"), 1);
}

#[test]
fn the_http_binding_is_selected_by_the_url_scheme() {
    let rt = runtime();
    let mock = rt
        .block_on(slow_mock(MockRuntime::builder()).start())
        .unwrap();
    let out = invoke_json(
        "slow",
        &mock.http_url(),
        &["--args", r#"{"ms": 10}"#, "--key", "http-1"],
    )
    .assert()
    .code(0)
    .get_output()
    .clone();
    let map = single_json_object(&out.stdout);
    assert_ok_contract(&map);
    assert_eq!(map["result"], json!({"slept_ms": 10}));
    assert_eq!(mock.executions_for_key("http-1"), 1);
}
