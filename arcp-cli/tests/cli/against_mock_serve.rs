//! `arcp invoke` against a child `arcp mock serve` process.

use std::time::{Duration, Instant};

use predicates::str::contains;
use serde_json::json;

use crate::support::{
    arcp, assert_error_contract, assert_ok_contract, invoke_json, single_json_object, MockServe,
};

#[test]
fn echo_succeeds_with_the_ok_contract() {
    let mock = MockServe::start(&[]);
    let args = json!({"hello": "world", "n": [1, 2.5, null]});
    let out = invoke_json(
        "echo",
        &mock.url,
        &["--args", &args.to_string(), "--key", "echo-1"],
    )
    // Without --token the mock accepts any bearer token.
    .env("ARCP_TOKEN", "any-token-at-all")
    .assert()
    .code(0)
    .get_output()
    .clone();
    let map = single_json_object(&out.stdout);
    assert_ok_contract(&map);
    assert_eq!(map["result"], args);
    assert_eq!(map["key"], "echo-1");
    assert_eq!(map["replayed"], false);
    assert_eq!(map["attempts"], 1);
    assert!(map["job_id"].as_str().is_some_and(|j| !j.is_empty()));
}

#[test]
fn a_generated_key_is_reported() {
    let mock = MockServe::start(&[]);
    let out = invoke_json("echo", &mock.url, &[])
        .assert()
        .code(0)
        .get_output()
        .clone();
    let map = single_json_object(&out.stdout);
    assert_ok_contract(&map);
    assert_eq!(map["result"], json!({}), "default arguments are {{}}");
    // A UUIDv7: 36 characters, version nibble 7.
    let key = map["key"].as_str().unwrap();
    assert_eq!(key.len(), 36, "{key}");
    assert_eq!(&key[14..15], "7", "{key}");
}

#[test]
fn a_repeated_key_replays_the_stored_outcome_without_running_again() {
    let mock = MockServe::start(&[]);
    let args = r#"{"steps": 2, "sleep_ms": 20}"#;
    let first = invoke_json("counter", &mock.url, &["--args", args, "--key", "count-1"])
        .assert()
        .code(0)
        .get_output()
        .clone();
    let first = single_json_object(&first.stdout);
    assert_eq!(first["result"], json!({"count": 1}));
    assert_eq!(first["replayed"], false);

    let again = invoke_json("counter", &mock.url, &["--args", args, "--key", "count-1"])
        .assert()
        .code(0)
        .get_output()
        .clone();
    let again = single_json_object(&again.stdout);
    assert_ok_contract(&again);
    assert_eq!(again["result"], json!({"count": 1}), "the tool ran again");
    assert_eq!(again["replayed"], true);
    assert_eq!(again["job_id"], first["job_id"]);

    // A new key is a new call: the counter runs a second time.
    let other = invoke_json("counter", &mock.url, &["--args", args, "--key", "count-2"])
        .assert()
        .code(0)
        .get_output()
        .clone();
    assert_eq!(
        single_json_object(&other.stdout)["result"],
        json!({"count": 2})
    );
}

#[test]
fn a_tool_error_exits_2_with_the_wire_code() {
    let mock = MockServe::start(&[]);
    let args = r#"{"code": "PERMISSION_DENIED", "message": "not yours"}"#;
    let out = invoke_json("fail", &mock.url, &["--args", args, "--key", "fail-1"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let map = single_json_object(&out.stdout);
    assert_error_contract(&map);
    assert_eq!(map["code"], "PERMISSION_DENIED");
    assert_eq!(map["message"], "not yours");
    assert_eq!(map["key"], "fail-1");
    assert!(map["job_id"].is_string(), "{map:?}");
    assert_eq!(map["attempts"], 1);
}

#[test]
fn an_unknown_tool_is_refused_and_did_not_run() {
    let mock = MockServe::start(&[]);
    // Refused before acceptance, under a key generated for the call.
    let out = invoke_json("no-such-tool", &mock.url, &[])
        .assert()
        .code(3)
        .get_output()
        .clone();
    let map = single_json_object(&out.stdout);
    assert_error_contract(&map);
    assert_eq!(map["code"], "AGENT_NOT_AVAILABLE");
}

#[test]
fn the_same_key_with_other_arguments_exits_3() {
    let mock = MockServe::start(&[]);
    invoke_json(
        "echo",
        &mock.url,
        &["--args", r#"{"order": 1}"#, "--key", "dup-1"],
    )
    .assert()
    .code(0);
    let out = invoke_json(
        "echo",
        &mock.url,
        &["--args", r#"{"order": 2}"#, "--key", "dup-1"],
    )
    .assert()
    .code(3)
    .get_output()
    .clone();
    let map = single_json_object(&out.stdout);
    assert_error_contract(&map);
    assert_eq!(map["code"], "DUPLICATE_KEY");
    assert_eq!(map["key"], "dup-1");
    assert!(map["job_id"].is_null(), "{map:?}");
}

#[test]
fn without_json_the_result_is_pretty_on_stdout_and_logs_on_stderr() {
    let mock = MockServe::start(&[]);
    let out = arcp(["invoke", "counter", "--url", &mock.url])
        .args(["--args", r#"{"steps": 3, "sleep_ms": 30}"#])
        .assert()
        .code(0)
        .get_output()
        .clone();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "{\n  \"count\": 1\n}\n"
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("[info] counter: execution 1"), "{stderr}");
    assert!(stderr.contains("ok: job "), "{stderr}");
    // stderr is not a terminal here: no progress bar drawing.
    assert!(
        !stderr.contains('\u{1b}'),
        "terminal escapes on a pipe: {stderr:?}"
    );

    let out = arcp(["invoke", "fail", "--url", &mock.url])
        .args([
            "--args",
            r#"{"code": "NOT_FOUND", "message": "no such order"}"#,
        ])
        .assert()
        .code(2)
        .stdout("")
        .get_output()
        .clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("error: NOT_FOUND: no such order"),
        "{stderr}"
    );
}

#[test]
fn arguments_can_come_from_a_file_or_stdin() {
    let mock = MockServe::start(&[]);
    let out = invoke_json("echo", &mock.url, &["--args-file", "-"])
        .write_stdin(r#"{"from": "stdin"}"#)
        .assert()
        .code(0)
        .get_output()
        .clone();
    assert_eq!(
        single_json_object(&out.stdout)["result"],
        json!({"from": "stdin"})
    );

    let file = std::env::temp_dir().join(format!("arcp-cli-args-{}.json", std::process::id()));
    std::fs::write(&file, r#"{"from": "file"}"#).unwrap();
    let out = invoke_json("echo", &mock.url, &["--args-file", file.to_str().unwrap()])
        .assert()
        .code(0)
        .get_output()
        .clone();
    let _ = std::fs::remove_file(&file);
    assert_eq!(
        single_json_object(&out.stdout)["result"],
        json!({"from": "file"})
    );
}

#[test]
fn a_legacy_runtime_is_reached_by_auto_and_by_legacy() {
    let mock = MockServe::start(&["--dialect", "legacy"]);
    for dialect in ["auto", "legacy"] {
        let out = invoke_json(
            "echo",
            &mock.url,
            &["--args", r#"{"d": 1}"#, "--dialect", dialect],
        )
        .assert()
        .code(0)
        .get_output()
        .clone();
        let map = single_json_object(&out.stdout);
        assert_ok_contract(&map);
        assert_eq!(map["result"], json!({"d": 1}), "--dialect {dialect}");
    }
}

#[test]
fn a_wrong_token_is_unauthenticated_and_never_printed() {
    let mock = MockServe::start(&["--token", "right-token-1234"]);
    // From the environment, with every diagnostic on.
    // Nothing was sent under a key generated for the call: did not run.
    let out = invoke_json("echo", &mock.url, &["-vv"])
        .env("ARCP_TOKEN", "wrong-token-9876")
        .assert()
        .code(3)
        .get_output()
        .clone();
    let map = single_json_object(&out.stdout);
    assert_error_contract(&map);
    assert_eq!(map["code"], "UNAUTHENTICATED");
    assert_eq!(map["attempts"], 0);
    let all = String::from_utf8_lossy(&[out.stdout, out.stderr].concat()).into_owned();
    assert!(!all.contains("wrong-token-9876"), "token printed:\n{all}");
    assert!(!all.contains("right-token-1234"), "token printed:\n{all}");

    // From the flag, in human mode.
    let out = arcp([
        "invoke",
        "echo",
        "--url",
        &mock.url,
        "--token",
        "wrong-token-9876",
        "-vv",
    ])
    .assert()
    .code(3)
    .stdout("")
    .stderr(contains("UNAUTHENTICATED"))
    .get_output()
    .clone();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("wrong-token-9876"));

    // The right token works, and is not printed either.
    let out = invoke_json("echo", &mock.url, &["-vv"])
        .env("ARCP_TOKEN", "right-token-1234")
        .assert()
        .code(0)
        .get_output()
        .clone();
    let all = String::from_utf8_lossy(&[out.stdout, out.stderr].concat()).into_owned();
    assert!(!all.contains("right-token-1234"), "token printed:\n{all}");
}

#[test]
fn the_mock_reads_its_token_from_the_environment() {
    // Off the command line: the process list shows no token.
    let mock = MockServe::start_with_env(&[], &[("ARCP_MOCK_TOKEN", "env-token-5678")]);
    let out = invoke_json("echo", &mock.url, &[])
        .env("ARCP_TOKEN", "wrong-token-9876")
        .assert()
        // Refused credentials with a key the CLI picked: did not run.
        .code(3)
        .get_output()
        .clone();
    assert_eq!(single_json_object(&out.stdout)["code"], "UNAUTHENTICATED");
    invoke_json("echo", &mock.url, &[])
        .env("ARCP_TOKEN", "env-token-5678")
        .assert()
        .code(0);
    arcp(["mock", "serve", "--help"])
        .assert()
        .success()
        .stdout(contains("ARCP_MOCK_TOKEN"));
}

#[test]
fn an_unreachable_runtime_is_an_error_object_with_zero_attempts() {
    // Bind and drop a listener: nothing listens on that port afterwards.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("ws://127.0.0.1:{port}/arcp");
    let started = std::time::Instant::now();
    let out = invoke_json(
        "echo",
        &url,
        &["--key", "unreachable-1", "--connect-budget", "1"],
    )
    .assert()
    // The key was supplied: an earlier call with it may have run.
    .code(6)
    .get_output()
    .clone();
    // Refused connections are retried (a runtime may be restarting), but
    // only within the connect budget.
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    let map = single_json_object(&out.stdout);
    assert_error_contract(&map);
    assert_eq!(map["code"], "CONNECT_FAILED");
    assert_eq!(map["key"], "unreachable-1");
    assert_eq!(map["attempts"], 0);
    assert!(map["job_id"].is_null());
}

/// A key the CLI picks is "did not run" when nothing was sent, but not with
/// a journal: the call's record stays for a recovery to send.
#[test]
fn a_generated_key_with_a_journal_is_not_sent_not_did_not_run() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("ws://127.0.0.1:{port}/arcp");
    let out = invoke_json("echo", &url, &["--connect-budget", "1"])
        .assert()
        .code(3)
        .get_output()
        .clone();
    assert_eq!(single_json_object(&out.stdout)["ran"], "not_run");
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.db");
    let out = invoke_json("echo", &url, &["--connect-budget", "1"])
        .arg("--journal")
        .arg(&journal)
        .assert()
        .get_output()
        .clone();
    let map = single_json_object(&out.stdout);
    assert_ne!(
        map["ran"], "not_run",
        "a recovery may still send it: {map:?}"
    );
    assert_ne!(out.status.code(), Some(3), "{map:?}");
}

#[test]
fn mock_serve_stops_on_sigterm_and_sigint() {
    for signal in ["-TERM", "-INT"] {
        let mut mock = MockServe::start(&[]);
        // It serves...
        invoke_json("echo", &mock.url, &[]).assert().code(0);
        // ...until signalled.
        let pid = mock.guard.child().id().to_string();
        let sent = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("run kill");
        assert!(sent.success());
        let started = Instant::now();
        let status = loop {
            if let Some(status) = mock.guard.child().try_wait().unwrap() {
                break status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "arcp mock serve ignored SIG{signal}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "{signal}: {status:?}");
    }
}

/// A runtime's text that echoes the token, the URL's query secret and
/// terminal escape sequences: the token and the query appear in neither
/// mode's output (diagnostics included), and human mode writes no raw
/// control character.
#[test]
fn echoed_secrets_and_escape_sequences_never_reach_the_terminal() {
    let token = "echoed-token-5e1d";
    let query_secret = "query-s3cret-77ab";
    let mock = MockServe::start(&["--token", token]);
    let url = format!("{}?access_token={query_secret}", mock.url);
    let message = format!("denied {token} {query_secret} \x1b]0;owned\x07\x1b[2J\u{9b}31m");
    let args = json!({"code": "PERMISSION_DENIED", "message": message}).to_string();
    for json_mode in [false, true] {
        let mut cmd = arcp(["invoke", "fail", "--url", &url, "--args", &args, "-vv"]);
        if json_mode {
            cmd.arg("--json");
        }
        let out = cmd
            .env("ARCP_TOKEN", token)
            .assert()
            .code(2)
            .get_output()
            .clone();
        let all = String::from_utf8_lossy(&[out.stdout.clone(), out.stderr.clone()].concat())
            .into_owned();
        assert!(all.contains("PERMISSION_DENIED"), "{all}");
        assert!(all.contains("<redacted>"), "{all}");
        assert!(!all.contains(token), "token printed:\n{all}");
        assert!(!all.contains(query_secret), "URL query printed:\n{all}");
        if !json_mode {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                !stderr.contains(['\x1b', '\x07', '\u{9b}']),
                "a control character reached the terminal:\n{stderr:?}"
            );
            assert!(stderr.contains("\\u{1b}]0;owned"), "{stderr:?}");
        }
    }
}
