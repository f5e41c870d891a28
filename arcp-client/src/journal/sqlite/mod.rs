//! The durable journal: one SQLite file in WAL mode, held exclusively.
//!
//! `open.rs` opens the file (`options.rs` says how), `schema.rs` holds the
//! table, its guards and the checks that recognise a journal,
//! `statements.rs` the writes and the read, `rows.rs` a row read back,
//! `errors.rs` SQLite failures as journal errors, `private.rs` the rule
//! that a journal file is its owner's alone; this file is the
//! [`Journal`] implementation.

mod errors;
mod open;
mod options;
mod private;
mod rows;
mod schema;
mod statements;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use arcp_types::IdempotencyKey;
use rusqlite::{Connection, OptionalExtension};

use errors::classify_open_journal;
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use options::{SqliteOptions, Synchronous};
use statements::{apply_one, insert_absent, SELECT};

use super::rows::{duration_to_millis, to_millis};
use super::{
    ClaimPosition, Journal, JournalEntry, JournalError, JournalErrorKind, JournalWrite,
    PurgeReport, Retention,
};
use crate::sync::lock;

/// A [`Journal`] in one SQLite file (bundled SQLite: nothing to install).
///
/// - **WAL mode**, one file (plus its `-wal` while open), schema checked on
///   open (`application_id` "ARCP", `user_version` 1, the expected columns;
///   a table as earlier releases created it, its state check a constant
///   `IN` list that SQLite checks through a temporary index per row
///   written, is rebuilt in place by a read-write open)
///   and `PRAGMA quick_check` run: a file that is not a SQLite database, is
///   damaged or belongs to something else is refused with a typed error
///   ([`JournalErrorKind::Corrupt`], [`JournalErrorKind::Schema`]); nothing
///   is overwritten.
/// - **Exclusive**: the file is locked for as long as the journal is open,
///   so a second client or process opening it fails at once with
///   [`JournalErrorKind::Locked`] instead of re-driving the same calls. The
///   operating system releases the lock when the holder dies, even by
///   `SIGKILL`.
/// - **Bounded**: the client's [`Retention`] purges it on open and
///   periodically; freed pages are returned to the file system
///   (incremental auto-vacuum) and the WAL is truncated after checkpoints.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use arcp_sdk::{Client, SqliteJournal, SqliteOptions, Synchronous};
/// let journal = SqliteJournal::open_with(
///     "/var/lib/myapp/arcp-journal.db",
///     SqliteOptions::default().synchronous(Synchronous::Normal),
/// )?;
/// let client = Client::builder("ws://127.0.0.1:7777/arcp")
///     .journal(journal)
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub struct SqliteJournal {
    conn: Mutex<Connection>,
    path: PathBuf,
    location: String,
}

impl SqliteJournal {
    /// Up to `limit` records of every state, the most recently changed
    /// first.
    pub fn list(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        self.select_limited(
            &format!("{SELECT} ORDER BY updated_ms DESC, key LIMIT ?1"),
            limit,
        )
    }

    /// The records `sql` selects with `limit` as its one parameter.
    fn select_limited(&self, sql: &str, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map([limit], rows::read)
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(|e| self.err(e))?.into_entry(&self.location)?);
        }
        Ok(out)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `PRAGMA integrity_check` (a full scan): `Ok` when the file is
    /// consistent, else [`JournalErrorKind::Corrupt`] with SQLite's findings.
    pub fn integrity_check(&self) -> Result<(), JournalError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare("PRAGMA integrity_check")
            .map_err(|e| self.err(e))?;
        let rows: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .map_err(|e| self.err(e))?
            .collect::<Result<_, _>>()
            .map_err(|e| self.err(e))?;
        if rows == ["ok"] {
            Ok(())
        } else {
            Err(JournalError::new(
                JournalErrorKind::Corrupt,
                &self.location,
                rows.join("; "),
            ))
        }
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the connection leaves at worst an open
        // transaction, which SQLite rolls back: the file stays consistent.
        lock(&self.conn)
    }

    fn err(&self, e: rusqlite::Error) -> JournalError {
        classify_open_journal(&self.location, e)
    }
}

impl Journal for SqliteJournal {
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        for write in writes {
            apply_one(&tx, write).map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))
    }

    /// One transaction, no read: each new record is inserted unless its key
    /// has one (`ON CONFLICT DO NOTHING`), which also says which were.
    fn apply_and_insert_new(
        &self,
        writes: &[JournalWrite],
        new: &[JournalEntry],
    ) -> Result<Vec<bool>, JournalError> {
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        for write in writes {
            apply_one(&tx, write).map_err(|e| self.err(e))?;
        }
        let inserted = new
            .iter()
            .map(|e| insert_absent(&tx, e))
            .collect::<rusqlite::Result<Vec<bool>>>()
            .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(inserted)
    }

    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(&format!("{SELECT} WHERE key = ?1"))
            .map_err(|e| self.err(e))?;
        let row = stmt
            .query_row([key.as_str()], rows::read)
            .optional()
            .map_err(|e| self.err(e))?;
        row.map(|r| r.into_entry(&self.location)).transpose()
    }

    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        self.select_limited(
            &format!("{SELECT} WHERE state != 'terminal' ORDER BY created_ms, key LIMIT ?1"),
            limit,
        )
    }

    fn claim_after(
        &self,
        limit: usize,
        driving: &HashSet<IdempotencyKey>,
        after: Option<&ClaimPosition>,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        let Some(after) = after else {
            return self.claim(limit, driving);
        };
        // The calls driven here are few (in flight): read past them.
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(&format!(
                "{SELECT} WHERE state != 'terminal' \
                 AND (created_ms > ?2 OR (created_ms = ?2 AND key > ?3)) \
                 ORDER BY created_ms, key LIMIT ?1"
            ))
            .map_err(|e| self.err(e))?;
        let read = i64::try_from(limit.saturating_add(driving.len())).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(
                rusqlite::params![read, to_millis(after.created_at), after.key.as_str()],
                rows::read,
            )
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let entry = row.map_err(|e| self.err(e))?.into_entry(&self.location)?;
            if !driving.contains(&entry.key) && out.len() < limit {
                out.push(entry);
            }
        }
        Ok(out)
    }

    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError> {
        let now = to_millis(now);
        let cutoff = |ttl: Duration| now.saturating_sub(duration_to_millis(ttl));
        let mut conn = self.lock();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let run = || -> rusqlite::Result<PurgeReport> {
            let mut report = PurgeReport {
                expired_terminal: tx.execute(
                    "DELETE FROM arcp_calls WHERE state = 'terminal' AND updated_ms < ?1",
                    [cutoff(retention.terminal_ttl)],
                )? as u64,
                expired_unfinished: tx.execute(
                    "DELETE FROM arcp_calls WHERE state != 'terminal' AND updated_ms < ?1",
                    [cutoff(retention.unfinished_ttl)],
                )? as u64,
                ..PurgeReport::default()
            };
            let count: i64 = tx.query_row("SELECT count(*) FROM arcp_calls", [], |r| r.get(0))?;
            let max = i64::try_from(retention.max_records).unwrap_or(i64::MAX);
            if count > max {
                report.evicted = tx.execute(
                    "DELETE FROM arcp_calls WHERE key IN (SELECT key FROM arcp_calls \
                     WHERE state = 'terminal' ORDER BY updated_ms, key LIMIT ?1)",
                    [count - max],
                )? as u64;
            }
            report.remaining = tx.query_row("SELECT count(*) FROM arcp_calls", [], |r| {
                r.get::<_, i64>(0)
            })? as u64;
            report.unfinished = tx.query_row(
                "SELECT count(*) FROM arcp_calls WHERE state != 'terminal'",
                [],
                |r| r.get::<_, i64>(0),
            )? as u64;
            Ok(report)
        };
        let report = run().map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        if report.expired_terminal + report.expired_unfinished + report.evicted > 0 {
            // Give freed pages back and keep the WAL small. Best effort:
            // the purge itself is committed.
            let _ = conn.execute_batch("PRAGMA incremental_vacuum;");
            let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
        Ok(report)
    }

    fn location(&self) -> String {
        self.location.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{JournalOutcome, JournalState};

    fn entry(key: &str) -> JournalEntry {
        let now = SystemTime::now();
        let key = IdempotencyKey::try_from(key).unwrap();
        JournalEntry {
            intent: format!(r#"{{"tool":"t","arguments":{{}},"idempotency_key":"{key}"}}"#),
            key,
            tool: "t".into(),
            trace_id: arcp_types::new_trace_id(),
            deadline: Duration::from_secs(5),
            state: JournalState::Prepared,
            attempts: 0,
            created_at: now,
            updated_at: now,
        }
    }

    #[test]
    fn new_calls_are_recorded_without_replacing_a_record() {
        let dir = tempfile::tempdir().unwrap();
        let j = SqliteJournal::open(dir.path().join("j.db")).unwrap();
        let (old, new) = (entry("k-old"), entry("k-new"));
        j.apply(&[JournalWrite::Prepare(old.clone())]).unwrap();
        let ended = JournalWrite::Sent {
            key: old.key.clone(),
            attempts: 2,
            at: SystemTime::now(),
        };
        let mut again = old.clone();
        again.tool = "other".into();
        let inserted = j
            .apply_and_insert_new(&[ended], &[again, new.clone()])
            .unwrap();
        assert_eq!(inserted, vec![false, true]);
        let kept = j.get(&old.key).unwrap().unwrap();
        assert_eq!((kept.tool.as_str(), kept.attempts), ("t", 2));
        assert_eq!(kept.state, JournalState::Sent, "the batch's write applied");
        assert_eq!(
            j.get(&new.key).unwrap().unwrap().state,
            JournalState::Prepared
        );
    }

    #[test]
    fn transitions_are_monotonic() {
        let dir = tempfile::tempdir().unwrap();
        let j = SqliteJournal::open(dir.path().join("j.db")).unwrap();
        let key = IdempotencyKey::try_from("k1").unwrap();
        let now = SystemTime::now();
        j.apply(&[JournalWrite::Prepare(entry("k1"))]).unwrap();
        j.apply(&[
            JournalWrite::Sent {
                key: key.clone(),
                attempts: 1,
                at: now,
            },
            JournalWrite::Accepted {
                key: key.clone(),
                job_id: "job_1".into(),
                at: now,
            },
            JournalWrite::Sent {
                key: key.clone(),
                attempts: 2,
                at: now,
            },
        ])
        .unwrap();
        let e = j.get(&key).unwrap().unwrap();
        assert_eq!(
            e.state,
            JournalState::Accepted {
                job_id: "job_1".into()
            }
        );
        assert_eq!(e.attempts, 2);
        assert_eq!(j.unfinished(10).unwrap().len(), 1);
        let outcome = JournalOutcome::Ok {
            value: serde_json::json!(1.5),
            job_id: Some("job_1".into()),
            replayed: false,
            attempts: 2,
        };
        j.apply(&[JournalWrite::Terminal {
            key: key.clone(),
            outcome: outcome.clone(),
            at: now,
        }])
        .unwrap();
        // Late transitions never reopen a terminal record.
        j.apply(&[JournalWrite::Sent {
            key: key.clone(),
            attempts: 3,
            at: now,
        }])
        .unwrap();
        let e = j.get(&key).unwrap().unwrap();
        assert_eq!(e.state, JournalState::Terminal(outcome));
        assert!(j.unfinished(10).unwrap().is_empty());
        j.integrity_check().unwrap();
    }

    #[test]
    fn purge_respects_ttl_and_cap_and_keeps_unfinished() {
        let dir = tempfile::tempdir().unwrap();
        let j = SqliteJournal::open(dir.path().join("j.db")).unwrap();
        let old = SystemTime::now() - Duration::from_secs(3600);
        let mut writes = Vec::new();
        for i in 0..10 {
            let mut e = entry(&format!("k{i}"));
            e.updated_at = old + Duration::from_secs(i);
            if i < 8 {
                e.state = JournalState::Terminal(JournalOutcome::Invalid {
                    message: "x".into(),
                });
            }
            writes.push(JournalWrite::Prepare(e));
        }
        j.apply(&writes).unwrap();
        let retention = Retention::default().max_records(5);
        let report = j.purge(&retention, SystemTime::now()).unwrap();
        assert_eq!(report.evicted, 5);
        assert_eq!(report.remaining, 5);
        assert_eq!(report.unfinished, 2);
        let retention = Retention::default()
            .terminal_ttl(Duration::from_secs(60))
            .unfinished_ttl(Duration::from_secs(7200));
        let report = j.purge(&retention, SystemTime::now()).unwrap();
        assert_eq!(report.expired_terminal, 3);
        assert_eq!(report.expired_unfinished, 0);
        assert_eq!(report.remaining, 2);
        j.integrity_check().unwrap();
    }
}
