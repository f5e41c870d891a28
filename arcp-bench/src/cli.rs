//! The command line: the full run's options, the subcommands the run starts
//! as child processes, and the plan (rounds, windows, sample sizes) the
//! options make.

use std::path::PathBuf;
use std::time::Duration;

use arcp_sdk::Dialect;
use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "arcp-bench", about, args_conflicts_with_subcommands = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Options of the full run (no subcommand).
#[derive(Args, Clone, Debug)]
pub(crate) struct RunArgs {
    /// Sanity run: 3 short rounds, small memory and recovery samples (< 1 min).
    #[arg(long)]
    pub quick: bool,
    /// Rounds per throughput scenario (scenarios interleaved, median reported).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Measured window per scenario and round, in seconds.
    #[arg(long)]
    pub secs: Option<f64>,
    /// Warm-up before each window, in seconds.
    #[arg(long)]
    pub warmup: Option<f64>,
    /// Which sections to run (`runtime`: ours against the reference client
    /// on the published arcp-runtime 2.0.0, and against the official Python
    /// client on the published Python runtime 1.1.3, at 1, 4, 16 and 64
    /// calls in flight; `sweep` is extra: throughput and p99 against
    /// calls in flight, see `--sweep` and `--chart`; `python` needs
    /// `bash interop/setup.sh`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "throughput,http,runtime,memory,recovery,codec,python"
    )]
    pub sections: Vec<String>,
    /// Completed calls for the growth-per-call (leak) check.
    #[arg(long)]
    pub mem_calls: Option<usize>,
    /// Calls in flight for the memory-per-call figure (WebSocket).
    #[arg(long)]
    pub in_flight: Option<usize>,
    /// Calls in flight for the memory-per-call figure over HTTP (one
    /// connection each).
    #[arg(long)]
    pub http_in_flight: Option<usize>,
    /// Trials per recovery scenario.
    #[arg(long)]
    pub trials: Option<usize>,
    /// Only the memory runs whose label (`client/server/dialect`:
    /// `ours/fast/legacy`, `ours/fast/v1.1`, `ref/fast/legacy`,
    /// `ours/http/v1.1`, `reqwest/http/v1.1`) contains one of these strings.
    #[arg(long, value_delimiter = ',')]
    pub mem_only: Vec<String>,
    /// Only the scenarios (throughput, http, sweep) whose label
    /// (`driver/server/dialect/c`, e.g. `ours/fast/legacy/64`,
    /// `reqwest/http/v1.1/64`) contains one of these strings.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Calls in flight for the `sweep` section (not run by default).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,256")]
    pub sweep: Vec<usize>,
    /// Write the sweep's chart (SVG: throughput and p99 against calls in flight).
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// Also write the report to this file.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
}

/// What the full run starts as child processes (and what can be run by hand).
#[derive(Subcommand)]
pub(crate) enum Command {
    /// Serve on loopback and print `ARCP_URL=...`: `fast` (minimal fast
    /// WebSocket server, both dialects), `http` (minimal fast server of the
    /// HTTP binding, keep-alive) or `runtime` (published arcp-runtime 2.0.0).
    Serve {
        kind: String,
        #[arg(long, default_value_t = 0)]
        port: u16,
    },
    /// Memory of one client (run as a child process by the full run):
    /// `ours` (WebSocket or HTTP, by the URL), `ref` or `reqwest`.
    Mem {
        #[arg(long)]
        client: String,
        #[arg(long)]
        url: String,
        #[arg(long, default_value = "legacy")]
        dialect: String,
        #[arg(long, default_value_t = 10_000)]
        in_flight: usize,
        #[arg(long, default_value_t = 20_000)]
        warm: usize,
        #[arg(long, default_value_t = 100_000)]
        calls: usize,
    },
    /// Our client driven as the README's `Use` section shows, in a process
    /// of its own (run as a child process by the full run); prints one
    /// `SAMPLE {...}` line.
    Drive {
        #[arg(long)]
        url: String,
        #[arg(long, default_value = "v1.1")]
        dialect: String,
        #[arg(long, default_value_t = 64)]
        in_flight: usize,
        #[arg(long, default_value_t = 0.3)]
        warmup: f64,
        #[arg(long, default_value_t = 2.0)]
        secs: f64,
        /// The server whose CPU time is read over the window.
        #[arg(long)]
        server_pid: Option<u32>,
        /// `user` (ours, as the README shows) or `ref` (the reference
        /// client, as its README shows), so both run in a process of their
        /// own.
        #[arg(long, default_value = "user")]
        client: String,
        /// The bearer token the server accepts.
        #[arg(long, default_value = crate::TOKEN)]
        token: String,
    },
}

/// `legacy` or anything else (v1.1).
pub(crate) fn parse_dialect(s: &str) -> Dialect {
    if s.eq_ignore_ascii_case("legacy") {
        Dialect::Legacy
    } else {
        Dialect::V1_1
    }
}

/// Rounds, windows and sample sizes of one run.
pub(crate) struct Plan {
    pub rounds: usize,
    pub warmup: Duration,
    pub window: Duration,
    pub in_flight: usize,
    pub http_in_flight: usize,
    pub mem_warm: usize,
    pub mem_calls: usize,
    pub trials: usize,
    pub slow_trials: usize,
    pub codec_iters: usize,
}

impl Plan {
    /// The plan the options ask for (`--quick` shrinks every default).
    pub(crate) fn of(a: &RunArgs) -> Plan {
        let q = a.quick;
        Plan {
            rounds: a.rounds.unwrap_or(if q { 3 } else { 5 }).max(1),
            warmup: Duration::from_secs_f64(a.warmup.unwrap_or(if q { 0.1 } else { 0.3 })),
            window: Duration::from_secs_f64(a.secs.unwrap_or(if q { 0.3 } else { 2.0 })),
            in_flight: a.in_flight.unwrap_or(if q { 2_000 } else { 10_000 }),
            http_in_flight: a.http_in_flight.unwrap_or(if q { 500 } else { 2_000 }),
            mem_warm: if q { 2_000 } else { 20_000 },
            mem_calls: a.mem_calls.unwrap_or(if q { 10_000 } else { 1_000_000 }),
            trials: a.trials.unwrap_or(if q { 10 } else { 100 }),
            slow_trials: a.trials.map_or(if q { 3 } else { 20 }, |t| (t / 5).max(1)),
            codec_iters: 20_000,
        }
    }
}
