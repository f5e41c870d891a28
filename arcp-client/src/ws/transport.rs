//! The WebSocket under a session: dialing (TCP, TLS, upgrade), and the
//! connection split into a reader and a writer, so the driver can read
//! while a write is in progress and never blocks on either.
//!
//! ```text
//!  TcpStream (dial.rs; proxy.rs's tunnel) ── CountedTcp (bytes read) ── rustls (wss://) ── tungstenite ── SocketReader / SocketWriter
//! ```
//!
//! The count below TLS and tungstenite tells the reader when a read took
//! bytes from the socket yet completed no message: a frame arrived in part,
//! and the rest may wait in the runtime's kernel for this side's ACK
//! (Nagle). The reader then asks for that ACK at once (`TCP_QUICKACK`)
//! instead of leaving it to the delayed-ACK timer.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::error::UrlError;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message as WsMessage};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::link_io::DialFailure;
use crate::config::{shown_url, Config};
use crate::error::Error;
use crate::redact::Redactor;
use crate::telemetry;

type Ws = WebSocketStream<MaybeTlsStream<CountedTcp>>;

/// Bytes asked of the socket per read (larger frames take several reads).
const READ_BUFFER: usize = 16 * 1024;

/// The reading half, with a handle on the TCP socket for `TCP_QUICKACK`.
pub(crate) struct SocketReader {
    stream: SplitStream<Ws>,
    socket: Option<socket2::Socket>,
    /// Bytes read from the socket so far (`CountedTcp`).
    bytes_read: Arc<AtomicU64>,
    /// Whether a frame that arrived in part gets its ACK at once: the
    /// driver's [`set_quickack_wanted`](Self::set_quickack_wanted).
    quickack_wanted: bool,
    /// A close reason is the runtime's text: redacted here, before the
    /// handshake error, the loss log, the connection event or a journal
    /// record can carry it.
    redactor: Redactor,
}

/// The TCP stream under TLS and tungstenite, counting the bytes read from
/// it (see the module).
struct CountedTcp {
    tcp: TcpStream,
    read: Arc<AtomicU64>,
}

impl AsyncRead for CountedTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.tcp).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            this.read.fetch_add(read as u64, Ordering::Relaxed);
        }
        polled
    }
}

impl AsyncWrite for CountedTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// The writing half.
pub(crate) struct SocketWriter {
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
pub(crate) async fn connect(config: &Config) -> Result<(SocketReader, SocketWriter), DialFailure> {
    // A small read buffer: tungstenite zero-fills the spare capacity before
    // every socket read, and ARCP frames are a few hundred bytes; with the
    // default 128 KiB that memset was the client's largest single cost.
    let ws_config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .max_message_size(Some(config.max_frame_size))
        .max_frame_size(Some(config.max_frame_size));
    let connector = config
        .tls
        .client_config()
        .map(tokio_tungstenite::Connector::Rustls);
    let url = shown_url(&config.url);
    let mut request = config
        .url
        .as_str()
        .into_client_request()
        .map_err(|e| connect_error(&url, e))?;
    let headers = crate::credentials::checked_headers(config).map_err(|error| DialFailure {
        error,
        transient: false,
        floor: None,
    })?;
    request.headers_mut().extend(headers);
    let (host, port) = host_and_port(&request).map_err(|e| connect_error(&url, e))?;
    let secure = request.uri().scheme_str() == Some("wss");
    let proxy =
        super::proxy::for_target(&config.proxy, &host, secure).map_err(|message| DialFailure {
            error: Error::Connect {
                url: url.clone(),
                message,
                retryable: false,
                source: None,
            },
            transient: false,
            floor: None,
        })?;
    let bytes_read = Arc::new(AtomicU64::new(0));
    let counted = bytes_read.clone();
    let dial = async {
        let tcp = match &proxy {
            Some(proxy) => super::proxy::tunnel(proxy, &host, port, &url).await?,
            None => super::dial::tcp(&host, port, &url).await?,
        };
        // Requests are small and latency-bound; with Nagle on, a runtime
        // that writes replies in pieces costs ~40 ms per call.
        tcp.set_nodelay(true)
            .map_err(|e| connect_error(&url, tungstenite::Error::Io(e)))?;
        let socket = quickack_handle(&tcp);
        let tcp = CountedTcp { tcp, read: counted };
        let (ws, _response) = tokio_tungstenite::client_async_tls_with_config(
            request,
            tcp,
            Some(ws_config),
            connector,
        )
        .await
        .map_err(|e| connect_error(&url, e))?;
        Ok::<_, DialFailure>((ws, socket))
    };
    let (ws, socket) = tokio::time::timeout(config.connect_timeout, dial)
        .await
        .map_err(|elapsed| DialFailure {
            error: Error::Connect {
                url: url.clone(),
                message: format!(
                    "no WebSocket upgrade within the connect timeout of {:?}",
                    config.connect_timeout
                ),
                retryable: true,
                source: Some(crate::error::ErrorSource::new(elapsed)),
            },
            transient: true,
            floor: None,
        })??;
    let (sink, stream) = ws.split();
    let reader = SocketReader {
        stream,
        socket,
        bytes_read,
        quickack_wanted: true,
        redactor: config.redactor(),
    };
    reader.rearm_quickack();
    Ok((reader, SocketWriter { sink }))
}

/// The host to dial (an IPv6 address without its brackets) and the port
/// (the scheme's when the URL names none), as tungstenite's own dialer
/// takes them.
fn host_and_port(request: &Request) -> Result<(String, u16), tungstenite::Error> {
    let uri = request.uri();
    let host = match uri.host() {
        Some(h) if h.starts_with('[') && h.ends_with(']') => &h[1..h.len() - 1],
        Some(h) => h,
        None => return Err(tungstenite::Error::Url(UrlError::NoHostName)),
    };
    let port = uri
        .port_u16()
        .or_else(|| match uri.scheme_str() {
            Some("wss") => Some(443),
            Some("ws") => Some(80),
            _ => None,
        })
        .ok_or(tungstenite::Error::Url(UrlError::UnsupportedUrlScheme))?;
    Ok((host.to_owned(), port))
}

/// A second handle on the socket, for `TCP_QUICKACK` while the stream
/// itself is inside TLS and tungstenite.
fn quickack_handle(tcp: &TcpStream) -> Option<socket2::Socket> {
    use std::os::fd::AsFd;
    tcp.as_fd()
        .try_clone_to_owned()
        .ok()
        .map(socket2::Socket::from)
}

impl SocketReader {
    /// Reads the next frame. A read that takes bytes from the socket yet
    /// completes no message re-arms `TCP_QUICKACK` when the driver wants it
    /// (see the module).
    pub(crate) async fn recv(&mut self) -> Inbound {
        let next = std::future::poll_fn(|cx| {
            let seen = self.bytes_read.load(Ordering::Relaxed);
            let polled = self.stream.poll_next_unpin(cx);
            if polled.is_pending()
                && self.quickack_wanted
                && self.bytes_read.load(Ordering::Relaxed) != seen
            {
                rearm_quickack(self.socket.as_ref());
            }
            polled
        })
        .await;
        let inbound = match next {
            Some(Ok(WsMessage::Text(text))) => {
                telemetry::bytes_received(text.len());
                Inbound::Text(text)
            }
            Some(Ok(WsMessage::Close(frame))) => match frame {
                Some(f) => Inbound::Closed {
                    code: Some(u16::from(f.code)),
                    reason: self
                        .redactor
                        .redact_owned(format!("closed by the runtime ({} {})", f.code, f.reason)),
                },
                None => Inbound::Closed {
                    code: None,
                    reason: "closed by the runtime".into(),
                },
            },
            Some(Ok(_)) => Inbound::Other,
            Some(Err(e)) => Inbound::Closed {
                code: None,
                reason: self.redactor.redact_owned(describe(&e)),
            },
            None => Inbound::Closed {
                code: None,
                reason: "the connection ended".into(),
            },
        };
        inbound
    }

    /// Linux delays ACKs by up to 40 ms; a runtime that writes its replies
    /// in several small segments without TCP_NODELAY then waits on each.
    /// Setting the flag sends the pending ACK at once; the kernel clears it
    /// after use. The driver decides when (`ack.rs`): once nothing pending
    /// (a queued request, a freed caller's next one) will carry it.
    pub(crate) fn rearm_quickack(&self) {
        rearm_quickack(self.socket.as_ref());
    }

    /// Whether something waits for the runtime's next bytes, so that a
    /// frame arriving in part should get its ACK at once (the driver's
    /// `Core::wants_quickack`, set after every turn).
    pub(crate) fn set_quickack_wanted(&mut self, wanted: bool) {
        self.quickack_wanted = wanted;
    }
}

/// Asks the kernel to acknowledge received data now (and leave delayed-ACK
/// mode until it re-enters it by itself).
fn rearm_quickack(socket: Option<&socket2::Socket>) {
    #[cfg(target_os = "linux")]
    if let Some(socket) = socket {
        let _ = socket.set_tcp_quickack(true);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = socket;
}

impl SocketWriter {
    /// Writes `frames` and flushes once (one syscall batch instead of one
    /// per frame), bounded by `timeout`; hands the writer back, and the
    /// emptied list for the next batch (a list of a few dozen frames is a
    /// block the allocator handles slowly: made afresh per write, it was
    /// 1.3 % of the client's CPU samples at 64 calls in flight).
    pub(crate) async fn write(
        mut self,
        mut frames: Vec<String>,
        timeout: Duration,
    ) -> (SocketWriter, Vec<String>, Result<(), String>) {
        let result = self.send(&mut frames, timeout).await;
        frames.clear();
        (self, frames, result)
    }

    /// Writes `frames` (taking them out of the list) and flushes once,
    /// bounded by `timeout`.
    pub(crate) async fn send(
        &mut self,
        frames: &mut Vec<String>,
        timeout: Duration,
    ) -> Result<(), String> {
        let write = async {
            for text in frames.drain(..) {
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
                // The rustls error itself: an io::Error's `source()` skips
                // the error it wraps.
                source: Some(crate::error::ErrorSource::new(tls.clone())),
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
            source: Some(crate::error::ErrorSource::new(e)),
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
        source: Some(crate::error::ErrorSource::new(e)),
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
    fn the_host_and_port_dialed_are_the_urls() {
        let dialed = |url: &str| host_and_port(&url.into_client_request().unwrap());
        assert_eq!(
            dialed("ws://127.0.0.1:9000/arcp").unwrap(),
            ("127.0.0.1".into(), 9000)
        );
        assert_eq!(
            dialed("ws://runtime.example/arcp").unwrap(),
            ("runtime.example".into(), 80)
        );
        assert_eq!(
            dialed("wss://runtime.example/arcp").unwrap(),
            ("runtime.example".into(), 443)
        );
        assert_eq!(dialed("ws://[::1]:9000/").unwrap(), ("::1".into(), 9000));
    }

    /// A frame's first bytes are counted as read although they complete no
    /// message: the reader's signal to ask for the ACK of a frame that
    /// arrived in part.
    #[tokio::test]
    async fn bytes_read_below_the_websocket_are_counted() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let peer = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            socket.write_all(b"\x81\x05he").await.unwrap();
            socket
        });
        let read = Arc::new(AtomicU64::new(0));
        let mut tcp = CountedTcp {
            tcp: TcpStream::connect(address).await.unwrap(),
            read: read.clone(),
        };
        let _peer = peer.await.unwrap();
        let mut buf = [0u8; 16];
        let n = tcp.read(&mut buf).await.unwrap();
        assert_eq!(n, 4);
        assert_eq!(read.load(Ordering::Relaxed), 4);
        tcp.write_all(b"x").await.unwrap();
        assert_eq!(read.load(Ordering::Relaxed), 4, "writes are not counted");
    }

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
