//! The file's schema: the table, the triggers that guard it, and the
//! checks that recognise an ARCP journal (or create one in an empty
//! database) before anything is written.

use rusqlite::{Connection, TransactionBehavior};

use super::errors::classify;
use crate::journal::{JournalError, JournalErrorKind};

/// `PRAGMA application_id` of an ARCP journal: "ARCP" in ASCII.
const APPLICATION_ID: i64 = 0x4152_4350;
/// `PRAGMA user_version`: the schema this code reads and writes.
const SCHEMA_VERSION: i64 = 1;
/// The WAL file is truncated back to this size after checkpoints.
pub(super) const WAL_SIZE_LIMIT: i64 = 4 << 20;

/// The table and its index. The state check is written as comparisons:
/// SQLite checks a constant `IN` list of more than two values through a
/// temporary index it builds for every row written, which cost a write
/// about as much as the rest of it (files created before this release
/// have that list: see [`REBUILD`]).
const SCHEMA: &str = "
CREATE TABLE arcp_calls (
    key         TEXT    NOT NULL PRIMARY KEY,
    tool        TEXT    NOT NULL,
    intent      TEXT    NOT NULL,
    trace_id    TEXT    NOT NULL,
    deadline_ms INTEGER NOT NULL,
    state       TEXT    NOT NULL CHECK (
                    state = 'prepared' OR state = 'sent' OR state = 'accepted' OR state = 'terminal'),
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

/// The state check as files created before this release have it.
const STATE_IN_LIST: &str = "CHECK (state IN ('prepared', 'sent', 'accepted', 'terminal'))";

/// A table with [`STATE_IN_LIST`] rebuilt under [`SCHEMA`]'s check (SQLite
/// cannot alter a check in place), every row copied as it is, in the open's
/// exclusive transaction (after `quick_check`). The same columns and the
/// same meaning, so the schema version stays: any build reads the file
/// before and after. The old table's triggers go with it; the guards are
/// created again after the schema step, as on every open.
const REBUILD: [&str; 2] = [
    "
DROP INDEX IF EXISTS arcp_calls_by_state;
ALTER TABLE arcp_calls RENAME TO arcp_calls_rebuilt;
",
    "
INSERT INTO arcp_calls (key, tool, intent, trace_id, deadline_ms, state, attempts, job_id,
                        outcome, created_ms, updated_ms)
SELECT key, tool, intent, trace_id, deadline_ms, state, attempts, job_id,
       outcome, created_ms, updated_ms FROM arcp_calls_rebuilt;
DROP TABLE arcp_calls_rebuilt;
",
];

/// The invariants the file itself enforces, whoever writes to it: a
/// terminal record is final, and a record never moves backwards. Created on
/// every read-write open (`IF NOT EXISTS`), so journals written by earlier
/// versions get them too; they change no column (the schema version stays).
pub(super) const GUARDS: &str = "
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

/// The schema check of [`check_or_create_schema`] without the create: an
/// empty file is not a journal.
pub(super) fn check_schema_read_only(
    conn: &Connection,
    location: &str,
) -> Result<(), JournalError> {
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
    check_schema(&tx, location, Access::ReadOnly)
}

/// Recognises an ARCP journal, or creates one in an empty database, and
/// rebuilds a table whose state check is [`STATE_IN_LIST`].
pub(super) fn check_or_create_schema(
    tx: &rusqlite::Transaction<'_>,
    location: &str,
) -> Result<(), JournalError> {
    check_schema(tx, location, Access::ReadWrite)
}

/// Whether the schema step may write to the file.
#[derive(PartialEq)]
enum Access {
    ReadOnly,
    ReadWrite,
}

fn check_schema(
    tx: &rusqlite::Transaction<'_>,
    location: &str,
    access: Access,
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
    if app == 0 && version == 0 && tables.is_empty() && access == Access::ReadWrite {
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
    if access == Access::ReadWrite {
        let table: String = tx
            .query_row(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'arcp_calls'",
                [],
                |r| r.get(0),
            )
            .map_err(err)?;
        if table.contains(STATE_IN_LIST) {
            tx.execute_batch(&format!("{}{SCHEMA}{}", REBUILD[0], REBUILD[1]))
                .map_err(err)?;
            tracing::info!(journal = %location, "journal table rebuilt with its state check as comparisons");
        }
    }
    Ok(())
}
