//! A journal whose commit's answer is lost and whose retry is then
//! refused, and records older than the runtime's memory of keys: a call is
//! never told "did not run" when a recovery may still send it, and a key
//! the runtime forgot is never sent again. Ground truth: arcp-mock's
//! execution counts.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arcp_mock::MockRuntime;
use arcp_sdk::{
    Client, ClientBuilder, Error, Execution, IdempotencyKey, Journal, JournalEntry, JournalError,
    JournalErrorKind, JournalOutcome, JournalState, JournalWrite, MemoryJournal, PurgeReport,
    Retention, RetryPolicy, SqliteJournal,
};
use serde_json::{json, Value};

async fn mock(retention: Option<Duration>, work: Duration) -> MockRuntime {
    let mut builder = MockRuntime::builder().tool("refund", move |args: Value, _ctx| async move {
        tokio::time::sleep(work).await;
        Ok(json!({"refunded": args["order"]}))
    });
    if let Some(retention) = retention {
        builder = builder.key_retention(retention);
    }
    builder.start().await.expect("mock")
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
                .max_elapsed(Duration::from_secs(5))
                .outcome_poll(Duration::from_millis(50)),
        )
}

/// What a test's store does with the next write.
#[derive(Default)]
struct Faults {
    /// The next write that records a call lands, but its answer is lost.
    lose_answer: AtomicBool,
    /// Every write is refused outright, as a read-only database refuses it.
    refuse: AtomicBool,
}

/// A memory journal that loses a commit's answer, then refuses writes.
struct LostThenRefused {
    inner: MemoryJournal,
    faults: Arc<Faults>,
}

impl LostThenRefused {
    fn refused(&self) -> Result<(), JournalError> {
        if self.faults.refuse.load(Ordering::SeqCst) {
            return Err(JournalError::new(
                JournalErrorKind::Io,
                "test",
                "cannot execute INSERT in a read-only transaction",
            ));
        }
        Ok(())
    }
}

impl Journal for LostThenRefused {
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError> {
        self.refused()?;
        self.inner.apply(writes)
    }
    fn apply_and_insert_new(
        &self,
        writes: &[JournalWrite],
        new: &[JournalEntry],
    ) -> Result<Vec<bool>, JournalError> {
        self.refused()?;
        let inserted = self.inner.apply_and_insert_new(writes, new)?;
        if !new.is_empty() && self.faults.lose_answer.swap(false, Ordering::SeqCst) {
            // Committed, but the answer never arrives; the store then goes
            // read-only (a failover demoted it).
            self.faults.refuse.store(true, Ordering::SeqCst);
            return Err(JournalError::new(
                JournalErrorKind::Unavailable,
                "test",
                "connection closed while committing",
            ));
        }
        Ok(inserted)
    }
    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError> {
        self.inner.get(key)
    }
    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        self.inner.unfinished(limit)
    }
    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError> {
        self.inner.purge(retention, now)
    }
}

/// The oracle: a call told "did not run" never runs, by recovery or
/// otherwise.
async fn recover_all(client: &Client) -> Vec<Result<Value, Error>> {
    let mut outcomes = Vec::new();
    for call in client.recover().await.expect("recover") {
        outcomes.push(call.await.map(|out| out.value));
    }
    outcomes
}

/// Sends a call whose record the journal fails to commit; its error.
async fn unrecorded_call(client: &Client, order: u64, deadline: Duration) -> Error {
    client
        .invoke_tool("refund", json!({"order": order}))
        .deadline(deadline)
        .send()
        .await
        .expect_err("the journal could not record the call")
}

#[tokio::test]
async fn a_lost_commit_answer_then_a_refused_retry_is_not_did_not_run() {
    let mock = mock(None, Duration::ZERO).await;
    let faults = Arc::new(Faults::default());
    faults.lose_answer.store(true, Ordering::SeqCst);
    let journal = LostThenRefused {
        inner: MemoryJournal::new(),
        faults: faults.clone(),
    };
    let client = builder(&mock.ws_url())
        .journal(journal)
        .connect()
        .await
        .unwrap();
    let told = unrecorded_call(&client, 1, Duration::from_secs(2)).await;
    assert_eq!(mock.total_executions(), 0, "nothing was sent");
    // The store is writable again; a recovery finds the record that landed.
    faults.refuse.store(false, Ordering::SeqCst);
    // The caller holds the generated key the recovery sends, to look the
    // call up (or retry it) under that key, never a new one.
    let recoverable: Vec<_> = client
        .recover()
        .await
        .unwrap()
        .iter()
        .filter_map(|call| call.key().cloned())
        .collect();
    assert_eq!(told.key(), recoverable.first(), "{told:?}");
    let recovered = recover_all(&client).await;
    let ran = mock.total_executions();
    assert!(ran <= 1, "at most once: {ran}");
    assert_ne!(
        told.execution(),
        Execution::NotRun,
        "the record landed and a recovery may send it ({told}); recovered: {recovered:?}"
    );
    client.close().await;
}

/// A SQLite journal whose file turns read-only (the file system remounted)
/// after a commit whose answer was lost: the store itself refuses the retry.
struct SqliteGoingReadOnly {
    path: PathBuf,
    inner: Mutex<Option<SqliteJournal>>,
    lose_answer: Arc<AtomicBool>,
}

impl SqliteGoingReadOnly {
    fn with<T>(
        &self,
        f: impl FnOnce(&SqliteJournal) -> Result<T, JournalError>,
    ) -> Result<T, JournalError> {
        let inner = self.inner.lock().unwrap();
        f(inner.as_ref().expect("open"))
    }
}

impl Journal for SqliteGoingReadOnly {
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError> {
        self.with(|j| j.apply(writes))
    }
    fn apply_and_insert_new(
        &self,
        writes: &[JournalWrite],
        new: &[JournalEntry],
    ) -> Result<Vec<bool>, JournalError> {
        let inserted = self.with(|j| j.apply_and_insert_new(writes, new))?;
        if !new.is_empty() && self.lose_answer.swap(false, Ordering::SeqCst) {
            let mut inner = self.inner.lock().unwrap();
            drop(inner.take());
            *inner = Some(SqliteJournal::open_read_only(&self.path).expect("read-only open"));
            return Err(JournalError::new(
                JournalErrorKind::Unavailable,
                self.path.display().to_string(),
                "the commit's answer was lost",
            ));
        }
        Ok(inserted)
    }
    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError> {
        self.with(|j| j.get(key))
    }
    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        self.with(|j| j.unfinished(limit))
    }
    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError> {
        self.with(|j| j.purge(retention, now))
    }
}

#[tokio::test]
async fn sqlite_a_lost_commit_answer_then_a_read_only_file_is_not_did_not_run() {
    let mock = mock(None, Duration::ZERO).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let journal = SqliteGoingReadOnly {
        path: path.clone(),
        inner: Mutex::new(Some(SqliteJournal::open(&path).unwrap())),
        lose_answer: Arc::new(AtomicBool::new(true)),
    };
    let client = builder(&mock.ws_url())
        .journal(journal)
        .connect()
        .await
        .unwrap();
    let told = unrecorded_call(&client, 2, Duration::from_millis(800)).await;
    client.close().await;
    assert_eq!(mock.total_executions(), 0, "nothing was sent");
    // The file is writable again; the next process recovers what landed.
    let client = builder(&mock.ws_url())
        .journal_path(&path)
        .connect()
        .await
        .unwrap();
    let recovered = recover_all(&client).await;
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

/// Leaves one call unfinished in the journal at `path` after the runtime
/// ran it: its caller gives up at its deadline while the tool works.
async fn unfinished_call(mock: &MockRuntime, path: &Path) -> IdempotencyKey {
    let client = builder(&mock.ws_url())
        .journal_path(path)
        .connect()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let e = client
        .invoke_tool("refund", json!({"order": 3}))
        .idempotency_key(key.clone())
        .deadline(Duration::from_millis(100))
        .send()
        .await
        .expect_err("the deadline passes while the tool works");
    assert_eq!(e.execution(), Execution::MayHaveRun, "{e}");
    client.close().await;
    let entry = SqliteJournal::open_read_only(path)
        .unwrap()
        .get(&key)
        .unwrap()
        .expect("recorded");
    assert!(!entry.is_terminal(), "left for recovery: {entry:?}");
    key
}

#[tokio::test]
async fn a_record_older_than_the_runtime_key_retention_is_never_re_sent() {
    let retention = Duration::from_millis(400);
    let mock = mock(Some(retention), Duration::from_millis(200)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let key = unfinished_call(&mock, &path).await;
    // The runtime ran it, then forgot the key.
    tokio::time::sleep(retention + Duration::from_millis(200)).await;
    assert_eq!(mock.executions_for_key(key.as_str()), 1);
    let client = builder(&mock.ws_url())
        .journal_path(&path)
        .runtime_key_retention(retention)
        .connect()
        .await
        .unwrap();
    let recovered = recover_all(&client).await;
    assert!(recovered.is_empty(), "nothing is re-sent: {recovered:?}");
    let entry = client.lookup(&key).await.unwrap().expect("kept");
    match &entry.state {
        JournalState::Terminal(JournalOutcome::OutcomeUnknown { reason, .. }) => {
            assert!(reason.contains("runtime_key_retention"), "{reason}");
        }
        other => panic!("ended outcome unknown, not {other:?}"),
    }
    // Re-issued under its key, it is answered, not sent.
    let again = client
        .invoke_tool("refund", json!({"order": 3}))
        .idempotency_key(key.clone())
        .send()
        .await
        .expect_err("outcome unknown");
    assert!(
        matches!(again, Error::OutcomeUnavailable { .. }),
        "{again:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(mock.executions_for_key(key.as_str()), 1, "ran once, ever");
    client.close().await;
}

#[tokio::test]
async fn a_record_within_the_runtime_key_retention_is_recovered() {
    let mock = mock(Some(Duration::from_secs(60)), Duration::from_millis(200)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let key = unfinished_call(&mock, &path).await;
    let client = builder(&mock.ws_url())
        .journal_path(&path)
        .runtime_key_retention(Duration::from_secs(60))
        .connect()
        .await
        .unwrap();
    let recovered = recover_all(&client).await;
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].as_ref().unwrap()["refunded"], 3);
    assert_eq!(mock.executions_for_key(key.as_str()), 1);
    client.close().await;
}

#[tokio::test]
async fn close_during_recovery_keeps_the_record_and_says_may_have_run() {
    let mock = mock(None, Duration::from_millis(600)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let key = unfinished_call(&mock, &path).await;
    let client = builder(&mock.ws_url())
        .journal_path(&path)
        .connect()
        .await
        .unwrap();
    let mut calls = client.recover().await.unwrap();
    assert_eq!(calls.len(), 1);
    let call = tokio::spawn(calls.remove(0));
    tokio::time::sleep(Duration::from_millis(50)).await;
    tokio::time::timeout(Duration::from_secs(5), client.close())
        .await
        .expect("close() returns");
    let outcome = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the recovered call ends")
        .unwrap();
    if let Err(e) = &outcome {
        assert_ne!(e.execution(), Execution::NotRun, "{e}");
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(mock.executions_for_key(key.as_str()), 1, "ran once");
    // The record still says what is known: unfinished, or the outcome.
    let entry = SqliteJournal::open_read_only(&path)
        .unwrap()
        .get(&key)
        .unwrap()
        .expect("kept");
    if outcome.is_err() {
        assert!(
            !matches!(
                entry.state,
                JournalState::Terminal(JournalOutcome::NotAccepted { .. })
            ),
            "{entry:?}"
        );
    }
}

/// A store whose first commit of a new record lands after a delay (a slow
/// disk, a database under load).
struct SlowCommits {
    inner: MemoryJournal,
    delay: Duration,
    slowed: AtomicBool,
}

impl Journal for SlowCommits {
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError> {
        self.inner.apply(writes)
    }
    fn apply_and_insert_new(
        &self,
        writes: &[JournalWrite],
        new: &[JournalEntry],
    ) -> Result<Vec<bool>, JournalError> {
        if !new.is_empty() && !self.slowed.swap(true, Ordering::SeqCst) {
            std::thread::sleep(self.delay);
        }
        self.inner.apply_and_insert_new(writes, new)
    }
    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError> {
        self.inner.get(key)
    }
    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        self.inner.unfinished(limit)
    }
    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError> {
        self.inner.purge(retention, now)
    }
}

/// A supplied key whose call ends (its deadline) while its prepare is
/// still being committed: the prepare lands unseen, and a recovery sends
/// it. The call must not say "not sent" or "did not run" for it.
#[tokio::test]
async fn a_prepare_that_lands_after_its_call_ended_may_have_run() {
    let mock = mock(None, Duration::ZERO).await;
    let journal = SlowCommits {
        inner: MemoryJournal::new(),
        delay: Duration::from_millis(400),
        slowed: AtomicBool::new(false),
    };
    let client = builder(&mock.ws_url())
        .journal(journal)
        .connect()
        .await
        .unwrap();
    let told = client
        .invoke_tool("refund", json!({"order": 7}))
        .idempotency_key(IdempotencyKey::new())
        .deadline(Duration::from_millis(100))
        .send()
        .await
        .expect_err("the deadline passes while the prepare is committed");
    assert_eq!(mock.total_executions(), 0, "nothing was sent by the call");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let recovered = recover_all(&client).await;
    assert_eq!(
        mock.total_executions(),
        1,
        "the recovery sent it: {recovered:?}"
    );
    assert_eq!(
        told.execution(),
        Execution::MayHaveRun,
        "its record landed and a recovery sent it: {told}"
    );
    client.close().await;
}

/// A store whose commits of new records are slowed once `slow` is set.
struct SlowPrepares {
    inner: SqliteJournal,
    delay: Duration,
    slow: Arc<AtomicBool>,
}

impl Journal for SlowPrepares {
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError> {
        self.inner.apply(writes)
    }
    fn apply_and_insert_new(
        &self,
        writes: &[JournalWrite],
        new: &[JournalEntry],
    ) -> Result<Vec<bool>, JournalError> {
        if !new.is_empty() && self.slow.load(Ordering::SeqCst) {
            std::thread::sleep(self.delay);
        }
        self.inner.apply_and_insert_new(writes, new)
    }
    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError> {
        self.inner.get(key)
    }
    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        self.inner.unfinished(limit)
    }
    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError> {
        self.inner.purge(retention, now)
    }
}

/// A caller re-issues the key of an unfinished record (its earlier call
/// ran), and the client is closed while the journal commits the re-issue's
/// prepare: the call finds the connection gone. The earlier attempt may
/// have run it: "may have run", never "did not run".
#[tokio::test]
async fn close_during_a_re_issue_of_an_unfinished_key_says_may_have_run() {
    let mock = mock(None, Duration::from_millis(300)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let key = unfinished_call(&mock, &path).await;
    let slow = Arc::new(AtomicBool::new(false));
    let journal = SlowPrepares {
        inner: SqliteJournal::open(&path).unwrap(),
        delay: Duration::from_millis(300),
        slow: slow.clone(),
    };
    let client = builder(&mock.ws_url())
        .journal(journal)
        .connect()
        .await
        .unwrap();
    slow.store(true, Ordering::SeqCst);
    let call = tokio::spawn(
        client
            .invoke_tool("refund", json!({"order": 3}))
            .idempotency_key(key.clone())
            .send(),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The runtime stops answering: the connection's close takes a while,
    // and the prepare is answered meanwhile.
    mock.inject(arcp_mock::Fault::BlackHole);
    tokio::time::timeout(Duration::from_secs(5), client.close())
        .await
        .expect("close() returns");
    let outcome = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the call ends")
        .unwrap();
    mock.inject(arcp_mock::Fault::Recover);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(mock.executions_for_key(key.as_str()), 1, "ran once");
    let e = outcome.expect_err("the client closed");
    assert_eq!(e.execution(), Execution::MayHaveRun, "{e:?}");
}

/// A memory store shared by two clients whose next commit of a `Prepare`
/// through `apply` goes unanswered and is held, for the test to land later
/// (a database that committed after the connection carrying its answer was
/// lost).
#[derive(Clone)]
struct LateReplacingPrepare {
    inner: Arc<MemoryJournal>,
    hold_next: Arc<AtomicBool>,
    held: Arc<Mutex<Option<Vec<JournalWrite>>>>,
}

impl LateReplacingPrepare {
    /// Lands the held commit.
    fn land(&self) {
        let writes = self.held.lock().unwrap().take().expect("a commit held");
        self.inner.apply(&writes).expect("the late commit lands");
    }
}

impl Journal for LateReplacingPrepare {
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError> {
        let prepares = writes.iter().any(|w| matches!(w, JournalWrite::Prepare(_)));
        if prepares && self.hold_next.swap(false, Ordering::SeqCst) {
            *self.held.lock().unwrap() = Some(writes.to_vec());
            return Err(JournalError::new(
                JournalErrorKind::Unavailable,
                "test",
                "connection closed while committing",
            ));
        }
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
        self.inner.get(key)
    }
    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        self.inner.unfinished(limit)
    }
    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError> {
        self.inner.purge(retention, now)
    }
}

/// A key whose earlier call did not run is called again; that call's
/// prepare replaces the key's record in a commit whose answer is lost, and
/// the retry commits. The call then ends before anything is sent (the
/// runtime refuses its token). The unanswered commit lands later, over the
/// call's "did not run" record, and another worker's recovery sends it: the
/// call must have said it may have run.
#[tokio::test]
async fn a_replacing_prepare_that_lands_late_is_not_did_not_run() {
    let mock = MockRuntime::builder()
        .token("good", "alice")
        .tool("refund", |args: Value, _ctx| async move {
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await
        .expect("mock");
    let store = LateReplacingPrepare {
        inner: Arc::new(MemoryJournal::new()),
        hold_next: Arc::new(AtomicBool::new(false)),
        held: Arc::new(Mutex::new(None)),
    };
    let refused = builder(&mock.ws_url())
        .bearer_token("expired")
        .journal(store.clone())
        .connect_lazy();
    let key = IdempotencyKey::new();
    let call = || {
        refused
            .invoke_tool("refund", json!({"order": 5}))
            .idempotency_key(key.clone())
            .deadline(Duration::from_secs(2))
            .send()
    };
    let first = call().await.expect_err("the token is refused");
    assert_eq!(first.execution(), Execution::NotSent, "{first}");
    store.hold_next.store(true, Ordering::SeqCst);
    let told = call().await.expect_err("the token is refused");
    refused.close().await;
    assert_eq!(mock.total_executions(), 0, "nothing was sent");

    // The unanswered commit lands after all.
    store.land();
    let worker = builder(&mock.ws_url())
        .bearer_token("good")
        .journal(store.clone())
        .connect()
        .await
        .unwrap();
    let recovered = recover_all(&worker).await;
    assert_eq!(
        mock.total_executions(),
        1,
        "the late record is unfinished: the recovery sends it ({recovered:?})"
    );
    // Neither "did not run" nor "not sent" (this call's own record ran).
    assert_eq!(
        told.execution(),
        Execution::MayHaveRun,
        "the late record was recovered and ran ({told})"
    );
    worker.close().await;
}
