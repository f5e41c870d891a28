//! The fleet journal against a database that fails: each test runs workers
//! (clients with a `PostgresJournal`, in this process) against a PostgreSQL
//! server of its own, and breaks the server or one worker's link to it:
//!
//! - the server restarted (immediate shutdown, then start) while calls are
//!   in flight: every call rides it out within its deadline;
//! - one worker's database link black-holed (a TCP link that accepts and
//!   forwards nothing) while its runtime connection works: it stops driving
//!   its calls before the other worker claims them, says so (fenced, may
//!   have run), serves calls again once the link is back, and closes in
//!   bounded time;
//! - every packet of a worker's link delayed, so commits take longer than
//!   the renew interval: nothing is lost or fenced;
//! - the server refusing connections for longer than a lease: the calls
//!   left unfinished are finished by `recover()`, none twice.
//!
//! The oracle, as in `tests/fleet.rs`: every call ends once; no key runs
//! twice; each outcome's claim agrees with the runtime's executions; no
//! history row was written under a generation claimed away. A failing test
//! prints its schedule (what was done when).

#![cfg(unix)]

mod support;

#[path = "../arcp-client/tests/pg_support/mod.rs"]
mod pg_support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arcp_mock::MockRuntime;
use arcp_sdk::{
    Client, Error, Execution, JournalErrorKind, PostgresJournal, PostgresOptions, RetryPolicy,
    ToolOutput,
};
use pg_support::OwnServer;
use serde_json::{json, Value};
use support::link::{Link, LinkMode};

/// What a test did, when: printed with any failure.
#[derive(Clone, Default)]
struct Schedule(Arc<Mutex<Vec<String>>>);

impl Schedule {
    fn note(&self, start: Instant, what: impl AsRef<str>) {
        self.0.lock().unwrap().push(format!(
            "{:>6} ms  {}",
            start.elapsed().as_millis(),
            what.as_ref()
        ));
    }
}

impl std::fmt::Display for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "schedule:")?;
        for line in self.0.lock().unwrap().iter() {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// The runtime: `slow` sleeps `ms` and returns `{"v": v}`.
async fn runtime() -> MockRuntime {
    MockRuntime::builder()
        .tool("slow", |args: Value, ctx| async move {
            ctx.sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(0)))
                .await;
            Ok(json!({"v": args["v"]}))
        })
        .start()
        .await
        .expect("mock runtime")
}

/// A worker: a client of `runtime` journaling to `journal_url` as `id`.
async fn worker(
    runtime: &MockRuntime,
    journal_url: &str,
    id: &str,
    lease: Duration,
    renew: Duration,
    round_trip: Duration,
) -> Client {
    let journal = PostgresJournal::connect(
        journal_url,
        PostgresOptions::default()
            .worker_id(id)
            .lease_ttl(lease)
            .renew_interval(renew)
            .round_trip_timeout(round_trip)
            .connect_timeout(Duration::from_secs(2)),
    )
    .await
    .expect("the worker opens the journal");
    Client::builder(runtime.ws_url())
        .journal(journal)
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(20))
                .max_delay(Duration::from_millis(300))
                .max_attempts(40)
                .max_elapsed(Duration::from_secs(30))
                .outcome_poll(Duration::from_millis(100)),
        )
        .connect()
        .await
        .expect("the worker connects")
}

/// One call's end, as its caller saw it.
struct Ended {
    key: String,
    v: u64,
    outcome: Result<ToolOutput, Error>,
    at: SystemTime,
}

/// Starts `n` calls of `slow` on `client` (keys `{prefix}-{i}`).
fn start_calls(
    client: &Client,
    prefix: &str,
    n: usize,
    ms: impl Fn(usize) -> u64,
    deadline: Duration,
) -> Vec<tokio::task::JoinHandle<Ended>> {
    (0..n)
        .map(|i| {
            let key = format!("{prefix}-{i:03}");
            let call = client
                .invoke_tool("slow", json!({"v": i, "ms": ms(i)}))
                .key_str(key.as_str())
                .deadline(deadline)
                .send();
            tokio::spawn(async move {
                let outcome = call.await;
                Ended {
                    key,
                    v: i as u64,
                    outcome,
                    at: SystemTime::now(),
                }
            })
        })
        .collect()
}

async fn ends(tasks: Vec<tokio::task::JoinHandle<Ended>>) -> Vec<Ended> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("a call task"));
    }
    out
}

/// Each outcome's claim against the runtime's executions of its key; no
/// key ran twice. Returns the violations.
fn claims(runtime: &MockRuntime, ended: &[Ended]) -> Vec<String> {
    let mut bad = Vec::new();
    for (key, n) in runtime.executions_by_key() {
        if n > 1 {
            bad.push(format!("key {key} ran {n} times"));
        }
    }
    for e in ended {
        let runs = runtime.executions_for_key(&e.key);
        match &e.outcome {
            Ok(out) if runs != 1 || out.value != json!({"v": e.v}) => {
                bad.push(format!("{}: Ok({}) but ran {runs} times", e.key, out.value))
            }
            Ok(_) => {}
            Err(err) => match err.execution() {
                Execution::NotRun if runs != 0 => bad.push(format!(
                    "{}: says not run ({err}) but ran {runs} times",
                    e.key
                )),
                Execution::Ran if runs != 1 => {
                    bad.push(format!("{}: says ran ({err}) but ran {runs} times", e.key))
                }
                _ => {}
            },
        }
    }
    bad
}

async fn db(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the journal database");
    tokio::spawn(conn);
    client
}

async fn count(db: &tokio_postgres::Client, sql: &str) -> i64 {
    db.query_one(sql, &[]).await.expect(sql).get(0)
}

/// No history row by a worker that did not hold that generation, or after
/// the generation was claimed away.
async fn fencing_violations(db: &tokio_postgres::Client) -> Vec<String> {
    let mut bad = Vec::new();
    let foreign = count(
        db,
        "SELECT count(*) FROM arcp_history h WHERE NOT EXISTS (SELECT 1 FROM arcp_attempts a \
         WHERE a.key = h.key AND a.generation = h.generation AND a.worker = h.worker)",
    )
    .await;
    if foreign != 0 {
        bad.push(format!(
            "{foreign} history rows by a worker not holding the generation"
        ));
    }
    let late = count(
        db,
        "SELECT count(*) FROM arcp_history h JOIN arcp_history c ON c.key = h.key \
         AND c.event = 'claimed' AND c.generation > h.generation AND c.id < h.id",
    )
    .await;
    if late != 0 {
        bad.push(format!(
            "{late} history rows under a generation claimed away"
        ));
    }
    bad
}

/// Waits (bounded) until every record of the journal is terminal; how many
/// are not.
async fn unfinished_after(db: &tokio_postgres::Client, within: Duration) -> i64 {
    let until = Instant::now() + within;
    loop {
        let n = count(
            db,
            "SELECT count(*) FROM arcp_calls WHERE state <> 'terminal'",
        )
        .await;
        if n == 0 || Instant::now() >= until {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn fenced(outcome: &Result<ToolOutput, Error>) -> bool {
    matches!(outcome, Err(Error::Journal(e)) if e.kind == JournalErrorKind::Fenced)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_costs_latency_not_failures() {
    let Some(server) = OwnServer::start(false) else {
        return;
    };
    let url = server.database("restart").await;
    let runtime = runtime().await;
    let schedule = Schedule::default();
    let start = Instant::now();
    let w1 = worker(
        &runtime,
        &url,
        "w1",
        Duration::from_secs(5),
        Duration::from_secs(1),
        Duration::from_secs(1),
    )
    .await;
    let calls = start_calls(
        &w1,
        "restart",
        30,
        |i| 300 + (i as u64 * 37) % 600,
        Duration::from_secs(6),
    );
    schedule.note(start, "30 calls started (tool 0.3-0.9 s, deadline 6 s)");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let server = Arc::new(server);
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.stop_immediate())
        .await
        .unwrap();
    schedule.note(start, "server stopped (immediate)");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.start_again())
        .await
        .unwrap();
    schedule.note(start, "server started again");
    let ended = ends(calls).await;
    schedule.note(start, "every call ended");
    let failed: Vec<String> = ended
        .iter()
        .filter_map(|e| {
            e.outcome
                .as_ref()
                .err()
                .map(|err| format!("{}: {err}", e.key))
        })
        .collect();
    assert!(failed.is_empty(), "calls failed: {failed:#?}\n{schedule}");
    let bad = claims(&runtime, &ended);
    assert!(bad.is_empty(), "{bad:#?}\n{schedule}");
    let db = db(&url).await;
    // The outcomes recorded during the outage are committed after it.
    let left = unfinished_after(&db, Duration::from_secs(5)).await;
    assert_eq!(left, 0, "records left unfinished\n{schedule}");
    let bad = fencing_violations(&db).await;
    assert!(bad.is_empty(), "{bad:#?}\n{schedule}");
    w1.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_link_stops_the_worker_before_another_claims_its_calls() {
    let Some(server) = OwnServer::start(false) else {
        return;
    };
    let url = server.database("blackhole").await;
    let link = Link::start(server.address()).await.unwrap();
    let linked_url = server.url_via(link.address(), "blackhole");
    let runtime = runtime().await;
    let schedule = Schedule::default();
    let start = Instant::now();
    let lease = Duration::from_millis(1500);
    let renew = Duration::from_millis(300);
    let round_trip = Duration::from_millis(300);
    let w1 = worker(&runtime, &linked_url, "w1", lease, renew, round_trip).await;
    let w2 = worker(&runtime, &url, "w2", lease, renew, round_trip).await;
    let calls = start_calls(
        &w1,
        "hole",
        12,
        // The tools outlast the lease lapse (at most 1.35 s after the last
        // renewal) by more than a loaded machine's scheduling delay, and end
        // inside the 4.6 s black hole.
        |i| 2500 + (i as u64 * 83) % 1000,
        Duration::from_secs(15),
    );
    schedule.note(
        start,
        "w1 (through the link): 12 calls (tool 2.5-3.5 s, deadline 15 s)",
    );
    // Every call is driven before the link goes dark: the runtime started
    // it, so w1 had the answer to its prepare (the record's row alone does
    // not say so: under load the answer could still be on its way, and a
    // call whose prepare is unanswered is not driven, so a lapse has
    // nothing of it to stop).
    let db = db(&url).await;
    let by = Instant::now() + Duration::from_secs(10);
    while runtime.total_executions() < 12 {
        assert!(Instant::now() < by, "w1's calls did not start\n{schedule}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    link.set(LinkMode::BlackHole);
    let dark_at = SystemTime::now();
    schedule.note(start, "w1's link black-holed");
    // w2 recovers what w1's lapsed leases free, every 250 ms.
    let recovered = Arc::new(Mutex::new(Vec::new()));
    let recovering = tokio::spawn({
        let (w2, recovered) = (w2.clone(), recovered.clone());
        async move {
            loop {
                if let Ok(calls) = w2.recover().await {
                    for call in calls {
                        let key = call.key().map(|k| k.to_string()).unwrap_or_default();
                        recovered.lock().unwrap().push(tokio::spawn(async move {
                            let outcome = call.await;
                            let v = outcome
                                .as_ref()
                                .ok()
                                .and_then(|o| o.value["v"].as_u64())
                                .unwrap_or(u64::MAX);
                            Ended {
                                key,
                                v,
                                outcome,
                                at: SystemTime::now(),
                            }
                        }));
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(4600)).await;
    link.set(LinkMode::Forward);
    schedule.note(start, "w1's link back");
    let ended = ends(calls).await;
    schedule.note(start, "every call of w1 ended");
    for e in &ended {
        assert!(
            e.outcome.is_ok() || fenced(&e.outcome),
            "{}: {:?}\n{schedule}",
            e.key,
            e.outcome.as_ref().err()
        );
        if let Err(err) = &e.outcome {
            assert_eq!(
                err.execution(),
                Execution::MayHaveRun,
                "{}\n{schedule}",
                e.key
            );
        }
    }
    let stopped = ended.iter().filter(|e| fenced(&e.outcome)).count();
    assert!(stopped > 0, "the black hole stopped w1's calls\n{schedule}");
    // w1 stopped each call before w2 claimed it.
    for e in ended.iter().filter(|e| fenced(&e.outcome)) {
        let claimed: Option<f64> = db
            .query_one(
                "SELECT extract(epoch FROM min(at))::float8 FROM arcp_history \
                 WHERE key = $1 AND event = 'claimed' AND worker = 'w2'",
                &[&e.key],
            )
            .await
            .unwrap()
            .get(0);
        let stopped_at =
            e.at.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64();
        if let Some(claimed) = claimed {
            assert!(
                stopped_at < claimed,
                "{}: w1 stopped at {stopped_at:.3}, w2 claimed at {claimed:.3}\n{schedule}",
                e.key
            );
        }
    }
    let _ = dark_at;
    // Once the link is back, w1 serves journaled calls again.
    let again = w1
        .invoke_tool("slow", json!({"v": 999, "ms": 10}))
        .key_str("hole-after")
        .deadline(Duration::from_secs(10))
        .send()
        .await;
    schedule.note(
        start,
        format!(
            "w1's call after the link came back: {:?}",
            again.as_ref().err()
        ),
    );
    assert!(again.is_ok(), "{:?}\n{schedule}", again.err());
    // w2 finishes what w1 stopped.
    let finish_by = Instant::now() + Duration::from_secs(15);
    while Instant::now() < finish_by
        && (recovered.lock().unwrap().len() < stopped
            || count(
                &db,
                "SELECT count(*) FROM arcp_calls WHERE state <> 'terminal'",
            )
            .await
                > 0)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    recovering.abort();
    let handles: Vec<_> = std::mem::take(&mut *recovered.lock().unwrap());
    let recovered = ends(handles).await;
    schedule.note(start, format!("w2 recovered {} calls", recovered.len()));
    for r in &recovered {
        assert!(
            r.outcome.is_ok(),
            "{}: {:?}\n{schedule}",
            r.key,
            r.outcome.as_ref().err()
        );
    }
    let mut all: Vec<Ended> = ended;
    all.extend(recovered.into_iter().map(|mut r| {
        r.v = r
            .key
            .rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(r.v);
        r
    }));
    let bad = claims(&runtime, &all);
    assert!(bad.is_empty(), "{bad:#?}\n{schedule}");
    for i in 0..12 {
        let key = format!("hole-{i:03}");
        assert_eq!(runtime.executions_for_key(&key), 1, "{key}\n{schedule}");
    }
    let bad = fencing_violations(&db).await;
    assert!(bad.is_empty(), "{bad:#?}\n{schedule}");
    // close() is bounded, even by a journal that was black-holed.
    let closing = Instant::now();
    w1.close().await;
    assert!(
        closing.elapsed() < Duration::from_secs(6),
        "{:?}\n{schedule}",
        closing.elapsed()
    );
    w2.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_slower_than_the_renew_interval_lose_nothing() {
    let Some(server) = OwnServer::start(false) else {
        return;
    };
    let url = server.database("slow").await;
    let link = Link::start(server.address()).await.unwrap();
    let linked_url = server.url_via(link.address(), "slow");
    let runtime = runtime().await;
    let schedule = Schedule::default();
    let start = Instant::now();
    let w1 = worker(
        &runtime,
        &linked_url,
        "w1",
        Duration::from_secs(6),
        Duration::from_millis(400),
        Duration::from_secs(3),
    )
    .await;
    link.set(LinkMode::Delay(Duration::from_millis(80)));
    schedule.note(
        start,
        "w1's link delays every chunk by 80 ms (renew every 400 ms)",
    );
    let calls = start_calls(
        &w1,
        "slow",
        8,
        |i| 100 + i as u64 * 50,
        Duration::from_secs(20),
    );
    let ended = ends(calls).await;
    schedule.note(start, "every call ended");
    for e in &ended {
        assert!(
            e.outcome.is_ok(),
            "{}: {:?}\n{schedule}",
            e.key,
            e.outcome.as_ref().err()
        );
    }
    let bad = claims(&runtime, &ended);
    assert!(bad.is_empty(), "{bad:#?}\n{schedule}");
    let db = db(&url).await;
    assert_eq!(
        unfinished_after(&db, Duration::from_secs(10)).await,
        0,
        "{schedule}"
    );
    let bad = fencing_violations(&db).await;
    assert!(bad.is_empty(), "{bad:#?}\n{schedule}");
    link.set(LinkMode::Forward);
    w1.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_down_past_the_lease_leaves_calls_that_recover_finishes_once() {
    let Some(server) = OwnServer::start(false) else {
        return;
    };
    let url = server.database("down").await;
    let runtime = runtime().await;
    let schedule = Schedule::default();
    let start = Instant::now();
    let w1 = worker(
        &runtime,
        &url,
        "w1",
        Duration::from_millis(1500),
        Duration::from_millis(300),
        Duration::from_millis(300),
    )
    .await;
    let first = start_calls(
        &w1,
        "down",
        10,
        |i| 400 + i as u64 * 120,
        Duration::from_secs(2),
    );
    schedule.note(start, "10 calls (tool 0.4-1.5 s, deadline 2 s)");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let server = Arc::new(server);
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.stop_immediate())
        .await
        .unwrap();
    schedule.note(start, "server stopped: connections refused");
    // Calls made while the server is down wait for it, up to their deadline.
    let second = start_calls(&w1, "late", 4, |_| 100, Duration::from_millis(800));
    let mut ended = ends(first).await;
    ended.extend(ends(second).await);
    schedule.note(start, "every call ended");
    for e in &ended {
        schedule.note(
            start,
            format!("  {}: {:?}", e.key, e.outcome.as_ref().map(|o| &o.value)),
        );
    }
    tokio::time::sleep(Duration::from_millis(
        2500u64.saturating_sub(start.elapsed().as_millis() as u64),
    ))
    .await;
    let s = server.clone();
    tokio::task::spawn_blocking(move || s.start_again())
        .await
        .unwrap();
    schedule.note(start, "server started again");
    // Recovery finishes what is unfinished, each once.
    let db = db(&url).await;
    let until = Instant::now() + Duration::from_secs(15);
    let mut recovered = Vec::new();
    while Instant::now() < until {
        let calls = match w1.recover().await {
            Ok(calls) => calls,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        for call in calls {
            let key = call.key().map(|k| k.to_string()).unwrap_or_default();
            let outcome = call.await;
            let v = key
                .rsplit('-')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(u64::MAX);
            recovered.push(Ended {
                key,
                v,
                outcome,
                at: SystemTime::now(),
            });
        }
        if count(
            &db,
            "SELECT count(*) FROM arcp_calls WHERE state <> 'terminal'",
        )
        .await
            == 0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    schedule.note(start, format!("recovered {} calls", recovered.len()));
    for r in &recovered {
        schedule.note(
            start,
            format!("  {}: {:?}", r.key, r.outcome.as_ref().err()),
        );
    }
    assert_eq!(
        unfinished_after(&db, Duration::from_secs(1)).await,
        0,
        "{schedule}"
    );
    let mut all = ended;
    all.extend(recovered);
    let bad = claims(&runtime, &all);
    assert!(bad.is_empty(), "{bad:#?}\n{schedule}");
    let bad = fencing_violations(&db).await;
    assert!(bad.is_empty(), "{bad:#?}\n{schedule}");
    w1.close().await;
}

/// The journal's own reads (`list`, as `arcp journal` and operators use
/// it) on a link whose established flows are lost while new ones would
/// pass (a middlebox that dropped its state): one read times out on its
/// pooled connection, and the next opens a new one instead of waiting on
/// the same dead flow again.
#[tokio::test]
async fn a_read_that_timed_out_leaves_no_dead_connection_behind() {
    let Some(server) = OwnServer::start(false) else {
        return;
    };
    server.database("stranded").await;
    let link = Link::start(server.address()).await.unwrap();
    let url = server.url_via(link.address(), "stranded");
    let journal = PostgresJournal::connect(
        &url,
        PostgresOptions::default()
            .worker_id("reader")
            .round_trip_timeout(Duration::from_millis(300))
            .connect_timeout(Duration::from_millis(700)),
    )
    .await
    .expect("the journal opens");
    journal.list(10).await.expect("a read through the link");
    link.strand_established();
    let started = Instant::now();
    let timed_out = journal.list(10).await;
    assert!(timed_out.is_err(), "a read on a dead flow: {timed_out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let started = Instant::now();
    let next = journal.list(10).await;
    assert!(
        next.is_ok(),
        "the next read waited on the dead connection again after {:?}: {next:?}",
        started.elapsed()
    );
}
