//! `arcp-rust-peer`: the published Rust reference runtime (`arcp-runtime = "=2.0.0"`,
//! legacy dialect: `session.open`, `tool.invoke`, `job.accepted/started/completed/failed`)
//! served on loopback for the SDK's interop tests.
//!
//! Contract (same as `interop/python/server.py`):
//!
//! * `--port N` (0 = pick a free port), `--host` (default 127.0.0.1).
//! * Once listening, prints exactly one line to stdout, flushed:
//!   `ARCP_URL=ws://127.0.0.1:PORT/arcp`, then serves until killed. Logs go to stderr
//!   (`RUST_LOG`, default `warn`). The runtime accepts any request path.
//! * Bearer tokens: `secret-token` -> alice, `other-token` -> bob (`bob-token` -> bob too,
//!   the token used in the captured transcripts).
//! * Tools: `echo` (returns its arguments), `counter`, `peek`, `fail` (see the handlers).
//! * `--nodelay` sets TCP_NODELAY on accepted sockets. Off by default, like the published
//!   `arcp serve` CLI, which never sets it.
//!
//! The accept loop mirrors `arcp serve` from arcp-runtime 2.0.0 (bin/arcp.rs): plain
//! `tokio_tungstenite::accept_async`, then `ARCPRuntime::serve_connection`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arcp_core::messages::Capabilities;
use arcp_core::transport::websocket::WebSocketTransport;
use arcp_runtime::auth::BearerAuthenticator;
use arcp_runtime::runtime::{ARCPRuntime, ToolContext, ToolHandler, ToolRegistryBuilder};
use arcp_runtime::ARCPError;
use async_trait::async_trait;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

/// Process-global count of `counter` executions (all sessions, all principals).
static COUNT: AtomicU64 = AtomicU64::new(0);

/// Map a wire error code string onto the runtime's error type. The runtime derives
/// the wire `code` and `retryable` from the variant, so this is the only way to pick them.
fn error_for(code: &str, detail: String) -> ARCPError {
    match code {
        "CANCELLED" => ARCPError::Cancelled { reason: detail },
        "INVALID_ARGUMENT" => ARCPError::InvalidArgument { detail },
        "DEADLINE_EXCEEDED" => ARCPError::DeadlineExceeded { detail },
        "NOT_FOUND" => ARCPError::NotFound { kind: "thing", id: detail },
        "ALREADY_EXISTS" => ARCPError::AlreadyExists { kind: "thing", id: detail },
        "PERMISSION_DENIED" => ARCPError::PermissionDenied { detail },
        "RESOURCE_EXHAUSTED" => ARCPError::ResourceExhausted {
            detail,
            retry_after_seconds: None,
        },
        "FAILED_PRECONDITION" => ARCPError::FailedPrecondition { detail },
        "ABORTED" => ARCPError::Aborted { detail },
        "OUT_OF_RANGE" => ARCPError::OutOfRange { detail },
        "INTERNAL" | "INTERNAL_ERROR" => ARCPError::Internal { detail },
        "UNAVAILABLE" => ARCPError::Unavailable { detail },
        "DATA_LOSS" => ARCPError::DataLoss { detail },
        "UNAUTHENTICATED" => ARCPError::Unauthenticated { detail },
        "BUDGET_EXHAUSTED" => ARCPError::BudgetExhausted { detail },
        _ => ARCPError::Unknown { detail },
    }
}

async fn sleep_ms(ms: f64) {
    if ms > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(ms / 1000.0)).await;
    }
}

/// `echo`: returns its arguments unchanged.
struct Echo;

#[async_trait]
impl ToolHandler for Echo {
    fn name(&self) -> &'static str {
        "echo"
    }
    async fn invoke(&self, arguments: Value, _ctx: ToolContext) -> Result<Value, ARCPError> {
        Ok(arguments)
    }
}

/// `counter`: increments the process-global counter when it starts executing, then
/// returns `{"arguments": <arguments>, "count": n}`. Arguments:
/// * `sleep_ms` (number): how long the job runs;
/// * `ticks` (int N): emits N `metric` events (`cost.tick`, 0.0 USD), one after each
///   `sleep_ms / N` slice (the runtime's ToolContext can emit metrics, not progress);
/// * `fail` (code string, or `true` = INTERNAL): fail with that code after the sleep.
///
/// The runtime cancels a running job on `cancel` or `session.close` (capture s08), not when
/// the connection drops.
struct Counter;

#[async_trait]
impl ToolHandler for Counter {
    fn name(&self) -> &'static str {
        "counter"
    }
    async fn invoke(&self, arguments: Value, ctx: ToolContext) -> Result<Value, ARCPError> {
        let n = COUNT.fetch_add(1, Ordering::SeqCst) + 1;
        let sleep = arguments.get("sleep_ms").and_then(Value::as_f64).unwrap_or(0.0);
        let ticks = arguments.get("ticks").and_then(Value::as_u64).unwrap_or(0);
        if ticks == 0 {
            sleep_ms(sleep).await;
        } else {
            #[allow(clippy::cast_precision_loss)]
            let slice = sleep / ticks as f64;
            for _ in 0..ticks {
                sleep_ms(slice).await;
                ctx.charge("cost.tick", 0.0, "USD").await?;
            }
        }
        match arguments.get("fail") {
            Some(Value::String(code)) => {
                return Err(error_for(code, format!("counter asked to fail with {code}")))
            }
            Some(Value::Bool(true)) => {
                return Err(error_for("INTERNAL", "counter asked to fail with INTERNAL".into()))
            }
            _ => {}
        }
        Ok(json!({ "arguments": arguments, "count": n }))
    }
}

/// `peek`: read-only, returns `{"count": n}`.
struct Peek;

#[async_trait]
impl ToolHandler for Peek {
    fn name(&self) -> &'static str {
        "peek"
    }
    async fn invoke(&self, _arguments: Value, _ctx: ToolContext) -> Result<Value, ARCPError> {
        Ok(json!({ "count": COUNT.load(Ordering::SeqCst) }))
    }
}

/// `fail`: `{"message": m, "retryable": bool}` -> `PERMISSION_DENIED` "permission denied: m",
/// or `UNAVAILABLE` "service unavailable: m" when `retryable` is true (capture s04).
struct Fail;

#[async_trait]
impl ToolHandler for Fail {
    fn name(&self) -> &'static str {
        "fail"
    }
    async fn invoke(&self, arguments: Value, _ctx: ToolContext) -> Result<Value, ARCPError> {
        let detail = arguments
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("failed")
            .to_owned();
        if arguments.get("retryable").and_then(Value::as_bool) == Some(true) {
            Err(ARCPError::Unavailable { detail })
        } else {
            Err(ARCPError::PermissionDenied { detail })
        }
    }
}

struct Args {
    host: String,
    port: u16,
    nodelay: bool,
}

fn usage() -> ! {
    eprintln!("usage: arcp-rust-peer [--port N (0 = free port)] [--host 127.0.0.1] [--nodelay]");
    std::process::exit(2);
}

fn parse_args() -> Args {
    let mut args = Args {
        host: "127.0.0.1".into(),
        port: 0,
        nodelay: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
            None => (a.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next()).unwrap_or_else(|| usage());
        match flag.as_str() {
            "--port" => args.port = value().parse().unwrap_or_else(|_| usage()),
            "--host" => args.host = value(),
            "--nodelay" => args.nodelay = true,
            "-h" | "--help" => usage(),
            _ => {
                eprintln!("unknown argument: {a}");
                usage();
            }
        }
    }
    args
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    let tools = ToolRegistryBuilder::new()
        .with(Arc::new(Echo))
        .with(Arc::new(Counter))
        .with(Arc::new(Peek))
        .with(Arc::new(Fail))
        .build();
    // Reproduces the capabilities seen in the captures' session.accepted
    // (streaming, durable_jobs; artifacts and subscriptions false).
    let caps = Capabilities {
        streaming: Some(true),
        durable_jobs: Some(true),
        artifacts: Some(false),
        subscriptions: Some(false),
        ..Default::default()
    };
    let runtime = ARCPRuntime::builder()
        .with_authenticator(Box::new(
            BearerAuthenticator::new()
                .with_token("secret-token", "alice")
                .with_token("other-token", "bob")
                .with_token("bob-token", "bob"),
        ))
        .with_tools(tools)
        .with_capabilities(caps)
        .build()
        .await?;

    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port)).await?;
    let port = listener.local_addr()?.port();
    let mut stdout = tokio::io::stdout();
    stdout
        .write_all(format!("ARCP_URL=ws://{}:{port}/arcp\n", args.host).as_bytes())
        .await?;
    stdout.flush().await?;

    let nodelay = args.nodelay;
    let serve = async move {
        loop {
            let (sock, _peer) = match listener.accept().await {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if nodelay {
                let _ = sock.set_nodelay(true);
            }
            let runtime = runtime.clone();
            // Handshake off the accept loop so one slow client cannot stall the others.
            tokio::spawn(async move {
                match tokio_tungstenite::accept_async(sock).await {
                    Ok(ws) => {
                        let _ = runtime.serve_connection(WebSocketTransport::accept_stream(ws));
                    }
                    Err(e) => eprintln!("websocket handshake failed: {e}"),
                }
            });
        }
    };

    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    #[cfg(unix)]
    let terminated = term.recv();
    #[cfg(not(unix))]
    let terminated = std::future::pending::<Option<()>>();
    tokio::select! {
        () = serve => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = terminated => {}
    }
    Ok(())
}
