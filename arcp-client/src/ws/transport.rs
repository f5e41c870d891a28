//! The WebSocket under a session: dialing (TCP, TLS, upgrade), and the
//! connection split into a reader and a writer, so the driver can read
//! while a write is in progress and never blocks on either.

use std::time::{Duration, SystemTime};

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message as WsMessage};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::core::DialFailure;
use crate::config::{shown_url, Config};
use crate::error::Error;
use crate::telemetry;

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Bytes asked of the socket per read (larger frames take several reads).
const READ_BUFFER: usize = 16 * 1024;

/// The reading half, with a handle on the TCP socket for `TCP_QUICKACK`.
pub(crate) struct Reader {
    stream: SplitStream<Ws>,
    socket: Option<socket2::Socket>,
}

/// The writing half.
pub(crate) struct Writer {
    sink: SplitSink<Ws, WsMessage>,
}

/// What a read produced.
pub(crate) enum Inbound {
    /// A text frame (the received buffer itself: no copy).
    Text(tungstenite::Utf8Bytes),
    /// A frame that carries no ARCP message (binary, WebSocket ping/pong).
    Other,
    /// The connection ended, with the close code when the runtime sent one.
    Closed { code: Option<u16>, reason: String },
}

/// Opens a WebSocket to the configured URL, with TCP_NODELAY set, bounded
/// by `connect_timeout`.
pub(crate) async fn connect(config: &Config) -> Result<(Reader, Writer), DialFailure> {
    // A small read buffer: tungstenite zero-fills the spare capacity before
    // every socket read, and ARCP frames are a few hundred bytes; with the
    // default 128 KiB that memset was the client's largest single cost.
    let ws_config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .max_message_size(Some(config.max_frame_size))
        .max_frame_size(Some(config.max_frame_size));
    // `disable_nagle = true`: requests are small and latency-bound; with
    // Nagle on, a runtime that writes replies in pieces costs ~40 ms per call.
    let connector = config
        .tls
        .client_config()
        .map(tokio_tungstenite::Connector::Rustls);
    let connect = tokio_tungstenite::connect_async_tls_with_config(
        &config.url,
        Some(ws_config),
        true,
        connector,
    );
    let (ws, _response) = tokio::time::timeout(config.connect_timeout, connect)
        .await
        .map_err(|_| DialFailure {
            error: Error::Connect {
                url: shown_url(&config.url),
                message: format!(
                    "no WebSocket upgrade within the connect timeout of {:?}",
                    config.connect_timeout
                ),
                retryable: true,
            },
            transient: true,
            floor: None,
        })?
        .map_err(|e| connect_error(&shown_url(&config.url), e))?;
    let socket = tcp_of(&ws).and_then(|tcp| {
        use std::os::fd::AsFd;
        tcp.as_fd()
            .try_clone_to_owned()
            .ok()
            .map(socket2::Socket::from)
    });
    let (sink, stream) = ws.split();
    let reader = Reader { stream, socket };
    reader.rearm_quickack();
    Ok((reader, Writer { sink }))
}

fn tcp_of(ws: &Ws) -> Option<&TcpStream> {
    match ws.get_ref() {
        MaybeTlsStream::Plain(tcp) => Some(tcp),
        MaybeTlsStream::Rustls(tls) => Some(tls.get_ref().0),
        _ => None,
    }
}

impl Reader {
    /// Reads the next frame.
    pub(crate) async fn recv(&mut self) -> Inbound {
        let inbound = match self.stream.next().await {
            Some(Ok(WsMessage::Text(text))) => {
                telemetry::bytes_received(text.len());
                Inbound::Text(text)
            }
            Some(Ok(WsMessage::Close(frame))) => match frame {
                Some(f) => Inbound::Closed {
                    code: Some(u16::from(f.code)),
                    reason: format!("closed by the runtime ({} {})", f.code, f.reason),
                },
                None => Inbound::Closed {
                    code: None,
                    reason: "closed by the runtime".into(),
                },
            },
            Some(Ok(_)) => Inbound::Other,
            Some(Err(e)) => Inbound::Closed {
                code: None,
                reason: describe(&e),
            },
            None => Inbound::Closed {
                code: None,
                reason: "the connection ended".into(),
            },
        };
        inbound
    }

    /// Linux delays ACKs by up to 40 ms; a runtime that writes its replies
    /// in several small segments without TCP_NODELAY then waits on each. The
    /// kernel clears the flag after use, so the driver sets it again after
    /// each batch of reads while a call still waits for the runtime (once
    /// per wake-up, not once per frame: a `setsockopt` per frame was a
    /// third of the client's syscalls).
    pub(crate) fn rearm_quickack(&self) {
        #[cfg(target_os = "linux")]
        if let Some(socket) = &self.socket {
            let _ = socket.set_tcp_quickack(true);
        }
    }
}

impl Writer {
    /// Writes `frames` and flushes once (one syscall batch instead of one
    /// per frame), bounded by `timeout`; hands the writer back.
    pub(crate) async fn write(
        mut self,
        frames: Vec<String>,
        timeout: Duration,
    ) -> (Writer, Result<(), String>) {
        let result = self.send(frames, timeout).await;
        (self, result)
    }

    /// Writes `frames` and flushes once, bounded by `timeout`.
    pub(crate) async fn send(
        &mut self,
        frames: Vec<String>,
        timeout: Duration,
    ) -> Result<(), String> {
        let write = async {
            for text in frames {
                telemetry::bytes_sent(text.len());
                self.sink.feed(WsMessage::text(text)).await?;
            }
            self.sink.flush().await
        };
        match tokio::time::timeout(timeout, write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(describe(&e)),
            Err(_) => Err(format!(
                "a write made no progress within the write timeout of {timeout:?}"
            )),
        }
    }

    /// Sends a close frame, best effort.
    pub(crate) async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_millis(500), self.sink.close()).await;
    }
}

fn describe(e: &tungstenite::Error) -> String {
    match e {
        tungstenite::Error::Capacity(c) => {
            format!("a frame from the runtime is over the size limit: {c}")
        }
        tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed => {
            "the connection closed".into()
        }
        other => other.to_string(),
    }
}

/// Classifies a failed dial: definitive (bad URL, untrusted certificate,
/// refused credentials, an HTTP status that is not transient) or transient
/// (network, 5xx, 429 with its `Retry-After`).
fn connect_error(url: &str, e: tungstenite::Error) -> DialFailure {
    let fail = |error: Error, transient: bool, floor: Option<Duration>| DialFailure {
        error,
        transient,
        floor,
    };
    // A TLS failure (untrusted or mismatched certificate) surfaces as an I/O
    // error wrapping a rustls error: retrying cannot fix it.
    if let tungstenite::Error::Io(io) = &e {
        if let Some(tls) = io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            let error = Error::Connect {
                url: url.to_owned(),
                message: format!("the TLS handshake failed: {tls}"),
                retryable: false,
            };
            return fail(error, false, None);
        }
    }
    if let tungstenite::Error::Http(response) = &e {
        let status = response.status().as_u16();
        let floor = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after(v, SystemTime::now()));
        if matches!(status, 401 | 403) {
            let error = Error::Unauthenticated {
                message: format!("the WebSocket upgrade was refused with HTTP {status}"),
            };
            return fail(error, false, None);
        }
        let transient = status == 429 || status == 408 || response.status().is_server_error();
        let error = Error::Connect {
            url: url.to_owned(),
            message: format!("the runtime answered the WebSocket upgrade with HTTP {status}"),
            retryable: transient,
        };
        return fail(error, transient, floor);
    }
    let transient = !matches!(
        e,
        tungstenite::Error::Tls(_) | tungstenite::Error::Url(_) | tungstenite::Error::HttpFormat(_)
    );
    let error = Error::Connect {
        url: url.to_owned(),
        message: describe(&e),
        retryable: transient,
    };
    fail(error, transient, None)
}

/// A `Retry-After` value: seconds, or an HTTP date.
fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    if let Ok(secs) = value.trim().parse::<u64>() {
        return Some(Duration::from_secs(secs.min(86_400)));
    }
    let at = httpdate::parse_http_date(value.trim()).ok()?;
    Some(
        at.duration_since(now)
            .unwrap_or_default()
            .min(Duration::from_secs(86_400)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = SystemTime::now();
        assert_eq!(retry_after("3", now), Some(Duration::from_secs(3)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(10));
        let d = retry_after(&later, now).unwrap();
        assert!(
            d <= Duration::from_secs(10) && d >= Duration::from_secs(8),
            "{d:?}"
        );
        assert_eq!(retry_after("soon", now), None);
    }
}
