//! [`LateWrites`]: the keys of writes the store did not answer, which may
//! still land, at any later time, over whatever the key's record is then.
//!
//! A store that did not answer a commit may have committed it, or may
//! commit it later (a database that goes on after the connection carrying
//! its answer was lost). An insert of an absent key is harmless once a
//! record is there; every other write is not:
//!
//! - a `Prepare` replaces the record whole: landing after the call's "did
//!   not run" terminal, it makes the record unfinished again, for a
//!   recovery to send. No "did not run" of such a key is taken as durable
//!   ([`LateWrites::may_reopen`]).
//! - a `Terminal`, `Sent`, `Accepted` or `Remove` changes the record of
//!   whichever call holds the key by then: a late "did not run" over the
//!   next call's record (which ran) would prove the key unused to the call
//!   after. A prepare that finds a "did not run" record of such a key is in
//!   doubt ([`LateWrites::may_overwrite`]).
//!
//! Kept for the writer's life (nothing tells it a late write will never
//! land), bounded: past [`MAX_LANDING`] keys it doubts every key. Another
//! process on the same store knows nothing of them: a shared store must
//! order a late commit before any later batch touching its keys (the
//! contract of [`Journal::apply`](crate::journal::Journal::apply), which
//! SQLite and PostgreSQL keep).

use std::collections::HashSet;

use arcp_types::IdempotencyKey;
use tracing::warn;

use crate::journal::JournalWrite;

/// Keys with writes that may land late, at most, in each of the writer's
/// sets ([`LateWrites`], and the prepares whose insert may land): past it a
/// set gives up its keys: [`LateWrites`] then doubts every key; the
/// inserts' set forgets its marks (a key with no record proves nothing
/// anyway).
pub(super) const MAX_LANDING: usize = 65_536;

/// See the [module](self).
#[derive(Debug, Default)]
pub(super) struct LateWrites {
    /// Keys with a `Prepare` that may land late.
    reopening: HashSet<IdempotencyKey>,
    /// Keys with any other write that may land late.
    overwriting: HashSet<IdempotencyKey>,
    /// Past the bound: every key is in doubt.
    every_key: bool,
}

impl LateWrites {
    /// `writes` went out in a commit the store did not answer.
    pub(super) fn note(&mut self, writes: &[JournalWrite]) {
        for w in writes {
            let (key, reopens) = match w {
                JournalWrite::Prepare(record) => (&record.key, true),
                JournalWrite::Sent { key, .. }
                | JournalWrite::Accepted { key, .. }
                | JournalWrite::Terminal { key, .. }
                | JournalWrite::Remove { key } => (key, false),
                // Only lets other workers claim an unfinished record.
                JournalWrite::Release { .. } => continue,
            };
            let known = if reopens {
                self.reopening.contains(key)
            } else {
                self.overwriting.contains(key)
            };
            if self.every_key || known {
                continue;
            }
            if self.reopening.len() + self.overwriting.len() >= MAX_LANDING {
                warn!(
                    keys = MAX_LANDING,
                    "journal: too many writes may still land late; from now on no \"did not \
                     run\" is taken as durable"
                );
                self.reopening = HashSet::new();
                self.overwriting = HashSet::new();
                self.every_key = true;
                return;
            }
            if reopens {
                self.reopening.insert(key.clone());
            } else {
                self.overwriting.insert(key.clone());
            }
        }
    }

    /// Whether a late `Prepare` of `key` may still make its record
    /// unfinished again.
    pub(super) fn may_reopen(&self, key: &IdempotencyKey) -> bool {
        self.every_key || self.reopening.contains(key)
    }

    /// Whether any late write of `key` may still change its record.
    pub(super) fn may_overwrite(&self, key: &IdempotencyKey) -> bool {
        self.may_reopen(key) || self.overwriting.contains(key)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::journal::JournalEntry;

    #[test]
    fn prepares_reopen_other_writes_overwrite_releases_neither() {
        let (p, t, r) = (
            IdempotencyKey::new(),
            IdempotencyKey::new(),
            IdempotencyKey::new(),
        );
        let mut late = LateWrites::default();
        late.note(&[
            JournalWrite::Prepare(JournalEntry::new(
                p.clone(),
                "refund",
                "{}",
                arcp_types::new_trace_id(),
                Duration::from_secs(1),
            )),
            JournalWrite::Sent {
                key: t.clone(),
                attempts: 1,
                at: SystemTime::now(),
            },
            JournalWrite::Release { key: r.clone() },
        ]);
        assert!(late.may_reopen(&p) && late.may_overwrite(&p));
        assert!(!late.may_reopen(&t) && late.may_overwrite(&t));
        assert!(!late.may_reopen(&r) && !late.may_overwrite(&r));
    }
}
