//! A discard ([`Client::discard`](crate::Client::discard)): the write
//! [`JournalEntry::discard_write`](crate::journal::JournalEntry::discard_write)
//! names, under the store's ownership rules.

use std::time::SystemTime;

use arcp_types::IdempotencyKey;

use super::state::Writer;
use crate::journal::{Journal, JournalError, JournalErrorKind};

impl Writer {
    /// Discards the record of `key`; whether there was one.
    pub(super) fn discard(
        &mut self,
        journal: &dyn Journal,
        key: &IdempotencyKey,
    ) -> Result<bool, JournalError> {
        let mut record = journal.get(key)?;
        // Only its owner ends an unfinished call: this client takes it over
        // if nobody else holds it (its owner's lease lapsed). Refused, the
        // record is read again: it may have ended meanwhile (another
        // worker's discard, or its call's end).
        for last in [false, true] {
            let Some(current) = &record else {
                return Ok(false);
            };
            let Some(write) = current.discard_write(SystemTime::now()) else {
                return Ok(true);
            };
            if !current.is_terminal() && !journal.acquire(key)? {
                if last {
                    break;
                }
                record = journal.get(key)?;
                continue;
            }
            let writes = [write];
            if let Err(e) = journal.apply(&writes) {
                // It may land later, over a later call's record.
                if e.kind == JournalErrorKind::Unavailable {
                    self.late_writes.note(&writes);
                }
                return Err(e);
            }
            if !journal.take_fenced().contains(key) {
                return Ok(true);
            }
            break;
        }
        Err(JournalError::new(
            JournalErrorKind::Fenced,
            &self.shared.location,
            format!("call {key}: another live worker drives it; it is not discarded"),
        ))
    }
}
