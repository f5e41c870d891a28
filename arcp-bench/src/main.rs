//! `arcp-bench`: throughput, latency, CPU, recovery and memory of the ARCP
//! client against the raw ceilings (tokio-tungstenite over WebSocket,
//! reqwest over HTTP) and the published reference client, in one run, as
//! ratios taken in the same run.
//!
//! ```text
//! cargo run --release -p arcp-bench                 # full run (~11 min), markdown on stdout
//! cargo run --release -p arcp-bench -- --quick      # sanity run, under a minute
//! cargo run --release -p arcp-bench -- --sections http --rounds 3
//! ```
//!
//! Process layout (so that the CPU figures mean one thing each):
//! - this process is the client: every client measured runs here, on a
//!   multi-threaded Tokio runtime; "client CPU" is `getrusage(RUSAGE_SELF)`
//!   (user + system, all threads, the load generator included) over the
//!   measured window, divided by the calls completed in it;
//! - except the documented driver (`documented_driver.rs`): our client
//!   driven as the README shows, in a process of its own (`arcp-bench
//!   drive`), which measures its own CPU the same way;
//! - each server is this binary re-executed as `arcp-bench serve fast` (the
//!   minimal fast WebSocket server), `serve http` (the minimal fast server
//!   of the HTTP binding) or `serve runtime` (the published `arcp-runtime
//!   2.0.0` as `arcp serve` runs it), or the published Python runtime
//!   1.1.3 under `interop/python/.venv` (`python_peer`), started afresh
//!   for every window against a published runtime; "server CPU" is the
//!   sum of its threads' scheduler run time over the same window;
//! - the official Python client runs in a process of its own too
//!   (`python/client_bench.py`) and reports its own CPU the same way;
//! - the memory figures come from `arcp-bench mem ...` children whose
//!   counting allocator is on from the start (it is off, one relaxed load
//!   per allocation, everywhere else).
//!
//! Modules by job: `cli` (options and plan), `servers` (server processes),
//! `ready_line` (the line a server prints once it listens), `listener`
//! (a server's loopback listener),
//! `scenarios` (the scenario tables and one measured window), `run` (the
//! sections), `report` (the markdown); the drivers (`clients`, `raw`,
//! `http_raw`, `documented_driver`), the servers (`fast_server`,
//! `http_server`, `runtime_server`) and the other sections (`mem`,
//! `recovery`, `codec`, `python_peer`, `sweep`).

mod alloc;
mod chart;
mod cli;
mod clients;
mod codec;
mod documented_driver;
mod fast_server;
mod http_raw;
mod http_server;
mod listener;
mod mem;
mod python_peer;
mod raw;
mod ready_line;
mod recovery;
mod report;
mod run;
mod runtime_server;
mod scenarios;
mod servers;
mod stats;
mod sweep;

use std::time::Duration;

use clap::Parser;

use cli::{parse_dialect, Cli, Command};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// The bearer token every server here accepts.
pub const TOKEN: &str = "secret-token";

fn main() {
    if std::env::args_os().nth(1).is_some_and(|a| a == "mem") {
        alloc::enable();
    }
    let cli = Cli::parse();
    let result: Result<(), String> = match cli.command {
        Some(Command::Serve { kind, port }) => servers::serve(&kind, port),
        Some(Command::Mem {
            client,
            url,
            dialect,
            in_flight,
            warm,
            calls,
        }) => mem::run(mem::Args {
            client,
            url,
            dialect: parse_dialect(&dialect),
            in_flight,
            warm,
            calls,
        }),
        Some(Command::Drive {
            url,
            dialect,
            in_flight,
            warmup,
            secs,
            server_pid,
            client,
            token,
        }) => documented_driver::main(documented_driver::Args {
            reference: client == "ref",
            url,
            token,
            dialect: parse_dialect(&dialect),
            in_flight,
            warmup: Duration::from_secs_f64(warmup),
            window: Duration::from_secs_f64(secs),
            server_pid,
        }),
        None => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
            .and_then(|rt| rt.block_on(run::run(cli.run))),
    };
    if let Err(e) = result {
        eprintln!("arcp-bench: {e}");
        std::process::exit(1);
    }
}
