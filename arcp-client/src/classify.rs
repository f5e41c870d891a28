//! The pure rules that turn a runtime's answer into what a call does next,
//! and how a call that ends without its outcome is reported, shared by both
//! transports (the smithy-rs `ClassifyRetry` idea: *what* an answer means is
//! decided here; *when* to retry is `retry.rs`).
//!
//! ## Errors, by shape
//!
//! An error frame is read by its shape first and its code second. Only the
//! runtime's conflict shape is a key conflict: a tool's own error, after its
//! job was accepted, belongs to the tool whatever its code or wording (a
//! tool may well fail with `DUPLICATE_KEY` or "already bound" of its own).
//!
//! | shape (from the captured transcripts) | awaiting acceptance | accepted |
//! |---|---|---|
//! | v1.1 `session.error` `DUPLICATE_KEY`, no request id, no job (Python 1.1.3) | [`ErrorVerdict::DuplicateKey`] | [`ErrorVerdict::JobFailed`] |
//! | legacy `job.failed` `FAILED_PRECONDITION` "already bound to a different command intent", no job id, correlated (Rust 2.0.0) | [`ErrorVerdict::DuplicateKey`] | [`ErrorVerdict::JobFailed`] |
//! | an error naming a job (`job.error`, `job.failed`, `tool.error` with a job id) | [`ErrorVerdict::JobFailed`]: terminal, the tool ran | same |
//! | an error naming no job, retryable (`UNAVAILABLE`, rate limits, ...) | [`ErrorVerdict::Transient`]: same key after a floor | [`ErrorVerdict::JobFailed`] |
//! | an error naming no job, not retryable | [`ErrorVerdict::Refused`]: terminal, this attempt did not run | [`ErrorVerdict::JobFailed`] |
//! | legacy `job.failed` `NOT_FOUND` "tool not registered: TOOL" for the call's own tool, after `job.accepted` under a fresh job (Rust 2.0.0: the key is not bound, a retry gets another job) | [`ErrorVerdict::Refused`] | [`ErrorVerdict::Refused`] ([`is_unbound_refusal`]) |
//!
//! A replayed terminal is terminal whether or not it is retryable: the
//! runtime would replay it to every later attempt with the same key.
//!
//! ## Endings, by exposure
//!
//! Every call that ends without the runtime's terminal ends through
//! [`give_up`], with an [`Ending`] (what stopped it) and its [`Exposure`]
//! (what it showed the runtime). From the moment any byte of a request is
//! handed to the operating system (a WebSocket frame, an HTTP request) the
//! call may have run, until an answer proves otherwise; a journal record
//! written by an earlier process counts the same. The rule:
//!
//! | ending | nothing exposed (proven not run) | exposed (may have run, at most once) |
//! |---|---|---|
//! | deadline | `DeadlineExceeded { execution: NotRun }` | `DeadlineExceeded { execution: MayHaveRun }` |
//! | `close()` | `Closed` | `Interrupted { key, job_id }` |
//! | retry budget spent | `RetriesExhausted` | `OutcomeUnavailable { key, job_id }` |
//! | request-level close (1002/1003/1007/1008/1009) | `RequestRejected` | `OutcomeUnavailable` (the reason names the close) |
//! | credentials refused (401/403, `UNAUTHENTICATED` naming no job) | `Unauthenticated` | `OutcomeUnavailable` |
//! | other final HTTP status (404, other 4xx, 501, 505) | `Http { status }` | `OutcomeUnavailable` |
//! | reconnecting failed for good | the connect error | `OutcomeUnavailable` |
//! | key conflict | `DuplicateKey` | `DuplicateKey { execution: MayHaveRun }`; `OutcomeUnavailable` if the runtime had bound the key to this call's job |
//!
//! A conflict after an exposure proves nothing about the first attempt: a
//! gateway or server that fingerprints the whole request body (each
//! attempt's envelope id and timestamp differ) answers our own retry with a
//! conflict, though the first attempt ran.
//!
//! ## Supplied keys
//!
//! "Did not run" is a claim about the key. A call whose key the caller
//! supplied (or that came from an earlier call) and that ran nothing says
//! so only when the runtime proved it (a key conflict before any exposure,
//! a refusal in its pre-acceptance shape naming no job) or the journal's
//! record of the key did; otherwise it says [`Execution::NotSent`]: an
//! earlier call with the key may have run ([`not_sent`]). Nothing outside
//! this module builds an [`Execution`] for an ending.

use std::time::Duration;

use arcp_types::{ErrorCode, ErrorReply, IdempotencyKey, JobResult};
use serde_json::Value;

use crate::error::{Error, Execution, JournalError, ToolError};

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
/// a job id (the runtime created a job for the request); `accepted`: the
/// runtime accepted the request this error answers (or the call's job), so
/// the error is the job's own.
pub(crate) fn classify_error(e: &ErrorReply, names_job: bool, accepted: bool) -> ErrorVerdict {
    if names_job || accepted {
        ErrorVerdict::JobFailed
    } else if is_duplicate_key(e) {
        ErrorVerdict::DuplicateKey
    } else if e.is_retryable() {
        ErrorVerdict::Transient {
            floor: e.retry_after(),
        }
    } else {
        ErrorVerdict::Refused
    }
}

/// `DUPLICATE_KEY`, and the legacy runtime's spelling of the same conflict:
/// `FAILED_PRECONDITION` "already bound to a different command intent".
/// Read only for an error that names no job and answers a request not yet
/// accepted ([`classify_error`]).
fn is_duplicate_key(e: &ErrorReply) -> bool {
    e.code == ErrorCode::DuplicateKey
        || (e.code == ErrorCode::FailedPrecondition
            && (e.message.contains("different command intent")
                || e.message.contains("already bound")))
}

/// The legacy runtime's refusal of a tool it does not know, sent as a job's
/// failure after accepting the request under a fresh job id: it binds no
/// key (a retry gets another job) and runs nothing, so it is not the key's
/// outcome. Read by shape: the code, and the exact wording naming the
/// call's own tool.
pub(crate) fn is_unbound_refusal(e: &ErrorReply, tool: &str) -> bool {
    e.code == ErrorCode::NotFound
        && e.message
            .strip_prefix("tool not registered: ")
            .is_some_and(|named| named == tool)
}

/// What a call has exposed to the runtime so far: the facts the execution
/// rule reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Exposure {
    /// The runtime bound the key to a job (accepted, or a job id seen, by
    /// this process or, through the journal, an earlier one).
    pub(crate) bound: bool,
    /// A request may have reached the runtime and was never answered (lost
    /// with its connection, still in flight, or sent by an earlier process
    /// whose journal record is unfinished).
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

/// What stopped a call that ends without the runtime's terminal for it.
#[derive(Debug, Clone)]
// Refused credentials and HTTP statuses end calls of the HTTP binding only.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) enum Ending {
    /// The caller's deadline passed.
    Deadline(Duration),
    /// The client was closed.
    Closed,
    /// The retry budget is spent (`reason` says how), or, `permanent`, the
    /// runtime will never hand this job's outcome to a later request.
    BudgetSpent { reason: String, permanent: bool },
    /// The runtime closed the connection because of the request itself.
    RequestRejected { close_code: u16, reason: String },
    /// The runtime (or a gateway before it) refused the credentials.
    Unauthenticated { message: String },
    /// An HTTP status the binding does not define for a call.
    HttpStatus {
        url: String,
        status: u16,
        message: String,
    },
    /// Reconnecting failed for good with this error.
    ConnectFailed(Error),
    /// The key is bound to another intent.
    DuplicateKey { message: String },
}

/// The call an [`Ending`] ends: what the error names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ended<'a> {
    pub(crate) key: &'a IdempotencyKey,
    pub(crate) job_id: Option<&'a str>,
    pub(crate) exposure: Exposure,
    pub(crate) attempts: u32,
    /// The last reason an attempt failed, when one did.
    pub(crate) last_error: Option<&'a str>,
}

/// The one give-up rule: the error a call ends with when it ends without
/// the runtime's terminal (see the table at the top of this module).
pub(crate) fn give_up(call: Ended<'_>, ending: Ending) -> Error {
    let key = call.key.clone();
    let attempts = call.attempts;
    let job_id = call.job_id.map(str::to_owned);
    let exposed = call.exposure.unresolved() == Execution::MayHaveRun;
    let unavailable = |what: String, permanent: bool| Error::OutcomeUnavailable {
        key: call.key.clone(),
        job_id: call.job_id.map(str::to_owned),
        reason: match call.last_error {
            Some(last) if !permanent && !what.contains(last) => {
                format!("{what} after {attempts} attempt(s); last: {last}")
            }
            _ => format!("{what} after {attempts} attempt(s)"),
        },
        attempts,
        permanent,
    };
    match ending {
        Ending::Deadline(deadline) => Error::DeadlineExceeded {
            key,
            job_id,
            deadline,
            attempts,
            execution: call.exposure.unresolved(),
            last_error: call.last_error.map(str::to_owned),
        },
        Ending::Closed if exposed => Error::Interrupted {
            key,
            job_id,
            attempts,
        },
        Ending::Closed => Error::Closed,
        Ending::BudgetSpent { reason, permanent } if exposed => unavailable(reason, permanent),
        // Which limit ended it, then why the last attempt failed, as
        // `OutcomeUnavailable` says it.
        Ending::BudgetSpent { reason, .. } => Error::RetriesExhausted {
            key,
            attempts,
            last_error: match call.last_error {
                Some(last) if !reason.contains(last) => format!("{reason}; last: {last}"),
                _ => reason,
            },
        },
        Ending::RequestRejected { close_code, reason } if exposed => unavailable(
            format!(
                "the runtime closed the connection with code {close_code} ({reason}) when the \
                 request was re-sent, and an earlier attempt may have reached it"
            ),
            false,
        ),
        Ending::RequestRejected { close_code, reason } => Error::RequestRejected {
            key,
            close_code,
            reason,
            attempts,
        },
        Ending::Unauthenticated { message } if exposed => unavailable(
            format!(
                "the credentials were refused ({message}) after an earlier attempt may have \
                 reached the runtime"
            ),
            false,
        ),
        Ending::Unauthenticated { message } => Error::Unauthenticated { message },
        Ending::HttpStatus {
            url,
            status,
            message,
        } if exposed => unavailable(
            format!(
                "HTTP {status} from {url} ({message}) after an earlier attempt may have reached \
                 the runtime"
            ),
            false,
        ),
        Ending::HttpStatus {
            url,
            status,
            message,
        } => Error::Http {
            url,
            status,
            message,
            attempts,
        },
        Ending::ConnectFailed(e) if exposed => {
            unavailable(format!("reconnecting failed for good ({e})"), false)
        }
        Ending::ConnectFailed(e) => e,
        Ending::DuplicateKey { message } if call.exposure.bound => unavailable(
            format!(
                "the runtime now reports the key bound to a different intent ({message}), \
                 though it had bound it to this call"
            ),
            false,
        ),
        Ending::DuplicateKey { message } => Error::DuplicateKey {
            key,
            message,
            attempts,
            execution: call.exposure.unresolved(),
        },
    }
}

/// A call whose outcome is unknown for `reason` (a journal that failed, or
/// could not read the key's record, while an earlier call with the key may
/// have run): it may have run, and the caller keeps its key (and job id,
/// when known) to ask again.
pub(crate) fn outcome_unknown(call: Ended<'_>, reason: String) -> Error {
    Error::OutcomeUnavailable {
        key: call.key.clone(),
        job_id: call.job_id.map(str::to_owned),
        reason,
        attempts: call.attempts,
        permanent: false,
    }
}

/// The error of a call that did not run, when another caller of its key was
/// in flight at the same time in this client ([`crate::fate`]): that one
/// may have run the tool, so this one cannot say "did not run" either. A
/// key conflict and an invalid call stay as they are (they prove nothing
/// ran under this intent, or concern this call's own request).
pub(crate) fn shared_fate(e: Error, key: &IdempotencyKey, job_id: Option<String>) -> Error {
    if e.execution() != Execution::NotRun {
        return e;
    }
    match e {
        e @ (Error::DuplicateKey { .. } | Error::InvalidCall { .. }) => e,
        e @ Error::DeadlineExceeded { .. } => e.with_execution(Execution::MayHaveRun),
        Error::Closed => Error::Interrupted {
            key: key.clone(),
            job_id,
            attempts: 0,
        },
        Error::Tool(mut tool) => {
            tool.execution = Execution::MayHaveRun;
            Error::Tool(tool)
        }
        e => Error::OutcomeUnavailable {
            key: key.clone(),
            job_id,
            reason: format!(
                "{e}; another call with this key was in flight in this client meanwhile, and may \
                 have run it"
            ),
            attempts: e.attempts().unwrap_or(0),
            permanent: false,
        },
    }
}

/// The error of a call that ran nothing, when its key was supplied (by the
/// caller, or from an earlier call) and neither the runtime nor the journal
/// proved the key unused: an earlier call with the key may have run, so it
/// says [`Execution::NotSent`] (retry with the same key), never "did not
/// run". Proofs stay as they are: a key conflict, a refusal in the
/// runtime's pre-acceptance shape (a tool error naming no job).
pub(crate) fn not_sent(e: Error, key: &IdempotencyKey) -> Error {
    if e.execution() != Execution::NotRun {
        return e;
    }
    match e {
        e @ Error::DuplicateKey { .. } => e,
        Error::Tool(tool) if tool.job_id.is_none() => Error::Tool(tool),
        // The caller matches on these: they keep their variant.
        e @ (Error::DeadlineExceeded { .. }
        | Error::InvalidCall { .. }
        | Error::ArgumentsEncode { .. }) => e.with_execution(Execution::NotSent),
        cause => Error::NotSent {
            key: key.clone(),
            cause: Box::new(cause),
        },
    }
}

/// A journaled call that did not run, whose journal could not record that
/// durably (`why`): a later recovery may still send it, so the caller is
/// told it may have run, and keeps the key.
pub(crate) fn not_recorded(
    key: &IdempotencyKey,
    e: &Error,
    why: &JournalError,
    job_id: Option<String>,
) -> Error {
    let key = key.clone();
    Error::OutcomeUnavailable {
        key,
        job_id,
        reason: format!(
            "no attempt of this call ran ({e}), but the journal could not record that durably ({why}); \
             a recovery may still send it: ask again later with this key"
        ),
        attempts: e.attempts().unwrap_or(0),
        permanent: false,
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
    ErrorReply::new(code, message).with_retryable(retryable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(code: ErrorCode, retryable: bool, message: &str) -> ErrorReply {
        ErrorReply::new(code, message).with_retryable(retryable)
    }

    /// The legacy Rust 2.0.0 runtime's conflict (captured): `job.failed`,
    /// no job id, correlated to the request.
    fn legacy_conflict() -> ErrorReply {
        reply(
            ErrorCode::FailedPrecondition,
            false,
            "idempotency key key-echo-1 already bound to a different command intent",
        )
    }

    /// The Python 1.1.3 runtime's conflict (captured): `session.error`, no
    /// request id, no job.
    fn v1_1_conflict() -> ErrorReply {
        reply(
            ErrorCode::DuplicateKey,
            false,
            "idempotency key 'k1-QYBBH1' already used with different parameters",
        )
    }

    #[test]
    fn a_conflict_before_acceptance_is_a_duplicate_key() {
        for e in [legacy_conflict(), v1_1_conflict()] {
            assert_eq!(classify_error(&e, false, false), ErrorVerdict::DuplicateKey);
        }
    }

    #[test]
    fn a_jobs_own_error_is_the_tools_whatever_its_code_or_wording() {
        let lookalikes = [
            legacy_conflict(),
            v1_1_conflict(),
            reply(ErrorCode::Unauthenticated, false, "token expired"),
            reply(ErrorCode::Unavailable, true, "busy"),
        ];
        for e in lookalikes {
            // Naming a job, or after the request's acceptance.
            assert_eq!(classify_error(&e, true, false), ErrorVerdict::JobFailed);
            assert_eq!(classify_error(&e, false, true), ErrorVerdict::JobFailed);
            assert_eq!(classify_error(&e, true, true), ErrorVerdict::JobFailed);
        }
    }

    #[test]
    fn refusals_before_acceptance_by_retryability() {
        let busy = reply(ErrorCode::Unavailable, true, "busy");
        let bad = reply(ErrorCode::InvalidArgument, false, "bad");
        assert!(matches!(
            classify_error(&busy, false, false),
            ErrorVerdict::Transient { .. }
        ));
        assert_eq!(classify_error(&bad, false, false), ErrorVerdict::Refused);
    }

    fn ended(key: &IdempotencyKey, bound: bool, in_doubt: bool) -> Ended<'_> {
        Ended {
            key,
            job_id: bound.then_some("job_1"),
            exposure: Exposure { bound, in_doubt },
            attempts: 2,
            last_error: Some("connection lost"),
        }
    }

    fn every_ending() -> Vec<Ending> {
        vec![
            Ending::Deadline(Duration::from_secs(1)),
            Ending::Closed,
            Ending::BudgetSpent {
                reason: "budget".into(),
                permanent: false,
            },
            Ending::RequestRejected {
                close_code: 1008,
                reason: "policy".into(),
            },
            Ending::Unauthenticated {
                message: "HTTP 401".into(),
            },
            Ending::HttpStatus {
                url: "http://x/arcp".into(),
                status: 404,
                message: "not found".into(),
            },
            Ending::ConnectFailed(Error::Connect {
                url: "ws://x".into(),
                message: "refused".into(),
                retryable: false,
                source: None,
            }),
        ]
    }

    #[test]
    fn an_ending_says_not_run_only_when_nothing_was_exposed() {
        let key = IdempotencyKey::new();
        for ending in every_ending() {
            let clean = give_up(ended(&key, false, false), ending.clone());
            assert_eq!(clean.execution(), Execution::NotRun, "{ending:?}: {clean}");
            for (bound, in_doubt) in [(true, false), (false, true), (true, true)] {
                let e = give_up(ended(&key, bound, in_doubt), ending.clone());
                assert_eq!(e.execution(), Execution::MayHaveRun, "{ending:?}: {e}");
                assert_eq!(e.key(), Some(&key), "{ending:?}: keeps the key");
                if bound {
                    assert_eq!(e.job_id(), Some("job_1"), "{ending:?}: keeps the job");
                }
            }
        }
    }

    #[test]
    fn the_natural_errors_when_nothing_was_exposed() {
        let key = IdempotencyKey::new();
        let end = |ending| give_up(ended(&key, false, false), ending);
        let e = every_ending();
        assert!(matches!(end(e[0].clone()), Error::DeadlineExceeded { .. }));
        assert!(matches!(end(e[1].clone()), Error::Closed));
        assert!(matches!(end(e[2].clone()), Error::RetriesExhausted { .. }));
        assert!(matches!(
            end(e[3].clone()),
            Error::RequestRejected {
                close_code: 1008,
                ..
            }
        ));
        assert!(matches!(end(e[4].clone()), Error::Unauthenticated { .. }));
        assert!(matches!(end(e[5].clone()), Error::Http { status: 404, .. }));
        assert!(matches!(end(e[6].clone()), Error::Connect { .. }));
        // Exposed: the close is an interruption, the others unavailable.
        let exposed = |ending| give_up(ended(&key, true, false), ending);
        assert!(matches!(exposed(e[1].clone()), Error::Interrupted { .. }));
        assert!(matches!(
            exposed(e[3].clone()),
            Error::OutcomeUnavailable { .. }
        ));
    }

    #[test]
    fn a_conflict_is_not_run_only_before_any_exposure() {
        let key = IdempotencyKey::new();
        let conflict = || Ending::DuplicateKey {
            message: "dup".into(),
        };
        let e = give_up(ended(&key, false, false), conflict());
        assert!(matches!(e, Error::DuplicateKey { .. }), "{e}");
        assert_eq!(e.execution(), Execution::NotRun);
        // A lost attempt: a gateway fingerprinting whole bodies answers our
        // own retry so. The conflict is kept; it may have run.
        let e = give_up(ended(&key, false, true), conflict());
        assert!(matches!(e, Error::DuplicateKey { .. }), "{e}");
        assert_eq!(e.execution(), Execution::MayHaveRun);
        // Bound to this call before: the answer contradicts it; may have run.
        let e = give_up(ended(&key, true, false), conflict());
        assert_eq!(e.execution(), Execution::MayHaveRun, "{e}");
    }

    #[test]
    fn a_supplied_key_turns_every_unproven_not_run_into_not_sent() {
        let key = IdempotencyKey::new();
        for ending in every_ending() {
            let clean = give_up(ended(&key, false, false), ending.clone());
            let e = not_sent(clean, &key);
            assert_eq!(e.execution(), Execution::NotSent, "{ending:?}: {e}");
            assert_eq!(e.key(), Some(&key), "{ending:?}");
            // What may have run stays so.
            let exposed = give_up(ended(&key, false, true), ending.clone());
            assert_eq!(not_sent(exposed, &key).execution(), Execution::MayHaveRun);
        }
        // A deadline keeps its variant.
        let e = not_sent(
            give_up(
                ended(&key, false, false),
                Ending::Deadline(Duration::from_secs(1)),
            ),
            &key,
        );
        assert!(matches!(e, Error::DeadlineExceeded { .. }), "{e:?}");
        // Proofs stay: a conflict, a refusal naming no job.
        let conflict = give_up(
            ended(&key, false, false),
            Ending::DuplicateKey {
                message: "dup".into(),
            },
        );
        assert_eq!(not_sent(conflict, &key).execution(), Execution::NotRun);
        let refused = reply(ErrorCode::InvalidArgument, false, "bad");
        let refusal = |job: Option<String>| {
            tool_error(
                &key,
                job,
                refused.clone(),
                &ErrorVerdict::Refused,
                Exposure::default(),
                false,
            )
        };
        assert_eq!(not_sent(refusal(None), &key).execution(), Execution::NotRun);
        // One naming a job may be a stored failure of an earlier call.
        assert_eq!(
            not_sent(refusal(Some("job_1".into())), &key).execution(),
            Execution::NotSent
        );
    }

    #[test]
    fn tool_errors_follow_the_verdict() {
        let key = IdempotencyKey::new();
        let clean = Exposure::default();
        let lost = Exposure {
            bound: false,
            in_doubt: true,
        };
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
    }
}
