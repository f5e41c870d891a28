//! What an `arcp invoke` ended with, and the exit status each outcome maps to.

use arcp_client::{Error, ToolOutput};

/// Exit status: the call succeeded.
pub const EXIT_OK: u8 = 0;
/// Exit status: anything not listed here (bad arguments, connection
/// failures, deadline, retries exhausted, ...).
pub const EXIT_OTHER: u8 = 1;
/// Exit status: the runtime reported a tool error.
pub const EXIT_TOOL_ERROR: u8 = 2;
/// Exit status: the key is bound to a different call (`DUPLICATE_KEY`).
pub const EXIT_DUPLICATE_KEY: u8 = 3;
/// Exit status: the call was accepted but its outcome could not be obtained.
pub const EXIT_OUTCOME_UNAVAILABLE: u8 = 4;

/// How a call ended, with everything the JSON contract reports.
#[derive(Debug)]
pub enum CallOutcome {
    /// The tool returned a result.
    Ok(ToolOutput),
    /// The call failed: a tool error, or a client-side outcome.
    Failed(Failure),
}

/// A failed call.
#[derive(Debug)]
pub struct Failure {
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
    /// The process exit status.
    pub exit_code: u8,
}

impl Failure {
    /// A failure reported by the client. `job_id` is the call's job when
    /// the error does not name it.
    pub fn from_error(error: &Error, key: String, job_id: Option<String>) -> Failure {
        let job_id = error.job_id().map(str::to_owned).or(job_id);
        Failure {
            code: error.code_name(),
            // The runtime's own words for a tool error; else the client's.
            message: match error {
                Error::Tool(e) => e.message.clone(),
                other => other.to_string(),
            },
            attempts: attempts_of(error, job_id.is_some()),
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
    pub fn deadline_while_connecting(error: &Error, key: String) -> Failure {
        Failure {
            code: "DEADLINE_EXCEEDED".into(),
            message: format!("the deadline passed while connecting: {error}"),
            key,
            job_id: None,
            attempts: 0,
            exit_code: EXIT_OTHER,
        }
    }

    /// The user interrupted the wait (SIGINT or SIGTERM). The call is not
    /// cancelled: it may still run, once; its key gets its outcome later.
    pub fn interrupted(key: String, job_id: Option<String>) -> Failure {
        Failure {
            code: "INTERRUPTED".into(),
            message: "interrupted before the call ended; the call was not cancelled".into(),
            key,
            // A lower bound: a job id means the request was sent.
            attempts: u32::from(job_id.is_some()),
            job_id,
            exit_code: EXIT_OTHER,
        }
    }
}

impl CallOutcome {
    /// The process exit status for this outcome.
    pub fn exit_code(&self) -> u8 {
        match self {
            CallOutcome::Ok(_) => EXIT_OK,
            CallOutcome::Failed(f) => f.exit_code,
        }
    }
}

/// How many requests a failed call sent.
///
/// `arcp_client::Error` carries the count only in
/// [`Error::RetriesExhausted`]; for the other variants this is the best value
/// available:
///
/// - errors raised before any request is sent (connect, handshake,
///   authentication, an invalid call) are exact: 0;
/// - [`Error::OutcomeUnavailable`] states the count in its reason ("... after
///   N attempt(s)"), which is read when present, else at least 1 (the call
///   was accepted, so a request was sent);
/// - every other error that the runtime answered (tool error, duplicate key,
///   cancelled) is a lower bound: 1;
/// - [`Error::DeadlineExceeded`] is a lower bound: 1 once the runtime bound
///   the call to a job, else 0.
pub fn attempts_of(error: &Error, job_known: bool) -> u32 {
    match error {
        Error::RetriesExhausted { attempts, .. } => *attempts,
        Error::OutcomeUnavailable { reason, .. } => attempts_in(reason).unwrap_or(1).max(1),
        Error::Tool(_) | Error::DuplicateKey { .. } | Error::Cancelled { .. } => 1,
        Error::DeadlineExceeded { .. } => u32::from(job_known),
        Error::Connect { .. }
        | Error::Handshake { .. }
        | Error::Unauthenticated { .. }
        | Error::InvalidCall(_) => 0,
        _ => u32::from(job_known),
    }
}

/// Reads N from "... after N attempt(s) ...".
fn attempts_in(reason: &str) -> Option<u32> {
    let (_, rest) = reason.split_once("after ")?;
    let (n, rest) = rest.split_once(' ')?;
    rest.starts_with("attempt").then(|| n.parse().ok())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_read_from_an_outcome_unavailable_reason() {
        assert_eq!(
            attempts_in("retry budget exhausted after 3 attempt(s); last: x"),
            Some(3)
        );
        assert_eq!(
            attempts_in("retry budget exhausted after 1 attempt(s)"),
            Some(1)
        );
        assert_eq!(attempts_in("gave up after 2 seconds"), None);
        assert_eq!(attempts_in("nothing"), None);
    }
}
