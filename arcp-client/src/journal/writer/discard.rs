//! A discard ([`Client::discard`](crate::Client::discard)): the write
//! [`JournalEntry::discard_write`](crate::journal::JournalEntry::discard_write)
//! names, under the store's ownership rules.

use std::time::SystemTime;

use arcp_types::IdempotencyKey;

use super::state::Writer;
use crate::journal::{Journal, JournalError, JournalErrorKind, JournalWrite};

impl Writer {
    /// Discards the record of `key`; whether there was one.
    pub(super) fn discard(
        &mut self,
        journal: &dyn Journal,
        key: &IdempotencyKey,
    ) -> Result<bool, JournalError> {
        let Some(record) = journal.get(key)? else {
            return Ok(false);
        };
        let Some(write) = record.discard_write(SystemTime::now()) else {
            return Ok(true);
        };
        // Only its owner ends an unfinished call: this client takes it over
        // if nobody else holds it (its owner's lease lapsed).
        if !record.is_terminal() && !journal.acquire(key)? {
            return Err(self.not_discarded(key));
        }
        let removes = matches!(write, JournalWrite::Remove { .. });
        let writes = [write];
        if let Err(e) = journal.apply(&writes) {
            // It may land later, over a later call's record.
            if e.kind == JournalErrorKind::Unavailable {
                self.late_writes.note(&writes);
            }
            return Err(e);
        }
        if journal.take_fenced().contains(key) {
            return Err(self.not_discarded(key));
        }
        if removes {
            self.records = self.records.saturating_sub(1);
        }
        Ok(true)
    }

    fn not_discarded(&self, key: &IdempotencyKey) -> JournalError {
        JournalError::new(
            JournalErrorKind::Fenced,
            &self.shared.location,
            format!("call {key}: another live worker drives it; it is not discarded"),
        )
    }
}
