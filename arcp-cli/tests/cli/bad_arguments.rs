//! Bad command lines: a message naming the problem on stderr, nothing on
//! stdout, exit status 64 (sysexits' EX_USAGE; never clap's 2, which means
//! "tool error" here).

use predicates::prelude::*;
use predicates::str::contains;

use crate::support::arcp;

/// Nothing listens here; every case fails before connecting.
const URL: &str = "ws://127.0.0.1:9/arcp";

fn fails_with(args: &[&str], needles: &[&str]) {
    let out = arcp(args).assert().code(64).stdout("").get_output().clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "arcp {args:?}: stderr lacks {needle:?}:\n{stderr}"
        );
    }
}

#[test]
fn invalid_json_in_args() {
    fails_with(
        &["invoke", "echo", "--url", URL, "--args", "{oops"],
        &["--args", "not valid JSON"],
    );
}

#[test]
fn args_and_args_file_together() {
    fails_with(
        &[
            "invoke",
            "echo",
            "--url",
            URL,
            "--args",
            "{}",
            "--args-file",
            "a.json",
        ],
        &["--args", "--args-file", "cannot be used with"],
    );
}

#[test]
fn unreadable_or_invalid_args_file() {
    fails_with(
        &[
            "invoke",
            "echo",
            "--url",
            URL,
            "--args-file",
            "/nonexistent/args.json",
        ],
        &["cannot read --args-file /nonexistent/args.json"],
    );
    let dir = std::env::temp_dir().join(format!("arcp-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.json");
    std::fs::write(&file, "{\"a\": }").unwrap();
    let path = file.to_str().unwrap();
    fails_with(
        &["invoke", "echo", "--url", URL, "--args-file", path],
        &["--args-file", "is not valid JSON"],
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_keys() {
    fails_with(
        &["invoke", "echo", "--url", URL, "--key", ""],
        &["--key", "idempotency key is empty"],
    );
    fails_with(
        &["invoke", "echo", "--url", URL, "--key", "clé"],
        &["--key", "non-ASCII"],
    );
    let long = "k".repeat(256);
    fails_with(
        &["invoke", "echo", "--url", URL, "--key", &long],
        &["--key", "at most 255"],
    );
}

#[test]
fn bad_dialect() {
    fails_with(
        &["invoke", "echo", "--url", URL, "--dialect", "v3"],
        &["'v3'", "--dialect", "auto", "v1.1", "legacy"],
    );
    fails_with(
        &["mock", "serve", "--dialect", "auto"],
        &["'auto'", "--dialect", "v1.1", "legacy"],
    );
}

#[test]
fn missing_or_bad_url() {
    fails_with(&["invoke", "echo"], &["--url <URL>", "required"]);
    fails_with(
        &["invoke", "echo", "--url", "ftp://127.0.0.1:9/arcp"],
        &["--url", "expected a ws://, wss://, http:// or https:// URL"],
    );
    fails_with(&["invoke", "echo", "--url", "ws://"], &["--url", "no host"]);
}

#[test]
fn missing_tool() {
    fails_with(&["invoke", "--url", URL], &["<TOOL>", "required"]);
}

#[test]
fn bad_numbers() {
    fails_with(
        &["invoke", "echo", "--url", URL, "--max-attempts", "0"],
        &["--max-attempts"],
    );
    fails_with(
        &["invoke", "echo", "--url", URL, "--deadline", "-1"],
        &["--deadline"],
    );
    fails_with(
        &["invoke", "echo", "--url", URL, "--deadline", "soon"],
        &["--deadline", "number of seconds"],
    );
    fails_with(&["mock", "serve", "--port", "70000"], &["--port"]);
}

#[test]
fn unknown_flags_commands_and_values_exit_64_not_2() {
    fails_with(
        &["invoke", "echo", "--url", URL, "--frobnicate"],
        &["--frobnicate"],
    );
    fails_with(&["frobnicate"], &["frobnicate"]);
    fails_with(
        &["mock", "serve", "--replay-policy", "sometimes"],
        &["--replay-policy", "terminal-replay", "accepted-only"],
    );
    // No command at all: usage on stderr, exit 64.
    arcp(Vec::<&str>::new())
        .assert()
        .code(64)
        .stdout("")
        .stderr(contains("Usage: arcp"));
    arcp(["mock"])
        .assert()
        .code(64)
        .stdout("")
        .stderr(contains("serve"));
}

#[test]
fn a_journal_command_without_a_journal_is_a_usage_error() {
    fails_with(&["journal", "list"], &["--journal PATH", "ARCP_JOURNAL"]);
}

#[test]
fn help_and_version_exit_0_on_stdout() {
    for args in [&["--help"][..], &["invoke", "--help"], &["-h"]] {
        arcp(args)
            .assert()
            .code(0)
            .stdout(contains("Usage: arcp"))
            .stderr("");
    }
    arcp(["--version"])
        .assert()
        .code(0)
        .stdout(contains(env!("CARGO_PKG_VERSION")))
        .stderr("");
}

#[test]
fn a_port_in_use_is_reported() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    arcp(["mock", "serve", "--port", &port])
        .assert()
        .code(1)
        .stdout("")
        .stderr(contains(format!("cannot listen on 127.0.0.1:{port}")));
}

#[test]
fn the_token_is_not_echoed_in_argument_errors() {
    let out = arcp([
        "invoke",
        "echo",
        "--url",
        URL,
        "--token",
        "flag-secret-5531",
        "--args",
        "{oops",
    ])
    .assert()
    .code(64)
    .get_output()
    .clone();
    let all = [out.stdout, out.stderr].concat();
    assert!(
        !String::from_utf8_lossy(&all).contains("flag-secret-5531"),
        "token printed"
    );
    assert!(predicate::str::contains("--args").eval(&String::from_utf8_lossy(&all)));
}
