//! The invocation journal's added latency per call.
//!
//! One mock runtime on loopback with an `echo` tool that answers at once;
//! four clients on it: no journal, the in-memory journal, and the SQLite
//! journal with `Synchronous::Full` (an `fsync` per commit: survives power
//! loss) and `Synchronous::Normal` (survives a crash of the process). The
//! sequential phase measures one call at a time, round-robin across the
//! clients in small rounds so drift hits all alike; the added latency is
//! the journal's median (p99) minus the no-journal median (p99). The
//! concurrent phase runs 64 calls at a time to show group commit.
//!
//! With `ARCP_BENCH_POSTGRES_URL` set (a database it may create tables
//! in), a fifth client journals in PostgreSQL (`PostgresJournal`: the fleet
//! journal, with leases and fencing; the server's own durability settings
//! apply). Without it the PostgreSQL row is left out, with a note.
//!
//! Each store's floor is measured in the same rounds: the cheapest durable
//! write a program can make to it (one row inserted and committed: a
//! SQLite transaction with `synchronous=FULL`, a PostgreSQL autocommit
//! `INSERT`, one round trip), so the added latency reads against what one
//! commit costs on this machine at this moment. The concurrent phase runs
//! in rounds too, each client in turn, so a slow spell of the machine
//! falls on all of them.
//!
//! Run it: `cargo bench --bench journal` (release mode). Options:
//! `-- --calls N` (sequential calls per client, default 3000),
//! `ARCP_BENCH_DIR=/path` (where the journal files go, default the temp dir),
//! `ARCP_BENCH_ONLY=text` (only the no-journal client and those whose name
//! holds `text`: to profile one store).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use arcp_mock::MockRuntime;
use arcp_sdk::{
    Client, MemoryJournal, PostgresJournal, PostgresOptions, SqliteJournal, SqliteOptions,
    Synchronous,
};
use serde_json::{json, Value};

const ROUND: usize = 100;
const CONCURRENCY: usize = 64;
const CONCURRENT_CALLS: usize = 6400;
/// The concurrent phase in this many rounds, the clients taking turns.
const CONCURRENT_ROUNDS: usize = 4;

struct Subject {
    name: &'static str,
    client: Client,
    samples: Vec<Duration>,
    /// Time spent in the concurrent phase, over its rounds.
    concurrent: Duration,
    /// The machine's busy CPU time in the concurrent phase (every process:
    /// the store's server too), where the system reports it.
    busy: Option<Duration>,
    /// The store's commit floor, compared with this client's added median.
    floor: Option<&'static str>,
}

type WriteFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// One durable write to a store, timed: its commit floor.
struct Floor {
    name: &'static str,
    samples: Vec<Duration>,
    write: Box<dyn FnMut(usize) -> WriteFuture>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let calls: usize = std::env::args()
        .skip_while(|a| a != "--calls")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(3000);
    let dir = match std::env::var_os("ARCP_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(PathBuf::from(d)),
        None => tempfile::tempdir(),
    }
    .expect("a directory for the journal files");

    let mock = MockRuntime::builder()
        .tool("echo", |args: Value, _ctx| async move { Ok(args) })
        .start()
        .await
        .expect("mock");
    let url = mock.ws_url();
    let connect = || Client::builder(url.clone()).max_in_flight(CONCURRENCY);
    let open = |name: &str, sync| {
        SqliteJournal::open_with(
            dir.path().join(name),
            SqliteOptions::default().synchronous(sync),
        )
        .expect("open the journal")
    };
    let mut subjects = vec![
        Subject::new("no journal", connect().connect().await),
        Subject::new(
            "memory journal",
            connect().journal(MemoryJournal::new()).connect().await,
        ),
        Subject::new(
            "SQLite, synchronous=FULL (fsync per commit)",
            connect()
                .journal(open("full.db", Synchronous::Full))
                .connect()
                .await,
        )
        .floor(SQLITE_FLOOR),
        Subject::new(
            "SQLite, synchronous=NORMAL",
            connect()
                .journal(open("normal.db", Synchronous::Normal))
                .connect()
                .await,
        ),
    ];
    // Profiling one store: keep the baseline and the subjects named so.
    if let Ok(only) = std::env::var("ARCP_BENCH_ONLY") {
        let mut i = 0;
        subjects.retain(|s| {
            i += 1;
            i == 1 || s.name.contains(only.as_str())
        });
    }
    let mut floors = vec![sqlite_floor(&dir.path().join("floor.db"))];
    match std::env::var("ARCP_BENCH_POSTGRES_URL") {
        Ok(url) => {
            let journal = PostgresJournal::connect(
                &url,
                PostgresOptions::default().worker_id(format!("bench-{}", std::process::id())),
            )
            .await
            .expect("open the PostgreSQL journal");
            subjects.push(
                Subject::new(
                    "PostgreSQL (fleet journal: lease, fencing, history)",
                    connect().journal(journal).connect().await,
                )
                .floor(POSTGRES_FLOOR),
            );
            floors.push(postgres_floor(&url).await);
        }
        Err(_) => println!(
            "(PostgreSQL left out: set ARCP_BENCH_POSTGRES_URL to a database to measure it)"
        ),
    }

    // Warm up every path (connections, statement caches, page cache).
    for s in &mut subjects {
        for i in 0..200 {
            call(&s.client, i).await;
        }
    }
    for f in &mut floors {
        for i in 0..200 {
            (f.write)(i).await;
        }
    }
    // Sequential: one call at a time, interleaved in rounds.
    let mut done = 0;
    while done < calls {
        let n = ROUND.min(calls - done);
        for s in &mut subjects {
            for i in 0..n {
                let start = Instant::now();
                call(&s.client, done + i).await;
                s.samples.push(start.elapsed());
            }
        }
        for f in &mut floors {
            for i in 0..n {
                let start = Instant::now();
                (f.write)(1_000_000 + done + i).await;
                f.samples.push(start.elapsed());
            }
        }
        done += n;
    }
    // Concurrent: CONCURRENCY calls in flight at a time, in rounds.
    let per_task = CONCURRENT_CALLS / CONCURRENCY / CONCURRENT_ROUNDS;
    for round in 0..CONCURRENT_ROUNDS {
        for s in &mut subjects {
            let start = Instant::now();
            let busy_before = machine_busy();
            let mut tasks = Vec::new();
            for t in 0..CONCURRENCY {
                let client = s.client.clone();
                tasks.push(tokio::spawn(async move {
                    for i in 0..per_task {
                        call(&client, (round + 1) * 10_000_000 + t * 10_000 + i).await;
                    }
                }));
            }
            for t in tasks {
                t.await.expect("task");
            }
            s.concurrent += start.elapsed();
            s.busy = match (s.busy, busy_before, machine_busy()) {
                (Some(sum), Some(before), Some(after)) => Some(sum + (after - before)),
                (None, Some(before), Some(after)) if round == 0 => Some(after - before),
                _ => None,
            };
        }
    }
    for s in &subjects {
        s.client.close().await;
    }

    let base_median = percentile(&subjects[0].samples, 0.50);
    let base_p99 = percentile(&subjects[0].samples, 0.99);
    println!(
        "{calls} sequential calls per client, {CONCURRENT_CALLS} calls {CONCURRENCY} at a time; \
         journal files in {}",
        dir.path().display()
    );
    println!();
    println!(
        "| client | median | p99 | added median | added p99 | calls/s ({CONCURRENCY} in flight) \
         | CPU per call | CPU busy |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let no_journal_rate = rate(&subjects[0]);
    for s in &subjects {
        let median = percentile(&s.samples, 0.50);
        let p99 = percentile(&s.samples, 0.99);
        println!(
            "| {} | {} | {} | {} | {} | {:.0} ({:.2}x) | {} | {} |",
            s.name,
            us(median),
            us(p99),
            added(median, base_median),
            added(p99, base_p99),
            rate(s),
            rate(s) / no_journal_rate,
            s.busy
                .map_or("-".into(), |b| us(b / concurrent_calls() as u32)),
            s.busy.map_or("-".into(), |b| format!(
                "{:.2} of {} cores",
                b.as_secs_f64() / s.concurrent.as_secs_f64(),
                std::thread::available_parallelism().map_or(0, |n| n.get())
            )),
        );
    }
    println!();
    println!("Each store's commit floor, measured in the same rounds:");
    println!();
    println!("| journal | added median | the store's floor | floor median | added / floor |");
    println!("|---|---|---|---|---|");
    for s in &subjects {
        let Some(floor) = s
            .floor
            .and_then(|name| floors.iter().find(|f| f.name == name))
        else {
            continue;
        };
        let added_median = percentile(&s.samples, 0.50).as_secs_f64() - base_median.as_secs_f64();
        let floor_median = percentile(&floor.samples, 0.50);
        println!(
            "| {} | {:+.0} µs | {} | {} | {:.2}x |",
            s.name,
            added_median * 1e6,
            floor.name,
            us(floor_median),
            added_median / floor_median.as_secs_f64()
        );
    }
    assert_eq!(
        mock.total_executions() as usize,
        subjects.len() * (200 + calls + per_task * CONCURRENCY * CONCURRENT_ROUNDS)
    );
}

impl Subject {
    fn new(name: &'static str, client: Result<Client, arcp_sdk::Error>) -> Subject {
        Subject {
            name,
            client: client.expect("connect"),
            samples: Vec::new(),
            concurrent: Duration::ZERO,
            busy: None,
            floor: None,
        }
    }

    fn floor(mut self, name: &'static str) -> Subject {
        self.floor = Some(name);
        self
    }
}

/// Calls made in the concurrent phase.
fn concurrent_calls() -> usize {
    (CONCURRENT_CALLS / CONCURRENCY / CONCURRENT_ROUNDS) * CONCURRENCY * CONCURRENT_ROUNDS
}

/// Calls per second in the concurrent phase.
fn rate(s: &Subject) -> f64 {
    concurrent_calls() as f64 / s.concurrent.as_secs_f64()
}

/// CPU time the whole machine has spent busy (not idle, not waiting for
/// I/O) since boot, from `/proc/stat` (Linux); `None` elsewhere. Read
/// around a phase, it counts every process's share: the bench's and a
/// database server's.
fn machine_busy() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu = stat.lines().next()?.strip_prefix("cpu ")?;
    let ticks: Vec<u64> = cpu
        .split_whitespace()
        .map(|t| t.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal (guest time, after
    // these, is counted in user already)
    let busy: u64 = ticks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4 && *i < 8)
        .map(|(_, t)| t)
        .sum();
    // The kernel counts in USER_HZ, 100 per second on every Linux ABI.
    Some(Duration::from_millis(busy * 10))
}

const SQLITE_FLOOR: &str = "SQLite: one row, one transaction, synchronous=FULL";
const POSTGRES_FLOOR: &str = "PostgreSQL: one autocommit INSERT (one round trip)";

/// SQLite's floor: a row inserted in its own transaction, in WAL mode with
/// `synchronous=FULL`, as the journal opens its file.
fn sqlite_floor(path: &std::path::Path) -> Floor {
    let db = rusqlite::Connection::open(path).expect("open the floor's file");
    db.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
        .expect("WAL");
    db.execute_batch("PRAGMA synchronous = FULL; CREATE TABLE floor (x INTEGER)")
        .expect("the floor's table");
    let db = std::sync::Arc::new(std::sync::Mutex::new(db));
    Floor {
        name: SQLITE_FLOOR,
        samples: Vec::new(),
        write: Box::new(move |i| {
            let db = db.clone();
            Box::pin(async move {
                db.lock()
                    .unwrap()
                    .execute("INSERT INTO floor (x) VALUES (?1)", [i as i64])
                    .expect("insert");
            })
        }),
    }
}

/// PostgreSQL's floor: one `INSERT` in autocommit, a prepared statement on
/// its own connection: one round trip that waits for the commit's flush.
async fn postgres_floor(url: &str) -> Floor {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect for the floor");
    tokio::spawn(connection);
    client
        .batch_execute(
            "DROP TABLE IF EXISTS arcp_bench_floor; CREATE TABLE arcp_bench_floor (x bigint)",
        )
        .await
        .expect("the floor's table");
    let insert = client
        .prepare("INSERT INTO arcp_bench_floor (x) VALUES ($1)")
        .await
        .expect("prepare");
    let client = std::sync::Arc::new(client);
    Floor {
        name: POSTGRES_FLOOR,
        samples: Vec::new(),
        write: Box::new(move |i| {
            let (client, insert) = (client.clone(), insert.clone());
            Box::pin(async move {
                client
                    .execute(&insert, &[&(i as i64)])
                    .await
                    .expect("insert");
            })
        }),
    }
}

async fn call(client: &Client, i: usize) {
    let out = client
        .invoke_tool("echo", json!({"order": i, "cents": 1999, "note": "bench"}))
        .await
        .expect("call");
    debug_assert_eq!(out.value["order"], i);
}

fn percentile(samples: &[Duration], q: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i]
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn added(d: Duration, base: Duration) -> String {
    let diff = d.as_secs_f64() - base.as_secs_f64();
    format!("{:+.0} µs", diff * 1e6)
}
