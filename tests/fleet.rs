//! The fleet journal's acceptance test: four worker processes share one
//! PostgreSQL journal and one runtime, and run 400 calls of a slow tool.
//! Mid-flight two workers are killed with SIGKILL and one is frozen with
//! SIGSTOP past its lease, then resumed with SIGCONT; the survivors'
//! recovery claims the dead (and the frozen) workers' calls and finishes
//! them.
//!
//! The oracle: every call ends exactly once in the journal with its result;
//! the runtime ran every tool exactly once; no history row was written by a
//! worker under a generation that had already been claimed away (fencing);
//! every write names the worker that held that generation.
//!
//! The runtime (the mock) and the PostgreSQL cluster live in this, the
//! parent, process; the workers are this test binary re-executed to run
//! only `worker_process_entry_point` (`ARCP_FLEET_WORKER` set).

#![cfg(unix)]

#[path = "../arcp-client/tests/pg_support/mod.rs"]
mod pg_support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arcp_mock::MockRuntime;
use arcp_sdk::{Client, PostgresJournal, PostgresOptions, RetryPolicy};
use serde_json::{json, Value};
use tokio::sync::mpsc;

const WORKER: &str = "ARCP_FLEET_WORKER";
const RUNTIME_URL: &str = "ARCP_FLEET_RUNTIME";
const JOURNAL_URL: &str = "ARCP_FLEET_JOURNAL";
const WORKERS: usize = 4;
const CALLS_PER_WORKER: usize = 100;
const LEASE: Duration = Duration::from_millis(2000);
const RENEW: Duration = Duration::from_millis(300);
const RECOVER_EVERY: Duration = Duration::from_millis(250);

fn key_of(worker: usize, call: usize) -> String {
    format!("fleet-w{worker}-{call:03}")
}

/// How long call `call` of `worker` runs in the tool: 0.4 to 2.3 s, spread
/// so that every kill lands on calls before, during and after acceptance.
fn tool_ms(worker: usize, call: usize) -> u64 {
    400 + ((worker * 7919 + call * 104_729) % 1900) as u64
}

// ----- a worker process ------------------------------------------------------

/// A worker's entry point; does nothing in a normal test run.
#[test]
fn worker_process_entry_point() {
    let Ok(worker) = std::env::var(WORKER) else {
        return;
    };
    let worker: usize = worker.parse().expect("a worker number");
    let runtime_url = std::env::var(RUNTIME_URL).expect("the runtime URL");
    let journal_url = std::env::var(JOURNAL_URL).expect("the journal URL");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(worker_main(worker, &runtime_url, &journal_url));
}

fn say(line: impl AsRef<str>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "WORKER {}", line.as_ref());
    let _ = out.flush();
}

#[derive(Default)]
struct Tally {
    ok: AtomicUsize,
    fenced: AtomicUsize,
    failed: AtomicUsize,
    recovered: AtomicUsize,
}

impl Tally {
    fn count(&self, outcome: &Result<arcp_sdk::ToolOutput, arcp_sdk::Error>) {
        match outcome {
            Ok(_) => self.ok.fetch_add(1, Ordering::Relaxed),
            Err(arcp_sdk::Error::Journal(e)) if e.kind == arcp_sdk::JournalErrorKind::Fenced => {
                self.fenced.fetch_add(1, Ordering::Relaxed)
            }
            Err(e) => {
                say(format!("FAILED {e}"));
                self.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

async fn worker_main(worker: usize, runtime_url: &str, journal_url: &str) {
    let journal = PostgresJournal::connect(
        journal_url,
        PostgresOptions::default()
            .worker_id(format!("w{worker}"))
            .lease_ttl(LEASE)
            .renew_interval(RENEW),
    )
    .await
    .expect("the worker opens the journal");
    let client = Client::builder(runtime_url)
        .journal(journal)
        .max_in_flight(4 * CALLS_PER_WORKER)
        .handshake_timeout(Duration::from_secs(5))
        .default_deadline(Duration::from_secs(40))
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(20))
                .max_delay(Duration::from_millis(500))
                .max_attempts(40)
                .max_elapsed(Duration::from_secs(30))
                .outcome_poll(Duration::from_millis(200)),
        )
        .connect()
        .await
        .expect("the worker connects");
    let tally = Arc::new(Tally::default());
    let keys: Vec<String> = (0..CALLS_PER_WORKER).map(|i| key_of(worker, i)).collect();
    for (i, key) in keys.iter().enumerate() {
        let call = client
            .invoke_tool(
                "work",
                json!({"id": key, "ms": tool_ms(worker, i), "amount": 10.5 + i as f64}),
            )
            .key_str(key.as_str())
            .send();
        let tally = tally.clone();
        tokio::spawn(async move { tally.count(&call.await) });
    }
    // Every call is recorded (prepared) before the parent starts killing.
    loop {
        let mut all = true;
        for key in &keys {
            let key = arcp_sdk::IdempotencyKey::try_from(key.as_str()).expect("a key");
            if client.lookup(&key).await.expect("lookup").is_none() {
                all = false;
                break;
            }
        }
        if all {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    say("PREPARED");
    // Tell the parent once every call of this worker has ended here (with
    // its result, or fenced: another worker owns it now).
    {
        let tally = tally.clone();
        tokio::spawn(async move {
            loop {
                let ended = tally.ok.load(Ordering::Relaxed)
                    + tally.fenced.load(Ordering::Relaxed)
                    + tally.failed.load(Ordering::Relaxed);
                if ended >= CALLS_PER_WORKER {
                    say("SETTLED");
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
    }

    // Survivors finish what others left: claim and drive, periodically.
    let recovering = {
        let (client, tally) = (client.clone(), tally.clone());
        tokio::spawn(async move {
            loop {
                match client.recover().await {
                    Ok(calls) => {
                        for call in calls {
                            tally.recovered.fetch_add(1, Ordering::Relaxed);
                            let tally = tally.clone();
                            tokio::spawn(async move { tally.count(&call.await) });
                        }
                    }
                    Err(e) => say(format!("RECOVER-ERROR {e}")),
                }
                tokio::time::sleep(RECOVER_EVERY).await;
            }
        })
    };
    let _ = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)
    })
    .await;
    recovering.abort();
    client.close().await;
    say(format!(
        "STATS ok={} fenced={} failed={} recovered={}",
        tally.ok.load(Ordering::Relaxed),
        tally.fenced.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
        tally.recovered.load(Ordering::Relaxed)
    ));
}

// ----- the parent -------------------------------------------------------------

struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Worker {
    fn spawn(n: usize, runtime_url: &str, journal_url: &str) -> Worker {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut child = Command::new(exe)
            .args([
                "worker_process_entry_point",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WORKER, n.to_string())
            .env(RUNTIME_URL, runtime_url)
            .env(JOURNAL_URL, journal_url)
            .env_remove("ARCP_TEST_POSTGRES_URL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn a worker process");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(at) = line.find("WORKER ") {
                    if tx.send(line[at + 7..].to_owned()).is_err() {
                        return;
                    }
                }
            }
        });
        Worker {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
        }
    }

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
                Ok(None) => panic!("a worker ended before {prefix:?}; it said {:?}", self.seen),
                Err(_) => panic!(
                    "no {prefix:?} from a worker in 30 s; it said {:?}",
                    self.seen
                ),
            }
        }
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal})");
    }
}

impl Drop for Worker {
    /// A failing test leaves no worker behind (frozen ones included).
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal(libc::SIGCONT);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

async fn count(db: &tokio_postgres::Client, sql: &str) -> i64 {
    db.query_one(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_workers_two_killed_one_frozen_every_call_once() {
    let started = Instant::now();
    let Some(journal_url) = pg_support::database().await else {
        eprintln!("PostgreSQL test skipped (ARCP_TEST_POSTGRES_SKIP=1 and no server)");
        return;
    };
    let mock = MockRuntime::builder()
        .tool("work", |args: Value, ctx| async move {
            ctx.sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(0)))
                .await;
            Ok(json!({"done": args["id"], "amount": args["amount"]}))
        })
        .start()
        .await
        .expect("the runtime");
    // The schema, before the workers race to it.
    drop(
        PostgresJournal::connect(&journal_url, PostgresOptions::default().worker_id("setup"))
            .await
            .expect("migrate the journal"),
    );
    let (db, conn) = tokio_postgres::connect(&journal_url, tokio_postgres::NoTls)
        .await
        .expect("connect to the journal database");
    tokio::spawn(conn);

    let mut workers: Vec<Worker> = (0..WORKERS)
        .map(|n| Worker::spawn(n, &mock.ws_url(), &journal_url))
        .collect();
    for w in &mut workers {
        w.expect("PREPARED").await;
    }
    assert_eq!(
        count(&db, "SELECT count(*) FROM arcp_calls").await,
        (WORKERS * CALLS_PER_WORKER) as i64
    );
    // Mid-flight: some calls done, most running, some not yet accepted.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let unfinished_before: i64 = count(
        &db,
        "SELECT count(*) FROM arcp_calls WHERE state <> 'terminal'",
    )
    .await;
    workers[0].signal(libc::SIGKILL);
    workers[1].signal(libc::SIGKILL);
    workers[2].signal(libc::SIGSTOP);
    let killed_at: std::time::SystemTime = db
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0);
    for w in &mut workers[..2] {
        let status = w.child.wait().expect("wait for a killed worker");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    }
    // Frozen past its lease: its calls go to the survivor.
    tokio::time::sleep(LEASE + Duration::from_millis(1500)).await;
    let w2_lost_while_frozen = count(
        &db,
        "SELECT count(*) FROM arcp_calls WHERE owner <> 'w2' AND key LIKE 'fleet-w2-%' \
         AND generation > 1",
    )
    .await;
    workers[2].signal(libc::SIGCONT);

    // Every call ends.
    let until = Instant::now() + Duration::from_secs(45);
    loop {
        let left = count(
            &db,
            "SELECT count(*) FROM arcp_calls WHERE state <> 'terminal'",
        )
        .await;
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < until,
            "{left} calls still unfinished after 45 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The survivors' own calls all ended too: the resumed worker learned
    // it lost its calls (fenced) or got their results.
    for w in &mut workers[2..] {
        w.expect("SETTLED").await;
    }
    let mut stats = Vec::new();
    for w in &mut workers[2..] {
        drop(w.stdin.take()); // EOF: finish and report
        let line = w.expect("STATS").await;
        assert!(
            line.contains(" failed=0 "),
            "a survivor's call failed: {line}; it said {:?}",
            w.seen
        );
        stats.push(line);
        let status = w.child.wait().expect("wait for a worker");
        assert!(status.success(), "{status:?}");
    }

    // --- the oracle ---
    let total = WORKERS * CALLS_PER_WORKER;
    let rows = db
        .query(
            "SELECT key, state, outcome FROM arcp_calls ORDER BY key",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), total);
    for row in &rows {
        let (key, state, outcome): (String, String, Option<String>) =
            (row.get(0), row.get(1), row.get(2));
        assert_eq!(state, "terminal", "{key}");
        let outcome: Value = serde_json::from_str(&outcome.expect("an outcome")).unwrap();
        assert_eq!(
            outcome["ok"]["value"]["done"],
            json!(key),
            "{key}: {outcome}"
        );
    }
    // Every call ended exactly once: one terminal history row each.
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM arcp_history WHERE event = 'terminal'"
        )
        .await,
        total as i64
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM (SELECT key FROM arcp_history WHERE event = 'terminal' \
             GROUP BY key HAVING count(*) <> 1) t"
        )
        .await,
        0
    );
    // Every tool ran exactly once.
    let executions: HashMap<String, u64> = mock.executions_by_key();
    for w in 0..WORKERS {
        for i in 0..CALLS_PER_WORKER {
            let key = key_of(w, i);
            assert_eq!(executions.get(&key).copied(), Some(1), "{key}");
        }
    }
    assert_eq!(mock.total_executions(), total as u64);
    // Fencing: every history row was written by the worker that held that
    // generation of the call...
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM arcp_history h WHERE NOT EXISTS (SELECT 1 FROM arcp_attempts a \
             WHERE a.key = h.key AND a.generation = h.generation AND a.worker = h.worker)"
        )
        .await,
        0
    );
    // ... and never after that generation was claimed away.
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM arcp_history h JOIN arcp_history c ON c.key = h.key \
             AND c.event = 'claimed' AND c.generation > h.generation AND c.id < h.id"
        )
        .await,
        0
    );
    // The dead wrote nothing after their death but what was already on the
    // wire: a batch is sent whole (BEGIN to COMMIT) before its answers are
    // read, so the server may commit one a worker sent just before SIGKILL.
    // Such a drain ends long before anyone may claim the dead's calls (their
    // leases run on), so every late row predates the first claim after the
    // kills; a worker writing on after death would not.
    let (late, late_after_a_claim): (i64, i64) = {
        let row = db
            .query_one(
                "SELECT count(*), count(*) FILTER (WHERE at >= (SELECT min(at) FROM arcp_history \
                 WHERE event = 'claimed' AND at > $1)) \
                 FROM arcp_history WHERE worker IN ('w0', 'w1') AND at > $1",
                &[&killed_at],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(
        late_after_a_claim, 0,
        "a killed worker's write landed after a survivor's claim ({late} after the kills)"
    );
    // The dead workers' unfinished calls were finished by the survivors.
    let finished_by_others = count(
        &db,
        "SELECT count(*) FROM arcp_history WHERE event = 'terminal' \
         AND key ~ '^fleet-w[01]-' AND worker IN ('w2', 'w3') AND generation > 1",
    )
    .await;
    let dead_unfinished = count(
        &db,
        "SELECT count(*) FROM arcp_attempts WHERE worker IN ('w0', 'w1') \
         AND ended_by = 'superseded'",
    )
    .await;
    assert!(dead_unfinished > 0, "the kills landed mid-flight");
    assert_eq!(finished_by_others, dead_unfinished);
    // The frozen worker lost calls while frozen, and none of its writes
    // under a lost generation landed (the fencing checks above).
    assert!(w2_lost_while_frozen > 0, "the freeze outlived the lease");
    let claims = count(
        &db,
        "SELECT count(*) FROM arcp_history WHERE event = 'claimed'",
    )
    .await;
    eprintln!(
        "fleet: {total} calls, {unfinished_before} unfinished at the kills, {dead_unfinished} \
         claimed from the killed workers, {w2_lost_while_frozen} from the frozen one, {claims} \
         claims in all, {late} rows drained after the kills; survivors {stats:?}; {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
