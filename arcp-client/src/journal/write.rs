//! [`JournalWrite`]: one change of a batch given to
//! [`Journal::apply`](super::Journal::apply).

use std::time::SystemTime;

use arcp_types::IdempotencyKey;

#[cfg(doc)]
use super::{Journal, JournalState};
use super::{JournalEntry, JournalOutcome};

/// One write of a batch given to [`Journal::apply`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum JournalWrite {
    /// Record a call before its first send (its state is
    /// [`JournalState::Prepared`]); replaces any record with the same key.
    Prepare(JournalEntry),
    /// An attempt was handed to the transport.
    Sent {
        /// The call's key.
        key: IdempotencyKey,
        /// Requests sent so far (the record keeps the highest count seen).
        attempts: u32,
        /// When.
        at: SystemTime,
    },
    /// The runtime bound the call to a job.
    Accepted {
        /// The call's key.
        key: IdempotencyKey,
        /// The job.
        job_id: String,
        /// When.
        at: SystemTime,
    },
    /// The call ended with a terminal outcome.
    Terminal {
        /// The call's key.
        key: IdempotencyKey,
        /// What it ended with.
        outcome: JournalOutcome,
        /// When.
        at: SystemTime,
    },
    /// Forget the record.
    Remove {
        /// The call's key.
        key: IdempotencyKey,
    },
    /// This client stopped driving the call without learning its outcome
    /// (the deadline passed, the caller dropped it, the outcome was
    /// unavailable): the record stays unfinished (silence is not success)
    /// and a shared store lets any worker's recovery claim it at once
    /// instead of after the lease. A journal without owners ignores it.
    Release {
        /// The call's key.
        key: IdempotencyKey,
    },
}
