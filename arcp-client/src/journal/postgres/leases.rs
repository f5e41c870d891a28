//! Claims: who may drive an unfinished call. A call is claimable when its
//! lease lapsed on the database's clock, or when this worker's id owns it
//! but this instance does not hold it (a restart under the same id).

use super::sql::COLUMNS;
use super::PostgresJournal;
use crate::journal::rows::to_millis;
use crate::journal::{ClaimPosition, JournalEntry, JournalError};
use crate::sync::lock;

impl PostgresJournal {
    /// Claims up to `limit` claimable calls (`only`: just this key). A call
    /// is claimable when unfinished and its lease expired, or when it is
    /// owned by this worker's id but not held by this instance (a restart
    /// under the same id). Never one of `skip` (driven here right now), nor
    /// one at or before `after` in the claim order. Keys compare by their
    /// bytes (`COLLATE "C"`), as [`ClaimPosition`] does, whatever the
    /// database's collation.
    pub(super) fn claim_where(
        &self,
        limit: i64,
        only: Option<&str>,
        skip: &[String],
        after: Option<&ClaimPosition>,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        let after_ms = after.map(|a| to_millis(a.created_at));
        let after_key = after.map(|a| a.key.as_str());
        let held: Vec<String> = lock(&self.held).keys().cloned().collect();
        let rows = self.block(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(|e| self.err(e))?;
            let stmt = tx
                .prepare_cached(&format!(
                    "WITH claimable AS ( \
                       SELECT key FROM arcp_calls \
                       WHERE state <> 'terminal' \
                         AND ($4::text IS NULL OR key = $4) \
                         AND NOT (key = ANY($6)) \
                         AND ($7::bigint IS NULL OR created_ms > $7 \
                              OR (created_ms = $7 AND key COLLATE \"C\" > $8)) \
                         AND (lease_until <= clock_timestamp() \
                              OR (owner = $1 AND NOT (key = ANY($2)))) \
                       ORDER BY created_ms, key COLLATE \"C\" \
                       LIMIT $3 \
                       FOR UPDATE SKIP LOCKED) \
                     UPDATE arcp_calls c SET owner = $1, generation = c.generation + 1, \
                       writer = $1, writer_generation = c.generation + 1, \
                       lease_until = clock_timestamp() + $5::bigint * interval '1 millisecond' \
                     FROM claimable WHERE c.key = claimable.key \
                     RETURNING {}, c.generation",
                    COLUMNS
                        .split(", ")
                        .map(|c| format!("c.{c}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
                .await
                .map_err(|e| self.err(e))?;
            let rows = tx
                .query(
                    &stmt,
                    &[
                        &self.worker,
                        &held,
                        &limit,
                        &only,
                        &self.lease_ms,
                        &skip,
                        &after_ms,
                        &after_key,
                    ],
                )
                .await
                .map_err(|e| self.err(e))?;
            tx.commit().await.map_err(|e| self.err(e))?;
            Ok::<_, JournalError>(rows)
        })?;
        let mut out = Vec::with_capacity(rows.len());
        let mut claimed = Vec::with_capacity(rows.len());
        for row in &rows {
            // Every claimed row is this worker's now (the claim committed),
            // so it is held, renewed and released like the others, even one
            // that does not read back: claiming it again on every recovery
            // would fail the whole batch each time.
            let (Ok(key), Ok(generation)) =
                (row.try_get::<_, String>(0), row.try_get::<_, i64>(11))
            else {
                tracing::warn!("a claimed journal row has no readable key; skipped");
                continue;
            };
            match self.entry(row) {
                Ok(entry) => out.push(entry),
                Err(e) => tracing::warn!(
                    key = %key,
                    error = %e,
                    "a claimed call's record does not read back; it stays unfinished \
                     (`arcp journal show` / `discard` it)"
                ),
            }
            claimed.push((key, generation));
        }
        lock(&self.held).extend(claimed);
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.key.cmp(&b.key)));
        Ok(out)
    }
}
