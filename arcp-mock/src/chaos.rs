//! `ChaosProxy`: a seeded, fault-injecting loopback TCP proxy for WebSocket
//! traffic.
//!
//! The proxy forwards the HTTP/1.1 upgrade byte-for-byte, then follows the
//! RFC 6455 framing in both directions (without buffering whole frames) so it
//! can drop a connection exactly at a frame boundary, on a schedule derived
//! from a seed.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::{AbortHandle, JoinHandle};

/// Size of the per-direction forwarding buffer.
const BUF_SIZE: usize = 32 * 1024;
/// An HTTP head longer than this is not an upgrade: the direction falls back
/// to raw forwarding.
const MAX_HTTP_HEAD: usize = 64 * 1024;
/// Longest RFC 6455 frame header: 2 + 8 (64-bit length) + 4 (mask key).
const MAX_FRAME_HEADER: usize = 14;
/// How long a killing direction may spend handing already-approved bytes to
/// the peer before the sockets are torn down.
const KILL_FLUSH_TIMEOUT: Duration = Duration::from_millis(250);

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
/// connection is fixed) therefore yields the same [`Kill`]s. Only
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

#[derive(Debug, Clone, Default)]
struct Config {
    seed: u64,
    kill_every_frames: Option<u64>,
    kill_every_bytes: Option<u64>,
    kill_probability: f64,
    spare_first_frames: u64,
    max_kills: Option<u64>,
    spare_connections: f64,
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
        let (stall_tx, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            config: self.config,
            upstream: self.upstream,
            enabled: AtomicBool::new(true),
            closed: AtomicBool::new(false),
            stall_tx,
            connections: AtomicU64::new(0),
            kills_total: AtomicU64::new(0),
            frames: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            kills: Mutex::new(Vec::new()),
            live: Mutex::new(HashMap::new()),
        });
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

/// What a [`ChaosProxy`] has done, as returned by [`ChaosProxyHandle::report`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChaosReport {
    /// Connections accepted so far.
    pub connections: u64,
    /// Every kill, sorted by connection index (at most one per connection).
    pub kills: Vec<Kill>,
    /// WebSocket frames forwarded, both directions, all connections.
    pub frames_forwarded: u64,
    /// Bytes forwarded (HTTP upgrade included), both directions, all
    /// connections.
    pub bytes_forwarded: u64,
}

/// One connection killed by a [`ChaosProxy`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Kill {
    /// Index of the connection, 0-based in accept order.
    pub connection: u64,
    /// Frames of this connection forwarded (both directions) before the kill.
    pub after_frames: u64,
    /// Bytes of this connection forwarded (both directions, HTTP upgrade
    /// included) before the kill.
    pub after_bytes: u64,
    /// Why the connection was killed.
    pub reason: KillReason,
}

/// Why a [`ChaosProxy`] killed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KillReason {
    /// The [`kill_every_frames`](ChaosProxyBuilder::kill_every_frames) threshold was reached.
    FrameSchedule,
    /// The [`kill_every_bytes`](ChaosProxyBuilder::kill_every_bytes) threshold was reached.
    ByteSchedule,
    /// The per-frame [`kill_probability`](ChaosProxyBuilder::kill_probability) draw hit.
    Probability,
    /// [`ChaosProxyHandle::kill_all`] was called.
    Manual,
}

// ---------------------------------------------------------------------------
// Shared state
// ---------------------------------------------------------------------------

struct Shared {
    config: Config,
    upstream: SocketAddr,
    enabled: AtomicBool,
    closed: AtomicBool,
    stall_tx: watch::Sender<bool>,
    connections: AtomicU64,
    kills_total: AtomicU64,
    frames: AtomicU64,
    bytes: AtomicU64,
    kills: Mutex<Vec<Kill>>,
    live: Mutex<HashMap<u64, LiveConn>>,
}

struct LiveConn {
    conn: Arc<Conn>,
    task: AbortHandle,
}

impl Shared {
    /// Claim one kill for `conn`, honouring `max_kills`. On success the
    /// connection is marked killed and nothing else may forward on it.
    fn reserve_kill(&self, conn: &Conn) -> bool {
        if conn.killed.load(Ordering::Acquire) {
            return false;
        }
        let claimed = match self.config.max_kills {
            Some(max) => self
                .kills_total
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |k| {
                    (k < max).then_some(k + 1)
                })
                .is_ok(),
            None => {
                self.kills_total.fetch_add(1, Ordering::AcqRel);
                true
            }
        };
        if !claimed {
            return false;
        }
        if conn.killed.swap(true, Ordering::AcqRel) {
            // Lost a race with `kill_all`, which counted its own kill.
            self.kills_total.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    fn record_kill(&self, conn: &Conn, reason: KillReason) {
        let kill = Kill {
            connection: conn.id,
            after_frames: conn.frames.load(Ordering::Acquire),
            after_bytes: conn.bytes.load(Ordering::Acquire),
            reason,
        };
        tracing::debug!(?kill, "chaos proxy killed a connection");
        lock(&self.kills).push(kill);
    }
}

/// Lock a mutex, ignoring poisoning (nothing here panics while holding one,
/// and the proxy must never panic).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Per-connection state shared by the two forwarding directions (and
/// `kill_all`).
struct Conn {
    id: u64,
    /// Frames handed to the outbound sockets, both directions.
    frames: AtomicU64,
    /// Bytes handed to the outbound sockets, both directions.
    bytes: AtomicU64,
    killed: AtomicBool,
    kill: Notify,
    schedule: Mutex<Schedule>,
}

struct Schedule {
    rng: StdRng,
    frame_threshold: Option<u64>,
    byte_threshold: Option<u64>,
    /// Frames whose header has been seen (1-based ordinal of the last one).
    started: u64,
    /// Bytes approved for forwarding so far.
    admitted: u64,
}

enum Admit {
    Forward,
    Kill(KillReason),
    /// The connection was killed by someone else: forward nothing more.
    Dead,
}

impl Conn {
    fn new(id: u64, config: &Config) -> Self {
        let mut rng = StdRng::seed_from_u64(splitmix64(config.seed ^ splitmix64(id)));
        // Always draw both thresholds so each schedule is independent of
        // which others are configured.
        let r_frames = rng.next_u64();
        let r_bytes = rng.next_u64();
        // Drawn apart from `rng`, so sparing changes no other draw.
        let draw = (splitmix64(config.seed ^ splitmix64(id) ^ 0x5bd1_e995) >> 11) as f64;
        let spared = (draw / (1u64 << 53) as f64) < config.spare_connections;
        Conn {
            id,
            frames: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
            schedule: Mutex::new(Schedule {
                rng,
                frame_threshold: config
                    .kill_every_frames
                    .filter(|_| !spared)
                    .map(|n| jitter(n, r_frames)),
                byte_threshold: config
                    .kill_every_bytes
                    .filter(|_| !spared)
                    .map(|n| jitter(n, r_bytes)),
                started: 0,
                admitted: 0,
            }),
        }
    }

    /// Account bytes that are forwarded without frame structure (the HTTP
    /// upgrade, raw traffic).
    fn admit_bytes(&self, n: usize) {
        let mut s = lock(&self.schedule);
        s.admitted = s.admitted.saturating_add(n as u64);
    }

    /// Decide the fate of the next frame (of `frame_len` bytes, header
    /// included) before any of its bytes is forwarded.
    fn admit_frame(&self, shared: &Shared, frame_len: u64) -> Admit {
        if self.killed.load(Ordering::Acquire) {
            return Admit::Dead;
        }
        let config = &shared.config;
        let mut s = lock(&self.schedule);
        s.started += 1;
        let k = s.started;
        // One draw per frame, always, so frame k's decision depends only on
        // (seed, connection, k).
        let hit = config.kill_probability > 0.0 && s.rng.random::<f64>() < config.kill_probability;
        let reason = if !shared.enabled.load(Ordering::Acquire) || k <= config.spare_first_frames {
            None
        } else if s.frame_threshold.is_some_and(|t| k >= t) {
            Some(KillReason::FrameSchedule)
        } else if s
            .byte_threshold
            .is_some_and(|b| s.admitted.saturating_add(frame_len) > b)
        {
            Some(KillReason::ByteSchedule)
        } else if hit {
            Some(KillReason::Probability)
        } else {
            None
        };
        if let Some(reason) = reason {
            if shared.reserve_kill(self) {
                return Admit::Kill(reason);
            }
            if self.killed.load(Ordering::Acquire) {
                return Admit::Dead;
            }
        }
        s.admitted = s.admitted.saturating_add(frame_len);
        Admit::Forward
    }
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Map `r` uniformly (up to negligible bias) into `[max(1, n/2), n + n/2]`.
fn jitter(n: u64, r: u64) -> u64 {
    let lo = (n / 2).max(1);
    let hi = n.saturating_add(n / 2).max(lo);
    let span = u128::from(hi - lo) + 1;
    lo + ((u128::from(r) * span) >> 64) as u64
}

// ---------------------------------------------------------------------------
// Accepting and forwarding
// ---------------------------------------------------------------------------

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(_) => {
                // e.g. EMFILE: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        let _ = client.set_nodelay(true);
        let mut live = lock(&shared.live);
        if shared.closed.load(Ordering::Acquire) {
            return;
        }
        let id = shared.connections.fetch_add(1, Ordering::AcqRel);
        let conn = Arc::new(Conn::new(id, &shared.config));
        // Spawned while holding `live`, so the task cannot deregister itself
        // before it is registered.
        let task = tokio::spawn(run_conn(Arc::clone(&shared), Arc::clone(&conn), client));
        live.insert(
            id,
            LiveConn {
                conn,
                task: task.abort_handle(),
            },
        );
    }
}

/// Close a socket abruptly: `SO_LINGER` 0 makes the close send a RST.
fn reset(stream: &TcpStream) {
    // `set_linger` is deprecated because a non-zero linger blocks on drop; a
    // zero linger never blocks (and works on every Tokio 1.x).
    #[allow(deprecated)]
    let _ = stream.set_linger(Some(Duration::ZERO));
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// Clean EOF from the source; FIN propagated to the destination.
    Eof,
    /// This direction killed the connection.
    Killed,
    /// I/O error on either socket.
    Error,
}

async fn run_conn(shared: Arc<Shared>, conn: Arc<Conn>, mut client: TcpStream) {
    let upstream = tokio::select! {
        biased;
        _ = conn.kill.notified() => None,
        r = TcpStream::connect(shared.upstream) => r.ok(),
    };
    let Some(mut upstream) = upstream else {
        reset(&client);
        lock(&shared.live).remove(&conn.id);
        return;
    };
    let _ = upstream.set_nodelay(true);

    let abort = {
        let (client_rd, client_wr) = client.split();
        let (upstream_rd, upstream_wr) = upstream.split();
        let c2s = pump(&shared, &conn, Side::Client, client_rd, upstream_wr);
        let s2c = pump(&shared, &conn, Side::Server, upstream_rd, client_wr);
        tokio::pin!(c2s, s2c);
        let (mut c2s_done, mut s2c_done) = (false, false);
        loop {
            tokio::select! {
                biased;
                _ = conn.kill.notified() => break true,
                outcome = &mut c2s, if !c2s_done => match outcome {
                    Outcome::Eof => c2s_done = true,
                    Outcome::Killed | Outcome::Error => break true,
                },
                outcome = &mut s2c, if !s2c_done => match outcome {
                    Outcome::Eof => s2c_done = true,
                    Outcome::Killed | Outcome::Error => break true,
                },
            }
            if c2s_done && s2c_done {
                break false;
            }
        }
    };
    if abort {
        reset(&client);
        reset(&upstream);
    }
    drop((client, upstream));
    lock(&shared.live).remove(&conn.id);
}

/// Which peer a direction reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Client to upstream: starts with the upgrade request.
    Client,
    /// Upstream to client: starts with the upgrade response.
    Server,
}

async fn pump(
    shared: &Shared,
    conn: &Conn,
    side: Side,
    mut rd: ReadHalf<'_>,
    mut wr: WriteHalf<'_>,
) -> Outcome {
    let mut stall = shared.stall_tx.subscribe();
    let mut buf = vec![0u8; BUF_SIZE].into_boxed_slice();
    let mut parser = DirParser::new(side);
    loop {
        let n = match rd.read(&mut buf).await {
            Ok(0) => {
                let _ = wr.shutdown().await;
                return Outcome::Eof;
            }
            Ok(n) => n,
            Err(_) => return Outcome::Error,
        };
        // Black hole: hold what was read until the stall is lifted.
        if stall.wait_for(|stalled| !*stalled).await.is_err() {
            return Outcome::Error;
        }
        let data = &buf[..n];
        let plan = parser.plan(data, conn, shared);
        if plan.dead || (plan.kill.is_none() && conn.killed.load(Ordering::Acquire)) {
            // Someone else killed the connection; the supervisor tears it down.
            std::future::pending::<()>().await;
        }
        let out_bytes = (plan.prefix_len + plan.end) as u64;
        // Count when handed to the outbound socket, so an observer that has
        // received a frame always sees it counted.
        conn.frames.fetch_add(plan.frames, Ordering::AcqRel);
        conn.bytes.fetch_add(out_bytes, Ordering::AcqRel);
        shared.frames.fetch_add(plan.frames, Ordering::AcqRel);
        shared.bytes.fetch_add(out_bytes, Ordering::AcqRel);
        let prefix = &plan.prefix[..plan.prefix_len];
        let body = &data[..plan.end];
        if let Some(reason) = plan.kill {
            shared.record_kill(conn, reason);
            // Hand over the frames approved before the killed one, then die.
            let _ = tokio::time::timeout(KILL_FLUSH_TIMEOUT, async {
                if !prefix.is_empty() {
                    wr.write_all(prefix).await?;
                }
                wr.write_all(body).await
            })
            .await;
            return Outcome::Killed;
        }
        if !prefix.is_empty() && wr.write_all(prefix).await.is_err() {
            return Outcome::Error;
        }
        if !body.is_empty() && wr.write_all(body).await.is_err() {
            return Outcome::Error;
        }
    }
}

// ---------------------------------------------------------------------------
// Incremental HTTP head / RFC 6455 frame tracking
// ---------------------------------------------------------------------------

/// What to do with one buffer read from a direction's source.
#[derive(Debug, Default)]
struct Plan {
    /// Header bytes held back from the previous read, approved now; written
    /// before `data[..end]`.
    prefix: [u8; MAX_FRAME_HEADER],
    prefix_len: usize,
    /// `data[..end]` is approved for forwarding.
    end: usize,
    /// Frames completed within the approved bytes.
    frames: u64,
    /// Kill the connection after forwarding the approved bytes.
    kill: Option<KillReason>,
    /// The connection was killed elsewhere: forward nothing.
    dead: bool,
}

#[derive(Debug)]
enum Mode {
    Http(HttpScan),
    Frames,
    Raw,
}

/// Finds the end (`\r\n\r\n`) of an HTTP head without buffering it.
#[derive(Debug)]
struct HttpScan {
    response: bool,
    /// How much of `\r\n\r\n` has just been seen.
    matched: u8,
    seen: usize,
    status: [u8; 12],
    status_len: usize,
}

impl HttpScan {
    fn new(response: bool) -> Self {
        HttpScan {
            response,
            matched: 0,
            seen: 0,
            status: [0; 12],
            status_len: 0,
        }
    }

    /// Feed one byte; true at the end of the head.
    fn push(&mut self, b: u8) -> bool {
        if let Some(slot) = self.status.get_mut(self.status_len) {
            *slot = b;
            self.status_len += 1;
        }
        self.seen += 1;
        self.matched = match (b, self.matched) {
            (b'\r', 2) => 3,
            (b'\r', _) => 1,
            (b'\n', 1) => 2,
            (b'\n', 3) => 4,
            _ => 0,
        };
        self.matched == 4
    }

    /// `HTTP/x.y 101`: the upgrade was accepted.
    fn switching_protocols(&self) -> bool {
        self.status_len == self.status.len()
            && self.status.starts_with(b"HTTP/")
            && &self.status[9..12] == b"101"
    }
}

/// Tracks frame boundaries of one direction.
#[derive(Debug)]
struct DirParser {
    mode: Mode,
    hdr: [u8; MAX_FRAME_HEADER],
    hdr_len: usize,
    in_payload: bool,
    remaining: u64,
}

fn header_len(b1: u8) -> usize {
    let ext = match b1 & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if b1 & 0x80 != 0 { 4 } else { 0 };
    2 + ext + mask
}

fn payload_len(hdr: &[u8; MAX_FRAME_HEADER]) -> u64 {
    match hdr[1] & 0x7f {
        126 => u64::from(u16::from_be_bytes([hdr[2], hdr[3]])),
        127 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(&hdr[2..10]);
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    }
}

impl DirParser {
    fn new(side: Side) -> Self {
        DirParser {
            mode: Mode::Http(HttpScan::new(side == Side::Server)),
            hdr: [0; MAX_FRAME_HEADER],
            hdr_len: 0,
            in_payload: false,
            remaining: 0,
        }
    }

    /// Bytes of the frame header needed so far (2 until the length byte is
    /// known).
    fn hdr_need(&self) -> usize {
        if self.hdr_len < 2 {
            2
        } else {
            header_len(self.hdr[1])
        }
    }

    /// Walk `data`, approving bytes up to the first frame that must not be
    /// forwarded. A trailing partial frame header is held back (in `hdr`)
    /// until the decision on its frame can be made.
    fn plan(&mut self, data: &[u8], conn: &Conn, shared: &Shared) -> Plan {
        let mut plan = Plan::default();
        // Header bytes carried over from the previous read (not forwarded yet).
        let mut carried = match self.mode {
            Mode::Frames if !self.in_payload => self.hdr_len,
            _ => 0,
        };
        let mut pos = 0;
        while pos < data.len() {
            match &mut self.mode {
                Mode::Raw => {
                    conn.admit_bytes(data.len() - pos);
                    pos = data.len();
                    plan.end = pos;
                }
                Mode::Http(scan) => {
                    let start = pos;
                    let mut done = false;
                    while pos < data.len() && !done {
                        done = scan.push(data[pos]);
                        pos += 1;
                    }
                    conn.admit_bytes(pos - start);
                    plan.end = pos;
                    if done {
                        self.mode = if scan.response && !scan.switching_protocols() {
                            Mode::Raw
                        } else {
                            Mode::Frames
                        };
                    } else if scan.seen > MAX_HTTP_HEAD {
                        self.mode = Mode::Raw;
                    }
                }
                Mode::Frames if self.in_payload => {
                    let avail = (data.len() - pos) as u64;
                    let take = self.remaining.min(avail) as usize;
                    pos += take;
                    self.remaining -= take as u64;
                    plan.end = pos;
                    if self.remaining == 0 {
                        self.in_payload = false;
                        plan.frames += 1;
                    }
                }
                Mode::Frames => {
                    while pos < data.len() && self.hdr_len < self.hdr_need() {
                        self.hdr[self.hdr_len] = data[pos];
                        self.hdr_len += 1;
                        pos += 1;
                    }
                    if self.hdr_len < self.hdr_need() {
                        // Partial header at the end of the buffer: hold it.
                        break;
                    }
                    let payload = payload_len(&self.hdr);
                    let frame_len = (self.hdr_len as u64).saturating_add(payload);
                    match conn.admit_frame(shared, frame_len) {
                        Admit::Forward => {}
                        Admit::Kill(reason) => {
                            plan.kill = Some(reason);
                            return plan;
                        }
                        Admit::Dead => {
                            plan.dead = true;
                            return plan;
                        }
                    }
                    if carried > 0 {
                        plan.prefix[..carried].copy_from_slice(&self.hdr[..carried]);
                        plan.prefix_len = carried;
                        carried = 0;
                    }
                    self.hdr_len = 0;
                    plan.end = pos;
                    if payload == 0 {
                        plan.frames += 1;
                    } else {
                        self.in_payload = true;
                        self.remaining = payload;
                    }
                }
            }
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared_with(config: Config) -> Shared {
        let (stall_tx, _) = watch::channel(false);
        Shared {
            config,
            upstream: SocketAddr::from(([127, 0, 0, 1], 9)),
            enabled: AtomicBool::new(true),
            closed: AtomicBool::new(false),
            stall_tx,
            connections: AtomicU64::new(0),
            kills_total: AtomicU64::new(0),
            frames: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            kills: Mutex::new(Vec::new()),
            live: Mutex::new(HashMap::new()),
        }
    }

    fn frame(payload_len: usize, masked: bool) -> Vec<u8> {
        let mut f = vec![0x82];
        let m = if masked { 0x80 } else { 0 };
        if payload_len < 126 {
            f.push(m | payload_len as u8);
        } else if payload_len <= 0xffff {
            f.push(m | 126);
            f.extend_from_slice(&(payload_len as u16).to_be_bytes());
        } else {
            f.push(m | 127);
            f.extend_from_slice(&(payload_len as u64).to_be_bytes());
        }
        if masked {
            f.extend_from_slice(&[1, 2, 3, 4]);
        }
        f.extend((0..payload_len).map(|i| i as u8));
        f
    }

    /// Feed `stream` in chunks, returning (forwarded bytes, frames, kill).
    fn run(
        side: Side,
        stream: &[u8],
        chunks: &mut dyn FnMut() -> usize,
        shared: &Shared,
        conn: &Conn,
    ) -> (Vec<u8>, u64, Option<KillReason>) {
        let mut parser = DirParser::new(side);
        let mut out = Vec::new();
        let mut frames = 0;
        let mut pos = 0;
        while pos < stream.len() {
            let n = chunks().clamp(1, stream.len() - pos);
            let plan = parser.plan(&stream[pos..pos + n], conn, shared);
            out.extend_from_slice(&plan.prefix[..plan.prefix_len]);
            out.extend_from_slice(&stream[pos..pos + plan.end]);
            frames += plan.frames;
            if plan.kill.is_some() {
                return (out, frames, plan.kill);
            }
            pos += n;
        }
        (out, frames, None)
    }

    const UPGRADE: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n";

    fn sample_stream() -> (Vec<u8>, usize) {
        let mut s = UPGRADE.to_vec();
        let sizes = [0, 1, 125, 126, 127, 300, 65535, 65536, 70000, 5];
        for (i, &n) in sizes.iter().enumerate() {
            s.extend(frame(n, i % 2 == 0));
        }
        (s, sizes.len())
    }

    #[test]
    fn counts_frames_under_any_chunking() {
        let (stream, n_frames) = sample_stream();
        for chunk in [1usize, 2, 3, 7, 13, 14, 100, 4096, 1 << 20] {
            let shared = shared_with(Config::default());
            let conn = Conn::new(0, &shared.config);
            let (out, frames, kill) = run(Side::Server, &stream, &mut || chunk, &shared, &conn);
            assert_eq!(out, stream, "chunk {chunk}");
            assert_eq!(frames, n_frames as u64, "chunk {chunk}");
            assert_eq!(kill, None);
        }
    }

    #[test]
    fn kill_drops_the_threshold_frame_only() {
        let (stream, _) = sample_stream();
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..50 {
            let config = Config {
                kill_every_frames: Some(4),
                ..Config::default()
            };
            let shared = shared_with(config);
            let conn = Conn::new(3, &shared.config);
            let t = lock(&conn.schedule).frame_threshold.unwrap_or(0);
            assert!((2..=6).contains(&t));
            let (out, frames, kill) = run(
                Side::Server,
                &stream,
                &mut || rng.random_range(1..20_000),
                &shared,
                &conn,
            );
            assert_eq!(kill, Some(KillReason::FrameSchedule));
            assert_eq!(frames, t - 1);
            // Exactly the upgrade and the first t-1 frames were forwarded.
            let mut expect = UPGRADE.to_vec();
            let sizes = [0, 1, 125, 126, 127, 300, 65535, 65536, 70000, 5];
            for (i, &n) in sizes.iter().enumerate().take((t - 1) as usize) {
                expect.extend(frame(n, i % 2 == 0));
            }
            assert_eq!(out, expect);
        }
    }

    #[test]
    fn non_upgrade_response_is_raw() {
        let shared = shared_with(Config {
            kill_every_frames: Some(1),
            ..Config::default()
        });
        let conn = Conn::new(0, &shared.config);
        let mut stream = b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec();
        stream.extend(frame(10, false));
        let (out, frames, kill) = run(Side::Server, &stream, &mut || 5, &shared, &conn);
        assert_eq!(out, stream);
        assert_eq!((frames, kill), (0, None));
    }

    #[test]
    fn garbage_never_panics() {
        let mut rng = StdRng::seed_from_u64(42);
        for round in 0..300 {
            let shared = shared_with(Config {
                kill_probability: 0.01,
                kill_every_bytes: Some(5000),
                ..Config::default()
            });
            let conn = Conn::new(round, &shared.config);
            let len = rng.random_range(0..5000);
            let mut stream: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            if round % 2 == 0 {
                let mut s = b"GET / HTTP/1.1\r\n\r\n".to_vec();
                s.append(&mut stream);
                stream = s;
            }
            let side = if round % 3 == 0 {
                Side::Server
            } else {
                Side::Client
            };
            let (out, _, kill) = run(
                side,
                &stream,
                &mut || rng.random_range(1..64),
                &shared,
                &conn,
            );
            if kill.is_none() {
                // Everything but a trailing partial header was forwarded.
                assert!(stream.len() - out.len() < MAX_FRAME_HEADER);
            }
            assert!(stream.starts_with(&out));
        }
        // An endless HTTP head falls back to raw forwarding.
        let shared = shared_with(Config::default());
        let conn = Conn::new(0, &shared.config);
        let stream = vec![b'a'; MAX_HTTP_HEAD + 10];
        let (out, _, _) = run(Side::Client, &stream, &mut || 1000, &shared, &conn);
        assert_eq!(out, stream);
    }

    #[test]
    fn jitter_stays_in_range() {
        for n in [1u64, 2, 3, 10, 1000, u64::MAX] {
            for r in [0, 1, u64::MAX / 2, u64::MAX] {
                let t = jitter(n, r);
                assert!(
                    t >= (n / 2).max(1) && t <= n.saturating_add(n / 2),
                    "{n} {r} {t}"
                );
            }
        }
        assert_eq!(jitter(10, 0), 5);
        assert_eq!(jitter(10, u64::MAX), 15);
    }
}
