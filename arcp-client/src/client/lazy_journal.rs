//! The client's journal, opened when the client is built (`connect`) or
//! on first use (`connect_lazy`, which must not wait or fail). An open
//! that failed stays failed: every call and journal operation of the
//! client reports that error, which names the journal.

use std::sync::Arc;

use tokio::sync::{watch, OnceCell};

use crate::error::Error;
use crate::journal::{JournalError, JournalErrorKind, JournalHandle, JournalSetup, RecoveryMode};

pub(crate) struct LazyJournal {
    /// What to open; `None` once opened, or when built open.
    setup: std::sync::Mutex<Option<(JournalSetup, usize)>>,
    configured: bool,
    recovery: RecoveryMode,
    /// Set by the task that opens the journal: a caller that stops waiting
    /// (its deadline) does not cut an open half way.
    opened: Arc<OnceCell<Result<JournalHandle, Error>>>,
    /// Turns true once `opened` is set (or its task ended without it).
    done: Arc<watch::Sender<bool>>,
}

impl LazyJournal {
    /// A journal opened already (or none configured).
    pub(crate) fn opened(handle: Option<JournalHandle>) -> Self {
        let recovery = handle
            .as_ref()
            .map_or(RecoveryMode::Manual, JournalHandle::recovery);
        LazyJournal {
            setup: std::sync::Mutex::new(None),
            configured: handle.is_some(),
            recovery,
            opened: Arc::new(match handle {
                Some(handle) => OnceCell::new_with(Some(Ok(handle))),
                None => OnceCell::new(),
            }),
            done: Arc::new(watch::Sender::new(true)),
        }
    }

    /// A journal to open on first use.
    pub(crate) fn deferred(setup: JournalSetup, max_in_flight: usize) -> Self {
        LazyJournal {
            configured: setup.is_configured(),
            recovery: setup.recovery(),
            setup: std::sync::Mutex::new(Some((setup, max_in_flight))),
            opened: Arc::new(OnceCell::new()),
            done: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Whether the client has a journal (open or not yet).
    pub(crate) fn is_some(&self) -> bool {
        self.configured
    }

    /// Whether the client has no journal.
    pub(crate) fn is_none(&self) -> bool {
        !self.configured
    }

    /// The recovery mode of the configured journal.
    pub(crate) fn recovery(&self) -> RecoveryMode {
        self.recovery
    }

    /// The journal if it is open now (never opens it).
    pub(crate) fn as_ref(&self) -> Option<&JournalHandle> {
        self.opened.get().and_then(|opened| opened.as_ref().ok())
    }

    /// Closes the journal with its client: an open one commits and
    /// releases its store; one being opened is closed once open; one not
    /// opened yet never will be (later uses fail with `JOURNAL_CLOSED`, and
    /// its store stays free for another client).
    pub(crate) async fn close(&self) {
        if !self.configured {
            return;
        }
        if crate::sync::lock(&self.setup).take().is_some() {
            let closed = JournalError::new(
                JournalErrorKind::Closed,
                "journal",
                "the client was closed before its journal was opened",
            );
            let _ = self.opened.set(Err(Error::Journal(closed)));
            self.done.send_replace(true);
            return;
        }
        let mut done = self.done.subscribe();
        let _ = done.wait_for(|done| *done).await;
        if let Some(Ok(handle)) = self.opened.get() {
            handle.close().await;
        }
    }

    /// The journal, opened now if it was not; `Ok(None)` without one. The
    /// error of a failed open is returned again on every later use.
    pub(crate) async fn get(&self) -> Result<Option<&JournalHandle>, Error> {
        if !self.configured {
            return Ok(None);
        }
        if self.opened.get().is_none() {
            let mut done = self.done.subscribe();
            let setup = crate::sync::lock(&self.setup).take();
            if let Some((setup, max_in_flight)) = setup {
                let (opened, finished) = (self.opened.clone(), self.done.clone());
                tokio::spawn(async move {
                    let result = match setup.open(max_in_flight).await {
                        Ok(Some(handle)) => Ok(handle),
                        Ok(None) => Err(Error::Internal(
                            "a configured journal opened as none".into(),
                        )),
                        Err(e) => Err(e),
                    };
                    let _ = opened.set(result);
                    finished.send_replace(true);
                });
            }
            // Ends with an error only if the opening task died: then
            // `opened` stays empty and says so below.
            let _ = done.wait_for(|done| *done).await;
        }
        match self.opened.get() {
            Some(Ok(handle)) => Ok(Some(handle)),
            Some(Err(e)) => Err(e.clone()),
            None => Err(Error::Internal(
                "the task opening the journal ended without opening it".into(),
            )),
        }
    }
}
