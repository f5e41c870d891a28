//! [`RecoveryMode`]: whether a client re-drives unfinished calls by
//! itself or leaves it to the caller.

/// Whether a client re-drives unfinished calls by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RecoveryMode {
    /// The caller decides: [`Client::recover`](crate::Client::recover)
    /// returns the unfinished calls as [`Invocation`](crate::Invocation)s
    /// to await. The default.
    #[default]
    Manual,
    /// On connect, the client re-drives every unfinished call in the
    /// background, in one [`RecoveryPass`](crate::RecoveryPass) (at most 64
    /// at a time, each once: one whose outcome stays unknown stays
    /// unfinished for a later recovery); their outcomes land in the journal
    /// ([`Client::lookup`](crate::Client::lookup)). The background task
    /// holds a clone of the client, so the connection stays open until the
    /// recovered calls end (each is bounded by its deadline).
    Automatic,
}
