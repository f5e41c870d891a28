//! Whether a call's tool ran: part of the error leaf.

use std::fmt;

/// Whether a call's tool ran, as far as the client can prove. One rule
/// decides it for every outcome ([`Error::execution`](crate::Error::execution)):
///
/// - [`Execution::NotRun`] only when proven: nothing reached the runtime, or
///   every request that did was refused before acceptance (answered, with no
///   job), or the key belongs to another intent. The runtime executed this
///   call zero times, ever: re-issuing the work, even under a new key, runs
///   it once.
/// - [`Execution::Ran`]: the runtime reported the call's outcome (a result,
///   a tool error of its job, a cancellation).
/// - [`Execution::MayHaveRun`]: a request may have reached the runtime and
///   its outcome is unknown. It ran at most once; retry later with the same
///   key (and read the job id) to learn the outcome without running it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Execution {
    /// Proven not to have run.
    NotRun,
    /// Ran; the outcome is known.
    Ran,
    /// May have run, at most once; the outcome is unknown.
    MayHaveRun,
}

impl Execution {
    /// A stable lower-case name (`not_run`, `ran`, `may_have_run`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Execution::NotRun => "not_run",
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
