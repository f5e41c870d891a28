//! The row rules the SQL stores share: a state's `(state, job_id,
//! outcome)` columns and back, times as milliseconds, and a stored row
//! validated into a record.

use std::time::{Duration, SystemTime};

use arcp_types::IdempotencyKey;

use super::{JournalEntry, JournalError, JournalErrorKind, JournalOutcome, JournalState};

/// Milliseconds since the Unix epoch (0 before it; saturating).
pub(crate) fn to_millis(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The inverse of [`to_millis`] (negative values clamp to the epoch).
pub(crate) fn from_millis(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH
        .checked_add(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// A duration in whole milliseconds (saturating).
pub(crate) fn duration_to_millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The inverse of [`duration_to_millis`] (negative values read as zero).
pub(crate) fn duration_from_millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// A stored attempt count (negative reads as zero, saturating).
pub(crate) fn attempts_from_column(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

/// The `outcome` column: the outcome as JSON text.
pub(crate) fn outcome_text(outcome: &JournalOutcome) -> String {
    // An outcome is plain data (strings, numbers, JSON values): it always
    // serializes.
    serde_json::to_string(outcome).unwrap_or_else(|_| "null".into())
}

/// `(state, job_id, outcome)` columns of a state.
pub(crate) fn state_columns(state: &JournalState) -> (&'static str, Option<&str>, Option<String>) {
    match state {
        JournalState::Prepared => ("prepared", None, None),
        JournalState::Sent => ("sent", None, None),
        JournalState::Accepted { job_id } => ("accepted", Some(job_id.as_str()), None),
        JournalState::Terminal(outcome) => {
            ("terminal", outcome.job_id(), Some(outcome_text(outcome)))
        }
    }
}

/// The state stored as `(state, job_id, outcome)` columns, or what is wrong
/// with them (a row this code cannot have written is corruption).
pub(crate) fn state_from_columns(
    state: &str,
    job_id: Option<String>,
    outcome: Option<&str>,
) -> Result<JournalState, String> {
    Ok(match (state, job_id, outcome) {
        ("prepared", _, None) => JournalState::Prepared,
        ("sent", _, None) => JournalState::Sent,
        ("accepted", Some(job_id), None) => JournalState::Accepted { job_id },
        ("terminal", _, Some(text)) => JournalState::Terminal(
            serde_json::from_str::<JournalOutcome>(text)
                .map_err(|e| format!("unreadable outcome: {e}"))?,
        ),
        (other, _, _) => return Err(format!("invalid state {other:?}")),
    })
}

/// A row of `arcp_calls` as stored (both stores keep the same eleven
/// columns), before validation.
pub(crate) struct StoredRow {
    pub(crate) key: String,
    pub(crate) tool: String,
    pub(crate) intent: String,
    pub(crate) trace_id: String,
    pub(crate) deadline_ms: i64,
    pub(crate) state: String,
    pub(crate) attempts: i64,
    pub(crate) job_id: Option<String>,
    pub(crate) outcome: Option<String>,
    pub(crate) created_ms: i64,
    pub(crate) updated_ms: i64,
}

impl StoredRow {
    /// Validates the row; one this code cannot have written is corruption.
    pub(crate) fn into_entry(self, location: &str) -> Result<JournalEntry, JournalError> {
        let corrupt = |what: String| {
            JournalError::new(
                JournalErrorKind::Corrupt,
                location,
                format!("record {:?}: {what}", self.key),
            )
        };
        let key = IdempotencyKey::try_from(self.key.as_str())
            .map_err(|e| corrupt(format!("invalid key: {e}")))?;
        let state = state_from_columns(&self.state, self.job_id.clone(), self.outcome.as_deref())
            .map_err(corrupt)?;
        Ok(JournalEntry {
            key,
            tool: self.tool,
            intent: self.intent,
            trace_id: self.trace_id,
            deadline: duration_from_millis(self.deadline_ms),
            state,
            attempts: attempts_from_column(self.attempts),
            created_at: from_millis(self.created_ms),
            updated_at: from_millis(self.updated_ms),
        })
    }
}
