//! The client's error type: what failed, for which call, and whether the
//! tool ran ([`Execution`]).
//!
//! A leaf: imports no other module of the crate.

use std::sync::Arc;
use std::time::Duration;

use arcp_types::{ErrorCode, IdempotencyKey};

mod decode;
mod execution;
mod journal;
mod kind;
mod message;
mod source;
mod tool;
pub use decode::ResultDecodeError;
pub use execution::Execution;
pub use journal::{JournalError, JournalErrorKind};
pub use source::ErrorSource;
pub use tool::ToolError;

use message::{ConflictSuffix, JobSuffix, LastErrorSuffix};

/// Everything `invoke_tool` and `connect` can fail with.
///
/// Each error says whether the tool ran ([`Error::execution`]), which is
/// what a caller deciding whether to retry needs:
///
/// | variant | did the tool run? |
/// |---|---|
/// | [`Error::Tool`] | it ran and reported this error ([`ToolError::execution`]: not run when the runtime refused the request before accepting it) |
/// | [`Error::DuplicateKey`] | as its `execution` field says: not run when the runtime refused it and nothing of this call may have reached the runtime before, maybe when something may have, not sent when the conflict was found in this client |
/// | [`Error::RetriesExhausted`] | no: every attempt was refused before acceptance, or never sent |
/// | [`Error::OutcomeUnavailable`] | maybe, at most once; retry later with the same key |
/// | [`Error::DeadlineExceeded`], [`Error::InvalidCall`] | as its `execution` field says |
/// | [`Error::Interrupted`] | maybe, at most once: the client closed while it was in flight |
/// | [`Error::RequestRejected`] | no: the runtime closed the connection because of the request itself |
/// | [`Error::Cancelled`] | maybe, at most once: the runtime accepted the job and cancelled it, before its tool started or while it ran; the key's outcome is final (a retry with it answers the same) |
/// | [`Error::ResultDecode`] | yes: it returned a result that does not decode into the type a typed call asked for (the raw result is kept) |
/// | [`Error::ArgumentsEncode`] | no: a typed call's arguments do not serialize, so nothing was sent (as its `execution` field says, `not_sent` for a key you supplied) |
/// | connect, auth, journal, closed | no: nothing was sent (a journal error `JOURNAL_FENCED` or `JOURNAL_UNAVAILABLE`, or `JOURNAL_INTENT` for a recovered record: maybe, at most once) |
/// | [`Error::NotSent`] | not by this call; the key was supplied and an earlier call with it may have run: retry with the same key |
///
/// A call whose key was supplied by the caller (not generated for it)
/// that ends without running anything says [`Execution::NotSent`], not
/// [`Execution::NotRun`], unless the runtime or the journal proved the key
/// unused: the error is then [`Error::NotSent`] around the error that
/// stopped the call (or, for a deadline or an invalid call,
/// `DeadlineExceeded` or `InvalidCall` with `execution: NotSent`).
///
/// Retrying with the **same key** is always safe: the runtime deduplicates.
/// The crate root's [handling outcomes](crate#handling-outcomes) guide has
/// what each variant means over WebSocket and over the HTTP binding.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The runtime reported a terminal error for the call (returned, never
    /// retried with the same key: the runtime would replay it).
    #[error("the tool call failed: {0}")]
    Tool(Box<ToolError>),
    /// The key is already bound to a call with a different intent (tool,
    /// arguments or options). Never retried. This call did not run, unless
    /// an earlier attempt of it may have reached the runtime before the
    /// conflict (`execution` is then [`Execution::MayHaveRun`]): a gateway
    /// that fingerprints the whole request body answers a retry of the
    /// same call as a conflict, since each attempt's envelope differs.
    #[error("idempotency key {key} is already bound to a different call: {message}{}", ConflictSuffix(*execution))]
    DuplicateKey {
        /// The key.
        key: IdempotencyKey,
        /// The runtime's explanation.
        message: String,
        /// Requests sent for this call (0 when refused locally).
        attempts: u32,
        /// [`Execution::NotRun`] when the runtime refused this call and
        /// nothing of it may have reached the runtime before;
        /// [`Execution::MayHaveRun`] when an earlier attempt may have (retry
        /// later with the same key); [`Execution::NotSent`] when the
        /// conflict was found in this client (its outcome cache, its
        /// journal, a call of the key in flight: `attempts` 0), which cannot
        /// prove the runtime still holds the key bound to the other call, or
        /// when the refusal may be a gateway's (an HTTP 422 of a key you
        /// supplied).
        execution: Execution,
    },
    /// A request with this key may have reached the runtime, but the call's
    /// outcome could not be obtained (for example a runtime that replays
    /// only `job.accepted` after the terminal was lost with the connection,
    /// or a journaled call with a supplied key that ended before the
    /// journal could read the key's record). The tool ran at most once.
    #[error(
        "the outcome of the call with key {key} is unavailable{}: {reason}",
        JobSuffix(job_id)
    )]
    OutcomeUnavailable {
        /// The key: ask again later with it to get the outcome without
        /// running the tool again.
        key: IdempotencyKey,
        /// The job the runtime bound the call to, when it said.
        job_id: Option<String>,
        /// What ran out, in words.
        reason: String,
        /// Requests sent for this call.
        attempts: u32,
        /// The runtime's profile says it never hands a finished job's
        /// outcome to a later request or session (it replays only
        /// `job.accepted`): asking again will not return it either. A
        /// journal records such a call as outcome-unknown instead of
        /// re-driving it.
        permanent: bool,
    },
    /// No attempt was accepted: each was refused before acceptance (for
    /// example `UNAVAILABLE` each time) or could not be sent (no
    /// connection), until the retry budget ran out. The tool did not run.
    #[error("the call with key {key} was not accepted after {attempts} attempt(s): {last_error}")]
    RetriesExhausted {
        /// The key.
        key: IdempotencyKey,
        /// Requests sent.
        attempts: u32,
        /// Which limit of the retry budget ended the call, then the last
        /// reason an attempt failed (`...; last: ...`).
        last_error: String,
    },
    /// The call's deadline passed before it resolved.
    #[error(
        "the call with key {key} exceeded its deadline of {deadline:?}{} ({execution}){}",
        JobSuffix(job_id),
        LastErrorSuffix(last_error)
    )]
    DeadlineExceeded {
        /// The key.
        key: IdempotencyKey,
        /// The job, when accepted.
        job_id: Option<String>,
        /// The deadline that passed.
        deadline: Duration,
        /// Requests sent for this call.
        attempts: u32,
        /// Whether the tool ran: [`Execution::NotRun`] when nothing reached
        /// the runtime, else [`Execution::MayHaveRun`].
        execution: Execution,
        /// Why the last attempt before the deadline failed, when one did
        /// (a call that was waiting to retry): what kept the call from an
        /// answer, such as a proxy or runtime that could not be reached.
        last_error: Option<String>,
    },
    /// The runtime cancelled the job. Its tool may have run, at most once
    /// ([`Execution::MayHaveRun`]): a job is cancelled in the runtime's
    /// queue before its tool starts as well as while it runs. Not retried:
    /// the key's outcome is the cancellation.
    ///
    /// With `attempts` 0, the call was cancelled before it was handed to a
    /// connection (while it waited for an in-flight slot, or before it was
    /// awaited): nothing was sent for it ([`Execution::NotRun`] under a key
    /// generated for it; a supplied key's call ends [`Error::NotSent`]
    /// with this as its cause), and the key has no outcome from it.
    #[error("the call with key {key} was cancelled{}", JobSuffix(job_id))]
    Cancelled {
        /// The key.
        key: IdempotencyKey,
        /// The job.
        job_id: Option<String>,
        /// Requests sent for this call.
        attempts: u32,
    },
    /// The client was closed while the call was in flight: a request had
    /// been sent, so it may have run, at most once.
    #[error(
        "the client was closed while the call with key {key} was in flight{}; it may have run",
        JobSuffix(job_id)
    )]
    Interrupted {
        /// The key: ask again later with it.
        key: IdempotencyKey,
        /// The job, when accepted.
        job_id: Option<String>,
        /// Requests sent for this call.
        attempts: u32,
    },
    /// The runtime closed the connection because it could not take this
    /// request in (WebSocket close 1009 "message too big", 1002, 1003 or
    /// 1007), again when it was re-sent alone: it cannot be accepted as it
    /// is. The tool did not run. Not retried. (A policy close, 1008, may
    /// come after the request was forwarded: a call it ends may have run,
    /// and says so.)
    #[error("the runtime refused the request of the call with key {key}: it closed the connection with code {close_code} ({reason})")]
    RequestRejected {
        /// The key.
        key: IdempotencyKey,
        /// The WebSocket close code.
        close_code: u16,
        /// The close reason the runtime gave, or what the code means.
        reason: String,
        /// Requests sent for this call.
        attempts: u32,
    },
    /// The runtime refused the credentials. Never retried.
    #[error("the runtime refused authentication: {message}")]
    Unauthenticated {
        /// The runtime's explanation (never contains the token).
        message: String,
    },
    /// No connection could be established.
    #[error("could not connect to {url}: {message}")]
    Connect {
        /// The runtime URL.
        url: String,
        /// What failed.
        message: String,
        /// Whether retrying may help (false for TLS certificate errors, bad
        /// URLs, HTTP statuses that are not transient).
        retryable: bool,
        /// What failed underneath, when something did: the I/O, TLS,
        /// WebSocket or HTTP client error, or the timer that ran out.
        /// [`std::error::Error::source`] returns it, so a program can walk
        /// the chain down to, for example, the `std::io::Error` of a refused
        /// connection or the `rustls::Error` of an untrusted certificate.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The token provider ([`ClientBuilder::token_provider`](crate::ClientBuilder::token_provider))
    /// returned an error, so no connection (or HTTP request) was attempted.
    /// Retried with the reconnect backoff within the call's budget and the
    /// connect budget, as a failed dial is.
    #[error("the token provider failed: {message}")]
    TokenProvider {
        /// The provider's error, as text.
        message: String,
        /// The provider's error itself.
        #[source]
        source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    },
    /// The session handshake did not complete.
    #[error("the session handshake with {url} failed: {message}")]
    Handshake {
        /// The runtime URL.
        url: String,
        /// What failed.
        message: String,
        /// Whether retrying may help (false when the runtime answered but
        /// speaks neither dialect, or refused the session for good).
        retryable: bool,
        /// What failed underneath, when something did (the handshake
        /// timeout's timer); [`std::error::Error::source`] returns it.
        #[source]
        source: Option<ErrorSource>,
    },
    /// A typed call (through a [`Tool`](crate::Tool) descriptor)
    /// got a result that does not decode into the type it asked for. The
    /// tool ran ([`Execution::Ran`]): the raw result, key and job id are in
    /// the [`ResultDecodeError`]. Not retryable: the same key replays the
    /// same result.
    #[error("{0}")]
    ResultDecode(Box<ResultDecodeError>),
    /// A typed call's arguments do not serialize to JSON (a `Serialize`
    /// implementation that fails, a map with keys that are not strings...):
    /// nothing was sent: `execution` is [`Execution::NotRun`], or
    /// [`Execution::NotSent`] for a call whose key was supplied (an earlier
    /// call with it may have run). Not retryable as it is: fix the
    /// arguments' `Serialize` implementation.
    #[error("the arguments of tool `{tool}` do not serialize to JSON: {source}")]
    ArgumentsEncode {
        /// The tool the call was for.
        tool: String,
        /// What serde_json reported.
        #[source]
        source: Arc<serde_json::Error>,
        /// Whether the tool ran: never by this call.
        execution: Execution,
    },
    /// The call was rejected before it was sent (bad key, a message over
    /// the size limit, a tool name with a NUL character that a journal
    /// cannot record...). Nothing of it was sent: `execution` is
    /// [`Execution::NotRun`], or [`Execution::NotSent`] for a call whose key
    /// was supplied (an earlier call with it may have run). Fix the call
    /// and retry it with the same key.
    #[error("invalid call: {message}")]
    InvalidCall {
        /// What is wrong with the call.
        message: String,
        /// Whether the tool ran: never by this call.
        execution: Execution,
    },
    /// The client was closed, or its connection task stopped, before the
    /// call was sent.
    #[error("the client is closed")]
    Closed,
    /// This call ran nothing, but its key was supplied by the caller (or
    /// came from an earlier call), so an earlier call with the key may have
    /// run ([`Execution::NotSent`]): retry with the **same key**, never a
    /// new one. `cause` is what stopped this call (a failed connect, a
    /// refused credential, a closed client, an HTTP status...).
    #[error("{cause}; this call sent nothing that ran, but its key {key} was supplied and an earlier call with it may have run: retry with the same key")]
    NotSent {
        /// The key: retry with it.
        key: IdempotencyKey,
        /// What stopped this call.
        #[source]
        cause: Box<Error>,
    },
    /// An internal failure (a bug); the message says where.
    #[error("internal client error: {0}")]
    Internal(Arc<str>),
    /// The invocation journal failed: at start-up (a corrupt file, a
    /// database that is not a journal, a journal held by another client),
    /// or while recording a call before its send (then the call was **not**
    /// sent by this client). [`JournalError::kind`] says which; with
    /// [`JournalErrorKind::Fenced`] or [`JournalErrorKind::Unavailable`] the
    /// call may have run (another worker drives it, or its record may have
    /// landed and a recovery may send it).
    #[error("{0}")]
    Journal(JournalError),
    /// The HTTP binding got a status it does not define for a call (for
    /// example 404 or 405 from a wrong endpoint, or 400), with no ARCP
    /// envelope in the body. Not retried; the call was not run, unless the
    /// runtime misbehaves.
    #[error("HTTP {status} from {url}: {message}")]
    Http {
        /// The endpoint.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// What the response said (never contains the bearer token).
        message: String,
        /// Requests sent for this call.
        attempts: u32,
    },
    /// A fetched artifact does not match its reference (`sha256` or
    /// `size`): the bytes were discarded. Not retried.
    #[error("artifact {uri} failed verification: {what} is {actual}, expected {expected}")]
    ArtifactMismatch {
        /// The artifact URI, without its query (presigned URLs carry credentials there).
        uri: String,
        /// What differs: `sha256` or `size`.
        what: String,
        /// The value in the reference.
        expected: String,
        /// The value of the bytes received.
        actual: String,
    },
    /// An artifact is larger than the client's limit (or than its reference
    /// says, mid-download): the download stopped there.
    #[error("artifact {uri} exceeds the {limit}-byte limit{}", size.map(|s| format!(" ({s} bytes)")).unwrap_or_default())]
    ArtifactTooLarge {
        /// The artifact URI, without its query.
        uri: String,
        /// The limit, in bytes.
        limit: u64,
        /// The announced size, when known before downloading.
        size: Option<u64>,
    },
    /// The artifact does not exist (HTTP 404 or 410): expired or never stored.
    #[error("artifact {uri} was not found (HTTP {status})")]
    ArtifactNotFound {
        /// The artifact URI, without its query.
        uri: String,
        /// The HTTP status (404 or 410).
        status: u16,
    },
    /// An artifact could not be fetched: transport failure, an unexpected
    /// status, or the retry budget spent on transient ones.
    #[error("could not fetch artifact {uri}: {message}")]
    ArtifactFetch {
        /// The artifact URI, without its query.
        uri: String,
        /// The last HTTP status, when there was a response.
        status: Option<u16>,
        /// What failed.
        message: String,
        /// Whether fetching again later may succeed.
        retryable: bool,
    },
}

impl Error {
    /// An [`Error::InvalidCall`] saying `message`: nothing was sent
    /// ([`Execution::NotRun`] until the key's origin says otherwise).
    pub(crate) fn invalid_call(message: String) -> Error {
        Error::InvalidCall {
            message,
            execution: Execution::NotRun,
        }
    }

    /// Whether the tool ran ([`Execution`]): the one rule behind every
    /// outcome, shared by both transports and recorded by the journal.
    /// Artifact errors concern a tool that already ran ([`Execution::Ran`]).
    pub fn execution(&self) -> Execution {
        match self {
            Error::Tool(e) => e.execution,
            Error::DeadlineExceeded { execution, .. }
            | Error::DuplicateKey { execution, .. }
            | Error::InvalidCall { execution, .. }
            | Error::ArgumentsEncode { execution, .. } => *execution,
            Error::NotSent { .. } => Execution::NotSent,
            Error::OutcomeUnavailable { .. } | Error::Interrupted { .. } | Error::Internal(_) => {
                Execution::MayHaveRun
            }
            // The runtime accepted the job and ended it: a job cancelled in
            // its queue never ran its tool, one cancelled mid-run may have
            // done part of its work. The key's outcome is final (the runtime
            // answers the key with the cancellation), its execution is not
            // known.
            // Stopped before anything was sent for it (a supplied key's
            // call says "not sent": an earlier call may have run the key).
            Error::Cancelled { attempts: 0, .. } => Execution::NotRun,
            Error::Cancelled { .. } => Execution::MayHaveRun,
            // Another worker drives the call: it may run (once) there. An
            // unavailable store may have committed the call's record though
            // its answer was lost: a recovery may send it.
            Error::Journal(e)
                if matches!(
                    e.kind,
                    JournalErrorKind::Fenced | JournalErrorKind::Unavailable
                    // Only a recovered record's intent fails to read back:
                    // an earlier process may have sent it.
                    | JournalErrorKind::Intent
                ) =>
            {
                Execution::MayHaveRun
            }
            Error::ResultDecode(_)
            | Error::ArtifactMismatch { .. }
            | Error::ArtifactTooLarge { .. }
            | Error::ArtifactNotFound { .. }
            | Error::ArtifactFetch { .. } => Execution::Ran,
            Error::RetriesExhausted { .. }
            | Error::RequestRejected { .. }
            | Error::Unauthenticated { .. }
            | Error::Connect { .. }
            | Error::TokenProvider { .. }
            | Error::Handshake { .. }
            | Error::Closed
            | Error::Journal(_)
            | Error::Http { .. } => Execution::NotRun,
        }
    }

    /// Whether making the same call again (with the same key) may end
    /// differently: the outcome is unknown or the failure was transient.
    /// A tool error is the key's final outcome, so it is not retryable
    /// with the same key, whatever [`ToolError::retryable`] says about a
    /// new call.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Tool(_) => false,
            Error::NotSent { cause, .. } => cause.is_retryable(),
            Error::OutcomeUnavailable { permanent, .. } => !permanent,
            Error::RetriesExhausted { .. }
            | Error::DeadlineExceeded { .. }
            | Error::Interrupted { .. }
            | Error::TokenProvider { .. } => true,
            Error::Connect { retryable, .. }
            | Error::Handshake { retryable, .. }
            | Error::ArtifactFetch { retryable, .. } => *retryable,
            Error::Journal(e) => matches!(e.kind, JournalErrorKind::Locked | JournalErrorKind::Io),
            _ => false,
        }
    }

    /// The wire error code, where the runtime sent one.
    pub fn code(&self) -> Option<&ErrorCode> {
        match self {
            Error::Tool(e) => Some(&e.code),
            Error::NotSent { cause, .. } => cause.code(),
            _ => None,
        }
    }

    /// A stable upper-case name for the outcome: the wire code for tool
    /// errors, otherwise a client-side code such as `OUTCOME_UNAVAILABLE`.
    pub fn code_name(&self) -> String {
        match self {
            Error::Tool(e) => e.code.to_string(),
            Error::NotSent { cause, .. } => cause.code_name(),
            Error::DuplicateKey { .. } => "DUPLICATE_KEY".into(),
            Error::OutcomeUnavailable { .. } => "OUTCOME_UNAVAILABLE".into(),
            Error::RetriesExhausted { .. } => "RETRIES_EXHAUSTED".into(),
            Error::DeadlineExceeded { .. } => "DEADLINE_EXCEEDED".into(),
            Error::Cancelled { .. } => "CANCELLED".into(),
            Error::Interrupted { .. } => "INTERRUPTED".into(),
            Error::RequestRejected { .. } => "REQUEST_REJECTED".into(),
            Error::Unauthenticated { .. } => "UNAUTHENTICATED".into(),
            Error::Connect { .. } => "CONNECT_FAILED".into(),
            Error::TokenProvider { .. } => "TOKEN_PROVIDER_FAILED".into(),
            Error::Handshake { .. } => "HANDSHAKE_FAILED".into(),
            Error::InvalidCall { .. } => "INVALID_CALL".into(),
            Error::ResultDecode(_) => "RESULT_DECODE_FAILED".into(),
            Error::ArgumentsEncode { .. } => "ARGUMENTS_ENCODE_FAILED".into(),
            Error::Closed => "CLIENT_CLOSED".into(),
            Error::Internal(_) => "INTERNAL_CLIENT_ERROR".into(),
            Error::Journal(e) => e.kind.code_name().into(),
            Error::Http { .. } => "HTTP_ERROR".into(),
            Error::ArtifactMismatch { .. } => "ARTIFACT_MISMATCH".into(),
            Error::ArtifactTooLarge { .. } => "ARTIFACT_TOO_LARGE".into(),
            Error::ArtifactNotFound { .. } => "ARTIFACT_NOT_FOUND".into(),
            Error::ArtifactFetch { .. } => "ARTIFACT_FETCH_FAILED".into(),
        }
    }

    /// How many times the request was sent, where the call got that far.
    pub fn attempts(&self) -> Option<u32> {
        match self {
            Error::Tool(e) => Some(e.attempts),
            Error::ResultDecode(e) => Some(e.attempts),
            Error::NotSent { cause, .. } => cause.attempts(),
            Error::DuplicateKey { attempts, .. }
            | Error::OutcomeUnavailable { attempts, .. }
            | Error::RetriesExhausted { attempts, .. }
            | Error::DeadlineExceeded { attempts, .. }
            | Error::Cancelled { attempts, .. }
            | Error::Interrupted { attempts, .. }
            | Error::RequestRejected { attempts, .. }
            | Error::Http { attempts, .. } => Some(*attempts),
            _ => None,
        }
    }

    /// Stamps the call's send count (the transport knows it last).
    pub(crate) fn with_attempts(mut self, n: u32) -> Self {
        match &mut self {
            Error::Tool(e) => e.attempts = n,
            Error::NotSent { cause, .. } => {
                let inner = std::mem::replace(cause.as_mut(), Error::Closed);
                **cause = inner.with_attempts(n);
            }
            Error::DuplicateKey { attempts, .. }
            | Error::OutcomeUnavailable { attempts, .. }
            | Error::RetriesExhausted { attempts, .. }
            | Error::DeadlineExceeded { attempts, .. }
            | Error::Cancelled { attempts, .. }
            | Error::Interrupted { attempts, .. }
            | Error::RequestRejected { attempts, .. }
            | Error::Http { attempts, .. } => *attempts = n,
            _ => {}
        }
        self
    }

    /// The same error with another execution class, for the variants that
    /// carry one (`DeadlineExceeded`, `DuplicateKey`, `InvalidCall`); any
    /// other unchanged.
    /// The rules of `classify.rs` that widen "did not run" use it.
    pub(crate) fn with_execution(mut self, to: Execution) -> Self {
        match &mut self {
            Error::DeadlineExceeded { execution, .. }
            | Error::DuplicateKey { execution, .. }
            | Error::InvalidCall { execution, .. }
            | Error::ArgumentsEncode { execution, .. } => {
                *execution = to;
            }
            _ => {}
        }
        self
    }

    /// The job the call was bound to, when known.
    pub fn job_id(&self) -> Option<&str> {
        match self {
            Error::Tool(e) => e.job_id.as_deref(),
            Error::ResultDecode(e) => e.job_id.as_deref(),
            Error::OutcomeUnavailable { job_id, .. }
            | Error::DeadlineExceeded { job_id, .. }
            | Error::Cancelled { job_id, .. }
            | Error::Interrupted { job_id, .. } => job_id.as_deref(),
            _ => None,
        }
    }

    /// The call's idempotency key, for errors about one call.
    pub fn key(&self) -> Option<&IdempotencyKey> {
        match self {
            Error::Tool(e) => Some(&e.key),
            Error::ResultDecode(e) => Some(&e.key),
            Error::DuplicateKey { key, .. }
            | Error::NotSent { key, .. }
            | Error::OutcomeUnavailable { key, .. }
            | Error::RetriesExhausted { key, .. }
            | Error::DeadlineExceeded { key, .. }
            | Error::Cancelled { key, .. }
            | Error::Interrupted { key, .. }
            | Error::RequestRejected { key, .. } => Some(key),
            Error::Journal(e) => e.key.as_ref(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_sentences_without_debug_noise() {
        let key = IdempotencyKey::new();
        let e = Error::OutcomeUnavailable {
            key: key.clone(),
            job_id: Some("job_1".into()),
            reason: "the connection was lost".into(),
            attempts: 2,
            permanent: false,
        };
        let text = e.to_string();
        assert!(text.contains("(job job_1)"), "{text}");
        assert!(!text.contains("Some("), "{text}");
        let e = Error::DeadlineExceeded {
            key,
            job_id: None,
            deadline: Duration::from_secs(1),
            attempts: 0,
            execution: Execution::NotRun,
            last_error: None,
        };
        assert!(!e.to_string().contains("None"), "{e}");
        assert_eq!(e.execution(), Execution::NotRun);
        let e = Error::DeadlineExceeded {
            key: IdempotencyKey::new(),
            job_id: None,
            deadline: Duration::from_secs(1),
            attempts: 0,
            execution: Execution::NotRun,
            last_error: Some("could not connect: refused".into()),
        };
        assert!(
            e.to_string()
                .ends_with("(not_run); the last failed attempt: could not connect: refused"),
            "{e}"
        );
    }

    #[test]
    fn retryable_never_contradicts_a_tool_error() {
        let e = Error::Tool(Box::new(ToolError {
            code: ErrorCode::Unavailable,
            message: "busy".into(),
            retryable: true,
            details: None,
            replayed: true,
            job_id: Some("job_1".into()),
            key: IdempotencyKey::new(),
            attempts: 1,
            execution: Execution::Ran,
        }));
        // The runtime says a new call may succeed; the same key replays it.
        assert!(!e.is_retryable());
        assert_eq!(e.execution(), Execution::Ran);
    }

    #[test]
    fn a_refusal_before_acceptance_is_auth_and_a_tools_own_code_is_not() {
        let refusal = |code, execution| {
            Error::Tool(Box::new(ToolError {
                code,
                message: "no".into(),
                retryable: false,
                details: None,
                replayed: false,
                job_id: None,
                key: IdempotencyKey::new(),
                attempts: 1,
                execution,
            }))
        };
        assert!(refusal(ErrorCode::Unauthenticated, Execution::NotRun).is_auth());
        assert!(refusal(ErrorCode::PermissionDenied, Execution::NotRun).is_auth());
        assert!(!refusal(ErrorCode::Unauthenticated, Execution::Ran).is_auth());
        assert!(!refusal(ErrorCode::Unavailable, Execution::NotRun).is_auth());
        let connect = Error::Connect {
            url: "ws://x".into(),
            message: "budget".into(),
            retryable: true,
            source: Some(ErrorSource::new(std::io::Error::from(
                std::io::ErrorKind::TimedOut,
            ))),
        };
        assert!(connect.is_timeout() && connect.is_connect() && !connect.is_auth());
        // The cause itself, not a wrapper: a downcast sees it.
        let cause = std::error::Error::source(&connect).expect("a source");
        assert!(cause.downcast_ref::<std::io::Error>().is_some());
    }

    #[test]
    fn not_sent_answers_the_kind_questions_for_its_cause() {
        let connect = Error::Connect {
            url: "ws://x".into(),
            message: "budget".into(),
            retryable: true,
            source: Some(ErrorSource::new(std::io::Error::from(
                std::io::ErrorKind::TimedOut,
            ))),
        };
        let wrap = |cause| Error::NotSent {
            key: IdempotencyKey::new(),
            cause: Box::new(cause),
        };
        let e = wrap(connect);
        assert_eq!(e.execution(), Execution::NotSent);
        assert!(e.is_connect() && e.is_timeout() && !e.is_auth());
        let e = wrap(Error::Unauthenticated {
            message: "no".into(),
        });
        assert!(e.is_auth() && !e.is_connect() && !e.is_timeout());
    }
}
