//! How long the journal keeps records ([`Retention`]) and what one purge
//! did ([`PurgeReport`]).

use std::time::Duration;

#[cfg(doc)]
use super::{Journal, JournalErrorKind};

/// How long the journal keeps records, and how many.
///
/// ```
/// use std::time::Duration;
/// use arcp_sdk::Retention;
/// let retention = Retention::default()
///     .terminal_ttl(Duration::from_secs(3600))
///     .max_records(10_000);
/// # let _ = retention;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retention {
    /// Terminal records older than this are deleted (default 24 hours).
    /// A call of a key whose record was deleted is a new call to the
    /// journal: the runtime answers it if it still remembers the key.
    pub terminal_ttl: Duration,
    /// Unfinished records untouched for this long are deleted with a warning
    /// (default 7 days): a call nobody recovered in a week is abandoned.
    pub unfinished_ttl: Duration,
    /// At most this many records (default 100 000). The oldest terminal
    /// records make room; when only unfinished ones remain, new calls fail
    /// with [`JournalErrorKind::Full`] until they are recovered or
    /// discarded.
    pub max_records: usize,
    /// How often the retention policy runs besides start-up (default 5 minutes).
    pub purge_interval: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            terminal_ttl: Duration::from_secs(24 * 3600),
            unfinished_ttl: Duration::from_secs(7 * 24 * 3600),
            max_records: 100_000,
            purge_interval: Duration::from_secs(300),
        }
    }
}

impl Retention {
    /// Sets [`Retention::terminal_ttl`].
    pub fn terminal_ttl(mut self, d: Duration) -> Self {
        self.terminal_ttl = d;
        self
    }

    /// Sets [`Retention::unfinished_ttl`].
    pub fn unfinished_ttl(mut self, d: Duration) -> Self {
        self.unfinished_ttl = d;
        self
    }

    /// Sets [`Retention::max_records`] (at least 1).
    pub fn max_records(mut self, n: usize) -> Self {
        self.max_records = n.max(1);
        self
    }

    /// Sets [`Retention::purge_interval`] (at least 10 ms).
    pub fn purge_interval(mut self, d: Duration) -> Self {
        self.purge_interval = d.max(Duration::from_millis(10));
        self
    }
}

/// What one [`Journal::purge`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PurgeReport {
    /// Terminal records deleted for age.
    pub expired_terminal: u64,
    /// Unfinished records deleted for age.
    pub expired_unfinished: u64,
    /// Terminal records deleted to respect `max_records`.
    pub evicted: u64,
    /// Records left.
    pub remaining: u64,
    /// Unfinished records left.
    pub unfinished: u64,
}
