//! Opening a journal file: read-write and exclusive (WAL mode, the schema
//! checked or created, the guards installed, a quick check run) or
//! read-only for an operator's tools. Either way the file is first held to
//! `private.rs`'s rule (private to its owner, never through a link).

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::errors::classify;
use super::private::{check_after, check_before, Access};
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
    ///
    /// On Unix a new file is created mode 0600 (its `-wal` too), and an
    /// existing one is refused with [`JournalErrorKind::Insecure`] when
    /// `path` is a symbolic link, another user owns the file, or its group
    /// or others may read or write it (the error names the file, its owner
    /// and its mode); the same holds for its `-wal`, `-shm` and `-journal`
    /// files.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, JournalError> {
        let path = path.as_ref().to_path_buf();
        let location = path.display().to_string();
        let err = |e: rusqlite::Error| classify(&location, e);
        let checked = check_before(&path, &location, Access::Create)?;
        let mut conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_NOFOLLOW
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
        // The write above made the `-wal`: it must be as private as the file.
        check_after(&path, &checked, &location)?;
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
    /// process that died is read as it was at the crash. The file is held
    /// to the same rule as [`SqliteJournal::open_with`]'s (read it as the
    /// user that owns it).
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, JournalError> {
        let path = path.as_ref().to_path_buf();
        let location = path.display().to_string();
        let err = |e: rusqlite::Error| classify(&location, e);
        let checked = check_before(&path, &location, Access::Existing)?;
        // Read-write without create: reading a journal whose writer died
        // may need to replay its write-ahead log first.
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_NOFOLLOW
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(err)?;
        conn.busy_timeout(SqliteOptions::default().lock_timeout)
            .map_err(err)?;
        check_schema_read_only(&conn, &location)?;
        check_after(&path, &checked, &location)?;
        conn.pragma_update(None, "query_only", true).map_err(err)?;
        Ok(SqliteJournal {
            conn: Mutex::new(conn),
            path,
            location,
        })
    }
}
