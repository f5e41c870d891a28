//! The bridge from the journal's blocking writer thread (and the async
//! methods) to the journal's own runtime, with every round trip bounded on
//! the client side.

use std::future::Future;
use std::sync::atomic::Ordering;

use super::errors::{classify, is_stale_statement};
use super::PostgresJournal;
use crate::journal::{JournalError, JournalErrorKind};

impl PostgresJournal {
    /// Runs one query (with an optional `bigint` parameter) on the
    /// journal's runtime, bounded as every round trip is, and reads each
    /// row with `read`: for the async methods, which must not block the
    /// caller's runtime.
    pub(super) async fn off_thread<T: Send + 'static>(
        &self,
        sql: &str,
        param: Option<i64>,
        read: fn(&str, &tokio_postgres::Row) -> Result<T, JournalError>,
    ) -> Result<Vec<T>, JournalError> {
        let (pool, location, sql) = (self.pool.clone(), self.location.clone(), sql.to_owned());
        let bound = self.round_trip.saturating_add(self.connect_timeout);
        let task = self.rt().spawn(async move {
            let query = async {
                let client = pool.get().await.map_err(|e| {
                    JournalError::new(
                        JournalErrorKind::Unavailable,
                        &location,
                        format!("no connection to the journal database: {e}"),
                    )
                })?;
                let rows = match &param {
                    Some(p) => client.query(&sql, &[p]).await,
                    None => client.query(&sql, &[]).await,
                }
                .map_err(|e| {
                    forget_stale_statements(&pool, &e);
                    classify(&location, &e)
                })?;
                rows.iter().map(|r| read(&location, r)).collect()
            };
            tokio::time::timeout(bound, query)
                .await
                .unwrap_or_else(|_| {
                    // As for the writer's round trips (`block`): the link
                    // that hung this connection may hang every idle one,
                    // and a new connection may get through.
                    pool.retain(|_, _| false);
                    Err(JournalError::new(
                        JournalErrorKind::Unavailable,
                        &location,
                        format!("no answer from the database within {bound:?}"),
                    ))
                })
        });
        task.await
            .map_err(|e| JournalError::new(JournalErrorKind::Io, &self.location, e.to_string()))?
    }

    /// `e` as a journal error; a stale cached statement also resets the
    /// pool's statement cache ([`forget_stale_statements`]).
    pub(super) fn err(&self, e: tokio_postgres::Error) -> JournalError {
        forget_stale_statements(&self.pool, &e);
        classify(&self.location, &e)
    }

    pub(super) fn rt(&self) -> &tokio::runtime::Runtime {
        self.runtime
            .as_ref()
            .expect("the runtime is taken only by drop")
    }

    /// Runs one database round trip `f` on the journal's runtime, blocking
    /// this thread, bounded by the round-trip timeout: past it `f` is
    /// dropped (its connection with it) and every idle pooled connection
    /// too (a link that hangs hangs them all), and the operation fails with
    /// [`JournalErrorKind::Unavailable`]. What was sent may still commit
    /// (a batch sent at once carries its `COMMIT`): the caller counts the
    /// operation's fate as unknown.
    pub(super) fn block<T: Send>(
        &self,
        f: impl Future<Output = Result<T, JournalError>> + Send,
    ) -> Result<T, JournalError> {
        // A round trip that must first open a connection (none idle) may
        // take the connect timeout more: opening one is bounded apart. After
        // timeouts in a row the bound doubles (up to four times): a link
        // that is slow, not dead, then still gets its batches through.
        let slow = self.timeouts_in_a_row.load(Ordering::Relaxed).min(2);
        let base = self.round_trip.saturating_mul(1 << slow);
        let bound = if self.pool.status().available > 0 {
            base
        } else {
            base.saturating_add(self.connect_timeout)
        };
        self.run_blocking(async {
            let outcome = tokio::time::timeout(bound, f).await;
            if outcome.is_ok() {
                self.timeouts_in_a_row.store(0, Ordering::Relaxed);
            }
            outcome.unwrap_or_else(|_| {
                self.timeouts_in_a_row.fetch_add(1, Ordering::Relaxed);
                let idle = self.pool.status().available;
                self.pool.retain(|_, _| false);
                tracing::warn!(
                    journal = %self.location,
                    ?bound,
                    dropped = idle,
                    "no answer from the journal database in time; its idle connections are dropped"
                );
                Err(JournalError::new(
                    JournalErrorKind::Unavailable,
                    &self.location,
                    format!("no answer from the database within {bound:?}"),
                ))
            })
        })
    }

    /// Runs `f` to completion on the journal's runtime, blocking this
    /// thread. Inside an async context (where `block_on` would panic), on a
    /// scoped helper thread.
    pub(super) fn run_blocking<F>(&self, f: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        let rt = self.rt();
        if tokio::runtime::Handle::try_current().is_err() {
            return rt.block_on(f);
        }
        std::thread::scope(|s| match s.spawn(|| rt.block_on(f)).join() {
            Ok(out) => out,
            Err(panic) => std::panic::resume_unwind(panic),
        })
    }

    pub(super) async fn client(&self) -> Result<deadpool_postgres::Object, JournalError> {
        self.pool.get().await.map_err(|e| {
            JournalError::new(
                JournalErrorKind::Unavailable,
                &self.location,
                format!("no connection to the journal database: {e}"),
            )
        })
    }
}

/// After the server refused a cached statement (a pooler dropped it, or a
/// change of the tables invalidated it), every connection's statement cache
/// is reset: otherwise the connection holding it fails every round trip
/// with the same error until the pool recycles it. Each statement is
/// prepared again at its next use.
fn forget_stale_statements(pool: &deadpool_postgres::Pool, e: &tokio_postgres::Error) {
    if is_stale_statement(e) {
        tracing::warn!(error = %e, "a cached statement went stale; statement caches reset");
        pool.manager().statement_caches.clear();
    }
}
