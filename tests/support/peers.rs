//! The published reference runtimes as test peers, started on loopback.
//!
//! `interop/setup.sh` installs them; a missing peer fails the test loudly
//! (it never silently skips).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arcp_sdk::{Client, DialectChoice, RetryPolicy};
use serde_json::{json, Value};

/// Which published runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PeerKind {
    /// `agentruntimecontrolprotocol` 1.1.3 from PyPI (v1.1 dialect).
    Python,
    /// `arcp-runtime` 2.0.0 from crates.io (legacy dialect).
    Rust,
}

/// A running peer process; killed on drop.
pub(crate) struct Peer {
    pub kind: PeerKind,
    pub url: String,
    child: Child,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The workspace root (the directory holding `interop/`), from the root
/// package's tests or a member's.
fn repo() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|p| p.join("interop/setup.sh").exists())
        .unwrap_or(here)
        .to_path_buf()
}

impl Peer {
    /// Starts a fresh peer (a fresh process, so its execution counter is 0).
    pub(crate) fn start(kind: PeerKind) -> Peer {
        let root = repo();
        let mut command = match kind {
            PeerKind::Python => {
                let python = root.join("interop/python/.venv/bin/python");
                assert!(
                    python.exists(),
                    "the Python reference runtime is not installed: run `bash interop/setup.sh` ({} missing)",
                    python.display()
                );
                let mut c = Command::new(python);
                c.arg(root.join("interop/python/server.py"));
                c
            }
            PeerKind::Rust => {
                let bin = root.join("interop/rust-peer/target/release/arcp-rust-peer");
                assert!(
                    bin.exists(),
                    "the Rust reference runtime is not built: run `bash interop/setup.sh` ({} missing)",
                    bin.display()
                );
                Command::new(bin)
            }
        };
        let mut child = command
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("could not start the {kind:?} peer: {e}"));
        let stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        let started = Instant::now();
        let mut reader = BufReader::new(stdout);
        while !line.starts_with("ARCP_URL=") {
            line.clear();
            let n = reader.read_line(&mut line).expect("peer stdout");
            assert!(
                n > 0 && started.elapsed() < Duration::from_secs(30),
                "the {kind:?} peer exited without printing its URL"
            );
        }
        let url = line.trim().trim_start_matches("ARCP_URL=").to_owned();
        Peer { kind, url, child }
    }

    pub(crate) fn token(&self) -> &'static str {
        match self.kind {
            PeerKind::Python => "test-token",
            PeerKind::Rust => "secret-token",
        }
    }

    pub(crate) fn dialect(&self) -> DialectChoice {
        match self.kind {
            PeerKind::Python => DialectChoice::V1_1,
            PeerKind::Rust => DialectChoice::Legacy,
        }
    }

    /// Arguments of the `counter` tool: runs `ms` milliseconds, emitting
    /// `events` events along the way.
    pub(crate) fn counter_args(&self, ms: u64, events: u64, tag: &str) -> Value {
        match self.kind {
            PeerKind::Python => json!({"sleep": ms as f64 / 1000.0, "events": events, "tag": tag}),
            PeerKind::Rust => json!({"sleep_ms": ms, "ticks": events, "tag": tag}),
        }
    }

    /// A client builder for this peer with test-friendly budgets.
    pub(crate) fn client(&self, url: &str) -> arcp_sdk::ClientBuilder {
        Client::builder(url)
            .bearer_token(self.token())
            .dialect(self.dialect())
            .handshake_timeout(Duration::from_secs(2))
            .retry(
                RetryPolicy::exponential()
                    .initial_delay(Duration::from_millis(50))
                    .max_delay(Duration::from_millis(400))
                    .max_attempts(8)
                    .max_elapsed(Duration::from_secs(8))
                    .outcome_poll(Duration::from_millis(300)),
            )
    }

    /// How many times `counter` has executed in this peer, read through a
    /// fresh connection with the read-only `peek` tool.
    pub(crate) async fn executions(&self) -> u64 {
        let client = self.client(&self.url).connect().await.expect("peek client");
        let out = client.invoke_tool("peek", json!({})).await.expect("peek");
        out.value["count"].as_u64().expect("peek returns a count")
    }
}
