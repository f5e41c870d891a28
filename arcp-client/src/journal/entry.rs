//! The record of one journaled call ([`JournalEntry`]) and where it
//! stands ([`JournalState`]), with the check that a recorded intent is
//! re-sent byte for byte.

use std::time::{Duration, SystemTime};

use arcp_types::{IdempotencyKey, Invoke};

#[cfg(doc)]
use super::Journal;
use super::{JournalError, JournalErrorKind, JournalOutcome};
use crate::error::Error;
use crate::outcome::ToolOutput;

/// Where a journaled call stands.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum JournalState {
    /// Recorded; possibly sent (the send is recorded asynchronously).
    Prepared,
    /// At least one attempt was handed to the transport.
    Sent,
    /// The runtime accepted the call as this job.
    Accepted {
        /// The job.
        job_id: String,
    },
    /// The call ended with this outcome.
    Terminal(JournalOutcome),
}

impl JournalState {
    /// Whether the call ended (nothing to recover).
    pub fn is_terminal(&self) -> bool {
        matches!(self, JournalState::Terminal(_))
    }

    /// `prepared`, `sent`, `accepted` or `terminal`.
    pub fn name(&self) -> &'static str {
        match self {
            JournalState::Prepared => "prepared",
            JournalState::Sent => "sent",
            JournalState::Accepted { .. } => "accepted",
            JournalState::Terminal(_) => "terminal",
        }
    }
}

/// One journaled call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JournalEntry {
    /// The call's idempotency key (unique in the journal).
    pub key: IdempotencyKey,
    /// The tool.
    pub tool: String,
    /// The intent exactly as sent: the serialized `Invoke` payload (tool,
    /// arguments, key and every option) as JSON text. A recovered call
    /// re-sends exactly these bytes' value; see [`JournalEntry::invoke`].
    pub intent: String,
    /// The W3C trace id shared by every attempt.
    pub trace_id: String,
    /// The call's deadline (a recovered call gets it again, counted from
    /// the recovery).
    pub deadline: Duration,
    /// Where the call stands.
    pub state: JournalState,
    /// Requests sent, as far as recorded.
    pub attempts: u32,
    /// When the call was prepared.
    pub created_at: SystemTime,
    /// When the record last changed.
    pub updated_at: SystemTime,
}

impl JournalEntry {
    /// A record in state [`JournalState::Prepared`], created and updated
    /// now, with no attempt recorded. For [`Journal`] implementations
    /// rebuilding records from their store (set the other fields after).
    pub fn new(
        key: IdempotencyKey,
        tool: impl Into<String>,
        intent: impl Into<String>,
        trace_id: impl Into<String>,
        deadline: Duration,
    ) -> Self {
        let now = SystemTime::now();
        JournalEntry {
            key,
            tool: tool.into(),
            intent: intent.into(),
            trace_id: trace_id.into(),
            deadline,
            state: JournalState::Prepared,
            attempts: 0,
            created_at: now,
            updated_at: now,
        }
    }

    /// Whether the call ended.
    pub fn is_terminal(&self) -> bool {
        self.state.is_terminal()
    }

    /// The job the runtime bound the call to, when recorded.
    pub fn job_id(&self) -> Option<&str> {
        match &self.state {
            JournalState::Accepted { job_id } => Some(job_id),
            JournalState::Terminal(outcome) => outcome.job_id(),
            _ => None,
        }
    }

    /// The terminal outcome as the call returned it, once it ended.
    pub fn outcome(&self) -> Option<Result<ToolOutput, Error>> {
        match &self.state {
            JournalState::Terminal(outcome) => Some(outcome.to_result(&self.key, &self.trace_id)),
            _ => None,
        }
    }

    /// Whether the journal's redaction hook
    /// ([`ClientBuilder::journal_redact`](crate::ClientBuilder::journal_redact))
    /// changed the recorded arguments: the record is not what was sent, and
    /// a recovery ends it "outcome unknown" instead of re-sending it.
    pub fn is_redacted(&self) -> bool {
        super::redaction::is_redacted(self)
    }

    /// The recorded intent, parsed back. Fails (with
    /// [`JournalErrorKind::Intent`]) unless it re-serializes to exactly the
    /// recorded bytes and carries the record's key: a recovered call never
    /// sends a payload that differs from the one the runtime may have seen.
    /// A record whose arguments were redacted is refused the same way.
    pub fn invoke(&self) -> Result<Invoke, JournalError> {
        let fail = |message: String| {
            JournalError::new(
                JournalErrorKind::Intent,
                "journal",
                format!("call {}: {message}", self.key),
            )
        };
        if self.is_redacted() {
            return Err(fail(
                "the recorded arguments were changed by the journal redaction hook; they are \
                 not what was sent"
                    .into(),
            ));
        }
        let invoke: Invoke = serde_json::from_str(&self.intent)
            .map_err(|e| fail(format!("the recorded intent does not parse: {e}")))?;
        let again = serde_json::to_string(&invoke)
            .map_err(|e| fail(format!("the recorded intent does not serialize: {e}")))?;
        if again != self.intent {
            return Err(fail(
                "the recorded intent does not re-serialize byte-identically".into(),
            ));
        }
        if invoke.idempotency_key.as_deref() != Some(self.key.as_str()) {
            return Err(fail("the recorded intent carries another key".into()));
        }
        if !arcp_types::is_trace_id(&self.trace_id) {
            return Err(fail(format!(
                "the recorded trace id {:?} is not 32 lowercase hex digits",
                self.trace_id
            )));
        }
        Ok(invoke)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(intent: &Invoke, key: &IdempotencyKey) -> JournalEntry {
        let now = SystemTime::now();
        JournalEntry {
            key: key.clone(),
            tool: intent.tool.clone(),
            intent: serde_json::to_string(intent).unwrap(),
            trace_id: arcp_types::new_trace_id(),
            deadline: Duration::from_secs(5),
            state: JournalState::Prepared,
            attempts: 0,
            created_at: now,
            updated_at: now,
        }
    }

    #[test]
    fn intent_round_trips_byte_exact() {
        let key = IdempotencyKey::new();
        let mut extra = serde_json::Map::new();
        extra.insert("lease_request".into(), json!({}));
        extra.insert("max_runtime_sec".into(), json!(1.0));
        let invoke = Invoke::new(
            "refund",
            json!({"b": 1, "a": 1.0, "c": [0.1, 1e300, -0.0, 18446744073709551615u64, -9223372036854775808i64], "z": "é\u{1F600}\n"}),
        )
        .with_idempotency_key(key.as_str())
        .with_extra(extra);
        let e = entry(&invoke, &key);
        let back = e.invoke().unwrap();
        assert_eq!(back, invoke);
        assert_eq!(serde_json::to_string(&back).unwrap(), e.intent);
    }

    #[test]
    fn intent_that_is_not_canonical_is_refused() {
        let key = IdempotencyKey::new();
        let invoke = Invoke::new("t", json!({})).with_idempotency_key(key.as_str());
        let mut e = entry(&invoke, &key);
        e.intent = e.intent.replace(':', " : ");
        assert_eq!(e.invoke().unwrap_err().kind, JournalErrorKind::Intent);
        let mut e = entry(&invoke, &key);
        e.key = IdempotencyKey::new();
        assert_eq!(e.invoke().unwrap_err().kind, JournalErrorKind::Intent);
        let mut e = entry(&invoke, &key);
        e.intent = "not json".into();
        assert_eq!(e.invoke().unwrap_err().kind, JournalErrorKind::Intent);
    }

    #[test]
    fn a_redacted_intent_is_never_parsed_back_for_sending() {
        let key = IdempotencyKey::new();
        let mut extra = serde_json::Map::new();
        extra.insert(
            crate::intent_digest::REDACTED_MARK.into(),
            crate::intent_digest::mark(&json!({"tool": "t"})),
        );
        let invoke = Invoke::new("t", json!({}))
            .with_idempotency_key(key.as_str())
            .with_extra(extra);
        let e = entry(&invoke, &key);
        assert!(e.is_redacted());
        let err = e.invoke().unwrap_err();
        assert_eq!(err.kind, JournalErrorKind::Intent);
        assert!(err.to_string().contains("redaction"), "{err}");
    }
}
