//! What discarding a record writes ([`JournalEntry::discard_write`]): the
//! rule shared by [`Client::discard`](crate::Client::discard) and the CLI's
//! `arcp journal discard`.
//!
//! A discard never deletes a record: the journal keeps what the record
//! proved of the key. Deleted, the record of a call that ran, or may have,
//! would leave the key's next call with nothing to say but "not sent"
//! where it may have run; and a record read before the delete may have
//! been replaced meanwhile by another worker's call of the key (a shared
//! store), whose outcome would be lost. So:
//!
//! - a record that proves the call did not run is left as it is: it is
//!   final, never recovered, and never answers a later call of the key
//!   (which is sent as a new call);
//! - any other is ended "outcome unknown", which is never recovered and
//!   never answered from the journal: a later call of the key is sent
//!   again, in doubt from the start (the runtime answers it from its memory
//!   of the key), and once the record is older than the runtime's key
//!   retention it is answered "outcome unknown".
//!
//! Retention purges both kinds like any other terminal record.

use std::time::SystemTime;

use super::{JournalEntry, JournalOutcome, JournalState, JournalWrite};

impl JournalEntry {
    /// The write that discards this record, or `None` when there is nothing
    /// to change (see the rule in [`Client::discard`](crate::Client::discard)):
    ///
    /// - a record that proves the call did not run (never accepted, refused
    ///   before acceptance or as invalid, or its key bound to another
    ///   intent), or one already ended "outcome unknown": `None`;
    /// - an unfinished record: [`JournalWrite::Terminal`] with
    ///   [`JournalOutcome::OutcomeUnknown`] (a shared store accepts it only
    ///   from the call's owner);
    /// - a record of the call's outcome (a result, a tool error, a
    ///   cancellation): a [`JournalWrite::Prepare`] replacing it with the same
    ///   record ended [`JournalOutcome::OutcomeUnknown`].
    ///
    /// `at` is when the record is discarded.
    pub fn discard_write(&self, at: SystemTime) -> Option<JournalWrite> {
        let was = match &self.state {
            JournalState::Terminal(JournalOutcome::OutcomeUnknown { .. }) => return None,
            JournalState::Terminal(outcome) if outcome.proves_not_run() => return None,
            JournalState::Terminal(_) => "it had ended with the tool's outcome",
            JournalState::Prepared => "it was prepared and may have been sent",
            JournalState::Sent => "it was sent",
            JournalState::Accepted { .. } => "the runtime had accepted it",
        };
        let outcome = JournalOutcome::OutcomeUnknown {
            job_id: self.job_id().map(str::to_owned),
            reason: format!(
                "discarded ({was}): not recovered or answered from the journal; the tool may \
                 have run"
            ),
            attempts: self.attempts.max(self.state_attempts()),
        };
        Some(if self.is_terminal() {
            let mut ended = self.clone();
            ended.state = JournalState::Terminal(outcome);
            ended.updated_at = at;
            JournalWrite::Prepare(ended)
        } else {
            JournalWrite::Terminal {
                key: self.key.clone(),
                outcome,
                at,
            }
        })
    }

    /// Requests sent, as recorded with a terminal outcome.
    fn state_attempts(&self) -> u32 {
        match &self.state {
            JournalState::Terminal(outcome) => outcome.attempts(),
            _ => 0,
        }
    }
}
