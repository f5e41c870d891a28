//! A WebSocket relay between a client and a runtime, on loopback, that
//! looks at the runtime's frames one by one:
//!
//! - [`Relay::PolicyCloseThen401`]: once armed, at the next `job.accepted`
//!   (the submit was forwarded; the tool runs) it closes the client's
//!   connection with a policy close (1008), as an auth proxy that expires
//!   tokens on long-lived sockets does, and answers the upgrades of the
//!   next while with 401;
//! - [`Relay::HideAcceptance`]: drops every `job.accepted`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the relay does with the runtime's frames.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Relay {
    /// Armed: close with 1008 at the next `job.accepted`, then refuse
    /// upgrades with 401 for the armed while.
    PolicyCloseThen401,
    /// Drop every `job.accepted`; relay the rest.
    HideAcceptance,
}

/// A running relay; stops when dropped.
pub(crate) struct RelayHandle {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

struct State {
    how: Relay,
    /// Close at the next `job.accepted`.
    armed: AtomicBool,
    /// How long upgrades are refused after the close.
    refuse_for: Mutex<Duration>,
    /// When the last policy close happened.
    closed_at: Mutex<Option<Instant>>,
    /// Policy closes made.
    closes: AtomicU64,
}

impl State {
    fn refusing(&self) -> bool {
        let refuse_for = *self.refuse_for.lock().unwrap();
        self.closed_at
            .lock()
            .unwrap()
            .is_some_and(|at| at.elapsed() < refuse_for)
    }
}

impl Drop for RelayHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RelayHandle {
    /// Starts a relay to `upstream` (unarmed).
    pub(crate) async fn start(upstream: SocketAddr, how: Relay) -> std::io::Result<RelayHandle> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            how,
            armed: AtomicBool::new(false),
            refuse_for: Mutex::new(Duration::ZERO),
            closed_at: Mutex::new(None),
            closes: AtomicU64::new(0),
        });
        let task = tokio::spawn({
            let state = state.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let state = state.clone();
                    tokio::spawn(async move {
                        if state.refusing() {
                            let _ = refuse_401(client).await;
                        } else {
                            let _ = pump(client, upstream, &state).await;
                        }
                    });
                }
            }
        });
        Ok(RelayHandle { addr, state, task })
    }

    /// The relay's `ws://` URL for `path`.
    pub(crate) fn ws_url(&self, path: &str) -> String {
        format!("ws://{}{path}", self.addr)
    }

    /// Closes with 1008 at the next `job.accepted`, then refuses upgrades
    /// with 401 for `refuse_for`.
    pub(crate) fn arm(&self, refuse_for: Duration) {
        *self.state.refuse_for.lock().unwrap() = refuse_for;
        self.state.armed.store(true, Ordering::SeqCst);
    }

    /// Policy closes made so far.
    pub(crate) fn closes(&self) -> u64 {
        self.state.closes.load(Ordering::SeqCst)
    }
}

async fn refuse_401(mut client: TcpStream) -> std::io::Result<()> {
    let mut buf = [0u8; 4096];
    let _ = client.read(&mut buf).await?;
    client
        .write_all(
            b"HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer\r\ncontent-length: 0\r\n\
              connection: close\r\n\r\n",
        )
        .await?;
    client.shutdown().await
}

/// Relays bytes both ways; the runtime's frames (unmasked) are cut out one
/// by one after its upgrade answer, so each can be looked at.
async fn pump(client: TcpStream, upstream: SocketAddr, state: &State) -> std::io::Result<()> {
    let runtime = TcpStream::connect(upstream).await?;
    let (mut client_read, mut client_write) = client.into_split();
    let (mut runtime_read, mut runtime_write) = runtime.into_split();
    let up = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut runtime_write).await;
    });
    let mut buf = Vec::new();
    let mut upgraded = false;
    let mut chunk = [0u8; 16384];
    loop {
        let n = runtime_read.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if !upgraded {
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            client_write.write_all(&buf[..end + 4]).await?;
            buf.drain(..end + 4);
            upgraded = true;
        }
        while let Some(len) = frame_len(&buf) {
            let frame: Vec<u8> = buf.drain(..len).collect();
            let accepted = String::from_utf8_lossy(&frame).contains("\"job.accepted\"");
            match (state.how, accepted) {
                (Relay::PolicyCloseThen401, true) if state.armed.swap(false, Ordering::SeqCst) => {
                    *state.closed_at.lock().unwrap() = Some(Instant::now());
                    state.closes.fetch_add(1, Ordering::SeqCst);
                    // Close frame, code 1008, no reason.
                    client_write.write_all(&[0x88, 0x02, 0x03, 0xF0]).await?;
                    client_write.shutdown().await?;
                    up.abort();
                    return Ok(());
                }
                (Relay::HideAcceptance, true) => {}
                _ => client_write.write_all(&frame).await?,
            }
        }
    }
    up.abort();
    client_write.shutdown().await
}

/// The length of the unmasked frame at the start of `buf`, once whole.
fn frame_len(buf: &[u8]) -> Option<usize> {
    let short = usize::from(*buf.get(1)? & 0x7F);
    let (header, payload) = match short {
        126 => (
            4,
            usize::from(u16::from_be_bytes([*buf.get(2)?, *buf.get(3)?])),
        ),
        127 => {
            let bytes: [u8; 8] = buf.get(2..10)?.try_into().ok()?;
            (10, usize::try_from(u64::from_be_bytes(bytes)).ok()?)
        }
        n => (2, n),
    };
    (buf.len() >= header + payload).then_some(header + payload)
}
