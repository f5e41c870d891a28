//! `Client` (a cheap handle) and `ClientBuilder` (its configuration).

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arcp_types::{Dialect, IdempotencyKey};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::connection::{self, CallRequest, Command};
use crate::error::Error;
use crate::http::{self, ArtifactFetcher, ArtifactRef, HttpBackend};
use crate::invocation::{Invocation, InvokeBuilder, ToolOutput};
use crate::journal::{
    self, Journal, JournalEntry, JournalHandle, JournalSetup, RecoveryMode, Retention,
};
use crate::profile::RuntimeProfile;
use crate::retry::RetryPolicy;

/// Which ARCP message set to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DialectChoice {
    /// ARCP v1.1 (`session.hello`, `job.submit`, ...). The default.
    #[default]
    V1_1,
    /// The legacy RFC-0001 v2 set (`session.open`, `tool.invoke`, ...) that
    /// the published Rust runtime speaks.
    Legacy,
    /// Try v1.1 first; if the runtime does not understand it (a legacy
    /// runtime drops the connection on an unknown message type), reconnect
    /// and speak legacy. The choice is kept for the client's lifetime.
    Auto,
}

impl From<Dialect> for DialectChoice {
    fn from(d: Dialect) -> Self {
        match d {
            Dialect::Legacy => DialectChoice::Legacy,
            _ => DialectChoice::V1_1,
        }
    }
}

impl std::str::FromStr for DialectChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "v1.1" | "v1_1" | "1.1" => Ok(DialectChoice::V1_1),
            "legacy" | "v2" | "rfc0001" => Ok(DialectChoice::Legacy),
            "auto" => Ok(DialectChoice::Auto),
            other => Err(format!(
                "unknown dialect {other:?}: expected auto, v1.1 or legacy"
            )),
        }
    }
}

/// A string that never appears in `Debug` output or logs.
#[derive(Clone)]
pub(crate) struct Secret(pub(crate) String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// TLS settings for `wss://`.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    pub(crate) extra_roots: Vec<rustls_pki_types::CertificateDer<'static>>,
    pub(crate) config: Option<Arc<rustls::ClientConfig>>,
}

impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSettings")
            .field("extra_roots", &self.extra_roots.len())
            .field("custom_config", &self.config.is_some())
            .finish()
    }
}

impl TlsSettings {
    /// The rustls configuration to connect with, when anything is customised
    /// (otherwise the WebSocket library's default: the web PKI roots).
    pub(crate) fn client_config(&self) -> Option<Arc<rustls::ClientConfig>> {
        if let Some(config) = &self.config {
            return Some(config.clone());
        }
        if self.extra_roots.is_empty() {
            return None;
        }
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        // Unparsable extra roots are skipped; the handshake then reports the
        // certificate error, which names the server's certificate.
        let _ = roots.add_parsable_certificates(self.extra_roots.iter().cloned());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Some(Arc::new(config))
    }
}

/// Everything the connection task needs to know.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) url: String,
    pub(crate) token: Option<Secret>,
    pub(crate) dialect: DialectChoice,
    pub(crate) retry: RetryPolicy,
    pub(crate) handshake_timeout: Duration,
    pub(crate) default_deadline: Duration,
    pub(crate) client_name: String,
    pub(crate) client_version: String,
    pub(crate) max_in_flight: usize,
    pub(crate) heartbeat: Option<Duration>,
    pub(crate) keepalive: Duration,
    pub(crate) max_frame_size: usize,
    pub(crate) event_buffer: usize,
    pub(crate) outcome_cache_capacity: usize,
    pub(crate) outcome_cache_ttl: Duration,
    pub(crate) tls: TlsSettings,
    pub(crate) max_result_size: usize,
    pub(crate) max_artifact_size: u64,
}

/// Configures and connects a [`Client`].
///
/// ```no_run
/// # async fn demo() -> Result<(), arcp_client::Error> {
/// use std::time::Duration;
/// use arcp_client::{Client, RetryPolicy};
///
/// let client = Client::builder("ws://127.0.0.1:7777/arcp")
///     .bearer_token("secret")
///     .retry(RetryPolicy::exponential().max_attempts(8).max_delay(Duration::from_secs(5)))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until connect() is awaited"]
pub struct ClientBuilder {
    config: Config,
    journal: JournalSetup,
}

impl ClientBuilder {
    fn new(url: impl Into<String>) -> Self {
        ClientBuilder {
            config: Config {
                url: url.into(),
                token: None,
                dialect: DialectChoice::V1_1,
                retry: RetryPolicy::default(),
                handshake_timeout: Duration::from_secs(10),
                default_deadline: Duration::from_secs(300),
                client_name: "arcp-rust".into(),
                client_version: env!("CARGO_PKG_VERSION").into(),
                max_in_flight: 1024,
                heartbeat: None,
                keepalive: Duration::from_secs(15),
                max_frame_size: 16 << 20,
                event_buffer: 256,
                outcome_cache_capacity: 1024,
                outcome_cache_ttl: Duration::from_secs(600),
                tls: TlsSettings::default(),
                max_result_size: 64 << 20,
                max_artifact_size: crate::http::DEFAULT_MAX_ARTIFACT_SIZE,
            },
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

    /// How long connecting plus the session handshake may take (default 10 s).
    pub fn handshake_timeout(mut self, d: Duration) -> Self {
        self.config.handshake_timeout = d;
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
    pub fn max_artifact_size(mut self, bytes: u64) -> Self {
        self.config.max_artifact_size = bytes;
        self
    }

    /// Records every call in `journal` before it is sent (prepared before
    /// send), so that a restarted process can resume calls the crashed one
    /// left unfinished ([`Client::recover`]) and read their outcomes
    /// ([`Client::lookup`]). One journal serves one client, through a
    /// dedicated writer thread (journal I/O never runs on the async
    /// runtime). See [`SqliteJournal`](crate::SqliteJournal) for the durable
    /// one and [`ClientBuilder::journal_path`] for the short form; the
    /// added latency per call is in `BENCHMARKS.md`.
    pub fn journal(mut self, journal: impl Journal) -> Self {
        self.journal.set_journal(Box::new(journal));
        self
    }

    /// Journals calls in the SQLite file at `path` (created if absent),
    /// opened by [`connect`](ClientBuilder::connect) with default
    /// [`SqliteOptions`](crate::SqliteOptions). A file that is corrupt, not
    /// a journal, or held by another client fails `connect` with
    /// [`Error::Journal`].
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

    /// Connects and completes the session handshake once. Later connection
    /// losses are handled by the client; this first connect fails fast so a
    /// wrong URL or token is reported at once.
    ///
    /// An `http://` or `https://` URL selects the HTTP binding
    /// (`docs/http-binding.md`): no connection is kept and there is no
    /// handshake, so only the URL and token format are checked here; a
    /// wrong address or token shows on the first call.
    pub async fn connect(self) -> Result<Client, Error> {
        let config = Arc::new(self.config);
        let in_flight = Arc::new(Semaphore::new(config.max_in_flight));
        if http::is_http_url(&config.url) {
            let backend = HttpBackend::new(config.clone())?;
            let profile = backend.profile();
            let journal = self.journal.open(config.max_in_flight).await?;
            return Ok(Client {
                inner: Arc::new(Inner {
                    in_flight,
                    config,
                    backend: Backend::Http(Arc::new(backend)),
                    profile,
                    artifacts: OnceLock::new(),
                    journal,
                }),
            }
            .started());
        }
        let (tx, rx) = mpsc::channel(config.max_in_flight.clamp(16, 4096));
        let (ready_tx, ready_rx) = oneshot::channel();
        tokio::spawn(connection::run(config.clone(), rx, ready_tx));
        let profile = ready_rx.await.map_err(|_| Error::Closed)??;
        // The journal once the runtime answered: a failed connect leaves a
        // journal instance in the builder, so a clone of it can retry. A
        // corrupt, foreign or locked journal fails here (and the new
        // connection closes).
        let journal = self.journal.open(config.max_in_flight).await?;
        Ok(Client {
            inner: Arc::new(Inner {
                in_flight,
                config,
                backend: Backend::WebSocket { tx },
                profile,
                artifacts: OnceLock::new(),
                journal,
            }),
        }
        .started())
    }
}

/// How calls reach the runtime.
enum Backend {
    /// The connection task, over a bounded command channel.
    WebSocket { tx: mpsc::Sender<Command> },
    /// The HTTP binding: calls run on the caller's task.
    Http(Arc<HttpBackend>),
}

struct Inner {
    config: Arc<Config>,
    backend: Backend,
    in_flight: Arc<Semaphore>,
    profile: RuntimeProfile,
    /// Built on first use: most clients never fetch an artifact.
    artifacts: OnceLock<Result<ArtifactFetcher, Error>>,
    /// The invocation journal, when configured.
    journal: Option<JournalHandle>,
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
            .field("runtime", &self.inner.profile.name)
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

    /// Starts building a call with options (key, deadline, events, cancel).
    pub fn invoke(&self, tool: impl Into<String>, args: Value) -> InvokeBuilder {
        InvokeBuilder::new(self.clone(), tool.into(), args)
    }

    /// What the client learned about the runtime in the first handshake.
    pub fn runtime(&self) -> &RuntimeProfile {
        &self.inner.profile
    }

    /// Closes the session gracefully; calls still in flight fail with
    /// [`Error::Closed`].
    ///
    /// With a journal, close also commits everything recorded so far and
    /// releases the journal (its file is unlocked); journal operations on
    /// this client then fail with `JOURNAL_CLOSED`.
    pub async fn close(&self) {
        self.close_connection().await;
        if let Some(journal) = &self.inner.journal {
            journal.close().await;
        }
    }

    /// Re-drives every call the journal holds as unfinished (a call whose
    /// process crashed, or whose outcome was unavailable), with its recorded
    /// key, intent (byte-identical) and trace id, and its recorded deadline
    /// counted again from now. Await the returned invocations for their
    /// outcomes; the runtime deduplicates by key, so a call that already ran
    /// is not run again.
    ///
    /// Returns an empty list without a journal. With
    /// [`RecoveryMode::Automatic`] the client does this itself on connect.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), arcp_client::Error> {
    /// use arcp_client::Client;
    /// let client = Client::builder("ws://127.0.0.1:7777/arcp")
    ///     .journal_path("calls.journal")
    ///     .connect()
    ///     .await?;
    /// for call in client.recover().await? {
    ///     let key = call.key().cloned();
    ///     println!("{key:?}: {:?}", call.await);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn recover(&self) -> Result<Vec<Invocation>, Error> {
        let Some(journal) = &self.inner.journal else {
            return Ok(Vec::new());
        };
        let entries = journal.unfinished().await?;
        Ok(entries
            .into_iter()
            .map(|entry| Invocation::recovered(self.clone(), entry))
            .collect())
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
                journal::spawn_recovery(self.clone());
            }
        }
        self
    }

    async fn close_connection(&self) {
        if let Backend::Http(http) = &self.inner.backend {
            http.close();
            return;
        }
        let (reply, rx) = oneshot::channel();
        if self.send_command(Command::Close { reply }).await.is_ok() {
            let _ = rx.await;
        }
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
    pub async fn fetch_artifact(&self, artifact: &ArtifactRef) -> Result<Vec<u8>, Error> {
        let fetcher = self
            .inner
            .artifacts
            .get_or_init(|| ArtifactFetcher::from_config(&self.inner.config))
            .clone()?;
        fetcher.fetch(artifact).await
    }

    /// Whether calls use the HTTP binding.
    pub(crate) fn is_http(&self) -> bool {
        matches!(self.inner.backend, Backend::Http(_))
    }

    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) async fn send_command(&self, command: Command) -> Result<(), Error> {
        match &self.inner.backend {
            Backend::WebSocket { tx } => tx.send(command).await.map_err(|_| Error::Closed),
            // No connection task: nothing takes commands.
            Backend::Http(_) => Err(Error::Closed),
        }
    }

    /// Takes an in-flight slot, hands the call to the connection task and
    /// waits for its outcome.
    ///
    /// With a journal, the call is recorded durably before it is handed on
    /// (prepared before send) and its terminal outcome recorded after.
    pub(crate) async fn dispatch(&self, mut request: CallRequest) -> Result<ToolOutput, Error> {
        let _permit = self
            .inner
            .in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::Closed)?;
        let Some(journal) = &self.inner.journal else {
            return self.send_call(request).await;
        };
        let max_frame_size = self.inner.config.max_frame_size;
        if let Some(answer) = journal.prepare_call(&mut request, max_frame_size).await? {
            return answer;
        }
        let key = request.key.clone();
        let outcome = self.send_call(request).await;
        journal.finish_call(&key, &outcome).await;
        outcome
    }

    /// Hands a call to the backend and waits for its outcome.
    async fn send_call(&self, request: CallRequest) -> Result<ToolOutput, Error> {
        let shared = request.shared.clone();
        if let Backend::Http(http) = &self.inner.backend {
            shared
                .dispatched
                .store(true, std::sync::atomic::Ordering::Release);
            return http.invoke(request).await;
        }
        let (reply, rx) = oneshot::channel();
        self.send_command(Command::Invoke(Box::new((request, reply))))
            .await?;
        shared
            .dispatched
            .store(true, std::sync::atomic::Ordering::Release);
        rx.await.map_err(|_| Error::Closed)?
    }
}
