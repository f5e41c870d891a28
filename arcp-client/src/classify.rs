//! The pure rules that turn a runtime's answer into what a call does next,
//! shared by both transports (the smithy-rs `ClassifyRetry` idea: *what*
//! an answer means is decided here; *when* to retry is `retry.rs`).
//!
//! | answer | awaiting acceptance | accepted |
//! |---|---|---|
//! | `DUPLICATE_KEY`, legacy `FAILED_PRECONDITION` "different command intent" | [`ErrorVerdict::DuplicateKey`] | same |
//! | an error naming a job (`job.error`, `job.failed`, `tool.error` with a job id) | [`ErrorVerdict::JobFailed`]: terminal, the tool ran | same |
//! | an error naming no job, retryable (`UNAVAILABLE`, rate limits, ...) | [`ErrorVerdict::Transient`]: same key after a floor | [`ErrorVerdict::JobFailed`] |
//! | an error naming no job, not retryable | [`ErrorVerdict::Refused`]: terminal, not run | [`ErrorVerdict::JobFailed`] |
//!
//! A replayed terminal is terminal whether or not it is retryable: the
//! runtime would replay it to every later attempt with the same key.

use std::time::Duration;

use arcp_types::{ErrorCode, ErrorReply, IdempotencyKey, JobResult};
use serde_json::Value;

use crate::error::{Error, Execution, ToolError};

/// What an error frame means for the call it was attributed to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ErrorVerdict {
    /// The key is bound to another intent: final, this call did not run.
    DuplicateKey,
    /// The call's job failed: the key's terminal outcome.
    JobFailed,
    /// Refused before acceptance, transiently: the same key after `floor`.
    Transient { floor: Option<Duration> },
    /// Refused before acceptance for good: final, this attempt did not run.
    Refused,
}

/// Classifies an error attributed to a call. `names_job`: the frame carries
/// a job id (the runtime created a job for the request).
pub(crate) fn classify_error(e: &ErrorReply, names_job: bool, accepted: bool) -> ErrorVerdict {
    if is_duplicate_key(e) {
        ErrorVerdict::DuplicateKey
    } else if names_job || accepted {
        ErrorVerdict::JobFailed
    } else if e.is_retryable() {
        ErrorVerdict::Transient {
            floor: e.retry_after(),
        }
    } else {
        ErrorVerdict::Refused
    }
}

/// `DUPLICATE_KEY` anywhere, and the legacy runtime's spelling of the same
/// conflict: `FAILED_PRECONDITION` "already bound to a different command intent".
pub(crate) fn is_duplicate_key(e: &ErrorReply) -> bool {
    e.code == ErrorCode::DuplicateKey
        || (e.code == ErrorCode::FailedPrecondition
            && (e.message.contains("different command intent")
                || e.message.contains("already bound")))
}

/// What a call has exposed to the runtime so far: the facts the execution
/// rule reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Exposure {
    /// The runtime bound the key to a job (accepted, or a job id seen).
    pub(crate) bound: bool,
    /// A request may have reached the runtime and was never answered (lost
    /// with its connection, or still in flight).
    pub(crate) in_doubt: bool,
}

impl Exposure {
    /// The execution class of a call that ends without the runtime's
    /// terminal: not run only when nothing may have reached the runtime.
    pub(crate) fn unresolved(self) -> Execution {
        if self.bound || self.in_doubt {
            Execution::MayHaveRun
        } else {
            Execution::NotRun
        }
    }
}

/// The error of a call that could not get its outcome: `OutcomeUnavailable`
/// when the tool may have run, else `RetriesExhausted`.
pub(crate) fn give_up(
    key: &IdempotencyKey,
    job_id: Option<&str>,
    exposure: Exposure,
    attempts: u32,
    reason: &str,
    last_error: Option<&str>,
    permanent: bool,
) -> Error {
    match exposure.unresolved() {
        Execution::NotRun => Error::RetriesExhausted {
            key: key.clone(),
            attempts,
            last_error: last_error.unwrap_or(reason).to_owned(),
        },
        _ => Error::OutcomeUnavailable {
            key: key.clone(),
            job_id: job_id.map(str::to_owned),
            reason: match last_error {
                Some(last) => format!("{reason} after {attempts} attempt(s); last: {last}"),
                None => format!("{reason} after {attempts} attempt(s)"),
            },
            attempts,
            permanent,
        },
    }
}

/// A runtime error as the caller sees it. `execution` follows the verdict:
/// a job's failure ran; a refusal did not, unless an earlier attempt may
/// have reached the runtime.
pub(crate) fn tool_error(
    key: &IdempotencyKey,
    job_id: Option<String>,
    e: ErrorReply,
    verdict: &ErrorVerdict,
    exposure: Exposure,
    replayed: bool,
) -> Error {
    let execution = match verdict {
        ErrorVerdict::JobFailed => Execution::Ran,
        _ => exposure.unresolved(),
    };
    Error::Tool(Box::new(ToolError {
        retryable: e.is_retryable(),
        code: e.code,
        message: e.message,
        details: e.details,
        replayed,
        job_id,
        key: key.clone(),
        attempts: 0,
        execution,
    }))
}

/// What a terminal result frame says about the call.
pub(crate) enum ResultReading {
    /// The call's value.
    Value(Value),
    /// A v1.1 `job.result` with a non-success `final_status`.
    Failed { code: ErrorCode, message: String },
}

/// Reads a terminal result: an inline value, else the value reassembled from
/// `result_chunk` events (v1.1 §8.4), else the reference (`result_ref`,
/// `result_id`) for the caller to fetch; a non-success `final_status`
/// (`error`, `timed_out`) is a failure.
pub(crate) fn read_result(result: JobResult, assembled: Option<Value>) -> ResultReading {
    let status = result.extra.get("final_status").and_then(Value::as_str);
    if let Some(status @ ("error" | "timed_out")) = status {
        let text = |field: &str| result.extra.get(field).and_then(Value::as_str);
        let code = text("code")
            .map(ErrorCode::parse)
            .unwrap_or(if status == "timed_out" {
                ErrorCode::Timeout
            } else {
                ErrorCode::UnknownError
            });
        let message = text("message").unwrap_or(status).to_owned();
        return ResultReading::Failed { code, message };
    }
    ResultReading::Value(match result.result {
        Some(v) => v,
        None => match assembled {
            Some(v) => v,
            None if result.extra.contains_key("result_ref")
                || result.extra.contains_key("result_id") =>
            {
                Value::Object(result.extra)
            }
            None => Value::Null,
        },
    })
}

/// A job's failure read from a `job.result` with a non-success status.
pub(crate) fn failed_result(code: ErrorCode, message: String) -> ErrorReply {
    let retryable = code.default_retryable();
    ErrorReply {
        code,
        message,
        retryable: Some(retryable),
        details: None,
        request_id: None,
        extra: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(code: ErrorCode, retryable: bool, message: &str) -> ErrorReply {
        ErrorReply {
            code,
            message: message.into(),
            retryable: Some(retryable),
            details: None,
            request_id: None,
            extra: Default::default(),
        }
    }

    #[test]
    fn the_replay_matrix_row_by_row() {
        let dup = reply(ErrorCode::DuplicateKey, false, "dup");
        let legacy_dup = reply(
            ErrorCode::FailedPrecondition,
            false,
            "idempotency key k already bound to a different command intent",
        );
        let busy = reply(ErrorCode::Unavailable, true, "busy");
        let bad = reply(ErrorCode::InvalidArgument, false, "bad");
        for accepted in [false, true] {
            assert_eq!(
                classify_error(&dup, false, accepted),
                ErrorVerdict::DuplicateKey
            );
            assert_eq!(
                classify_error(&legacy_dup, false, accepted),
                ErrorVerdict::DuplicateKey
            );
            // An error naming a job is the job's terminal, retryable or not:
            // a replayed terminal is terminal.
            assert_eq!(
                classify_error(&busy, true, accepted),
                ErrorVerdict::JobFailed
            );
        }
        assert!(matches!(
            classify_error(&busy, false, false),
            ErrorVerdict::Transient { .. }
        ));
        assert_eq!(classify_error(&bad, false, false), ErrorVerdict::Refused);
        assert_eq!(classify_error(&busy, false, true), ErrorVerdict::JobFailed);
    }

    #[test]
    fn execution_rule() {
        let key = IdempotencyKey::new();
        let clean = Exposure::default();
        let lost = Exposure {
            bound: false,
            in_doubt: true,
        };
        assert_eq!(clean.unresolved(), Execution::NotRun);
        assert_eq!(lost.unresolved(), Execution::MayHaveRun);
        let refused = reply(ErrorCode::InvalidArgument, false, "bad");
        let e = tool_error(
            &key,
            None,
            refused.clone(),
            &ErrorVerdict::Refused,
            clean,
            false,
        );
        assert_eq!(e.execution(), Execution::NotRun);
        let e = tool_error(
            &key,
            None,
            refused.clone(),
            &ErrorVerdict::Refused,
            lost,
            false,
        );
        assert_eq!(e.execution(), Execution::MayHaveRun);
        let e = tool_error(
            &key,
            Some("j".into()),
            refused,
            &ErrorVerdict::JobFailed,
            clean,
            true,
        );
        assert_eq!(e.execution(), Execution::Ran);
        assert!(matches!(
            give_up(&key, None, clean, 3, "budget", None, false),
            Error::RetriesExhausted { .. }
        ));
        assert!(matches!(
            give_up(&key, None, lost, 3, "budget", None, false),
            Error::OutcomeUnavailable { .. }
        ));
    }
}
