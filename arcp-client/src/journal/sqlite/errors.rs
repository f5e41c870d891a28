//! SQLite failures mapped to journal error kinds.

use crate::journal::{JournalError, JournalErrorKind};

/// Maps a SQLite failure to a journal error kind.
pub(super) fn classify(location: &str, e: rusqlite::Error) -> JournalError {
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
        // Nothing of the refused transaction committed, and space may be
        // freed or the file system remounted read-write: retried as an
        // absent store, so a call waits within its deadline instead of
        // failing as "not run".
        Some(C::DiskFull) => (JournalErrorKind::Unavailable, format!("disk full ({e})")),
        Some(C::ReadOnly) => (
            JournalErrorKind::Unavailable,
            format!("the journal cannot be written now ({e})"),
        ),
        _ => (JournalErrorKind::Io, e.to_string()),
    };
    JournalError::new(kind, location, message)
}
