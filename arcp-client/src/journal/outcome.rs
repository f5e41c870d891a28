//! [`JournalOutcome`]: how a journaled call ended, as stored, and the
//! rule between it and the call's result (which results are final, which
//! leave the record for a recovery to re-drive).

use arcp_types::{ErrorCode, IdempotencyKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Execution, ToolError};
use crate::outcome::ToolOutput;

/// How a journaled call ended. Stored as JSON (externally tagged, snake case:
/// `{"ok": {...}}`, `{"tool_error": {...}}`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum JournalOutcome {
    /// The tool's result ([`Ok(ToolOutput)`](crate::ToolOutput)).
    Ok {
        /// The result.
        value: Value,
        /// The job, when the runtime said.
        #[serde(default)]
        job_id: Option<String>,
        /// Whether the result was a stored one replayed.
        #[serde(default)]
        replayed: bool,
        /// Requests sent.
        #[serde(default)]
        attempts: u32,
    },
    /// A terminal tool error ([`Error::Tool`]).
    ToolError {
        /// The wire code.
        code: String,
        /// The runtime's message.
        message: String,
        /// Whether a new call (new key) may succeed.
        #[serde(default)]
        retryable: bool,
        /// Structured details.
        #[serde(default)]
        details: Option<Value>,
        /// The job.
        #[serde(default)]
        job_id: Option<String>,
        /// Whether the error was a stored one replayed.
        #[serde(default)]
        replayed: bool,
        /// Requests sent.
        #[serde(default)]
        attempts: u32,
        /// The runtime refused the request before accepting it: the tool
        /// did not run ([`Execution::NotRun`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        refused: bool,
    },
    /// The key is bound to a different intent ([`Error::DuplicateKey`]).
    DuplicateKey {
        /// The runtime's explanation.
        message: String,
        /// Requests sent.
        #[serde(default)]
        attempts: u32,
    },
    /// The job was cancelled ([`Error::Cancelled`]).
    Cancelled {
        /// The job.
        #[serde(default)]
        job_id: Option<String>,
        /// Requests sent.
        #[serde(default)]
        attempts: u32,
    },
    /// Every attempt was refused before acceptance: the tool did not run
    /// ([`Error::RetriesExhausted`]). Final, because the caller was told so
    /// and may have re-issued the work under another key: re-driving it
    /// after a restart could run it twice.
    NotAccepted {
        /// The last reason an attempt failed.
        last_error: String,
        /// Requests sent.
        #[serde(default)]
        attempts: u32,
        /// Whether "did not run" was proven for the key when the call ended,
        /// not only for this call (the key was generated for it, or the
        /// runtime refused it). Otherwise the call only sent nothing
        /// ([`Execution::NotSent`]: an earlier call with the key may have
        /// run). Either way a later call of the key never takes the record
        /// as proof: the key may have run through another client since.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        key_unused: bool,
    },
    /// The call was refused before it was sent ([`Error::InvalidCall`]).
    Invalid {
        /// Why.
        message: String,
    },
    /// The runtime accepted the call (or may have) and will never hand its
    /// outcome to a later request: it replays only `job.accepted`
    /// ([`Error::OutcomeUnavailable`] with `permanent`). Final, so recovery
    /// does not re-send a hopeless call; the tool ran at most once.
    OutcomeUnknown {
        /// The job, when the runtime said.
        #[serde(default)]
        job_id: Option<String>,
        /// What the client knows, in words.
        reason: String,
        /// Requests sent.
        #[serde(default)]
        attempts: u32,
    },
}

impl JournalOutcome {
    /// The journal outcome of a call's result, or `None` when the record
    /// must stay unfinished for a later recovery to re-drive: the tool may
    /// have run and its outcome can still be learned. Follows the execution
    /// rule ([`Error::execution`]): a call proven not run is final (the
    /// caller was told so and may re-issue the work; re-driving it could
    /// run it twice), and so is one whose runtime never replays outcomes.
    /// A tool error that may not be the job's (a refusal before acceptance
    /// of a call an earlier attempt may have started) is not the key's
    /// outcome either: the job's own is still to be learned.
    ///
    /// `key_unused`: whether a "did not run" of this call is proven for its
    /// key (see [`JournalOutcome::NotAccepted`]).
    pub(crate) fn from_result(
        result: &Result<ToolOutput, Error>,
        key_unused: bool,
    ) -> Option<Self> {
        Some(match result {
            // Only this call is known not to have sent anything.
            Err(Error::NotSent { cause, .. }) => {
                return Self::from_result(&Err((**cause).clone()), false)
            }
            Err(Error::Tool(e)) if e.execution == Execution::MayHaveRun => return None,
            // A conflict found in the client (its outcome cache, a call of
            // the key in flight): this call sent nothing, and its record,
            // if it made one, is never to be sent.
            Err(Error::DuplicateKey {
                message,
                attempts,
                execution: Execution::NotSent,
                ..
            }) => JournalOutcome::NotAccepted {
                last_error: message.clone(),
                attempts: *attempts,
                key_unused: false,
            },
            // A conflict after an earlier attempt may have run the call.
            Err(e @ Error::DuplicateKey { .. }) if e.execution() != Execution::NotRun => {
                return None
            }
            Ok(out) => JournalOutcome::Ok {
                value: out.value.clone(),
                job_id: out.job_id.clone(),
                replayed: out.replayed,
                attempts: out.attempts,
            },
            Err(Error::Tool(e)) => JournalOutcome::ToolError {
                code: e.code.to_string(),
                message: e.message.clone(),
                retryable: e.retryable,
                details: e.details.clone(),
                job_id: e.job_id.clone(),
                replayed: e.replayed,
                attempts: e.attempts,
                refused: e.execution == Execution::NotRun,
            },
            Err(Error::DuplicateKey {
                message, attempts, ..
            }) => JournalOutcome::DuplicateKey {
                message: message.clone(),
                attempts: *attempts,
            },
            // A job the runtime cancelled (a cancel before anything was
            // sent stopped only this call: the key's ending is below).
            Err(Error::Cancelled {
                job_id, attempts, ..
            }) if *attempts > 0 => JournalOutcome::Cancelled {
                job_id: job_id.clone(),
                attempts: *attempts,
            },
            Err(Error::RetriesExhausted {
                attempts,
                last_error,
                ..
            }) => JournalOutcome::NotAccepted {
                last_error: last_error.clone(),
                attempts: *attempts,
                key_unused,
            },
            Err(Error::InvalidCall { message, .. }) => JournalOutcome::Invalid {
                message: message.clone(),
            },
            Err(Error::OutcomeUnavailable {
                job_id,
                reason,
                attempts,
                permanent: true,
                ..
            }) => JournalOutcome::OutcomeUnknown {
                job_id: job_id.clone(),
                reason: reason.clone(),
                attempts: *attempts,
            },
            // The journal itself failed (or gave the call to another
            // worker): this call wrote nothing that a recovery would send,
            // and a record of an earlier attempt must stay as it is.
            Err(Error::Journal(_)) => return None,
            Err(e) if matches!(e.execution(), Execution::NotRun | Execution::NotSent) => {
                JournalOutcome::NotAccepted {
                    last_error: e.to_string(),
                    attempts: e.attempts().unwrap_or(0),
                    key_unused: key_unused && e.execution() == Execution::NotRun,
                }
            }
            Err(_) => return None,
        })
    }

    /// Whether a repeated call with the same key and intent is answered with
    /// this outcome (as the in-process outcome cache does): a result, a tool
    /// error or a cancellation is the key's outcome. The others are not (the
    /// key belongs to another intent, or the call never ran), so a repeated
    /// call is sent again.
    pub(crate) fn answers_repeat(&self) -> bool {
        matches!(
            self,
            JournalOutcome::Ok { .. }
                | JournalOutcome::ToolError { refused: false, .. }
                | JournalOutcome::Cancelled { .. }
        )
    }

    /// Whether this ending proves the call's intent did not run under its
    /// key: refused before acceptance, never accepted, refused as invalid,
    /// or the key bound to another intent. "Outcome unknown" and the key's
    /// own outcomes (result, tool error, cancellation) do not.
    pub(crate) fn proves_not_run(&self) -> bool {
        matches!(
            self,
            JournalOutcome::NotAccepted { .. }
                | JournalOutcome::Invalid { .. }
                | JournalOutcome::DuplicateKey { .. }
                | JournalOutcome::ToolError { refused: true, .. }
        )
    }

    /// The job, when known.
    pub fn job_id(&self) -> Option<&str> {
        match self {
            JournalOutcome::Ok { job_id, .. }
            | JournalOutcome::ToolError { job_id, .. }
            | JournalOutcome::Cancelled { job_id, .. }
            | JournalOutcome::OutcomeUnknown { job_id, .. } => job_id.as_deref(),
            _ => None,
        }
    }

    /// Requests sent, as recorded with the outcome.
    pub fn attempts(&self) -> u32 {
        match self {
            JournalOutcome::Ok { attempts, .. }
            | JournalOutcome::ToolError { attempts, .. }
            | JournalOutcome::DuplicateKey { attempts, .. }
            | JournalOutcome::Cancelled { attempts, .. }
            | JournalOutcome::NotAccepted { attempts, .. }
            | JournalOutcome::OutcomeUnknown { attempts, .. } => *attempts,
            JournalOutcome::Invalid { .. } => 0,
        }
    }

    /// The outcome as the call returned it.
    pub fn to_result(&self, key: &IdempotencyKey, trace_id: &str) -> Result<ToolOutput, Error> {
        match self.clone() {
            JournalOutcome::Ok {
                value,
                job_id,
                replayed,
                attempts,
            } => Ok(ToolOutput {
                value,
                job_id,
                key: key.clone(),
                replayed,
                attempts,
                trace_id: trace_id.to_owned(),
            }),
            JournalOutcome::ToolError {
                code,
                message,
                retryable,
                details,
                job_id,
                replayed,
                attempts,
                refused,
            } => Err(Error::Tool(Box::new(ToolError {
                code: ErrorCode::parse(&code),
                message,
                retryable,
                details,
                replayed,
                job_id,
                key: key.clone(),
                attempts,
                execution: if refused {
                    Execution::NotRun
                } else {
                    Execution::Ran
                },
            }))),
            JournalOutcome::OutcomeUnknown {
                job_id,
                reason,
                attempts,
            } => Err(Error::OutcomeUnavailable {
                key: key.clone(),
                job_id,
                reason,
                attempts,
                permanent: true,
            }),
            JournalOutcome::DuplicateKey { message, attempts } => Err(Error::DuplicateKey {
                key: key.clone(),
                message,
                attempts,
                execution: Execution::NotRun,
            }),
            JournalOutcome::Cancelled { job_id, attempts } => Err(Error::Cancelled {
                key: key.clone(),
                job_id,
                attempts,
            }),
            JournalOutcome::NotAccepted {
                last_error,
                attempts,
                key_unused,
            } => {
                let e = Error::RetriesExhausted {
                    key: key.clone(),
                    attempts,
                    last_error,
                };
                Err(if key_unused {
                    e
                } else {
                    crate::classify::not_sent(e, key)
                })
            }
            JournalOutcome::Invalid { message } => Err(Error::invalid_call(message)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outcomes_round_trip_through_json() {
        let key = IdempotencyKey::new();
        let outcomes = [
            JournalOutcome::Ok {
                value: json!({"x": 0.30000000000000004}),
                job_id: Some("job_1".into()),
                replayed: true,
                attempts: 3,
            },
            JournalOutcome::ToolError {
                code: "PERMISSION_DENIED".into(),
                message: "no".into(),
                retryable: false,
                details: Some(json!({"a": 1})),
                job_id: None,
                replayed: false,
                attempts: 1,
                refused: true,
            },
            JournalOutcome::OutcomeUnknown {
                job_id: Some("job_2".into()),
                reason: "accepted only".into(),
                attempts: 2,
            },
            JournalOutcome::DuplicateKey {
                message: "bound".into(),
                attempts: 1,
            },
            JournalOutcome::Cancelled {
                job_id: None,
                attempts: 2,
            },
            JournalOutcome::NotAccepted {
                last_error: "UNAVAILABLE".into(),
                attempts: 4,
                key_unused: true,
            },
            JournalOutcome::NotAccepted {
                last_error: "could not connect".into(),
                attempts: 0,
                key_unused: false,
            },
            JournalOutcome::Invalid {
                message: "too big".into(),
            },
        ];
        for o in outcomes {
            let text = serde_json::to_string(&o).unwrap();
            let back: JournalOutcome = serde_json::from_str(&text).unwrap();
            assert_eq!(back, o);
            let result = o.to_result(&key, "t");
            assert_eq!(JournalOutcome::from_result(&result, true), Some(o));
        }
    }
}
