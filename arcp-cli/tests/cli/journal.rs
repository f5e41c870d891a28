//! `arcp journal` on a journal left by an `arcp invoke --journal` child
//! killed with SIGKILL mid-call: `list` shows the call, `recover` ends it
//! with one execution in all, `discard` ends a record that ran "outcome
//! unknown", and a journal held
//! by a live client is refused with exit status 5.

use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use arcp_mock::{Dialect, MockRuntime};
use serde_json::{json, Value};

use crate::support::{arcp, bin, runtime, ChildGuard, MockServe};

/// A mock whose `slow` tool sleeps `ms` milliseconds and returns them,
/// with the runtime it is served on (keep both alive).
fn slow_mock() -> (tokio::runtime::Runtime, MockRuntime) {
    let rt = runtime();
    let mock = rt
        .block_on(
            MockRuntime::builder()
                .dialect(Dialect::V1_1)
                .tool("slow", |args: Value, ctx| async move {
                    let ms = args["ms"].as_u64().unwrap_or(0);
                    ctx.sleep(Duration::from_millis(ms)).await;
                    Ok(json!({"slept_ms": ms}))
                })
                .start(),
        )
        .unwrap();
    (rt, mock)
}

/// Starts `arcp invoke slow --journal PATH` in the background.
fn invoke_child(url: &str, journal: &std::path::Path, key: &str, ms: u64) -> ChildGuard {
    let child = StdCommand::new(bin())
        .args([
            "invoke",
            "slow",
            "--url",
            url,
            "--dialect",
            "v1.1",
            "--json",
        ])
        .args(["--key", key, "--args", &format!(r#"{{"ms": {ms}}}"#)])
        .arg("--journal")
        .arg(journal)
        .env_remove("RUST_LOG")
        .env_remove("ARCP_JOURNAL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn arcp invoke");
    ChildGuard(Some(child))
}

/// Waits until the mock has started `n` executions of `slow`.
fn wait_for_executions(mock: &MockRuntime, n: u64) {
    let start = Instant::now();
    while mock.executions("slow") < n {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the child never started the tool"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn list_json(journal: &std::path::Path) -> Vec<Value> {
    let out = arcp(["journal", "list", "--json"])
        .arg("--journal")
        .arg(journal)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "list failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

#[test]
fn a_call_cut_by_sigkill_is_listed_recovered_once_and_discarded() {
    let (_rt, mock) = slow_mock();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("calls.db");

    // A call that takes 1.5 s; its process is killed once the tool runs.
    let mut child = invoke_child(&mock.ws_url(), &journal, "crash-1", 1500);
    wait_for_executions(&mock, 1);
    child.child().kill().unwrap(); // SIGKILL
    child.child().wait().unwrap();

    // list: the call is there, unfinished, and may have run.
    let calls = list_json(&journal);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["key"], "crash-1");
    assert_eq!(calls[0]["tool"], "slow");
    assert_ne!(calls[0]["state"], "terminal");
    assert_eq!(calls[0]["ran"], "may_have_run");
    let unfinished = arcp(["journal", "list", "--unfinished"])
        .arg("--journal")
        .arg(&journal)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&unfinished.stdout).contains("crash-1"));

    // show: the recorded intent.
    let shown = arcp(["journal", "show", "crash-1", "--json"])
        .arg("--journal")
        .arg(&journal)
        .output()
        .unwrap();
    assert!(shown.status.success());
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["intent"]["arguments"]["ms"], 1500, "{shown}");

    // recover: the same key, one execution in all.
    let recovered = arcp(["journal", "recover", "--json", "--dialect", "v1.1"])
        .args(["--url", &mock.ws_url()])
        .arg("--journal")
        .arg(&journal)
        .output()
        .unwrap();
    assert!(
        recovered.status.success(),
        "{}",
        String::from_utf8_lossy(&recovered.stderr)
    );
    let line: Value = serde_json::from_slice(&recovered.stdout).expect("one report");
    assert_eq!(line["key"], "crash-1", "{line}");
    assert_eq!(line["status"], "ok", "{line}");
    assert_eq!(line["result"]["slept_ms"], 1500);
    assert_eq!(mock.executions("slow"), 1, "recovery did not run it again");
    let calls = list_json(&journal);
    assert_eq!(calls[0]["state"], "terminal");
    assert_eq!(calls[0]["outcome"], "ok");
    assert_eq!(calls[0]["ran"], "ran");

    // discard: refused without a confirmation on a non-terminal stdin,
    // done with --yes.
    arcp(["journal", "discard", "crash-1"])
        .arg("--journal")
        .arg(&journal)
        .assert()
        .code(1)
        .stderr(predicates::str::contains("--yes"));
    arcp(["journal", "discard", "crash-1", "--yes"])
        .arg("--journal")
        .arg(&journal)
        .assert()
        .success()
        .stdout(predicates::str::contains("ended outcome unknown"));
    // The call ran: its record stays, ended "outcome unknown", so the
    // journal keeps that the key may have run.
    let calls = list_json(&journal);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["state"], "terminal", "{calls:?}");
    assert_eq!(calls[0]["outcome"], "OUTCOME_UNAVAILABLE", "{calls:?}");
    assert_eq!(calls[0]["ran"], "may_have_run", "{calls:?}");
    assert!(
        calls[0]["reason"].as_str().unwrap().contains("discarded"),
        "{calls:?}"
    );
}

#[test]
fn a_journal_held_by_a_live_client_is_refused_clearly() {
    let (_rt, mock) = slow_mock();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("calls.db");
    let _live = invoke_child(&mock.ws_url(), &journal, "held-1", 5000);
    wait_for_executions(&mock, 1);
    for command in [
        vec!["journal", "list"],
        vec!["journal", "show", "held-1"],
        vec!["journal", "purge"],
        vec!["journal", "discard", "held-1", "--yes"],
    ] {
        arcp(&command)
            .arg("--journal")
            .arg(&journal)
            .assert()
            .code(5)
            .stderr(predicates::str::contains(
                "running client holds this journal",
            ));
    }
}

#[test]
fn a_missing_journal_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.db");
    arcp(["journal", "list"])
        .arg("--journal")
        .arg(&path)
        .assert()
        .code(1)
        .stderr(predicates::str::contains("absent.db"));
    assert!(!path.exists(), "list must not create a journal");
    // No journal named at all: a usage error.
    arcp(["journal", "list"])
        .assert()
        .code(64)
        .stderr(predicates::str::contains("--journal"));
}

#[test]
fn recover_never_prints_the_url_credentials_or_query() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.db");
    // A runtime that refuses the token: connecting fails at once, and the
    // message names the runtime without its password or query.
    let mock = MockServe::start(&["--token", "right-token-1234"]);
    let address = mock
        .url
        .trim_start_matches("ws://")
        .trim_end_matches("/arcp");
    let url = format!("ws://operator:pw-hunter2-secret@{address}/arcp?access_token=q-secret-77");
    let out = arcp([
        "journal",
        "recover",
        "--url",
        &url,
        "--token",
        "wrong-token-9876",
    ])
    .arg("--journal")
    .arg(&journal)
    .output()
    .unwrap();
    assert!(!out.status.success());
    let all = String::from_utf8_lossy(&[out.stdout, out.stderr].concat()).into_owned();
    assert!(all.contains(address), "names the runtime:\n{all}");
    assert!(
        !all.contains("pw-hunter2-secret"),
        "password printed:\n{all}"
    );
    assert!(!all.contains("q-secret-77"), "query printed:\n{all}");
}

/// A call left unfinished, then recovered after the runtime's key retention:
/// it is ended "outcome unknown", not re-sent, and `list` shows why.
#[test]
fn a_call_past_the_runtime_key_retention_is_listed_as_unknown() {
    let (rt, mock) = slow_mock();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.db");
    let retention = Duration::from_millis(300);
    rt.block_on(async {
        let client = arcp_sdk::Client::builder(mock.ws_url())
            .journal_path(&journal)
            .runtime_key_retention(retention)
            .connect()
            .await
            .unwrap();
        let e = client
            .invoke_tool("slow", json!({"ms": 100}))
            .key_str("old-1")
            .deadline(Duration::from_millis(50))
            .send()
            .await
            .expect_err("the deadline passes while the tool works");
        assert_eq!(e.execution(), arcp_sdk::Execution::MayHaveRun, "{e}");
        tokio::time::sleep(retention).await;
        let recovered = client.recover().await.unwrap();
        assert!(recovered.is_empty(), "not re-sent");
        client.close().await;
    });
    let calls = list_json(&journal);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["state"], "terminal");
    assert_eq!(calls[0]["ran"], "may_have_run");
    let reason = calls[0]["reason"].as_str().expect("a reason");
    assert!(reason.contains("runtime_key_retention"), "{reason}");
    arcp(["journal", "list"])
        .arg("--journal")
        .arg(&journal)
        .assert()
        .success()
        .stdout(predicates::str::contains("unknown"));
    assert_eq!(mock.executions("slow"), 1, "ran once, ever");
}

/// A call whose recorded arguments the redaction hook changed, left
/// unfinished: recovery ends it "outcome unknown: not recoverable" instead
/// of re-sending other arguments, and `list` shows it and why, without the
/// redacted field.
#[test]
fn a_redacted_call_is_listed_as_not_recoverable() {
    let (rt, mock) = slow_mock();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.db");
    rt.block_on(async {
        let client = arcp_sdk::Client::builder(mock.ws_url())
            .journal_path(&journal)
            .journal_redact(|_tool: &str, args: &mut serde_json::Value| {
                if let Some(map) = args.as_object_mut() {
                    map.remove("note");
                }
            })
            .connect()
            .await
            .unwrap();
        let e = client
            .invoke_tool("slow", json!({"ms": 100, "note": "redact-me-please"}))
            .key_str("redacted-1")
            .deadline(Duration::from_millis(50))
            .send()
            .await
            .expect_err("the deadline passes while the tool works");
        assert_eq!(e.execution(), arcp_sdk::Execution::MayHaveRun, "{e}");
        let recovered = client.recover().await.unwrap();
        assert!(recovered.is_empty(), "not re-sent");
        client.close().await;
    });
    let calls = list_json(&journal);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["state"], "terminal");
    assert_eq!(calls[0]["ran"], "may_have_run");
    assert_eq!(calls[0]["redacted"], true);
    let reason = calls[0]["reason"].as_str().expect("a reason");
    assert!(reason.contains("not recoverable"), "{reason}");
    let out = arcp(["journal", "list"])
        .arg("--journal")
        .arg(&journal)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("unknown"), "{text}");
    let shown = arcp(["journal", "show", "redacted-1"])
        .arg("--journal")
        .arg(&journal)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&[shown.stdout, shown.stderr].concat()).into_owned();
    assert!(!shown.contains("redact-me-please"), "{shown}");
    assert_eq!(mock.executions("slow"), 1, "ran once, ever");
}

/// With --journal and no --key, a call that sent nothing (the runtime is
/// unreachable) is "not sent" (the journal may hold it for a recovery),
/// and its hint does not say the user gave the key.
#[test]
fn a_journaled_call_under_a_generated_key_is_not_called_the_users() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.db");
    let out = arcp(["invoke", "echo", "--url", "ws://127.0.0.1:9/arcp"])
        .args(["--connect-budget", "0.2", "--deadline", "5"])
        .arg("--journal")
        .arg(&journal)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let key = stderr
        .lines()
        .find_map(|l| l.strip_prefix("idempotency key: "))
        .expect("the key is printed");
    assert!(!stderr.contains("was yours"), "{stderr}");
    assert!(stderr.contains("generated for this call"), "{stderr}");
    assert!(stderr.contains(&format!("--key {key}")), "{stderr}");
    // With --key, the key is the user's.
    let out = arcp(["invoke", "echo", "--url", "ws://127.0.0.1:9/arcp"])
        .args([
            "--connect-budget",
            "0.2",
            "--deadline",
            "5",
            "--key",
            "mine-1",
        ])
        .arg("--journal")
        .arg(&journal)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--key mine-1 was yours"), "{stderr}");
}
