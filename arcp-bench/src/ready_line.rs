//! The one line a server process prints once it listens (`ARCP_URL=...`),
//! and how the process that started it waits for that line. It is the whole
//! contract between the benchmark and the servers it starts: ours (this
//! binary re-executed as `arcp-bench serve KIND`) and the Python runtime.
//! A leaf, so that the servers and the code that starts them need not
//! import each other.

use std::io::Write as _;
use std::time::Duration;

use tokio::io::{BufReader, Lines};
use tokio::process::ChildStdout;

/// What the line starts with; the URL follows.
const PREFIX: &str = "ARCP_URL=";

/// Prints the line the parent waits for, once a server listens.
pub(crate) fn announce(url: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{PREFIX}{url}");
    let _ = out.flush();
}

/// Waits up to `within` for the server's first line and returns the URL it
/// announces. `server` names it in errors ("the fast server"). The lines
/// stay with the caller: a child whose stdout is closed may die on its
/// next write.
pub(crate) async fn await_url(
    lines: &mut Lines<BufReader<ChildStdout>>,
    server: &str,
    within: Duration,
) -> Result<String, String> {
    let line = tokio::time::timeout(within, lines.next_line())
        .await
        .map_err(|_| format!("{server} did not start within {} s", within.as_secs()))?
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{server} exited"))?;
    line.strip_prefix(PREFIX)
        .map(str::to_owned)
        .ok_or_else(|| format!("unexpected line from {server}: {line}"))
}
