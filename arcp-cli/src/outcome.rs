//! What an `arcp invoke` ended with, and the exit status each outcome maps to.

use arcp_sdk::{Error, Execution, ToolOutput};

// `arcp invoke`'s exit status says the outcome's class (`ran` in the JSON
// output), so a script needs no parsing to decide whether to retry and with
// which key.

/// Exit status: the call succeeded.
pub(crate) const EXIT_OK: u8 = 0;
/// Exit status: a failure that is no call's outcome (the process could not
/// set itself up).
pub(crate) const EXIT_OTHER: u8 = 1;
/// Exit status: the tool ran and failed (a tool error).
pub(crate) const EXIT_TOOL_ERROR: u8 = 2;
/// Exit status: proven not run under this key (a duplicate key included):
/// the work may be re-issued, even under a new key.
pub(crate) const EXIT_NOT_RUN: u8 = 3;
/// Exit status: the tool may have run, at most once; the outcome is unknown.
/// Repeat with the same `--key` to learn it. A cancelled job too (cancelled
/// before or while its tool ran).
pub(crate) const EXIT_MAY_HAVE_RUN: u8 = 4;
/// Exit status: a live client holds the journal (`arcp journal`, and
/// `arcp invoke --journal`).
pub(crate) const EXIT_JOURNAL_LOCKED: u8 = 5;
/// Exit status: this call ran nothing, but its `--key` was supplied (or the
/// `--journal` may hold the call) and an earlier call with it may have run,
/// or a recovery may send it: repeat with the same `--key`.
pub(crate) const EXIT_NOT_SENT: u8 = 6;

/// Where the call's key came from: what "did not run" can claim about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyOrigin {
    /// The user passed `--key`: an earlier call may have used it.
    Supplied,
    /// The CLI generated it for this call and keeps no journal of it: no
    /// runtime has seen it.
    Generated,
    /// The CLI generated it for this call, and the `--journal` may record
    /// the call: a recovery may send it, so it is treated as supplied.
    Journaled,
}

/// The exit status of a failed call of this class (`code`: its code name).
pub(crate) fn exit_status(ran: Execution, code: &str) -> u8 {
    if code == "JOURNAL_LOCKED" {
        return EXIT_JOURNAL_LOCKED;
    }
    match ran {
        Execution::Ran => EXIT_TOOL_ERROR,
        Execution::NotRun => EXIT_NOT_RUN,
        Execution::NotSent => EXIT_NOT_SENT,
        Execution::MayHaveRun => EXIT_MAY_HAVE_RUN,
    }
}

/// What the client's class means for a key of this origin: nothing sent
/// under a key generated for the call proves it did not run (the CLI hands
/// every key to the client as supplied, so the client cannot know).
pub(crate) fn class_for(ran: Execution, origin: KeyOrigin) -> Execution {
    match (ran, origin) {
        (Execution::NotSent, KeyOrigin::Generated) => Execution::NotRun,
        (ran, _) => ran,
    }
}

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
    /// Where the key came from (the hint offers a new key only for a
    /// generated one).
    pub origin: KeyOrigin,
    /// The process exit status.
    pub exit_code: u8,
}

impl Failure {
    /// A failure reported by the client. `job_id` is the call's job when
    /// the error does not name it.
    pub(crate) fn from_error(
        error: &Error,
        key: String,
        origin: KeyOrigin,
        job_id: Option<String>,
    ) -> Failure {
        let job_id = error.job_id().map(str::to_owned).or(job_id);
        let ran = class_for(error.execution(), origin);
        let code = error.code_name();
        Failure {
            exit_code: exit_status(ran, &code),
            code,
            // The runtime's own words for a tool error; else the client's.
            message: match error {
                Error::Tool(e) => e.message.clone(),
                other => other.to_string(),
            },
            attempts: attempts_of(error),
            ran,
            origin,
            key,
            job_id,
        }
    }

    /// Connecting failed, before the call was made: nothing was sent.
    pub(crate) fn before_the_call(error: &Error, key: String, origin: KeyOrigin) -> Failure {
        let mut failure = Failure::from_error(error, key, origin, None);
        if failure.ran == Execution::NotRun {
            failure.ran = class_for(Execution::NotSent, origin);
            failure.exit_code = exit_status(failure.ran, &failure.code);
        }
        failure
    }

    /// The `--deadline` ran out while connecting (which the client reports
    /// as a connect or handshake failure).
    pub(crate) fn deadline_while_connecting(
        error: &Error,
        key: String,
        origin: KeyOrigin,
    ) -> Failure {
        // No session yet: nothing was sent.
        let ran = class_for(Execution::NotSent, origin);
        Failure {
            code: "DEADLINE_EXCEEDED".into(),
            message: format!("the deadline passed while connecting: {error}"),
            key,
            job_id: None,
            attempts: 0,
            ran,
            origin,
            exit_code: exit_status(ran, "DEADLINE_EXCEEDED"),
        }
    }

    /// The user interrupted the wait (SIGINT or SIGTERM). The call is not
    /// cancelled: it may still run, once; its key gets its outcome later.
    pub(crate) fn interrupted(key: String, origin: KeyOrigin, job_id: Option<String>) -> Failure {
        Failure {
            code: "INTERRUPTED".into(),
            message: "interrupted before the call ended; the call was not cancelled".into(),
            key,
            // A lower bound: a job id means the request was sent.
            attempts: u32::from(job_id.is_some()),
            // The call goes on without this process waiting for it.
            ran: Execution::MayHaveRun,
            origin,
            job_id,
            exit_code: EXIT_MAY_HAVE_RUN,
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

#[cfg(test)]
mod tests {
    use super::*;
    use arcp_sdk::IdempotencyKey;

    fn connect_failed() -> Error {
        Error::Connect {
            url: "ws://127.0.0.1:1/arcp".into(),
            message: "refused".into(),
            retryable: false,
            source: None,
        }
    }

    #[test]
    fn each_class_has_its_exit_status() {
        assert_eq!(exit_status(Execution::Ran, "PERMISSION_DENIED"), 2);
        assert_eq!(exit_status(Execution::NotRun, "DUPLICATE_KEY"), 3);
        assert_eq!(exit_status(Execution::MayHaveRun, "OUTCOME_UNAVAILABLE"), 4);
        assert_eq!(exit_status(Execution::NotSent, "CONNECT_FAILED"), 6);
        assert_eq!(exit_status(Execution::NotRun, "JOURNAL_LOCKED"), 5);
        assert_eq!(exit_status(Execution::NotSent, "JOURNAL_LOCKED"), 5);
    }

    #[test]
    fn a_cancelled_job_may_have_run() {
        let key = IdempotencyKey::new();
        let cancelled = Error::Cancelled {
            key: key.clone(),
            job_id: Some("job_1".into()),
            attempts: 1,
        };
        for origin in [
            KeyOrigin::Supplied,
            KeyOrigin::Generated,
            KeyOrigin::Journaled,
        ] {
            let f = Failure::from_error(&cancelled, key.to_string(), origin, None);
            assert_eq!(
                (f.ran, f.exit_code),
                (Execution::MayHaveRun, 4),
                "{origin:?}"
            );
            assert_eq!(f.code, "CANCELLED");
        }
    }

    #[test]
    fn nothing_sent_is_not_run_only_for_a_generated_key() {
        let key = IdempotencyKey::new();
        let sdk = Error::NotSent {
            key: key.clone(),
            cause: Box::new(connect_failed()),
        };
        let generated = Failure::from_error(&sdk, key.to_string(), KeyOrigin::Generated, None);
        assert_eq!((generated.ran, generated.exit_code), (Execution::NotRun, 3));
        assert_eq!(generated.code, "CONNECT_FAILED");
        let supplied = Failure::from_error(&sdk, key.to_string(), KeyOrigin::Supplied, None);
        assert_eq!((supplied.ran, supplied.exit_code), (Execution::NotSent, 6));
        let late = Failure::deadline_while_connecting(
            &connect_failed(),
            key.to_string(),
            KeyOrigin::Supplied,
        );
        assert_eq!((late.ran, late.exit_code), (Execution::NotSent, 6));
        // The connect itself failed (no call yet): the same rule.
        for (origin, class) in [
            (KeyOrigin::Supplied, Execution::NotSent),
            (KeyOrigin::Generated, Execution::NotRun),
            (KeyOrigin::Journaled, Execution::NotSent),
        ] {
            let f = Failure::before_the_call(&connect_failed(), key.to_string(), origin);
            assert_eq!(f.ran, class, "{origin:?}");
        }
    }
}
