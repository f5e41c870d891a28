//! The WebSocket transport: the accept loop, and per connection the
//! upgrade (or its refusal), a reader, a writer and the runtime heartbeat.
//! What to answer is the engine's; this module only moves frames.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{header, HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::WebSocketStream;

use crate::engine::{Engine, Link, Out, OUTBOUND_CAPACITY};

/// Largest WebSocket message the mock accepts (bounded memory per frame).
const MAX_MESSAGE_BYTES: usize = 16 << 20;
/// How long a server-initiated close waits for the client's close reply.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Accepts WebSocket connections until aborted.
pub(crate) async fn accept_loop(engine: Arc<Engine>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                let (tx, rx) = mpsc::channel(OUTBOUND_CAPACITY);
                let link = Arc::new(Link::new());
                let id = engine.register(tx, Arc::clone(&link));
                let task = tokio::spawn(serve(Arc::clone(&engine), id, stream, rx, link));
                engine.set_abort(id, task.abort_handle());
            }
            // Out of file descriptors and the like: back off, keep serving.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Unregisters a connection however its task ends (including abort).
struct Registration {
    engine: Arc<Engine>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.engine.unregister(self.id);
    }
}

type Sink = SplitSink<WebSocketStream<TcpStream>, WsMessage>;
type Source = SplitStream<WebSocketStream<TcpStream>>;

// tungstenite's upgrade callback returns its own (large) `ErrorResponse`.
#[allow(clippy::result_large_err)]
async fn serve(
    engine: Arc<Engine>,
    id: u64,
    stream: TcpStream,
    mut rx: mpsc::Receiver<Out>,
    link: Arc<Link>,
) {
    let _registration = Registration {
        engine: Arc::clone(&engine),
        id,
    };
    let limit = engine
        .cfg()
        .max_inbound_frame
        .map_or(MAX_MESSAGE_BYTES, |max| {
            max.saturating_add(1).max(MAX_MESSAGE_BYTES)
        });
    let config = WebSocketConfig::default()
        .max_message_size(Some(limit))
        .max_frame_size(Some(limit));
    let callback = |_request: &Request, response: Response| match engine.upgrade_refusal() {
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
        () = writer(&engine, id, sink, &mut rx) => {}
        () = reader(&engine, id, source, &link) => {}
        () = heartbeat(&engine, id, &link) => {}
    }
    // Returning drops both halves: the TCP connection closes with no close
    // frame unless the writer sent one.
}

async fn writer(engine: &Engine, id: u64, mut sink: Sink, rx: &mut mpsc::Receiver<Out>) {
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
        if engine.blackholed() {
            continue;
        }
        let action = engine.outbound_action(id);
        if let Some(delay) = action.delay {
            tokio::time::sleep(delay).await;
        }
        if action.drop_before {
            return;
        }
        let envelope = engine.cfg().dialect.to_envelope(&frame);
        let text = serde_json::to_string(&envelope).unwrap_or_default();
        if sink.send(WsMessage::text(text)).await.is_err() {
            return;
        }
        engine.written(id, envelope, &frame, stray);
        if action.drop_after {
            return;
        }
    }
}

async fn reader(engine: &Arc<Engine>, id: u64, mut source: Source, link: &Link) {
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
        if engine
            .cfg()
            .max_inbound_frame
            .is_some_and(|limit| message.len() > limit)
        {
            // 1009: message too big. It is not processed, nor is anything
            // after it.
            engine.close_conn_with(id, 1009);
            closing = true;
            continue;
        }
        match message {
            WsMessage::Text(text) => engine.handle_text(id, text.as_str()),
            WsMessage::Binary(bytes) => match std::str::from_utf8(&bytes) {
                Ok(text) => engine.handle_text(id, text),
                Err(_) => engine.handle_text(id, "\u{0}"),
            },
            // The next read flushes tungstenite's close reply; the stream then
            // ends.
            WsMessage::Close(_) | WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_) => {
            }
        }
    }
}

/// The response that refuses an upgrade ([`crate::Fault::RefuseUpgrade`]).
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
async fn heartbeat(engine: &Engine, id: u64, link: &Link) {
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
        if engine.blackholed() {
            tokio::time::sleep(interval / 4).await;
            last_ping = Instant::now();
            // A black hole is the runtime's silence, not the client's: once
            // it ends, the client gets two fresh intervals.
            link.touch();
            continue;
        }
        let now = Instant::now();
        let deadline = link.last_inbound() + interval * 2;
        if now >= deadline {
            engine.close_conn(id);
            std::future::pending::<()>().await;
        }
        let next_ping = last_ping + interval;
        if now >= next_ping {
            engine.send_ping(id);
            last_ping = now;
            continue;
        }
        tokio::time::sleep_until(deadline.min(next_ping).into()).await;
    }
}
