//! `Client` (a cheap handle) and `ClientBuilder` (its configuration).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use arcp_types::Dialect;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::connection::{self, CallRequest, Command};
use crate::error::Error;
use crate::invocation::{InvokeBuilder, ToolOutput};
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
            },
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

    /// Connects and completes the session handshake once. Later connection
    /// losses are handled by the client; this first connect fails fast so a
    /// wrong URL or token is reported at once.
    pub async fn connect(self) -> Result<Client, Error> {
        let config = Arc::new(self.config);
        let (tx, rx) = mpsc::channel(config.max_in_flight.clamp(16, 4096));
        let (ready_tx, ready_rx) = oneshot::channel();
        tokio::spawn(connection::run(config.clone(), rx, ready_tx));
        let profile = ready_rx.await.map_err(|_| Error::Closed)??;
        Ok(Client {
            inner: Arc::new(Inner {
                in_flight: Arc::new(Semaphore::new(config.max_in_flight)),
                config,
                tx,
                profile,
            }),
        })
    }
}

struct Inner {
    config: Arc<Config>,
    tx: mpsc::Sender<Command>,
    in_flight: Arc<Semaphore>,
    profile: RuntimeProfile,
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
    /// Starts configuring a client for the runtime at `url` (`ws://` or `wss://`).
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
    pub async fn close(&self) {
        let (reply, rx) = oneshot::channel();
        if self.send_command(Command::Close { reply }).await.is_ok() {
            let _ = rx.await;
        }
    }

    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    pub(crate) async fn send_command(&self, command: Command) -> Result<(), Error> {
        self.inner.tx.send(command).await.map_err(|_| Error::Closed)
    }

    /// Takes an in-flight slot, hands the call to the connection task and
    /// waits for its outcome.
    pub(crate) async fn dispatch(&self, request: CallRequest) -> Result<ToolOutput, Error> {
        let _permit = self
            .inner
            .in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::Closed)?;
        let shared = request.shared.clone();
        let (reply, rx) = oneshot::channel();
        self.send_command(Command::Invoke(Box::new((request, reply))))
            .await?;
        shared
            .dispatched
            .store(true, std::sync::atomic::Ordering::Release);
        rx.await.map_err(|_| Error::Closed)?
    }
}
