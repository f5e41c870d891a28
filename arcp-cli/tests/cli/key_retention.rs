//! `--runtime-key-retention` (and `ARCP_RUNTIME_KEY_RETENTION`), against a
//! mock that forgets keys after a second: a journaled call is never sent
//! again once the runtime may have forgotten its key (it would run again),
//! and a key conflict with an old record is not "did not run".

use std::time::Duration;

use arcp_mock::{Dialect, MockRuntime};
use serde_json::{json, Value};

use crate::support::{arcp, assert_error_contract, runtime, single_json_object};

/// How long the mock remembers a key; the CLI is told the same.
const RETENTION: Duration = Duration::from_secs(1);
const RETENTION_FLAG: &str = "1";

/// A mock whose `slow` tool sleeps `ms` milliseconds and returns them,
/// forgetting keys after [`RETENTION`], with the runtime it is served on.
fn forgetful_mock() -> (tokio::runtime::Runtime, MockRuntime) {
    let rt = runtime();
    let mock = rt
        .block_on(
            MockRuntime::builder()
                .dialect(Dialect::V1_1)
                .key_retention(RETENTION)
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

/// `arcp invoke slow --url URL --dialect v1.1 --key KEY --args ARGS EXTRA..`.
fn invoke(url: &str, key: &str, args: &str, extra: &[&str]) -> assert_cmd::Command {
    let mut cmd = arcp(["invoke", "slow", "--url", url, "--dialect", "v1.1"]);
    cmd.args(["--key", key, "--args", args]).args(extra);
    cmd
}

/// Lets the runtime forget every key bound so far (with a margin for the
/// binding's own delay).
fn let_the_runtime_forget() {
    std::thread::sleep(RETENTION + Duration::from_millis(300));
}

#[test]
fn recover_does_not_resend_a_call_the_runtime_forgot() {
    let (_rt, mock) = forgetful_mock();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("calls.db");
    let journal = journal.to_str().unwrap();

    // The deadline passes while the tool works: the record stays unfinished.
    let out = invoke(
        &mock.ws_url(),
        "ret-1",
        r#"{"ms": 3000}"#,
        &["--journal", journal, "--deadline", "1", "--json"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(4), "may have run: {out:?}");
    assert_eq!(mock.executions_for_key("ret-1"), 1);
    let_the_runtime_forget();

    let out = arcp(["journal", "recover", "--json", "--dialect", "v1.1"])
        .args(["--url", &mock.ws_url(), "--journal", journal])
        .args(["--runtime-key-retention", RETENTION_FLAG])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // Ground truth: not sent again, so not run again.
    assert_eq!(mock.executions_for_key("ret-1"), 1, "the tool ran twice");
    // Reported, "outcome unknown", with why.
    let line: Value = serde_json::from_slice(&out.stdout).expect("one report line");
    assert_eq!(line["key"], "ret-1", "{line}");
    assert_eq!(line["status"], "error", "{line}");
    assert_eq!(line["code"], "OUTCOME_UNAVAILABLE", "{line}");
    assert_eq!(line["ran"], "may_have_run", "{line}");
    let message = line["message"].as_str().unwrap();
    assert!(message.contains("runtime_key_retention"), "{message}");

    // The record stays ended.
    let out = arcp(["journal", "list", "--json", "--journal", journal])
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["state"], "terminal", "{listed}");
    assert_eq!(listed["ran"], "may_have_run", "{listed}");
    assert_eq!(mock.executions_for_key("ret-1"), 1);
}

#[test]
fn recover_reports_a_forgotten_call_in_text_too_and_reads_the_environment() {
    let (_rt, mock) = forgetful_mock();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("calls.db");
    let journal = journal.to_str().unwrap();
    let out = invoke(
        &mock.ws_url(),
        "ret-2",
        r#"{"ms": 3000}"#,
        &["--journal", journal, "--deadline", "1", "--json"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(4), "may have run: {out:?}");
    let_the_runtime_forget();

    let out = arcp(["journal", "recover", "--dialect", "v1.1"])
        .args(["--url", &mock.ws_url(), "--journal", journal])
        .env("ARCP_RUNTIME_KEY_RETENTION", RETENTION_FLAG)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(mock.executions_for_key("ret-2"), 1, "the tool ran twice");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ret-2: OUTCOME_UNAVAILABLE (may_have_run)"),
        "{text}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("nothing to recover"), "{stderr}");
}

#[test]
fn a_conflict_with_a_record_the_runtime_forgot_is_not_sent_not_did_not_run() {
    let (_rt, mock) = forgetful_mock();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("calls.db");
    let journal = journal.to_str().unwrap();
    let url = mock.ws_url();

    // The key runs {"ms": 1} through the journal.
    invoke(
        &url,
        "dup-1",
        r#"{"ms": 1}"#,
        &["--journal", journal, "--json"],
    )
    .assert()
    .code(0);
    assert_eq!(mock.executions_for_key("dup-1"), 1);
    // The runtime forgets it, and another process runs {"ms": 2} under it.
    let_the_runtime_forget();
    invoke(&url, "dup-1", r#"{"ms": 2}"#, &["--json"])
        .assert()
        .code(0);
    assert_eq!(mock.executions_for_key("dup-1"), 2);

    // This journal's record is of {"ms": 1}, older than the runtime's
    // memory: it proves no binding. The key ran {"ms": 2}: not "did not run".
    let out = invoke(
        &url,
        "dup-1",
        r#"{"ms": 2}"#,
        &[
            "--journal",
            journal,
            "--runtime-key-retention",
            RETENTION_FLAG,
            "--json",
        ],
    )
    .output()
    .unwrap();
    let map = single_json_object(&out.stdout);
    assert_error_contract(&map);
    assert_eq!(map["code"], "DUPLICATE_KEY", "{map:?}");
    assert_eq!(map["ran"], "not_sent", "{map:?}");
    assert_eq!(out.status.code(), Some(6), "{map:?}");

    // In text: the hint for a local conflict, never "use a new key".
    let out = invoke(
        &url,
        "dup-1",
        r#"{"ms": 2}"#,
        &[
            "--journal",
            journal,
            "--runtime-key-retention",
            RETENTION_FLAG,
        ],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the journal records --key dup-1"),
        "{stderr}"
    );
    assert!(!stderr.contains("Use a new key"), "{stderr}");
    assert!(!stderr.contains("nothing ran"), "{stderr}");
    // Nothing was sent: the runtime ran the key twice in all.
    assert_eq!(mock.executions_for_key("dup-1"), 2);
}

#[test]
fn bad_retentions_are_usage_errors_naming_the_flag() {
    let url = "ws://127.0.0.1:9/arcp";
    for value in ["-1", "0", "inf", "NaN", "1e10", "a day"] {
        for command in [
            vec!["invoke", "slow", "--url", url],
            vec!["journal", "--journal", "j.db", "recover", "--url", url],
        ] {
            let out = arcp(&command)
                .args(["--runtime-key-retention", value])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(64), "{command:?} {value}: {out:?}");
            assert!(out.stdout.is_empty(), "{out:?}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("--runtime-key-retention"),
                "{command:?} {value}: {stderr}"
            );
        }
        let out = arcp(["invoke", "slow", "--url", url])
            .env("ARCP_RUNTIME_KEY_RETENTION", value)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "env {value}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--runtime-key-retention"),
            "env {value}: {stderr}"
        );
    }
}

#[test]
fn the_help_gives_the_builders_guidance() {
    for command in [&["invoke", "--help"][..], &["journal", "recover", "--help"]] {
        let out = arcp(command).output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        for needle in [
            "--runtime-key-retention <SECS>",
            "86400",
            "Python runtime's default",
            "shortest retention of the runtimes reached",
            "ARCP_RUNTIME_KEY_RETENTION",
        ] {
            assert!(
                text.contains(needle),
                "{command:?} lacks {needle:?}:\n{text}"
            );
        }
    }
}
