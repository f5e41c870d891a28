//! A fleet of workers on one PostgreSQL journal: a worker dies mid-call and
//! another one finishes its calls, each refund still running once.
//!
//! The example starts the embedded mock runtime, then runs itself as a
//! child process, "worker A", which issues five refunds through the shared
//! journal (each recorded, owned by worker A under a lease, before it is
//! sent). Once the runtime accepted them, the example kills worker A with
//! SIGKILL. "Worker B" (this process) calls `Client::recover` until worker
//! A's lease lapses: then it claims A's calls (a new fencing generation,
//! `FOR UPDATE SKIP LOCKED`) and drives them to their outcomes with their
//! recorded keys. The runtime deduplicates the keys: each refund ran once.
//!
//! It needs a PostgreSQL database it may create tables in:
//!
//! ```text
//! ARCP_POSTGRES_URL='postgres://user@localhost/arcp' cargo run --example fleet_recovery --features postgres
//! ```
//!
//! (A local server over its Unix socket: `host=/var/run/postgresql
//! user=postgres dbname=postgres`.) Each run uses its own keys; the tables
//! it creates (`arcp_calls`, `arcp_attempts`, `arcp_history`,
//! `arcp_journal_schema`) stay for you to look at.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use arcp_mock::MockRuntime;
use arcp_sdk::{Client, Error, PostgresJournal, PostgresOptions, RetryPolicy};
use serde_json::{json, Value};

const URL_VAR: &str = "ARCP_POSTGRES_URL";
/// Short, so the example does not wait long for the dead worker's lease.
const LEASE: Duration = Duration::from_secs(3);
const REFUNDS: usize = 5;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let Ok(db) = std::env::var(URL_VAR) else {
        eprintln!(
            "fleet_recovery needs a PostgreSQL database: set {URL_VAR}, for example\n  \
             {URL_VAR}='postgres://user@localhost/arcp' cargo run --example fleet_recovery --features postgres"
        );
        std::process::exit(2);
    };
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("worker-a") {
        return worker_a(&args[2], &db, &args[3]).await;
    }

    // The runtime: a refund takes two seconds.
    let mock = MockRuntime::builder()
        .tool("refund", |args: Value, ctx| async move {
            ctx.sleep(Duration::from_secs(2)).await;
            Ok(json!({"refunded_cents": args["cents"], "order": args["order"]}))
        })
        .start()
        .await
        .expect("the mock runtime binds a loopback port");
    let run = format!("{:x}", std::process::id());

    // Worker A: issues the refunds, and dies once they are accepted.
    let exe = std::env::current_exe().expect("the example's own path");
    let mut a = Command::new(exe)
        .args(["worker-a", &mock.ws_url(), &run])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start worker A");
    let stdout = a.stdout.take().expect("piped");
    let accepted = tokio::task::spawn_blocking(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("{line}");
            if line.contains("all accepted") {
                return true;
            }
        }
        false
    })
    .await
    .expect("join");
    assert!(accepted, "worker A ended before its refunds were accepted");
    a.kill().expect("SIGKILL worker A");
    let _ = a.wait();
    println!("[parent]   killed worker A with SIGKILL, its refunds in flight");

    // Worker B: same database, its own worker id.
    let journal = PostgresJournal::connect(
        &db,
        PostgresOptions::default()
            .worker_id(format!("worker-b-{run}"))
            .lease_ttl(LEASE),
    )
    .await?;
    let b = Client::builder(mock.ws_url())
        .journal(journal)
        .retry(RetryPolicy::exponential().outcome_poll(Duration::from_millis(200)))
        .connect()
        .await?;
    let mut finished = 0;
    while finished < REFUNDS {
        // Claims only calls whose owner's lease lapsed: nothing until A's
        // lease runs out, then A's calls, each to exactly one worker.
        let calls = b.recover().await?;
        if calls.is_empty() {
            println!("[worker B] nothing claimable yet (worker A's lease is still running)");
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        println!("[worker B] claimed {} call(s) of worker A", calls.len());
        for call in calls {
            let key = call.key().cloned().expect("a recorded key");
            let out = call.await?;
            finished += 1;
            println!(
                "[worker B] {key}: {} (replayed: {})",
                out.value, out.replayed
            );
        }
    }
    b.close().await;
    for i in 0..REFUNDS {
        let key = format!("refund-{run}-{i}");
        let runs = mock.executions_for_key(&key);
        println!("[parent]   {key} ran {runs} time(s) on the runtime");
        assert_eq!(runs, 1, "each refund runs exactly once");
    }
    println!("ok: worker B finished dead worker A's refunds; each ran once");
    Ok(())
}

/// Worker A: issues the refunds and reports once they are all accepted;
/// the parent then kills it.
async fn worker_a(runtime: &str, db: &str, run: &str) -> Result<(), Error> {
    let journal = PostgresJournal::connect(
        db,
        PostgresOptions::default()
            .worker_id(format!("worker-a-{run}"))
            .lease_ttl(LEASE),
    )
    .await?;
    let client = Client::builder(runtime).journal(journal).connect().await?;
    let mut handles = Vec::new();
    for i in 0..REFUNDS {
        let call = client
            .invoke_tool("refund", json!({"order": 1000 + i, "cents": 2500}))
            .key_str(format!("refund-{run}-{i}"))
            .send();
        handles.push(call.handle());
        tokio::spawn(call);
    }
    while handles.iter().any(|h| h.job_id().is_none()) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "[worker A] {REFUNDS} refunds recorded, sent, all accepted; now it dies"
    );
    let _ = out.flush();
    drop(out);
    // Waits for the SIGKILL.
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(())
}
