//! End-to-end tests of `ChaosProxy` in front of a tokio-tungstenite echo
//! server.

use std::net::SocketAddr;
use std::time::Duration;

use arcp_mock::{ChaosProxy, ChaosProxyBuilder, ChaosProxyHandle, KillReason};
use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{connect_async, MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

const STEP: Duration = Duration::from_secs(2);

/// A WebSocket server echoing every text/binary message.
struct EchoServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn echo_server() -> EchoServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if (msg.is_text() || msg.is_binary()) && ws.send(msg).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    EchoServer { addr, task }
}

async fn connect(proxy: &ChaosProxyHandle) -> Ws {
    timeout(STEP, connect_async(proxy.ws_url("/arcp")))
        .await
        .expect("handshake timed out")
        .expect("handshake failed")
        .0
}

/// Send `text` and wait for its echo; `false` once the connection is gone.
async fn round_trip(ws: &mut Ws, text: &str) -> bool {
    if ws.send(Message::text(text)).await.is_err() {
        return false;
    }
    match timeout(STEP, ws.next()).await {
        Ok(Some(Ok(msg))) => {
            assert_eq!(msg.to_text().unwrap(), text);
            true
        }
        Ok(_) => false,
        Err(_) => panic!("no echo and no close within {STEP:?}"),
    }
}

/// The stream ends (EOF or error) within `STEP`, without a close frame.
async fn assert_ends(ws: &mut Ws) {
    match timeout(STEP, ws.next()).await {
        Ok(None) | Ok(Some(Err(_))) => {}
        Ok(Some(Ok(msg))) => panic!("expected the stream to end, got {msg:?}"),
        Err(_) => panic!("stream still open after {STEP:?}"),
    }
}

/// Run `connections` sequential request/response sessions of up to `msgs`
/// messages through a proxy built from `builder`; return the kills as
/// `(connection, after_frames, reason)`.
async fn kill_trace(
    builder: ChaosProxyBuilder,
    connections: usize,
    msgs: usize,
) -> Vec<(u64, u64, KillReason)> {
    let proxy = builder.start().await.unwrap();
    for c in 0..connections {
        let mut ws = connect(&proxy).await;
        for i in 0..msgs {
            if !round_trip(&mut ws, &format!("c{c} m{i}")).await {
                break;
            }
        }
    }
    let report = proxy.report();
    assert_eq!(report.connections, connections as u64);
    report
        .kills
        .iter()
        .map(|k| (k.connection, k.after_frames, k.reason))
        .collect()
}

#[tokio::test]
async fn plain_forwarding() {
    let server = echo_server().await;
    let proxy = ChaosProxy::builder(server.addr).start().await.unwrap();
    assert!(proxy.ws_url("/x").starts_with("ws://127.0.0.1:"));
    assert_eq!(proxy.ws_url("x"), proxy.ws_url("/x"));

    let mut ws = connect(&proxy).await;
    for i in 0..20 {
        assert!(round_trip(&mut ws, &format!("hello {i}")).await);
    }
    // A large, fragmented-across-reads binary message.
    let big = vec![7u8; 200_000];
    ws.send(Message::binary(big.clone())).await.unwrap();
    let echo = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(echo.into_data().as_ref(), &big[..]);

    let report = proxy.report();
    assert_eq!(report.connections, 1);
    assert!(report.kills.is_empty());
    assert_eq!(report.frames_forwarded, 42);
    assert!(report.bytes_forwarded > 400_000);
}

#[tokio::test]
async fn frame_schedule_is_seeded() {
    let server = echo_server().await;
    let builder = |seed| {
        ChaosProxy::builder(server.addr)
            .seed(seed)
            .kill_every_frames(10)
    };
    let a = kill_trace(builder(1), 6, 20).await;
    let b = kill_trace(builder(1), 6, 20).await;
    let c = kill_trace(builder(2), 6, 20).await;

    assert_eq!(a.len(), 6, "every connection is killed: {a:?}");
    for (i, &(conn, after_frames, reason)) in a.iter().enumerate() {
        assert_eq!(conn, i as u64);
        assert_eq!(reason, KillReason::FrameSchedule);
        // Threshold t in [5, 15]; the t-th frame is dropped.
        assert!((4..=14).contains(&after_frames), "{a:?}");
    }
    assert_eq!(a, b, "same seed, same traffic => same kills");
    assert_ne!(a, c, "another seed => another schedule");
}

#[tokio::test]
async fn probability_is_seeded() {
    let server = echo_server().await;
    let builder = |seed| {
        ChaosProxy::builder(server.addr)
            .seed(seed)
            .kill_probability(0.05)
    };
    let a = kill_trace(builder(11), 6, 30).await;
    let b = kill_trace(builder(11), 6, 30).await;
    let c = kill_trace(builder(12), 6, 30).await;

    assert!(!a.is_empty());
    assert!(a.iter().all(|k| k.2 == KillReason::Probability));
    assert_eq!(a, b, "same seed, same traffic => same kills");
    assert_ne!(a, c, "another seed => other kills");
}

#[tokio::test]
async fn byte_schedule_spare_and_max_kills() {
    let server = echo_server().await;
    let builder = ChaosProxy::builder(server.addr)
        .seed(3)
        .kill_every_bytes(1_000)
        .spare_first_frames(4)
        .max_kills(2);
    let kills = kill_trace(builder.clone(), 4, 100).await;
    assert_eq!(kills, kill_trace(builder, 4, 100).await);
    // Only the first two connections die; the others are left alone.
    assert_eq!(kills.len(), 2, "{kills:?}");
    for (i, &(conn, after_frames, reason)) in kills.iter().enumerate() {
        assert_eq!(conn, i as u64);
        assert_eq!(reason, KillReason::ByteSchedule);
        assert!(after_frames >= 4);
    }
}

#[tokio::test]
async fn set_enabled_false_is_a_plain_proxy() {
    let server = echo_server().await;
    let proxy = ChaosProxy::builder(server.addr)
        .kill_every_frames(2)
        .start()
        .await
        .unwrap();
    proxy.set_enabled(false);
    let mut ws = connect(&proxy).await;
    for i in 0..10 {
        assert!(round_trip(&mut ws, &format!("m{i}")).await);
    }
    proxy.set_enabled(true);
    assert!(!round_trip(&mut ws, "dies").await);
    let kills = proxy.report().kills;
    assert_eq!(kills.len(), 1);
    assert_eq!(kills[0].after_frames, 20);
}

#[tokio::test]
async fn stall_black_holes_then_resumes() {
    let server = echo_server().await;
    let proxy = ChaosProxy::builder(server.addr).start().await.unwrap();
    let mut ws = connect(&proxy).await;
    assert!(round_trip(&mut ws, "before").await);

    proxy.stall(true);
    ws.send(Message::text("held")).await.unwrap();
    assert!(
        timeout(Duration::from_millis(300), ws.next())
            .await
            .is_err(),
        "nothing (not even a close) gets through while stalled"
    );
    // New connections are accepted but stalled too.
    let url = proxy.ws_url("/");
    let pending = tokio::spawn(async move { connect_async(url).await.map(|(ws, _)| ws) });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!pending.is_finished());

    proxy.stall(false);
    let echo = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(echo.to_text().unwrap(), "held");
    assert!(round_trip(&mut ws, "after").await);
    let mut late = timeout(STEP, pending).await.unwrap().unwrap().unwrap();
    assert!(round_trip(&mut late, "late").await);
    assert!(proxy.report().kills.is_empty());
}

#[tokio::test]
async fn kill_all_closes_live_connections() {
    let server = echo_server().await;
    let proxy = ChaosProxy::builder(server.addr).start().await.unwrap();
    let mut a = connect(&proxy).await;
    let mut b = connect(&proxy).await;
    assert!(round_trip(&mut a, "a").await);
    assert!(round_trip(&mut b, "b").await);

    proxy.kill_all();
    let report = proxy.report();
    assert_eq!(report.kills.len(), 2);
    for (i, kill) in report.kills.iter().enumerate() {
        assert_eq!(kill.connection, i as u64);
        assert_eq!(kill.reason, KillReason::Manual);
        assert_eq!(kill.after_frames, 2);
        assert!(kill.after_bytes > 0);
    }
    assert_ends(&mut a).await;
    assert_ends(&mut b).await;

    // The proxy itself keeps serving.
    let mut c = connect(&proxy).await;
    assert!(round_trip(&mut c, "c").await);
    assert_eq!(proxy.report().kills.len(), 2);
}

#[tokio::test]
async fn dropping_the_handle_shuts_down() {
    let server = echo_server().await;
    let proxy = ChaosProxy::builder(server.addr).start().await.unwrap();
    let addr = proxy.local_addr();
    let mut ws = connect(&proxy).await;
    assert!(round_trip(&mut ws, "alive").await);

    drop(proxy);
    assert_ends(&mut ws).await;
    // Shutdown is asynchronous: the listener closes as soon as the aborted
    // accept task is dropped.
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        if TcpStream::connect(addr).await.is_err() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "proxy still accepting after drop"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
