//! Helpers: the `arcp` binary, a child `arcp mock serve`, an in-process
//! mock, and checks of the JSON contract.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command as StdCommand, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

/// Every child and every `arcp` run is killed after this long.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(20);

/// The path of the `arcp` binary under test.
pub(crate) fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_arcp")
}

/// `arcp ARGS`, isolated from the caller's environment.
pub(crate) fn arcp<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env_remove("ARCP_TOKEN")
        .env_remove("ARCP_URL")
        .env_remove("ARCP_JOURNAL")
        .env_remove("ARCP_RUNTIME_KEY_RETENTION")
        .env_remove("RUST_LOG")
        .timeout(TIMEOUT);
    cmd
}

/// `arcp invoke TOOL --url URL EXTRA.. --json`.
pub(crate) fn invoke_json(tool: &str, url: &str, extra: &[&str]) -> Command {
    let mut cmd = arcp(["invoke", tool, "--url", url]);
    cmd.args(extra).arg("--json");
    cmd
}

/// Kills (SIGKILL) and reaps a child when dropped, so no test leaves a
/// process behind, even when it fails.
pub(crate) struct ChildGuard(pub Option<Child>);

impl ChildGuard {
    /// The child, if still owned.
    pub(crate) fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("child already taken")
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A child `arcp mock serve`, started on a free port.
pub(crate) struct MockServe {
    /// The URL it printed.
    pub url: String,
    /// The process (killed on drop).
    pub guard: ChildGuard,
}

impl MockServe {
    /// Starts `arcp mock serve --port 0 EXTRA..` and reads its URL line.
    pub(crate) fn start(extra: &[&str]) -> MockServe {
        MockServe::start_with_env(extra, &[])
    }

    /// [`MockServe::start`] with these environment variables set.
    pub(crate) fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> MockServe {
        let child = StdCommand::new(bin())
            .args(["mock", "serve", "--port", "0"])
            .args(extra)
            .env_remove("RUST_LOG")
            .env_remove("ARCP_MOCK_TOKEN")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn arcp mock serve");
        let mut guard = ChildGuard(Some(child));
        let stdout = guard.child().stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("arcp mock serve printed no URL within 10 s");
        let url = line.trim_end().to_owned();
        assert!(
            url.starts_with("ws://127.0.0.1:") && url.ends_with("/arcp"),
            "unexpected URL line {line:?}"
        );
        MockServe { url, guard }
    }
}

/// stdout must be exactly one line holding one JSON object.
pub(crate) fn single_json_object(stdout: &[u8]) -> serde_json::Map<String, Value> {
    let text = std::str::from_utf8(stdout).expect("stdout is UTF-8");
    assert!(
        text.ends_with('\n'),
        "stdout does not end with a newline: {text:?}"
    );
    assert_eq!(text.lines().count(), 1, "stdout is not one line: {text:?}");
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => map,
        other => panic!("stdout is not one JSON object: {text:?} ({other:?})"),
    }
}

/// The keys of an object, sorted.
pub(crate) fn keys(map: &serde_json::Map<String, Value>) -> Vec<&str> {
    let mut keys: Vec<&str> = map.keys().map(String::as_str).collect();
    keys.sort_unstable();
    keys
}

/// Checks the `{"status":"ok",...}` contract field by field.
pub(crate) fn assert_ok_contract(map: &serde_json::Map<String, Value>) {
    assert_eq!(
        keys(map),
        ["attempts", "job_id", "key", "replayed", "result", "status"],
        "{map:?}"
    );
    assert_eq!(map["status"], "ok");
    assert!(map.contains_key("result"));
    assert!(
        map["job_id"].is_string() || map["job_id"].is_null(),
        "{map:?}"
    );
    assert!(
        map["key"].as_str().is_some_and(|k| !k.is_empty()),
        "{map:?}"
    );
    assert!(map["replayed"].is_boolean(), "{map:?}");
    assert!(map["attempts"].as_u64().is_some_and(|n| n >= 1), "{map:?}");
}

/// Checks the `{"status":"error",...}` contract field by field.
pub(crate) fn assert_error_contract(map: &serde_json::Map<String, Value>) {
    assert_eq!(
        keys(map),
        ["attempts", "code", "job_id", "key", "message", "ran", "status"],
        "{map:?}"
    );
    assert_eq!(map["status"], "error");
    let code = map["code"].as_str().expect("code is a string");
    assert!(
        !code.is_empty() && code.chars().all(|c| c.is_ascii_uppercase() || c == '_'),
        "code {code:?} is not an upper-case name"
    );
    assert!(
        map["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{map:?}"
    );
    assert!(
        map["key"].as_str().is_some_and(|k| !k.is_empty()),
        "{map:?}"
    );
    assert!(
        map["job_id"].is_string() || map["job_id"].is_null(),
        "{map:?}"
    );
    assert!(map["attempts"].is_u64(), "{map:?}");
}

/// A multi-threaded Tokio runtime for in-process mocks: the mock serves on
/// its workers while the test thread runs the binary.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}
