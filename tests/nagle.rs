//! A runtime that writes each reply frame as soon as it has it, with
//! Nagle's algorithm on, as `arcp-runtime` 2.x does: its second frame waits
//! in the runtime's kernel until the client acknowledges the first, and a
//! client that left that ACK to the kernel's delayed-ACK timer would wait
//! about 40 ms per call. The client acknowledges at once while a call still
//! waits for the runtime, and leaves the ACK to its next request otherwise.

use std::time::{Duration, Instant};

use arcp_sdk::Client;
use arcp_types::{Accepted, Dialect, Frame, JobEvent, JobResult, Message, Welcome};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message as Ws;

/// How the runtime writes each reply frame.
#[derive(Clone, Copy)]
enum Writes {
    /// Each frame whole, flushed on its own.
    Frames,
    /// Each frame in two writes: its first bytes (the WebSocket header and
    /// a little more), then the rest, as a server that writes a frame's
    /// header and body separately does.
    SplitFrames,
}

/// A text frame from a server (unmasked), as bytes.
fn text_frame(text: &str) -> Vec<u8> {
    let mut frame = vec![0x81];
    match u16::try_from(text.len()) {
        Ok(len) if len < 126 => frame.push(len as u8),
        Ok(len) => {
            frame.push(126);
            frame.extend_from_slice(&len.to_be_bytes());
        }
        Err(_) => panic!("a test frame under 64 KiB"),
    }
    frame.extend_from_slice(text.as_bytes());
    frame
}

/// Serves sessions of an unknown runtime (so the client assumes nothing of
/// how it writes) whose socket keeps Nagle on: each submit is answered with
/// `job.accepted`, a progress event and the result, each sent and flushed
/// on its own; a submit of the `hold` tool only with `job.accepted` (the
/// call stays in flight), one of the `mute` tool not at all.
async fn runtime_writing_in_pieces(dialect: Dialect, writes: Writes) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/arcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            assert!(!socket.nodelay().unwrap(), "the runtime keeps Nagle on");
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(socket).await else {
                    return;
                };
                let mut jobs = 0u32;
                while let Some(Ok(Ws::Text(text))) = ws.next().await {
                    let Ok(frame) = dialect.decode(text.as_str()) else {
                        continue;
                    };
                    let replies = match frame.message {
                        Message::Open(_) => {
                            let welcome: Welcome = serde_json::from_value(json!({
                                "session_id": "sess_1",
                                "runtime": {"name": "pieces", "version": "0"}
                            }))
                            .unwrap();
                            let mut f = Frame::new(Message::Welcome(welcome));
                            f.envelope.correlation_id = Some(frame.envelope.id.clone());
                            vec![f]
                        }
                        Message::Invoke(invoke) => {
                            jobs += 1;
                            let job = format!("job_{jobs:026}");
                            let of_job = |message: Message, seq: Option<u64>| {
                                let mut f = Frame::new(message);
                                f.envelope.job_id = Some(job.clone());
                                f.envelope.event_seq = seq;
                                f
                            };
                            let accepted = of_job(
                                Message::Accepted(
                                    Accepted::new(&job).with_request_id(frame.envelope.id),
                                ),
                                None,
                            );
                            if invoke.tool == "mute" {
                                Vec::new()
                            } else if invoke.tool == "hold" {
                                vec![accepted]
                            } else {
                                vec![
                                    accepted,
                                    of_job(
                                        Message::Event(JobEvent::new("progress", json!({}))),
                                        Some(1),
                                    ),
                                    of_job(
                                        Message::Result(JobResult::new(Some(invoke.arguments))),
                                        Some(2),
                                    ),
                                ]
                            }
                        }
                        _ => Vec::new(),
                    };
                    for reply in replies {
                        let text = dialect.encode(&reply);
                        let sent = match writes {
                            Writes::Frames => ws.send(Ws::text(text)).await.is_ok(),
                            Writes::SplitFrames => {
                                let frame = text_frame(&text);
                                let socket = ws.get_mut();
                                socket.write_all(&frame[..6]).await.is_ok()
                                    && socket.write_all(&frame[6..]).await.is_ok()
                            }
                        };
                        if !sent {
                            return;
                        }
                    }
                }
            });
        }
    });
    url
}

/// A client connected to a runtime that writes its replies as `writes` says.
async fn client_of_runtime_writing_in_pieces(dialect: Dialect, writes: Writes) -> Client {
    let url = runtime_writing_in_pieces(dialect, writes).await;
    Client::builder(url)
        .dialect(dialect)
        .connect()
        .await
        .expect("connect")
}

/// The median of sequential calls' latencies, after a warm-up long enough
/// for the kernel's quick-ACK start of a connection to end.
async fn median_call_latency(dialect: Dialect, writes: Writes) -> Duration {
    let client = client_of_runtime_writing_in_pieces(dialect, writes).await;
    let mut latencies = Vec::new();
    for i in 0..60u32 {
        let started = Instant::now();
        let out = client
            .invoke_tool("echo", json!({ "n": i }))
            .deadline(Duration::from_secs(5))
            .send()
            .await
            .expect("the call succeeds");
        assert_eq!(out.value, json!({ "n": i }));
        if i >= 20 {
            latencies.push(started.elapsed());
        }
    }
    client.close().await;
    latencies.sort();
    latencies[latencies.len() / 2]
}

#[tokio::test]
async fn replies_written_in_pieces_wait_for_no_delayed_ack_v1_1() {
    let median = median_call_latency(Dialect::V1_1, Writes::Frames).await;
    // A delayed ACK costs at least 40 ms; a call here takes well under 1 ms.
    assert!(median < Duration::from_millis(20), "median {median:?}");
}

#[tokio::test]
async fn replies_written_in_pieces_wait_for_no_delayed_ack_legacy() {
    let median = median_call_latency(Dialect::Legacy, Writes::Frames).await;
    assert!(median < Duration::from_millis(20), "median {median:?}");
}

/// A frame's first piece completes no message, so the driver's re-arm
/// after reading messages never runs for it, and the rest would wait out a
/// delayed ACK (about 44 ms a call). The reader notices a read that took
/// bytes from the socket yet completed no message, below tungstenite, and
/// asks for the ACK at once. Neither published runtime writes a frame in
/// pieces (docs/compatibility.md, TCP_NODELAY).
#[tokio::test]
async fn frames_written_in_two_pieces_wait_for_no_delayed_ack() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let median = median_call_latency(dialect, Writes::SplitFrames).await;
        assert!(
            median < Duration::from_millis(20),
            "{dialect}: median {median:?}"
        );
    }
}

/// The median time for `c` calls started together to all end, over waves
/// in which nobody calls again until the whole wave has ended: a caller
/// freed by its outcome sends no request that could carry the ACK the
/// others' replies wait for.
async fn median_wave(dialect: Dialect, c: usize) -> Duration {
    let client = client_of_runtime_writing_in_pieces(dialect, Writes::Frames).await;
    let mut waves = Vec::new();
    for wave in 0..40u32 {
        let started = Instant::now();
        let calls = (0..c).map(|i| {
            std::future::IntoFuture::into_future(
                client.invoke_tool("echo", json!({ "wave": wave, "i": i })),
            )
        });
        for out in futures_util::future::join_all(calls).await {
            out.expect("the call succeeds");
        }
        if wave >= 10 {
            waves.push(started.elapsed());
        }
    }
    client.close().await;
    waves.sort();
    waves[waves.len() / 2]
}

/// The median latency of `c` callers each calling again as soon as its
/// call ends (a closed loop: requests carry the ACKs).
async fn median_closed_loop(dialect: Dialect, c: usize) -> Duration {
    let client = client_of_runtime_writing_in_pieces(dialect, Writes::Frames).await;
    let mut tasks = Vec::new();
    for caller in 0..c {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            for i in 0..60u32 {
                let started = Instant::now();
                client
                    .invoke_tool("echo", json!({ "caller": caller, "i": i }))
                    .await
                    .expect("the call succeeds");
                if i >= 20 {
                    latencies.push(started.elapsed());
                }
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    client.close().await;
    latencies.sort();
    latencies[latencies.len() / 2]
}

/// Calls started together, none started again until all have ended: the
/// callers freed first send nothing, so the ACK the rest wait for goes out
/// on its own after a short grace, not after the kernel's 40 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_of_calls_waits_for_no_delayed_ack() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        for c in [2, 4, 16] {
            let median = median_wave(dialect, c).await;
            assert!(
                median < Duration::from_millis(20),
                "{dialect}, {c} calls: median wave {median:?}"
            );
        }
    }
}

/// Callers in a closed loop at 4 and 16 in flight: their requests carry
/// most ACKs, and no call waits out a delayed ACK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_loop_waits_for_no_delayed_ack() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        for c in [4, 16] {
            let median = median_closed_loop(dialect, c).await;
            assert!(
                median < Duration::from_millis(20),
                "{dialect}, {c} in flight: median {median:?}"
            );
        }
    }
}

/// One call held in flight (accepted, no result yet) beside calls made one
/// after another: each of these reads its `job.accepted` while two calls
/// wait and no caller was freed, so no request is coming to carry the ACK
/// and the runtime holds the rest of the reply for it. Acknowledged in the
/// same turn, a call takes a few hundred microseconds; an ACK owed for a
/// fixed grace cost each call a tick of tokio's millisecond timer (1-2 ms).
///
/// An ACK that waits for the timer slows every call, the fastest among
/// them too: the fastest quarter of the calls is measured (a loaded test
/// machine slows many calls past the bound, not every one), in up to three
/// windows per dialect, the best counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_beside_a_held_one_waits_for_no_timer_tick() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mut quartiles = Vec::new();
        for _ in 0..3 {
            let quartile = first_quartile_call_beside_a_held_one(dialect).await;
            quartiles.push(quartile);
            if quartile < Duration::from_millis(1) {
                break;
            }
        }
        // An owed ACK's fixed grace alone was 1 ms.
        assert!(
            quartiles.iter().any(|q| *q < Duration::from_millis(1)),
            "{dialect}: first quartiles {quartiles:?}"
        );
    }
}

/// The median latency of calls made one after another beside a held call.
async fn first_quartile_call_beside_a_held_one(dialect: Dialect) -> Duration {
    let client = client_of_runtime_writing_in_pieces(dialect, Writes::Frames).await;
    let held = client
        .invoke_tool("hold", json!({}))
        .deadline(Duration::from_secs(30))
        .send();
    let held = tokio::spawn(std::future::IntoFuture::into_future(held));
    let mut latencies = Vec::new();
    for i in 0..60u32 {
        let started = Instant::now();
        let out = client
            .invoke_tool("echo", json!({ "n": i }))
            .deadline(Duration::from_secs(5))
            .send()
            .await
            .expect("the call succeeds");
        assert_eq!(out.value, json!({ "n": i }));
        if i >= 20 {
            latencies.push(started.elapsed());
        }
    }
    assert!(!held.is_finished(), "the held call is still in flight");
    client.close().await;
    let _ = held.await;
    latencies.sort();
    latencies[latencies.len() / 4]
}

/// Requests the runtime never answers look like a backlog it works
/// through, so the ACK of another call's `job.accepted` is held (1-2 ms on
/// tokio's timer for a few of them): the cost of that rule where it guesses
/// wrong, and it stays far below the kernel's 40 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_requests_hold_an_ack_for_the_grace_at_most() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let median = median_beside_unanswered(dialect, 8).await;
        assert!(
            median < Duration::from_millis(20),
            "{dialect}: median {median:?}"
        );
    }
}

/// The hold grows with the unanswered requests, but is bounded: beside
/// 200 of them (30 ms at the per-request rate) a call still waits 5 ms at
/// most for the rest of its reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_backlog_holds_an_ack_for_a_bounded_time() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let median = median_beside_unanswered(dialect, 200).await;
        assert!(
            median < Duration::from_millis(20),
            "{dialect}: median {median:?}"
        );
    }
}

/// The median latency of sequential calls made while `muted` calls wait
/// on requests the runtime never answers.
async fn median_beside_unanswered(dialect: Dialect, muted: usize) -> Duration {
    let client = client_of_runtime_writing_in_pieces(dialect, Writes::Frames).await;
    let muted: Vec<_> = (0..muted)
        .map(|i| {
            let call = client
                .invoke_tool("mute", json!({ "i": i }))
                .deadline(Duration::from_secs(30))
                .send();
            tokio::spawn(std::future::IntoFuture::into_future(call))
        })
        .collect();
    let mut latencies = Vec::new();
    for i in 0..40u32 {
        let started = Instant::now();
        client
            .invoke_tool("echo", json!({ "n": i }))
            .deadline(Duration::from_secs(5))
            .send()
            .await
            .expect("the call succeeds");
        if i >= 10 {
            latencies.push(started.elapsed());
        }
    }
    assert!(muted.iter().all(|m| !m.is_finished()), "still unanswered");
    client.close().await;
    latencies.sort();
    latencies[latencies.len() / 2]
}
