//! A batch's writes as set-wise statements: the batch split into layers (a
//! key's first write in the first layer, its second in the second, ...),
//! each layer's writes (distinct keys) gathered into the arrays of one
//! statement per kind of write, and those statements sent without waiting
//! for each other's answers.
//!
//! Statements are sent with [`tokio_postgres::Client::query_raw`] and own
//! their parameters, so any number of them can be in flight on one
//! connection at once: they are executed in the order sent, which is all a
//! batch needs (each key's writes are in layer order).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use deadpool_postgres::GenericClient;
use futures_util::TryStreamExt;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};

use super::rows::{write_key, NewRows, TerminalRows};
use super::sql::{ACCEPTED_MANY, INSERT_MANY, RELEASE_MANY, SENT_MANY, TERMINAL_MANY};
use crate::journal::rows::to_millis;
use crate::journal::JournalWrite;

/// One statement's parameter.
pub(super) type Param<'p> = &'p (dyn ToSql + Sync);

/// A statement's rows (the keys it changed), on their way.
pub(super) type RowsFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<Row>, tokio_postgres::Error>> + Send + 'a>>;

/// Sends `statement` with `params` (owned by the future, so it can be in
/// flight with others) and reads its rows.
pub(super) fn send<'a, const N: usize>(
    client: &'a Client,
    statement: &'a Statement,
    params: [Param<'a>; N],
) -> RowsFuture<'a> {
    Box::pin(async move {
        client
            .query_raw(statement, params)
            .await?
            .try_collect()
            .await
    })
}

/// The set-wise statements, prepared on the connection that runs them
/// (prepared once per connection: the pool caches them).
pub(super) struct SetWiseStatements {
    insert: Statement,
    sent: Statement,
    accepted: Statement,
    terminal: Statement,
    release: Statement,
}

impl SetWiseStatements {
    pub(super) async fn prepare(
        client: &impl GenericClient,
    ) -> Result<Self, tokio_postgres::Error> {
        let (insert, sent, accepted, terminal, release) = tokio::try_join!(
            client.prepare_cached(INSERT_MANY),
            client.prepare_cached(SENT_MANY),
            client.prepare_cached(ACCEPTED_MANY),
            client.prepare_cached(TERMINAL_MANY),
            client.prepare_cached(RELEASE_MANY),
        )?;
        Ok(SetWiseStatements {
            insert,
            sent,
            accepted,
            terminal,
            release,
        })
    }
}

/// The batch's writes in layers: only each key's own order matters (writes
/// on distinct keys are independent), so a key's n-th write goes in the
/// n-th layer and a layer never holds a key twice.
pub(super) fn layers(writes: &[JournalWrite]) -> Vec<Vec<&JournalWrite>> {
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
    layers
}

/// How a layer's write is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// In its kind's set-wise statement: changed if that statement returned
    /// its key.
    SetWise,
    /// A transition of a call this worker does not hold: no fast form.
    NotHeld,
    /// The release of a call not held: nothing to do.
    Nothing,
    /// A removal: one statement of its own.
    OneByOne,
}

/// The columns of one layer's writes (distinct keys), by kind.
#[derive(Default)]
pub(super) struct Layer<'w> {
    new: NewRows,
    sent: Transitions<'w, i64>,
    accepted: Transitions<'w, &'w str>,
    terminal: TerminalRows<'w>,
    release: Transitions<'w, ()>,
}

/// Sent, accepted and release transitions: key, generation held, the
/// kind's value, time.
#[derive(Default)]
struct Transitions<'w, V> {
    keys: Vec<&'w str>,
    generations: Vec<i64>,
    values: Vec<V>,
    at: Vec<i64>,
}

impl<'w, V> Transitions<'w, V> {
    fn push(&mut self, key: &'w str, generation: i64, value: V, at: i64) {
        self.keys.push(key);
        self.generations.push(generation);
        self.values.push(value);
        self.at.push(at);
    }
}

impl<'w> Layer<'w> {
    /// Gathers a layer's writes by kind; how each write is sent.
    pub(super) fn build(
        segment: &[&'w JournalWrite],
        held: &HashMap<String, i64>,
    ) -> (Self, Vec<Route>) {
        let mut layer = Layer::default();
        let routes = segment
            .iter()
            .map(|&write| {
                let generation = held.get(write_key(write)).copied();
                match (write, generation) {
                    (JournalWrite::Prepare(e), _) => layer.new.push(e),
                    (JournalWrite::Sent { key, attempts, at }, Some(g)) => {
                        layer
                            .sent
                            .push(key.as_str(), g, i64::from(*attempts), to_millis(*at));
                    }
                    (JournalWrite::Accepted { key, job_id, at }, Some(g)) => {
                        layer
                            .accepted
                            .push(key.as_str(), g, job_id.as_str(), to_millis(*at));
                    }
                    (JournalWrite::Terminal { key, outcome, at }, Some(g)) => {
                        layer.terminal.push(key.as_str(), g, outcome, *at);
                    }
                    (JournalWrite::Release { key }, Some(g)) => {
                        layer.release.push(key.as_str(), g, (), 0);
                    }
                    (JournalWrite::Release { .. }, None) => return Route::Nothing,
                    (JournalWrite::Remove { .. }, _) => return Route::OneByOne,
                    (_, None) => return Route::NotHeld,
                }
                Route::SetWise
            })
            .collect();
        (layer, routes)
    }

    /// New records only (each key's first write, none held yet).
    pub(super) fn of_new(new: &[crate::journal::JournalEntry]) -> Self {
        let mut layer = Layer::default();
        for e in new {
            layer.new.push(e);
        }
        layer
    }

    /// The layer's statements (one per kind it holds), each returning the
    /// keys it changed; not yet sent (they are sent when first polled, in
    /// the order of the vector).
    pub(super) fn statements<'a>(
        &'a self,
        client: &'a Client,
        statements: &'a SetWiseStatements,
        me: &'a String,
        lease_ms: &'a i64,
    ) -> Vec<RowsFuture<'a>> {
        let mut out: Vec<RowsFuture<'a>> = Vec::with_capacity(5);
        let new = &self.new;
        if !new.keys.is_empty() {
            out.push(send(
                client,
                &statements.insert,
                [
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
                    me,
                    lease_ms,
                ],
            ));
        }
        let sent = &self.sent;
        if !sent.keys.is_empty() {
            out.push(send(
                client,
                &statements.sent,
                [me, &sent.keys, &sent.generations, &sent.values, &sent.at],
            ));
        }
        let accepted = &self.accepted;
        if !accepted.keys.is_empty() {
            out.push(send(
                client,
                &statements.accepted,
                [
                    me,
                    &accepted.keys,
                    &accepted.generations,
                    &accepted.values,
                    &accepted.at,
                ],
            ));
        }
        let terminal = &self.terminal;
        if !terminal.keys.is_empty() {
            out.push(send(
                client,
                &statements.terminal,
                [
                    me,
                    &terminal.keys,
                    &terminal.generations,
                    &terminal.outcomes,
                    &terminal.jobs,
                    &terminal.attempts,
                    &terminal.at,
                ],
            ));
        }
        let release = &self.release;
        if !release.keys.is_empty() {
            out.push(send(
                client,
                &statements.release,
                [me, &release.keys, &release.generations],
            ));
        }
        out
    }
}
