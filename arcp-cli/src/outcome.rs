//! What an `arcp invoke` ended with, and the exit status each outcome maps to.

use arcp_sdk::{Error, Execution, ToolOutput};

/// Exit status: the call succeeded.
pub(crate) const EXIT_OK: u8 = 0;
/// Exit status: anything not listed here (bad arguments, connection
/// failures, deadline, retries exhausted, ...).
pub(crate) const EXIT_OTHER: u8 = 1;
/// Exit status: the runtime reported a tool error.
pub(crate) const EXIT_TOOL_ERROR: u8 = 2;
/// Exit status: the key is bound to a different call (`DUPLICATE_KEY`).
pub(crate) const EXIT_DUPLICATE_KEY: u8 = 3;
/// Exit status: the call was accepted but its outcome could not be obtained.
pub(crate) const EXIT_OUTCOME_UNAVAILABLE: u8 = 4;
/// Exit status of `arcp journal`: a live client holds the journal.
pub(crate) const EXIT_JOURNAL_LOCKED: u8 = 5;

/// How a call ended, with everything the JSON contract reports.
#[derive(Debug)]
pub(crate) enum CallOutcome {
    /// The tool returned a result.
    Ok(ToolOutput),
    /// The call failed: a tool error, or a client-side outcome.
    Failed(Failure),
}

/// A failed call.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The wire code of a tool error, else a client-side code
    /// (`OUTCOME_UNAVAILABLE`, `CONNECT_FAILED`, `INTERRUPTED`, ...).
    pub code: String,
    /// What happened, for a human.
    pub message: String,
    /// The call's idempotency key (always known: the CLI picks it).
    pub key: String,
    /// The job the runtime bound the call to, when known.
    pub job_id: Option<String>,
    /// Requests sent; see [`attempts_of`] for how exact it is.
    pub attempts: u32,
    /// Whether the tool ran (`not_run` only when certain).
    pub ran: Execution,
    /// The process exit status.
    pub exit_code: u8,
}

impl Failure {
    /// A failure reported by the client. `job_id` is the call's job when
    /// the error does not name it.
    pub(crate) fn from_error(error: &Error, key: String, job_id: Option<String>) -> Failure {
        let job_id = error.job_id().map(str::to_owned).or(job_id);
        Failure {
            code: error.code_name(),
            // The runtime's own words for a tool error; else the client's.
            message: match error {
                Error::Tool(e) => e.message.clone(),
                other => other.to_string(),
            },
            attempts: attempts_of(error),
            ran: error.execution(),
            exit_code: match error {
                Error::Tool(_) => EXIT_TOOL_ERROR,
                Error::DuplicateKey { .. } => EXIT_DUPLICATE_KEY,
                Error::OutcomeUnavailable { .. } => EXIT_OUTCOME_UNAVAILABLE,
                _ => EXIT_OTHER,
            },
            key,
            job_id,
        }
    }

    /// The `--deadline` ran out while connecting (which the client reports
    /// as a connect or handshake failure).
    pub(crate) fn deadline_while_connecting(error: &Error, key: String) -> Failure {
        Failure {
            code: "DEADLINE_EXCEEDED".into(),
            message: format!("the deadline passed while connecting: {error}"),
            key,
            job_id: None,
            attempts: 0,
            // No session yet: nothing was sent.
            ran: Execution::NotRun,
            exit_code: EXIT_OTHER,
        }
    }

    /// The user interrupted the wait (SIGINT or SIGTERM). The call is not
    /// cancelled: it may still run, once; its key gets its outcome later.
    pub(crate) fn interrupted(key: String, job_id: Option<String>) -> Failure {
        Failure {
            code: "INTERRUPTED".into(),
            message: "interrupted before the call ended; the call was not cancelled".into(),
            key,
            // A lower bound: a job id means the request was sent.
            attempts: u32::from(job_id.is_some()),
            // The call goes on without this process waiting for it.
            ran: Execution::MayHaveRun,
            job_id,
            exit_code: EXIT_OTHER,
        }
    }
}

impl CallOutcome {
    /// The process exit status for this outcome.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            CallOutcome::Ok(_) => EXIT_OK,
            CallOutcome::Failed(f) => f.exit_code,
        }
    }
}

/// Requests sent for the call: the client reports it on every error raised
/// after a send; errors raised before any request (connect, handshake,
/// authentication, invalid call) count 0.
pub(crate) fn attempts_of(error: &Error) -> u32 {
    error.attempts().unwrap_or(0)
}
