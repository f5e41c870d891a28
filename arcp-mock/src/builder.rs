//! [`MockRuntimeBuilder`]: the knobs of a [`MockRuntime`], each defaulting
//! to the reference runtime of the chosen dialect, and the presets that set
//! a runtime family's knobs at once.

use std::collections::HashMap;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use arcp_types::Dialect;
use serde_json::Value;

use crate::config::{Config, ConflictSignal, Preset, ReplayPolicy};
use crate::runtime::MockRuntime;
use crate::tool::{erase, ToolContext, ToolFailure, Tools};

impl MockRuntime {
    /// A builder with the defaults of the v1.1 reference runtime.
    pub fn builder() -> MockRuntimeBuilder {
        MockRuntimeBuilder::default()
    }
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
    tools: Tools,
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
    key_retention: Option<Duration>,
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
            key_retention: None,
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

    /// How long an idempotency key stays bound to its job (default: as
    /// long as the job is kept). Past it, a resubmission with the key is a
    /// new call and runs the tool again, as the Python runtime does after
    /// its key retention (24 hours by default).
    pub fn key_retention(mut self, retention: Duration) -> Self {
        self.key_retention = Some(retention);
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
        self.tools.insert(name.into(), erase(tool));
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
            key_retention: self.key_retention,
        };
        MockRuntime::bind(addr, config, self.tools).await
    }
}
