//! [`ToolError`]: the runtime's own terminal error for one call, with
//! whether it was a stored outcome and whether the tool ran.

use arcp_types::{ErrorCode, IdempotencyKey};
use serde_json::Value;

use super::Execution;

/// A terminal error reported by the runtime for one call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
#[non_exhaustive]
pub struct ToolError {
    /// The wire code.
    pub code: ErrorCode,
    /// The runtime's message.
    pub message: String,
    /// Whether the runtime says a *new* call (a new key) may succeed. The
    /// same key would get this error replayed.
    pub retryable: bool,
    /// Structured details, if any.
    pub details: Option<Value>,
    /// Whether the runtime's answer shows it was a stored outcome: a
    /// terminal with no `job.accepted` before it on the attempt, a frame of
    /// another session, an acceptance the runtime marked as a replay, or an
    /// answer from the client's outcome cache or journal.
    pub replayed: bool,
    /// The job, when the runtime bound the call to one.
    pub job_id: Option<String>,
    /// The call's key.
    pub key: IdempotencyKey,
    /// Requests sent for this call.
    pub attempts: u32,
    /// Whether the tool ran: [`Execution::Ran`] for an error of the call's
    /// job; [`Execution::NotRun`] for a refusal before acceptance (no job)
    /// when no earlier attempt may have reached the runtime.
    pub execution: Execution,
}
