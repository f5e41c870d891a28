//! Whether a call's tool ran: part of the error leaf.

use std::fmt;

/// Whether a call's tool ran, as far as the client can prove. One rule
/// decides it for every outcome ([`Error::execution`](crate::Error::execution)):
///
/// - [`Execution::NotRun`] only when proven, and then it is a claim about
///   the key, not only this call: the runtime refused the request in its
///   pre-acceptance shape (answered, with no job), or the key belongs to
///   another intent (the runtime said so, or the journal recorded its
///   answer for that intent), or the key was generated for this call and
///   nothing of it was sent. A journal never proves a supplied key unused
///   (the key may run through clients it does not see). The runtime
///   executed this intent under this key zero times, ever: re-issuing the
///   work, even under a new key, runs it once.
/// - [`Execution::NotSent`]: this call ran nothing (it sent nothing, or
///   what it sent was refused before the runtime could run it), but the key
///   was supplied by the caller (or came from an earlier call), so an
///   earlier call with the key, in this process or another, may have run.
///   Retry with the **same key**: the runtime runs it at most once, or
///   answers with the earlier call's outcome.
/// - [`Execution::Ran`]: the runtime reported the call's outcome (a result,
///   a tool error of its job, a cancellation).
/// - [`Execution::MayHaveRun`]: a request may have reached the runtime and
///   its outcome is unknown. It ran at most once; retry later with the same
///   key (and read the job id) to learn the outcome without running it again.
///
/// The enum is exhaustive on purpose: these four classes are the whole rule,
/// so a `match` over them needs no wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Execution {
    /// Proven not to have run under this key.
    NotRun,
    /// This call ran nothing, but its key was supplied: an earlier call
    /// with it may have run. Retry with the same key.
    NotSent,
    /// Ran; the outcome is known.
    Ran,
    /// May have run, at most once; the outcome is unknown.
    MayHaveRun,
}

impl Execution {
    /// A stable lower-case name (`not_run`, `not_sent`, `ran`,
    /// `may_have_run`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Execution::NotRun => "not_run",
            Execution::NotSent => "not_sent",
            Execution::Ran => "ran",
            Execution::MayHaveRun => "may_have_run",
        }
    }
}

impl fmt::Display for Execution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
