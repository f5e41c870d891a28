//! A runtime that floods pings and stops reading stalls the client's
//! writer: the frames waiting for it stay within the outbox bound, the
//! connection is dropped past it, and the call is re-driven with its key on
//! a new connection, where it ends truthfully, having run once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arcp_sdk::{Client, ConnectionEvent, DialectChoice};
use arcp_types::{Accepted, Dialect, Frame, JobResult, Message, Ping, Welcome};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message as Ws;

/// What the runtime saw: executions per key, and connections.
#[derive(Clone, Default)]
struct Seen {
    executions: Arc<Mutex<HashMap<String, u32>>>,
    connections: Arc<AtomicUsize>,
}

/// A runtime whose first connection accepts the call, then floods pings
/// without reading another frame; on later connections a known key gets
/// its stored result (a replay, not a second execution).
async fn flooding_runtime(seen: Seen) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/arcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let n = seen.connections.fetch_add(1, Ordering::SeqCst) + 1;
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(ws) = tokio_tungstenite::accept_async(socket).await else {
                    return;
                };
                let (mut sink, mut stream) = ws.split();
                while let Some(Ok(Ws::Text(text))) = stream.next().await {
                    let Ok(frame) = Dialect::V1_1.decode(text.as_str()) else {
                        continue;
                    };
                    let request = frame.envelope.id.clone();
                    let reply = |message: Message, job: Option<&str>| {
                        let mut f = Frame::new(message);
                        f.envelope.correlation_id = Some(request.clone());
                        f.envelope.job_id = job.map(str::to_owned);
                        Ws::text(Dialect::V1_1.encode(&f))
                    };
                    match frame.message {
                        Message::Open(_) => {
                            let welcome: Welcome = serde_json::from_value(json!({
                                "session_id": format!("sess_{n}"),
                                "runtime": {"name": "flooder", "version": "0"}
                            }))
                            .unwrap();
                            let _ = sink.send(reply(Message::Welcome(welcome), None)).await;
                        }
                        Message::Invoke(invoke) => {
                            let key = invoke.idempotency_key.clone().unwrap_or_default();
                            let first = {
                                let mut executions = seen.executions.lock().unwrap();
                                let count = executions.entry(key).or_default();
                                if *count == 0 {
                                    *count = 1;
                                }
                                n == 1
                            };
                            let job = "job_00000000000000000000000001";
                            let accepted = Accepted::new(job).with_request_id(request.clone());
                            let _ = sink
                                .send(reply(Message::Accepted(accepted), Some(job)))
                                .await;
                            if first {
                                // Never read again; ping as fast as the
                                // socket takes it.
                                let mut i = 0u64;
                                loop {
                                    i += 1;
                                    let ping = Frame::new(Message::Ping(Ping::new(format!("{i}"))));
                                    let text = Dialect::V1_1.encode(&ping);
                                    if sink.send(Ws::text(text)).await.is_err() {
                                        return;
                                    }
                                }
                            }
                            let result = JobResult::new(Some(invoke.arguments));
                            let _ = sink.send(reply(Message::Result(result), Some(job))).await;
                        }
                        _ => {}
                    }
                }
            });
        }
    });
    url
}

#[tokio::test]
async fn a_runtime_that_stops_reading_is_dropped_and_the_call_redriven() {
    let seen = Seen::default();
    let url = flooding_runtime(seen.clone()).await;
    let client = Client::builder(url)
        .dialect(DialectChoice::V1_1)
        // Only the outbox bound may end the stalled connection.
        .write_timeout(Duration::from_secs(120))
        .response_timeout(Duration::from_secs(120))
        .max_frame_size(64 << 10)
        .max_outbox_bytes(256 << 10)
        .connect()
        .await
        .unwrap();
    let mut events = client.events();
    let started = Instant::now();
    let out = client
        .invoke_tool("work", json!({"n": 1}))
        .deadline(Duration::from_secs(60))
        .send()
        .await
        .expect("the call ends on the second connection");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(out.value, json!({"n": 1}));
    assert!(seen.connections.load(Ordering::SeqCst) >= 2);
    let executions = seen.executions.lock().unwrap().clone();
    // The flooder runs a key once, as a keyed runtime does: what can go
    // wrong here is a second key for the one call.
    assert_eq!(
        executions.len(),
        1,
        "one key, on every connection: {executions:?}"
    );
    let mut reasons = Vec::new();
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(50), events.next()).await
    {
        if let ConnectionEvent::Disconnected { reason, .. } = event {
            reasons.push(reason);
        }
    }
    assert!(
        reasons.iter().any(|r| r.contains("stopped reading")),
        "{reasons:?}"
    );
}

/// A runtime whose first connection completes the handshake, then never
/// reads nor sends again (its receive buffer kept small); later connections
/// run each key once (a repeated key gets the stored result, as a runtime
/// deduplicating keys answers), counting executions per key.
async fn deaf_runtime(seen: Seen) -> String {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(64).unwrap();
    let url = format!("ws://{}/arcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let n = seen.connections.fetch_add(1, Ordering::SeqCst) + 1;
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(ws) = tokio_tungstenite::accept_async(socket).await else {
                    return;
                };
                let (mut sink, mut stream) = ws.split();
                while let Some(Ok(Ws::Text(text))) = stream.next().await {
                    let Ok(frame) = Dialect::V1_1.decode(text.as_str()) else {
                        continue;
                    };
                    let request = frame.envelope.id.clone();
                    let reply = |message: Message, job: Option<&str>| {
                        let mut f = Frame::new(message);
                        f.envelope.correlation_id = Some(request.clone());
                        f.envelope.job_id = job.map(str::to_owned);
                        Ws::text(Dialect::V1_1.encode(&f))
                    };
                    match frame.message {
                        Message::Open(_) => {
                            let welcome: Welcome = serde_json::from_value(json!({
                                "session_id": format!("sess_{n}"),
                                "runtime": {"name": "deaf", "version": "0"}
                            }))
                            .unwrap();
                            let _ = sink.send(reply(Message::Welcome(welcome), None)).await;
                            if n == 1 {
                                // Never read nor write again; hold the
                                // socket open.
                                std::future::pending::<()>().await;
                            }
                        }
                        Message::Invoke(invoke) => {
                            let key = invoke.idempotency_key.clone().unwrap_or_default();
                            {
                                let mut executions = seen.executions.lock().unwrap();
                                let count = executions.entry(key.clone()).or_default();
                                if *count == 0 {
                                    *count = 1;
                                }
                            }
                            let job = format!("job_{key}");
                            let accepted =
                                Accepted::new(job.clone()).with_request_id(request.clone());
                            let _ = sink
                                .send(reply(Message::Accepted(accepted), Some(&job)))
                                .await;
                            let result = JobResult::new(Some(json!({"n": invoke.arguments["n"]})));
                            let _ = sink.send(reply(Message::Result(result), Some(&job))).await;
                        }
                        _ => {}
                    }
                }
            });
        }
    });
    url
}

/// The application keeps submitting while the runtime reads nothing and
/// sends nothing (no inbound frame runs the outbox check): the submits
/// wait behind the outbox bound instead of growing it (the bound itself:
/// `ws::core::tests::submits_behind_a_stalled_writer_stay_within_the_outbox_bound`),
/// the stalled write ends at the write timeout, and every call is
/// re-driven with its key on a new connection and runs once.
#[tokio::test]
async fn submits_to_a_runtime_that_stops_reading_wait_and_are_redriven() {
    let seen = Seen::default();
    let url = deaf_runtime(seen.clone()).await;
    let client = Client::builder(url)
        .dialect(DialectChoice::V1_1)
        .write_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(120))
        .heartbeat_interval(Duration::from_secs(120))
        .max_frame_size(64 << 10)
        .max_outbox_bytes(256 << 10)
        .connect()
        .await
        .unwrap();
    let mut events = client.events();
    let started = Instant::now();
    let padding = "x".repeat(48 << 10);
    let calls: Vec<_> = (0..200)
        .map(|n| {
            client
                .invoke_tool("work", json!({"n": n, "padding": padding}))
                .deadline(Duration::from_secs(60))
                .send()
        })
        .collect();
    let outs = tokio::time::timeout(
        Duration::from_secs(30),
        futures_util::future::join_all(calls),
    )
    .await
    .expect("the calls end well before their deadline: the stalled link is dropped");
    assert!(started.elapsed() < Duration::from_secs(30));
    for (n, out) in outs.into_iter().enumerate() {
        let out = out.unwrap_or_else(|e| panic!("call {n}: {e:?}"));
        assert_eq!(out.value, json!({"n": n}));
    }
    assert!(seen.connections.load(Ordering::SeqCst) >= 2);
    let executions = seen.executions.lock().unwrap().clone();
    assert_eq!(executions.len(), 200, "{}", executions.len());
    let mut reasons = Vec::new();
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(50), events.next()).await
    {
        if let ConnectionEvent::Disconnected { reason, .. } = event {
            reasons.push(reason);
        }
    }
    assert!(
        reasons.iter().any(|r| r.contains("write timeout")),
        "{reasons:?}"
    );
    assert!(
        !reasons.iter().any(|r| r.contains("stopped reading")),
        "a healthy connection was dropped for a burst of submits: {reasons:?}"
    );
}
