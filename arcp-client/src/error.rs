//! The client's error type: what failed, for which call, and whether the
//! outcome on the runtime is known.

use std::sync::Arc;
use std::time::Duration;

use arcp_types::{ErrorCode, IdempotencyKey};
use serde_json::Value;

use crate::journal::{JournalError, JournalErrorKind};

/// Everything `invoke_tool` and `connect` can fail with.
///
/// The variants say what is known about the side effect, which is what a
/// caller deciding whether to retry needs:
///
/// | variant | did the tool run? |
/// |---|---|
/// | [`Error::Tool`] | it ran (or was refused) and reported this error |
/// | [`Error::DuplicateKey`] | the key is bound to a different call; this one did not run |
/// | [`Error::RetriesExhausted`] | no: every attempt was refused before acceptance |
/// | [`Error::OutcomeUnavailable`] | unknown: it may have run; retry later with the same key |
/// | [`Error::DeadlineExceeded`] | unknown, as above |
/// | [`Error::Cancelled`] | it was cancelled |
/// | [`Error::Journal`] | no: the call could not be recorded, so it was not sent |
///
/// Retrying with the **same key** is always safe: the runtime deduplicates.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The runtime reported a terminal error for the call (returned, never
    /// retried with the same key: the runtime would replay it).
    #[error("tool call failed: {0}")]
    Tool(Box<ToolError>),
    /// The key is already bound to a call with a different intent (tool,
    /// arguments or options). Never retried.
    #[error("idempotency key {key} is already bound to a different call: {message}")]
    DuplicateKey {
        /// The key.
        key: IdempotencyKey,
        /// The runtime's explanation.
        message: String,
        /// Requests sent for this call (0 when refused locally).
        attempts: u32,
    },
    /// The runtime accepted the call but its outcome could not be obtained
    /// within the retry budget (for example a runtime that replays only
    /// `job.accepted` after the terminal was lost with the connection). The
    /// job may have completed; it did not run twice.
    #[error("outcome of the call with key {key} is unavailable (job {job_id:?}): {reason}")]
    OutcomeUnavailable {
        /// The key: retry later with it to get the outcome without re-running.
        key: IdempotencyKey,
        /// The job the runtime bound the call to, when it said.
        job_id: Option<String>,
        /// What ran out.
        reason: String,
        /// Requests sent for this call.
        attempts: u32,
    },
    /// Every attempt was refused before acceptance (for example `UNAVAILABLE`
    /// each time), or no connection could be made, until the retry budget ran
    /// out. The tool did not run.
    #[error("call with key {key} not accepted after {attempts} attempt(s): {last_error}")]
    RetriesExhausted {
        /// The key.
        key: IdempotencyKey,
        /// Requests sent.
        attempts: u32,
        /// The last reason an attempt failed.
        last_error: String,
    },
    /// The call's deadline passed before it resolved. The tool may have run.
    #[error("call with key {key} exceeded its deadline of {deadline:?} (job {job_id:?})")]
    DeadlineExceeded {
        /// The key.
        key: IdempotencyKey,
        /// The job, when accepted.
        job_id: Option<String>,
        /// The deadline that passed.
        deadline: Duration,
        /// Requests sent for this call.
        attempts: u32,
    },
    /// The job was cancelled.
    #[error("call with key {key} was cancelled (job {job_id:?})")]
    Cancelled {
        /// The key.
        key: IdempotencyKey,
        /// The job.
        job_id: Option<String>,
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
        /// Whether retrying may help (false for TLS certificate errors, bad URLs).
        retryable: bool,
    },
    /// The session handshake did not complete.
    #[error("session handshake with {url} failed: {message}")]
    Handshake {
        /// The runtime URL.
        url: String,
        /// What failed.
        message: String,
    },
    /// The call was rejected before it was sent (bad key, arguments that do
    /// not serialize, a message over the size limit...).
    #[error("invalid call: {0}")]
    InvalidCall(String),
    /// The client was closed, or its connection task stopped.
    #[error("the client is closed")]
    Closed,
    /// An internal failure (a bug); the message says where.
    #[error("internal client error: {0}")]
    Internal(Arc<str>),
    /// The invocation journal failed: at start-up (a corrupt file, a
    /// database that is not a journal, a journal held by another client),
    /// or while recording a call before its send (then the call was **not**
    /// sent). [`JournalError::kind`](crate::JournalError) says which.
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
    /// Whether retrying the same call (with the same key) may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Tool(e) => e.retryable,
            Error::OutcomeUnavailable { .. }
            | Error::RetriesExhausted { .. }
            | Error::DeadlineExceeded { .. } => true,
            Error::Connect { retryable, .. } | Error::ArtifactFetch { retryable, .. } => *retryable,
            Error::Handshake { .. } => true,
            Error::Journal(e) => matches!(e.kind, JournalErrorKind::Locked | JournalErrorKind::Io),
            _ => false,
        }
    }

    /// The wire error code, where the runtime sent one.
    pub fn code(&self) -> Option<&ErrorCode> {
        match self {
            Error::Tool(e) => Some(&e.code),
            _ => None,
        }
    }

    /// A stable upper-case name for the outcome: the wire code for tool
    /// errors, otherwise a client-side code such as `OUTCOME_UNAVAILABLE`.
    pub fn code_name(&self) -> String {
        match self {
            Error::Tool(e) => e.code.to_string(),
            Error::DuplicateKey { .. } => "DUPLICATE_KEY".into(),
            Error::OutcomeUnavailable { .. } => "OUTCOME_UNAVAILABLE".into(),
            Error::RetriesExhausted { .. } => "RETRIES_EXHAUSTED".into(),
            Error::DeadlineExceeded { .. } => "DEADLINE_EXCEEDED".into(),
            Error::Cancelled { .. } => "CANCELLED".into(),
            Error::Unauthenticated { .. } => "UNAUTHENTICATED".into(),
            Error::Connect { .. } => "CONNECT_FAILED".into(),
            Error::Handshake { .. } => "HANDSHAKE_FAILED".into(),
            Error::InvalidCall(_) => "INVALID_CALL".into(),
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
            Error::DuplicateKey { attempts, .. }
            | Error::OutcomeUnavailable { attempts, .. }
            | Error::RetriesExhausted { attempts, .. }
            | Error::DeadlineExceeded { attempts, .. }
            | Error::Cancelled { attempts, .. }
            | Error::Http { attempts, .. } => Some(*attempts),
            _ => None,
        }
    }

    /// The typed give-up when a call's retry budget is spent, for every
    /// transport: `OutcomeUnavailable` when the job may exist (it was
    /// accepted, or an attempt's answer was lost), else `RetriesExhausted`
    /// (every attempt was refused before acceptance).
    pub(crate) fn give_up(
        key: &IdempotencyKey,
        job_id: Option<&str>,
        may_have_run: bool,
        attempts: u32,
        reason: &str,
        last_error: Option<&str>,
    ) -> Error {
        if job_id.is_some() || may_have_run {
            Error::OutcomeUnavailable {
                key: key.clone(),
                job_id: job_id.map(str::to_owned),
                reason: match last_error {
                    Some(last) => format!("{reason} after {attempts} attempt(s); last: {last}"),
                    None => format!("{reason} after {attempts} attempt(s)"),
                },
                attempts,
            }
        } else {
            Error::RetriesExhausted {
                key: key.clone(),
                attempts,
                last_error: last_error.unwrap_or(reason).to_owned(),
            }
        }
    }

    /// Stamps the call's send count (the connection task knows it last).
    pub(crate) fn with_attempts(mut self, n: u32) -> Self {
        match &mut self {
            Error::Tool(e) => e.attempts = n,
            Error::DuplicateKey { attempts, .. }
            | Error::OutcomeUnavailable { attempts, .. }
            | Error::RetriesExhausted { attempts, .. }
            | Error::DeadlineExceeded { attempts, .. }
            | Error::Cancelled { attempts, .. }
            | Error::Http { attempts, .. } => *attempts = n,
            _ => {}
        }
        self
    }

    /// The job the call was bound to, when known.
    pub fn job_id(&self) -> Option<&str> {
        match self {
            Error::Tool(e) => e.job_id.as_deref(),
            Error::OutcomeUnavailable { job_id, .. }
            | Error::DeadlineExceeded { job_id, .. }
            | Error::Cancelled { job_id, .. } => job_id.as_deref(),
            _ => None,
        }
    }
}

/// A terminal error reported by the runtime for one call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
#[non_exhaustive]
pub struct ToolError {
    /// The wire code.
    pub code: ErrorCode,
    /// The runtime's message.
    pub message: String,
    /// Whether the runtime says a new call (new key) may succeed.
    pub retryable: bool,
    /// Structured details, if any.
    pub details: Option<Value>,
    /// Whether this is a stored outcome replayed for a retried request.
    pub replayed: bool,
    /// The job, when the runtime bound the call to one.
    pub job_id: Option<String>,
    /// The call's key.
    pub key: IdempotencyKey,
    /// Requests sent for this call.
    pub attempts: u32,
}
