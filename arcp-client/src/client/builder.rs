//! `ClientBuilder`: a client's configuration, and connecting it (the
//! backend for the URL's scheme, the first session when asked, the
//! journal). The credential, proxy and TLS setters are in
//! `builder/credentials.rs`.

#[cfg(feature = "sqlite")]
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, DialectChoice, RetryPolicy};
use crate::error::Error;
use crate::journal::{Journal, JournalSetup, RecoveryMode, Retention};
use crate::tuning::Tuning;

use super::lazy_journal::LazyJournal;
use super::Client;

mod credentials;
mod start;

use start::{start_backend, Started};

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
    pub(super) fn new(url: impl Into<String>) -> Self {
        ClientBuilder {
            config: Config::new(url.into()),
            journal: JournalSetup::default(),
        }
    }

    /// The least heartbeat interval a runtime may negotiate (default 1 s):
    /// a smaller one (a runtime asking for 1 ms) is raised to this floor.
    /// [`heartbeat_interval`](Self::heartbeat_interval), the caller's own
    /// choice, is not subject to it.
    pub fn min_heartbeat_interval(mut self, d: Duration) -> Self {
        self.config.min_heartbeat_interval = d;
        self
    }

    /// How long a connection must have lived for its loss to reset the
    /// reconnect backoff (default zero: off). A connection lost sooner backs
    /// off like a failed dial even if it answered a call, so a runtime that
    /// accepts and then drops every connection gets no reconnect loop. Off
    /// by default because it slows recovery on a network that cuts
    /// connections often: 1,000 calls through a proxy killing every 50th
    /// frame took 29 s with 200 ms instead of 10 s, and some reached their
    /// deadline; with 1 s, 300 calls ran out of their retry budget.
    /// [`immediate_reconnects`](Self::immediate_reconnects), on by default,
    /// stops such a loop without that cost.
    pub fn min_connection_lifetime(mut self, d: Duration) -> Self {
        self.config.min_connection_lifetime = d;
        self
    }

    /// How many immediate reconnects a lost connection may cause (default:
    /// a burst of 10, refilled at 1 per second). A lost connection that
    /// answered something is normally followed by an immediate reconnect;
    /// each takes a token from a bucket of `burst`, refilled at
    /// `per_second` and by one per 4 requests the lost connections
    /// answered. Without a token the reconnect waits the retry policy's
    /// backoff, as after a failed dial. So a runtime that answers once per
    /// connection and drops it gets at most `burst`, then `per_second`
    /// plus a quarter per connection, immediate reconnects; a network that
    /// cuts busy connections is never slowed (their answers pay). `burst`
    /// 0 backs off after every loss; a `per_second` that is not a finite
    /// positive number refills by answers only.
    pub fn immediate_reconnects(mut self, burst: u32, per_second: f64) -> Self {
        self.config.reconnect_burst = burst;
        self.config.reconnect_per_second = per_second;
        self
    }

    /// The most bytes of frames that may wait for the connection's writer
    /// (default 32 MiB, and never less than
    /// [`max_frame_size`](Self::max_frame_size)). A runtime that stops
    /// reading while it keeps sending (pings to answer) stalls the writer;
    /// past this bound the connection is dropped and its calls re-driven,
    /// with their keys, on a new one. New submits never grow it past the
    /// bound: while less than one frame's worth of room is left they wait
    /// (within their deadlines) for the writer, and a write that makes no
    /// progress ends at [`write_timeout`](Self::write_timeout).
    pub fn max_outbox_bytes(mut self, bytes: usize) -> Self {
        self.config.max_outbox_bytes = bytes;
        self
    }

    /// Which message set to speak (default [`DialectChoice::Auto`]: v1.1,
    /// then legacy if the runtime does not speak v1.1); accepts an
    /// [`arcp_types::Dialect`] too.
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
    /// welcome, per WebSocket connection (default 10 s). A timeout is
    /// transient: the client dials again. The HTTP binding has no session
    /// hello: its connections are bounded by
    /// [`connect_timeout`](Self::connect_timeout) alone.
    pub fn handshake_timeout(mut self, d: Duration) -> Self {
        self.config.handshake_timeout = d;
        self
    }

    /// How long opening one connection may take (default 10 s): TCP plus
    /// TLS, and the WebSocket upgrade or, over HTTP, a proxy's `CONNECT`.
    /// A timeout is transient: the client dials again (a call's own
    /// deadline still bounds the whole call).
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

    /// Performance and memory knobs ([`tuning`](crate::tuning): polling for
    /// replies, event and outcome buffers); the knobs `tuning` leaves unset
    /// keep their defaults.
    pub fn tuning(mut self, tuning: Tuning) -> Self {
        let c = &mut self.config;
        c.spin_limit = tuning.spin_limit.unwrap_or(c.spin_limit);
        c.event_buffer = tuning.event_buffer.unwrap_or(c.event_buffer);
        c.event_buffer_bytes = tuning.event_buffer_bytes.unwrap_or(c.event_buffer_bytes);
        if let Some((capacity, ttl)) = tuning.outcome_cache {
            c.outcome_cache_capacity = capacity;
            c.outcome_cache_ttl = ttl;
        }
        c.outcome_cache_bytes = tuning.outcome_cache_bytes.unwrap_or(c.outcome_cache_bytes);
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

    /// Lets [`Client::fetch_artifact`] reach link-local and cloud metadata
    /// addresses (default: refused; see
    /// [`ArtifactFetcherBuilder::allow_link_local`](crate::ArtifactFetcherBuilder::allow_link_local)).
    #[cfg(feature = "http")]
    #[cfg_attr(docsrs, doc(cfg(feature = "http")))]
    pub fn allow_link_local_artifacts(mut self, allow: bool) -> Self {
        self.config.allow_link_local_artifacts = allow;
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

    /// How long the runtime remembers an idempotency key (default 24
    /// hours). A journaled call first sent longer ago than that is never
    /// sent again: past it, the runtime would take the key as new and run
    /// the tool a second time. [`Client::recover`] ends such a record
    /// "outcome unknown" (the journal keeps it as
    /// [`JournalOutcome::OutcomeUnknown`](crate::JournalOutcome) with the
    /// reason; `arcp journal list` shows it) instead of re-sending it, and a
    /// call re-issuing its key is answered [`Error::OutcomeUnavailable`].
    /// The age counts from the call's prepare, which precedes its first
    /// send, on the clock of the process that wrote it: the client uses the
    /// retention less a margin for another worker's clock that runs ahead
    /// (a tenth of it, at most a minute), and a record dated further ahead
    /// of its own clock than that has an unknown age (never sent again).
    ///
    /// Known retentions: the v1.1 Python runtime keeps keys 24 hours by
    /// default (configurable there). The v1.1 specification sets no
    /// minimum; the legacy RFC asks runtimes to keep a key "for at least the
    /// lease horizon of the operation", and the legacy Rust runtime (2.0.0)
    /// documents no expiry. The TypeScript, Go, Java and PHP runtimes'
    /// retention is unknown. Set this to the shortest retention of the
    /// runtimes the client may reach, less the longest a send may take to
    /// reach the runtime: the limit holds when a send is written, and a
    /// proxy or queue that holds it delivers a send written just inside the
    /// retention outside it (where the tool runs again).
    pub fn runtime_key_retention(mut self, retention: Duration) -> Self {
        self.journal.set_runtime_key_retention(retention);
        self.config.runtime_key_retention = retention;
        self
    }

    /// Whether unfinished journaled calls are re-driven automatically on
    /// connect, or only when [`Client::recover`] is called (the default).
    pub fn recovery(mut self, mode: RecoveryMode) -> Self {
        self.journal.set_recovery(mode);
        self
    }

    /// Redacts or drops argument fields before a call is recorded in the
    /// journal: `redact(tool, &mut arguments)` runs on a copy of each
    /// journaled call's arguments, before the record is written. The call
    /// itself always sends the real arguments.
    ///
    /// When the hook changes the arguments, the record holds the changed
    /// ones and the SHA-256 of the unredacted intent (in canonical form), so
    /// a re-issue of the key with the same arguments is still the same
    /// call, and with other arguments is refused ([`Error::DuplicateKey`]).
    /// Such a record cannot be re-sent: [`Client::recover`] ends it
    /// "outcome unknown: not recoverable" ([`Error::OutcomeUnavailable`],
    /// may have run; [`Client::lookup`] and `arcp journal list` show it)
    /// instead of sending other arguments under its key. To finish such a
    /// call, re-issue it with its key and full arguments. A hook that
    /// panics fails the call with [`Error::InvalidCall`] before anything
    /// is recorded or sent.
    ///
    /// The digest lets whoever reads the journal confirm a guess of the
    /// whole intent: a value with few possibilities (a PIN) stays
    /// guessable; keep such values out of arguments altogether.
    ///
    /// ```
    /// use arcp_sdk::Client;
    /// let builder = Client::builder("ws://127.0.0.1:7777/arcp").journal_redact(
    ///     |tool: &str, args: &mut serde_json::Value| {
    ///         if tool == "charge" {
    ///             if let Some(card) = args.get_mut("card") {
    ///                 *card = "<redacted>".into();
    ///             }
    ///         }
    ///     },
    /// );
    /// # drop(builder);
    /// ```
    pub fn journal_redact<F>(mut self, redact: F) -> Self
    where
        F: Fn(&str, &mut serde_json::Value) + Send + Sync + 'static,
    {
        self.journal
            .set_redaction(crate::journal::Redaction(std::sync::Arc::new(redact)));
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
        let max_in_flight = self.config.max_in_flight;
        let mut started = start_backend(Arc::new(self.config), true)?;
        if let Some(ready) = started.ready.take() {
            let first = ready.await.unwrap_or(Err(Error::Closed));
            if let Err(e) = first {
                started.backend.close().await;
                return Err(e);
            }
        }
        // A corrupt, foreign or locked journal fails here (and the backend
        // closes with the client); opened after the first session, so a
        // failed connect leaves the journal to the next attempt.
        let journal = match self.journal.open(max_in_flight).await {
            Ok(journal) => journal,
            Err(e) => {
                started.backend.close().await;
                return Err(e);
            }
        };
        Ok(started
            .into_client(LazyJournal::opened(journal), None)
            .started())
    }

    /// Returns a client at once, without connecting and without waiting (as
    /// tonic's `Endpoint::connect_lazy`): the first call dials, and every
    /// call waits for the connection within its own deadline. The journal,
    /// if any, is opened on first use (at once in the background with
    /// [`RecoveryMode::Automatic`]).
    ///
    /// It cannot fail: what `connect` would refuse at once (a bad URL, an
    /// invalid token or header, a token over cleartext, no Tokio runtime
    /// to run in) ends every call of the client with that error instead,
    /// and a journal that cannot be opened ends every call, and
    /// [`Client::recover`], [`Client::lookup`] and [`Client::discard`], with
    /// the [`Error::Journal`] naming it. None of these sent anything.
    pub fn connect_lazy(self) -> Client {
        let config = Arc::new(self.config);
        let journal = LazyJournal::deferred(self.journal, config.max_in_flight);
        let started = match tokio::runtime::Handle::try_current() {
            Ok(_) => start_backend(config.clone(), false),
            Err(_) => Err(Error::Connect {
                url: crate::config::shown_url(&config.url),
                message: "connect_lazy was called outside a Tokio runtime: build the client \
                          within one"
                    .into(),
                retryable: false,
                source: None,
            }),
        };
        match started {
            Ok(started) => started.into_client(journal, None).started(),
            Err(e) => Started::unusable(config).into_client(journal, Some(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuning_sets_only_the_knobs_it_names() {
        let default = ClientBuilder::new("ws://127.0.0.1:7777/arcp");
        let tuned = default
            .clone()
            .tuning(Tuning::new().spin_limit(Duration::ZERO).event_buffer(0));
        assert_eq!(tuned.config.spin_limit, Duration::ZERO);
        assert_eq!(tuned.config.event_buffer, 1, "at least one event");
        assert_eq!(
            tuned.config.event_buffer_bytes,
            default.config.event_buffer_bytes
        );
        assert_eq!(
            (
                tuned.config.outcome_cache_capacity,
                tuned.config.outcome_cache_ttl
            ),
            (
                default.config.outcome_cache_capacity,
                default.config.outcome_cache_ttl
            )
        );
        let tuned = default
            .clone()
            .tuning(Tuning::new().outcome_cache(0, Duration::from_secs(1)));
        assert_eq!(tuned.config.outcome_cache_capacity, 0);
        assert_eq!(tuned.config.spin_limit, default.config.spin_limit);
    }
}
