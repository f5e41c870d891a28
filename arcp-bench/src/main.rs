//! `arcp-bench`: throughput, latency, CPU, recovery and memory of the ARCP
//! client against the raw WebSocket ceiling and the published reference
//! client, in one run, as ratios taken in the same run.
//!
//! ```text
//! cargo run --release -p arcp-bench                 # full run (~5 min), markdown on stdout
//! cargo run --release -p arcp-bench -- --quick      # sanity run, under a minute
//! cargo run --release -p arcp-bench -- --sections throughput --rounds 3
//! ```
//!
//! Process layout (so that the CPU figures mean one thing each):
//! - this process is the client: every client measured runs here, on a
//!   multi-threaded Tokio runtime; "client CPU" is `getrusage(RUSAGE_SELF)`
//!   (user + system, all threads, the load generator included) over the
//!   measured window, divided by the calls completed in it;
//! - each server is this binary re-executed as `arcp-bench serve fast` (the
//!   minimal fast server, single-threaded) or `arcp-bench serve runtime` (the
//!   published `arcp-runtime 2.0.0` as `arcp serve` runs it); "server CPU" is
//!   the sum of its threads' scheduler run time over the same window;
//! - the memory figures come from `arcp-bench mem ...` children whose
//!   counting allocator is on from the start (it is off, one relaxed load
//!   per allocation, everywhere else).

mod alloc;
mod chart;
mod clients;
mod codec;
mod fast_server;
mod mem;
mod python_peer;
mod raw;
mod recovery;
mod runtime_server;
mod stats;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use arcp_sdk::Dialect;
use clap::{Args, Parser, Subcommand};
use tokio::io::{AsyncBufReadExt, BufReader};

use stats::{median, min_max, Sample};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// The bearer token every server here accepts.
pub const TOKEN: &str = "secret-token";

/// Prints the line the parent waits for, once a server listens.
pub fn announce(port: u16) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ARCP_URL=ws://127.0.0.1:{port}/arcp");
    let _ = out.flush();
}

#[derive(Parser)]
#[command(name = "arcp-bench", about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Args, Clone, Debug)]
struct RunArgs {
    /// Sanity run: 3 short rounds, small memory and recovery samples (< 1 min).
    #[arg(long)]
    quick: bool,
    /// Rounds per throughput scenario (scenarios interleaved, median reported).
    #[arg(long)]
    rounds: Option<usize>,
    /// Measured window per scenario and round, in seconds.
    #[arg(long)]
    secs: Option<f64>,
    /// Warm-up before each window, in seconds.
    #[arg(long)]
    warmup: Option<f64>,
    /// Which sections to run (`sweep` is extra: throughput and p99 against
    /// calls in flight, see `--sweep` and `--chart`; `python` needs
    /// `bash interop/setup.sh`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "throughput,memory,recovery,codec,python"
    )]
    sections: Vec<String>,
    /// Completed calls for the growth-per-call (leak) check.
    #[arg(long)]
    mem_calls: Option<usize>,
    /// Calls in flight for the memory-per-call figure.
    #[arg(long)]
    in_flight: Option<usize>,
    /// Trials per recovery scenario.
    #[arg(long)]
    trials: Option<usize>,
    /// Only the throughput scenarios whose label (`who/server/dialect/c`,
    /// e.g. `ours/fast/legacy/64`) contains one of these strings.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Calls in flight for the `sweep` section (not run by default).
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,256")]
    sweep: Vec<usize>,
    /// Write the sweep's chart (SVG: throughput and p99 against calls in flight).
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Also write the report to this file.
    #[arg(long)]
    markdown: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve on loopback and print `ARCP_URL=...`: `fast` (minimal fast
    /// server, both dialects) or `runtime` (published arcp-runtime 2.0.0).
    Serve {
        kind: String,
        #[arg(long, default_value_t = 0)]
        port: u16,
    },
    /// Memory of one client (run as a child process by the full run).
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
}

fn parse_dialect(s: &str) -> Dialect {
    if s.eq_ignore_ascii_case("legacy") {
        Dialect::Legacy
    } else {
        Dialect::V1_1
    }
}

fn main() {
    if std::env::args_os().nth(1).is_some_and(|a| a == "mem") {
        alloc::enable();
    }
    let cli = Cli::parse();
    let result: Result<(), String> = match cli.cmd {
        Some(Cmd::Serve { kind, port }) => match kind.as_str() {
            "fast" => fast_server::serve(port).map_err(|e| e.to_string()),
            "runtime" => runtime_server::serve(port).map_err(|e| e.to_string()),
            other => Err(format!("unknown server {other:?}: fast or runtime")),
        },
        Some(Cmd::Mem {
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
        None => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
            .and_then(|rt| rt.block_on(orchestrate(cli.run))),
    };
    if let Err(e) = result {
        eprintln!("arcp-bench: {e}");
        std::process::exit(1);
    }
}

// ----- servers ---------------------------------------------------------------------

struct Server {
    _child: tokio::process::Child,
    url: String,
    pid: u32,
}

async fn spawn_server(kind: &str) -> Result<Server, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = tokio::process::Command::new(exe)
        .args(["serve", kind])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the {kind} server: {e}"))?;
    let pid = child.id().unwrap_or(0);
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .map_err(|_| format!("the {kind} server did not start within 20 s"))?
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("the {kind} server exited"))?;
    let url = line
        .strip_prefix("ARCP_URL=")
        .ok_or_else(|| format!("unexpected line from the {kind} server: {line}"))?
        .to_owned();
    Ok(Server {
        _child: child,
        url,
        pid,
    })
}

// ----- throughput scenarios -----------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Who {
    Raw,
    Ours,
    Ref,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Srv {
    Fast,
    Runtime,
}

#[derive(Clone, Copy, Debug)]
struct Scn {
    who: Who,
    srv: Srv,
    dialect: Dialect,
    c: usize,
}

impl Scn {
    fn client(&self) -> &'static str {
        match self.who {
            Who::Raw => "raw tokio-tungstenite",
            Who::Ours => "ours (arcp-client 0.1)",
            Who::Ref => "reference arcp-client 2.0.0",
        }
    }
    fn label(&self) -> String {
        let who = match self.who {
            Who::Raw => "raw",
            Who::Ours => "ours",
            Who::Ref => "ref",
        };
        let srv = match self.srv {
            Srv::Fast => "fast",
            Srv::Runtime => "runtime",
        };
        format!("{who}/{srv}/{}/{}", self.dialect, self.c)
    }
    fn server(&self) -> &'static str {
        match self.srv {
            Srv::Fast => "fast server",
            Srv::Runtime => "arcp-runtime 2.0.0",
        }
    }
}

fn scenarios() -> Vec<Scn> {
    let mut v = Vec::new();
    for c in [1, 64] {
        for dialect in [Dialect::Legacy, Dialect::V1_1] {
            v.push(Scn {
                who: Who::Raw,
                srv: Srv::Fast,
                dialect,
                c,
            });
            v.push(Scn {
                who: Who::Ours,
                srv: Srv::Fast,
                dialect,
                c,
            });
        }
        v.push(Scn {
            who: Who::Ref,
            srv: Srv::Fast,
            dialect: Dialect::Legacy,
            c,
        });
        for who in [Who::Ours, Who::Ref] {
            v.push(Scn {
                who,
                srv: Srv::Runtime,
                dialect: Dialect::Legacy,
                c,
            });
        }
    }
    v
}

fn find(scns: &[Scn], who: Who, srv: Srv, dialect: Dialect, c: usize) -> Option<usize> {
    scns.iter()
        .position(|s| s.who == who && s.srv == srv && s.dialect == dialect && s.c == c)
}

async fn run_scn(
    s: Scn,
    server: &Server,
    warmup: Duration,
    window: Duration,
) -> Result<Sample, String> {
    let pid = Some(server.pid);
    match s.who {
        Who::Raw => raw::run(&server.url, s.dialect, s.c, warmup, window, pid).await,
        Who::Ours => {
            let client = clients::ours(&server.url, s.dialect, s.c.max(1024)).await?;
            let args = clients::echo_args();
            let call_client = client.clone();
            let sample = clients::closed_loop(s.c, warmup, window, pid, move || {
                let (client, args) = (call_client.clone(), args.clone());
                async move {
                    client
                        .invoke_tool("echo", args)
                        .await
                        .map(drop)
                        .map_err(|e| e.to_string())
                }
            })
            .await;
            client.close().await;
            Ok(sample)
        }
        Who::Ref => {
            let session = clients::reference(&server.url).await?;
            let args = clients::echo_args();
            Ok(clients::closed_loop(s.c, warmup, window, pid, move || {
                let (session, args) = (session.clone(), args.clone());
                async move { clients::ref_call(&session, "echo", args).await.map(drop) }
            })
            .await)
        }
    }
}

// ----- the run -----------------------------------------------------------------------

struct Plan {
    rounds: usize,
    warmup: Duration,
    window: Duration,
    in_flight: usize,
    mem_warm: usize,
    mem_calls: usize,
    trials: usize,
    slow_trials: usize,
    codec_iters: usize,
}

fn plan(a: &RunArgs) -> Plan {
    let q = a.quick;
    Plan {
        rounds: a.rounds.unwrap_or(if q { 3 } else { 5 }).max(1),
        warmup: Duration::from_secs_f64(a.warmup.unwrap_or(if q { 0.1 } else { 0.3 })),
        window: Duration::from_secs_f64(a.secs.unwrap_or(if q { 0.3 } else { 2.0 })),
        in_flight: a.in_flight.unwrap_or(if q { 2_000 } else { 10_000 }),
        mem_warm: if q { 2_000 } else { 20_000 },
        mem_calls: a.mem_calls.unwrap_or(if q { 10_000 } else { 1_000_000 }),
        trials: a.trials.unwrap_or(if q { 10 } else { 100 }),
        slow_trials: a.trials.map_or(if q { 3 } else { 20 }, |t| (t / 5).max(1)),
        codec_iters: 20_000,
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    format!("nproc {nproc}, {cpu}, Linux {kernel}")
}

async fn orchestrate(args: RunArgs) -> Result<(), String> {
    let p = plan(&args);
    let has = |s: &str| args.sections.iter().any(|x| x == s);
    let mut md = String::new();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let _ = writeln!(md, "Command: `{command}`\n\nMachine: {}\n", machine());
    eprintln!("[arcp-bench] {}", machine());

    let fast = spawn_server("fast").await?;
    if has("throughput") {
        let runtime = spawn_server("runtime").await?;
        throughput(&p, &args.only, &fast, &runtime, &mut md).await?;
    }
    if has("sweep") {
        sweep(&p, &args.sweep, args.chart.as_ref(), &fast, &mut md).await?;
    }
    if has("memory") {
        memory(&p, &fast, &mut md).await?;
    }
    if has("recovery") {
        eprintln!("[arcp-bench] recovery");
        let rows = recovery::run(p.trials, p.slow_trials).await?;
        report_recovery(&rows, &mut md);
    }
    if has("codec") {
        eprintln!("[arcp-bench] codec");
        report_codec(&codec::run(p.codec_iters), &mut md);
    }
    if has("python") {
        eprintln!("[arcp-bench] python");
        report_python(
            python_peer::run(p.rounds, p.warmup, p.window).await,
            &mut md,
        );
    }
    println!("{md}");
    if let Some(path) = &args.markdown {
        std::fs::write(path, &md).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

async fn throughput(
    p: &Plan,
    only: &[String],
    fast: &Server,
    runtime: &Server,
    md: &mut String,
) -> Result<(), String> {
    let scns: Vec<Scn> = scenarios()
        .into_iter()
        .filter(|s| only.is_empty() || only.iter().any(|o| s.label().contains(o.as_str())))
        .collect();
    let samples = rounds("throughput", p, &scns, fast, Some(runtime)).await?;
    report_throughput(p, &scns, &samples, md);
    Ok(())
}

/// Every scenario once per round, the starting point rotated per round.
async fn rounds(
    what: &str,
    p: &Plan,
    scns: &[Scn],
    fast: &Server,
    runtime: Option<&Server>,
) -> Result<Vec<Vec<Sample>>, String> {
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); scns.len()];
    for round in 0..p.rounds {
        eprintln!("[arcp-bench] {what} round {}/{}", round + 1, p.rounds);
        for k in 0..scns.len() {
            let i = (k + round) % scns.len();
            let s = scns[i];
            let server = match (s.srv, runtime) {
                (Srv::Fast, _) => fast,
                (Srv::Runtime, Some(r)) => r,
                (Srv::Runtime, None) => return Err("no runtime server".into()),
            };
            let sample = run_scn(s, server, p.warmup, p.window).await?;
            eprintln!(
                "  {:<28} {:<18} {:<6} c={:<3} {:>9.0} calls/s  p50 {:>8.1} us  p99 {:>8.1} us  cpu {:>6.2} us/call",
                s.client(),
                s.server(),
                s.dialect.to_string(),
                s.c,
                sample.throughput(),
                sample.pct_us(50.0),
                sample.pct_us(99.0),
                sample.client_cpu_us()
            );
            samples[i].push(sample);
        }
    }
    Ok(samples)
}

/// Throughput and p99 against calls in flight, fast server: a table, and an
/// SVG chart when `--chart` is given.
async fn sweep(
    p: &Plan,
    cs: &[usize],
    chart: Option<&PathBuf>,
    fast: &Server,
    md: &mut String,
) -> Result<(), String> {
    let series = [
        (Who::Raw, Dialect::Legacy),
        (Who::Ours, Dialect::Legacy),
        (Who::Ours, Dialect::V1_1),
        (Who::Ref, Dialect::Legacy),
    ];
    let mut scns = Vec::new();
    for &c in cs {
        for (who, dialect) in series {
            scns.push(Scn {
                who,
                srv: Srv::Fast,
                dialect,
                c,
            });
        }
    }
    let samples = rounds("sweep", p, &scns, fast, None).await?;
    let _ = writeln!(
        md,
        "## Calls in flight sweep (fast server; {} rounds, median)\n\n| client | dialect | c | calls/s | p50 us | p99 us | client CPU us/call |\n|---|---|---|---|---|---|---|",
        p.rounds
    );
    let mut lines = Vec::new();
    for (who, dialect) in series {
        let mut points = Vec::new();
        for (s, v) in scns.iter().zip(&samples) {
            if s.who != who || s.dialect != dialect {
                continue;
            }
            let m = |f: &dyn Fn(&Sample) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
            let (tp, p50, p99, cpu) = (
                m(&|x| x.throughput()),
                m(&|x| x.pct_us(50.0)),
                m(&|x| x.pct_us(99.0)),
                m(&|x| x.client_cpu_us()),
            );
            let _ = writeln!(
                md,
                "| {} | {} | {} | {tp:.0} | {p50:.0} | {p99:.0} | {cpu:.2} |",
                s.client(),
                s.dialect,
                s.c
            );
            points.push(chart::Point {
                in_flight: s.c as f64,
                calls_per_sec: tp,
                p99_us: p99,
                cpu_us: cpu,
            });
        }
        let name = format!(
            "{} {}",
            match who {
                Who::Raw => "raw",
                Who::Ours => "ours",
                Who::Ref => "reference",
            },
            dialect
        );
        lines.push((name, points));
    }
    let _ = writeln!(md);
    if let Some(path) = chart {
        std::fs::write(path, chart::svg(&lines)).map_err(|e| format!("{}: {e}", path.display()))?;
        let _ = writeln!(md, "Chart: `{}`\n", path.display());
    }
    Ok(())
}

fn fmt_range(xs: &[f64], digits: usize) -> String {
    let (lo, hi) = min_max(xs);
    format!("{:.d$} ({:.d$}-{:.d$})", median(xs), lo, hi, d = digits)
}

fn request_bytes(who: Who, dialect: Dialect) -> usize {
    match who {
        Who::Raw | Who::Ours => raw::template(dialect, &format!("sess_{}", ulid::Ulid::new()))
            .0
            .len(),
        Who::Ref => {
            let mut env = arcp_core::Envelope::new(arcp_core::MessageType::ToolInvoke(
                arcp_core::messages::ToolInvokePayload::new("echo", clients::echo_args()),
            ));
            env.session_id = Some(arcp_core::ids::SessionId::new());
            serde_json::to_string(&env).map_or(0, |s| s.len())
        }
    }
}

fn report_throughput(p: &Plan, scns: &[Scn], samples: &[Vec<Sample>], md: &mut String) {
    let args = serde_json::to_string(&clients::echo_args()).unwrap_or_default();
    let _ = writeln!(
        md,
        "## Throughput, latency, CPU ({} rounds, interleaved; {:.1} s window after {:.1} s warm-up; median (min-max) over rounds)\n",
        p.rounds,
        p.window.as_secs_f64(),
        p.warmup.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "| client | server | dialect | c | calls/s | p50 us | p99 us | client CPU us/call | server CPU us/call | request B | calls measured | errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (s, v) in scns.iter().zip(samples) {
        let col = |f: &dyn Fn(&Sample) -> f64| v.iter().map(f).collect::<Vec<_>>();
        let tp = col(&|x| x.throughput());
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            s.client(),
            s.server(),
            s.dialect,
            s.c,
            fmt_range(&tp, 0),
            fmt_range(&col(&|x| x.pct_us(50.0)), 0),
            fmt_range(&col(&|x| x.pct_us(99.0)), 0),
            fmt_range(&col(&|x| x.client_cpu_us()), 2),
            fmt_range(&col(&|x| x.server_cpu_us()), 2),
            request_bytes(s.who, s.dialect),
            v.iter().map(|x| x.calls).sum::<u64>(),
            v.iter().map(|x| x.errors).sum::<u64>(),
        );
    }
    for dialect in [Dialect::Legacy, Dialect::V1_1] {
        let replies = fast_server::sample_replies(dialect == Dialect::Legacy, &args);
        let sizes: Vec<String> = replies.iter().map(|r| r.len().to_string()).collect();
        let _ = writeln!(
            md,
            "\nFast server replies per call, {dialect}: {} frames of {} B.",
            replies.len(),
            sizes.join(" + ")
        );
    }

    // Ratios, taken within each round (scenarios of a round ran minutes
    // apart at most), then the median over rounds.
    let ratio = |a: Option<usize>, b: Option<usize>, f: &dyn Fn(&Sample) -> f64| -> Vec<f64> {
        match (a, b) {
            (Some(a), Some(b)) => samples[a]
                .iter()
                .zip(&samples[b])
                .map(|(x, y)| f(x) / f(y))
                .collect(),
            _ => Vec::new(),
        }
    };
    let tp = |x: &Sample| x.throughput();
    let cpu = |x: &Sample| x.client_cpu_us();
    let p50 = |x: &Sample| x.pct_us(50.0);
    let (l, v) = (Dialect::Legacy, Dialect::V1_1);
    let f = |who, srv, d, c| find(scns, who, srv, d, c);
    let rows: Vec<(String, Vec<f64>, &str)> = vec![
        (
            "ours / raw, calls/s, fast server, legacy, c=64".into(),
            ratio(
                f(Who::Ours, Srv::Fast, l, 64),
                f(Who::Raw, Srv::Fast, l, 64),
                &tp,
            ),
            ">= 0.35",
        ),
        (
            "ours / raw, calls/s, fast server, v1.1, c=64".into(),
            ratio(
                f(Who::Ours, Srv::Fast, v, 64),
                f(Who::Raw, Srv::Fast, v, 64),
                &tp,
            ),
            ">= 0.35",
        ),
        (
            "ours / raw, calls/s, fast server, legacy, c=1".into(),
            ratio(
                f(Who::Ours, Srv::Fast, l, 1),
                f(Who::Raw, Srv::Fast, l, 1),
                &tp,
            ),
            "",
        ),
        (
            "ours / raw, calls/s, fast server, v1.1, c=1".into(),
            ratio(
                f(Who::Ours, Srv::Fast, v, 1),
                f(Who::Raw, Srv::Fast, v, 1),
                &tp,
            ),
            "",
        ),
        (
            "ours / raw, p50 latency, fast server, legacy, c=1".into(),
            ratio(
                f(Who::Ours, Srv::Fast, l, 1),
                f(Who::Raw, Srv::Fast, l, 1),
                &p50,
            ),
            "",
        ),
        (
            "ours / reference, calls/s, fast server, legacy, c=64".into(),
            ratio(
                f(Who::Ours, Srv::Fast, l, 64),
                f(Who::Ref, Srv::Fast, l, 64),
                &tp,
            ),
            ">= 2.5",
        ),
        (
            "ours / reference, calls/s, fast server, legacy, c=1".into(),
            ratio(
                f(Who::Ours, Srv::Fast, l, 1),
                f(Who::Ref, Srv::Fast, l, 1),
                &tp,
            ),
            "",
        ),
        (
            "ours / reference, client CPU per call, fast server, legacy, c=64".into(),
            ratio(
                f(Who::Ours, Srv::Fast, l, 64),
                f(Who::Ref, Srv::Fast, l, 64),
                &cpu,
            ),
            "",
        ),
        (
            "ours / raw, client CPU per call, fast server, legacy, c=64".into(),
            ratio(
                f(Who::Ours, Srv::Fast, l, 64),
                f(Who::Raw, Srv::Fast, l, 64),
                &cpu,
            ),
            "",
        ),
        (
            "ours / reference, calls/s, arcp-runtime 2.0.0, c=1".into(),
            ratio(
                f(Who::Ours, Srv::Runtime, l, 1),
                f(Who::Ref, Srv::Runtime, l, 1),
                &tp,
            ),
            ">= 50",
        ),
        (
            "ours / reference, calls/s, arcp-runtime 2.0.0, c=64".into(),
            ratio(
                f(Who::Ours, Srv::Runtime, l, 64),
                f(Who::Ref, Srv::Runtime, l, 64),
                &tp,
            ),
            "",
        ),
    ];
    let _ = writeln!(
        md,
        "\n### Ratios (per round, median (min-max) over rounds)\n\n| ratio | measured | target (issue 9) |\n|---|---|---|"
    );
    for (name, xs, target) in rows {
        let _ = writeln!(md, "| {name} | {} | {target} |", fmt_range(&xs, 2));
    }
    let _ = writeln!(md);
}

async fn memory(p: &Plan, fast: &Server, md: &mut String) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut reports = Vec::new();
    for (client, dialect) in [("ours", "legacy"), ("ours", "v1.1"), ("ref", "legacy")] {
        eprintln!("[arcp-bench] memory: {client} {dialect}");
        let out = tokio::process::Command::new(&exe)
            .args([
                "mem",
                "--client",
                client,
                "--url",
                &fast.url,
                "--dialect",
                dialect,
                "--in-flight",
                &p.in_flight.to_string(),
                "--warm",
                &p.mem_warm.to_string(),
                "--calls",
                &p.mem_calls.to_string(),
            ])
            .stderr(Stdio::inherit())
            .output()
            .await
            .map_err(|e| e.to_string())?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("MEM "))
            .ok_or_else(|| format!("memory run {client} {dialect} failed: {stdout}"))?;
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        reports.push(v);
    }
    let _ = writeln!(
        md,
        "## Memory (client process, counting allocator; fast server in its own process)\n\n\
         {} calls in flight (`hold` tool: accepted, terminal withheld); growth over {} completed calls at c=64 after {} warm-up calls.\n\n\
         | client | dialect | bytes per call in flight (allocator) | RSS per call in flight | left after release, per call | growth per completed call (allocator) | RSS growth per completed call | allocations per call | bytes allocated per call |\n|---|---|---|---|---|---|---|---|---|",
        p.in_flight, p.mem_calls, p.mem_warm
    );
    for v in &reports {
        let g = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        let name = match v["client"].as_str() {
            Some("ours") => "ours (arcp-client 0.1)",
            _ => "reference arcp-client 2.0.0",
        };
        let _ = writeln!(
            md,
            "| {name} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.1} | {:.0} |",
            v["dialect"].as_str().unwrap_or(""),
            g("in_flight_alloc_b_per_call"),
            g("in_flight_rss_b_per_call"),
            g("residual_after_release_b_per_call"),
            g("growth_alloc_b_per_call"),
            g("growth_rss_b_per_call"),
            g("allocs_per_call"),
            g("alloc_bytes_per_call"),
        );
    }
    let _ = writeln!(md);
    Ok(())
}

fn report_recovery(rows: &[recovery::Row], md: &mut String) {
    let _ = writeln!(
        md,
        "## Recovery (arcp-mock in this process, one fresh call per trial, connection killed by a one-shot Fault)\n\n\
         | scenario | retry policy | measured from | trials | p50 ms | p99 ms | max ms | outcomes | tool executions per call |\n|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows {
        let ns: Vec<u64> = r.lat_ms.iter().map(|ms| (ms * 1e6) as u64).collect();
        let pct = |p| stats::percentile(&ns, p) as f64 / 1e6;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {} | {:.2} |",
            r.name,
            r.policy,
            r.measured_from,
            r.trials,
            pct(50.0),
            pct(99.0),
            r.lat_ms.last().copied().unwrap_or(f64::NAN),
            r.outcomes,
            r.executions_per_call
        );
    }
    let _ = writeln!(md);
}

fn report_codec(rows: &[codec::Row], md: &mut String) {
    let _ = writeln!(
        md,
        "## Codec (this process, one thread, median of 5 batches)\n\n| dialect | what | bytes | ns |\n|---|---|---|---|"
    );
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.0} |",
            r.dialect,
            r.what,
            if r.bytes > 0 {
                r.bytes.to_string()
            } else {
                String::new()
            },
            r.ns
        );
    }
    let _ = writeln!(md);
}

fn report_python(results: Result<python_peer::Results, String>, md: &mut String) {
    let _ = writeln!(
        md,
        "## Python runtime 1.1.3: ours against its published Python client\n"
    );
    let results = match results {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(md, "Skipped: {e}\n");
            return;
        }
    };
    let _ = writeln!(
        md,
        "Both clients against the same `interop/python/server.py` (agentruntimecontrolprotocol \
         1.1.3, `echo` agent: one log event and the result), one session each, rounds \
         alternated; medians over rounds. Client CPU per call: ours from `getrusage` of this \
         process, the Python client's of its own process.\n"
    );
    let _ = writeln!(
        md,
        "| c | client | calls/s | p50 us | p99 us | client CPU us/call | errors |\n|---|---|---|---|---|---|---|"
    );
    for (c, ours, theirs) in &results {
        for (name, rounds) in [("ours", ours), ("Python client 1.1.3", theirs)] {
            let _ = writeln!(
                md,
                "| {c} | {name} | {:.0} | {:.0} | {:.0} | {:.1} | {} |",
                python_peer::med(rounds, |f| f.calls_per_sec),
                python_peer::med(rounds, |f| f.p50_us),
                python_peer::med(rounds, |f| f.p99_us),
                python_peer::med(rounds, |f| f.cpu_us_per_call),
                rounds.iter().map(|f| f.errors).sum::<u64>(),
            );
        }
    }
    let _ = writeln!(md);
    for (c, ours, theirs) in &results {
        let ratio = python_peer::med(ours, |f| f.calls_per_sec)
            / python_peer::med(theirs, |f| f.calls_per_sec).max(f64::MIN_POSITIVE);
        let cpu = python_peer::med(ours, |f| f.cpu_us_per_call)
            / python_peer::med(theirs, |f| f.cpu_us_per_call).max(f64::MIN_POSITIVE);
        let _ = writeln!(
            md,
            "c={c}: ours / Python client, calls/s **{ratio:.2}x**, client CPU per call {cpu:.2}x.\n"
        );
    }
}
