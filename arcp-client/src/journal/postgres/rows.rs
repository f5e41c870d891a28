//! Between records and rows: the columns of a state, the arrays of a
//! set-wise write, and a row read back (validated).

use std::time::SystemTime;

use super::errors::classify;
use crate::journal::rows::{duration_to_millis, outcome_text, state_columns, to_millis, StoredRow};
use crate::journal::{JournalEntry, JournalError, JournalOutcome, JournalWrite};

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
        self.deadlines.push(duration_to_millis(e.deadline));
        self.states.push(state);
        self.attempts.push(i64::from(e.attempts));
        self.jobs.push(job_id.map(str::to_owned));
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
        self.outcomes.push(outcome_text(outcome));
        self.jobs.push(outcome.job_id().map(str::to_owned));
        self.attempts.push(i64::from(outcome.attempts()));
        self.at.push(to_millis(at));
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
    StoredRow {
        key: get(0)?,
        tool: get(1)?,
        intent: get(2)?,
        trace_id: get(3)?,
        deadline_ms: get_i64(4)?,
        state: get(5)?,
        attempts: get_i64(6)?,
        job_id: get_opt(7)?,
        outcome: get_opt(8)?,
        created_ms: get_i64(9)?,
        updated_ms: get_i64(10)?,
    }
    .into_entry(location)
}
