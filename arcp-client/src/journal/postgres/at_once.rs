//! The common batch in one round trip: transitions of calls this worker
//! holds and new records, sent as `BEGIN`, the set-wise statements of every
//! layer, `COMMIT`, all at once.
//!
//! This is possible because none of these writes needs an answer before the
//! commit: a new record that finds its key taken inserts nothing (the
//! writer decides that prepare in a later step), and a transition that
//! changes nothing (a call fenced, finished or gone) writes nothing, so the
//! transaction is the same whatever they find. What they found is read from
//! their answers once the commit is back, and only a write that changed
//! nothing costs another round trip: a read, after the commit, saying why
//! (fenced, or a late transition to ignore), exactly as the full path would
//! have said inside the transaction (both see the latest committed record).
//!
//! A batch holding a prepare of a key that may exist, or a removal, takes
//! the full path ([`apply_all`](PostgresJournal::apply_all)): those decide
//! what to write from what they read.
//!
//! Every statement is sent before any answer is read, so a statement that
//! fails makes the ones after it fail too and `COMMIT` roll the transaction
//! back: the batch then committed nothing, and the first error is returned.

use std::collections::{HashMap, HashSet};
use std::future::poll_fn;
use std::task::Poll;

use arcp_types::IdempotencyKey;

use super::rows::write_key;
use super::set_wise::{layers, Layer, Route, RowsFuture, SetWiseStatements};
use super::writes::{keys_of, note_changed, Unchanged};
use super::PostgresJournal;
use crate::journal::{JournalEntry, JournalWrite};

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
    ) -> Result<HashSet<String>, tokio_postgres::Error> {
        debug_assert!(writes.iter().all(rides_at_once));
        let statements = SetWiseStatements::prepare(client).await?;
        let pg: &tokio_postgres::Client = client;
        let segments = layers(writes);
        let built: Vec<(Layer<'_>, Vec<Route>)> =
            segments.iter().map(|s| Layer::build(s, held)).collect();
        let fresh = Layer::of_new(new);

        // The transaction, in order: BEGIN, each layer's statements, the new
        // records, COMMIT. `layer_of[i]`: whose keys statement i returns.
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
        sent.push(Box::pin(async {
            pg.batch_execute("COMMIT").await.map(|()| Vec::new())
        }));
        layer_of.push(None);

        let mut changed: Vec<HashSet<String>> = vec![HashSet::new(); built.len() + 1];
        for (rows, layer) in in_order(sent).await.into_iter().zip(layer_of) {
            let rows = rows?;
            if let Some(layer) = layer {
                keys_of(&rows, &mut changed[layer]);
            }
        }
        let inserted = changed.pop().unwrap_or_default();

        // Committed: what each transition found.
        for ((segment, (_, routes)), changed) in segments.iter().zip(&built).zip(&changed) {
            for (&write, route) in segment.iter().zip(routes) {
                let key = write_key(write);
                match route {
                    Route::SetWise if changed.contains(key) => note_changed(write, held),
                    Route::Nothing => {}
                    // Changed nothing: say why, as the full path would.
                    _ => {
                        let generation = held.remove(key);
                        let k = IdempotencyKey::try_from(key).ok();
                        if let Some(k) = k {
                            if let Unchanged::Fenced =
                                self.why_unchanged(client, &k, generation).await?
                            {
                                fenced.push(k);
                            }
                        }
                    }
                }
            }
        }
        Ok(inserted)
    }
}

/// Polls `futures` to completion, each first poll in order (a statement is
/// sent when its future is first polled: the order sent is the order the
/// server executes them in); their results in order.
async fn in_order(
    mut futures: Vec<RowsFuture<'_>>,
) -> Vec<Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>> {
    let mut out: Vec<Option<Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>>> =
        futures.iter().map(|_| None).collect();
    poll_fn(|cx| {
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
