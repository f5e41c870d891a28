//! The common batch in one round trip: transitions of calls this worker
//! holds and new records, sent as `BEGIN`, the set-wise statements of every
//! layer, `COMMIT`, all at once.
//!
//! This is possible because none of these writes needs an answer before the
//! commit: a new record that finds its key taken inserts nothing (the
//! writer decides that prepare in a later step), and a transition that
//! changes nothing (a call fenced, finished or gone) writes nothing, so the
//! transaction is the same whatever they find. What they found is read from
//! their answers once the commit is back, and only writes that changed
//! nothing cost another round trip: one read, after the commit, saying why
//! (fenced, or a late transition to ignore), as the full path would have
//! said inside the transaction (both see the latest committed record).
//!
//! A batch holding a prepare of a key that may exist, or a removal, takes
//! the full path ([`apply_all`](PostgresJournal::apply_all)): those decide
//! what to write from what they read.
//!
//! Every statement is sent before any answer is read, so a statement that
//! fails makes the ones after it fail too and `COMMIT` roll the transaction
//! back: the batch then committed nothing, and the first error is returned.
//! A statement that fails before it is sent (its parameters do not encode)
//! is followed by `ROLLBACK` instead of `COMMIT`.
//!
//! Once `COMMIT` is answered, the batch is committed whatever comes next: a
//! failure of the read after it is reported as the store unavailable, never
//! as a refusal (which the writer takes for "nothing committed"); the writer
//! retries the batch, which re-applies nothing. And a batch whose answers
//! do not come within the round-trip bound may still commit (its `COMMIT`
//! was sent with it): the writer counts its prepares as unsure, as for any
//! commit whose answer was lost.

use std::collections::{HashMap, HashSet};
use std::future::poll_fn;
use std::task::Poll;

use arcp_types::IdempotencyKey;

use super::rows::write_key;
use super::set_wise::{layers, Layer, Route, RowsFuture, SetWiseStatements};
use super::writes::{keys_of, note_changed, Unchanged};
use super::PostgresJournal;
use crate::journal::{JournalEntry, JournalError, JournalErrorKind, JournalWrite};

/// Whether a write can ride in the one-round-trip commit.
pub(super) fn rides_at_once(write: &JournalWrite) -> bool {
    matches!(
        write,
        JournalWrite::Sent { .. }
            | JournalWrite::Accepted { .. }
            | JournalWrite::Terminal { .. }
            | JournalWrite::Release { .. }
    )
}

impl PostgresJournal {
    /// Commits `writes` (transitions only, see [`rides_at_once`]) and the
    /// records of `new` whose keys are absent in one transaction and one
    /// round trip; updates `held` and `fenced` as
    /// [`apply_all`](Self::apply_all) does. The keys recorded.
    pub(super) async fn commit_at_once(
        &self,
        client: &deadpool_postgres::Object,
        writes: &[JournalWrite],
        new: &[JournalEntry],
        held: &mut HashMap<String, i64>,
        fenced: &mut Vec<IdempotencyKey>,
    ) -> Result<HashSet<String>, JournalError> {
        debug_assert!(writes.iter().all(rides_at_once));
        let statements = SetWiseStatements::prepare(client)
            .await
            .map_err(|e| self.err(e))?;
        let pg: &tokio_postgres::Client = client;
        let segments = layers(writes);
        let built: Vec<(Layer<'_>, Vec<Route>)> =
            segments.iter().map(|s| Layer::build(s, held)).collect();
        let fresh = Layer::of_new(new);

        // The transaction, in order: BEGIN, each layer's statements, the new
        // records, then COMMIT. `layer_of[i]`: whose keys statement i returns.
        let mut sent: Vec<RowsFuture<'_>> = vec![Box::pin(async {
            pg.batch_execute("BEGIN").await.map(|()| Vec::new())
        })];
        let mut layer_of: Vec<Option<usize>> = vec![None];
        for (i, (layer, _)) in built.iter().enumerate() {
            for statement in layer.statements(pg, &statements, &self.worker, &self.lease_ms) {
                sent.push(statement);
                layer_of.push(Some(i));
            }
        }
        for statement in fresh.statements(pg, &statements, &self.worker, &self.lease_ms) {
            sent.push(statement);
            layer_of.push(Some(built.len()));
        }
        layer_of.push(None);
        let end = |sent_whole: bool| -> RowsFuture<'_> {
            let end = if sent_whole { "COMMIT" } else { "ROLLBACK" };
            Box::pin(async move { pg.batch_execute(end).await.map(|()| Vec::new()) })
        };

        let mut changed: Vec<HashSet<String>> = vec![HashSet::new(); built.len() + 1];
        for (rows, layer) in in_order(sent, end).await.into_iter().zip(layer_of) {
            let rows = rows.map_err(|e| self.err(e))?;
            if let Some(layer) = layer {
                keys_of(&rows, &mut changed[layer]);
            }
        }
        let inserted = changed.pop().unwrap_or_default();

        // Committed. The writes that changed nothing: why.
        let mut unchanged: Vec<(&str, Option<i64>)> = Vec::new();
        for ((segment, (_, routes)), changed) in segments.iter().zip(&built).zip(&changed) {
            for (&write, route) in segment.iter().zip(routes) {
                let key = write_key(write);
                match route {
                    Route::SetWise if changed.contains(key) => note_changed(write, held),
                    Route::Nothing => {}
                    _ => {
                        let generation = held.remove(key);
                        if !unchanged.iter().any(|(k, _)| *k == key) {
                            unchanged.push((key, generation));
                        }
                    }
                }
            }
        }
        if !unchanged.is_empty() {
            let keys: Vec<&str> = unchanged.iter().map(|(k, _)| *k).collect();
            let found = self.records_now(client, &keys).await.map_err(|e| {
                JournalError::new(
                    JournalErrorKind::Unavailable,
                    &self.location,
                    format!(
                        "the batch committed, but reading why {} of its writes changed \
                         nothing failed: {}",
                        keys.len(),
                        self.err(e)
                    ),
                )
            })?;
            for (key, generation) in unchanged {
                let now = found
                    .get(key)
                    .map(|(state, owner, current)| (state.as_str(), owner.as_str(), *current));
                if let Unchanged::Fenced = self.why_unchanged_of(now, generation) {
                    if let Ok(k) = IdempotencyKey::try_from(key) {
                        fenced.push(k);
                    }
                }
            }
        }
        Ok(inserted)
    }

    /// State, owner and generation of the records of `keys` that exist.
    async fn records_now(
        &self,
        client: &deadpool_postgres::Object,
        keys: &[&str],
    ) -> Result<HashMap<String, (String, String, i64)>, tokio_postgres::Error> {
        let stmt = client
            .prepare_cached(
                "SELECT key, state, owner, generation FROM arcp_calls WHERE key = ANY($1)",
            )
            .await?;
        let rows = client.query(&stmt, &[&keys]).await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, (r.try_get(1)?, r.try_get(2)?, r.try_get(3)?))))
            .collect()
    }
}

/// Polls `futures` to completion, each first poll in order (a statement is
/// sent when its future is first polled: the order sent is the order the
/// server executes them in), then the one `end` makes: `end(true)` if no
/// future failed on its first poll (none failed before it was sent),
/// `end(false)` otherwise. Their results in order, the end's last.
async fn in_order<'a>(
    mut futures: Vec<RowsFuture<'a>>,
    end: impl FnOnce(bool) -> RowsFuture<'a>,
) -> Vec<Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>> {
    type Answer = Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>;
    let mut out: Vec<Option<Answer>> = futures.iter().map(|_| None).collect();
    let mut end = Some(end);
    poll_fn(|cx| {
        if let Some(end) = end.take() {
            // First pass: everything but the end is sent.
            for (future, slot) in futures.iter_mut().zip(out.iter_mut()) {
                if let Poll::Ready(result) = future.as_mut().poll(cx) {
                    *slot = Some(result);
                }
            }
            let sent_whole = !out.iter().any(|r| matches!(r, Some(Err(_))));
            futures.push(end(sent_whole));
            out.push(None);
        }
        let mut all = true;
        for (future, slot) in futures.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(result) => *slot = Some(result),
                    Poll::Pending => all = false,
                }
            }
        }
        if all {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    out.into_iter().flatten().collect()
}
