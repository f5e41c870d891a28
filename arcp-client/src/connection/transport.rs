//! The WebSocket under a session: connect, read, and coalesced writes.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message as WsMessage};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::client::Config;
use crate::error::Error;

/// One live WebSocket connection.
pub(crate) struct Transport {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    outbox: Vec<String>,
}

/// What a read produced.
pub(crate) enum Inbound {
    /// A text frame.
    Text(String),
    /// A frame that carries no ARCP message (binary, WebSocket ping/pong).
    Other,
    /// The connection ended (closed, reset, or a protocol violation such as
    /// an oversized frame), with the reason.
    Closed(String),
}

impl Transport {
    /// Opens a WebSocket to the configured URL, with TCP_NODELAY set.
    pub(crate) async fn connect(config: &Config) -> Result<Transport, Error> {
        let ws_config = WebSocketConfig::default()
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
        let (ws, _response) = tokio::time::timeout(config.handshake_timeout, connect)
            .await
            .map_err(|_| Error::Connect {
                url: config.url.clone(),
                message: format!("no WebSocket upgrade within {:?}", config.handshake_timeout),
                retryable: true,
            })?
            .map_err(|e| connect_error(&config.url, e))?;
        let transport = Transport {
            ws,
            outbox: Vec::with_capacity(16),
        };
        transport.rearm_quickack();
        Ok(transport)
    }

    /// Reads the next frame.
    pub(crate) async fn recv(&mut self) -> Inbound {
        let inbound = match self.ws.next().await {
            Some(Ok(WsMessage::Text(text))) => Inbound::Text(text.as_str().to_owned()),
            Some(Ok(WsMessage::Close(frame))) => Inbound::Closed(match frame {
                Some(f) => format!("closed by the runtime ({} {})", f.code, f.reason),
                None => "closed by the runtime".into(),
            }),
            Some(Ok(_)) => Inbound::Other,
            Some(Err(e)) => Inbound::Closed(describe(&e)),
            None => Inbound::Closed("connection ended".into()),
        };
        self.rearm_quickack();
        inbound
    }

    /// Queues a frame; nothing is written until [`Transport::flush`].
    pub(crate) fn queue(&mut self, text: String) {
        self.outbox.push(text);
    }

    /// Whether frames are waiting to be written.
    pub(crate) fn has_queued(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Writes every queued frame and flushes once (one syscall batch instead
    /// of one per frame). Bounded by `timeout` so a stalled peer cannot
    /// freeze the connection task.
    pub(crate) async fn flush(&mut self, timeout: Duration) -> Result<(), String> {
        if self.outbox.is_empty() {
            return Ok(());
        }
        let frames = std::mem::take(&mut self.outbox);
        let write = async {
            for text in frames {
                self.ws.feed(WsMessage::text(text)).await?;
            }
            self.ws.flush().await
        };
        match tokio::time::timeout(timeout, write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(describe(&e)),
            Err(_) => Err(format!("write stalled for {timeout:?}")),
        }
    }

    /// Sends a close frame, best effort.
    pub(crate) async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_millis(500), self.ws.close(None)).await;
    }

    /// Linux delays ACKs by up to 40 ms; a runtime that writes its replies
    /// in several small segments without TCP_NODELAY then waits on each. The
    /// flag is cleared by the kernel after use, so it is set again after
    /// every read.
    fn rearm_quickack(&self) {
        #[cfg(target_os = "linux")]
        {
            let tcp = match self.ws.get_ref() {
                MaybeTlsStream::Plain(tcp) => tcp,
                MaybeTlsStream::Rustls(tls) => tls.get_ref().0,
                _ => return,
            };
            let _ = socket2::SockRef::from(tcp).set_tcp_quickack(true);
        }
    }
}

fn describe(e: &tungstenite::Error) -> String {
    match e {
        tungstenite::Error::Capacity(c) => format!("frame over the size limit: {c}"),
        tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed => {
            "connection closed".into()
        }
        other => other.to_string(),
    }
}

fn connect_error(url: &str, e: tungstenite::Error) -> Error {
    // A TLS failure (untrusted or mismatched certificate) surfaces as an I/O
    // error wrapping a rustls error: retrying cannot fix it.
    if let tungstenite::Error::Io(io) = &e {
        if let Some(tls) = io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Error::Connect {
                url: url.to_owned(),
                message: format!("TLS handshake failed: {tls}"),
                retryable: false,
            };
        }
    }
    let retryable = match &e {
        tungstenite::Error::Io(_) => true,
        tungstenite::Error::Http(response) => response.status().is_server_error(),
        tungstenite::Error::Tls(_) | tungstenite::Error::Url(_) => false,
        _ => true,
    };
    if let tungstenite::Error::Http(response) = &e {
        if matches!(response.status().as_u16(), 401 | 403) {
            return Error::Unauthenticated {
                message: format!("WebSocket upgrade refused with HTTP {}", response.status()),
            };
        }
    }
    Error::Connect {
        url: url.to_owned(),
        message: describe(&e),
        retryable,
    }
}
