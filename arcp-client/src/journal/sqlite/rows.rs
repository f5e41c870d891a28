//! A row of `arcp_calls` read from SQLite; [`StoredRow::into_entry`]
//! validates it.

use crate::journal::rows::StoredRow;

/// Reads the columns of [`SELECT`](super::statements::SELECT), in order.
pub(super) fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredRow> {
    Ok(StoredRow {
        key: r.get(0)?,
        tool: r.get(1)?,
        intent: r.get(2)?,
        trace_id: r.get(3)?,
        deadline_ms: r.get(4)?,
        state: r.get(5)?,
        attempts: r.get(6)?,
        job_id: r.get(7)?,
        outcome: r.get(8)?,
        created_ms: r.get(9)?,
        updated_ms: r.get(10)?,
    })
}
