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
        Some(C::DiskFull) => (JournalErrorKind::Io, format!("disk full ({e})")),
        _ => (JournalErrorKind::Io, e.to_string()),
    };
    JournalError::new(kind, location, message)
}

/// Maps a failure of an open journal's read or write: as [`classify`], but
/// a full disk and a file that turned read-only (a file system remounted)
/// are the store being away for now. Nothing of the refused transaction
/// committed, and space may be freed or the file system remounted
/// read-write: the writer retries within each call's deadline instead of
/// failing calls as "not run".
pub(super) fn classify_open_journal(location: &str, e: rusqlite::Error) -> JournalError {
    use rusqlite::ErrorCode as C;
    match e.sqlite_error_code() {
        Some(C::DiskFull) => JournalError::new(
            JournalErrorKind::Unavailable,
            location,
            format!("disk full ({e})"),
        ),
        Some(C::ReadOnly) => JournalError::new(
            JournalErrorKind::Unavailable,
            location,
            format!("the journal cannot be written now ({e})"),
        ),
        // An I/O error (a failed write or fsync) may come after the
        // transaction reached the write-ahead log, which a later open
        // replays: the commit's fate is unknown, as with a lost answer.
        Some(C::SystemIoFailure) => JournalError::new(
            JournalErrorKind::Unavailable,
            location,
            format!("an I/O error; the transaction may have reached the file ({e})"),
        ),
        _ => classify(location, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn an_io_error_of_an_open_journal_leaves_the_commit_unknown() {
        let fsync = failure(rusqlite::ffi::SQLITE_IOERR_FSYNC);
        assert_eq!(
            classify_open_journal("j.db", fsync).kind,
            JournalErrorKind::Unavailable
        );
        let corrupt = failure(rusqlite::ffi::SQLITE_CORRUPT);
        assert_eq!(
            classify_open_journal("j.db", corrupt).kind,
            JournalErrorKind::Corrupt
        );
    }
}
