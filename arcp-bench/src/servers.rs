//! The servers, each in a process of its own (this binary re-executed as
//! `arcp-bench serve KIND`, or the published Python runtime under its
//! venv's interpreter), so that the client's CPU figure is the client's
//! alone and the server's is read from its threads.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::ready_line;

/// Which server a scenario calls.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ServerKind {
    /// The minimal fast WebSocket server (`fast_server.rs`): both dialects.
    FastWebSocket,
    /// The published `arcp-runtime 2.0.0`, as its `arcp serve` runs it.
    ReferenceRuntime,
    /// The minimal fast server of the HTTP binding (`http_server.rs`).
    FastHttp,
    /// The published Python runtime 1.1.3 (`interop/python/server.py`,
    /// v1.1 message set; `python_peer.rs`).
    PythonRuntime,
}

impl ServerKind {
    /// The `arcp-bench serve` argument.
    pub(crate) fn serve_arg(self) -> &'static str {
        match self {
            ServerKind::FastWebSocket => "fast",
            ServerKind::ReferenceRuntime => "runtime",
            ServerKind::FastHttp => "http",
            ServerKind::PythonRuntime => "python",
        }
    }

    /// Whether each measured window starts the server afresh: the
    /// published runtimes keep every job (and arcp-runtime every envelope)
    /// in memory and slow down as a run goes on, so a scenario measured
    /// later would meet a slower runtime than one measured earlier.
    pub(crate) fn fresh_per_window(self) -> bool {
        matches!(
            self,
            ServerKind::ReferenceRuntime | ServerKind::PythonRuntime
        )
    }

    /// The bearer token the server accepts.
    pub(crate) fn token(self) -> &'static str {
        match self {
            ServerKind::PythonRuntime => crate::python_peer::TOKEN,
            _ => crate::TOKEN,
        }
    }

    /// The name in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ServerKind::FastWebSocket => "fast server",
            ServerKind::ReferenceRuntime => "arcp-runtime 2.0.0",
            ServerKind::FastHttp => "fast HTTP server",
            ServerKind::PythonRuntime => "Python runtime 1.1.3",
        }
    }
}

/// Serves `kind` in this process (the `serve` subcommand).
pub(crate) fn serve(kind: &str, port: u16) -> Result<(), String> {
    match kind {
        "fast" => crate::fast_server::serve(port).map_err(|e| e.to_string()),
        "http" => crate::http_server::serve(port).map_err(|e| e.to_string()),
        "runtime" => crate::runtime_server::serve(port).map_err(|e| e.to_string()),
        other => Err(format!("unknown server {other:?}: fast, http or runtime")),
    }
}

/// A server process, killed when dropped.
pub(crate) struct Server {
    _child: tokio::process::Child,
    pub kind: ServerKind,
    pub url: String,
    pub pid: u32,
}

/// Starts a server process and waits for its URL.
pub(crate) async fn spawn(kind: ServerKind) -> Result<Server, String> {
    if kind == ServerKind::PythonRuntime {
        let (child, url) = crate::python_peer::spawn_server().await?;
        let pid = child.id().unwrap_or(0);
        return Ok(Server {
            _child: child,
            kind,
            url,
            pid,
        });
    }
    let name = kind.serve_arg();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = tokio::process::Command::new(exe)
        .args(["serve", name])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the {name} server: {e}"))?;
    let pid = child.id().unwrap_or(0);
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let server = format!("the {name} server");
    let url = ready_line::await_url(&mut lines, &server, Duration::from_secs(20)).await?;
    Ok(Server {
        _child: child,
        kind,
        url,
        pid,
    })
}

/// The servers of one run, started on first use.
#[derive(Default)]
pub(crate) struct Servers {
    started: Vec<Server>,
}

impl Servers {
    /// The server of `kind`, started now if it is not running yet.
    pub(crate) async fn get(&mut self, kind: ServerKind) -> Result<&Server, String> {
        if let Some(i) = self.started.iter().position(|s| s.kind == kind) {
            return Ok(&self.started[i]);
        }
        let server = spawn(kind).await?;
        self.started.push(server);
        Ok(self.started.last().expect("just pushed"))
    }

    /// Starts every server of `kinds` (before a round, so that none starts
    /// in the middle of one).
    pub(crate) async fn start_all(
        &mut self,
        kinds: impl IntoIterator<Item = ServerKind>,
    ) -> Result<(), String> {
        for kind in kinds {
            self.get(kind).await?;
        }
        Ok(())
    }

    /// The server of `kind`, stopped if it runs and started afresh.
    pub(crate) async fn restart(&mut self, kind: ServerKind) -> Result<&Server, String> {
        self.started.retain(|s| s.kind != kind);
        self.get(kind).await
    }

    /// The server of `kind`; it must have been started.
    pub(crate) fn running(&self, kind: ServerKind) -> Result<&Server, String> {
        self.started
            .iter()
            .find(|s| s.kind == kind)
            .ok_or_else(|| format!("the {} is not running", kind.name()))
    }
}
