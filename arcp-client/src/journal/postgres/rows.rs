//! Between records and rows: the columns of a state, the arrays of a
//! set-wise write, and a row read back (validated).

use std::time::{Duration, SystemTime};

use arcp_types::IdempotencyKey;

use super::errors::classify;
use crate::journal::{
    from_millis, to_millis, JournalEntry, JournalError, JournalErrorKind, JournalOutcome,
    JournalState, JournalWrite,
};

/// A segment of this many writes or more goes set-wise (fewer: one
/// pipelined statement each, which costs no more).
pub(super) const SET_WISE_FROM: usize = 4;

/// The columns of new records, for [`INSERT_MANY`].
#[derive(Default)]
pub(super) struct NewRows {
    pub(super) keys: Vec<String>,
    pub(super) tools: Vec<String>,
    pub(super) intents: Vec<String>,
    pub(super) traces: Vec<String>,
    pub(super) deadlines: Vec<i64>,
    pub(super) states: Vec<&'static str>,
    pub(super) attempts: Vec<i64>,
    pub(super) jobs: Vec<Option<String>>,
    pub(super) outcomes: Vec<Option<String>>,
    pub(super) created: Vec<i64>,
    pub(super) updated: Vec<i64>,
}

impl NewRows {
    pub(super) fn push(&mut self, e: &JournalEntry) {
        let (state, job_id, outcome) = state_columns(&e.state);
        self.keys.push(e.key.as_str().to_owned());
        self.tools.push(e.tool.clone());
        self.intents.push(e.intent.clone());
        self.traces.push(e.trace_id.clone());
        self.deadlines.push(millis(e.deadline));
        self.states.push(state);
        self.attempts.push(i64::from(e.attempts));
        self.jobs.push(job_id);
        self.outcomes.push(outcome);
        self.created.push(to_millis(e.created_at));
        self.updated.push(to_millis(e.updated_at));
    }
}

/// The columns of terminal writes, for [`TERMINAL_MANY`].
#[derive(Default)]
pub(super) struct TerminalRows<'a> {
    pub(super) keys: Vec<&'a str>,
    pub(super) generations: Vec<i64>,
    pub(super) outcomes: Vec<String>,
    pub(super) jobs: Vec<Option<String>>,
    pub(super) attempts: Vec<i64>,
    pub(super) at: Vec<i64>,
}

impl<'a> TerminalRows<'a> {
    pub(super) fn push(
        &mut self,
        key: &'a str,
        generation: i64,
        outcome: &JournalOutcome,
        at: SystemTime,
    ) {
        self.keys.push(key);
        self.generations.push(generation);
        // An outcome is plain data: it always serializes.
        self.outcomes
            .push(serde_json::to_string(outcome).unwrap_or_else(|_| "null".into()));
        self.jobs.push(outcome.job_id().map(str::to_owned));
        self.attempts.push(i64::from(outcome.attempts()));
        self.at.push(to_millis(at));
    }
}

/// `(state, job_id, outcome)` columns of a state.
pub(super) fn state_columns(
    state: &JournalState,
) -> (&'static str, Option<String>, Option<String>) {
    match state {
        JournalState::Prepared => ("prepared", None, None),
        JournalState::Sent => ("sent", None, None),
        JournalState::Accepted { job_id } => ("accepted", Some(job_id.clone()), None),
        JournalState::Terminal(outcome) => (
            "terminal",
            outcome.job_id().map(str::to_owned),
            // An outcome is plain data: it always serializes.
            Some(serde_json::to_string(outcome).unwrap_or_else(|_| "null".into())),
        ),
    }
}

/// The key a write concerns.
pub(super) fn write_key(write: &JournalWrite) -> &str {
    match write {
        JournalWrite::Prepare(e) => e.key.as_str(),
        JournalWrite::Sent { key, .. }
        | JournalWrite::Accepted { key, .. }
        | JournalWrite::Terminal { key, .. }
        | JournalWrite::Release { key }
        | JournalWrite::Remove { key } => key.as_str(),
    }
}

pub(super) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Validates a row of `arcp_calls`; one this code cannot have written is
/// corruption.
pub(super) fn row_entry(
    location: &str,
    r: &tokio_postgres::Row,
) -> Result<JournalEntry, JournalError> {
    let get = |i: usize| -> Result<String, JournalError> {
        r.try_get::<_, String>(i)
            .map_err(|e| classify(location, &e))
    };
    let get_opt = |i: usize| -> Result<Option<String>, JournalError> {
        r.try_get::<_, Option<String>>(i)
            .map_err(|e| classify(location, &e))
    };
    let get_i64 = |i: usize| -> Result<i64, JournalError> {
        r.try_get::<_, i64>(i).map_err(|e| classify(location, &e))
    };
    let raw_key = get(0)?;
    let corrupt = |what: String| {
        JournalError::new(
            JournalErrorKind::Corrupt,
            location,
            format!("record {raw_key:?}: {what}"),
        )
    };
    let key = IdempotencyKey::try_from(raw_key.as_str())
        .map_err(|e| corrupt(format!("invalid key: {e}")))?;
    let (state, job_id, outcome) = (get(5)?, get_opt(7)?, get_opt(8)?);
    let state = match (state.as_str(), job_id, outcome) {
        ("prepared", _, None) => JournalState::Prepared,
        ("sent", _, None) => JournalState::Sent,
        ("accepted", Some(job_id), None) => JournalState::Accepted { job_id },
        ("terminal", _, Some(text)) => JournalState::Terminal(
            serde_json::from_str::<JournalOutcome>(&text)
                .map_err(|e| corrupt(format!("unreadable outcome: {e}")))?,
        ),
        (other, _, _) => return Err(corrupt(format!("invalid state {other:?}"))),
    };
    Ok(JournalEntry {
        key,
        tool: get(1)?,
        intent: get(2)?,
        trace_id: get(3)?,
        deadline: Duration::from_millis(u64::try_from(get_i64(4)?).unwrap_or(0)),
        state,
        attempts: u32::try_from(get_i64(6)?.max(0)).unwrap_or(u32::MAX),
        created_at: from_millis(get_i64(9)?),
        updated_at: from_millis(get_i64(10)?),
    })
}
