//! The builder, its knobs, and the per-dialect defaults.

use std::collections::HashMap;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use arcp_types::Dialect;
use serde_json::Value;

use crate::server::MockRuntime;
use crate::tool::{ToolContext, ToolFailure, ToolFn};

/// What a resubmission with the same idempotency key and the same intent gets
/// back. Each variant reproduces one family of published runtimes.
///
/// | policy | runtimes | after completion | while the original still runs |
/// |---|---|---|---|
/// | [`TerminalReplay`](Self::TerminalReplay) | Python 1.1.3 | `job.accepted` (original job) + the stored terminal | `job.accepted` only |
/// | [`AcceptedOnly`](Self::AcceptedOnly) | Rust 2.0.0, TS, Go, Java | `job.accepted` only | `job.accepted` only |
/// | [`AckReplay`](Self::AckReplay) | older PHP | `ack` with `replay: true` | `ack` with `replay: true` |
/// | [`TerminalOnly`](Self::TerminalOnly) | newer PHP | the stored terminal | the terminal, once the job ends |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReplayPolicy {
    /// The Python 1.1.3 runtime (default for [`Dialect::V1_1`]): `job.accepted`
    /// with the original `job_id` (v1.1: the original envelope id and
    /// `session_id` too, with the new request id in `payload.request_id`),
    /// then the stored `job.result` / `job.error` with a fresh `event_seq`.
    /// While the original still runs, only `job.accepted`: the duplicate never
    /// gets the terminal.
    TerminalReplay,
    /// The Rust 2.0.0 runtime (default for [`Dialect::Legacy`]), and the TS,
    /// Go and Java ones: only `job.accepted` with the original `job_id`
    /// (legacy: `correlation_id` = the new request, `idempotency_key` echoed on
    /// the envelope), never the terminal, even long after completion.
    AcceptedOnly,
    /// Older PHP runtimes: an `ack` with `replay: true` and the original
    /// `job_id`, correlated to the request; nothing else.
    AckReplay,
    /// Newer PHP runtimes: the stored terminal, re-sent and correlated to the
    /// new request. A duplicate that arrives while the original runs gets the
    /// terminal when the job ends.
    TerminalOnly,
}

impl ReplayPolicy {
    /// The policy of the reference runtime that speaks `dialect`.
    pub fn default_for(dialect: Dialect) -> Self {
        match dialect {
            Dialect::Legacy => ReplayPolicy::AcceptedOnly,
            _ => ReplayPolicy::TerminalReplay,
        }
    }
}

/// How a resubmission with the same idempotency key but a different intent is
/// refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConflictSignal {
    /// Python 1.1.3 (default for [`Dialect::V1_1`]): `session.error`
    /// `DUPLICATE_KEY` with **no** request id.
    SessionError,
    /// v1.1 TS / Go / Java style: `job.error` `DUPLICATE_KEY` carrying the
    /// request id.
    JobError,
    /// Rust 2.0.0 (default for [`Dialect::Legacy`]): `job.failed`
    /// `FAILED_PRECONDITION`, `retryable: false`, message
    /// `idempotency key <k> already bound to a different command intent`, no
    /// `job_id`, `correlation_id` set, the key echoed on the envelope.
    FailedPrecondition,
    /// Newer legacy builds: as [`FailedPrecondition`](Self::FailedPrecondition)
    /// with code `DUPLICATE_KEY`.
    DuplicateKeyFailed,
    /// Legacy `nack` `DUPLICATE_KEY`, correlated to the request.
    Nack,
    /// PHP runtimes: not signalled. The runtime deduplicates by key alone,
    /// so a resubmission with another intent is answered as a replay of the
    /// original job (per the [`ReplayPolicy`]); the new intent never runs.
    /// Check [`MockRuntime::jobs`](crate::MockRuntime::jobs) to see which
    /// arguments a key's job actually ran with.
    Ignored,
}

impl ConflictSignal {
    /// The signal of the reference runtime that speaks `dialect`.
    pub fn default_for(dialect: Dialect) -> Self {
        match dialect {
            Dialect::Legacy => ConflictSignal::FailedPrecondition,
            _ => ConflictSignal::SessionError,
        }
    }
}

/// A named runtime family: one row of the replay table, as
/// [`MockRuntimeBuilder::preset`] applies it.
///
/// A preset sets the dialect, the [`ReplayPolicy`], the [`ConflictSignal`],
/// whether `job.subscribe` is offered and how a resumed session behaves;
/// knobs called after it override it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Preset {
    /// v1.1 Python 1.1.3: terminal replay, `session.error DUPLICATE_KEY`
    /// without a request id, `job.subscribe`, resume without re-attaching
    /// running jobs, welcome as `arcp-python-peer` 1.1.3.
    Python113,
    /// Legacy Rust 2.0.0: `job.accepted` only, `job.failed
    /// FAILED_PRECONDITION`, no subscribe, no resume, drops TCP on frames it
    /// cannot parse, welcome as `arcp-rs` 2.0.0.
    Rust200,
    /// v1.1 TypeScript / Go / Java: `job.accepted` only, `job.error
    /// DUPLICATE_KEY` with the request id, no subscribe.
    TsGoJava,
    /// Newer legacy PHP: the stored terminal re-sent without `job.accepted`,
    /// other intents not signalled.
    PhpNewer,
    /// Older legacy PHP: `ack` with `replay: true`, other intents not
    /// signalled.
    PhpOlder,
}

/// Everything the builder decided; immutable once the runtime starts.
pub(crate) struct Config {
    pub dialect: Dialect,
    pub replay: ReplayPolicy,
    pub conflict: ConflictSignal,
    pub tokens: HashMap<String, String>,
    pub tools: HashMap<String, ToolFn>,
    pub heartbeat: Option<Duration>,
    pub resume_buffer: usize,
    pub resume_window: Duration,
    pub reattach: bool,
    pub cancel_ack: bool,
    pub runtime_name: String,
    pub runtime_version: String,
    pub subscribe: bool,
    pub max_inbound_frame: Option<usize>,
    pub drop_on_unparseable: bool,
}

/// Configures and starts a [`MockRuntime`]. Made by [`MockRuntime::builder`].
///
/// Every knob has a default that reproduces the reference runtime of the
/// chosen dialect; see each method.
#[must_use = "a builder does nothing until `start` is awaited"]
pub struct MockRuntimeBuilder {
    dialect: Dialect,
    replay: Option<ReplayPolicy>,
    conflict: Option<ConflictSignal>,
    tokens: HashMap<String, String>,
    tools: HashMap<String, ToolFn>,
    heartbeat: Option<Duration>,
    resume_buffer: usize,
    resume_window: Duration,
    reattach: bool,
    cancel_ack: Option<bool>,
    runtime_name: String,
    runtime_version: String,
    port: u16,
    subscribe: Option<bool>,
    max_inbound_frame: Option<usize>,
    drop_on_unparseable: bool,
}

impl std::fmt::Debug for MockRuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut tools: Vec<_> = self.tools.keys().collect();
        tools.sort();
        f.debug_struct("MockRuntimeBuilder")
            .field("dialect", &self.dialect)
            .field("replay", &self.replay)
            .field("conflict", &self.conflict)
            .field("tokens", &self.tokens.len())
            .field("tools", &tools)
            .field("heartbeat", &self.heartbeat)
            .field("resume_buffer", &self.resume_buffer)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Default for MockRuntimeBuilder {
    fn default() -> Self {
        MockRuntimeBuilder {
            dialect: Dialect::V1_1,
            replay: None,
            conflict: None,
            tokens: HashMap::new(),
            tools: HashMap::new(),
            heartbeat: None,
            resume_buffer: 1024,
            resume_window: Duration::from_secs(600),
            reattach: true,
            cancel_ack: None,
            runtime_name: "arcp-mock".to_owned(),
            runtime_version: env!("CARGO_PKG_VERSION").to_owned(),
            port: 0,
            subscribe: None,
            max_inbound_frame: None,
            drop_on_unparseable: true,
        }
    }
}

impl MockRuntimeBuilder {
    /// The message set to speak. Default: [`Dialect::V1_1`].
    pub fn dialect(mut self, dialect: Dialect) -> Self {
        self.dialect = dialect;
        self
    }

    /// What a same-key, same-intent resubmission gets. Default:
    /// [`ReplayPolicy::default_for`] the dialect.
    pub fn replay_policy(mut self, policy: ReplayPolicy) -> Self {
        self.replay = Some(policy);
        self
    }

    /// How a same-key, different-intent resubmission is refused. Default:
    /// [`ConflictSignal::default_for`] the dialect.
    pub fn conflict_signal(mut self, signal: ConflictSignal) -> Self {
        self.conflict = Some(signal);
        self
    }

    /// Accepts bearer `token` as `principal`. With no token registered, any
    /// credentials are accepted as principal `anonymous`. With tokens
    /// registered, others are refused as the reference runtimes do (v1.1:
    /// `session.error UNAUTHENTICATED`, then close; legacy:
    /// `session.rejected UNAUTHENTICATED`, connection kept).
    pub fn token(mut self, token: impl Into<String>, principal: impl Into<String>) -> Self {
        self.tokens.insert(token.into(), principal.into());
        self
    }

    /// Registers a tool (a v1.1 "agent"). The closure runs once per execution;
    /// the execution count increments when it is called.
    ///
    /// ```
    /// # use arcp_mock::{MockRuntime, ToolFailure};
    /// # use serde_json::json;
    /// let builder = MockRuntime::builder()
    ///     .tool("echo", |args, _ctx| async move { Ok(args) })
    ///     .tool("refund", |args, ctx| async move {
    ///         ctx.progress(1, 2).await;
    ///         if args["order"].is_null() {
    ///             return Err(ToolFailure::new("INVALID_ARGUMENT", "order is required"));
    ///         }
    ///         Ok(json!({"refunded": args["order"]}))
    ///     });
    /// ```
    pub fn tool<F, Fut>(mut self, name: impl Into<String>, tool: F) -> Self
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolFailure>> + Send + 'static,
    {
        let tool: ToolFn = Arc::new(move |args, ctx| Box::pin(tool(args, ctx)));
        self.tools.insert(name.into(), tool);
        self
    }

    /// Enables runtime heartbeats (v1.1, when the client offers the
    /// `heartbeat` feature): a `session.ping` every `interval`, and the
    /// connection is closed after two intervals without any inbound frame.
    /// The welcome advertises `heartbeat_interval_sec` (rounded up) and the
    /// exact value as the extension field `heartbeat_interval_ms`. Default:
    /// off. The legacy dialect never pings (it answers pings either way).
    pub fn heartbeat(mut self, interval: Duration) -> Self {
        self.heartbeat = Some(interval.max(Duration::from_millis(1)));
        self
    }

    /// How many sequenced envelopes each v1.1 session keeps for resume.
    /// Older ones are evicted; a resume from before the oldest evicted one is
    /// refused with `RESUME_WINDOW_EXPIRED`. Events trimmed by `session.ack`
    /// do not count as lost. Default: 1024 (minimum 1).
    pub fn resume_buffer(mut self, envelopes: usize) -> Self {
        self.resume_buffer = envelopes.max(1);
        self
    }

    /// How long a detached v1.1 session stays resumable (advertised as
    /// `resume_window_sec`, rounded up). Default: 600 s.
    pub fn resume_window(mut self, window: Duration) -> Self {
        self.resume_window = window;
        self
    }

    /// Whether a resumed v1.1 connection receives the live events of jobs
    /// that were still running when the previous connection dropped.
    /// Default: `true`. The real Python 1.1.3 runtime does not (capture
    /// scenario S4): with `false`, a job's events after its connection drops
    /// are neither delivered nor buffered, though its terminal is still stored
    /// for idempotent replay.
    pub fn resume_reattaches_jobs(mut self, reattach: bool) -> Self {
        self.reattach = reattach;
        self
    }

    /// Whether a v1.1 `job.cancel` is acknowledged with `job.cancelled`
    /// before the terminal `job.result` (`final_status: cancelled`). The spec
    /// says so, but the captured Python 1.1.3 runtime sends no
    /// acknowledgement, only the terminal; default: `false` (as captured).
    /// The legacy dialect always answers `cancel.accepted`, as the Rust
    /// runtime does.
    pub fn cancel_ack(mut self, ack: bool) -> Self {
        self.cancel_ack = Some(ack);
        self
    }

    /// The runtime name and version sent in the welcome. Default:
    /// `arcp-mock` and this crate's version. Set it to impersonate a real
    /// runtime, for example `("arcp-python-peer", "1.1.3")`.
    pub fn runtime_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.runtime_name = name.into();
        self.runtime_version = version.into();
        self
    }

    /// Applies a runtime family's behaviour (see [`Preset`]): dialect,
    /// replay policy, conflict signal, `job.subscribe`, resume behaviour and,
    /// for the captured runtimes, the name and version in the welcome. Call
    /// it first: knobs called after it override it.
    pub fn preset(mut self, preset: Preset) -> Self {
        let (dialect, replay, conflict, subscribe) = match preset {
            Preset::Python113 => (
                Dialect::V1_1,
                ReplayPolicy::TerminalReplay,
                ConflictSignal::SessionError,
                true,
            ),
            Preset::Rust200 => (
                Dialect::Legacy,
                ReplayPolicy::AcceptedOnly,
                ConflictSignal::FailedPrecondition,
                false,
            ),
            Preset::TsGoJava => (
                Dialect::V1_1,
                ReplayPolicy::AcceptedOnly,
                ConflictSignal::JobError,
                false,
            ),
            Preset::PhpNewer => (
                Dialect::Legacy,
                ReplayPolicy::TerminalOnly,
                ConflictSignal::Ignored,
                false,
            ),
            Preset::PhpOlder => (
                Dialect::Legacy,
                ReplayPolicy::AckReplay,
                ConflictSignal::Ignored,
                false,
            ),
        };
        self.dialect = dialect;
        self.replay = Some(replay);
        self.conflict = Some(conflict);
        self.subscribe = Some(subscribe);
        self.drop_on_unparseable = true;
        match preset {
            Preset::Python113 => {
                // Capture S4: events after the drop are not re-attached.
                self.reattach = false;
                self.runtime_name = "arcp-python-peer".into();
                self.runtime_version = "1.1.3".into();
            }
            Preset::Rust200 => {
                self.runtime_name = "arcp-rs".into();
                self.runtime_version = "2.0.0".into();
            }
            _ => self.reattach = true,
        }
        self
    }

    /// Whether the v1.1 runtime offers `job.subscribe` (advertised as the
    /// `subscribe` feature in the welcome, in the position the Python 1.1.3
    /// runtime lists it). A subscriber gets `job.subscribed`, the job's
    /// buffered events after `from_event_seq` when it asks for `history`,
    /// the terminal if the job has finished, then live events. Off (as the
    /// TS, Go and Java runtimes), the feature is not advertised and a
    /// `job.subscribe` is an unsupported type (`session.error
    /// INVALID_REQUEST`). Default: on for v1.1. The legacy dialect never
    /// offers it (`subscriptions: false`; a `job.subscribe` gets `nack
    /// UNIMPLEMENTED`).
    pub fn subscribe(mut self, offered: bool) -> Self {
        self.subscribe = Some(offered);
        self
    }

    /// The largest inbound WebSocket message, in bytes. A bigger one is
    /// not processed (a submit in it is not executed): the connection is
    /// closed with code 1009 (message too big). Default: no limit below the
    /// hard 16 MiB bound (over which the connection is dropped).
    pub fn max_inbound_frame_size(mut self, bytes: usize) -> Self {
        self.max_inbound_frame = Some(bytes);
        self
    }

    /// Legacy dialect: whether a frame the runtime cannot parse (not JSON,
    /// an unknown type, an envelope id without the `msg_` prefix) drops the
    /// TCP connection without a close frame, as the Rust 2.0.0 runtime does.
    /// Off, such a frame gets `nack INVALID_ARGUMENT` (correlated when its
    /// id is readable) and the connection stays. Default: on. The v1.1
    /// dialect always answers `session.error INVALID_REQUEST`.
    pub fn drop_on_unparseable(mut self, drop: bool) -> Self {
        self.drop_on_unparseable = drop;
        self
    }

    /// Listens on this loopback port instead of an ephemeral one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Binds `127.0.0.1` and starts serving. Must be called inside a Tokio
    /// runtime.
    ///
    /// # Errors
    ///
    /// When the port cannot be bound.
    pub async fn start(self) -> std::io::Result<MockRuntime> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let config = Config {
            dialect: self.dialect,
            replay: self
                .replay
                .unwrap_or_else(|| ReplayPolicy::default_for(self.dialect)),
            conflict: self
                .conflict
                .unwrap_or_else(|| ConflictSignal::default_for(self.dialect)),
            tokens: self.tokens,
            tools: self.tools,
            heartbeat: self.heartbeat,
            resume_buffer: self.resume_buffer,
            resume_window: self.resume_window,
            reattach: self.reattach,
            cancel_ack: self.cancel_ack.unwrap_or(false),
            runtime_name: self.runtime_name,
            runtime_version: self.runtime_version,
            subscribe: self.subscribe.unwrap_or(true) && self.dialect != Dialect::Legacy,
            max_inbound_frame: self.max_inbound_frame,
            drop_on_unparseable: self.drop_on_unparseable,
        };
        MockRuntime::bind(addr, config).await
    }
}
