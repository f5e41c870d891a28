//! The client's side of the journal: one writer thread per client owns the
//! [`Journal`], so no journal I/O ever runs on an async task.
//!
//! - `prepare` (before the first send) is queued and **awaited**: the call is
//!   handed to the connection task only once its record is committed.
//!   Prepares that queue up while a commit is in progress are committed
//!   together (group commit: one `fsync` for a burst of calls).
//! - `sent` and `accepted` come from the connection task through a
//!   [`Recorder`]: a short lock and a map insert, never a wait. They are
//!   merged per key (latest wins), so their memory is bounded by the calls
//!   in flight, and wait up to [`MARK_DELAY`] for the call's terminal to
//!   ride in (most calls end sooner: one record change instead of three).
//! - `terminal` is queued by the caller's task after the outcome arrives;
//!   it waits only when the writer is far behind (bounded memory).
//! - lookups, listings and discards are queued behind the writes, so they
//!   read what was recorded before them.
//! - with a shared journal (leases), the writer renews this client's leases
//!   every [`Journal::lease_interval`], and tells the calls it lost
//!   (claimed by another worker while this one was silent, or refused by
//!   the store) to stop: they end with `JOURNAL_FENCED`.

mod batch;
mod commit;
mod discard;
mod expiry;
mod handle;
mod late_writes;
mod queue;
mod state;
mod upkeep;

use std::fmt;
#[cfg(feature = "sqlite")]
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[cfg(feature = "sqlite")]
use super::SqliteJournal;
use super::{Journal, JournalError, JournalErrorKind, RecoveryMode, Redaction, Retention};
use crate::error::Error;
use crate::sync::lock;

pub(crate) use handle::JournalHandle;
pub(crate) use queue::{Claimed, DriveGuard};

/// The journal settings of a `ClientBuilder`.
#[derive(Clone, Default)]
pub(crate) struct JournalSetup {
    source: Option<Source>,
    retention: Retention,
    recovery: RecoveryMode,
    /// `None`: [`DEFAULT_RUNTIME_KEY_RETENTION`].
    runtime_key_retention: Option<Duration>,
    redaction: Option<Redaction>,
}

#[derive(Clone)]
enum Source {
    #[cfg(feature = "sqlite")]
    Path(PathBuf),
    /// Taken by the first `connect`: one journal serves one client.
    Instance(Arc<Mutex<Option<Box<dyn Journal>>>>),
}

impl fmt::Debug for JournalSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            None => "none".to_owned(),
            #[cfg(feature = "sqlite")]
            Some(Source::Path(p)) => format!("sqlite {}", p.display()),
            Some(Source::Instance(_)) => "custom".to_owned(),
        };
        f.debug_struct("JournalSetup")
            .field("source", &source)
            .field("retention", &self.retention)
            .field("recovery", &self.recovery)
            .field("runtime_key_retention", &self.runtime_key_retention)
            .field("redaction", &self.redaction.is_some())
            .finish()
    }
}

impl JournalSetup {
    pub(crate) fn set_journal(&mut self, journal: Box<dyn Journal>) {
        self.source = Some(Source::Instance(Arc::new(Mutex::new(Some(journal)))));
    }

    #[cfg(feature = "sqlite")]
    pub(crate) fn set_path(&mut self, path: PathBuf) {
        self.source = Some(Source::Path(path));
    }

    pub(crate) fn set_retention(&mut self, retention: Retention) {
        self.retention = retention;
    }

    pub(crate) fn set_runtime_key_retention(&mut self, retention: Duration) {
        self.runtime_key_retention = Some(retention);
    }

    pub(crate) fn set_recovery(&mut self, recovery: RecoveryMode) {
        self.recovery = recovery;
    }

    pub(crate) fn set_redaction(&mut self, redaction: Redaction) {
        self.redaction = Some(redaction);
    }

    /// Whether a journal is configured (opening it may still fail).
    pub(crate) fn is_configured(&self) -> bool {
        self.source.is_some()
    }

    /// The recovery mode the journal will run in once open.
    pub(crate) fn recovery(&self) -> RecoveryMode {
        self.recovery
    }

    /// Opens the journal (if one is configured), applies the retention
    /// policy once and starts the writer thread. Fails with a typed
    /// [`Error::Journal`] on a corrupt, foreign or locked journal.
    pub(crate) async fn open(&self, max_in_flight: usize) -> Result<Option<JournalHandle>, Error> {
        let journal: Box<dyn Journal> = match &self.source {
            None => return Ok(None),
            #[cfg(feature = "sqlite")]
            Some(Source::Path(path)) => {
                let path = path.clone();
                let opened = tokio::task::spawn_blocking(move || SqliteJournal::open(&path))
                    .await
                    .map_err(|e| Error::Internal(format!("journal open task: {e}").into()))?;
                Box::new(opened.map_err(Error::Journal)?)
            }
            Some(Source::Instance(slot)) => lock(slot).take().ok_or_else(|| {
                Error::Journal(JournalError::new(
                    JournalErrorKind::Locked,
                    "journal",
                    "this journal instance already serves another client (a cloned builder \
                     was connected twice); give each client its own journal",
                ))
            })?,
        };
        let handle = JournalHandle::start(
            journal,
            self.retention.clone(),
            self.recovery,
            self.runtime_key_retention
                .unwrap_or(DEFAULT_RUNTIME_KEY_RETENTION),
            max_in_flight,
            self.redaction.clone(),
        )
        .await?;
        Ok(Some(handle))
    }
}

/// How long a runtime is assumed to remember a key unless told otherwise:
/// the Python runtime's default (24 hours).
pub(crate) const DEFAULT_RUNTIME_KEY_RETENTION: Duration =
    crate::config::DEFAULT_RUNTIME_KEY_RETENTION;

/// The first wait before retrying a batch the store could not take, and
/// the longest (the wait doubles in between).
pub(super) const RETRY_FIRST: Duration = Duration::from_millis(20);
pub(super) const RETRY_MAX: Duration = Duration::from_millis(500);

/// The most unfinished calls one `Client::recover` claims.
pub(crate) const RECOVER_BATCH: usize = 256;

/// How long `Client::close` waits for the journal to commit and close.
pub(super) const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long transitions alone wait for a prepare to share its commit.
pub(super) const TRANSITION_LINGER: Duration = Duration::from_millis(5);

/// How long a call's sent and accepted marks wait for its end before they
/// are committed on their own. A call that ends sooner (most do) records
/// them in its terminal write; one that runs longer has them recorded this
/// long after they happened. Nothing waits on them: the record says "may
/// have run" from its prepare on, so a crash inside the delay loses only
/// the job id a recovery would have resumed by (it re-sends the key, and
/// the runtime deduplicates it).
pub(super) const MARK_DELAY: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::SystemTime;

    use arcp_types::IdempotencyKey;
    use tokio::sync::{watch, Notify};

    use super::queue::DriveGuard;
    use super::queue::{Pending, Queue, Shared};
    use crate::sync::lock;

    fn shared() -> Arc<Shared> {
        Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            space: Notify::new(),
            location: "test".into(),
            capacity: 8,
            fenced: Mutex::new(HashSet::new()),
            driving: Mutex::new(HashMap::new()),
            fence: watch::Sender::new(0),
            lease: watch::Sender::new(None),
            runtime_key_retention: super::DEFAULT_RUNTIME_KEY_RETENTION,
        })
    }

    fn drive(shared: &Arc<Shared>, key: &IdempotencyKey) -> DriveGuard {
        DriveGuard::new(shared, key)
    }

    #[test]
    fn the_fenced_set_holds_only_keys_driven_here_and_empties_with_them() {
        let shared = shared();
        let (driven, idle) = (IdempotencyKey::new(), IdempotencyKey::new());
        let first = drive(&shared, &driven);
        let second = drive(&shared, &driven);
        shared.fence(vec![driven.clone(), idle.clone()]);
        assert!(lock(&shared.fenced).contains(&driven));
        assert!(
            !lock(&shared.fenced).contains(&idle),
            "nobody drives it here"
        );
        drop(first);
        assert!(lock(&shared.fenced).contains(&driven), "still driven once");
        drop(second);
        assert!(
            lock(&shared.fenced).is_empty(),
            "pruned with its last driver"
        );
    }

    #[test]
    fn transitions_merge_newer_over_older() {
        let at = SystemTime::now();
        let older = Pending {
            sent: Some((3, at)),
            accepted: Some(("job_1".into(), at)),
            terminal: None,
            released: true,
            since: None,
        };
        let newer = Pending {
            sent: Some((2, at)),
            accepted: None,
            terminal: None,
            released: false,
            since: None,
        };
        let merged = older.then(newer);
        assert_eq!(merged.sent.map(|s| s.0), Some(3), "the higher count");
        assert_eq!(merged.accepted.map(|a| a.0), Some("job_1".to_owned()));
        assert!(
            merged.released,
            "a release stands unless a terminal follows"
        );
    }
}
