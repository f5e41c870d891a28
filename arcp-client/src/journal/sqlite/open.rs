//! Opening a journal file: read-write and exclusive (WAL mode, the schema
//! checked or created, the guards installed, a quick check run) or
//! read-only for an operator's tools.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::errors::classify;
use super::schema::{check_or_create_schema, check_schema_read_only, GUARDS, WAL_SIZE_LIMIT};
use super::{SqliteJournal, SqliteOptions, Synchronous};
use crate::journal::{JournalError, JournalErrorKind};

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
            // Takes (and, in exclusive mode, keeps) the write lock. The file
            // is checked before the schema step may write to it.
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Exclusive)
                .map_err(err)?;
            let check: String = tx
                .query_row("PRAGMA quick_check(1)", [], |r| r.get(0))
                .map_err(err)?;
            if check != "ok" {
                return Err(JournalError::new(
                    JournalErrorKind::Corrupt,
                    &location,
                    format!("quick_check failed: {check}"),
                ));
            }
            check_or_create_schema(&tx, &location)?;
            tx.execute_batch(GUARDS).map_err(err)?;
            tx.commit().map_err(err)?;
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
}
