//! The fenced write path: a batch inside its transaction, segment by
//! segment (set-wise, pipelined, or one by one), each write fenced by the
//! generation this worker holds, refusals reported as fenced.

use std::collections::{HashMap, HashSet};

use arcp_types::IdempotencyKey;

use super::rows::{write_key, NewRows, TerminalRows, SET_WISE_FROM};
use super::sql::*;
use super::PostgresJournal;
use crate::journal::rows::{duration_to_millis, state_columns, to_millis};
use crate::journal::{JournalEntry, JournalWrite};

/// A statement's rows, on its way.
type RowsFuture<'a> = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>>
            + Send
            + 'a,
    >,
>;

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

impl PostgresJournal {
    /// The batch inside its transaction, in layers: a key's first write is
    /// in the first layer, its second in the second, and so on (writes on
    /// distinct keys are independent, so only each key's own order
    /// matters). A layer's writes are sent together (pipelined on the
    /// connection, executed in order): the common case, a new record or a
    /// transition of a call this worker holds, is one statement per kind of
    /// write and one round trip per layer, however many calls the batch
    /// holds. A write whose fast statement changed nothing (a key that
    /// exists, a call not held) then takes the full path of
    /// [`Self::apply_one`].
    pub(super) async fn apply_all(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        writes: &[JournalWrite],
        held: &mut HashMap<String, i64>,
        fenced: &mut Vec<IdempotencyKey>,
    ) -> Result<(), tokio_postgres::Error> {
        let mut layers: Vec<Vec<&JournalWrite>> = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(writes.len());
        for write in writes {
            let layer = seen.entry(write_key(write)).or_insert(0);
            if *layer == layers.len() {
                layers.push(Vec::new());
            }
            layers[*layer].push(write);
            *layer += 1;
        }
        for segment in &layers {
            let tried = if segment.len() >= SET_WISE_FROM {
                self.set_wise(tx, segment, held).await?
            } else {
                let held = &*held;
                futures_util::future::join_all(segment.iter().map(|w| self.fast_path(tx, w, held)))
                    .await
            };
            for (&write, tried) in segment.iter().zip(tried) {
                match (tried?, write) {
                    (Some(1), JournalWrite::Prepare(e)) => {
                        if e.state.is_terminal() {
                            held.remove(e.key.as_str());
                        } else {
                            held.insert(e.key.as_str().to_owned(), 1);
                        }
                    }
                    (Some(1), JournalWrite::Sent { .. } | JournalWrite::Accepted { .. }) => {}
                    (Some(1), JournalWrite::Terminal { key, .. })
                    | (Some(1), JournalWrite::Release { key }) => {
                        held.remove(key.as_str());
                    }
                    (Some(n), JournalWrite::Remove { key }) if n > 0 => {
                        held.remove(key.as_str());
                    }
                    _ => self.apply_one(tx, write, held, fenced).await?,
                }
            }
        }
        Ok(())
    }

    /// The fast forms of a segment's writes (distinct keys), set-wise: one
    /// statement per kind of write for the whole segment (new records,
    /// sent, accepted, terminal, release), each fenced as its one-row form
    /// is, returning the keys it changed. Per write, as
    /// [`fast_path`](Self::fast_path) answers: rows changed, or `None` for
    /// a write with no fast form (a call not held).
    pub(super) async fn set_wise(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        segment: &[&JournalWrite],
        held: &HashMap<String, i64>,
    ) -> Result<Vec<Result<Option<u64>, tokio_postgres::Error>>, tokio_postgres::Error> {
        let me = self.worker.as_str();
        let mut out: Vec<Option<u64>> = vec![Some(0); segment.len()];
        // Columns of each kind, and where each row came from.
        let mut new = NewRows::default();
        let mut sent: (Vec<&str>, Vec<i64>, Vec<i64>, Vec<i64>) = Default::default();
        let mut accepted: (Vec<&str>, Vec<i64>, Vec<&str>, Vec<i64>) = Default::default();
        let mut terminal: TerminalRows = Default::default();
        let mut release: (Vec<&str>, Vec<i64>) = Default::default();
        let mut one_by_one = Vec::new();
        for (i, &write) in segment.iter().enumerate() {
            let generation = held.get(write_key(write)).copied();
            match (write, generation) {
                (JournalWrite::Prepare(e), _) => new.push(e),
                (JournalWrite::Sent { key, attempts, at }, Some(g)) => {
                    sent.0.push(key.as_str());
                    sent.1.push(g);
                    sent.2.push(i64::from(*attempts));
                    sent.3.push(to_millis(*at));
                }
                (JournalWrite::Accepted { key, job_id, at }, Some(g)) => {
                    accepted.0.push(key.as_str());
                    accepted.1.push(g);
                    accepted.2.push(job_id.as_str());
                    accepted.3.push(to_millis(*at));
                }
                (JournalWrite::Terminal { key, outcome, at }, Some(g)) => {
                    terminal.push(key.as_str(), g, outcome, *at);
                }
                (JournalWrite::Release { key }, Some(g)) => {
                    release.0.push(key.as_str());
                    release.1.push(g);
                }
                // Not held: no fast form (the release of a fenced call is
                // nothing to do).
                (JournalWrite::Release { .. }, None) => {}
                (JournalWrite::Remove { .. }, _) => one_by_one.push(i),
                (_, None) => out[i] = None,
            }
        }
        // Each kind's statement, sent together (pipelined on the connection,
        // executed in order): the segment's keys are distinct, so the order
        // between kinds does not matter, and one round trip serves them all.
        let (insert, sent_stmt, accepted_stmt, terminal_stmt, release_stmt) = (
            tx.prepare_cached(INSERT_MANY),
            tx.prepare_cached(SENT_MANY),
            tx.prepare_cached(ACCEPTED_MANY),
            tx.prepare_cached(TERMINAL_MANY),
            tx.prepare_cached(RELEASE_MANY),
        );
        let (insert, sent_stmt, accepted_stmt, terminal_stmt, release_stmt) = tokio::try_join!(
            insert,
            sent_stmt,
            accepted_stmt,
            terminal_stmt,
            release_stmt
        )?;
        type Param<'p> = &'p (dyn tokio_postgres::types::ToSql + Sync);
        let insert_params: [Param<'_>; 13] = [
            &new.keys,
            &new.tools,
            &new.intents,
            &new.traces,
            &new.deadlines,
            &new.states,
            &new.attempts,
            &new.jobs,
            &new.outcomes,
            &new.created,
            &new.updated,
            &me,
            &self.lease_ms,
        ];
        let sent_params: [Param<'_>; 5] = [&me, &sent.0, &sent.1, &sent.2, &sent.3];
        let accepted_params: [Param<'_>; 5] =
            [&me, &accepted.0, &accepted.1, &accepted.2, &accepted.3];
        let terminal_params: [Param<'_>; 7] = [
            &me,
            &terminal.keys,
            &terminal.generations,
            &terminal.outcomes,
            &terminal.jobs,
            &terminal.attempts,
            &terminal.at,
        ];
        let release_params: [Param<'_>; 3] = [&me, &release.0, &release.1];
        let mut statements: Vec<RowsFuture<'_>> = Vec::with_capacity(5);
        if !new.keys.is_empty() {
            statements.push(Box::pin(tx.query(&insert, &insert_params)));
        }
        if !sent.0.is_empty() {
            statements.push(Box::pin(tx.query(&sent_stmt, &sent_params)));
        }
        if !accepted.0.is_empty() {
            statements.push(Box::pin(tx.query(&accepted_stmt, &accepted_params)));
        }
        if !terminal.keys.is_empty() {
            statements.push(Box::pin(tx.query(&terminal_stmt, &terminal_params)));
        }
        if !release.0.is_empty() {
            statements.push(Box::pin(tx.query(&release_stmt, &release_params)));
        }
        let mut changed: HashSet<String> = HashSet::new();
        for rows in futures_util::future::try_join_all(statements).await? {
            changed.extend(rows.iter().map(|r| r.get::<_, String>(0)));
        }
        let mut answers = Vec::with_capacity(segment.len());
        for (i, write) in segment.iter().enumerate() {
            answers.push(if one_by_one.contains(&i) {
                self.fast_path(tx, write, held).await
            } else {
                Ok(out[i].map(|_| u64::from(changed.contains(write_key(write)))))
            });
        }
        Ok(answers)
    }

    /// Records each of `new` whose key has no record (generation 1, owned
    /// by this worker), in one statement; the keys it recorded.
    pub(super) async fn insert_absent(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        new: &[JournalEntry],
    ) -> Result<HashSet<String>, tokio_postgres::Error> {
        if new.is_empty() {
            return Ok(HashSet::new());
        }
        let mut rows = NewRows::default();
        for e in new {
            rows.push(e);
        }
        let stmt = tx.prepare_cached(INSERT_MANY).await?;
        let me = self.worker.as_str();
        let inserted = tx
            .query(
                &stmt,
                &[
                    &rows.keys,
                    &rows.tools,
                    &rows.intents,
                    &rows.traces,
                    &rows.deadlines,
                    &rows.states,
                    &rows.attempts,
                    &rows.jobs,
                    &rows.outcomes,
                    &rows.created,
                    &rows.updated,
                    &me,
                    &self.lease_ms,
                ],
            )
            .await?;
        Ok(inserted.iter().map(|r| r.get::<_, String>(0)).collect())
    }

    /// The one-statement form of a write, when it has one: a new record
    /// (generation 1, nothing inserted if the key exists), a transition
    /// fenced by the generation held, a removal. `None`: no fast form (a
    /// call not held).
    pub(super) async fn fast_path(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        write: &JournalWrite,
        held: &HashMap<String, i64>,
    ) -> Result<Option<u64>, tokio_postgres::Error> {
        let me = self.worker.as_str();
        let guarded = |key: &IdempotencyKey| held.get(key.as_str()).copied();
        let n = match write {
            JournalWrite::Prepare(e) => {
                let (state, job_id, outcome) = state_columns(&e.state);
                let stmt = tx.prepare_cached(INSERT).await?;
                tx.execute(
                    &stmt,
                    &[
                        &e.key.as_str(),
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
                        &1i64,
                        &self.lease_ms,
                    ],
                )
                .await?
            }
            JournalWrite::Sent { key, attempts, at } => {
                let Some(generation) = guarded(key) else {
                    return Ok(None);
                };
                let stmt = tx.prepare_cached(SENT).await?;
                tx.execute(
                    &stmt,
                    &[
                        &key.as_str(),
                        &me,
                        &generation,
                        &i64::from(*attempts),
                        &to_millis(*at),
                    ],
                )
                .await?
            }
            JournalWrite::Accepted { key, job_id, at } => {
                let Some(generation) = guarded(key) else {
                    return Ok(None);
                };
                let stmt = tx.prepare_cached(ACCEPTED).await?;
                tx.execute(
                    &stmt,
                    &[&key.as_str(), &me, &generation, job_id, &to_millis(*at)],
                )
                .await?
            }
            JournalWrite::Terminal { key, outcome, at } => {
                let Some(generation) = guarded(key) else {
                    return Ok(None);
                };
                let text = serde_json::to_string(outcome).unwrap_or_else(|_| "null".into());
                let job_id = outcome.job_id().map(str::to_owned);
                let stmt = tx.prepare_cached(TERMINAL).await?;
                tx.execute(
                    &stmt,
                    &[
                        &key.as_str(),
                        &me,
                        &generation,
                        &text,
                        &job_id,
                        &i64::from(outcome.attempts()),
                        &to_millis(*at),
                    ],
                )
                .await?
            }
            JournalWrite::Release { key } => {
                let Some(generation) = guarded(key) else {
                    // Not held: nothing to give up (a fenced call's end).
                    return Ok(Some(0));
                };
                let stmt = tx.prepare_cached(RELEASE).await?;
                tx.execute(&stmt, &[&key.as_str(), &me, &generation])
                    .await?
            }
            JournalWrite::Remove { key } => {
                // Fenced: a live call of another worker (or of an older
                // generation of this one) is never deleted.
                let generation = guarded(key).unwrap_or(-1);
                let stmt = tx.prepare_cached(REMOVE).await?;
                tx.execute(&stmt, &[&key.as_str(), &me, &generation])
                    .await?
            }
        };
        Ok(Some(n))
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
                let existing = tx
                    .query_opt(
                        "SELECT state, owner, generation FROM arcp_calls WHERE key = $1 FOR UPDATE",
                        &[&key],
                    )
                    .await?;
                let generation = match existing {
                    None => 1,
                    Some(row) => {
                        let (old_state, owner, generation): (String, String, i64) =
                            (row.get(0), row.get(1), row.get(2));
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
                    // Another worker inserted it since the check.
                    held.remove(key);
                    fenced.push(e.key.clone());
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
        tx: &deadpool_postgres::Transaction<'_>,
        key: &IdempotencyKey,
        generation: Option<i64>,
    ) -> Result<Unchanged, tokio_postgres::Error> {
        let row = tx
            .query_opt(
                "SELECT state, owner, generation FROM arcp_calls WHERE key = $1",
                &[&key.as_str()],
            )
            .await?;
        Ok(match row {
            None => Unchanged::Gone,
            Some(row) => {
                let (state, owner, current): (String, String, i64) =
                    (row.get(0), row.get(1), row.get(2));
                // This worker's own late transition of a call it finished.
                if owner == self.worker
                    && state == "terminal"
                    && generation.is_none_or(|g| g == current)
                {
                    Unchanged::Finished
                } else {
                    Unchanged::Fenced
                }
            }
        })
    }
}
