//! The memory benchmark, run in a child process whose allocator counts from
//! the first instruction of `main` (see `alloc.rs`): bytes per call in flight,
//! and growth per completed call.
//!
//! Order: warm-up calls (fills every bounded cache, e.g. our 1024-entry
//! outcome cache), then `calls` more calls at c=64 for the growth and
//! allocation rates, then `in_flight` calls of the server's `hold` tool,
//! measured once every one of them is accepted, then released.
//!
//! Over HTTP each call in flight holds a connection of its own (HTTP/1.1
//! has one request at a time per connection): our client is measured
//! there next to plain reqwest doing the same calls.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arcp_sdk::Dialect;
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use serde_json::json;

use crate::alloc::{self, Counters};
use crate::clients;

pub(crate) struct Args {
    pub client: String,
    pub url: String,
    pub dialect: Dialect,
    pub in_flight: usize,
    pub warm: usize,
    pub calls: usize,
}

/// `n` calls, `c` at a time.
async fn run_n<F, Fut>(n: usize, c: usize, call: F) -> Result<(), String>
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..c {
        let (next, call) = (next.clone(), call.clone());
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < n {
                call().await?;
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

async fn settle() {
    // Let spawned tasks finish dropping what they hold.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

pub(crate) fn run(args: Args) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let report = rt.block_on(async move {
        match args.client.as_str() {
            "ours" => ours(&args).await,
            "ref" => reference(&args).await,
            "reqwest" => reqwest(&args).await,
            other => Err(format!("unknown client {other}")),
        }
    })?;
    println!("MEM {report}");
    Ok(())
}

struct Phases {
    growth: (Counters, u64, Counters, u64),
    in_flight: (Counters, u64, Counters, u64, Counters),
    hold_secs: f64,
}

fn report(args: &Args, p: Phases) -> serde_json::Value {
    let (g0, r0, g1, r1) = p.growth;
    let (h0, hr0, h1, hr1, h2) = p.in_flight;
    let calls = args.calls.max(1) as f64;
    let n = args.in_flight.max(1) as f64;
    json!({
        "client": args.client,
        "dialect": args.dialect.to_string(),
        "calls": args.calls,
        "in_flight": args.in_flight,
        "growth_alloc_b_per_call": (g1.live - g0.live) as f64 / calls,
        "growth_rss_b_per_call": (r1 as f64 - r0 as f64) / calls,
        "allocs_per_call": (g1.allocs - g0.allocs) as f64 / calls,
        "alloc_bytes_per_call": (g1.allocated - g0.allocated) as f64 / calls,
        "in_flight_alloc_b_per_call": (h1.live - h0.live) as f64 / n,
        "in_flight_rss_b_per_call": (hr1 as f64 - hr0 as f64) / n,
        "residual_after_release_b_per_call": (h2.live - h0.live) as f64 / n,
        "hold_secs": p.hold_secs,
    })
}

async fn ours(args: &Args) -> Result<serde_json::Value, String> {
    let client = clients::ours(&args.url, args.dialect, args.in_flight + 64).await?;
    let echo = {
        let client = client.clone();
        move || {
            let client = client.clone();
            async move {
                client
                    .invoke_tool("echo", clients::echo_args())
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
        }
    };
    run_n(args.warm, 64, echo.clone()).await?;
    settle().await;
    let (g0, r0) = (alloc::counters(), alloc::rss());
    run_n(args.calls, 64, echo.clone()).await?;
    settle().await;
    let (g1, r1) = (alloc::counters(), alloc::rss());

    let (h0, hr0) = (alloc::counters(), alloc::rss());
    let started = Instant::now();
    let mut calls = FuturesUnordered::new();
    let mut handles = Vec::with_capacity(args.in_flight);
    for _ in 0..args.in_flight {
        let call = client.invoke_tool("hold", clients::echo_args()).send();
        handles.push(call.handle());
        calls.push(call);
    }
    // Drive the calls until the runtime accepted every one of them.
    loop {
        tokio::select! {
            done = calls.next() => return Err(format!("a held call ended early: {done:?}")),
            _ = tokio::time::sleep(Duration::from_millis(5)) => {
                if handles.iter().all(|h| h.job_id().is_some()) { break }
            }
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err("held calls were not all accepted within 60 s".into());
        }
    }
    let hold_secs = started.elapsed().as_secs_f64();
    drop(handles); // the harness's own bookkeeping, not the client's
    let (h1, hr1) = (alloc::counters(), alloc::rss());
    let release = {
        let client = client.clone();
        tokio::spawn(async move { client.invoke_tool("release", json!({})).await })
    };
    while let Some(r) = calls.next().await {
        r.map_err(|e| e.to_string())?;
    }
    release
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    drop(calls);
    settle().await;
    let h2 = alloc::counters();
    Ok(report(
        args,
        Phases {
            growth: (g0, r0, g1, r1),
            in_flight: (h0, hr0, h1, hr1, h2),
            hold_secs,
        },
    ))
}

async fn reference(args: &Args) -> Result<serde_json::Value, String> {
    let session = clients::reference(&args.url).await?;
    let echo = {
        let session = session.clone();
        move || {
            let session = session.clone();
            async move {
                clients::ref_call(&session, "echo", clients::echo_args())
                    .await
                    .map(drop)
            }
        }
    };
    run_n(args.warm, 64, echo.clone()).await?;
    settle().await;
    let (g0, r0) = (alloc::counters(), alloc::rss());
    run_n(args.calls, 64, echo.clone()).await?;
    settle().await;
    let (g1, r1) = (alloc::counters(), alloc::rss());

    let (h0, hr0) = (alloc::counters(), alloc::rss());
    let started = Instant::now();
    let accepted = Arc::new(AtomicUsize::new(0));
    let mut calls = FuturesUnordered::new();
    for _ in 0..args.in_flight {
        let (session, accepted) = (session.clone(), accepted.clone());
        calls.push(async move {
            let job = session
                .invoke("hold", clients::echo_args())
                .await
                .map_err(|e| e.to_string())?;
            accepted.fetch_add(1, Ordering::Relaxed);
            job.join().await.map_err(|e| e.to_string())
        });
    }
    loop {
        tokio::select! {
            done = calls.next() => return Err(format!("a held call ended early: {done:?}")),
            _ = tokio::time::sleep(Duration::from_millis(5)) => {
                if accepted.load(Ordering::Relaxed) == args.in_flight { break }
            }
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err("held calls were not all accepted within 60 s".into());
        }
    }
    let hold_secs = started.elapsed().as_secs_f64();
    let (h1, hr1) = (alloc::counters(), alloc::rss());
    let release = {
        let session = session.clone();
        tokio::spawn(async move { clients::ref_call(&session, "release", json!({})).await })
    };
    while let Some(r) = calls.next().await {
        r?;
    }
    release.await.map_err(|e| e.to_string())??;
    drop(calls);
    settle().await;
    let h2 = alloc::counters();
    Ok(report(
        args,
        Phases {
            growth: (g0, r0, g1, r1),
            in_flight: (h0, hr0, h1, hr1, h2),
            hold_secs,
        },
    ))
}

/// Plain reqwest over the HTTP binding (`http_raw.rs`): the same phases.
async fn reqwest(args: &Args) -> Result<serde_json::Value, String> {
    let echo = crate::http_raw::RawHttp::new(&args.url, "echo")?;
    let call = {
        let echo = echo.clone();
        move || {
            let echo = echo.clone();
            async move { echo.call().await }
        }
    };
    run_n(args.warm, 64, call.clone()).await?;
    settle().await;
    let (g0, r0) = (alloc::counters(), alloc::rss());
    run_n(args.calls, 64, call.clone()).await?;
    settle().await;
    let (g1, r1) = (alloc::counters(), alloc::rss());

    let hold = crate::http_raw::RawHttp::new(&args.url, "hold")?;
    let (h0, hr0) = (alloc::counters(), alloc::rss());
    let started = Instant::now();
    // A held call is accepted once its response's head (written with
    // `job.accepted`) is in.
    let mut calls = FuturesUnordered::new();
    for _ in 0..args.in_flight {
        let hold = hold.clone();
        calls.push(tokio::spawn(async move { hold.send().await }));
    }
    let mut responses = Vec::with_capacity(args.in_flight);
    while let Some(r) = calls.next().await {
        responses.push(r.map_err(|e| e.to_string())??);
        if started.elapsed() > Duration::from_secs(60) {
            return Err("held calls were not all accepted within 60 s".into());
        }
    }
    drop(calls);
    let hold_secs = started.elapsed().as_secs_f64();
    let (h1, hr1) = (alloc::counters(), alloc::rss());
    let release = crate::http_raw::RawHttp::new(&args.url, "release")?;
    release.call().await?;
    let mut bodies = FuturesUnordered::new();
    for response in responses {
        bodies.push(crate::http_raw::RawHttp::finish(response));
    }
    while let Some(r) = bodies.next().await {
        r?;
    }
    drop(bodies);
    settle().await;
    // Measured with the clients alive, as ours is: their pools keep the
    // connections the held calls opened, idle, as ours does.
    let h2 = alloc::counters();
    drop((hold, release));
    Ok(report(
        args,
        Phases {
            growth: (g0, r0, g1, r1),
            in_flight: (h0, hr0, h1, hr1, h2),
            hold_secs,
        },
    ))
}
