//! The published Python runtime (agentruntimecontrolprotocol 1.1.3, from
//! `interop/setup.sh`) served on loopback (`interop/python/server.py`), and
//! its official Python client driven as its README shows
//! (`arcp-bench/python/client_bench.py`), both in processes of their own
//! under the venv's interpreter. The `runtime` section runs them among its
//! scenarios (`ServerKind::PythonRuntime`, `Driver::PythonClient`); the
//! `python` section compares this harness's driver with that client at c=1
//! and c=64, rounds alternated. Skipped, with a note, when the venv is
//! missing.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use arcp_sdk::{Client, Dialect, RetryPolicy};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::ready_line;
use crate::stats::{median, Sample};

/// The token the interop server maps to a principal.
pub(crate) const TOKEN: &str = "test-token";

/// One measured window of one client.
pub(crate) struct Figures {
    pub calls_per_sec: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub cpu_us_per_call: f64,
    pub errors: u64,
}

impl From<&Sample> for Figures {
    fn from(sample: &Sample) -> Self {
        Figures {
            calls_per_sec: sample.throughput(),
            p50_us: sample.pct_us(50.0),
            p99_us: sample.pct_us(99.0),
            cpu_us_per_call: sample.client_cpu_us(),
            errors: sample.errors,
        }
    }
}

/// Results per concurrency: (c, ours per round, python per round).
pub(crate) type Results = Vec<(usize, Vec<Figures>, Vec<Figures>)>;

/// Where the installed Python runtime and the client script are.
struct Installed {
    python: PathBuf,
    server: PathBuf,
    script: PathBuf,
}

fn installed() -> Result<Installed, String> {
    let start = std::env::current_dir().map_err(|e| e.to_string())?;
    let root = start
        .ancestors()
        .find(|d| d.join("interop/setup.sh").is_file())
        .ok_or("run from the repository (interop/setup.sh not found)")?;
    let python = root.join("interop/python/.venv/bin/python");
    if !python.is_file() {
        return Err("the Python runtime is not installed: run `bash interop/setup.sh`".into());
    }
    Ok(Installed {
        python,
        server: root.join("interop/python/server.py"),
        script: root.join("arcp-bench/python/client_bench.py"),
    })
}

/// Starts the Python runtime and waits for its URL; the child is killed
/// when dropped.
pub(crate) async fn spawn_server() -> Result<(tokio::process::Child, String), String> {
    let at = installed()?;
    let mut server = tokio::process::Command::new(&at.python)
        .arg(&at.server)
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
    // The runtime may write more later: keep its stdout drained.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((server, url))
}

/// Runs the `python` section; `Err` names what is missing or failed.
pub(crate) async fn run(
    rounds: usize,
    warmup: Duration,
    window: Duration,
) -> Result<Results, String> {
    let (server, url) = spawn_server().await?;
    let pid = server.id();
    let mut results = Vec::new();
    for c in [1usize, 64] {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            // Alternate who goes first, so drift hits both alike.
            for first_ours in [round % 2 == 0, round % 2 != 0] {
                if first_ours {
                    ours.push(run_ours(&url, c, warmup, window).await?);
                } else {
                    let sample = client_window(&url, c, warmup, window, pid).await?;
                    theirs.push(Figures::from(&sample));
                }
            }
        }
        results.push((c, ours, theirs));
    }
    drop(server);
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
    Ok(Figures::from(&sample))
}

/// One window of the official Python client at `c` calls in flight, in a
/// process of its own; `server_pid`: the runtime whose CPU time is read
/// over the window.
pub(crate) async fn client_window(
    url: &str,
    c: usize,
    warmup: Duration,
    window: Duration,
    server_pid: Option<u32>,
) -> Result<Sample, String> {
    let at = installed()?;
    let mut command = tokio::process::Command::new(&at.python);
    command
        .arg(&at.script)
        .args(["--url", url, "--token", TOKEN])
        .args(["--concurrency", &c.to_string()])
        .args(["--warmup", &warmup.as_secs_f64().to_string()])
        .args(["--secs", &window.as_secs_f64().to_string()]);
    if let Some(pid) = server_pid {
        command.args(["--server-pid", &pid.to_string()]);
    }
    let out = command
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run the Python client: {e}"))?;
    parse_window(&String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| format!("the Python client printed no result ({})", out.status))
}

/// The sample of the last line the Python client printed.
fn parse_window(stdout: &str) -> Option<Sample> {
    let line = stdout.lines().last()?;
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    crate::documented_driver::from_json(&v)
}

/// Median of one figure over rounds.
pub(crate) fn med(rounds: &[Figures], f: impl Fn(&Figures) -> f64) -> f64 {
    median(&rounds.iter().map(f).collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_client_window_is_read_into_a_sample() {
        let line = r#"{"calls": 4, "errors": 1, "secs": 2.0, "p50_us": 2.0, "p99_us": 4.0, "cpu_secs": 0.5, "lat_ns": [1000, 2000, 3000, 4000], "client_cpu_ns": 500000000, "server_cpu_ns": 250000000}"#;
        let sample = parse_window(&format!("noise\n{line}\n")).expect("parsed");
        assert_eq!((sample.calls, sample.errors), (4, 1));
        assert_eq!(sample.throughput(), 2.0);
        assert_eq!(sample.pct_us(50.0), 2.0);
        assert_eq!(sample.client_cpu_us(), 125_000.0);
        assert_eq!(sample.server_cpu_us(), 62_500.0);
    }

    #[test]
    fn a_python_client_that_printed_no_result_is_an_error() {
        assert!(parse_window("").is_none());
        assert!(parse_window("Traceback (most recent call last):").is_none());
        assert!(parse_window(r#"{"calls": 3}"#).is_none(), "fields missing");
    }
}
