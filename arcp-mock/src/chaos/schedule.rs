//! The kill schedule: its settings ([`Config`]), the state the proxy shares
//! with its tasks, and each connection's schedule, seeded from
//! `(seed, connection)` so that it does not depend on other connections'
//! timing.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use tokio::sync::{watch, Notify};
use tokio::task::AbortHandle;

use super::report::{Kill, KillReason};

/// The schedule's settings, as the builder sets them.
#[derive(Debug, Clone, Default)]
pub(super) struct Config {
    pub(super) seed: u64,
    pub(super) kill_every_frames: Option<u64>,
    pub(super) kill_every_bytes: Option<u64>,
    pub(super) kill_probability: f64,
    pub(super) spare_first_frames: u64,
    pub(super) max_kills: Option<u64>,
    pub(super) spare_connections: f64,
}

pub(super) struct Shared {
    pub(super) config: Config,
    pub(super) upstream: SocketAddr,
    pub(super) enabled: AtomicBool,
    pub(super) closed: AtomicBool,
    pub(super) stall_tx: watch::Sender<bool>,
    pub(super) connections: AtomicU64,
    pub(super) kills_total: AtomicU64,
    pub(super) frames: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) kills: Mutex<Vec<Kill>>,
    pub(super) live: Mutex<HashMap<u64, LiveConn>>,
}

pub(super) struct LiveConn {
    pub(super) conn: Arc<Conn>,
    pub(super) task: AbortHandle,
}

impl Shared {
    /// A proxy's state before its first connection: enabled, nothing
    /// counted.
    pub(super) fn new(config: Config, upstream: SocketAddr) -> Shared {
        let (stall_tx, _) = watch::channel(false);
        Shared {
            config,
            upstream,
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

    /// Claim one kill for `conn`, honouring `max_kills`. On success the
    /// connection is marked killed and nothing else may forward on it.
    pub(super) fn reserve_kill(&self, conn: &Conn) -> bool {
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

    pub(super) fn record_kill(&self, conn: &Conn, reason: KillReason) {
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
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Per-connection state shared by the two forwarding directions (and
/// `kill_all`).
pub(super) struct Conn {
    pub(super) id: u64,
    /// Frames handed to the outbound sockets, both directions.
    pub(super) frames: AtomicU64,
    /// Bytes handed to the outbound sockets, both directions.
    pub(super) bytes: AtomicU64,
    pub(super) killed: AtomicBool,
    pub(super) kill: Notify,
    pub(super) schedule: Mutex<Schedule>,
}

pub(super) struct Schedule {
    pub(super) rng: StdRng,
    pub(super) frame_threshold: Option<u64>,
    pub(super) byte_threshold: Option<u64>,
    /// Frames whose header has been seen (1-based ordinal of the last one).
    pub(super) started: u64,
    /// Bytes approved for forwarding so far.
    pub(super) admitted: u64,
}

pub(super) enum Admit {
    Forward,
    Kill(KillReason),
    /// The connection was killed by someone else: forward nothing more.
    Dead,
}

impl Conn {
    pub(super) fn new(id: u64, config: &Config) -> Self {
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
    pub(super) fn admit_bytes(&self, n: usize) {
        let mut s = lock(&self.schedule);
        s.admitted = s.admitted.saturating_add(n as u64);
    }

    /// Decide the fate of the next frame (of `frame_len` bytes, header
    /// included) before any of its bytes is forwarded.
    pub(super) fn admit_frame(&self, shared: &Shared, frame_len: u64) -> Admit {
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

pub(super) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Map `r` uniformly (up to negligible bias) into `[max(1, n/2), n + n/2]`.
pub(super) fn jitter(n: u64, r: u64) -> u64 {
    let lo = (n / 2).max(1);
    let hi = n.saturating_add(n / 2).max(lo);
    let span = u128::from(hi - lo) + 1;
    lo + ((u128::from(r) * span) >> 64) as u64
}
