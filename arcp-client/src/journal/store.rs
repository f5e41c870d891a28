//! The [`Journal`] trait: what a store implements, and the contract
//! (atomic, durable batches; one owner per unfinished call) that makes
//! recovery safe.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use arcp_types::IdempotencyKey;

#[cfg(doc)]
use super::JournalErrorKind;
use super::{JournalEntry, JournalError, JournalWrite, PurgeReport, Retention};

/// Storage for the invocation journal.
///
/// The client calls these methods from one dedicated writer thread per
/// client (never from an async task), so an implementation may block on
/// I/O. The client never shares one journal *instance* between two
/// clients; a store shared by several processes (a fleet) decides which
/// one drives each call through the ownership methods below.
///
/// The contract that makes recovery safe is on [`Journal::apply`]: when it
/// returns `Ok`, every write in the batch survives a crash of the process.
///
/// **Ownership (shared stores).** [`Journal::claim`], [`Journal::acquire`],
/// [`Journal::renew`], [`Journal::take_fenced`] and
/// [`JournalWrite::Release`] let a store shared by many workers give each
/// unfinished call one owner at a time. Their defaults describe a journal
/// held by one client (everything unfinished is this client's), so a
/// single-process implementation needs none of them.
pub trait Journal: Send + Sync + 'static {
    /// Applies `writes` in order, atomically (all or none) and durably.
    ///
    /// - [`JournalWrite::Prepare`] inserts the record, replacing any record
    ///   with the same key.
    /// - [`JournalWrite::Sent`] and [`JournalWrite::Accepted`] update a
    ///   record that is not terminal; a `Sent` never moves a record back
    ///   from `Accepted`. They are ignored when there is no such record.
    /// - [`JournalWrite::Terminal`] marks the record terminal (ignored when
    ///   there is no record).
    /// - [`JournalWrite::Remove`] deletes the record, if any.
    /// - [`JournalWrite::Release`] gives up this client's ownership of an
    ///   unfinished record (ignored without owners).
    ///
    /// A shared store also refuses (skips, and reports through
    /// [`Journal::take_fenced`]) a write for a call this client does not
    /// own; the rest of the batch still applies.
    ///
    /// **A batch that failed** may still commit (a database that goes on
    /// after the connection carrying its answer was lost), but a store
    /// shared by several clients must commit it, if ever, before any later
    /// batch of any client that reads or writes its keys: otherwise it could
    /// land over a record another client wrote since (a "did not run"
    /// reopened for a recovery to send). The client guards against its own
    /// late batches (a "did not run" of such a key is never taken as
    /// durable), not against another process's. The stores here keep the
    /// order: the SQLite journal ends its transaction before `apply`
    /// returns; the PostgreSQL journal holds the row locks of every record it reads or replaces until its
    /// commit ends, and fences transitions by the record's generation.
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError>;

    /// Applies `writes` as [`Journal::apply`] does and, in the same
    /// transaction after them, records each entry of `new` whose key has no
    /// record; returns, per entry of `new`, whether it was recorded. A key
    /// that has a record keeps it untouched (the client then reads it and
    /// decides). No write of `writes` concerns a key of `new`, and the keys
    /// of `new` are distinct.
    ///
    /// This is how the client records a burst of new calls: a store with a
    /// round trip per statement answers it with one insert that skips
    /// existing keys, instead of a read before the write. Default:
    /// [`Journal::get_many`], then [`Journal::apply`] with the absent
    /// entries (exact for a store with one writer).
    fn apply_and_insert_new(
        &self,
        writes: &[JournalWrite],
        new: &[JournalEntry],
    ) -> Result<Vec<bool>, JournalError> {
        let keys: Vec<IdempotencyKey> = new.iter().map(|e| e.key.clone()).collect();
        let existing: std::collections::HashSet<IdempotencyKey> =
            self.get_many(&keys)?.into_iter().map(|e| e.key).collect();
        let inserted: Vec<bool> = new.iter().map(|e| !existing.contains(&e.key)).collect();
        let mut all = writes.to_vec();
        all.extend(
            new.iter()
                .zip(&inserted)
                .filter(|(_, inserted)| **inserted)
                .map(|(e, _)| JournalWrite::Prepare(e.clone())),
        );
        self.apply(&all)?;
        Ok(inserted)
    }

    /// The record of `key`, if any.
    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError>;

    /// The records of `keys` that exist, in any order. The client reads a
    /// burst of prepares' keys with one call; a store with a round trip
    /// per read can answer them with one query. Default: [`Journal::get`]
    /// for each.
    fn get_many(&self, keys: &[IdempotencyKey]) -> Result<Vec<JournalEntry>, JournalError> {
        keys.iter()
            .filter_map(|k| self.get(k).transpose())
            .collect()
    }

    /// Up to `limit` records that are not terminal, oldest first.
    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError>;

    /// Applies the retention policy at `now`: deletes terminal records older
    /// than [`Retention::terminal_ttl`] and unfinished ones untouched for
    /// [`Retention::unfinished_ttl`], then the oldest terminal records while
    /// more than [`Retention::max_records`] remain. Unfinished records are
    /// never evicted to make room.
    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError>;

    /// Where the journal lives, for error messages (a path, `memory`, ...).
    fn location(&self) -> String {
        "journal".into()
    }

    /// Takes ownership of up to `limit` unfinished calls for
    /// [`Client::recover`](crate::Client::recover), oldest first: the calls
    /// this client may drive, except those in `driving` (this client drives
    /// them right now). A shared store returns only calls nobody else holds
    /// (their owner's lease expired) and makes them this client's, so
    /// running it again, or on two workers at once, claims each call once.
    /// Default: the unfinished records not in `driving` (a journal with one
    /// client owns everything in it).
    fn claim(
        &self,
        limit: usize,
        driving: &HashSet<IdempotencyKey>,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        let mut out = self.unfinished(limit.saturating_add(driving.len()))?;
        out.retain(|e| !driving.contains(&e.key));
        out.truncate(limit);
        Ok(out)
    }

    /// [`claim`](Journal::claim), of the calls after `after` in the claim
    /// order (first prepared, then key) only: the next batch of a
    /// [`RecoveryPass`](crate::RecoveryPass), which goes through the
    /// unfinished calls once, oldest first (a call whose outcome stayed
    /// unknown keeps its place, behind the pass). `None`: from the start.
    /// Default: `claim`, keeping the calls after `after`; a journal over
    /// more than a claim's calls that stay unfinished overrides it, else a
    /// pass ends at the first claim that brings none after `after` (the
    /// journals of this crate do).
    fn claim_after(
        &self,
        limit: usize,
        driving: &HashSet<IdempotencyKey>,
        after: Option<&ClaimPosition>,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        let mut out = self.claim(limit, driving)?;
        if let Some(after) = after {
            out.retain(|e| after.is_before(e));
        }
        Ok(out)
    }

    /// Whether this client may drive the unfinished call `key` (a caller
    /// re-issuing a recorded key): `true` when it already holds it or could
    /// take it over (an expired lease), `false` when another live worker
    /// owns it. Default `true`.
    fn acquire(&self, key: &IdempotencyKey) -> Result<bool, JournalError> {
        let _ = key;
        Ok(true)
    }

    /// How often the client calls [`Journal::renew`]; `None` (the default)
    /// for a journal without leases.
    fn lease_interval(&self) -> Option<Duration> {
        None
    }

    /// Extends the leases of the calls this client holds; returns the keys
    /// it found it no longer holds (another worker claimed them while this
    /// one was silent). The client stops driving those calls: they end
    /// with [`JournalErrorKind::Fenced`]. Default: nothing held, nothing
    /// lost.
    fn renew(&self) -> Result<Vec<IdempotencyKey>, JournalError> {
        Ok(Vec::new())
    }

    /// The keys whose writes [`Journal::apply`] refused since the last call
    /// because another owner holds them (fenced); the client stops driving
    /// them. Default: none.
    fn take_fenced(&self) -> Vec<IdempotencyKey> {
        Vec::new()
    }

    /// How long this client's authority over its calls lasts past a
    /// successful [`Journal::renew`] (counted from when the renewal began):
    /// when no renewal succeeds within it, the client stops driving every
    /// call it holds before another worker may claim them. `None` (the
    /// default): authority does not lapse (a journal without owners).
    fn lease_ttl(&self) -> Option<Duration> {
        None
    }
}

/// A place in the order [`Journal::claim`] hands calls out in (first
/// prepared, then key): where a recovery pass's last claim ended.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClaimPosition {
    /// When the call was first prepared ([`JournalEntry::created_at`]).
    pub created_at: SystemTime,
    /// The call's key.
    pub key: IdempotencyKey,
}

impl ClaimPosition {
    /// The place of `entry`.
    pub fn of(entry: &JournalEntry) -> Self {
        ClaimPosition {
            created_at: entry.created_at,
            key: entry.key.clone(),
        }
    }

    /// Whether `entry` comes after this place in the claim order.
    pub fn is_before(&self, entry: &JournalEntry) -> bool {
        (self.created_at, &self.key) < (entry.created_at, &entry.key)
    }
}
