//! The statements: the row read and each [`JournalWrite`] as one statement
//! of the batch's transaction. A transition never applies to a terminal
//! record, and `Sent` never moves a record back from `accepted` (the
//! file's triggers refuse it besides).

use rusqlite::params;

use crate::journal::rows::{duration_to_millis, outcome_text, state_columns, to_millis};
use crate::journal::{JournalEntry, JournalWrite};

pub(super) const SELECT: &str =
    "SELECT key, tool, intent, trace_id, deadline_ms, state, attempts, job_id, \
                      outcome, created_ms, updated_ms FROM arcp_calls";

pub(super) fn apply_one(
    tx: &rusqlite::Transaction<'_>,
    write: &JournalWrite,
) -> rusqlite::Result<()> {
    match write {
        JournalWrite::Prepare(e) => {
            insert(tx, "INSERT OR REPLACE", e, "")?;
        }
        JournalWrite::Sent { key, attempts, at } => {
            tx.prepare_cached(
                "UPDATE arcp_calls SET attempts = max(attempts, ?2), \
                 state = CASE state WHEN 'prepared' THEN 'sent' ELSE state END, updated_ms = ?3 \
                 WHERE key = ?1 AND state != 'terminal'",
            )?
            .execute(params![key.as_str(), attempts, to_millis(*at)])?;
        }
        JournalWrite::Accepted { key, job_id, at } => {
            tx.prepare_cached(
                "UPDATE arcp_calls SET state = 'accepted', job_id = ?2, updated_ms = ?3 \
                 WHERE key = ?1 AND state != 'terminal'",
            )?
            .execute(params![key.as_str(), job_id, to_millis(*at)])?;
        }
        JournalWrite::Terminal { key, outcome, at } => {
            let text = outcome_text(outcome);
            tx.prepare_cached(
                "UPDATE arcp_calls SET state = 'terminal', outcome = ?2, \
                 job_id = coalesce(?3, job_id), attempts = max(attempts, ?4), updated_ms = ?5 \
                 WHERE key = ?1 AND state != 'terminal'",
            )?
            .execute(params![
                key.as_str(),
                text,
                outcome.job_id(),
                outcome.attempts(),
                to_millis(*at),
            ])?;
        }
        JournalWrite::Remove { key } => {
            tx.prepare_cached("DELETE FROM arcp_calls WHERE key = ?1")?
                .execute([key.as_str()])?;
        }
        // One client holds the file: nothing to give up.
        JournalWrite::Release { .. } => {}
    }
    Ok(())
}

/// Records `e` unless its key has a record; whether it did.
pub(super) fn insert_absent(
    tx: &rusqlite::Transaction<'_>,
    e: &JournalEntry,
) -> rusqlite::Result<bool> {
    Ok(insert(tx, "INSERT", e, " ON CONFLICT (key) DO NOTHING")? == 1)
}

/// `verb` (an `INSERT` form) of `e`'s columns, then `tail`; rows changed.
fn insert(
    tx: &rusqlite::Transaction<'_>,
    verb: &str,
    e: &JournalEntry,
    tail: &str,
) -> rusqlite::Result<usize> {
    let (state, job_id, outcome) = state_columns(&e.state);
    tx.prepare_cached(&format!(
        "{verb} INTO arcp_calls (key, tool, intent, trace_id, deadline_ms, state, attempts, \
         job_id, outcome, created_ms, updated_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11){tail}"
    ))?
    .execute(params![
        e.key.as_str(),
        e.tool,
        e.intent,
        e.trace_id,
        duration_to_millis(e.deadline),
        state,
        e.attempts,
        job_id,
        outcome,
        to_millis(e.created_at),
        to_millis(e.updated_at),
    ])
}
