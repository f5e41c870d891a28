//! [`ToolError`]: the runtime's own terminal error for one call, with
//! whether it was a stored outcome and whether the tool ran.

use arcp_types::{ErrorCode, IdempotencyKey};
use serde_json::Value;

use super::{Error, Execution};

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
    /// another session, an acceptance the runtime marked as a replay, an
    /// answer from the client's outcome cache or journal, or the outcome of
    /// another caller's call of the same key and intent that this call
    /// joined after its request went out. Never for the job this call's own
    /// attempt started (accepted fresh), however its answer arrives.
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

impl ToolError {
    /// The runtime's error `code` with `message`, for the call with `key`:
    /// an error of the call's job ([`Execution::Ran`]), not retryable, not
    /// replayed, one attempt, no details and no job id; the `with_*`
    /// methods set the rest. The client builds these from the runtime's
    /// answers; this is for tests of code that handles them (a fake that
    /// returns what a call would), since the struct is `#[non_exhaustive]`.
    pub fn new(
        key: IdempotencyKey,
        code: impl Into<ErrorCode>,
        message: impl Into<String>,
    ) -> Self {
        ToolError {
            code: code.into(),
            message: message.into(),
            retryable: false,
            details: None,
            replayed: false,
            job_id: None,
            key,
            attempts: 1,
            execution: Execution::Ran,
        }
    }

    /// Sets [`retryable`](Self::retryable).
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Sets [`details`](Self::details).
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// Sets [`replayed`](Self::replayed).
    pub fn with_replayed(mut self, replayed: bool) -> Self {
        self.replayed = replayed;
        self
    }

    /// Sets [`job_id`](Self::job_id).
    pub fn with_job_id(mut self, job_id: impl Into<String>) -> Self {
        self.job_id = Some(job_id.into());
        self
    }

    /// Sets [`attempts`](Self::attempts).
    pub fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
        self
    }

    /// Sets [`execution`](Self::execution): [`Execution::NotRun`] for a
    /// refusal before acceptance.
    pub fn with_execution(mut self, execution: Execution) -> Self {
        self.execution = execution;
        self
    }
}

/// [`Error::Tool`] with this error.
impl From<ToolError> for Error {
    fn from(e: ToolError) -> Self {
        Error::Tool(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_constructed_tool_error_is_what_a_call_would_return() {
        let key = IdempotencyKey::new();
        let e = ToolError::new(key.clone(), "PERMISSION_DENIED", "no")
            .with_job_id("job_1")
            .with_attempts(2)
            .with_replayed(true)
            .with_retryable(true)
            .with_details(serde_json::json!({"why": "policy"}));
        assert_eq!(e.code, ErrorCode::PermissionDenied);
        assert_eq!(e.to_string(), "PERMISSION_DENIED: no");
        let err = Error::from(e);
        assert_eq!(err.execution(), Execution::Ran);
        assert_eq!(err.key(), Some(&key));
        assert_eq!(err.job_id(), Some("job_1"));
        assert_eq!(err.attempts(), Some(2));
        assert!(!err.is_retryable(), "the same key replays a tool error");
        let refused =
            ToolError::new(key, "UNAUTHENTICATED", "who?").with_execution(Execution::NotRun);
        assert!(Error::from(refused).is_auth());
    }
}
