//! Our client driven the way a user writes it, from the README's `Use`
//! section and nothing else: a process of its own whose runtime is what
//! `#[tokio::main]` builds (multi-thread, default settings), one `Client`
//! built as the README builds it, and `invoke_tool("echo", json!(..))`
//! called in a loop from `c` spawned tasks. No knob the README does not
//! show is set (the dialect only when the server is to be spoken to in the
//! legacy one, as a user of a legacy runtime must).
//!
//! The full run starts it as `arcp-bench drive ...` for each window and
//! reads one `SAMPLE {...}` line back: the calls, the latencies (every
//! `n`-th of them, sorted, enough for p99) and this process's CPU time over
//! the window, measured as for the harness's own driver.

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arcp_sdk::{Client, Dialect, RetryPolicy};
use serde_json::json;

use crate::stats::{self, Sample};

/// Latencies sent back at most (evenly spaced ranks of the sorted set).
const MAX_LATENCIES: usize = 20_001;

/// What the `drive` subcommand measures.
pub(crate) struct Args {
    /// Drive the reference client instead (`drive --client ref`), for
    /// figures taken from outside the process (syscalls, segments).
    pub reference: bool,
    pub url: String,
    /// The bearer token the server accepts.
    pub token: String,
    pub dialect: Dialect,
    pub in_flight: usize,
    pub warmup: Duration,
    pub window: Duration,
    pub server_pid: Option<u32>,
}

/// The `drive` subcommand: what `#[tokio::main]` expands to, then the
/// driver; prints the sample.
pub(crate) fn main(args: Args) -> Result<(), String> {
    let sample = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?
        .block_on(drive(args))?;
    println!("SAMPLE {}", to_json(&sample));
    Ok(())
}

async fn drive(args: Args) -> Result<Sample, String> {
    if args.reference {
        let session = crate::clients::reference(&args.url).await?;
        let args_json = crate::clients::echo_args();
        return Ok(crate::clients::closed_loop(
            args.in_flight,
            args.warmup,
            args.window,
            args.server_pid,
            move || {
                let (session, call_args) = (session.clone(), args_json.clone());
                async move {
                    crate::clients::ref_call(&session, "echo", call_args)
                        .await
                        .map(drop)
                }
            },
        )
        .await);
    }
    // As the README builds it.
    let mut builder = Client::builder(&args.url).bearer_token(&args.token).retry(
        RetryPolicy::exponential()
            .max_attempts(8)
            .max_delay(Duration::from_secs(5)),
    );
    if args.dialect == Dialect::Legacy {
        builder = builder.dialect(Dialect::Legacy);
    }
    let client = builder.connect().await.map_err(|e| e.to_string())?;

    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.in_flight {
        let client = client.clone();
        let (measuring, stop, errors) = (measuring.clone(), stop.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(4096);
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let result = client.invoke_tool("echo", json!({"order": 4812})).await;
                let counted = measuring.load(Ordering::Relaxed);
                match result {
                    Ok(_) if counted => latencies.push(started.elapsed().as_nanos() as u64),
                    Ok(_) => {}
                    Err(_) if counted => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {}
                }
            }
            latencies
        }));
    }
    tokio::time::sleep(args.warmup).await;
    let server_cpu = || args.server_pid.map(stats::process_cpu).unwrap_or_default();
    let (cpu0, server0, t0) = (stats::self_cpu(), server_cpu(), Instant::now());
    measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(args.window).await;
    measuring.store(false, Ordering::Relaxed);
    let (cpu1, server1, secs) = (stats::self_cpu(), server_cpu(), t0.elapsed().as_secs_f64());
    stop.store(true, Ordering::Relaxed);
    let mut lat_ns = Vec::new();
    for task in tasks {
        lat_ns.extend(task.await.map_err(|e| e.to_string())?);
    }
    client.close().await;
    lat_ns.sort_unstable();
    Ok(Sample {
        calls: lat_ns.len() as u64,
        errors: errors.load(Ordering::Relaxed),
        secs,
        lat_ns,
        client_cpu: cpu1.saturating_sub(cpu0),
        server_cpu: server1.saturating_sub(server0),
    })
}

fn to_json(sample: &Sample) -> serde_json::Value {
    let n = sample.lat_ns.len();
    let step = n.div_ceil(MAX_LATENCIES).max(1);
    let mut kept: Vec<u64> = sample.lat_ns.iter().copied().step_by(step).collect();
    if let (Some(last), Some(&max)) = (kept.last_mut(), sample.lat_ns.last()) {
        if step > 1 {
            *last = max;
        }
    }
    json!({
        "calls": sample.calls,
        "errors": sample.errors,
        "secs": sample.secs,
        "lat_ns": kept,
        "client_cpu_ns": sample.client_cpu.as_nanos() as u64,
        "server_cpu_ns": sample.server_cpu.as_nanos() as u64,
    })
}

/// A sample from a `SAMPLE` line's JSON (the Python client's line has the
/// same fields).
pub(crate) fn from_json(v: &serde_json::Value) -> Option<Sample> {
    let ns = |k: &str| v[k].as_u64().map(Duration::from_nanos);
    Some(Sample {
        calls: v["calls"].as_u64()?,
        errors: v["errors"].as_u64()?,
        secs: v["secs"].as_f64()?,
        lat_ns: v["lat_ns"]
            .as_array()?
            .iter()
            .filter_map(serde_json::Value::as_u64)
            .collect(),
        client_cpu: ns("client_cpu_ns")?,
        server_cpu: ns("server_cpu_ns")?,
    })
}

/// One window of the documented driver, in a child process; `token`: the
/// bearer token the server accepts.
pub(crate) async fn run_child(
    url: &str,
    token: &str,
    dialect: Dialect,
    in_flight: usize,
    warmup: Duration,
    window: Duration,
    server_pid: Option<u32>,
) -> Result<Sample, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut command = tokio::process::Command::new(exe);
    command.args([
        "drive",
        "--url",
        url,
        "--token",
        token,
        "--dialect",
        &dialect.to_string(),
        "--in-flight",
        &in_flight.to_string(),
        "--warmup",
        &warmup.as_secs_f64().to_string(),
        "--secs",
        &window.as_secs_f64().to_string(),
    ]);
    if let Some(pid) = server_pid {
        command.args(["--server-pid", &pid.to_string()]);
    }
    let out = command
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot start the documented driver: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("SAMPLE "))
        .and_then(|l| serde_json::from_str(l).ok())
        .and_then(|v| from_json(&v))
        .ok_or_else(|| format!("the documented driver failed ({}): {stdout}", out.status))
}
