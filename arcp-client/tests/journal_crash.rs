//! The journal's acceptance test: a real child process invokes a slow tool
//! through a SQLite journal and is killed with SIGKILL mid-call; a restarted
//! process with the same journal file recovers the call, the outcome is
//! delivered, and the tool ran exactly once.
//!
//! The mock runtime runs in this (the parent) test process, so its execution
//! counters survive the child's death. The child is this same test binary,
//! re-executed to run only `child_process_entry_point` with its role in
//! `ARCP_JOURNAL_CHILD` (a real, separate process: own memory, own tokio
//! runtime, own file lock).
//!
//! Three kill points:
//! - after accept: the child saw `job.accepted`, the tool is still running;
//! - before accept: the runtime started the job but the child never saw the
//!   accept (the mock delays its reply);
//! - before the runtime saw it: the submit was sent but never processed
//!   (black hole); without the journal this call would be lost.

#![cfg(unix)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arcp_mock::{Fault, MockRuntime};
use arcp_sdk::{Client, JournalErrorKind, JournalState, RetryPolicy, SqliteJournal};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Semaphore};

const ROLE: &str = "ARCP_JOURNAL_CHILD";
const URL: &str = "ARCP_JOURNAL_URL";
const PATH: &str = "ARCP_JOURNAL_PATH";

// ----- the child process -------------------------------------------------------

/// The child's entry point. In a normal test run (no `ARCP_JOURNAL_CHILD`)
/// it does nothing.
#[test]
fn child_process_entry_point() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let url = std::env::var(URL).expect("the parent passes the mock URL");
    let path = std::env::var(PATH).expect("the parent passes the journal path");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(child(&role, &url, &path));
}

fn say(line: impl AsRef<str>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "CHILD {}", line.as_ref());
    let _ = out.flush();
}

async fn child(role: &str, url: &str, path: &str) {
    let client = Client::builder(url)
        .journal_path(path)
        .handshake_timeout(Duration::from_secs(2))
        .default_deadline(Duration::from_secs(30))
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(20))
                .max_delay(Duration::from_millis(400))
                .max_attempts(30)
                .max_elapsed(Duration::from_secs(25))
                .outcome_poll(Duration::from_millis(100)),
        )
        .connect()
        .await
        .expect("the child connects");
    match role {
        "invoke" => {
            say("CONNECTED");
            // Wait for the parent's go (it may inject a fault first).
            let go = tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                std::io::stdin().read_line(&mut line).map(|_| line)
            })
            .await;
            assert!(matches!(go, Ok(Ok(ref l)) if l.trim() == "GO"), "{go:?}");
            let call = client
                .invoke_tool(
                    "charge",
                    json!({"order": 4812, "amount": 12.5, "note": "ünïcode"}),
                )
                .option("max_runtime_sec", json!(60))
                .send();
            say(format!("KEY {}", call.key().expect("a fresh key")));
            let handle = call.handle();
            tokio::spawn(async move {
                loop {
                    if let Some(job) = handle.job_id() {
                        say(format!("ACCEPTED {job}"));
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            });
            // Never returns in these tests: the parent kills the process.
            let out = call.await;
            say(format!("UNEXPECTED-END {out:?}"));
        }
        "recover" => {
            let calls = client
                .recover()
                .await
                .expect("the journal lists unfinished calls");
            say(format!("RECOVERING {}", calls.len()));
            for call in calls {
                let key = call.key().cloned().expect("recorded key");
                match call.await {
                    Ok(out) => say(format!(
                        "RECOVERED {key} {} replayed={} attempts={}",
                        out.value, out.replayed, out.attempts
                    )),
                    Err(e) => say(format!("FAILED {key} {}", e.code_name())),
                }
                match client.lookup(&key).await {
                    Ok(Some(entry)) => say(format!("LOOKUP {key} {}", entry.state.name())),
                    other => say(format!("LOOKUP {key} {other:?}")),
                }
            }
            client.close().await;
            say("EXIT");
        }
        other => panic!("unknown child role {other}"),
    }
}

// ----- the parent -------------------------------------------------------------

/// A child process, its stdin, and its stdout lines (`CHILD ...` only).
struct ChildProc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl ChildProc {
    fn spawn(role: &str, url: &str, journal: &Path) -> ChildProc {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut child = Command::new(exe)
            .args([
                "child_process_entry_point",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, role)
            .env(URL, url)
            .env(PATH, journal)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child process");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                // libtest may print "test NAME ... " without a newline first.
                if let Some(at) = line.find("CHILD ") {
                    if tx.send(line[at + 6..].to_owned()).is_err() {
                        return;
                    }
                }
            }
        });
        ChildProc {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for the next line starting with `prefix`; returns the rest.
    async fn expect(&mut self, prefix: &str) -> String {
        let until = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            match tokio::time::timeout_at(until, self.lines.recv()).await {
                Ok(Some(line)) => {
                    self.seen.push(line.clone());
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().to_owned();
                    }
                }
                Ok(None) => panic!("the child ended before {prefix:?}; it said {:?}", self.seen),
                Err(_) => panic!(
                    "no {prefix:?} from the child in 30 s; it said {:?}",
                    self.seen
                ),
            }
        }
    }

    fn go(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin");
        stdin.write_all(b"GO\n").expect("write to the child");
        stdin.flush().expect("flush");
    }

    /// SIGKILL, and reap. Returns everything the child said.
    async fn kill(mut self) -> Vec<String> {
        self.child.kill().expect("SIGKILL the child");
        let status = self.child.wait().expect("reap the child");
        assert_eq!(status.signal(), Some(9), "killed by SIGKILL: {status:?}");
        while let Some(line) = self.lines.recv().await {
            self.seen.push(line);
        }
        self.seen
    }

    async fn wait_success(mut self) -> Vec<String> {
        while let Some(line) = self.lines.recv().await {
            self.seen.push(line);
        }
        let status = tokio::task::spawn_blocking(move || self.child.wait())
            .await
            .expect("join")
            .expect("reap the child");
        assert!(status.success(), "the child failed: {status:?}");
        self.seen
    }
}

/// A mock runtime (v1.1, terminal replay: the Python runtime's behaviour)
/// with a `charge` tool that blocks until the test releases it.
async fn mock(release: Arc<Semaphore>) -> MockRuntime {
    MockRuntime::builder()
        .tool("charge", move |args: Value, _ctx| {
            let release = release.clone();
            async move {
                let _permit = release.acquire().await;
                Ok(json!({"charged": args["order"], "amount": args["amount"]}))
            }
        })
        .replay_policy(arcp_mock::ReplayPolicy::TerminalReplay)
        .start()
        .await
        .expect("the mock binds a loopback port")
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The submits carrying `key`, as received.
fn submits(mock: &MockRuntime, key: &str) -> Vec<arcp_mock::Envelope> {
    mock.received()
        .into_iter()
        .filter(|e| e.kind == "job.submit" && e.payload["idempotency_key"] == key)
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum KillPoint {
    AfterAccept,
    BeforeAccept,
    BeforeRuntime,
}

async fn crash_and_recover(point: KillPoint) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let journal = dir.path().join("calls.journal");
    let release = Arc::new(Semaphore::new(0));
    let mock = mock(release.clone()).await;
    let url = mock.ws_url();

    // Process 1: invoke through the journal, then die by SIGKILL.
    let mut first = ChildProc::spawn("invoke", &url, &journal);
    first.expect("CONNECTED").await;
    match point {
        KillPoint::AfterAccept => {}
        // The next frame the runtime sends (this call's job.accepted) waits.
        KillPoint::BeforeAccept => mock.inject(Fault::DelayReplies(Duration::from_secs(60))),
        KillPoint::BeforeRuntime => mock.inject(Fault::BlackHole),
    }
    first.go();
    let key = first.expect("KEY").await;
    match point {
        KillPoint::AfterAccept => {
            let job = first.expect("ACCEPTED").await;
            assert!(!job.is_empty());
        }
        KillPoint::BeforeAccept => {
            until("the runtime starts the job", || {
                mock.executions("charge") == 1
            })
            .await;
        }
        KillPoint::BeforeRuntime => {
            until("the submit reaches the runtime", || {
                !submits(&mock, &key).is_empty()
            })
            .await;
            assert_eq!(mock.executions("charge"), 0);
        }
    }
    // While process 1 lives, it holds the journal: another process (this
    // one) cannot open it.
    let held = SqliteJournal::open(&journal).expect_err("the child holds the journal");
    assert_eq!(held.kind, JournalErrorKind::Locked, "{held}");

    let said = first.kill().await;
    assert!(
        !said.iter().any(|l| l.starts_with("UNEXPECTED-END")),
        "the call must still be running when killed: {said:?}"
    );
    match point {
        KillPoint::AfterAccept => {}
        KillPoint::BeforeAccept | KillPoint::BeforeRuntime => assert!(
            !said.iter().any(|l| l.starts_with("ACCEPTED")),
            "the accept must not have reached the child: {said:?}"
        ),
    }
    match point {
        KillPoint::AfterAccept => {}
        KillPoint::BeforeAccept => {
            // The job finishes while no client is connected.
            release.add_permits(1);
        }
        KillPoint::BeforeRuntime => {
            mock.inject(Fault::Recover);
            release.add_permits(1);
        }
    }

    // Process 2: same journal file, recovers the call.
    let mut second = ChildProc::spawn("recover", &url, &journal);
    let n = second.expect("RECOVERING").await;
    assert_eq!(n, "1", "exactly the one unfinished call is recovered");
    if point == KillPoint::AfterAccept {
        // The original job is still running: the recovered call gets only a
        // replayed accept until it ends. Release it now.
        tokio::time::sleep(Duration::from_millis(200)).await;
        release.add_permits(1);
    }
    let recovered = second.expect("RECOVERED").await;
    let lookup = second.expect("LOOKUP").await;
    let output = second.wait_success().await;
    eprintln!("{point:?}: process 1 said {said:?}; process 2 said {output:?}");
    assert!(output.iter().any(|l| l == "EXIT"), "{output:?}");

    // The outcome is delivered, for the same key...
    assert!(
        recovered.starts_with(&format!("{key} {{\"amount\":12.5,\"charged\":4812}}")),
        "{recovered}"
    );
    assert_eq!(lookup, format!("{key} terminal"));
    // ...and the tool ran exactly once.
    assert_eq!(mock.executions("charge"), 1, "charge ran once");
    assert_eq!(mock.executions_for_key(&key), 1);
    // Every submit of the call, from both processes, carried the same key
    // and a byte-identical intent.
    let submits = submits(&mock, &key);
    assert!(submits.len() >= 2, "{submits:?}");
    for s in &submits {
        assert_eq!(s.payload, submits[0].payload);
    }
    let ids: std::collections::HashSet<_> = submits.iter().map(|s| s.id.clone()).collect();
    assert_eq!(ids.len(), submits.len(), "a fresh envelope id per attempt");

    // After both processes: the journal file holds the call as terminal.
    let j = SqliteJournal::open(&journal).expect("the journal opens after the children exit");
    j.integrity_check().expect("consistent");
    use arcp_sdk::Journal as _;
    let entry = j
        .get(&key.as_str().try_into().unwrap())
        .unwrap()
        .expect("recorded");
    assert!(
        matches!(entry.state, JournalState::Terminal(_)),
        "{entry:?}"
    );
    assert!(j.unfinished(10).unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_after_accept_is_recovered_and_runs_once() {
    crash_and_recover(KillPoint::AfterAccept).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_before_accept_is_recovered_and_runs_once() {
    crash_and_recover(KillPoint::BeforeAccept).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_before_the_runtime_saw_the_call_is_recovered_and_runs_once() {
    crash_and_recover(KillPoint::BeforeRuntime).await;
}
