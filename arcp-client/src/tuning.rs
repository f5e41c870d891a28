//! Performance and memory knobs: what a client trades between CPU time,
//! latency and memory, with defaults that suit most programs. Nothing here
//! changes what a call does or what its outcome says; only how fast it gets
//! there and how much the client holds on the way.
//!
//! ```no_run
//! # async fn demo() -> Result<(), arcp_sdk::Error> {
//! use std::time::Duration;
//! use arcp_sdk::{tuning::Tuning, Client};
//!
//! let client = Client::builder("ws://127.0.0.1:7777/arcp")
//!     // Never poll for a reply: a busy host would rather sleep.
//!     .tuning(Tuning::new().spin_limit(Duration::ZERO).event_buffer(1024))
//!     .connect()
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! A leaf: imports no other module of the crate.

use std::time::Duration;

/// A set of performance and memory knobs for
/// [`ClientBuilder::tuning`](crate::ClientBuilder::tuning). A knob left
/// unset keeps its default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "tuning does nothing until given to ClientBuilder::tuning"]
pub struct Tuning {
    pub(crate) spin_limit: Option<Duration>,
    pub(crate) event_buffer: Option<usize>,
    pub(crate) event_buffer_bytes: Option<usize>,
    pub(crate) outcome_cache: Option<(usize, Duration)>,
    pub(crate) outcome_cache_bytes: Option<usize>,
}

impl Tuning {
    /// Every knob at its default.
    pub fn new() -> Self {
        Tuning::default()
    }

    /// Over WebSocket, the longest the connection task keeps polling for
    /// the reply to the only call in flight instead of sleeping (default
    /// 100 us; `Duration::ZERO` turns it off). It polls only while recent
    /// lone calls have ended sooner than this, for up to twice their
    /// usual time: a runtime that answers within microseconds (on the same
    /// host or LAN) answers a lone call up to twice as fast, since a
    /// sleeping thread (above all on a virtual machine) is slow to wake.
    /// Several calls at once never spin, and against a runtime slower than
    /// the limit only the first call after faster ones does. The cost is
    /// that CPU time: at most this long per call sent, and only while the
    /// call waits.
    pub fn spin_limit(mut self, limit: Duration) -> Self {
        self.spin_limit = Some(limit);
        self
    }

    /// Events buffered per call for
    /// [`Invocation::events`](crate::Invocation::events) (default 256, at
    /// least 1).
    pub fn event_buffer(mut self, n: usize) -> Self {
        self.event_buffer = Some(n.max(1));
        self
    }

    /// The most bytes of events a watched call buffers for its watcher
    /// (default 4 MiB), besides [`event_buffer`](Self::event_buffer)'s
    /// count. Events past either bound are dropped while the watcher lags
    /// (one event is always taken into an empty buffer).
    pub fn event_buffer_bytes(mut self, bytes: usize) -> Self {
        self.event_buffer_bytes = Some(bytes);
        self
    }

    /// Capacity and time-to-live of the cache of terminal outcomes by key
    /// (default 1024 entries, 10 minutes). A repeated call with a cached key
    /// is answered locally, even against runtimes that replay only
    /// `job.accepted`. Only the outcomes of keys a caller names are cached
    /// (supplied with `idempotency_key`, or used by an earlier call): of a
    /// call under a generated key only its binding is kept (the intent and
    /// the job), and a repeat under that key is answered by the runtime.
    /// A capacity of 0 disables the cache.
    ///
    /// What the cache holds is also what lets the client refuse another
    /// intent under a key it saw, and tell a runtime's unmarked replay on
    /// the same session from a fresh run. Past the cache (its TTL or
    /// capacity), that is the runtime's to say: against a runtime that
    /// answers another intent under a known key with the first intent's
    /// stored outcome (the PHP SDKs' runtimes), such a call gets that
    /// outcome, and against one that replays a key's acceptance unmarked
    /// (Python 1.1.3) a repeat on the same session reads `replayed: false`.
    /// Give each intent a key of its own, and keep the TTL at least as long
    /// as callers repeat keys.
    pub fn outcome_cache(mut self, capacity: usize, ttl: Duration) -> Self {
        self.outcome_cache = Some((capacity, ttl));
        self
    }

    /// The most bytes of outcomes (results and errors, as held) the
    /// outcome cache keeps (default 16 MiB), besides its entry count
    /// ([`outcome_cache`](Self::outcome_cache)); the oldest go first. An
    /// outcome larger than this is not cached. The bindings kept for calls
    /// under generated keys (about 200 bytes each) are held within as much
    /// again.
    pub fn outcome_cache_bytes(mut self, bytes: usize) -> Self {
        self.outcome_cache_bytes = Some(bytes);
        self
    }
}
