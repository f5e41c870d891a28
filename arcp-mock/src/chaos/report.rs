//! What a proxy did: [`ChaosReport`] and its [`Kill`]s.

/// What a [`ChaosProxy`](crate::ChaosProxy) has done, as returned by [`ChaosProxyHandle::report`](crate::ChaosProxyHandle::report).
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

/// One connection killed by a [`ChaosProxy`](crate::ChaosProxy).
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

/// Why a [`ChaosProxy`](crate::ChaosProxy) killed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KillReason {
    /// The [`kill_every_frames`](crate::ChaosProxyBuilder::kill_every_frames) threshold was reached.
    FrameSchedule,
    /// The [`kill_every_bytes`](crate::ChaosProxyBuilder::kill_every_bytes) threshold was reached.
    ByteSchedule,
    /// The per-frame [`kill_probability`](crate::ChaosProxyBuilder::kill_probability) draw hit.
    Probability,
    /// [`ChaosProxyHandle::kill_all`](crate::ChaosProxyHandle::kill_all) was called.
    Manual,
}
