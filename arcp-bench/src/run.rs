//! The full run: starts the servers a section needs, runs the sections the
//! options select, and writes the report.

use std::fmt::Write as _;
use std::process::Stdio;

use arcp_sdk::Dialect;

use crate::cli::{Plan, RunArgs};
use crate::scenarios::{self, Scenario};
use crate::servers::{ServerKind, Servers};

pub(crate) async fn run(args: RunArgs) -> Result<(), String> {
    let p = Plan::of(&args);
    let has = |s: &str| args.sections.iter().any(|x| x == s);
    let mut md = String::new();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let machine = crate::report::machine();
    let _ = writeln!(md, "Command: `{command}`\n\nMachine: {machine}\n");
    eprintln!("[arcp-bench] {machine}");

    let mut servers = Servers::default();
    if has("throughput") {
        let table = selected(scenarios::websocket_table(), &args.only);
        servers.start_all(table.iter().map(|s| s.server)).await?;
        let samples = scenarios::rounds(
            "throughput",
            p.rounds,
            p.warmup,
            p.window,
            &table,
            &mut servers,
        )
        .await?;
        let ratios = crate::report::websocket_ratios();
        crate::report::throughput(
            "WebSocket: throughput, latency, CPU",
            &p,
            &table,
            &samples,
            &ratios,
            &mut md,
        );
        fast_server_replies(&mut md);
    }
    if has("http") {
        let table = selected(scenarios::http_table(), &args.only);
        servers.start_all(table.iter().map(|s| s.server)).await?;
        let samples =
            scenarios::rounds("http", p.rounds, p.warmup, p.window, &table, &mut servers).await?;
        let ratios = crate::report::http_ratios();
        crate::report::throughput(
            "HTTP binding: throughput, latency, CPU",
            &p,
            &table,
            &samples,
            &ratios,
            &mut md,
        );
    }
    if has("runtime") {
        let mut table = selected(scenarios::runtime_table(), &args.only);
        // Without the Python runtime installed, the rest of the section runs.
        let mut skipped = None;
        if table.iter().any(|s| s.server == ServerKind::PythonRuntime) {
            if let Err(e) = servers.start_all([ServerKind::PythonRuntime]).await {
                table.retain(|s| s.server != ServerKind::PythonRuntime);
                skipped = Some(e);
            }
        }
        servers.start_all(table.iter().map(|s| s.server)).await?;
        let samples = scenarios::rounds(
            "runtime",
            p.rounds,
            p.warmup,
            p.window,
            &table,
            &mut servers,
        )
        .await?;
        crate::report::throughput(
            "Against the published runtimes: throughput, latency, CPU (README driver; the reference client on arcp-runtime 2.0.0, the official Python client on the Python runtime 1.1.3)",
            &p,
            &table,
            &samples,
            &crate::report::runtime_ratios(),
            &mut md,
        );
        if let Some(e) = skipped {
            let _ = writeln!(md, "Python runtime 1.1.3 skipped: {e}\n");
        }
    }
    if has("sweep") {
        servers.start_all([ServerKind::FastWebSocket]).await?;
        crate::sweep::run(&p, &args.sweep, args.chart.as_ref(), &mut servers, &mut md).await?;
    }
    if has("memory") {
        memory(&p, &args.mem_only, &mut servers, &mut md).await?;
    }
    if has("recovery") {
        eprintln!("[arcp-bench] recovery");
        let rows = crate::recovery::run(p.trials, p.slow_trials).await?;
        crate::report::recovery(&rows, &mut md);
    }
    if has("codec") {
        eprintln!("[arcp-bench] codec");
        crate::report::codec(&crate::codec::run(p.codec_iters), &mut md);
    }
    if has("python") {
        eprintln!("[arcp-bench] python");
        let results = crate::python_peer::run(p.rounds, p.warmup, p.window).await;
        crate::report::python(results, &mut md);
    }
    println!("{md}");
    if let Some(path) = &args.markdown {
        std::fs::write(path, &md).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn selected(table: Vec<Scenario>, only: &[String]) -> Vec<Scenario> {
    table.into_iter().filter(|s| s.selected(only)).collect()
}

/// What the fast WebSocket server sends per call, for the report.
fn fast_server_replies(md: &mut String) {
    let args = serde_json::to_string(&crate::clients::echo_args()).unwrap_or_default();
    for dialect in [Dialect::Legacy, Dialect::V1_1] {
        let replies = crate::fast_server::sample_replies(dialect == Dialect::Legacy, &args);
        let sizes: Vec<String> = replies.iter().map(|r| r.len().to_string()).collect();
        let _ = writeln!(
            md,
            "Fast server replies per call, {dialect}: {} frames of {} B.\n",
            replies.len(),
            sizes.join(" + ")
        );
    }
}

/// The memory section: one child process per client (`arcp-bench mem`),
/// whose counting allocator is on from its first instruction.
async fn memory(
    p: &Plan,
    only: &[String],
    servers: &mut Servers,
    md: &mut String,
) -> Result<(), String> {
    let runs = [
        ("ours", ServerKind::FastWebSocket, "legacy"),
        ("ours", ServerKind::FastWebSocket, "v1.1"),
        ("ref", ServerKind::FastWebSocket, "legacy"),
        ("ours", ServerKind::FastHttp, "v1.1"),
        ("reqwest", ServerKind::FastHttp, "v1.1"),
    ];
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut reports = Vec::new();
    for (client, server, dialect) in runs {
        let tag = if server == ServerKind::FastHttp {
            "http"
        } else {
            "fast"
        };
        let label = format!("{client}/{tag}/{dialect}");
        if !only.is_empty() && !only.iter().any(|o| label.contains(o.as_str())) {
            continue;
        }
        let url = servers.get(server).await?.url.clone();
        let in_flight = if server == ServerKind::FastHttp {
            p.http_in_flight
        } else {
            p.in_flight
        };
        eprintln!("[arcp-bench] memory: {label}");
        let out = tokio::process::Command::new(&exe)
            .args([
                "mem",
                "--client",
                client,
                "--url",
                &url,
                "--dialect",
                dialect,
                "--in-flight",
                &in_flight.to_string(),
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
            .ok_or_else(|| format!("memory run {label} failed: {stdout}"))?;
        let mut v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        v["url"] = serde_json::Value::String(url);
        reports.push(v);
    }
    crate::report::memory(p, &reports, md);
    Ok(())
}
