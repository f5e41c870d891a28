//! The fleet journal: one PostgreSQL database shared by many workers, each
//! unfinished call owned by one worker under a lease, every write fenced by
//! the owner's generation.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::AtomicU32;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use arcp_types::IdempotencyKey;
use deadpool_postgres::{GenericClient, Pool};

mod at_once;
mod bridge;
mod connect;
mod errors;
mod leases;
mod options;
mod rows;
mod schema;
mod set_wise;
mod sql;
mod tls;
mod writes;

use at_once::rides_at_once;
use errors::classify;
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use options::PostgresOptions;
use rows::row_entry;
use schema::MIGRATIONS;
use sql::COLUMNS;

use super::rows::{duration_to_millis, to_millis};
#[cfg(doc)]
use super::JournalErrorKind;
use super::{
    ClaimPosition, Journal, JournalEntry, JournalError, JournalWrite, PurgeReport, Retention,
};
use crate::sync::lock;

/// A [`Journal`] in a PostgreSQL database that a fleet of workers shares:
/// any worker finishes a dead worker's calls, and each tool still runs once.
///
/// **Ownership.** Every unfinished call is owned by one worker
/// ([`PostgresOptions::worker_id`]) under a lease
/// ([`PostgresOptions::lease_ttl`], renewed by the client's journal thread
/// while the worker lives) and a fencing *generation*. A worker's
/// [`Client::recover`](crate::Client::recover) claims the calls whose lease
/// expired (`SELECT ... FOR UPDATE SKIP LOCKED`, so two workers never claim
/// the same call) and bumps their generation. Every later write names the
/// generation its worker holds; the database refuses a write under an older
/// one (a `WHERE` guard, and a trigger behind it), so a worker that froze
/// past its lease and wakes up cannot overwrite the new owner's record: its
/// in-flight calls end with [`JournalErrorKind::Fenced`] and are not driven
/// further. The runtime deduplicates the key, so the call the new owner
/// re-sends runs once.
///
/// **Invariants held by the database** (its schema's migrations, applied by
/// [`PostgresJournal::connect`] under an advisory lock): a terminal record
/// is final (trigger); one active attempt per call (partial unique index on
/// `arcp_attempts`); state and attempt counts never move backwards, and
/// ownership only moves to the next generation (trigger); every state change
/// writes its `arcp_history` row (worker, generation) in its own
/// transaction (trigger). A worker that disappears leaves its calls
/// unfinished: only an outcome makes a record terminal.
///
/// **Why a runtime of its own.** [`Journal`] is called from the client's
/// dedicated writer thread, which blocks; `tokio-postgres` is async. The
/// journal owns a one-thread tokio runtime that drives its connections and
/// blocks the writer thread on each operation (`block_on`), so no journal
/// I/O runs on the application's runtime and the pool's connections live
/// on a runtime that outlives any caller's. (The sync `postgres` crate does
/// the same internally, without a pool.) Blocking methods called from
/// inside an async context run on a scoped helper thread instead of
/// panicking.
///
/// **Retention** ([`Retention`]) applies to the whole database: every
/// worker purges terminal records past `terminal_ttl`, and unfinished ones
/// untouched for `unfinished_ttl` whose lease has lapsed (a live worker's
/// long call renews its lease, so it is never purged under it).
///
/// **TLS** (rustls, with the SDK's own crypto provider) as the connection
/// string's `sslmode` asks, with libpq's meanings: `disable` (never),
/// `allow` and `prefer` (the default: when the server offers it, the
/// certificate unchecked), `require` (always; the certificate unchecked
/// unless `sslrootcert` is given), `verify-ca` (signed by a trusted root),
/// `verify-full` (that, and naming the host). Trusted roots: the PEM file
/// `sslrootcert` names, else the web PKI roots (`sslrootcert=system`).
/// A managed server wants `?sslmode=verify-full&sslrootcert=/path/ca.pem`.
/// A certificate refused, or TLS required and not offered, fails
/// `connect` with [`JournalErrorKind::Tls`](crate::JournalErrorKind::Tls).
/// No client certificates; SCRAM without channel binding.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use arcp_sdk::{Client, PostgresJournal, PostgresOptions};
/// let journal = PostgresJournal::connect(
///     "postgres://arcp@db.internal/arcp",
///     PostgresOptions::default().lease_ttl(Duration::from_secs(15)),
/// )
/// .await?;
/// let client = Client::builder("ws://127.0.0.1:7777/arcp")
///     .journal(journal)
///     .connect()
///     .await?;
/// // Finish what dead workers left: each claimed call is this worker's now.
/// for call in client.recover().await? {
///     tokio::spawn(call);
/// }
/// # Ok(()) }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub struct PostgresJournal {
    /// `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
    pool: Pool,
    worker: String,
    lease_ms: i64,
    lease_ttl: Duration,
    /// The client-side bound on one round trip.
    round_trip: Duration,
    /// Round trips that timed out since the last that did not.
    timeouts_in_a_row: AtomicU32,
    renew_interval: Duration,
    connect_timeout: Duration,
    /// Calls this worker has authority over: key -> generation.
    held: Mutex<HashMap<String, i64>>,
    /// Keys whose writes were refused since the last `take_fenced`.
    fenced: Mutex<Vec<IdempotencyKey>>,
    location: String,
}

impl fmt::Debug for PostgresJournal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresJournal")
            .field("location", &self.location)
            .field("worker", &self.worker)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresJournal {
    fn drop(&mut self) {
        // Dropping a runtime blocks; this may run on an async task (a
        // journal never handed to a client), where that is forbidden.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl PostgresJournal {
    /// This worker's id.
    pub fn worker_id(&self) -> &str {
        &self.worker
    }

    /// The schema version of the database (the highest migration applied).
    /// Runs on the journal's own runtime: it never blocks the caller's.
    pub async fn schema_version(&self) -> Result<i32, JournalError> {
        self.off_thread(
            "SELECT max(version) FROM arcp_journal_schema",
            None,
            |location, row| {
                let version: Option<i32> = row.try_get(0).map_err(|e| classify(location, &e))?;
                Ok(version.unwrap_or(0))
            },
        )
        .await
        .map(|versions| versions.into_iter().next().unwrap_or(0))
    }

    /// The schema version this code migrates to.
    pub fn latest_schema_version() -> i32 {
        MIGRATIONS.last().map_or(0, |m| m.0)
    }

    /// Up to `limit` records of every state and owner, the most recently
    /// changed first. Runs on the journal's own runtime: it never blocks the
    /// caller's.
    pub async fn list(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.off_thread(
            &format!("SELECT {COLUMNS} FROM arcp_calls ORDER BY updated_ms DESC, key LIMIT $1"),
            Some(limit),
            row_entry,
        )
        .await
    }

    /// The calls this worker has authority over right now (key and
    /// generation), as far as it knows (a claim by another worker shows at
    /// the next renewal or write).
    pub fn held(&self) -> Vec<(IdempotencyKey, u64)> {
        lock(&self.held)
            .iter()
            .filter_map(|(k, g)| {
                Some((
                    IdempotencyKey::try_from(k.as_str()).ok()?,
                    u64::try_from(*g).ok()?,
                ))
            })
            .collect()
    }

    fn select(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<JournalEntry>, JournalError> {
        self.block(async {
            let client = self.client().await?;
            let stmt = client.prepare_cached(sql).await.map_err(|e| self.err(e))?;
            let rows = client.query(&stmt, params).await.map_err(|e| self.err(e))?;
            rows.iter().map(|r| self.entry(r)).collect()
        })
    }

    /// Keeps the keys whose writes were refused for [`Journal::take_fenced`].
    fn report_fenced(&self, fenced: Vec<IdempotencyKey>) {
        if !fenced.is_empty() {
            tracing::warn!(
                journal = %self.location,
                refused = fenced.len(),
                "writes refused: another worker claimed these calls (this worker lost its lease)"
            );
            lock(&self.fenced).extend(fenced);
        }
    }

    /// Validates a row; one this code cannot have written is corruption.
    fn entry(&self, r: &tokio_postgres::Row) -> Result<JournalEntry, JournalError> {
        row_entry(&self.location, r)
    }
}

impl Journal for PostgresJournal {
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError> {
        if writes.is_empty() {
            return Ok(());
        }
        self.apply_and_insert_new(writes, &[]).map(|_| ())
    }

    fn apply_and_insert_new(
        &self,
        writes: &[JournalWrite],
        new: &[JournalEntry],
    ) -> Result<Vec<bool>, JournalError> {
        let mut held = lock(&self.held).clone();
        let mut fenced = Vec::new();
        let inserted = self.block(async {
            let mut client = self.client().await?;
            if writes.iter().all(rides_at_once) {
                return self
                    .commit_at_once(&client, writes, new, &mut held, &mut fenced)
                    .await;
            }
            let tx = client.transaction().await.map_err(|e| self.err(e))?;
            // The writes and the insert concern distinct keys: sent together.
            let (applied, inserted) = tokio::join!(
                self.apply_all(&tx, writes, &mut held, &mut fenced),
                self.insert_absent(&tx, new),
            );
            applied.map_err(|e| self.err(e))?;
            let inserted = inserted.map_err(|e| self.err(e))?;
            tx.commit().await.map_err(|e| self.err(e))?;
            Ok(inserted)
        })?;
        let inserted: Vec<bool> = new
            .iter()
            .map(|e| inserted.contains(e.key.as_str()))
            .collect();
        for (e, _) in new.iter().zip(&inserted).filter(|(_, i)| **i) {
            if !e.state.is_terminal() {
                held.insert(e.key.as_str().to_owned(), 1);
            }
        }
        *lock(&self.held) = held;
        self.report_fenced(fenced);
        Ok(inserted)
    }

    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError> {
        let key = key.as_str();
        Ok(self
            .select(
                &format!("SELECT {COLUMNS} FROM arcp_calls WHERE key = $1"),
                &[&key],
            )?
            .pop())
    }

    fn get_many(&self, keys: &[IdempotencyKey]) -> Result<Vec<JournalEntry>, JournalError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<&str> = keys.iter().map(IdempotencyKey::as_str).collect();
        self.select(
            &format!("SELECT {COLUMNS} FROM arcp_calls WHERE key = ANY($1)"),
            &[&keys],
        )
    }

    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.select(
            &format!(
                "SELECT {COLUMNS} FROM arcp_calls WHERE state <> 'terminal' \
                 ORDER BY created_ms, key LIMIT $1"
            ),
            &[&limit],
        )
    }

    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError> {
        let now = to_millis(now);
        let cutoff = |ttl: Duration| now.saturating_sub(duration_to_millis(ttl));
        let (terminal_cutoff, unfinished_cutoff) = (
            cutoff(retention.terminal_ttl),
            cutoff(retention.unfinished_ttl),
        );
        let max = i64::try_from(retention.max_records).unwrap_or(i64::MAX);
        self.block(async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(|e| self.err(e))?;
            let run = async {
                let mut report = PurgeReport {
                    expired_terminal: tx
                        .execute(
                            "DELETE FROM arcp_calls WHERE state = 'terminal' AND updated_ms < $1",
                            &[&terminal_cutoff],
                        )
                        .await?,
                    // Never a call some live worker still holds: a long job
                    // renews its lease without touching `updated_ms`.
                    expired_unfinished: tx
                        .execute(
                            "DELETE FROM arcp_calls WHERE state <> 'terminal' AND updated_ms < $1 \
                             AND lease_until <= clock_timestamp()",
                            &[&unfinished_cutoff],
                        )
                        .await?,
                    ..PurgeReport::default()
                };
                let count: i64 = tx
                    .query_one("SELECT count(*) FROM arcp_calls", &[])
                    .await?
                    .try_get(0)?;
                if count > max {
                    report.evicted = tx
                        .execute(
                            "DELETE FROM arcp_calls WHERE key IN (SELECT key FROM arcp_calls \
                             WHERE state = 'terminal' ORDER BY updated_ms, key LIMIT $1)",
                            &[&(count - max)],
                        )
                        .await?;
                }
                let row = tx
                    .query_one(
                        "SELECT count(*), count(*) FILTER (WHERE state <> 'terminal') \
                         FROM arcp_calls",
                        &[],
                    )
                    .await?;
                report.remaining = u64::try_from(row.get::<_, i64>(0)).unwrap_or(0);
                report.unfinished = u64::try_from(row.get::<_, i64>(1)).unwrap_or(0);
                Ok::<_, tokio_postgres::Error>(report)
            };
            let report = run.await.map_err(|e| self.err(e))?;
            tx.commit().await.map_err(|e| self.err(e))?;
            Ok(report)
        })
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn claim(
        &self,
        limit: usize,
        driving: &HashSet<IdempotencyKey>,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        self.claim_after(limit, driving, None)
    }

    fn claim_after(
        &self,
        limit: usize,
        driving: &HashSet<IdempotencyKey>,
        after: Option<&ClaimPosition>,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        let skip: Vec<String> = driving.iter().map(|k| k.as_str().to_owned()).collect();
        self.claim_where(i64::try_from(limit).unwrap_or(i64::MAX), None, &skip, after)
    }

    fn acquire(&self, key: &IdempotencyKey) -> Result<bool, JournalError> {
        if lock(&self.held).contains_key(key.as_str()) {
            return Ok(true);
        }
        Ok(!self
            .claim_where(1, Some(key.as_str()), &[], None)?
            .is_empty())
    }

    fn lease_interval(&self) -> Option<Duration> {
        Some(self.renew_interval)
    }

    fn lease_ttl(&self) -> Option<Duration> {
        Some(self.lease_ttl)
    }

    fn renew(&self) -> Result<Vec<IdempotencyKey>, JournalError> {
        let (keys, generations): (Vec<String>, Vec<i64>) = lock(&self.held)
            .iter()
            .map(|(k, g)| (k.clone(), *g))
            .unzip();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let kept: Vec<String> = self.block(async {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(
                    "UPDATE arcp_calls c \
                     SET lease_until = clock_timestamp() + $4::bigint * interval '1 millisecond' \
                     FROM unnest($2::text[], $3::bigint[]) AS h(key, generation) \
                     WHERE c.key = h.key AND c.generation = h.generation AND c.owner = $1 \
                       AND c.state <> 'terminal' \
                     RETURNING c.key",
                )
                .await
                .map_err(|e| self.err(e))?;
            let rows = client
                .query(&stmt, &[&self.worker, &keys, &generations, &self.lease_ms])
                .await
                .map_err(|e| self.err(e))?;
            Ok::<_, JournalError>(rows.iter().map(|r| r.get::<_, String>(0)).collect())
        })?;
        let kept: std::collections::HashSet<String> = kept.into_iter().collect();
        let mut lost = Vec::new();
        let mut held = lock(&self.held);
        for (key, generation) in keys.iter().zip(&generations) {
            // Only what this renewal saw: a claim made since stays held.
            if !kept.contains(key) && held.get(key) == Some(generation) {
                held.remove(key);
                if let Ok(k) = IdempotencyKey::try_from(key.as_str()) {
                    lost.push(k);
                }
            }
        }
        Ok(lost)
    }

    fn take_fenced(&self) -> Vec<IdempotencyKey> {
        std::mem::take(&mut *lock(&self.fenced))
    }
}
