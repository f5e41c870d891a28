//! What a client holds right now ([`ClientStats`], `Client::stats`): the
//! counts that show nothing outlives its call.
//!
//! A leaf: imports no other module of the crate.

/// A snapshot of what a client holds, from [`Client::stats`](crate::Client::stats):
/// everything here belongs to calls still in flight, or is bounded (the
/// outcome cache), so after all calls ended the first two are zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Logical calls the connection holds (queued, sent or accepted).
    pub calls: usize,
    /// Requests on the connection awaiting an answer (submits, cancels,
    /// subscribes).
    pub requests: usize,
    /// Terminal outcomes cached by key (bounded by the cache's capacity).
    pub cached_outcomes: usize,
}
