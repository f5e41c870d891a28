//! The published Python runtime (agentruntimecontrolprotocol 1.1.3, from
//! `interop/setup.sh`) served on loopback, called by our client and by its own
//! published Python client (`arcp-bench/python/client_bench.py`), at c=1 and
//! c=64, rounds alternated. Skipped, with a note, when the venv is missing.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use arcp_sdk::{Client, Dialect, RetryPolicy};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::ready_line;
use crate::stats::{median, Sample};

/// The token the interop server maps to a principal.
const TOKEN: &str = "test-token";

/// One measured window of one client.
pub(crate) struct Figures {
    pub calls_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub cpu_us_per_call: f64,
    pub errors: u64,
}

/// Results per concurrency: (c, ours per round, python per round).
pub(crate) type Results = Vec<(usize, Vec<Figures>, Vec<Figures>)>;

fn repo_root() -> Option<PathBuf> {
    let start = std::env::current_dir().ok()?;
    start
        .ancestors()
        .find(|d| d.join("interop/setup.sh").is_file())
        .map(Path::to_path_buf)
}

/// Runs the section; `Err` names what is missing or failed.
pub(crate) async fn run(
    rounds: usize,
    warmup: Duration,
    window: Duration,
) -> Result<Results, String> {
    let root = repo_root().ok_or("run from the repository (interop/setup.sh not found)")?;
    let python = root.join("interop/python/.venv/bin/python");
    if !python.is_file() {
        return Err("the Python runtime is not installed: run `bash interop/setup.sh`".into());
    }
    let mut server = tokio::process::Command::new(&python)
        .arg(root.join("interop/python/server.py"))
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the Python runtime: {e}"))?;
    let stdout = server.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let url =
        ready_line::await_url(&mut lines, "the Python runtime", Duration::from_secs(30)).await?;
    let script = root.join("arcp-bench/python/client_bench.py");
    let mut results = Vec::new();
    for c in [1usize, 64] {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            // Alternate who goes first, so drift hits both alike.
            for first_ours in [round % 2 == 0, round % 2 != 0] {
                if first_ours {
                    ours.push(run_ours(&url, c, warmup, window).await?);
                } else {
                    theirs.push(run_python(&python, &script, &url, c, warmup, window).await?);
                }
            }
        }
        results.push((c, ours, theirs));
    }
    Ok(results)
}

async fn run_ours(
    url: &str,
    c: usize,
    warmup: Duration,
    window: Duration,
) -> Result<Figures, String> {
    let client = Client::builder(url)
        .bearer_token(TOKEN)
        .dialect(Dialect::V1_1)
        .max_in_flight(c.max(1024))
        .retry(RetryPolicy::default())
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let call_client = client.clone();
    let args = crate::clients::echo_args();
    let sample: Sample = crate::clients::closed_loop(c, warmup, window, None, move || {
        let (client, args) = (call_client.clone(), args.clone());
        async move {
            client
                .invoke_tool("echo", args)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
    .await;
    client.close().await;
    Ok(Figures {
        calls_per_sec: sample.throughput(),
        p50_us: sample.pct_us(50.0),
        p99_us: sample.pct_us(99.0),
        cpu_us_per_call: sample.client_cpu_us(),
        errors: sample.errors,
    })
}

async fn run_python(
    python: &Path,
    script: &Path,
    url: &str,
    c: usize,
    warmup: Duration,
    window: Duration,
) -> Result<Figures, String> {
    let out = tokio::process::Command::new(python)
        .arg(script)
        .args(["--url", url, "--token", TOKEN])
        .args(["--concurrency", &c.to_string()])
        .args(["--warmup", &warmup.as_secs_f64().to_string()])
        .args(["--secs", &window.as_secs_f64().to_string()])
        .stderr(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("cannot run the Python client: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = text
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| format!("the Python client printed no result: {text}"))?;
    let num = |k: &str| v[k].as_f64().unwrap_or(0.0);
    let calls = num("calls");
    Ok(Figures {
        calls_per_sec: if num("secs") > 0.0 {
            calls / num("secs")
        } else {
            0.0
        },
        p50_us: num("p50_us"),
        p99_us: num("p99_us"),
        cpu_us_per_call: if calls > 0.0 {
            num("cpu_secs") * 1e6 / calls
        } else {
            0.0
        },
        errors: num("errors") as u64,
    })
}

/// Median of one figure over rounds.
pub(crate) fn med(rounds: &[Figures], f: impl Fn(&Figures) -> f64) -> f64 {
    median(&rounds.iter().map(f).collect::<Vec<_>>())
}
