//! [`SqliteOptions`] and [`Synchronous`]: how a journal file is opened and
//! when a commit is durable.

use std::time::Duration;

#[cfg(doc)]
use super::SqliteJournal;
#[cfg(doc)]
use crate::journal::JournalErrorKind;

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
