//! The environment and the early key: `ARCP_URL` and `ARCP_TOKEN` stand in
//! for `--url` and `--token`, and `arcp invoke` prints the idempotency key on
//! stderr before the call starts, so a user who kills it can still repeat
//! the call with that key.

use std::io::{BufRead, BufReader};
use std::process::{Command as StdCommand, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use arcp_mock::MockRuntime;
use predicates::str::contains;
use serde_json::{json, Value};

use crate::support::{arcp, assert_ok_contract, bin, runtime, single_json_object, ChildGuard};

/// A mock with `echo`, and `slow` (sleeps `ms` milliseconds).
fn mock_builder() -> arcp_mock::MockRuntimeBuilder {
    MockRuntime::builder()
        .tool("echo", |args: Value, _ctx| async move { Ok(args) })
        .tool("slow", |args: Value, ctx| async move {
            let ms = args["ms"].as_u64().unwrap_or(0);
            ctx.sleep(Duration::from_millis(ms)).await;
            Ok(args)
        })
}

#[test]
fn arcp_url_and_arcp_token_stand_in_for_the_flags() {
    let rt = runtime();
    let mock = rt
        .block_on(mock_builder().token("env-secret-3319", "alice").start())
        .unwrap();
    let out = arcp(["invoke", "echo", "--args", r#"{"n": 1}"#, "--json"])
        .env("ARCP_URL", mock.ws_url())
        .env("ARCP_TOKEN", "env-secret-3319")
        .assert()
        .code(0)
        .get_output()
        .clone();
    let map = single_json_object(&out.stdout);
    assert_ok_contract(&map);
    assert_eq!(map["result"], json!({"n": 1}));
    // Ground truth: the call reached this runtime, as the token's principal.
    let jobs = mock.jobs();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].principal, "alice");
    assert_eq!(jobs[0].executions, 1);
    let all = String::from_utf8_lossy(&[out.stdout, out.stderr].concat()).into_owned();
    assert!(!all.contains("env-secret-3319"), "token printed:\n{all}");
}

#[test]
fn the_url_flag_wins_over_arcp_url() {
    let rt = runtime();
    let mock = rt.block_on(mock_builder().start()).unwrap();
    arcp(["invoke", "echo", "--url", &mock.ws_url(), "--json"])
        .env("ARCP_URL", "ws://127.0.0.1:9/nothing-listens-here")
        .assert()
        .code(0);
    assert_eq!(mock.executions("echo"), 1);
}

#[test]
fn a_bad_arcp_url_is_a_usage_error() {
    arcp(["invoke", "echo", "--json"])
        .env("ARCP_URL", "ftp://127.0.0.1:9/arcp")
        .assert()
        .code(64)
        .stdout("")
        .stderr(contains(
            "expected a ws://, wss://, http:// or https:// URL",
        ));
}

#[test]
fn journal_recover_reads_arcp_url() {
    let dir = std::env::temp_dir().join(format!("arcp-cli-env-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let journal = dir.join("calls.db");
    let rt = runtime();
    let mock = rt.block_on(mock_builder().start()).unwrap();
    // An empty journal: nothing to recover, but the URL must be accepted.
    arcp(["journal", "--journal", journal.to_str().unwrap(), "recover"])
        .env("ARCP_URL", mock.ws_url())
        .assert()
        .code(0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts `arcp invoke slow` (10 s) without a key, reads its first stderr
/// line, and returns the key it names, with the child still running.
fn key_printed_at_start(url: &str, json: bool) -> (String, ChildGuard) {
    let mut cmd = StdCommand::new(bin());
    cmd.args(["invoke", "slow", "--url", url, "--args", r#"{"ms": 10000}"#])
        .env_remove("ARCP_TOKEN")
        .env_remove("ARCP_URL")
        .env_remove("ARCP_JOURNAL")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if json {
        cmd.arg("--json");
    }
    let mut guard = ChildGuard(Some(cmd.spawn().unwrap()));
    let stderr = guard.child().stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stderr).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("nothing on stderr within 10 s");
    let key = line
        .trim_end()
        .strip_prefix("idempotency key: ")
        .unwrap_or_else(|| panic!("the first stderr line names no key: {line:?}"))
        .to_owned();
    (key, guard)
}

#[test]
fn the_key_is_on_stderr_before_the_call_ends_and_is_the_key_the_runtime_got() {
    for json in [false, true] {
        let rt = runtime();
        let mock = rt.block_on(mock_builder().start()).unwrap();
        let (key, mut guard) = key_printed_at_start(&mock.ws_url(), json);
        // The call is under way: wait until the runtime runs it, then kill
        // the process, as an impatient user would.
        let started = Instant::now();
        while mock.executions("slow") == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the call never started"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = guard.child().kill();
        // Ground truth: the key printed is the key the runtime ran under.
        let jobs = mock.jobs();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].idempotency_key.as_deref(), Some(key.as_str()));
        assert_eq!(mock.executions_for_key(&key), 1);
    }
}

#[test]
fn a_given_key_is_printed_at_start_too() {
    let rt = runtime();
    let mock = rt.block_on(mock_builder().start()).unwrap();
    arcp([
        "invoke",
        "echo",
        "--url",
        &mock.ws_url(),
        "--key",
        "refund-4812",
        "--json",
    ])
    .assert()
    .code(0)
    .stderr(predicates::str::starts_with(
        "idempotency key: refund-4812\n",
    ));
    assert_eq!(mock.executions_for_key("refund-4812"), 1);
}
