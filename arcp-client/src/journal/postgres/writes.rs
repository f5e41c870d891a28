//! The fenced write path: a batch inside its transaction, layer by layer
//! (each layer's writes set-wise, see [`set_wise`](super::set_wise)), each
//! write fenced by the generation this worker holds; a write its fast
//! statement did not change takes the full path of
//! [`apply_one`](PostgresJournal::apply_one), and refusals are reported as
//! fenced.

use std::collections::{HashMap, HashSet};

use arcp_types::IdempotencyKey;
use deadpool_postgres::GenericClient;

use super::rows::write_key;
use super::set_wise::{layers, Layer, Route, RowsFuture, SetWiseStatements};
use super::sql::*;
use super::PostgresJournal;
use crate::journal::rows::{duration_to_millis, state_columns, to_millis};
use crate::journal::{JournalEntry, JournalWrite};

/// What a guarded update found when it changed nothing.
pub(super) enum Unchanged {
    /// No record: the write is ignored (as for every journal).
    Gone,
    /// The record is terminal at this worker's own generation: a late
    /// transition, ignored.
    Finished,
    /// Another generation owns (or finished) the call: the write is refused.
    Fenced,
}

/// The keys a statement's rows name (its `RETURNING key`).
pub(super) fn keys_of(rows: &[tokio_postgres::Row], into: &mut HashSet<String>) {
    into.extend(rows.iter().map(|r| r.get::<_, String>(0)));
}

/// `held` after `write` changed its record (its fast statement returned
/// its key).
pub(super) fn note_changed(write: &JournalWrite, held: &mut HashMap<String, i64>) {
    match write {
        JournalWrite::Prepare(e) if !e.state.is_terminal() => {
            held.insert(e.key.as_str().to_owned(), 1);
        }
        JournalWrite::Sent { .. } | JournalWrite::Accepted { .. } => {}
        _ => {
            held.remove(write_key(write));
        }
    }
}

/// Whether `row` (a [`RECORD_FOR_UPDATE`] row) is the record `prepare`
/// writes, already there: unfinished, this worker's, with the call's trace
/// id and creation time. An attempt of this write whose answer was lost
/// (a round trip that timed out while its commit was slow) committed after
/// all; its retry must take the record as its own, not as another's.
fn this_prepare_landed(
    row: &tokio_postgres::Row,
    prepare: &JournalEntry,
    me: &str,
) -> Result<bool, tokio_postgres::Error> {
    let (state, owner, trace_id, created_ms): (&str, &str, &str, i64) = (
        row.try_get(0)?,
        row.try_get(1)?,
        row.try_get(3)?,
        row.try_get(4)?,
    );
    Ok(state != "terminal"
        && owner == me
        && trace_id == prepare.trace_id
        && created_ms == to_millis(prepare.created_at))
}

impl PostgresJournal {
    /// The batch inside its transaction, in [`layers`]: a layer's writes are
    /// sent together (one set-wise statement per kind of write, pipelined
    /// on the connection, executed in order), so the common case, new
    /// records and transitions of calls this worker holds, is one round
    /// trip per layer however many calls the batch holds. A write whose
    /// fast statement changed nothing (a key that exists, a call not held)
    /// then takes the full path of [`Self::apply_one`].
    pub(super) async fn apply_all(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        writes: &[JournalWrite],
        held: &mut HashMap<String, i64>,
        fenced: &mut Vec<IdempotencyKey>,
    ) -> Result<(), tokio_postgres::Error> {
        if writes.is_empty() {
            return Ok(());
        }
        let statements = SetWiseStatements::prepare(tx).await?;
        for segment in layers(writes) {
            let (layer, routes) = Layer::build(&segment, held);
            let mut changed = HashSet::new();
            let sent = layer.statements(tx.client(), &statements, &self.worker, &self.lease_ms);
            for rows in futures_util::future::try_join_all(sent).await? {
                keys_of(&rows, &mut changed);
            }
            for (&write, route) in segment.iter().zip(routes) {
                let done = match route {
                    Route::SetWise => changed.contains(write_key(write)),
                    Route::Nothing => true,
                    Route::NotHeld => false,
                    Route::OneByOne => self.remove_fenced(tx, write, held).await? > 0,
                };
                if done {
                    note_changed(write, held);
                } else {
                    self.apply_one(tx, write, held, fenced).await?;
                }
            }
        }
        Ok(())
    }

    /// Records each of `new` whose key has no record (generation 1, owned
    /// by this worker), in one statement; the keys it recorded.
    pub(super) async fn insert_absent(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        new: &[JournalEntry],
    ) -> Result<HashSet<String>, tokio_postgres::Error> {
        let mut inserted = HashSet::new();
        if new.is_empty() {
            return Ok(inserted);
        }
        let statements = SetWiseStatements::prepare(tx).await?;
        let layer = Layer::of_new(new);
        let sent: Vec<RowsFuture<'_>> =
            layer.statements(tx.client(), &statements, &self.worker, &self.lease_ms);
        for rows in futures_util::future::try_join_all(sent).await? {
            keys_of(&rows, &mut inserted);
        }
        Ok(inserted)
    }

    /// A removal, fenced: a live call of another worker (or of an older
    /// generation of this one) is never deleted. Rows deleted.
    async fn remove_fenced(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        write: &JournalWrite,
        held: &HashMap<String, i64>,
    ) -> Result<u64, tokio_postgres::Error> {
        let key = write_key(write);
        let generation = held.get(key).copied().unwrap_or(-1);
        let stmt = tx.prepare_cached(REMOVE).await?;
        tx.execute(&stmt, &[&key, &self.worker, &generation]).await
    }

    /// One write inside the batch's transaction. `held` is the batch's
    /// working copy (published only if the transaction commits).
    pub(super) async fn apply_one(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        write: &JournalWrite,
        held: &mut HashMap<String, i64>,
        fenced: &mut Vec<IdempotencyKey>,
    ) -> Result<(), tokio_postgres::Error> {
        let me = self.worker.as_str();
        match write {
            JournalWrite::Prepare(e) => {
                let (state, job_id, outcome) = state_columns(&e.state);
                let key = e.key.as_str();
                let existing = tx.query_opt(RECORD_FOR_UPDATE, &[&key]).await?;
                let generation = match existing {
                    None => 1,
                    Some(row) => {
                        let (old_state, owner, generation): (String, String, i64) =
                            (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
                        if this_prepare_landed(&row, e, me)? {
                            held.insert(key.to_owned(), generation);
                            return Ok(());
                        }
                        let mine = owner == me && held.get(key) == Some(&generation);
                        if old_state != "terminal" && !mine {
                            // A live call of another worker (or of an older
                            // generation of this one): never replaced.
                            held.remove(key);
                            fenced.push(e.key.clone());
                            return Ok(());
                        }
                        // Replacing keeps the key's generations increasing.
                        tx.execute("DELETE FROM arcp_calls WHERE key = $1", &[&key])
                            .await?;
                        generation + 1
                    }
                };
                let stmt = tx.prepare_cached(INSERT).await?;
                let inserted = tx
                    .execute(
                        &stmt,
                        &[
                            &key,
                            &e.tool,
                            &e.intent,
                            &e.trace_id,
                            &duration_to_millis(e.deadline),
                            &state,
                            &i64::from(e.attempts),
                            &job_id,
                            &outcome,
                            &to_millis(e.created_at),
                            &to_millis(e.updated_at),
                            &me,
                            &generation,
                            &self.lease_ms,
                        ],
                    )
                    .await?;
                if inserted == 0 {
                    // A record was inserted since the check (the row it
                    // waited on was replaced meanwhile): this very write,
                    // landing late from an attempt whose answer was lost,
                    // or another worker's.
                    let now = tx.query_opt(RECORD_FOR_UPDATE, &[&key]).await?;
                    let landed = match &now {
                        Some(row) => this_prepare_landed(row, e, me)?,
                        None => false,
                    };
                    match now {
                        Some(row) if landed => {
                            held.insert(key.to_owned(), row.try_get(2)?);
                        }
                        _ => {
                            held.remove(key);
                            fenced.push(e.key.clone());
                        }
                    }
                } else if state == "terminal" {
                    held.remove(key);
                } else {
                    held.insert(key.to_owned(), generation);
                }
            }
            JournalWrite::Sent { key, attempts, at } => {
                self.guarded(
                    tx,
                    key,
                    held,
                    fenced,
                    SENT,
                    &[&i64::from(*attempts), &to_millis(*at)],
                )
                .await?;
            }
            JournalWrite::Accepted { key, job_id, at } => {
                self.guarded(tx, key, held, fenced, ACCEPTED, &[job_id, &to_millis(*at)])
                    .await?;
            }
            JournalWrite::Terminal { key, outcome, at } => {
                let text = serde_json::to_string(outcome).unwrap_or_else(|_| "null".into());
                let job_id = outcome.job_id().map(str::to_owned);
                if self
                    .guarded(
                        tx,
                        key,
                        held,
                        fenced,
                        TERMINAL,
                        &[
                            &text,
                            &job_id,
                            &i64::from(outcome.attempts()),
                            &to_millis(*at),
                        ],
                    )
                    .await?
                {
                    held.remove(key.as_str());
                }
            }
            JournalWrite::Release { key } => {
                // Nothing to give up when not held (a fenced call's end).
                if held.contains_key(key.as_str())
                    && self.guarded(tx, key, held, fenced, RELEASE, &[]).await?
                {
                    held.remove(key.as_str());
                }
            }
            JournalWrite::Remove { key } => {
                // The fenced delete removed nothing: refused if the record
                // is there (another worker's live call).
                let exists = tx
                    .query_opt("SELECT 1 FROM arcp_calls WHERE key = $1", &[&key.as_str()])
                    .await?
                    .is_some();
                if exists {
                    fenced.push(key.clone());
                }
                held.remove(key.as_str());
            }
        }
        Ok(())
    }

    /// Runs a transition fenced by this worker's generation of `key`
    /// (`$1` key, `$2` worker, `$3` generation, then `extra`). Whether it
    /// changed the record; a refusal is noted in `fenced`.
    pub(super) async fn guarded(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        key: &IdempotencyKey,
        held: &mut HashMap<String, i64>,
        fenced: &mut Vec<IdempotencyKey>,
        sql: &str,
        extra: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<bool, tokio_postgres::Error> {
        let me = self.worker.as_str();
        let k = key.as_str();
        if let Some(generation) = held.get(k).copied() {
            let stmt = tx.prepare_cached(sql).await?;
            let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                vec![&k, &me, &generation];
            params.extend_from_slice(extra);
            if tx.execute(&stmt, &params).await? == 1 {
                return Ok(true);
            }
        }
        match self.why_unchanged(tx, key, held.get(k).copied()).await? {
            Unchanged::Gone | Unchanged::Finished => {}
            Unchanged::Fenced => fenced.push(key.clone()),
        }
        held.remove(k);
        Ok(false)
    }

    /// Why a guarded update changed nothing.
    pub(super) async fn why_unchanged(
        &self,
        client: &impl GenericClient,
        key: &IdempotencyKey,
        generation: Option<i64>,
    ) -> Result<Unchanged, tokio_postgres::Error> {
        let row = client
            .query_opt(
                "SELECT state, owner, generation FROM arcp_calls WHERE key = $1",
                &[&key.as_str()],
            )
            .await?;
        let now: Option<(String, String, i64)> = match row {
            Some(r) => Some((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)),
            None => None,
        };
        Ok(self.why_unchanged_of(
            now.as_ref().map(|(s, o, g)| (s.as_str(), o.as_str(), *g)),
            generation,
        ))
    }

    /// Why a guarded update under `generation` changed nothing, from the
    /// record as it is now (state, owner, generation), if any.
    pub(super) fn why_unchanged_of(
        &self,
        now: Option<(&str, &str, i64)>,
        generation: Option<i64>,
    ) -> Unchanged {
        match now {
            None => Unchanged::Gone,
            // This worker's own late transition of a call it finished.
            Some((state, owner, current))
                if owner == self.worker
                    && state == "terminal"
                    && generation.is_none_or(|g| g == current) =>
            {
                Unchanged::Finished
            }
            Some(_) => Unchanged::Fenced,
        }
    }
}
