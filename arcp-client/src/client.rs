//! `Client`, the cheap handle every call goes through, and what a new
//! client starts in the background (automatic recovery). The handle's
//! parts, one job each: `builder.rs` (`ClientBuilder`: configuration and
//! connecting) and `dispatch.rs` (one call's path from the handle to the
//! backend: its deadline, the in-flight slot, the journal, shared fate).

mod builder;
mod dispatch;
mod lazy_journal;

pub use builder::ClientBuilder;

use std::fmt;
#[cfg(feature = "http")]
use std::sync::OnceLock;
use std::sync::{Arc, Mutex};

use arcp_types::IdempotencyKey;
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::Semaphore;
use tracing::{info, warn};

use crate::backend::Backend;
use crate::config::Config;
use crate::connection_events::{ConnectionEvent, ConnectionEvents};
use crate::error::Error;
use crate::fate::LiveKeys;
#[cfg(feature = "http")]
use crate::http::{ArtifactFetcher, ArtifactRef};
use crate::journal::{ClaimPosition, Claimed, JournalEntry, RecoveryMode};
use crate::outcome::CancelOutcome;
use crate::profile::RuntimeProfile;
use crate::request::CallShared;
use crate::stats::ClientStats;
use crate::sync::lock;

use lazy_journal::LazyJournal;

struct Inner {
    config: Arc<Config>,
    backend: Backend,
    in_flight: Arc<Semaphore>,
    /// What the runtime said in the last handshake, once there was one.
    profile: Arc<Mutex<Option<RuntimeProfile>>>,
    /// Built on first use: most clients never fetch an artifact.
    #[cfg(feature = "http")]
    artifacts: OnceLock<Result<ArtifactFetcher, Error>>,
    /// The invocation journal, when configured (opened on first use after
    /// `connect_lazy`).
    journal: LazyJournal,
    /// Why this client can never call (a lazily built client whose
    /// configuration cannot work): every call ends with this error.
    broken: Option<Error>,
    /// The keys with calls in flight, for callers that share a key.
    live_keys: LiveKeys,
    /// Where the connection task announces connection events.
    events: tokio::sync::broadcast::Sender<ConnectionEvent>,
}

/// A handle to one connection to an ARCP runtime. Cheap to clone; every
/// clone shares the connection. The connection closes when the last clone
/// is dropped (or on [`Client::close`]).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

// `Client` is shared between tasks and threads, and its calls are spawned
// onto multi-threaded runtimes: checked at compile time, so that a change
// that loses `Send` or `Sync` fails the build here rather than in users' code.
const _: fn(&Client) = |client| {
    fn send_sync<T: Send + Sync + 'static>() {}
    fn send<T: Send>(_: &T) {}
    send_sync::<Client>();
    send_sync::<ClientBuilder>();
    send_sync::<crate::CallHandle>();
    send_sync::<crate::Error>();
    send(&client.invoke_tool("tool", Value::Null));
    send(&client.invoke_tool("tool", Value::Null).send());
    send(&crate::Tool::<Value, Value>::new("tool").call(client, &Value::Null));
    send(&client.recover());
    send(&client.close());
};

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("url", &crate::config::shown_url(&self.inner.config.url))
            .field("runtime", &self.runtime().map(|p| p.name))
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Starts configuring a client for the runtime at `url`: `ws://` or
    /// `wss://` for WebSocket, `http://` or `https://` for the HTTP binding.
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(url)
    }

    /// What the client learned about the runtime in the last handshake:
    /// `None` until a lazily connected client has connected.
    pub fn runtime(&self) -> Option<RuntimeProfile> {
        lock(&self.inner.profile).clone()
    }

    /// Connection events from now on: connected (runtime, dialect, session,
    /// resumed or new), disconnected (why), reconnecting (attempt, delay),
    /// resume refused, and a slow-consumer notice for a listener that fell
    /// behind. Listening costs the connection nothing it waits on; without
    /// listeners, no event is built. The first session is reported by
    /// `connect()` itself (see [`Client::runtime`]); with `connect_lazy`, a
    /// listener made before the first call sees it too. The HTTP binding
    /// keeps no connection and reports none.
    pub fn events(&self) -> ConnectionEvents {
        ConnectionEvents::new(self.inner.events.subscribe())
    }

    /// What the client holds now: calls in flight, requests awaiting an
    /// answer and cached outcomes. Nothing of a finished call stays
    /// behind, so once every call ended `calls` and `requests` are zero; a
    /// closed client reports zeros.
    pub async fn stats(&self) -> ClientStats {
        self.inner.backend.stats().await
    }

    /// Closes the session gracefully. Calls still in flight end: with
    /// [`Error::Interrupted`] when a request was sent (their key and job id
    /// let a later call learn the outcome), else [`Error::Closed`].
    ///
    /// With a journal, close also commits everything recorded so far and
    /// releases the journal (its file is unlocked); journal operations on
    /// this client then fail with `JOURNAL_CLOSED`.
    pub async fn close(&self) {
        self.inner.backend.close().await;
        self.inner.journal.close().await;
    }

    /// The unfinished calls the journal hands this client to re-drive
    /// ([`Client::recover`]), after `after` in the claim order; none without
    /// a journal.
    pub(crate) async fn claim_unfinished(
        &self,
        after: Option<ClaimPosition>,
    ) -> Result<Claimed, Error> {
        let Some(journal) = self.inner.journal.get().await? else {
            return Ok(Claimed::default());
        };
        journal.unfinished(after).await
    }

    /// Nobody here drives `key` any more: its record stays unfinished, and
    /// a shared journal lets another worker claim it now.
    pub(crate) fn release_claim(&self, key: &IdempotencyKey) {
        if let Some(journal) = self.inner.journal.as_ref() {
            journal.release(key);
        }
    }

    /// What the journal recorded for `key`: where the call stands and, once
    /// it ended, its outcome ([`JournalEntry::outcome`]). Reads everything
    /// this client recorded before the call. `Ok(None)` without a journal or
    /// when the key is unknown (or its record expired).
    ///
    /// # Errors
    ///
    /// [`Error::Journal`] when the journal cannot be read (closed with the
    /// client: `JOURNAL_CLOSED`; a database that cannot be reached:
    /// `JOURNAL_UNAVAILABLE`), or, for a client built with
    /// [`connect_lazy`](ClientBuilder::connect_lazy), could not be opened.
    pub async fn lookup(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, Error> {
        match self.inner.journal.get().await? {
            Some(journal) => journal.lookup(key).await,
            None => Ok(None),
        }
    }

    /// Discards the journal's record of `key`, so it is neither recovered
    /// nor answered from the journal again; whether there was one. For
    /// unfinished calls the caller decided to abandon.
    ///
    /// The journal does not forget what the record proved, so no record is
    /// deleted (its [`Retention`](crate::Retention) deletes records by
    /// age). A record
    /// proving the call did not run (never accepted, refused, invalid) is
    /// already final and stays as it is. Any other is ended "outcome
    /// unknown" (see
    /// [`JournalEntry::discard_write`](crate::JournalEntry::discard_write)):
    /// a later call of the key is sent again and is in doubt from the start
    /// (it never says "did not run"; the runtime answers it if it still
    /// remembers the key), and past
    /// [`runtime_key_retention`](ClientBuilder::runtime_key_retention) it
    /// is answered "outcome unknown". (This client's in-memory outcome
    /// cache, see [`Tuning::outcome_cache`](crate::tuning::Tuning::outcome_cache),
    /// may still answer the key with its outcome until the entry expires.)
    ///
    /// # Errors
    ///
    /// [`Error::Journal`] when the journal cannot be written (as for
    /// [`Client::lookup`]); `JOURNAL_FENCED` when another live worker of a
    /// shared journal drives the call.
    pub async fn discard(&self, key: &IdempotencyKey) -> Result<bool, Error> {
        match self.inner.journal.get().await? {
            Some(journal) => journal.discard(key).await,
            None => Ok(false),
        }
    }

    /// Starts what a new client does in the background (automatic recovery).
    fn started(self) -> Self {
        let journal = &self.inner.journal;
        if journal.is_some()
            && journal.recovery() == RecoveryMode::Automatic
            && self.inner.broken.is_none()
        {
            spawn_recovery(self.clone());
        }
        self
    }

    /// Downloads an artifact (an `artifact_ref` or `result_ref`, see
    /// [`ArtifactRef::from_value`]) over HTTP(S) and verifies it: at most
    /// [`ClientBuilder::max_artifact_size`] bytes, and exactly the reference's
    /// `size` and `sha256` when it gives them. Transient failures are
    /// retried with the client's [`RetryPolicy`](crate::RetryPolicy); the
    /// client's default deadline bounds the whole fetch. The bearer token
    /// (or, with [`ClientBuilder::token_provider`], a token the provider
    /// gives for each request) is sent only to URIs on the runtime's own
    /// origin; requests go through the client's proxy
    /// ([`ClientBuilder::proxy`], [`ClientBuilder::no_proxy`], else the
    /// environment's).
    ///
    /// # Errors
    ///
    /// See [`ArtifactFetcher::fetch`].
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub async fn fetch_artifact(&self, artifact: &ArtifactRef) -> Result<Vec<u8>, Error> {
        let fetcher = self
            .inner
            .artifacts
            .get_or_init(|| ArtifactFetcher::from_config(&self.inner.config))
            .clone()?;
        fetcher.fetch(artifact).await
    }

    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Asks the backend to cancel the call with `key`, bounded by the
    /// cancel timeout whatever the connection does.
    pub(crate) async fn cancel(
        &self,
        key: IdempotencyKey,
        shared: Arc<CallShared>,
    ) -> CancelOutcome {
        let bound = self.inner.config.cancel_timeout + std::time::Duration::from_millis(250);
        match tokio::time::timeout(bound, self.inner.backend.cancel(key, shared)).await {
            Ok(outcome) => outcome,
            Err(_) => CancelOutcome::NotDispatched {
                reason: format!("the client did not get to the cancel within {bound:?}"),
            },
        }
    }
}

/// Re-drives every unfinished call in the background
/// ([`RecoveryMode::Automatic`]); outcomes land in the journal.
///
/// One [`RecoveryPass`](crate::RecoveryPass), batch after batch, each
/// ended before the next is claimed, at most 64 calls at a time. A batch is
/// never judged by its size: a claim ends the calls past the runtime's key
/// retention without handing them out; the pass ends with a batch that
/// brings none.
pub(crate) fn spawn_recovery(client: Client) {
    tokio::spawn(async move {
        let mut pass = client.recovery_pass();
        loop {
            let calls = match pass.next_batch().await {
                Ok(calls) => calls,
                Err(e) => {
                    warn!(error = %e, "automatic recovery could not read the journal");
                    return;
                }
            };
            if calls.is_empty() {
                return;
            }
            info!(
                calls = calls.len(),
                "re-driving unfinished calls from the journal"
            );
            futures_util::stream::iter(calls)
                .for_each_concurrent(64, |call| async move {
                    let key = call.key().cloned();
                    match call.await {
                        Ok(out) => {
                            info!(key = ?key, replayed = out.replayed, "recovered call succeeded")
                        }
                        Err(e) => info!(key = ?key, error = %e, "recovered call ended"),
                    }
                })
                .await;
        }
    });
}
