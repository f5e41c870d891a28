//! The client's configuration: every knob of [`crate::ClientBuilder`], with
//! its default, in one immutable value shared by both transports.
//!
//! Imports only the redactor (a leaf).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use arcp_types::Dialect;

use crate::redact::{ProvidedTokens, Redactor};

/// Which ARCP message set to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DialectChoice {
    /// ARCP v1.1 (`session.hello`, `job.submit`, ...).
    V1_1,
    /// The legacy RFC-0001 v2 set (`session.open`, `tool.invoke`, ...) that
    /// the published Rust runtime speaks.
    Legacy,
    /// Try v1.1 first; if the runtime does not understand it (a legacy
    /// runtime drops the connection on an unknown message type), reconnect
    /// and speak legacy. The choice is kept for the client's lifetime. The
    /// default (as the CLI's): a fixed dialect the runtime does not speak
    /// costs the whole connect budget before failing.
    #[default]
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

/// How a call is retried across failures.
///
/// Delays follow capped exponential backoff (`initial_delay`, doubled per
/// retry, at most `max_delay`) with *full jitter*: each wait is uniform in
/// `[0, ceiling]`, which spreads reconnect storms of many clients. A
/// `retry_after` hint from the runtime is a floor for the next wait.
///
/// The budget counts sends of the request (`max_attempts`) and wall time
/// from the call's first failure (`max_elapsed`); a failed connect or
/// handshake costs time, not an attempt. The defaults carry a call through
/// several network cuts in a row and still end with a typed outcome within
/// about a minute. The call's deadline bounds everything regardless.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub(crate) initial_delay: Duration,
    pub(crate) max_delay: Duration,
    pub(crate) max_attempts: u32,
    pub(crate) max_elapsed: Duration,
    pub(crate) outcome_poll: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
            max_attempts: 10,
            max_elapsed: Duration::from_secs(60),
            outcome_poll: Duration::from_millis(500),
        }
    }
}

impl RetryPolicy {
    /// Exponential backoff with the default bounds (100 ms initial, 5 s cap,
    /// 10 attempts, 60 s elapsed).
    pub fn exponential() -> Self {
        RetryPolicy::default()
    }

    /// No retries: one attempt, no waiting.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The first delay's ceiling.
    pub fn initial_delay(mut self, d: Duration) -> Self {
        self.initial_delay = d.max(Duration::from_millis(1));
        self
    }

    /// The cap on any single delay.
    pub fn max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d.max(Duration::from_millis(1));
        self
    }

    /// How many times the request may be sent, in all (at least 1).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// How long a call may keep retrying, from its first failure (a long
    /// call that fails late still gets the whole budget).
    pub fn max_elapsed(mut self, d: Duration) -> Self {
        self.max_elapsed = d;
        self
    }

    /// How long a call that the runtime accepted again after a retry (a
    /// replayed `job.accepted`) waits for its outcome on the live stream
    /// before the next recovery step (subscribe, then re-send with the same
    /// key). Doubles per step up to `max_delay`; every job event resets the
    /// wait. Default 500 ms.
    pub fn outcome_poll(mut self, d: Duration) -> Self {
        self.outcome_poll = d.max(Duration::from_millis(1));
        self
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

/// What a token provider's future resolves to.
pub(crate) type TokenResult = Result<String, Box<dyn std::error::Error + Send + Sync>>;

/// The application's token source ([`crate::ClientBuilder::token_provider`]),
/// called for each connection and each HTTP request.
#[derive(Clone)]
pub(crate) struct TokenProvider(
    pub(crate)  Arc<
        dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = TokenResult> + Send>>
            + Send
            + Sync,
    >,
);

impl fmt::Debug for TokenProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<token provider>")
    }
}

/// Which proxy the client's connections go through.
#[derive(Clone, Debug, Default)]
pub(crate) enum ProxyChoice {
    /// The environment's (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`,
    /// `NO_PROXY`), as curl and reqwest read it.
    #[default]
    Env,
    /// None, whatever the environment says.
    Off,
    /// This one (its URL may carry credentials).
    Url(Secret),
}

pub(crate) use crate::redact::shown_url;

/// A redactor of the token alone (for a fetch that has no runtime URL).
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) fn redact_token(token: Option<&Secret>) -> Redactor {
    Redactor::new(token.map(|t| t.0.as_str()), "")
}

/// TLS settings for `wss://` and `https://`.
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
    /// The rustls configuration to connect with: the caller's, else the web
    /// PKI roots and any extra ones with the SDK's own crypto provider. Never
    /// left to a library's default, which reads the process-wide provider
    /// (unset, or ambiguous with two providers compiled in, it panics).
    pub(crate) fn client_config(&self) -> Option<Arc<rustls::ClientConfig>> {
        if let Some(config) = &self.config {
            return Some(config.clone());
        }
        web_pki_config(&self.extra_roots).map(Arc::new)
    }
}

/// The web PKI roots, and `extra` ones, with ring: what a connection trusts
/// unless the caller configured rustls itself. Unparsable extra roots are
/// skipped; the handshake then reports the certificate error, which names
/// the server's certificate.
pub(crate) fn web_pki_config(
    extra: &[rustls_pki_types::CertificateDer<'static>],
) -> Option<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let _ = roots.add_parsable_certificates(extra.iter().cloned());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Some(config)
}

/// How long a runtime keeps a key unless told otherwise: the Python
/// runtime's default (`ClientBuilder::runtime_key_retention`).
pub(crate) const DEFAULT_RUNTIME_KEY_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// Everything the transports need to know. Each wait has its own name.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) url: String,
    pub(crate) token: Option<Secret>,
    /// Called for a fresh token on each (re)connect; wins over `token`.
    pub(crate) token_provider: Option<TokenProvider>,
    /// The provider's recent tokens, redacted with the fixed one.
    pub(crate) provided_tokens: ProvidedTokens,
    /// Extra headers on the WebSocket upgrade and on each HTTP request
    /// (values may be credentials: never shown).
    pub(crate) headers: Vec<(String, Secret)>,
    pub(crate) proxy: ProxyChoice,
    pub(crate) dialect: DialectChoice,
    pub(crate) retry: RetryPolicy,
    /// How long the runtime keeps a key after its first send: no send of
    /// it at or after that (`retry/budget.rs`).
    pub(crate) runtime_key_retention: Duration,
    /// One TCP connect plus WebSocket upgrade (and TLS).
    pub(crate) connect_timeout: Duration,
    /// From the hello to the runtime's welcome.
    pub(crate) handshake_timeout: Duration,
    /// How long `connect()` keeps retrying transient failures.
    pub(crate) connect_budget: Duration,
    /// A write that makes no progress this long means a dead connection.
    pub(crate) write_timeout: Duration,
    /// Requests outstanding and not one frame from the runtime this long
    /// means a dead connection (runtimes accept a submit at once).
    pub(crate) response_timeout: Duration,
    /// How long `cancel()` waits for the runtime's confirmation.
    pub(crate) cancel_timeout: Duration,
    /// The longest a WebSocket driver polls instead of sleeping for a lone
    /// call's reply (`ws/spin.rs`); zero: never.
    pub(crate) spin_limit: Duration,
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
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) max_artifact_size: u64,
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) allow_link_local_artifacts: bool,
    /// Whether a credential may go out in clear to a host other than this
    /// machine (`crate::cleartext`).
    pub(crate) allow_insecure_token: bool,
    /// The least heartbeat interval a runtime may set (a smaller one is
    /// raised to it).
    pub(crate) min_heartbeat_interval: Duration,
    /// A connection lost sooner than this after its handshake does not
    /// reset the reconnect backoff, however useful it was.
    pub(crate) min_connection_lifetime: Duration,
    /// Immediate reconnects allowed at once (`ws::reconnect`).
    pub(crate) reconnect_burst: u32,
    /// Immediate reconnects earned per second (`ws::reconnect`).
    pub(crate) reconnect_per_second: f64,
    /// Total bytes of outcomes the outcome cache keeps.
    pub(crate) outcome_cache_bytes: usize,
    /// Bytes of frames that may wait for a stalled writer before the link
    /// is dropped (at least `max_frame_size`).
    pub(crate) max_outbox_bytes: usize,
    /// Bytes of events a watched call buffers for its watcher.
    pub(crate) event_buffer_bytes: usize,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL's user info and the token are credentials: never shown.
        f.debug_struct("Config")
            .field("url", &shown_url(&self.url))
            .field("token", &self.token)
            .field("token_provider", &self.token_provider)
            .field("headers", &self.headers.len())
            .field("proxy", &self.proxy)
            .field("dialect", &self.dialect)
            .field("retry", &self.retry)
            .field("connect_timeout", &self.connect_timeout)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("default_deadline", &self.default_deadline)
            .field("max_in_flight", &self.max_in_flight)
            .field("max_frame_size", &self.max_frame_size)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

/// The least heartbeat interval a runtime may negotiate, by default.
pub(crate) const DEFAULT_MIN_HEARTBEAT: Duration = Duration::from_secs(1);

/// How long a connection must live to reset the reconnect backoff, by
/// default.
pub(crate) const DEFAULT_MIN_CONNECTION_LIFETIME: Duration = Duration::ZERO;

/// Immediate reconnects allowed at once, by default.
pub(crate) const DEFAULT_RECONNECT_BURST: u32 = 10;

/// Immediate reconnects earned per second, by default.
pub(crate) const DEFAULT_RECONNECT_PER_SECOND: f64 = 1.0;

/// Bytes of outcomes the outcome cache keeps, by default (16 MiB).
pub(crate) const DEFAULT_OUTCOME_CACHE_BYTES: usize = 16 << 20;

/// Bytes of frames that may wait for a stalled writer, by default (32 MiB).
pub(crate) const DEFAULT_MAX_OUTBOX_BYTES: usize = 32 << 20;

/// Bytes of events a watched call buffers, by default (4 MiB).
pub(crate) const DEFAULT_EVENT_BUFFER_BYTES: usize = 4 << 20;

/// Largest artifact accepted by default, in bytes.
pub(crate) const DEFAULT_MAX_ARTIFACT_SIZE: u64 = 64 << 20;

impl Config {
    /// The defaults for a runtime at `url`.
    pub(crate) fn new(url: String) -> Self {
        Config {
            url,
            token: None,
            token_provider: None,
            provided_tokens: ProvidedTokens::default(),
            headers: Vec::new(),
            proxy: ProxyChoice::Env,
            dialect: DialectChoice::Auto,
            retry: RetryPolicy::default(),
            runtime_key_retention: DEFAULT_RUNTIME_KEY_RETENTION,
            connect_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            connect_budget: Duration::from_secs(30),
            write_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(10),
            cancel_timeout: Duration::from_secs(2),
            spin_limit: Duration::from_micros(100),
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
            max_artifact_size: DEFAULT_MAX_ARTIFACT_SIZE,
            allow_link_local_artifacts: false,
            allow_insecure_token: false,
            min_heartbeat_interval: DEFAULT_MIN_HEARTBEAT,
            min_connection_lifetime: DEFAULT_MIN_CONNECTION_LIFETIME,
            reconnect_burst: DEFAULT_RECONNECT_BURST,
            reconnect_per_second: DEFAULT_RECONNECT_PER_SECOND,
            outcome_cache_bytes: DEFAULT_OUTCOME_CACHE_BYTES,
            max_outbox_bytes: DEFAULT_MAX_OUTBOX_BYTES,
            event_buffer_bytes: DEFAULT_EVENT_BUFFER_BYTES,
        }
    }

    /// The one redactor of both transports: the token and the URL's own
    /// secrets ([`Redactor`]).
    pub(crate) fn redactor(&self) -> Redactor {
        let redactor = Redactor::new(self.token.as_ref().map(|t| t.0.as_str()), &self.url);
        self.provided_tokens.added_to(redactor)
    }

    /// Removes every secret from text a runtime sent back ([`Redactor`]).
    pub(crate) fn redact(&self, text: String) -> String {
        self.redactor().redact_owned(text)
    }
}

/// Whether a runtime URL selects the HTTP binding (`http://` or `https://`).
pub(crate) fn is_http_url(url: &str) -> bool {
    let url = url.trim_start();
    let starts = |prefix: &str| {
        url.get(..prefix.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
    };
    starts("http://") || starts("https://")
}

#[cfg(test)]
mod url_tests {
    use super::is_http_url;

    #[test]
    fn http_urls_are_recognised_by_scheme() {
        assert!(is_http_url("http://127.0.0.1:1/arcp"));
        assert!(is_http_url("HTTPS://example.com"));
        assert!(!is_http_url("ws://127.0.0.1:1/arcp"));
        assert!(!is_http_url("wss://example.com"));
        assert!(!is_http_url("htt"));
        assert!(!is_http_url("é"));
    }
}
