//! What a runtime is configured to be: the replay and conflict behaviours,
//! the named runtime families, and the settled [`Config`] the engine reads.
//!
//! A leaf: it imports no other module of the crate.

use std::collections::HashMap;
use std::time::Duration;

use arcp_types::Dialect;

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
/// [`MockRuntimeBuilder::preset`](crate::MockRuntimeBuilder::preset) applies it.
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

/// Everything the builder decided; immutable once the runtime starts. (The
/// tools are kept apart, with the engine: they are code, not settings.)
pub(crate) struct Config {
    pub dialect: Dialect,
    pub replay: ReplayPolicy,
    pub conflict: ConflictSignal,
    pub tokens: HashMap<String, String>,
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
    /// How long a key stays bound; `None`: as long as its job is kept.
    pub key_retention: Option<Duration>,
}
