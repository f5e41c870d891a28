//! The listener, the connection tasks, and the [`MockRuntime`] handle.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arcp_types::{Dialect, Envelope};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{header, HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::WebSocketStream;

use crate::config::{Config, MockRuntimeBuilder};
use crate::engine::{Link, Out, Shared, OUTBOUND_CAPACITY};
use crate::fault::Fault;
use crate::verify::{ConnRecord, Expectation, JobRecord, VerifyError};

/// Largest WebSocket message the mock accepts (bounded memory per frame).
const MAX_MESSAGE_BYTES: usize = 16 << 20;
/// How long a server-initiated close waits for the client's close reply.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// An in-process ARCP runtime on a loopback WebSocket, for tests.
///
/// Start one with [`MockRuntime::builder`], point the code under test at
/// [`ws_url`](Self::ws_url), then assert on what happened: execution counts,
/// the frames the client sent, expectations. Dropping it shuts everything
/// down (listener, connections, running tools) and checks the expectations.
///
/// A complete round trip, with a raw WebSocket client and the `arcp-types`
/// codec standing in for the client under test: the first attempt loses its
/// connection right after `job.accepted`; the retry (same key, same payload,
/// fresh envelope id) gets the stored result replayed, and the tool ran once.
///
/// ```
/// use std::time::Duration;
///
/// use arcp_mock::{Fault, MockRuntime};
/// use arcp_types::{Auth, Dialect, Frame, Invoke, Message, Open, PeerInfo};
/// use futures_util::{SinkExt, StreamExt};
/// use serde_json::json;
/// use tokio_tungstenite::tungstenite::Message as Ws;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mock = MockRuntime::builder()
///     .dialect(Dialect::V1_1)
///     .tool("refund", |args, _ctx| async move { Ok(json!({"refunded": args["order"]})) })
///     .start()
///     .await?;
/// mock.expect_executions("refund", 1);
/// mock.inject(Fault::DropAfterAccepted);
///
/// let submit = Frame::new(Message::Invoke(Invoke {
///     tool: "refund".into(),
///     arguments: json!({"order": 4812}),
///     idempotency_key: Some("refund-4812".into()),
///     extra: Default::default(),
/// }));
/// let hello = Frame::new(Message::Open(Open {
///     client: PeerInfo::default(),
///     auth: Auth::none(),
///     capabilities: json!(null),
///     resume: None,
///     extra: Default::default(),
/// }));
/// let mut outcome = None;
/// while outcome.is_none() {
///     let (mut ws, _) = tokio_tungstenite::connect_async(mock.ws_url()).await?;
///     ws.send(Ws::text(Dialect::V1_1.encode(&hello))).await?;
///     let mut attempt = submit.clone();
///     attempt.envelope.id = arcp_types::new_message_id();
///     ws.send(Ws::text(Dialect::V1_1.encode(&attempt))).await?;
///     // Read until the result, the drop, or a short timeout (a replay of a
///     // job still running is `job.accepted` only: then try again).
///     let _ = tokio::time::timeout(Duration::from_millis(500), async {
///         while let Some(Ok(Ws::Text(text))) = ws.next().await {
///             if let Ok(Message::Result(r)) = Dialect::V1_1.decode(&text).map(|f| f.message) {
///                 outcome = r.result;
///                 return;
///             }
///         }
///     })
///     .await;
/// }
/// assert_eq!(outcome, Some(json!({"refunded": 4812})));
/// assert_eq!(mock.connections(), 2);
/// mock.verify(); // sent twice, executed once
/// # Ok(())
/// # }
/// ```
pub struct MockRuntime {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept: AbortHandle,
    http_addr: SocketAddr,
    http_accept: AbortHandle,
}

impl std::fmt::Debug for MockRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockRuntime")
            .field("addr", &self.addr)
            .field("dialect", &self.shared.cfg.dialect)
            .field("replay_policy", &self.shared.cfg.replay)
            .field("conflict_signal", &self.shared.cfg.conflict)
            .finish_non_exhaustive()
    }
}

impl MockRuntime {
    /// A builder with the defaults of the v1.1 reference runtime.
    pub fn builder() -> MockRuntimeBuilder {
        MockRuntimeBuilder::default()
    }

    pub(crate) async fn bind(addr: SocketAddr, config: Config) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        // The HTTP binding listens on a second ephemeral port of the same host.
        let http_listener = TcpListener::bind(SocketAddr::new(addr.ip(), 0)).await?;
        let http_addr = http_listener.local_addr()?;
        let shared = Arc::new(Shared::new(config));
        let accept = tokio::spawn(accept_loop(Arc::clone(&shared), listener)).abort_handle();
        let http_accept =
            tokio::spawn(crate::http::accept_loop(Arc::clone(&shared), http_listener))
                .abort_handle();
        Ok(MockRuntime {
            shared,
            addr,
            accept,
            http_addr,
            http_accept,
        })
    }

    /// `ws://127.0.0.1:PORT/arcp`. (Any path is served.)
    pub fn ws_url(&self) -> String {
        format!("ws://{}/arcp", self.addr)
    }

    /// The bound address.
    pub fn address(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/arcp`: the same runtime over the HTTP binding
    /// (`docs/http-binding.md`), on a second port. One `job.submit` per
    /// `POST`; 409 while the key's job runs, the stored terminal with
    /// `Arcp-Replayed: true` once it finished, 422 for the key with another
    /// intent. Tools, keys, execution counts, faults and [`received`](Self::received)
    /// are shared with the WebSocket side. (Any path is served.)
    pub fn http_url(&self) -> String {
        format!("http://{}/arcp", self.http_addr)
    }

    /// The HTTP binding's bound address.
    pub fn http_address(&self) -> SocketAddr {
        self.http_addr
    }

    /// Submits the HTTP binding has handled: each attempt of a call that got
    /// past HTTP parsing is one (malformed HTTP is not counted, nor are HTTP
    /// requests in [`connections`](Self::connections)).
    pub fn http_requests(&self) -> u64 {
        self.shared.lock().http_requests()
    }

    /// The dialect spoken.
    pub fn dialect(&self) -> Dialect {
        self.shared.cfg.dialect
    }

    /// How many times `tool` has been executed (idempotent replays do not
    /// execute).
    pub fn executions(&self, tool: &str) -> u64 {
        self.shared.lock().executions(tool)
    }

    /// How many executions had idempotency key `key` (any principal).
    pub fn executions_for_key(&self, key: &str) -> u64 {
        self.shared.lock().executions_for_key(key)
    }

    /// Executions of all tools together.
    pub fn total_executions(&self) -> u64 {
        self.shared.lock().total_executions()
    }

    /// Expects `tool` to have run exactly `times` times, checked by
    /// [`verify`](Self::verify) and on drop.
    pub fn expect_executions(&self, tool: &str, times: u64) {
        self.shared.lock().expectations.push(Expectation::Tool {
            tool: tool.to_owned(),
            times,
        });
    }

    /// Expects exactly `times` executions with idempotency key `key`.
    pub fn expect_executions_for_key(&self, key: &str, times: u64) {
        self.shared.lock().expectations.push(Expectation::Key {
            key: key.to_owned(),
            times,
        });
    }

    /// Expects exactly `times` executions of all tools together.
    pub fn expect_total_executions(&self, times: u64) {
        self.shared
            .lock()
            .expectations
            .push(Expectation::Total { times });
    }

    /// Checks the expectations.
    ///
    /// # Errors
    ///
    /// A [`VerifyError`] listing every unmet expectation, expected vs actual.
    pub fn try_verify(&self) -> Result<(), VerifyError> {
        self.shared.lock().verify()
    }

    /// Checks the expectations.
    ///
    /// # Panics
    ///
    /// With a readable list of every unmet expectation, expected vs actual.
    pub fn verify(&self) {
        if let Err(e) = self.try_verify() {
            panic!("{e}");
        }
    }

    /// Queues a one-shot fault (FIFO). [`Fault::BlackHole`] and
    /// [`Fault::Recover`] take effect at once.
    pub fn inject(&self, fault: Fault) {
        match fault {
            Fault::BlackHole => self.shared.set_blackhole(true),
            Fault::Recover => self.shared.set_blackhole(false),
            fault => self.shared.lock().faults.push(fault),
        }
    }

    /// Applies a fault to every matching event until
    /// [`clear_faults`](Self::clear_faults).
    pub fn inject_always(&self, fault: Fault) {
        match fault {
            Fault::BlackHole => self.shared.set_blackhole(true),
            Fault::Recover => self.shared.set_blackhole(false),
            fault => self.shared.lock().faults.push_always(fault),
        }
    }

    /// Removes every queued and standing fault and ends a black hole.
    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
        self.shared.set_blackhole(false);
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.counts().0
    }

    /// Connections currently open.
    pub fn live_connections(&self) -> u64 {
        self.shared.counts().1
    }

    /// Drops every open connection now, abruptly (no close frame). Sessions
    /// and jobs survive.
    pub fn kill_connections(&self) {
        self.shared.kill_all();
    }

    /// Every envelope clients sent, oldest first (the last 10 000).
    pub fn received(&self) -> Vec<Envelope> {
        self.shared.lock().received()
    }

    /// Ground truth about every job, oldest first: its key, tool,
    /// arguments and principal, how many times its tool really ran, its
    /// status, and whether its terminal was ever delivered. Queryable during
    /// and after a run. Finished jobs are kept up to the last 10 000.
    ///
    /// To check that a key bound to another intent never ran that intent,
    /// look up the key's job here: its `arguments` are the first
    /// submission's.
    pub fn jobs(&self) -> Vec<JobRecord> {
        self.shared.lock().jobs()
    }

    /// Executions per idempotency key (any principal), for every key seen
    /// (up to 100 000 distinct keys).
    pub fn executions_by_key(&self) -> HashMap<String, u64> {
        self.shared.lock().executions_by_key()
    }

    /// What each connection received and sent, in accept order: WebSocket
    /// connections and HTTP binding requests. Bounded: the last 10 000
    /// envelopes per connection and direction, the last 1 024 connections,
    /// and 200 000 envelopes in all (the oldest connections are forgotten
    /// first).
    pub fn connection_log(&self) -> Vec<ConnRecord> {
        self.shared.lock().connection_log()
    }
}

impl Drop for MockRuntime {
    fn drop(&mut self) {
        self.accept.abort();
        self.http_accept.abort();
        self.shared.shutdown();
        if !std::thread::panicking() {
            if let Err(e) = self.try_verify() {
                panic!("{e}");
            }
        }
    }
}

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                let (tx, rx) = mpsc::channel(OUTBOUND_CAPACITY);
                let link = Arc::new(Link::new());
                let id = shared.register(tx, Arc::clone(&link));
                let task = tokio::spawn(serve(Arc::clone(&shared), id, stream, rx, link));
                shared.set_abort(id, task.abort_handle());
            }
            // Out of file descriptors and the like: back off, keep serving.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Unregisters a connection however its task ends (including abort).
struct Registration {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.shared.unregister(self.id);
    }
}

type Sink = SplitSink<WebSocketStream<TcpStream>, WsMessage>;
type Source = SplitStream<WebSocketStream<TcpStream>>;

// tungstenite's upgrade callback returns its own (large) `ErrorResponse`.
#[allow(clippy::result_large_err)]
async fn serve(
    shared: Arc<Shared>,
    id: u64,
    stream: TcpStream,
    mut rx: mpsc::Receiver<Out>,
    link: Arc<Link>,
) {
    let _registration = Registration {
        shared: Arc::clone(&shared),
        id,
    };
    let limit = shared
        .cfg
        .max_inbound_frame
        .map_or(MAX_MESSAGE_BYTES, |max| {
            max.saturating_add(1).max(MAX_MESSAGE_BYTES)
        });
    let config = WebSocketConfig::default()
        .max_message_size(Some(limit))
        .max_frame_size(Some(limit));
    let callback = |_request: &Request, response: Response| match shared.upgrade_refusal() {
        None => Ok(response),
        Some((status, retry_after)) => Err(refusal_response(status, retry_after)),
    };
    let Ok(ws) =
        tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(config)).await
    else {
        return;
    };
    link.touch();
    let (sink, source) = ws.split();
    tokio::select! {
        () = writer(&shared, id, sink, &mut rx) => {}
        () = reader(&shared, id, source, &link) => {}
        () = heartbeat(&shared, id, &link) => {}
    }
    // Returning drops both halves: the TCP connection closes with no close
    // frame unless the writer sent one.
}

async fn writer(shared: &Shared, id: u64, mut sink: Sink, rx: &mut mpsc::Receiver<Out>) {
    while let Some(out) = rx.recv().await {
        let (frame, stray) = match out {
            Out::Frame(frame) => (frame, false),
            Out::Stray(frame) => (frame, true),
            Out::Close(code) => {
                let close = CloseFrame {
                    code: CloseCode::from(code),
                    reason: "".into(),
                };
                let _ = sink.send(WsMessage::Close(Some(close))).await;
                // Give the client time to answer; the reader ends the
                // connection when it does.
                tokio::time::sleep(CLOSE_GRACE).await;
                return;
            }
            Out::Kill => return,
        };
        if shared.blackholed() {
            continue;
        }
        let action = shared.outbound_action(id);
        if let Some(delay) = action.delay {
            tokio::time::sleep(delay).await;
        }
        if action.drop_before {
            return;
        }
        let envelope = shared.cfg.dialect.to_envelope(&frame);
        let text = serde_json::to_string(&envelope).unwrap_or_default();
        if sink.send(WsMessage::text(text)).await.is_err() {
            return;
        }
        shared.written(id, envelope, &frame, stray);
        if action.drop_after {
            return;
        }
    }
}

async fn reader(shared: &Arc<Shared>, id: u64, mut source: Source, link: &Link) {
    let mut closing = false;
    while let Some(message) = source.next().await {
        let Ok(message) = message else {
            return;
        };
        link.touch();
        if closing {
            // Only the close handshake is left: read on, handle nothing.
            continue;
        }
        if shared
            .cfg
            .max_inbound_frame
            .is_some_and(|limit| message.len() > limit)
        {
            // 1009: message too big. It is not processed, nor is anything
            // after it.
            shared.close_conn_with(id, 1009);
            closing = true;
            continue;
        }
        match message {
            WsMessage::Text(text) => shared.handle_text(id, text.as_str()),
            WsMessage::Binary(bytes) => match std::str::from_utf8(&bytes) {
                Ok(text) => shared.handle_text(id, text),
                Err(_) => shared.handle_text(id, "\u{0}"),
            },
            // The next read flushes tungstenite's close reply; the stream then
            // ends.
            WsMessage::Close(_) | WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_) => {
            }
        }
    }
}

/// The response that refuses an upgrade ([`Fault::RefuseUpgrade`]).
fn refusal_response(status: u16, retry_after: Option<Duration>) -> ErrorResponse {
    let status = StatusCode::from_u16(status)
        .ok()
        .filter(|s| s.is_client_error() || s.is_server_error())
        .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let mut response = ErrorResponse::new(None);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    if let Some(after) = retry_after {
        let secs = after.as_secs() + u64::from(after.subsec_nanos() > 0);
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if status == StatusCode::UNAUTHORIZED {
        headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Runtime heartbeats (v1.1, once negotiated): a ping every interval; after
/// two intervals without any inbound frame, close (code 1000), as Python does.
async fn heartbeat(shared: &Shared, id: u64, link: &Link) {
    let mut negotiated = link.heartbeat.subscribe();
    let interval = loop {
        if let Some(interval) = *negotiated.borrow_and_update() {
            break interval;
        }
        if negotiated.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let mut last_ping = Instant::now();
    loop {
        if shared.blackholed() {
            tokio::time::sleep(interval / 4).await;
            last_ping = Instant::now();
            continue;
        }
        let now = Instant::now();
        let deadline = link.last_inbound() + interval * 2;
        if now >= deadline {
            shared.close_conn(id);
            std::future::pending::<()>().await;
        }
        let next_ping = last_ping + interval;
        if now >= next_ping {
            shared.send_ping(id);
            last_ping = now;
            continue;
        }
        tokio::time::sleep_until(deadline.min(next_ping).into()).await;
    }
}
