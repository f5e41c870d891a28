//! The durable journal: one SQLite file in WAL mode, held exclusively.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use arcp_types::IdempotencyKey;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use super::{
    from_millis, to_millis, Journal, JournalEntry, JournalError, JournalErrorKind, JournalOutcome,
    JournalState, JournalWrite, PurgeReport, Retention,
};

/// `PRAGMA application_id` of an ARCP journal: "ARCP" in ASCII.
const APPLICATION_ID: i64 = 0x4152_4350;
/// `PRAGMA user_version`: the schema this code reads and writes.
const SCHEMA_VERSION: i64 = 1;
/// The WAL file is truncated back to this size after checkpoints.
const WAL_SIZE_LIMIT: i64 = 4 << 20;

const SCHEMA: &str = "
CREATE TABLE arcp_calls (
    key         TEXT    NOT NULL PRIMARY KEY,
    tool        TEXT    NOT NULL,
    intent      TEXT    NOT NULL,
    trace_id    TEXT    NOT NULL,
    deadline_ms INTEGER NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('prepared', 'sent', 'accepted', 'terminal')),
    attempts    INTEGER NOT NULL DEFAULT 0,
    job_id      TEXT,
    outcome     TEXT,
    created_ms  INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL,
    CHECK (state != 'accepted' OR job_id IS NOT NULL),
    CHECK ((state = 'terminal') = (outcome IS NOT NULL))
);
CREATE INDEX arcp_calls_by_state ON arcp_calls (state, updated_ms);
";

/// The invariants the file itself enforces, whoever writes to it: a
/// terminal record is final, and a record never moves backwards. Created on
/// every read-write open (`IF NOT EXISTS`), so journals written by earlier
/// versions get them too; they change no column (the schema version stays).
const GUARDS: &str = "
CREATE TRIGGER IF NOT EXISTS arcp_calls_terminal_is_final
BEFORE UPDATE ON arcp_calls WHEN OLD.state = 'terminal'
BEGIN
    SELECT RAISE(ABORT, 'arcp journal: a terminal record is final');
END;
CREATE TRIGGER IF NOT EXISTS arcp_calls_forward_only
BEFORE UPDATE ON arcp_calls
WHEN (OLD.state = 'sent' AND NEW.state = 'prepared')
  OR (OLD.state = 'accepted' AND NEW.state IN ('prepared', 'sent'))
  OR NEW.attempts < OLD.attempts
BEGIN
    SELECT RAISE(ABORT, 'arcp journal: a record never moves backwards');
END;
";

/// The columns of `arcp_calls`, in order, to recognise the schema.
const COLUMNS: [&str; 11] = [
    "key",
    "tool",
    "intent",
    "trace_id",
    "deadline_ms",
    "state",
    "attempts",
    "job_id",
    "outcome",
    "created_ms",
    "updated_ms",
];

const SELECT: &str = "SELECT key, tool, intent, trace_id, deadline_ms, state, attempts, job_id, \
                      outcome, created_ms, updated_ms FROM arcp_calls";

/// When a commit is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub enum Synchronous {
    /// Every commit is flushed to stable storage (`fsync`) before the call
    /// is sent: the record survives a crash of the process *and* of the
    /// machine (power loss). The default.
    #[default]
    Full,
    /// Commits reach the operating system before the call is sent, and are
    /// flushed at checkpoints: the record survives a crash of the process
    /// (`SIGKILL`, a panic, an OOM kill) but the last commits can be lost on
    /// power loss. Much cheaper per call (no disk flush per commit).
    Normal,
}

/// Options of [`SqliteJournal::open_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub struct SqliteOptions {
    /// When a commit is durable (default [`Synchronous::Full`]).
    pub synchronous: Synchronous,
    /// How long opening waits for another holder of the file to let go
    /// before failing with [`JournalErrorKind::Locked`] (default 250 ms).
    pub lock_timeout: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::Full,
            lock_timeout: Duration::from_millis(250),
        }
    }
}

impl SqliteOptions {
    /// Sets [`SqliteOptions::synchronous`].
    pub fn synchronous(mut self, s: Synchronous) -> Self {
        self.synchronous = s;
        self
    }

    /// Sets [`SqliteOptions::lock_timeout`].
    pub fn lock_timeout(mut self, d: Duration) -> Self {
        self.lock_timeout = d;
        self
    }
}

/// A [`Journal`] in one SQLite file (bundled SQLite: nothing to install).
///
/// - **WAL mode**, one file (plus its `-wal` while open), schema checked on
///   open (`application_id` "ARCP", `user_version` 1, the expected columns)
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
    /// Opens (or creates) the journal at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, JournalError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens (or creates) the journal at `path`. Blocking: call it from a
    /// blocking context (the client does).
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, JournalError> {
        let path = path.as_ref().to_path_buf();
        let location = path.display().to_string();
        let err = |e: rusqlite::Error| classify(&location, e);
        let mut conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(err)?;
        conn.busy_timeout(options.lock_timeout).map_err(err)?;
        // Exclusive before the first access: the lock is kept once taken,
        // and WAL then needs no shared-memory file.
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
            .map_err(err)?;
        // Only effective on a new database (before the first table).
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
            .map_err(err)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(JournalError::new(
                JournalErrorKind::Io,
                &location,
                format!("could not switch to WAL mode (journal mode is {mode:?})"),
            ));
        }
        let sync = match options.synchronous {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", sync).map_err(err)?;
        conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
            .map_err(err)?;
        {
            // Takes (and, in exclusive mode, keeps) the write lock.
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Exclusive)
                .map_err(err)?;
            check_or_create_schema(&tx, &location)?;
            tx.execute_batch(GUARDS).map_err(err)?;
            tx.commit().map_err(err)?;
        }
        let check: String = conn
            .query_row("PRAGMA quick_check(1)", [], |r| r.get(0))
            .map_err(err)?;
        if check != "ok" {
            return Err(JournalError::new(
                JournalErrorKind::Corrupt,
                &location,
                format!("quick_check failed: {check}"),
            ));
        }
        Ok(SqliteJournal {
            conn: Mutex::new(conn),
            path,
            location,
        })
    }

    /// Opens an existing journal to read it (an operator's tools, such as
    /// `arcp journal list`): nothing is created, the schema is checked but
    /// never written, and every statement that would modify the file fails
    /// (`PRAGMA query_only`). A journal held by a live client fails with
    /// [`JournalErrorKind::Locked`] after `lock_timeout`; one left by a
    /// process that died is read as it was at the crash.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, JournalError> {
        let path = path.as_ref().to_path_buf();
        let location = path.display().to_string();
        let err = |e: rusqlite::Error| classify(&location, e);
        if !path.is_file() {
            return Err(JournalError::new(
                JournalErrorKind::Io,
                &location,
                "no journal file at this path",
            ));
        }
        // Read-write without create: reading a journal whose writer died
        // may need to replay its write-ahead log first.
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(err)?;
        conn.busy_timeout(SqliteOptions::default().lock_timeout)
            .map_err(err)?;
        check_schema_read_only(&conn, &location)?;
        conn.pragma_update(None, "query_only", true).map_err(err)?;
        Ok(SqliteJournal {
            conn: Mutex::new(conn),
            path,
            location,
        })
    }

    /// Up to `limit` records of every state, the most recently changed
    /// first.
    pub fn list(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(&format!("{SELECT} ORDER BY updated_ms DESC, key LIMIT ?1"))
            .map_err(|e| self.err(e))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map([limit], Row::read)
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
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn err(&self, e: rusqlite::Error) -> JournalError {
        classify(&self.location, e)
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

    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(&format!("{SELECT} WHERE key = ?1"))
            .map_err(|e| self.err(e))?;
        let row = stmt
            .query_row([key.as_str()], Row::read)
            .optional()
            .map_err(|e| self.err(e))?;
        row.map(|r| r.into_entry(&self.location)).transpose()
    }

    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(&format!(
                "{SELECT} WHERE state != 'terminal' ORDER BY created_ms, key LIMIT ?1"
            ))
            .map_err(|e| self.err(e))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map([limit], Row::read)
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(|e| self.err(e))?.into_entry(&self.location)?);
        }
        Ok(out)
    }

    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError> {
        let now = to_millis(now);
        let cutoff = |ttl: Duration| now.saturating_sub(to_millis_duration(ttl));
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

fn to_millis_duration(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn apply_one(tx: &rusqlite::Transaction<'_>, write: &JournalWrite) -> rusqlite::Result<()> {
    match write {
        JournalWrite::Prepare(e) => {
            let (state, job_id, outcome) = state_columns(&e.state)?;
            tx.prepare_cached(
                "INSERT OR REPLACE INTO arcp_calls (key, tool, intent, trace_id, deadline_ms, \
                 state, attempts, job_id, outcome, created_ms, updated_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?
            .execute(params![
                e.key.as_str(),
                e.tool,
                e.intent,
                e.trace_id,
                to_millis_duration(e.deadline),
                state,
                e.attempts,
                job_id,
                outcome,
                to_millis(e.created_at),
                to_millis(e.updated_at),
            ])?;
        }
        JournalWrite::Sent { key, attempts, at } => {
            tx.prepare_cached(
                "UPDATE arcp_calls SET attempts = max(attempts, ?2), \
                 state = CASE state WHEN 'prepared' THEN 'sent' ELSE state END, updated_ms = ?3 \
                 WHERE key = ?1 AND state != 'terminal'",
            )?
            .execute(params![key.as_str(), attempts, to_millis(*at)])?;
        }
        JournalWrite::Accepted { key, job_id, at } => {
            tx.prepare_cached(
                "UPDATE arcp_calls SET state = 'accepted', job_id = ?2, updated_ms = ?3 \
                 WHERE key = ?1 AND state != 'terminal'",
            )?
            .execute(params![key.as_str(), job_id, to_millis(*at)])?;
        }
        JournalWrite::Terminal { key, outcome, at } => {
            let text = serde_json::to_string(outcome)
                .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
            tx.prepare_cached(
                "UPDATE arcp_calls SET state = 'terminal', outcome = ?2, \
                 job_id = coalesce(?3, job_id), attempts = max(attempts, ?4), updated_ms = ?5 \
                 WHERE key = ?1 AND state != 'terminal'",
            )?
            .execute(params![
                key.as_str(),
                text,
                outcome.job_id(),
                outcome.attempts(),
                to_millis(*at),
            ])?;
        }
        JournalWrite::Remove { key } => {
            tx.prepare_cached("DELETE FROM arcp_calls WHERE key = ?1")?
                .execute([key.as_str()])?;
        }
        // One client holds the file: nothing to give up.
        JournalWrite::Release { .. } => {}
    }
    Ok(())
}

/// `(state, job_id, outcome)` columns of a state.
fn state_columns(
    state: &JournalState,
) -> rusqlite::Result<(&'static str, Option<&str>, Option<String>)> {
    Ok(match state {
        JournalState::Prepared => ("prepared", None, None),
        JournalState::Sent => ("sent", None, None),
        JournalState::Accepted { job_id } => ("accepted", Some(job_id.as_str()), None),
        JournalState::Terminal(outcome) => (
            "terminal",
            outcome.job_id(),
            Some(
                serde_json::to_string(outcome)
                    .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?,
            ),
        ),
    })
}

/// A row as stored, before validation.
struct Row {
    key: String,
    tool: String,
    intent: String,
    trace_id: String,
    deadline_ms: i64,
    state: String,
    attempts: i64,
    job_id: Option<String>,
    outcome: Option<String>,
    created_ms: i64,
    updated_ms: i64,
}

impl Row {
    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
        Ok(Row {
            key: r.get(0)?,
            tool: r.get(1)?,
            intent: r.get(2)?,
            trace_id: r.get(3)?,
            deadline_ms: r.get(4)?,
            state: r.get(5)?,
            attempts: r.get(6)?,
            job_id: r.get(7)?,
            outcome: r.get(8)?,
            created_ms: r.get(9)?,
            updated_ms: r.get(10)?,
        })
    }

    /// Validates a row; a row this code cannot have written is corruption.
    fn into_entry(self, location: &str) -> Result<JournalEntry, JournalError> {
        let corrupt = |what: String| {
            JournalError::new(
                JournalErrorKind::Corrupt,
                location,
                format!("record {:?}: {what}", self.key),
            )
        };
        let key = IdempotencyKey::try_from(self.key.as_str())
            .map_err(|e| corrupt(format!("invalid key: {e}")))?;
        let state = match (self.state.as_str(), &self.job_id, &self.outcome) {
            ("prepared", _, None) => JournalState::Prepared,
            ("sent", _, None) => JournalState::Sent,
            ("accepted", Some(job), None) => JournalState::Accepted {
                job_id: job.clone(),
            },
            ("terminal", _, Some(text)) => JournalState::Terminal(
                serde_json::from_str::<JournalOutcome>(text)
                    .map_err(|e| corrupt(format!("unreadable outcome: {e}")))?,
            ),
            (other, _, _) => return Err(corrupt(format!("invalid state {other:?}"))),
        };
        Ok(JournalEntry {
            key,
            tool: self.tool,
            intent: self.intent,
            trace_id: self.trace_id,
            deadline: Duration::from_millis(u64::try_from(self.deadline_ms).unwrap_or(0)),
            state,
            attempts: u32::try_from(self.attempts.max(0)).unwrap_or(u32::MAX),
            created_at: from_millis(self.created_ms),
            updated_at: from_millis(self.updated_ms),
        })
    }
}

/// Recognises an ARCP journal, or creates one in an empty database.
/// The schema check of [`check_or_create_schema`] without the create: an
/// empty file is not a journal.
fn check_schema_read_only(conn: &Connection, location: &str) -> Result<(), JournalError> {
    let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Deferred)
        .map_err(|e| classify(location, e))?;
    let app: i64 = tx
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(|e| classify(location, e))?;
    if app == 0 {
        return Err(JournalError::new(
            JournalErrorKind::Schema,
            location,
            "the file is not an ARCP journal (no journal was ever written to it)",
        ));
    }
    check_or_create_schema(&tx, location)
}

fn check_or_create_schema(
    tx: &rusqlite::Transaction<'_>,
    location: &str,
) -> Result<(), JournalError> {
    let err = |e: rusqlite::Error| classify(location, e);
    let schema = |message: String| JournalError::new(JournalErrorKind::Schema, location, message);
    let app: i64 = tx
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(err)?;
    let version: i64 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(err)?;
    let tables: Vec<String> = {
        let mut stmt = tx
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .map_err(err)?;
        let names = stmt.query_map([], |r| r.get(0)).map_err(err)?;
        names.collect::<Result<_, _>>().map_err(err)?
    };
    if app == 0 && version == 0 && tables.is_empty() {
        tx.execute_batch(SCHEMA).map_err(err)?;
        tx.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(err)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(err)?;
        return Ok(());
    }
    if app != APPLICATION_ID {
        return Err(schema(format!(
            "the file is a SQLite database of something else (application_id {app:#x}, \
             tables {tables:?}), not an ARCP journal; it was left untouched"
        )));
    }
    if version != SCHEMA_VERSION {
        return Err(schema(format!(
            "journal schema version {version}; this version of arcp-client reads version \
             {SCHEMA_VERSION}"
        )));
    }
    let columns: Vec<String> = {
        let mut stmt = tx
            .prepare("SELECT name FROM pragma_table_info('arcp_calls') ORDER BY cid")
            .map_err(err)?;
        let names = stmt.query_map([], |r| r.get(0)).map_err(err)?;
        names.collect::<Result<_, _>>().map_err(err)?
    };
    if columns != COLUMNS {
        return Err(schema(format!(
            "table arcp_calls has columns {columns:?}; expected {COLUMNS:?}"
        )));
    }
    Ok(())
}

/// Maps a SQLite failure to a journal error kind.
fn classify(location: &str, e: rusqlite::Error) -> JournalError {
    use rusqlite::ErrorCode as C;
    let (kind, message) = match e.sqlite_error_code() {
        Some(C::NotADatabase) => (
            JournalErrorKind::Corrupt,
            format!("the file is not a SQLite database ({e})"),
        ),
        Some(C::DatabaseCorrupt) => (JournalErrorKind::Corrupt, e.to_string()),
        Some(C::DatabaseBusy | C::DatabaseLocked) => (
            JournalErrorKind::Locked,
            format!(
                "another client or process has the journal open ({e}); one journal serves \
                 one client at a time"
            ),
        ),
        Some(C::DiskFull) => (JournalErrorKind::Io, format!("disk full ({e})")),
        _ => (JournalErrorKind::Io, e.to_string()),
    };
    JournalError::new(kind, location, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::JournalState;

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
