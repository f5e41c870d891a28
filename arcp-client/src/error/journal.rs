//! [`JournalError`]: a journal's failure (what kind, where, what the store
//! said), and how `?` carries it into the client's [`Error`].

use std::fmt;

use arcp_types::IdempotencyKey;

use super::Error;

/// What kind of journal failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JournalErrorKind {
    /// The file is not a SQLite database, or is damaged.
    Corrupt,
    /// The file is a database, but not an ARCP journal of a schema this
    /// version reads.
    Schema,
    /// Another client (in this or another process) holds the journal.
    Locked,
    /// The journal holds `max_records` unfinished calls.
    Full,
    /// Reading or writing failed (disk full, permissions, ...).
    Io,
    /// The journal was closed with its client.
    Closed,
    /// A recorded intent cannot be re-sent byte-identically.
    Intent,
    /// Another worker owns the call (a shared journal): this one lost its
    /// lease and the call was claimed, or a live worker drives it. This
    /// worker stops driving it; the owner finishes it. The tool may have
    /// run ([`Execution::MayHaveRun`](crate::Execution::MayHaveRun)).
    Fenced,
    /// The journal's store could not be reached, or did not answer in time
    /// (a database restarting, a network link that went silent). The
    /// client retries the write while the call's deadline allows, so a
    /// brief outage costs latency, not failures.
    Unavailable,
    /// The journal file is not private to this process's user: a symbolic
    /// link, not a regular file, owned by another user, or readable or
    /// writable by its group or others. The message names the file, its
    /// owner and its mode.
    Insecure,
    /// The TLS connection to the journal's server failed for good: its
    /// certificate is not trusted or does not name the host (the
    /// connection string's `sslmode` and `sslrootcert`), or TLS was
    /// required and the server does not offer it.
    Tls,
}

impl JournalErrorKind {
    /// A stable upper-case name, used in [`Error::code_name`].
    pub fn code_name(&self) -> &'static str {
        match self {
            JournalErrorKind::Corrupt => "JOURNAL_CORRUPT",
            JournalErrorKind::Schema => "JOURNAL_SCHEMA",
            JournalErrorKind::Locked => "JOURNAL_LOCKED",
            JournalErrorKind::Full => "JOURNAL_FULL",
            JournalErrorKind::Io => "JOURNAL_IO",
            JournalErrorKind::Closed => "JOURNAL_CLOSED",
            JournalErrorKind::Intent => "JOURNAL_INTENT",
            JournalErrorKind::Fenced => "JOURNAL_FENCED",
            JournalErrorKind::Unavailable => "JOURNAL_UNAVAILABLE",
            JournalErrorKind::Insecure => "JOURNAL_INSECURE",
            JournalErrorKind::Tls => "JOURNAL_TLS",
        }
    }
}

impl fmt::Display for JournalErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            JournalErrorKind::Corrupt => "corrupt",
            JournalErrorKind::Schema => "not a journal of a known schema",
            JournalErrorKind::Locked => "locked",
            JournalErrorKind::Full => "full",
            JournalErrorKind::Io => "I/O error",
            JournalErrorKind::Closed => "closed",
            JournalErrorKind::Intent => "unusable intent",
            JournalErrorKind::Fenced => "owned by another worker",
            JournalErrorKind::Unavailable => "unavailable",
            JournalErrorKind::Insecure => "not private to its owner",
            JournalErrorKind::Tls => "TLS failure",
        })
    }
}

/// A journal failure: what kind, where, and what the store said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("journal {location}: {kind}: {message}")]
#[non_exhaustive]
pub struct JournalError {
    /// What kind of failure.
    pub kind: JournalErrorKind,
    /// Where the journal lives (a path, `memory`, ...).
    pub location: String,
    /// What failed, in words.
    pub message: String,
    /// The key of the call this failure ended, when it ended one (also
    /// [`Error::key`](crate::Error::key)): with
    /// [`JournalErrorKind::Unavailable`] or [`JournalErrorKind::Fenced`] the
    /// call may have run, so it is retried, or looked up, under this key,
    /// never under a new one.
    pub key: Option<IdempotencyKey>,
}

impl From<JournalError> for Error {
    /// [`Error::Journal`]: lets `?` carry a journal failure (opening a
    /// journal, for instance) out of a function returning [`Error`].
    fn from(e: JournalError) -> Self {
        Error::Journal(e)
    }
}

impl JournalError {
    /// A journal error (for [`Journal`](crate::Journal) implementations).
    pub fn new(
        kind: JournalErrorKind,
        location: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        JournalError {
            kind,
            location: location.into(),
            message: message.into(),
            key: None,
        }
    }
}
