//! The clients measured: ours (`arcp-sdk`, folder `arcp-client/`), the
//! published reference client (`arcp-client 2.0.0`, under the `ref-client`
//! key), and the closed-loop driver that runs either at `c` calls in flight.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arcp_core::messages::{AuthScheme, Capabilities, ClientIdentity, Credentials};
use arcp_core::transport::websocket::WebSocketTransport;
use arcp_sdk::{Client, Dialect, RetryPolicy};
use serde_json::{json, Value};

use crate::stats::{self, Sample};

/// The echo arguments of every call: with them the legacy request of the
/// reference client is ~220 B (ours carries an idempotency key and a trace
/// id, ~100 B more), and the replies ~310 B on average.
pub(crate) fn echo_args() -> Value {
    json!({"order": 4812})
}

/// Our client, speaking `dialect`, retry and replay machinery at defaults.
pub(crate) async fn ours(
    url: &str,
    dialect: Dialect,
    max_in_flight: usize,
) -> Result<Client, String> {
    Client::builder(url)
        .bearer_token(crate::TOKEN)
        .dialect(dialect)
        .max_in_flight(max_in_flight)
        .retry(RetryPolicy::default())
        .connect()
        .await
        .map_err(|e| e.to_string())
}

/// An authenticated session of the reference client.
pub(crate) type RefSession = ref_client::Session<ref_client::Authenticated, WebSocketTransport>;

/// The reference client, connected as its README shows: `WebSocketTransport::dial`
/// (no TCP_NODELAY), `ARCPClient::open`, `authenticate`.
pub(crate) async fn reference(url: &str) -> Result<Arc<RefSession>, String> {
    let transport = WebSocketTransport::dial(url)
        .await
        .map_err(|e| e.to_string())?;
    let session = ref_client::ARCPClient::new(transport)
        .open()
        .map_err(|e| e.to_string())?
        .authenticate(
            Credentials {
                scheme: AuthScheme::Bearer,
                token: Some(crate::TOKEN.into()),
            },
            ClientIdentity {
                kind: "arcp-bench".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                fingerprint: None,
                principal: None,
            },
            Capabilities {
                streaming: Some(true),
                durable_jobs: Some(true),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(session))
}

/// One reference-client call: `invoke` (until `job.accepted`) then `join`.
pub(crate) async fn ref_call(
    session: &RefSession,
    tool: &str,
    args: Value,
) -> Result<Value, String> {
    let job = session
        .invoke(tool, args)
        .await
        .map_err(|e| e.to_string())?;
    job.join().await.map_err(|e| e.to_string())
}

/// Runs `call` in a closed loop on `c` tasks: `warmup`, then a measured
/// window of `window`. Counts the calls completed inside the window, their
/// latencies, and the CPU time of this process (and of `server_pid`) over it.
pub(crate) async fn closed_loop<F, Fut>(
    c: usize,
    warmup: Duration,
    window: Duration,
    server_pid: Option<u32>,
    call: F,
) -> Sample
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(c);
    for _ in 0..c {
        let (measuring, stop, errors, call) = (
            measuring.clone(),
            stop.clone(),
            errors.clone(),
            call.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(4096);
            while !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                let r = call().await;
                let ns = t0.elapsed().as_nanos() as u64;
                let counted = measuring.load(Ordering::Relaxed);
                match r {
                    Ok(()) if counted => lat.push(ns),
                    Ok(()) => {}
                    Err(_) => {
                        if counted {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            }
            lat
        }));
    }
    tokio::time::sleep(warmup).await;
    let (cpu0, srv0, t0) = (
        stats::self_cpu(),
        server_pid.map(stats::process_cpu).unwrap_or_default(),
        Instant::now(),
    );
    measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(window).await;
    measuring.store(false, Ordering::Relaxed);
    let (cpu1, srv1, secs) = (
        stats::self_cpu(),
        server_pid.map(stats::process_cpu).unwrap_or_default(),
        t0.elapsed().as_secs_f64(),
    );
    stop.store(true, Ordering::Relaxed);
    let mut lat_ns = Vec::new();
    for task in tasks {
        let abort = task.abort_handle();
        match tokio::time::timeout(Duration::from_secs(20), task).await {
            Ok(Ok(l)) => lat_ns.extend(l),
            _ => abort.abort(),
        }
    }
    lat_ns.sort_unstable();
    Sample {
        calls: lat_ns.len() as u64,
        errors: errors.load(Ordering::Relaxed),
        secs,
        lat_ns,
        client_cpu: cpu1.saturating_sub(cpu0),
        server_cpu: srv1.saturating_sub(srv0),
    }
}
