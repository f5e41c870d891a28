//! `Client` (a cheap handle) and `ClientBuilder` (its configuration).

use std::fmt;
#[cfg(feature = "sqlite")]
use std::path::PathBuf;
#[cfg(feature = "http")]
use std::sync::OnceLock;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arcp_types::IdempotencyKey;
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tracing::{info, warn};

use crate::backend::Backend;
use crate::cache::Outcome;
use crate::classify::{give_up, not_recorded, shared_fate, Ended, Ending, Exposure};
use crate::config::{is_http_url, Config, DialectChoice, RetryPolicy, Secret};
use crate::connection_events::{ConnectionEvent, ConnectionEvents};
use crate::error::{Error, Execution, JournalErrorKind};
use crate::fate::{KeyFate, LiveKeys};
#[cfg(feature = "http")]
use crate::http::{ArtifactFetcher, ArtifactRef, HttpBackend};
use crate::journal::{Journal, JournalEntry, JournalHandle, JournalSetup, RecoveryMode, Retention};
use crate::outcome::{CancelOutcome, ToolOutput};
use crate::profile::RuntimeProfile;
use crate::request::{CallRequest, CallShared};
use crate::retry::saturating_deadline;
use crate::stats::ClientStats;
use crate::sync::lock;
use crate::telemetry::{self, Answered};
use crate::ws::{self, Core};

/// Configures and connects a [`Client`].
///
/// ```no_run
/// # async fn demo() -> Result<(), arcp_sdk::Error> {
/// use std::time::Duration;
/// use arcp_sdk::{Client, RetryPolicy};
///
/// let client = Client::builder("ws://127.0.0.1:7777/arcp")
///     .bearer_token("secret")
///     .retry(RetryPolicy::exponential().max_attempts(8).max_delay(Duration::from_secs(5)))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
///
/// Every wait has its own knob: [`connect_timeout`](Self::connect_timeout)
/// (one dial), [`handshake_timeout`](Self::handshake_timeout) (the welcome),
/// [`connect_budget`](Self::connect_budget) (how long `connect()` retries),
/// [`write_timeout`](Self::write_timeout), [`response_timeout`](Self::response_timeout)
/// (a silent runtime), [`cancel_timeout`](Self::cancel_timeout), and each
/// call's deadline ([`default_deadline`](Self::default_deadline)).
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until connect() is awaited"]
pub struct ClientBuilder {
    config: Config,
    journal: JournalSetup,
}

impl ClientBuilder {
    fn new(url: impl Into<String>) -> Self {
        ClientBuilder {
            config: Config::new(url.into()),
            journal: JournalSetup::default(),
        }
    }

    /// Authenticate with this bearer token. It is never logged or printed.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.config.token = Some(Secret(token.into()));
        self
    }

    /// Which message set to speak (default [`DialectChoice::V1_1`]); accepts
    /// an [`arcp_types::Dialect`] too.
    pub fn dialect(mut self, dialect: impl Into<DialectChoice>) -> Self {
        self.config.dialect = dialect.into();
        self
    }

    /// The retry schedule and budget (default [`RetryPolicy::default`]).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.config.retry = policy;
        self
    }

    /// How long the runtime may take to answer the session hello with its
    /// welcome, per connection (default 10 s). A timeout is transient: the
    /// client dials again.
    pub fn handshake_timeout(mut self, d: Duration) -> Self {
        self.config.handshake_timeout = d;
        self
    }

    /// How long one TCP connect plus TLS and WebSocket upgrade may take
    /// (default 10 s). A timeout is transient: the client dials again.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.config.connect_timeout = d;
        self
    }

    /// How long [`connect`](ClientBuilder::connect) keeps dialing through
    /// transient failures (resets, timeouts, HTTP 5xx or 429) before it
    /// gives up (default 30 s). Definitive failures (refused credentials,
    /// an untrusted certificate, a bad URL, a runtime that speaks neither
    /// dialect) fail at once.
    pub fn connect_budget(mut self, d: Duration) -> Self {
        self.config.connect_budget = d;
        self
    }

    /// A write to the connection that makes no progress this long means the
    /// connection is dead (default 5 s).
    pub fn write_timeout(mut self, d: Duration) -> Self {
        self.config.write_timeout = d.max(Duration::from_millis(1));
        self
    }

    /// With requests outstanding, a runtime that sends nothing at all this
    /// long is taken for a dead connection (default 10 s): runtimes accept
    /// a request at once, so silence means a stalled link.
    pub fn response_timeout(mut self, d: Duration) -> Self {
        self.config.response_timeout = d.max(Duration::from_millis(1));
        self
    }

    /// How long [`cancel`](crate::CallHandle::cancel) waits for the
    /// runtime's confirmation before reporting
    /// [`CancelOutcome::Dispatched`](crate::CancelOutcome::Dispatched) (or
    /// `NotDispatched` when it could not even be written) (default 2 s).
    pub fn cancel_timeout(mut self, d: Duration) -> Self {
        self.config.cancel_timeout = d;
        self
    }

    /// Deadline of calls that do not set one (default 5 minutes).
    pub fn default_deadline(mut self, d: Duration) -> Self {
        self.config.default_deadline = d;
        self
    }

    /// Name and version announced in the handshake.
    pub fn client_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.config.client_name = name.into();
        self.config.client_version = version.into();
        self
    }

    /// How many calls may be in flight at once (default 1024). Further
    /// calls wait for a slot (back-pressure) instead of queueing unboundedly.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.config.max_in_flight = n.max(1);
        self
    }

    /// Overrides the heartbeat interval the runtime negotiates. The
    /// connection is declared dead after two intervals without any frame.
    pub fn heartbeat_interval(mut self, d: Duration) -> Self {
        self.config.heartbeat = Some(d.max(Duration::from_millis(10)));
        self
    }

    /// Liveness probe interval for runtimes that answer pings but negotiate
    /// no heartbeat (default 15 s).
    pub fn keepalive_interval(mut self, d: Duration) -> Self {
        self.config.keepalive = d.max(Duration::from_millis(10));
        self
    }

    /// Largest frame accepted or sent, in bytes (default 16 MiB).
    pub fn max_frame_size(mut self, bytes: usize) -> Self {
        self.config.max_frame_size = bytes.max(1024);
        self
    }

    /// Largest result reassembled from `result_chunk` events, in bytes
    /// (default 64 MiB). A bigger streamed result is returned as its
    /// reference (`result_id`, ...) instead of its value.
    pub fn max_result_size(mut self, bytes: usize) -> Self {
        self.config.max_result_size = bytes;
        self
    }

    /// Events buffered per call for [`crate::Invocation::events`] (default 256).
    pub fn event_buffer(mut self, n: usize) -> Self {
        self.config.event_buffer = n.max(1);
        self
    }

    /// Capacity and time-to-live of the cache of terminal outcomes by key
    /// (default 1024 entries, 10 minutes). A repeated call with a cached key
    /// is answered locally, even against runtimes that replay only
    /// `job.accepted`. A capacity of 0 disables the cache.
    pub fn outcome_cache(mut self, capacity: usize, ttl: Duration) -> Self {
        self.config.outcome_cache_capacity = capacity;
        self.config.outcome_cache_ttl = ttl;
        self
    }

    /// Trusts this certificate (DER) as a root for `wss://`, in addition to
    /// the bundled web PKI roots: for a runtime with a private CA or a
    /// self-signed certificate.
    pub fn add_root_certificate_der(mut self, der: impl Into<Vec<u8>>) -> Self {
        self.config
            .tls
            .extra_roots
            .push(rustls_pki_types::CertificateDer::from(der.into()));
        self
    }

    /// Trusts every certificate in this PEM text as a root for `wss://`.
    /// Fails with [`Error::InvalidCall`] naming the problem if the text holds
    /// no valid certificate.
    pub fn add_root_certificates_pem(mut self, pem: &str) -> Result<Self, Error> {
        use rustls_pki_types::pem::PemObject;
        let certs: Vec<_> = rustls_pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| Error::InvalidCall(format!("root certificate PEM is invalid: {e}")))?;
        if certs.is_empty() {
            return Err(Error::InvalidCall(
                "root certificate PEM holds no certificate".into(),
            ));
        }
        self.config.tls.extra_roots.extend(certs);
        Ok(self)
    }

    /// Uses this rustls configuration for `wss://` as is (roots, client
    /// certificates, protocol versions); overrides the other TLS settings.
    pub fn tls_config(mut self, config: Arc<rustls::ClientConfig>) -> Self {
        self.config.tls.config = Some(config);
        self
    }

    /// Largest artifact [`Client::fetch_artifact`] accepts, in bytes
    /// (default 64 MiB).
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn max_artifact_size(mut self, bytes: u64) -> Self {
        self.config.max_artifact_size = bytes;
        self
    }

    /// Records every call in `journal` before it is sent (prepared before
    /// send), so that a restarted process can resume calls the crashed one
    /// left unfinished ([`Client::recover`]) and read their outcomes
    /// ([`Client::lookup`]). One journal serves one client, through a
    /// dedicated writer thread (journal I/O never runs on the async
    /// runtime). See `SqliteJournal` (feature `sqlite`) for the durable
    /// one on one host and `journal_path` for its short form, and
    /// `PostgresJournal` (feature `postgres`) for one a fleet of workers
    /// shares. Each adds one durable write before a call's first send.
    pub fn journal(mut self, journal: impl Journal) -> Self {
        self.journal.set_journal(Box::new(journal));
        self
    }

    /// Journals calls in the SQLite file at `path` (created if absent),
    /// opened by [`connect`](ClientBuilder::connect) with default
    /// [`SqliteOptions`](crate::SqliteOptions). A file that is corrupt, not
    /// a journal, or held by another client fails `connect` with
    /// [`Error::Journal`].
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub fn journal_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.journal.set_path(path.into());
        self
    }

    /// How long the journal keeps records, and how many (default
    /// [`Retention::default`]: terminal records 24 hours, at most 100 000).
    pub fn journal_retention(mut self, retention: Retention) -> Self {
        self.journal.set_retention(retention);
        self
    }

    /// Whether unfinished journaled calls are re-driven automatically on
    /// connect, or only when [`Client::recover`] is called (the default).
    pub fn recovery(mut self, mode: RecoveryMode) -> Self {
        self.journal.set_recovery(mode);
        self
    }

    /// Connects and completes the session handshake, riding out a flaky
    /// network: transient failures of the TCP connect, the upgrade or the
    /// handshake are retried with the retry policy's backoff for up to
    /// [`connect_budget`](Self::connect_budget). Definitive ones fail at
    /// once with an error that names what failed: [`Error::Unauthenticated`],
    /// [`Error::Connect`] with `retryable: false` (bad URL, untrusted
    /// certificate, an HTTP status that is not transient), or
    /// [`Error::Handshake`] with `retryable: false` (a runtime that answered
    /// but speaks neither dialect). Later connection losses are handled by
    /// the client.
    ///
    /// An `http://` or `https://` URL selects the HTTP binding
    /// (`docs/http-binding.md` in this package): no connection is kept and there is no
    /// handshake, so only the URL and token format are checked here; a
    /// wrong address or token shows on the first call.
    pub async fn connect(self) -> Result<Client, Error> {
        Ok(self.start(true).await?.started())
    }

    /// Returns a client at once, without connecting (as tonic's
    /// `connect_lazy`): the first call dials, and every call waits for the
    /// connection within its own deadline. Fails only on a configuration
    /// that can never work (a bad URL, an invalid token) or a journal that
    /// cannot be opened. Must be called within a Tokio runtime.
    pub async fn connect_lazy(self) -> Result<Client, Error> {
        Ok(self.start(false).await?.started())
    }

    /// Starts the backend, waits for the first session when `wait_ready`,
    /// then opens the journal (so a failed connect leaves the journal to
    /// the next attempt).
    async fn start(self, wait_ready: bool) -> Result<Client, Error> {
        let config = Arc::new(self.config);
        let in_flight = Arc::new(Semaphore::new(config.max_in_flight));
        let profile = Arc::new(Mutex::new(None));
        let (events, _) = tokio::sync::broadcast::channel(EVENT_CAPACITY);
        let backend = if is_http_url(&config.url) {
            http_backend(&config, &profile)?
        } else {
            check_ws_url(&config.url)?;
            let (tx, rx) = mpsc::channel(config.max_in_flight.clamp(16, 4096));
            let (ready_tx, ready_rx) = oneshot::channel();
            let ready = wait_ready.then_some(ready_tx);
            let core = Core::new(
                config.clone(),
                ready,
                profile.clone(),
                events.clone(),
                Instant::now(),
            );
            let dialect = core.dialect_hint();
            tokio::spawn(ws::run(config.clone(), rx, core));
            let backend = Backend::Ws { tx, dialect };
            if wait_ready {
                let first = ready_rx.await.unwrap_or(Err(Error::Closed));
                if let Err(e) = first {
                    backend.close().await;
                    return Err(e);
                }
            }
            backend
        };
        // A corrupt, foreign or locked journal fails here (and the backend
        // closes with the client).
        let journal = match self.journal.open(config.max_in_flight).await {
            Ok(journal) => journal,
            Err(e) => {
                backend.close().await;
                return Err(e);
            }
        };
        Ok(Client {
            inner: Arc::new(Inner {
                in_flight,
                config,
                backend,
                profile,
                #[cfg(feature = "http")]
                artifacts: OnceLock::new(),
                journal,
                live_keys: LiveKeys::default(),
                events,
            }),
        })
    }
}

/// The HTTP binding's backend; its runtime profile is known without a
/// handshake.
#[cfg(feature = "http")]
fn http_backend(
    config: &Arc<Config>,
    profile: &Mutex<Option<RuntimeProfile>>,
) -> Result<Backend, Error> {
    let backend = HttpBackend::new(config.clone())?;
    *lock(profile) = Some(backend.profile());
    Ok(Backend::Http(Arc::new(backend)))
}

/// Without the `http` feature an `http(s)://` URL can never work: say which
/// feature is missing rather than "unsupported scheme".
#[cfg(not(feature = "http"))]
fn http_backend(
    config: &Arc<Config>,
    _profile: &Mutex<Option<RuntimeProfile>>,
) -> Result<Backend, Error> {
    Err(Error::Connect {
        url: config.url.clone(),
        message: "this build of arcp-client has no HTTP binding: enable its `http` feature \
                  (or use a ws:// or wss:// URL)"
            .into(),
        retryable: false,
    })
}

/// Connection events kept for a listener that has not read them yet.
const EVENT_CAPACITY: usize = 64;

/// A WebSocket URL that can never work fails at once, not after retries.
fn check_ws_url(url: &str) -> Result<(), Error> {
    let bad = |message: String| Error::Connect {
        url: url.to_owned(),
        message,
        retryable: false,
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(|| {
        bad("the URL has no scheme (expected ws://, wss://, http:// or https://)".into())
    })?;
    if !matches!(scheme.to_ascii_lowercase().as_str(), "ws" | "wss") {
        return Err(bad(format!(
            "unsupported URL scheme {scheme:?} (expected ws://, wss://, http:// or https://)"
        )));
    }
    if rest.is_empty() || rest.starts_with('/') {
        return Err(bad("the URL has no host".into()));
    }
    Ok(())
}

struct Inner {
    config: Arc<Config>,
    backend: Backend,
    in_flight: Arc<Semaphore>,
    /// What the runtime said in the last handshake, once there was one.
    profile: Arc<Mutex<Option<RuntimeProfile>>>,
    /// Built on first use: most clients never fetch an artifact.
    #[cfg(feature = "http")]
    artifacts: OnceLock<Result<ArtifactFetcher, Error>>,
    /// The invocation journal, when configured.
    journal: Option<JournalHandle>,
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

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.inner.config.url)
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

    /// Invokes a tool with a fresh idempotency key, retrying across failures
    /// without ever running it twice. The common case.
    pub async fn invoke_tool(&self, tool: &str, args: Value) -> Result<ToolOutput, Error> {
        self.invoke(tool, args).send().await
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
    /// answer, timers and cached outcomes. Nothing of a finished call stays
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
        if let Some(journal) = &self.inner.journal {
            journal.close().await;
        }
    }

    /// The unfinished calls the journal hands this client to re-drive
    /// ([`Client::recover`]); none without a journal.
    pub(crate) async fn claim_unfinished(&self) -> Result<Vec<JournalEntry>, Error> {
        let Some(journal) = &self.inner.journal else {
            return Ok(Vec::new());
        };
        journal.unfinished().await
    }

    /// Nobody here drives `key` any more: its record stays unfinished, and
    /// a shared journal lets another worker claim it now.
    pub(crate) fn release_claim(&self, key: &IdempotencyKey) {
        if let Some(journal) = &self.inner.journal {
            journal.release(key);
        }
    }

    /// What the journal recorded for `key`: where the call stands and, once
    /// it ended, its outcome ([`JournalEntry::outcome`]). Reads everything
    /// this client recorded before the call. `Ok(None)` without a journal or
    /// when the key is unknown (or its record expired).
    pub async fn lookup(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, Error> {
        match &self.inner.journal {
            Some(journal) => journal.lookup(key).await,
            None => Ok(None),
        }
    }

    /// Deletes the journal's record of `key`, so it is neither recovered
    /// nor answered from the journal again; whether there was one. For
    /// unfinished calls the caller decided to abandon.
    pub async fn discard(&self, key: &IdempotencyKey) -> Result<bool, Error> {
        match &self.inner.journal {
            Some(journal) => journal.discard(key).await,
            None => Ok(false),
        }
    }

    /// Starts what a new client does in the background (automatic recovery).
    fn started(self) -> Self {
        if let Some(journal) = &self.inner.journal {
            if journal.recovery() == RecoveryMode::Automatic {
                spawn_recovery(self.clone());
            }
        }
        self
    }

    /// Downloads an artifact (an `artifact_ref` or `result_ref`, see
    /// [`ArtifactRef::from_value`]) over HTTP(S) and verifies it: at most
    /// [`ClientBuilder::max_artifact_size`] bytes, and exactly the reference's
    /// `size` and `sha256` when it gives them. Transient failures are
    /// retried with the client's [`RetryPolicy`]; the client's default
    /// deadline bounds the whole fetch. The bearer token is sent only to
    /// URIs on the runtime's own origin.
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

    /// Runs a call to its outcome within its deadline: the in-flight slot,
    /// the journal's prepare and every attempt all count against it. With a
    /// journal, the call is recorded durably before it is handed on
    /// (prepared before send) and its outcome recorded after.
    pub(crate) async fn dispatch(&self, mut request: Box<CallRequest>) -> Outcome {
        request.seal();
        telemetry::call_started();
        let key = request.key.clone();
        let shared = request.shared.clone();
        let deadline = request.deadline;
        let request_started = request.started;
        let in_doubt = request.in_doubt;
        // A journal that fails before it could read the key's record cannot
        // say an earlier process never sent it: only a key generated for
        // this call is known to be new.
        let key_may_be_known = in_doubt || request.key_supplied;
        let deadline_at =
            tokio::time::Instant::from_std(saturating_deadline(request.started, deadline));
        let mut guard = AbandonOnDrop {
            client: self,
            key: key.clone(),
            shared: shared.clone(),
            armed: true,
        };
        // Both transports hold every caller to its own deadline (the
        // connection task in one heap of timers for every call, the HTTP
        // binding in its attempt loop, which knows what each attempt
        // exposed); a call that needs no other wait (no journal, a free
        // in-flight slot) runs no timer here. Anything else is bounded here.
        let direct = self.inner.journal.is_none();
        let untimed = match direct {
            // Borrowed, not owned: no shared reference count to bump.
            true => self.inner.in_flight.try_acquire().ok(),
            false => None,
        };
        // Callers of one key share their fate from here: the transport
        // joins them only later (after the journal's record), or never
        // (HTTP). The WebSocket transport alone joins them at once.
        let joined_at_once = self.inner.journal.is_none() && self.inner.backend.joins_callers();
        let fate = (!joined_at_once).then(|| KeyFateGuard::join(&self.inner.live_keys, &key));
        let timed = match untimed {
            Some(_permit) => Ok(self.inner.backend.invoke(request).await),
            None => tokio::time::timeout_at(deadline_at, self.run_call(request)).await,
        };
        let outcome = match timed {
            Ok(outcome) => {
                guard.armed = false;
                outcome
            }
            Err(_) => {
                let job_id = shared.job_id();
                let exposure = Exposure {
                    bound: job_id.is_some(),
                    in_doubt: shared.abandon() || in_doubt,
                };
                let call = Ended {
                    key: &key,
                    job_id: job_id.as_deref(),
                    exposure,
                    attempts: shared.attempts(),
                    last_error: None,
                };
                Err(give_up(call, Ending::Deadline(deadline)))
            }
        };
        // A journal that fails while driving a call an earlier process may
        // have sent cannot say "did not run": the outcome is unknown, and
        // the record (if any) stays as it was for the next recovery.
        let outcome = match outcome {
            Err(Error::Journal(e)) if key_may_be_known && e.kind != JournalErrorKind::Fenced => {
                Err(Error::OutcomeUnavailable {
                    key: key.clone(),
                    job_id: shared.job_id(),
                    reason: format!(
                        "the journal failed, and an earlier process may have sent a call with \
                         this key ({e})"
                    ),
                    attempts: shared.attempts(),
                    permanent: false,
                })
            }
            other => other,
        };
        telemetry::call_ended(
            outcome.as_ref().map(|out| out.replayed),
            request_started.elapsed(),
            shared.attempts(),
            shared.answered(),
        );
        let mut outcome = outcome;
        // An outcome the journal itself answered (the key's stored
        // outcome, or a conflict with its record) is not written back.
        let journal = self
            .inner
            .journal
            .as_ref()
            .filter(|_| shared.answered() != Answered::Journal);
        if let Some(journal) = journal {
            // "Did not run" is said only once the journal records it
            // durably; a call ending at its deadline gets a short grace.
            let durable_by = deadline_at.max(tokio::time::Instant::now() + DURABLE_GRACE);
            // Boxed: only journaled calls pay for this future's size.
            let recorded = Box::pin(journal.finish_call(&key, &outcome, durable_by)).await;
            if let (Err(why), Err(e)) = (recorded, &outcome) {
                if e.execution() == Execution::NotRun {
                    outcome = Err(not_recorded(&key, e, &why, shared.job_id()));
                }
            }
        }
        // Another caller of this key ran alongside, up to the moment this
        // one is answered: it may have run the tool.
        match (outcome, fate) {
            (Err(e), Some(fate)) if fate.0.is_shared() => {
                Err(shared_fate(e, &key, shared.job_id()))
            }
            (outcome, _) => outcome,
        }
    }

    async fn run_call(&self, request: Box<CallRequest>) -> Outcome {
        let _permit = self
            .inner
            .in_flight
            .acquire()
            .await
            .map_err(|_| Error::Closed)?;
        if let Some(journal) = &self.inner.journal {
            let max_frame_size = self.inner.config.max_frame_size;
            // Boxed: only journaled calls pay for these futures' size.
            return Box::pin(self.run_journaled(journal, request, max_frame_size)).await;
        }
        self.inner.backend.invoke(request).await
    }
}

impl Client {
    /// A journaled call: prepared before it is sent, and stopped if a
    /// shared journal gives it to another worker while this one drives it
    /// (this worker froze past its lease); the new owner finishes it.
    async fn run_journaled(
        &self,
        journal: &JournalHandle,
        mut request: Box<CallRequest>,
        max_frame_size: usize,
    ) -> Outcome {
        let _driving = match journal.prepare_call(&mut request, max_frame_size).await? {
            Ok(driving) => driving,
            Err(answer) => {
                request.shared.set_answered(Answered::Journal);
                return answer;
            }
        };
        let key = request.key.clone();
        let shared = request.shared.clone();
        tokio::select! {
            outcome = self.inner.backend.invoke(request) => outcome,
            () = journal.fenced(&key) => {
                shared.abandon();
                self.inner.backend.abandon(key.clone(), shared);
                Err(journal.fenced_error(&key))
            }
        }
    }
}

/// How long past its deadline a call that did not run waits for the journal
/// to record that durably (else it says it may have run).
const DURABLE_GRACE: Duration = Duration::from_millis(50);

/// A caller's place among the callers of its key in flight; leaves when
/// dropped (however the call ends, or if its future is dropped).
struct KeyFateGuard<'a>(Arc<KeyFate>, &'a LiveKeys, IdempotencyKey);

impl<'a> KeyFateGuard<'a> {
    fn join(live: &'a LiveKeys, key: &IdempotencyKey) -> Self {
        KeyFateGuard(live.join(key), live, key.clone())
    }
}

impl Drop for KeyFateGuard<'_> {
    fn drop(&mut self) {
        self.1.leave(&self.2, &self.0);
    }
}

/// Tells the backend a caller gave up (deadline, or a dropped future), so
/// it forgets the call once nobody waits on it.
struct AbandonOnDrop<'a> {
    client: &'a Client,
    key: IdempotencyKey,
    shared: Arc<CallShared>,
    armed: bool,
}

impl Drop for AbandonOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.abandon();
            self.client
                .inner
                .backend
                .abandon(self.key.clone(), self.shared.clone());
            // Nobody drives the call here any more: it stays unfinished,
            // and a shared journal lets another worker claim it at once.
            if let Some(journal) = &self.client.inner.journal {
                journal.release(&self.key);
            }
        }
    }
}

/// Re-drives every unfinished call in the background
/// ([`RecoveryMode::Automatic`]); outcomes land in the journal.
pub(crate) fn spawn_recovery(client: Client) {
    tokio::spawn(async move {
        loop {
            let calls = match client.recover().await {
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
            // A call that ends unfinished again is not claimed again by the
            // next batch while it is driven; one that ended is not claimed
            // at all. Each batch ends before the next is claimed.
            let unfinished_again = std::sync::atomic::AtomicUsize::new(0);
            let batch = calls.len();
            futures_util::stream::iter(calls)
                .for_each_concurrent(64, |call| {
                    let unfinished_again = &unfinished_again;
                    async move {
                        let key = call.key().cloned();
                        match call.await {
                            Ok(out) => {
                                info!(key = ?key, replayed = out.replayed, "recovered call succeeded")
                            }
                            Err(e) => {
                                if e.execution() == Execution::MayHaveRun {
                                    unfinished_again
                                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                }
                                info!(key = ?key, error = %e, "recovered call ended")
                            }
                        }
                    }
                })
                .await;
            // Calls whose outcome is still unknown stay for a later
            // recovery: claiming them again now would loop.
            if unfinished_again.load(std::sync::atomic::Ordering::Relaxed) > 0
                || batch < crate::journal::RECOVER_BATCH
            {
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_that_can_never_work_are_refused_at_once() {
        for url in ["127.0.0.1:7777", "ftp://x/arcp", "ws://", "ws:///arcp"] {
            let e = check_ws_url(url).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::Connect {
                        retryable: false,
                        ..
                    }
                ),
                "{url}: {e}"
            );
        }
        assert!(check_ws_url("ws://127.0.0.1:7777/arcp").is_ok());
        assert!(check_ws_url("WSS://example.com").is_ok());
    }
}
