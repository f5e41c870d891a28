//! A process restart that recovers an unfinished call from the SQLite journal.
//!
//! An idempotency key kept in memory protects a call against network
//! failures, but not against the caller's own crash: a process that dies
//! after sending and before the answer forgets its key, and a restarted one
//! would start the work again under a new key. With a journal, the client
//! records the key and the exact request *before* sending it; a restarted
//! process finds the unfinished call and re-sends it with the same key, so
//! the runtime deduplicates it.
//!
//! This example really crashes a process. It starts the embedded mock
//! runtime, then runs itself as a child process ("process 1") that charges a
//! card through the journal; the charge takes a while. Once the runtime has
//! accepted the charge, the example kills process 1 with SIGKILL (no
//! cleanup, no goodbye), lets the charge finish, and starts "process 2" on
//! the same journal file: it recovers the call and gets the outcome. The
//! charge ran once.
//!
//! Run it: `cargo run --example journal_recovery --features sqlite`

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use arcp_mock::MockRuntime;
use arcp_sdk::{Client, Error, RetryPolicy};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Semaphore};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        // `journal_recovery child ROLE URL JOURNAL`
        return child(&args[2], &args[3], Path::new(&args[4])).await;
    }

    // The runtime: a `charge` tool that runs until we let it finish.
    let release = Arc::new(Semaphore::new(0));
    let gate = release.clone();
    let mock = MockRuntime::builder()
        .tool("charge", move |args: Value, _ctx| {
            let gate = gate.clone();
            async move {
                let _done = gate.acquire().await;
                Ok(json!({"charged_cents": args["cents"], "card": args["card"]}))
            }
        })
        .start()
        .await
        .expect("the mock runtime binds a loopback port");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let journal = dir.path().join("calls.journal");
    println!(
        "runtime at {}; journal at {}",
        mock.ws_url(),
        journal.display()
    );

    // Process 1 charges the card, and crashes mid-call.
    let (mut first, mut said) = spawn("invoke", &mock.ws_url(), &journal);
    let job = wait_for(&mut said, "accepted").await;
    println!("[parent]    the runtime accepted the charge as job {job}; it is still running");
    first.kill().expect("SIGKILL process 1");
    let _ = first.wait();
    println!("[parent]    killed process 1 with SIGKILL, mid-call");
    while said.recv().await.is_some() {}

    // The charge finishes while no client is connected.
    release.add_permits(1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    println!(
        "[parent]    the charge finished on the runtime; executions so far: {}",
        mock.executions("charge")
    );

    // Process 2: same journal file.
    let (second, mut said) = spawn("recover", &mock.ws_url(), &journal);
    let outcome = wait_for(&mut said, "recovered").await;
    while said.recv().await.is_some() {}
    let status = tokio::task::spawn_blocking(move || {
        let mut second = second;
        second.wait()
    })
    .await
    .expect("join")
    .expect("process 2 exits");
    assert!(status.success(), "process 2 failed: {status}");

    let runs = mock.executions("charge");
    println!("[parent]    process 2 recovered the call: {outcome}");
    println!("[parent]    the runtime executed the charge {runs} time(s)");
    assert_eq!(runs, 1, "the charge must run exactly once");
    println!("ok: the call survived a SIGKILL of its process and ran once");
    Ok(())
}

/// Runs this example again as a child process with `role`. Its stdout lines
/// are echoed; lines starting with `!` are events for the parent.
fn spawn(role: &str, url: &str, journal: &Path) -> (Child, mpsc::UnboundedReceiver<String>) {
    let exe = std::env::current_exe().expect("the example's own path");
    let mut child = Command::new(exe)
        .arg("child")
        .arg(role)
        .arg(url)
        .arg(journal)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start a child process");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            match line.strip_prefix('!') {
                Some(event) => {
                    let _ = tx.send(event.to_owned());
                }
                None => println!("{line}"),
            }
        }
    });
    (child, rx)
}

/// Waits for the event `name` from a child; returns its text.
async fn wait_for(events: &mut mpsc::UnboundedReceiver<String>, name: &str) -> String {
    let wait = async {
        while let Some(event) = events.recv().await {
            if let Some(rest) = event.strip_prefix(name) {
                return rest.trim().to_owned();
            }
        }
        panic!("the child process ended before {name:?}");
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .unwrap_or_else(|_| panic!("no {name:?} from the child within 30 s"))
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The child processes: the application whose process crashes and restarts.
async fn child(role: &str, url: &str, journal: &Path) -> Result<(), Error> {
    let client = Client::builder(url)
        // The journal: each call is recorded here before it is sent.
        .journal_path(journal)
        .retry(
            RetryPolicy::exponential()
                .max_delay(Duration::from_millis(500))
                .outcome_poll(Duration::from_millis(100)),
        )
        .connect()
        .await?;
    if role == "invoke" {
        let call = client
            .invoke_tool("charge", json!({"card": "4242", "cents": 1999}))
            .send();
        let key = call.key().cloned().expect("a fresh key");
        say(&format!(
            "[process 1] charging the card with key {key} (recorded in the journal before it is sent)"
        ));
        let handle = call.handle();
        tokio::spawn(async move {
            loop {
                if let Some(job) = handle.job_id() {
                    say(&format!(
                        "[process 1] accepted as job {job}; waiting for the result"
                    ));
                    say(&format!("!accepted {job}"));
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        let out = call.await?;
        say(&format!(
            "[process 1] unexpected: finished with {}",
            out.value
        ));
        return Ok(());
    }

    // Process 2: what did process 1 leave unfinished?
    let calls = client.recover().await?;
    say(&format!(
        "[process 2] the journal holds {} unfinished call(s); re-sending with their recorded keys",
        calls.len()
    ));
    for call in calls {
        let key = call.key().cloned().expect("recorded key");
        let out = call.await?;
        say(&format!(
            "[process 2] key {key}: {} (job {})",
            out.value,
            out.job_id.as_deref().unwrap_or("?")
        ));
        // The outcome is in the journal too, for anyone who asks later.
        if let Some(entry) = client.lookup(&key).await? {
            say(&format!(
                "[process 2] the journal now records the call as {}",
                entry.state.name()
            ));
        }
        say(&format!("!recovered {} for key {key}", out.value));
    }
    client.close().await;
    Ok(())
}
