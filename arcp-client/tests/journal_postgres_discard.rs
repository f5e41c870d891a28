//! `discard` on a shared PostgreSQL journal decides from a record it read
//! before it writes; other workers act on the key in between. Each test
//! holds the discard right after that read (a slow link, or its writer
//! thread descheduled) while another worker acts, then lets it go on:
//!
//! - another worker's call replaces a "did not run" record and runs: the
//!   discard deletes nothing, and the key never says "did not run" later;
//! - another worker discards the same unfinished call first: the second
//!   discard finds it ended, and says so (not `JOURNAL_FENCED`).

mod pg_support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime};

use arcp_mock::MockRuntime;
use arcp_sdk::{
    Client, ClientBuilder, Execution, IdempotencyKey, Journal, JournalEntry, JournalError,
    JournalOutcome, JournalState, JournalWrite, PostgresJournal, PostgresOptions, PurgeReport,
    Retention, RetryPolicy,
};
use serde_json::{json, Value};

async fn journal(url: &str, worker: &str, lease: Duration) -> PostgresJournal {
    PostgresJournal::connect(
        url,
        PostgresOptions::default()
            .worker_id(worker)
            .lease_ttl(lease)
            .round_trip_timeout(Duration::from_secs(2)),
    )
    .await
    .expect("open the journal")
}

fn builder(url: &str) -> ClientBuilder {
    Client::builder(url)
        .handshake_timeout(Duration::from_secs(2))
        .default_deadline(Duration::from_secs(15))
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(10))
                .max_delay(Duration::from_millis(200))
                .max_attempts(6)
                .max_elapsed(Duration::from_secs(5)),
        )
}

/// A `refund` record of `key` with these arguments (JSON), as the client
/// writes it.
fn entry(key: &IdempotencyKey, arguments: &str) -> JournalEntry {
    let invoke = arcp_types::Invoke::new("refund", serde_json::from_str(arguments).unwrap())
        .with_idempotency_key(key.as_str());
    JournalEntry::new(
        key.clone(),
        "refund",
        serde_json::to_string(&invoke).unwrap(),
        arcp_types::new_trace_id(),
        Duration::from_secs(5),
    )
}

/// A URL nothing listens on.
fn dead_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("ws://127.0.0.1:{port}/arcp")
}

/// The PostgreSQL journal, whose next read of `key` once armed is held,
/// after it read, until released: what it returns is then stale.
struct HeldRead {
    inner: PostgresJournal,
    key: IdempotencyKey,
    armed: Arc<AtomicBool>,
    reached: Mutex<mpsc::Sender<()>>,
    go: Mutex<mpsc::Receiver<()>>,
}

/// The ends of a [`HeldRead`]'s hold.
struct Hold {
    /// Set to hold the next read of the key.
    armed: Arc<AtomicBool>,
    /// Answers once the held read is done.
    reached: mpsc::Receiver<()>,
    /// Releases it.
    go: mpsc::Sender<()>,
}

fn held_read(inner: PostgresJournal, key: &IdempotencyKey) -> (HeldRead, Hold) {
    let (reached_tx, reached) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    let armed = Arc::new(AtomicBool::new(false));
    let journal = HeldRead {
        inner,
        key: key.clone(),
        armed: armed.clone(),
        reached: Mutex::new(reached_tx),
        go: Mutex::new(go_rx),
    };
    (journal, Hold { armed, reached, go })
}

impl Journal for HeldRead {
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError> {
        self.inner.apply(writes)
    }
    fn apply_and_insert_new(
        &self,
        writes: &[JournalWrite],
        new: &[JournalEntry],
    ) -> Result<Vec<bool>, JournalError> {
        self.inner.apply_and_insert_new(writes, new)
    }
    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError> {
        let read = self.inner.get(key);
        if *key == self.key && self.armed.swap(false, Ordering::SeqCst) {
            self.reached.lock().unwrap().send(()).unwrap();
            self.go.lock().unwrap().recv().unwrap();
        }
        read
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

/// Holds `client`'s next read of the key (its start-up reads are done once
/// a lookup of another key is answered); then runs `discard` of the key and
/// returns once its read is done.
async fn discard_held(
    client: &Client,
    key: &IdempotencyKey,
    hold: Hold,
) -> (
    tokio::task::JoinHandle<Result<bool, arcp_sdk::Error>>,
    mpsc::Sender<()>,
) {
    let _ = client.lookup(&IdempotencyKey::new()).await;
    hold.armed.store(true, Ordering::SeqCst);
    let discard = tokio::spawn({
        let (client, key) = (client.clone(), key.clone());
        async move { client.discard(&key).await }
    });
    let reached = hold.reached;
    tokio::task::spawn_blocking(move || reached.recv().unwrap())
        .await
        .unwrap();
    (discard, hold.go)
}

#[tokio::test]
async fn a_discard_racing_another_workers_call_of_the_key_deletes_nothing() {
    let url = postgres_or_skip!();
    let mock = MockRuntime::builder()
        .tool("refund", |args: Value, _ctx| async move {
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await
        .unwrap();
    let key = IdempotencyKey::try_from("order-race").unwrap();
    let call = |client: &Client| {
        client
            .invoke_tool("refund", json!({"order": 1}))
            .idempotency_key(key.clone())
            .deadline(Duration::from_secs(1))
            .send()
    };
    let lease = Duration::from_secs(30);

    // A record proving the key's call did not run: it never reached a
    // runtime.
    {
        let w0 = journal(&url, "w0", lease).await;
        w0.apply(&[
            JournalWrite::Prepare(entry(&key, r#"{"order":1}"#)),
            JournalWrite::Terminal {
                key: key.clone(),
                outcome: JournalOutcome::NotAccepted {
                    last_error: "could not connect".into(),
                    attempts: 0,
                    key_unused: true,
                },
                at: SystemTime::now(),
            },
        ])
        .unwrap();
    }

    // Worker b discards it; its read of the record is held.
    let (held, hold) = held_read(journal(&url, "b", lease).await, &key);
    let b = builder(&mock.ws_url())
        .journal(held)
        .connect()
        .await
        .unwrap();
    let (discard, go) = discard_held(&b, &key, hold).await;

    // Meanwhile worker a calls the key: the tool runs.
    let a = builder(&mock.ws_url())
        .journal(journal(&url, "a", lease).await)
        .connect()
        .await
        .unwrap();
    call(&a).await.unwrap();
    a.close().await;
    assert_eq!(mock.executions_for_key(key.as_str()), 1);

    go.send(()).unwrap();
    assert!(discard.await.unwrap().unwrap(), "there was a record");
    let record = b.lookup(&key).await.unwrap().expect("a's record stays");
    assert!(
        matches!(
            record.state,
            JournalState::Terminal(JournalOutcome::Ok { .. })
        ),
        "{:?}",
        record.state
    );
    b.close().await;

    // A later call of the key that sends nothing: answered from a's record
    // (had it been deleted, "not sent"; had the proof stayed, "did not
    // run").
    let c = builder(&dead_url())
        .journal(journal(&url, "c", lease).await)
        .connect_lazy();
    let answer = call(&c).await;
    c.close().await;
    assert_eq!(mock.executions_for_key(key.as_str()), 1, "the key ran once");
    match answer {
        Ok(out) => assert_eq!(out.value, json!({"refunded": 1})),
        Err(e) => assert_ne!(e.execution(), Execution::NotRun, "the key ran: {e:?}"),
    }
}

#[tokio::test]
async fn a_second_discard_of_a_call_another_worker_just_discarded_succeeds() {
    let url = postgres_or_skip!();
    let key = IdempotencyKey::try_from("order-twice").unwrap();
    // A worker that prepared the call and died: its lease lapses soon.
    {
        let dead = journal(&url, "dead", Duration::from_millis(200)).await;
        dead.apply(&[JournalWrite::Prepare(entry(&key, "{}"))])
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lease = Duration::from_secs(30);
    let (held, hold) = held_read(journal(&url, "b", lease).await, &key);
    let b = builder(&dead_url()).journal(held).connect_lazy();
    let (discard, go) = discard_held(&b, &key, hold).await;
    // b read the call unfinished; worker c discards it first.
    let c = builder(&dead_url())
        .journal(journal(&url, "c", lease).await)
        .connect_lazy();
    assert!(c.discard(&key).await.unwrap());
    c.close().await;
    go.send(()).unwrap();
    let second = discard.await.unwrap();
    assert!(matches!(second, Ok(true)), "{second:?}");
    let record = b.lookup(&key).await.unwrap().unwrap();
    assert!(
        matches!(
            record.state,
            JournalState::Terminal(JournalOutcome::OutcomeUnknown { .. })
        ),
        "{:?}",
        record.state
    );
    b.close().await;
}
