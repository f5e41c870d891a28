//! The public API: [`ChaosProxy`], its builder and the handle of a running
//! proxy.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::pump::accept_loop;
use super::report::{ChaosReport, KillReason};
use super::schedule::{lock, Config, Shared};

/// A seeded fault-injecting loopback TCP proxy for WebSocket traffic.
///
/// `ChaosProxy` sits between any WebSocket client and any WebSocket server
/// (the in-process mock runtime or a real one). It forwards the HTTP/1.1
/// upgrade request and response byte-for-byte, then tracks RFC 6455 frame
/// boundaries in both directions and abruptly kills connections (both
/// sockets closed with `SO_LINGER` 0, so the peers see a reset and never a
/// close frame) according to a deterministic schedule. It can also black-hole
/// all traffic ([`ChaosProxyHandle::stall`]) or kill every live connection on
/// demand ([`ChaosProxyHandle::kill_all`]). Everything it did is available as
/// a [`ChaosReport`].
///
/// # Determinism
///
/// Connection *i* (0-based, in accept order) gets its own random generator
/// seeded from `(seed, i)`, so its schedule does not depend on the timing of
/// other connections. Frames of both directions share one counter per
/// connection, and the probabilistic decision for the *k*-th frame of a
/// connection is a pure function of `(seed, i, k)`. Same seed + same traffic
/// (for instance request/response traffic, where the order of frames on a
/// connection is fixed) therefore yields the same [`Kill`](crate::Kill)s. Only
/// [`ChaosProxyBuilder::max_kills`], which is global, couples connections.
///
/// Kills happen only at frame boundaries after the upgrade: the frame that
/// reaches the threshold is *not* forwarded. Traffic that is not WebSocket
/// (no upgrade head, or a non-`101` response) is forwarded untouched and
/// only counted in bytes.
///
/// # Example
///
/// ```
/// use arcp_mock::{ChaosProxy, KillReason};
/// use futures_util::{SinkExt, StreamExt};
/// use tokio::net::TcpListener;
/// use tokio_tungstenite::tungstenite::Message;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // A tiny WebSocket echo server standing in for the runtime.
/// let upstream = TcpListener::bind("127.0.0.1:0").await?;
/// let upstream_addr = upstream.local_addr()?;
/// tokio::spawn(async move {
///     while let Ok((tcp, _)) = upstream.accept().await {
///         tokio::spawn(async move {
///             let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
///                 return;
///             };
///             while let Some(Ok(msg)) = ws.next().await {
///                 if msg.is_text() && ws.send(msg).await.is_err() {
///                     break;
///                 }
///             }
///         });
///     }
/// });
///
/// // Kill each connection after about 4 frames (jittered into 2..=6 by the seed).
/// let proxy = ChaosProxy::builder(upstream_addr)
///     .seed(7)
///     .kill_every_frames(4)
///     .start()
///     .await?;
///
/// let (mut ws, _) = tokio_tungstenite::connect_async(proxy.ws_url("/arcp")).await?;
/// let mut echoed = 0;
/// for i in 0..10 {
///     if ws.send(Message::text(format!("ping {i}"))).await.is_err() {
///         break;
///     }
///     match ws.next().await {
///         Some(Ok(_)) => echoed += 1,
///         _ => break, // reset by the proxy: no close frame
///     }
/// }
/// assert!(echoed < 10);
///
/// let report = proxy.report();
/// assert_eq!(report.connections, 1);
/// assert_eq!(report.kills.len(), 1);
/// assert_eq!(report.kills[0].reason, KillReason::FrameSchedule);
/// assert!((1..=5).contains(&report.kills[0].after_frames));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ChaosProxy {
    _private: (),
}

impl ChaosProxy {
    /// Start configuring a proxy that forwards every accepted connection to
    /// `upstream`.
    ///
    /// With no schedule configured the proxy is a plain forwarder (that can
    /// still be stalled or told to [`kill_all`](ChaosProxyHandle::kill_all)).
    #[must_use]
    pub fn builder(upstream: SocketAddr) -> ChaosProxyBuilder {
        ChaosProxyBuilder {
            upstream,
            config: Config::default(),
        }
    }
}

/// Configuration of a [`ChaosProxy`]; finish with [`start`](Self::start).
#[derive(Debug, Clone)]
pub struct ChaosProxyBuilder {
    upstream: SocketAddr,
    config: Config,
}

impl ChaosProxyBuilder {
    /// Seed of every schedule (default 0). Same seed + same traffic gives the
    /// same kills.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = seed;
        self
    }

    /// Kill each connection after about `n` WebSocket frames, both directions
    /// counted together.
    ///
    /// The exact threshold `t` of each connection is drawn deterministically
    /// from the seed in `[max(1, n/2), n + n/2]`; the `t`-th frame is not
    /// forwarded, the connection is reset instead (so the kill reports
    /// `after_frames == t - 1` for request/response traffic). `0` disables the
    /// frame schedule.
    #[must_use]
    pub fn kill_every_frames(mut self, n: u64) -> Self {
        self.config.kill_every_frames = (n > 0).then_some(n);
        self
    }

    /// Kill each connection once the bytes it forwarded (both directions,
    /// including the HTTP upgrade) would exceed about `n`.
    ///
    /// The threshold is jittered like [`kill_every_frames`](Self::kill_every_frames)
    /// into `[max(1, n/2), n + n/2]`, and the kill happens at the frame
    /// boundary before the frame that would cross it. `0` disables the byte
    /// schedule.
    #[must_use]
    pub fn kill_every_bytes(mut self, n: u64) -> Self {
        self.config.kill_every_bytes = (n > 0).then_some(n);
        self
    }

    /// Kill the connection instead of forwarding a frame with probability `p`
    /// per frame, using the connection's seeded generator.
    ///
    /// `p` is clamped to `[0, 1]`; NaN counts as 0.
    #[must_use]
    pub fn kill_probability(mut self, p: f64) -> Self {
        self.config.kill_probability = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
        self
    }

    /// Never kill a connection (by schedule) before `n` of its frames have
    /// been forwarded, e.g. to let an application-level handshake through.
    /// Default 0. A threshold that falls inside the spared frames fires on the
    /// first frame after them.
    #[must_use]
    pub fn spare_first_frames(mut self, n: u64) -> Self {
        self.config.spare_first_frames = n;
        self
    }

    /// Exempt about this fraction of connections (drawn from the seed per
    /// connection) from the frame and byte schedules, so a flaky network
    /// cuts most connections but lets some through whole. `p` is clamped
    /// to `[0, 1]`; NaN counts as 0. Default 0: every connection follows
    /// the schedules.
    #[must_use]
    pub fn spare_connections(mut self, p: f64) -> Self {
        self.config.spare_connections = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
        self
    }

    /// Stop scheduled killing once `n` kills have happened in total.
    ///
    /// Manual kills ([`ChaosProxyHandle::kill_all`]) always happen but count
    /// towards the total.
    #[must_use]
    pub fn max_kills(mut self, n: u64) -> Self {
        self.config.max_kills = Some(n);
        self
    }

    /// Bind `127.0.0.1:0` and start accepting connections.
    ///
    /// Must be called within a Tokio runtime; the proxy runs on spawned tasks
    /// until the returned handle is dropped.
    ///
    /// # Errors
    ///
    /// Fails if the loopback listener cannot be bound.
    pub async fn start(self) -> std::io::Result<ChaosProxyHandle> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let local_addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new(self.config, self.upstream));
        let accept_task = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        Ok(ChaosProxyHandle {
            shared,
            local_addr,
            accept_task,
        })
    }
}

/// A running [`ChaosProxy`].
///
/// Dropping the handle shuts the proxy down: it stops accepting, and every
/// proxied connection is closed.
pub struct ChaosProxyHandle {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    accept_task: JoinHandle<()>,
}

impl fmt::Debug for ChaosProxyHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChaosProxyHandle")
            .field("local_addr", &self.local_addr)
            .field("upstream", &self.shared.upstream)
            .finish_non_exhaustive()
    }
}

impl ChaosProxyHandle {
    /// The address clients should connect to (on `127.0.0.1`).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `ws://127.0.0.1:PORT` followed by `path` (a `/` is inserted if `path`
    /// does not start with one).
    #[must_use]
    pub fn ws_url(&self, path: &str) -> String {
        let sep = if path.starts_with('/') { "" } else { "/" };
        format!("ws://{}{sep}{path}", self.local_addr)
    }

    /// A snapshot of what the proxy has done so far. Kills are sorted by
    /// connection index.
    #[must_use]
    pub fn report(&self) -> ChaosReport {
        let mut kills = lock(&self.shared.kills).clone();
        kills.sort_by_key(|k| k.connection);
        ChaosReport {
            connections: self.shared.connections.load(Ordering::Acquire),
            kills,
            frames_forwarded: self.shared.frames.load(Ordering::Acquire),
            bytes_forwarded: self.shared.bytes.load(Ordering::Acquire),
        }
    }

    /// Abruptly close every live connection now (reset, no close frame).
    ///
    /// Each one is recorded as a [`KillReason::Manual`] kill before this
    /// returns; nothing more is forwarded on them. New connections are still
    /// accepted.
    pub fn kill_all(&self) {
        let live = lock(&self.shared.live);
        for entry in live.values() {
            let conn = &entry.conn;
            if !conn.killed.swap(true, Ordering::AcqRel) {
                self.shared.kills_total.fetch_add(1, Ordering::AcqRel);
                self.shared.record_kill(conn, KillReason::Manual);
            }
            conn.kill.notify_one();
        }
    }

    /// While `on`, forward nothing in either direction but keep every socket
    /// open (a black hole). New connections are accepted and connected
    /// upstream but stalled too. Traffic is held back, not discarded: it
    /// flows again once the stall is lifted.
    pub fn stall(&self, on: bool) {
        self.shared.stall_tx.send_replace(on);
    }

    /// While off, no scheduled kill happens: the proxy is a plain forwarder.
    /// Frames keep being counted (and random draws consumed), so turning it
    /// back on resumes the same per-connection schedule. Default on.
    pub fn set_enabled(&self, on: bool) {
        self.shared.enabled.store(on, Ordering::Release);
    }
}

impl Drop for ChaosProxyHandle {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.accept_task.abort();
        let mut live = lock(&self.shared.live);
        for (_, entry) in live.drain() {
            entry.task.abort();
        }
    }
}
