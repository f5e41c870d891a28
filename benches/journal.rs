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
//! Run it: `cargo bench --bench journal` (release mode). Options:
//! `-- --calls N` (sequential calls per client, default 3000),
//! `ARCP_BENCH_DIR=/path` (where the journal files go, default the temp dir).

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

struct Subject {
    name: &'static str,
    client: Client,
    samples: Vec<Duration>,
    throughput: f64,
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
        ),
        Subject::new(
            "SQLite, synchronous=NORMAL",
            connect()
                .journal(open("normal.db", Synchronous::Normal))
                .connect()
                .await,
        ),
    ];
    match std::env::var("ARCP_BENCH_POSTGRES_URL") {
        Ok(url) => {
            let journal = PostgresJournal::connect(
                &url,
                PostgresOptions::default().worker_id(format!("bench-{}", std::process::id())),
            )
            .await
            .expect("open the PostgreSQL journal");
            subjects.push(Subject::new(
                "PostgreSQL (fleet journal: lease, fencing, history)",
                connect().journal(journal).connect().await,
            ));
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
        done += n;
    }
    // Concurrent: CONCURRENCY calls in flight at a time.
    for s in &mut subjects {
        let start = Instant::now();
        let mut tasks = Vec::new();
        for t in 0..CONCURRENCY {
            let client = s.client.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..CONCURRENT_CALLS / CONCURRENCY {
                    call(&client, t * 1_000_000 + i).await;
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        s.throughput = CONCURRENT_CALLS as f64 / start.elapsed().as_secs_f64();
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
        "| client | median | p99 | added median | added p99 | calls/s ({CONCURRENCY} in flight) |"
    );
    println!("|---|---|---|---|---|---|");
    for s in &subjects {
        let median = percentile(&s.samples, 0.50);
        let p99 = percentile(&s.samples, 0.99);
        println!(
            "| {} | {} | {} | {} | {} | {:.0} |",
            s.name,
            us(median),
            us(p99),
            added(median, base_median),
            added(p99, base_p99),
            s.throughput
        );
    }
    assert_eq!(
        mock.total_executions() as usize,
        subjects.len() * (200 + calls + CONCURRENT_CALLS)
    );
}

impl Subject {
    fn new(name: &'static str, client: Result<Client, arcp_sdk::Error>) -> Subject {
        Subject {
            name,
            client: client.expect("connect"),
            samples: Vec::new(),
            throughput: 0.0,
        }
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
