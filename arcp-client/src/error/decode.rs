//! A typed call's result that does not decode: part of the error leaf.

use std::sync::Arc;

use arcp_types::IdempotencyKey;
use serde_json::Value;

use super::JobSuffix;

/// A typed call's result that does not decode into the type it asked for
/// ([`Error::ResultDecode`](crate::Error::ResultDecode)). The tool ran and its outcome is final: this
/// keeps the raw result and what identifies the call.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "the result of the call with key {key}{} does not decode as {expected}: {source}",
    JobSuffix(job_id)
)]
#[non_exhaustive]
pub struct ResultDecodeError {
    /// The tool's result, as the runtime sent it.
    pub value: Value,
    /// The Rust type the call asked for.
    pub expected: &'static str,
    /// What serde_json reported.
    #[source]
    pub source: Arc<serde_json::Error>,
    /// The call's key.
    pub key: IdempotencyKey,
    /// The job the runtime bound the call to, when it said.
    pub job_id: Option<String>,
    /// Whether the result was a stored outcome (see
    /// [`ToolOutput::replayed`](crate::ToolOutput::replayed)).
    pub replayed: bool,
    /// Requests sent for this call.
    pub attempts: u32,
    /// The call's W3C trace id.
    pub trace_id: String,
}
