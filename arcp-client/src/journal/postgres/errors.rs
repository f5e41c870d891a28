//! PostgreSQL failures as journal errors: which are the store being away
//! (retried), which are fencing, corruption or a foreign schema.

use crate::journal::{JournalError, JournalErrorKind};

/// Maps a PostgreSQL failure to a journal error kind.
pub(super) fn classify(location: &str, e: &tokio_postgres::Error) -> JournalError {
    use tokio_postgres::error::SqlState;
    let Some(db) = e.as_db_error() else {
        let message = with_cause(e);
        // A row or parameter of another type than this code reads or
        // writes: the tables are not the ones it made (a hand-made change).
        // Retrying cannot help.
        if is_type_mismatch(e) {
            return JournalError::new(JournalErrorKind::Schema, location, message);
        }
        // No answer from the server: the connection failed, closed or timed
        // out. The store may be back soon.
        return JournalError::new(JournalErrorKind::Unavailable, location, message);
    };
    let code = db.code().code();
    let kind = match code {
        // The server is shutting down, starting up or cancelled the
        // statement (statement_timeout): retry later.
        _ if db.code() == &SqlState::ADMIN_SHUTDOWN
            || db.code() == &SqlState::CRASH_SHUTDOWN
            || db.code() == &SqlState::CANNOT_CONNECT_NOW
            || db.code() == &SqlState::QUERY_CANCELED
            || db.code() == &SqlState::T_R_SERIALIZATION_FAILURE
            || db.code() == &SqlState::T_R_DEADLOCK_DETECTED =>
        {
            JournalErrorKind::Unavailable
        }
        // The server refuses writes for now, and nothing of the refused
        // transaction committed: a read-only database (a failover demoted
        // it, or `default_transaction_read_only`), a full disk, exhausted
        // resources or connections, a prepared statement a pooler dropped.
        // Retried like an absent server (a promoted primary, freed space),
        // so a call waits within its deadline instead of failing as "not
        // run" (a refusal proves nothing about an earlier commit whose
        // answer was lost).
        _ if db.code() == &SqlState::READ_ONLY_SQL_TRANSACTION
            || db.code() == &SqlState::INSUFFICIENT_RESOURCES
            || db.code() == &SqlState::DISK_FULL
            || db.code() == &SqlState::OUT_OF_MEMORY
            || db.code() == &SqlState::TOO_MANY_CONNECTIONS
            || is_stale_statement(e) =>
        {
            JournalErrorKind::Unavailable
        }
        // The guard trigger: a write by a superseded generation.
        "AR002" => JournalErrorKind::Fenced,
        // The guard trigger: a terminal record changed, or a transition
        // backwards. This code never sends one: something else wrote.
        "AR001" | "AR003" => JournalErrorKind::Corrupt,
        _ if db.code() == &SqlState::UNIQUE_VIOLATION
            || db.code() == &SqlState::CHECK_VIOLATION
            || db.code() == &SqlState::FOREIGN_KEY_VIOLATION =>
        {
            JournalErrorKind::Corrupt
        }
        _ if db.code() == &SqlState::UNDEFINED_TABLE
            || db.code() == &SqlState::UNDEFINED_COLUMN
            || db.code() == &SqlState::DUPLICATE_TABLE
            || db.code() == &SqlState::DUPLICATE_FUNCTION =>
        {
            JournalErrorKind::Schema
        }
        _ => JournalErrorKind::Io,
    };
    JournalError::new(kind, location, format!("{} ({code})", db.message()))
}

/// Whether the server refused a prepared statement the pool cached: one a
/// pooler dropped (26000), or one whose result type a change of the tables
/// invalidated (0A000, "cached plan must not change result type"). The
/// pool's statement cache is then reset (`PostgresJournal::err`).
pub(super) fn is_stale_statement(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.as_db_error().is_some_and(|db| {
        db.code() == &SqlState::INVALID_SQL_STATEMENT_NAME
            || (db.code() == &SqlState::FEATURE_NOT_SUPPORTED
                && db
                    .message()
                    .starts_with("cached plan must not change result type"))
    })
}

/// Whether a client-side error is a value that does not convert between
/// the tables and this code (tokio-postgres names no kind publicly: its
/// conversion errors carry the cause, and their messages say which).
fn is_type_mismatch(e: &tokio_postgres::Error) -> bool {
    use std::error::Error as _;
    use tokio_postgres::types::{WasNull, WrongType};
    let converting = e
        .source()
        .is_some_and(|cause| cause.is::<WrongType>() || cause.is::<WasNull>());
    let text = e.to_string();
    converting
        || text.starts_with("error deserializing column")
        || text.starts_with("error serializing parameter")
        || text.starts_with("invalid column")
        || text.starts_with("query returned an unexpected number of columns")
}

/// The error with its cause (tokio-postgres' own message leaves it out).
fn with_cause(e: &tokio_postgres::Error) -> String {
    use std::error::Error as _;
    match e.source() {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}
