//! The PostgreSQL journal loses a commit's answer, then the database turns
//! read-only (`default_transaction_read_only`, its sessions cut: a failover
//! to a standby). The retry is refused by the server itself; the caller is
//! never told "did not run" for a record a recovery then sends. Ground
//! truth: arcp-mock's execution counts.

mod pg_support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arcp_mock::MockRuntime;
use arcp_sdk::{
    Client, ClientBuilder, Execution, IdempotencyKey, Journal, JournalEntry, JournalError,
    JournalErrorKind, JournalWrite, PostgresJournal, PostgresOptions, PurgeReport, Retention,
    RetryPolicy,
};
use serde_json::{json, Value};
use tokio_postgres::NoTls;

/// Sets `default_transaction_read_only` on the test database and cuts its
/// other sessions, so every new transaction of the journal's pool sees it.
async fn set_read_only(url: &str, on: bool) {
    let (db, conn) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    let task = tokio::spawn(conn);
    let name: String = db
        .query_one("SELECT current_database()", &[])
        .await
        .expect("database name")
        .get(0);
    // This session writes even while the database's default is read-only.
    db.batch_execute("SET default_transaction_read_only = off")
        .await
        .expect("SET");
    db.batch_execute(&format!(
        "ALTER DATABASE \"{name}\" SET default_transaction_read_only = {on}"
    ))
    .await
    .expect("ALTER DATABASE");
    db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
        &[],
    )
    .await
    .expect("cut the sessions");
    drop(db);
    let _ = task.await;
}

/// A PostgreSQL journal whose first commit of a call lands but loses its
/// answer; the database is then made read-only.
struct LostThenReadOnly {
    inner: PostgresJournal,
    url: String,
    lose_answer: Arc<AtomicBool>,
}

impl Journal for LostThenReadOnly {
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError> {
        self.inner.apply(writes)
    }
    fn apply_and_insert_new(
        &self,
        writes: &[JournalWrite],
        new: &[JournalEntry],
    ) -> Result<Vec<bool>, JournalError> {
        let inserted = self.inner.apply_and_insert_new(writes, new)?;
        if !new.is_empty() && self.lose_answer.swap(false, Ordering::SeqCst) {
            // The journal's writer thread is not in a runtime: one of its own.
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(set_read_only(&self.url, true));
            return Err(JournalError::new(
                JournalErrorKind::Unavailable,
                self.inner.location(),
                "the connection closed before COMMIT was answered",
            ));
        }
        Ok(inserted)
    }
    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError> {
        self.inner.get(key)
    }
    fn get_many(&self, keys: &[IdempotencyKey]) -> Result<Vec<JournalEntry>, JournalError> {
        self.inner.get_many(keys)
    }
    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        self.inner.unfinished(limit)
    }
    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError> {
        self.inner.purge(retention, now)
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn claim(
        &self,
        limit: usize,
        driving: &HashSet<IdempotencyKey>,
    ) -> Result<Vec<JournalEntry>, JournalError> {
        self.inner.claim(limit, driving)
    }
    fn acquire(&self, key: &IdempotencyKey) -> Result<bool, JournalError> {
        self.inner.acquire(key)
    }
    fn lease_interval(&self) -> Option<Duration> {
        self.inner.lease_interval()
    }
    fn renew(&self) -> Result<Vec<IdempotencyKey>, JournalError> {
        self.inner.renew()
    }
    fn take_fenced(&self) -> Vec<IdempotencyKey> {
        self.inner.take_fenced()
    }
    fn lease_ttl(&self) -> Option<Duration> {
        self.inner.lease_ttl()
    }
}

async fn journal(url: &str, worker: &str) -> PostgresJournal {
    PostgresJournal::connect(
        url,
        PostgresOptions::default()
            .worker_id(worker)
            .lease_ttl(Duration::from_secs(1))
            .round_trip_timeout(Duration::from_secs(2)),
    )
    .await
    .expect("open the journal")
}

fn builder(url: &str) -> ClientBuilder {
    Client::builder(url)
        .handshake_timeout(Duration::from_secs(2))
        .default_deadline(Duration::from_secs(10))
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(10))
                .max_delay(Duration::from_millis(100))
                .max_attempts(6)
                .max_elapsed(Duration::from_secs(5)),
        )
}

#[tokio::test]
async fn a_lost_commit_answer_then_a_read_only_database_is_not_did_not_run() {
    let url = postgres_or_skip!();
    let mock = MockRuntime::builder()
        .tool("refund", |args: Value, _ctx| async move {
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await
        .unwrap();
    let client = builder(&mock.ws_url())
        .journal(LostThenReadOnly {
            inner: journal(&url, "first").await,
            url: url.clone(),
            lose_answer: Arc::new(AtomicBool::new(true)),
        })
        .connect()
        .await
        .unwrap();
    let told = client
        .invoke_tool("refund", json!({"order": 1}))
        .deadline(Duration::from_millis(1500))
        .send()
        .await
        .expect_err("the journal could not record the call");
    client.close().await;
    assert_eq!(mock.total_executions(), 0, "nothing was sent");
    // A writable primary again; another worker recovers what landed once
    // the first one's lease ran out.
    set_read_only(&url, false).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let client = builder(&mock.ws_url())
        .journal(journal(&url, "second").await)
        .connect()
        .await
        .unwrap();
    let mut recovered = Vec::new();
    for call in client.recover().await.expect("recover") {
        recovered.push(call.await.map(|out| out.value));
    }
    assert_eq!(
        mock.total_executions(),
        1,
        "the landed record was recovered"
    );
    assert_ne!(
        told.execution(),
        Execution::NotRun,
        "the record landed and was recovered ({told}); recovered: {recovered:?}"
    );
    client.close().await;
}

/// A column's type changes under the journal's cached statements (a
/// migration by another build): the server refuses the stale statement
/// ("cached plan must not change result type", 0A000), as a pooler that
/// dropped the connection's prepared statements answers 26000. The refusal
/// is the store being away for a moment, not a refusal of the call, and the
/// pool's statement cache is reset: the next round trip prepares its
/// statement again instead of failing until the pool recycles the
/// connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_cached_statement_is_prepared_again() {
    let url = postgres_or_skip!();
    let j = journal(&url, "w0").await;
    let key = IdempotencyKey::new();
    assert!(j.get(&key).expect("a first read").is_none());
    let (db, conn) = tokio_postgres::connect(&url, NoTls).await.expect("connect");
    let task = tokio::spawn(conn);
    db.batch_execute("ALTER TABLE arcp_calls ALTER COLUMN trace_id TYPE varchar(200)")
        .await
        .expect("ALTER TABLE");
    drop(db);
    let _ = task.await;
    let first = j.get(&key);
    if let Err(e) = &first {
        assert_eq!(e.kind, JournalErrorKind::Unavailable, "{e}");
    }
    let second = j.get(&key);
    assert!(
        matches!(second, Ok(None)),
        "the statement is prepared again: {first:?}, then {second:?}"
    );
}
