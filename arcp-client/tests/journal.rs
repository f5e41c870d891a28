//! The journal's behaviour within one process: records and lookups,
//! answers across a restart, conflicts, recovery of calls whose outcome was
//! unavailable, retention, and the typed errors of a corrupt, foreign or
//! locked journal at start-up.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arcp_mock::{MockRuntime, ReplayPolicy};
use arcp_sdk::{
    Client, ClientBuilder, Error, Execution, IdempotencyKey, Journal, JournalEntry,
    JournalErrorKind, JournalOutcome, JournalState, MemoryJournal, RecoveryMode, Retention,
    RetryPolicy, SqliteJournal,
};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

async fn mock() -> MockRuntime {
    MockRuntime::builder()
        .tool("refund", |args: Value, _ctx| async move {
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await
        .expect("mock")
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
                .max_elapsed(Duration::from_secs(5))
                .outcome_poll(Duration::from_millis(100)),
        )
}

fn submits(mock: &MockRuntime, key: &str) -> usize {
    mock.received()
        .iter()
        .filter(|e| e.kind == "job.submit" && e.payload["idempotency_key"] == key)
        .count()
}

#[tokio::test]
async fn a_call_is_recorded_from_prepared_to_terminal() {
    let mock = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let client = builder(&mock.ws_url())
        .journal_path(&path)
        .connect()
        .await
        .unwrap();
    let out = client
        .invoke_tool("refund", json!({"order": 1, "cents": 2.50}))
        .option("max_runtime_sec", json!(30))
        .send()
        .await
        .unwrap();
    let entry = client.lookup(&out.key).await.unwrap().expect("recorded");
    assert_eq!(entry.tool, "refund");
    assert_eq!(entry.trace_id, out.trace_id);
    assert_eq!(entry.attempts, 1);
    assert_eq!(entry.job_id(), out.job_id.as_deref());
    assert_eq!(
        entry.intent,
        format!(
            r#"{{"tool":"refund","arguments":{{"cents":2.5,"order":1}},"idempotency_key":"{}","max_runtime_sec":30}}"#,
            out.key
        ),
        "the intent is the serialized payload, byte for byte"
    );
    match &entry.state {
        JournalState::Terminal(JournalOutcome::Ok { value, .. }) => {
            assert_eq!(value, &json!({"refunded": 1}))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(entry.outcome().unwrap().unwrap().value, out.value);
    assert!(client
        .lookup(&IdempotencyKey::new())
        .await
        .unwrap()
        .is_none());
    client.close().await;
    // close() released the file.
    SqliteJournal::open(&path).expect("unlocked after close");
}

#[tokio::test]
async fn a_restarted_client_answers_a_finished_key_from_the_journal() {
    let mock = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let key = IdempotencyKey::try_from("refund-order-7").unwrap();
    let args = json!({"order": 7});

    let first = builder(&mock.ws_url())
        .journal_path(&path)
        .connect()
        .await
        .unwrap();
    let a = first
        .invoke_tool("refund", args.clone())
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    first.close().await;
    drop(first);

    // "Restart": a new client, same file. The same call is answered from the
    // journal without reaching the runtime; another intent is refused.
    let second = builder(&mock.ws_url())
        .journal_path(&path)
        .connect()
        .await
        .unwrap();
    let b = second
        .invoke_tool("refund", args.clone())
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(b.value, a.value);
    assert_eq!(b.job_id, a.job_id);
    assert!(b.replayed && !a.replayed);
    assert_eq!(submits(&mock, key.as_str()), 1);
    let conflict = second
        .invoke_tool("refund", json!({"order": 8}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(conflict, Error::DuplicateKey { attempts: 0, .. }),
        "{conflict:?}"
    );
    assert_eq!(submits(&mock, key.as_str()), 1);
    assert_eq!(mock.executions("refund"), 1);
    // Nothing to recover: the call ended.
    assert!(second.recover().await.unwrap().is_empty());
    // Discarding ends the record "outcome unknown": the key is no longer
    // answered from the journal, but the journal does not forget it ran.
    assert!(second.discard(&key).await.unwrap());
    let record = second.lookup(&key).await.unwrap().expect("kept");
    assert!(
        matches!(
            record.state,
            JournalState::Terminal(JournalOutcome::OutcomeUnknown { .. })
        ),
        "{record:?}"
    );
    assert!(second.recover().await.unwrap().is_empty());
}

#[tokio::test]
async fn an_unfinished_call_stays_unfinished_and_recover_delivers_it() {
    // The call's deadline passes while the tool still runs: the outcome is
    // unknown, so the record stays unfinished. recover() re-drives it under
    // its key; the runtime replays the stored result. The tool ran once.
    let release = Arc::new(Semaphore::new(0));
    let gate = release.clone();
    let mock = MockRuntime::builder()
        .tool("refund", move |args: Value, _ctx| {
            let gate = gate.clone();
            async move {
                let _p = gate.acquire().await;
                Ok(json!({"refunded": args["order"]}))
            }
        })
        .replay_policy(ReplayPolicy::TerminalReplay)
        .start()
        .await
        .unwrap();
    let client = builder(&mock.ws_url())
        .journal(MemoryJournal::new())
        .connect()
        .await
        .unwrap();
    let err = client
        .invoke_tool("refund", json!({"order": 9}))
        .deadline(Duration::from_millis(200))
        .send()
        .await
        .unwrap_err();
    let Error::DeadlineExceeded { key, .. } = &err else {
        panic!("{err:?}");
    };
    let entry = client.lookup(key).await.unwrap().expect("recorded");
    assert!(
        matches!(entry.state, JournalState::Accepted { .. }),
        "{entry:?}"
    );
    let job = entry.job_id().expect("accepted").to_owned();
    // Let the job finish, so the runtime has a stored result to replay.
    release.add_permits(1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let calls = client.recover().await.unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].key(), Some(key));
    let out = futures_util::future::join_all(calls)
        .await
        .remove(0)
        .unwrap();
    assert_eq!(out.value, json!({"refunded": 9}));
    // The same job: the stored result, not a second execution. (The replay
    // arrives on the same session, so the client cannot tell it is one.)
    assert_eq!(out.job_id.as_deref(), Some(job.as_str()));
    assert_eq!(out.key, *key);
    assert_eq!(mock.executions("refund"), 1);
    let entry = client.lookup(key).await.unwrap().unwrap();
    assert!(entry.is_terminal());
    assert!(client.recover().await.unwrap().is_empty());
}

/// Waits until the journal records every one of `keys` as ended (a
/// recovery in the background drives them); fails after `within`.
async fn until_terminal(client: &Client, keys: &[IdempotencyKey], within: Duration) {
    let start = std::time::Instant::now();
    for key in keys {
        loop {
            let entry = client.lookup(key).await.unwrap().expect("recorded");
            if entry.is_terminal() {
                break;
            }
            assert!(start.elapsed() < within, "never recovered: {entry:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Calls whose outcome stays unknown come back among the oldest at every
/// claim: with 256 or more of them (a whole claim), one recovery pass
/// still reaches the younger calls behind them, and drives each call once.
#[tokio::test]
async fn a_recovery_pass_reaches_calls_behind_a_claim_of_stuck_ones() {
    let mock = MockRuntime::builder()
        .tool("refund", |args: Value, _ctx| async move {
            Ok(json!({"refunded": args["order"]}))
        })
        .tool("hang", |_args: Value, ctx| async move {
            ctx.sleep(Duration::from_secs(60)).await;
            Ok(json!(null))
        })
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let old = std::time::SystemTime::now() - Duration::from_secs(60);
    let young: Vec<IdempotencyKey> = (0..3).map(|_| IdempotencyKey::new()).collect();
    {
        let j = SqliteJournal::open(&path).unwrap();
        let mut writes = Vec::new();
        for i in 0..260 {
            let key = IdempotencyKey::try_from(format!("stuck-{i}")).unwrap();
            let intent =
                format!(r#"{{"tool":"hang","arguments":{{"n":{i}}},"idempotency_key":"{key}"}}"#);
            let mut entry = prepared(&key, &intent);
            entry.tool = "hang".into();
            entry.deadline = Duration::from_millis(200);
            entry.created_at = old;
            entry.updated_at = old;
            writes.push(arcp_sdk::JournalWrite::Prepare(entry));
        }
        for (i, key) in young.iter().enumerate() {
            let intent = format!(
                r#"{{"tool":"refund","arguments":{{"order":{i}}},"idempotency_key":"{key}"}}"#
            );
            writes.push(arcp_sdk::JournalWrite::Prepare(prepared(key, &intent)));
        }
        j.apply(&writes).unwrap();
    }
    let client = builder(&mock.ws_url())
        .journal_path(&path)
        .recovery(RecoveryMode::Automatic)
        .connect()
        .await
        .unwrap();
    let start = std::time::Instant::now();
    until_terminal(&client, &young, Duration::from_secs(20)).await;
    for key in &young {
        assert_eq!(mock.executions_for_key(key.as_str()), 1);
    }
    // The stuck calls were each driven once, and stay unfinished: once the
    // automatic pass has ended (their deadlines pass), a new pass hands each
    // of them out once.
    assert_eq!(mock.executions("hang"), 260);
    let pass = loop {
        let mut pass = client.recovery_pass();
        loop {
            let batch = pass.next_batch().await.unwrap();
            if batch.is_empty() {
                break;
            }
            assert!(
                batch.iter().all(|call| call
                    .key()
                    .is_some_and(|key| key.as_str().starts_with("stuck-"))),
                "only the stuck calls are unfinished"
            );
        }
        if pass.handed_out().len() == 260 || start.elapsed() > Duration::from_secs(20) {
            break pass;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(pass.handed_out().len(), 260);
    client.close().await;
}

/// A claim whose calls are all past the runtime's key retention ends them
/// without handing any out: the pass claims on, and reaches the live calls
/// behind them (by hand and automatically).
#[tokio::test]
async fn a_pass_reaches_live_calls_behind_a_claim_of_expired_ones() {
    for automatic in [false, true] {
        let mock = mock().await;
        let journal = MemoryJournal::new();
        let old = std::time::SystemTime::now() - Duration::from_secs(7_200);
        let mut writes = Vec::new();
        let record = |key: &IdempotencyKey, order: usize| {
            let intent = format!(
                r#"{{"tool":"refund","arguments":{{"order":{order}}},"idempotency_key":"{key}"}}"#
            );
            prepared(key, &intent)
        };
        let expired: Vec<IdempotencyKey> = (0..300)
            .map(|i| IdempotencyKey::try_from(format!("expired-{i:04}")).unwrap())
            .collect();
        for (i, key) in expired.iter().enumerate() {
            let mut e = record(key, i);
            e.created_at = old;
            e.updated_at = old;
            writes.push(arcp_sdk::JournalWrite::Prepare(e));
        }
        let live: Vec<IdempotencyKey> = (0..5).map(|_| IdempotencyKey::new()).collect();
        for (i, key) in live.iter().enumerate() {
            writes.push(arcp_sdk::JournalWrite::Prepare(record(key, 1_000 + i)));
        }
        journal.apply(&writes).unwrap();
        let mut builder = builder(&mock.ws_url())
            .journal(journal)
            .runtime_key_retention(Duration::from_secs(3_600));
        if automatic {
            builder = builder.recovery(RecoveryMode::Automatic);
        }
        let client = builder.connect().await.unwrap();
        if !automatic {
            let mut pass = client.recovery_pass();
            loop {
                let batch = pass.next_batch().await.unwrap();
                if batch.is_empty() {
                    break;
                }
                for call in batch {
                    call.await.unwrap();
                }
            }
            assert_eq!(pass.handed_out().len(), 5, "only the live calls are sent");
        }
        let all: Vec<IdempotencyKey> = live.iter().chain(&expired).cloned().collect();
        until_terminal(&client, &all, Duration::from_secs(10)).await;
        for key in &live {
            assert_eq!(mock.executions_for_key(key.as_str()), 1);
        }
        assert_eq!(mock.total_executions(), 5, "no expired call was sent");
        client.close().await;
    }
}

/// A call handed out by `recover` is this client's from then on, awaited
/// or not: a second `recover` (or a recovery pass) meanwhile never hands
/// it out again. Dropped unawaited, it is given back.
#[tokio::test]
async fn a_handed_out_call_is_not_handed_out_again_before_it_is_awaited() {
    let mock = mock().await;
    let journal = MemoryJournal::new();
    let keys: Vec<IdempotencyKey> = (0..10).map(|_| IdempotencyKey::new()).collect();
    let writes: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let intent = format!(
                r#"{{"tool":"refund","arguments":{{"order":{i}}},"idempotency_key":"{key}"}}"#
            );
            arcp_sdk::JournalWrite::Prepare(prepared(key, &intent))
        })
        .collect();
    journal.apply(&writes).unwrap();
    let client = builder(&mock.ws_url())
        .journal(journal)
        .connect()
        .await
        .unwrap();
    let first = client.recover().await.unwrap();
    assert_eq!(first.len(), 10);
    assert!(client.recover().await.unwrap().is_empty());
    let mut pass = client.recovery_pass();
    assert!(pass.next_batch().await.unwrap().is_empty());
    // Given back when dropped unawaited.
    drop(first);
    let again = client.recover().await.unwrap();
    assert_eq!(again.len(), 10);
    for call in again {
        call.await.unwrap();
    }
    assert_eq!(mock.total_executions(), 10);
    assert!(client.recover().await.unwrap().is_empty());
    client.close().await;
}

/// A recovered call's deadline (its record's) counts from when it is first
/// awaited, not from `recover()`: a worker driving a batch a few calls at a
/// time would otherwise see the later calls' short deadlines pass before
/// they were sent, and leave them unfinished.
#[tokio::test]
async fn a_recovered_calls_deadline_counts_from_its_first_await() {
    let mock = mock().await;
    let key = IdempotencyKey::new();
    let intent =
        format!(r#"{{"tool":"refund","arguments":{{"order":12}},"idempotency_key":"{key}"}}"#);
    let mut entry = prepared(&key, &intent);
    entry.deadline = Duration::from_millis(300);
    let journal = MemoryJournal::new();
    journal
        .apply(&[arcp_sdk::JournalWrite::Prepare(entry)])
        .unwrap();
    let client = builder(&mock.ws_url())
        .journal(journal)
        .connect()
        .await
        .unwrap();
    let mut calls = client.recover().await.unwrap();
    assert_eq!(calls.len(), 1);
    // Longer than the record's deadline, before the call is driven.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let out = calls
        .remove(0)
        .await
        .expect("driven within its own deadline");
    assert_eq!(out.value, json!({"refunded": 12}));
    assert_eq!(mock.executions_for_key(key.as_str()), 1);
}

#[tokio::test]
async fn automatic_recovery_redrives_on_connect() {
    let mock = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    // A record left behind by a "crashed" process: prepared, never sent.
    let key = IdempotencyKey::new();
    {
        let j = SqliteJournal::open(&path).unwrap();
        let intent =
            format!(r#"{{"tool":"refund","arguments":{{"order":11}},"idempotency_key":"{key}"}}"#);
        j.apply(&[arcp_sdk::JournalWrite::Prepare(prepared(&key, &intent))])
            .unwrap();
    }
    let client = builder(&mock.ws_url())
        .journal_path(&path)
        .recovery(RecoveryMode::Automatic)
        .connect()
        .await
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        let entry = client.lookup(&key).await.unwrap().unwrap();
        if entry.is_terminal() {
            assert_eq!(
                entry.outcome().unwrap().unwrap().value,
                json!({"refunded": 11})
            );
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{entry:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(mock.executions_for_key(key.as_str()), 1);
}

/// A record a crashed process left is in doubt: its send is recorded
/// after the fact, so the process may have sent it. Re-driven against a
/// runtime that refuses every submit before acceptance, the call must not
/// report "did not run", and its record stays unfinished for a later
/// recovery (a false "did not run" invites a retry under a new key).
#[tokio::test]
async fn a_recovered_call_refused_until_its_budget_is_spent_may_have_run() {
    let mock = mock().await;
    mock.inject_always(arcp_mock::Fault::RejectNextSubmit {
        code: arcp_mock::ErrorCode::Unavailable,
        retry_after: None,
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let key = IdempotencyKey::new();
    {
        let j = SqliteJournal::open(&path).unwrap();
        let intent =
            format!(r#"{{"tool":"refund","arguments":{{"order":12}},"idempotency_key":"{key}"}}"#);
        j.apply(&[arcp_sdk::JournalWrite::Prepare(prepared(&key, &intent))])
            .unwrap();
    }
    let client = builder(&mock.ws_url())
        .journal_path(&path)
        .connect()
        .await
        .unwrap();
    let calls = client.recover().await.unwrap();
    assert_eq!(calls.len(), 1);
    let err = futures_util::future::join_all(calls)
        .await
        .remove(0)
        .unwrap_err();
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err:?}");
    assert!(
        submits(&mock, key.as_str()) > 1,
        "re-sent until the budget was spent"
    );
    assert_eq!(mock.executions_for_key(key.as_str()), 0);
    let entry = client.lookup(&key).await.unwrap().unwrap();
    assert!(!entry.is_terminal(), "{entry:?}");
    assert_eq!(
        client.recover().await.unwrap().len(),
        1,
        "still recoverable"
    );
}

/// A journal whose reads fail on demand (a database that drops off for a
/// moment); writes go through.
struct FlakyReads {
    inner: MemoryJournal,
    failing: Arc<std::sync::atomic::AtomicBool>,
}

impl Journal for FlakyReads {
    fn apply(&self, writes: &[arcp_sdk::JournalWrite]) -> Result<(), arcp_sdk::JournalError> {
        self.inner.apply(writes)
    }
    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, arcp_sdk::JournalError> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(arcp_sdk::JournalError::new(
                JournalErrorKind::Io,
                "flaky",
                "connection reset",
            ));
        }
        self.inner.get(key)
    }
    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, arcp_sdk::JournalError> {
        self.inner.unfinished(limit)
    }
    fn purge(
        &self,
        retention: &Retention,
        now: std::time::SystemTime,
    ) -> Result<arcp_sdk::PurgeReport, arcp_sdk::JournalError> {
        self.inner.purge(retention, now)
    }
}

/// A journal failure while re-driving a call that may have been sent is
/// not "did not run": the call reports its outcome unknown, and the record
/// stays unfinished instead of being closed as never accepted.
#[tokio::test]
async fn a_journal_failure_while_re_driving_a_call_leaves_it_in_doubt() {
    let mock = mock().await;
    let key = IdempotencyKey::new();
    let inner = MemoryJournal::new();
    let intent =
        format!(r#"{{"tool":"refund","arguments":{{"order":13}},"idempotency_key":"{key}"}}"#);
    inner
        .apply(&[
            arcp_sdk::JournalWrite::Prepare(prepared(&key, &intent)),
            arcp_sdk::JournalWrite::Sent {
                key: key.clone(),
                attempts: 1,
                at: std::time::SystemTime::now(),
            },
        ])
        .unwrap();
    let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = builder(&mock.ws_url())
        .journal(FlakyReads {
            inner,
            failing: failing.clone(),
        })
        .connect()
        .await
        .unwrap();
    let calls = client.recover().await.unwrap();
    assert_eq!(calls.len(), 1);
    failing.store(true, std::sync::atomic::Ordering::SeqCst);
    let err = futures_util::future::join_all(calls)
        .await
        .remove(0)
        .unwrap_err();
    failing.store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err:?}");
    assert!(err.to_string().contains("connection reset"), "{err}");
    let entry = client.lookup(&key).await.unwrap().unwrap();
    assert!(!entry.is_terminal(), "{entry:?}");
}

/// A prepared record, as a crashed process leaves it.
fn prepared(key: &IdempotencyKey, intent: &str) -> JournalEntry {
    JournalEntry::new(
        key.clone(),
        "refund",
        intent,
        "0123456789abcdef0123456789abcdef",
        Duration::from_secs(10),
    )
}

#[tokio::test]
async fn terminal_records_expire_and_the_record_count_is_capped() {
    let mock = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let client = builder(&mock.ws_url())
        .journal_path(&path)
        .journal_retention(Retention::default().max_records(5))
        .connect()
        .await
        .unwrap();
    let mut keys = Vec::new();
    for i in 0..20 {
        keys.push(
            client
                .invoke_tool("refund", json!({"order": i}))
                .await
                .unwrap()
                .key,
        );
    }
    client.close().await;
    let j = SqliteJournal::open(&path).unwrap();
    let count = keys.iter().filter(|k| j.get(k).unwrap().is_some()).count();
    assert!(count <= 5, "{count} records kept; the cap is 5");
    assert!(
        j.get(keys.last().unwrap()).unwrap().is_some(),
        "the newest stays"
    );
    drop(j);

    // A zero TTL: terminal records go at the next purge.
    let client = builder(&mock.ws_url())
        .journal_path(&path)
        .journal_retention(
            Retention::default()
                .terminal_ttl(Duration::ZERO)
                .purge_interval(Duration::from_millis(20)),
        )
        .connect()
        .await
        .unwrap();
    let out = client
        .invoke_tool("refund", json!({"order": 99}))
        .await
        .unwrap();
    let start = std::time::Instant::now();
    while client.lookup(&out.key).await.unwrap().is_some() {
        assert!(start.elapsed() < Duration::from_secs(5), "never purged");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_journal_full_of_unfinished_calls_refuses_new_ones() {
    // Calls that time out stay unfinished; with room for 2 records, the
    // third call is refused before it is sent.
    let release = Arc::new(Semaphore::new(0));
    let gate = release.clone();
    let mock = MockRuntime::builder()
        .tool("slow", move |_args: Value, _ctx| {
            let gate = gate.clone();
            async move {
                let _p = gate.acquire().await;
                Ok(json!(null))
            }
        })
        .start()
        .await
        .unwrap();
    let client = builder(&mock.ws_url())
        .journal(MemoryJournal::new())
        .journal_retention(Retention::default().max_records(2))
        .connect()
        .await
        .unwrap();
    for i in 0..2 {
        let err = client
            .invoke_tool("slow", json!({"i": i}))
            .deadline(Duration::from_millis(100))
            .send()
            .await
            .unwrap_err();
        assert!(matches!(err, Error::DeadlineExceeded { .. }), "{err:?}");
    }
    let err = client
        .invoke_tool("slow", json!({"i": 2}))
        .send()
        .await
        .unwrap_err();
    let Error::Journal(e) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(e.kind, JournalErrorKind::Full);
    assert_eq!(err.code_name(), "JOURNAL_FULL");
    assert_eq!(mock.executions("slow"), 2, "the refused call was not sent");
    // Recovering them makes room.
    release.add_permits(10);
    for call in client.recover().await.unwrap() {
        call.await.unwrap();
    }
    client
        .invoke_tool("slow", json!({"i": 2}))
        .send()
        .await
        .expect("room again");
}

// ----- start-up errors ------------------------------------------------------------

async fn connect_err(path: &Path) -> arcp_sdk::JournalError {
    let mock = mock().await;
    match builder(&mock.ws_url()).journal_path(path).connect().await {
        Err(Error::Journal(e)) => {
            assert_eq!(e.location, path.display().to_string());
            e
        }
        other => panic!("expected a journal error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    std::fs::write(
        &path,
        "this is not a SQLite database, but it is long enough to have a header\n".repeat(20),
    )
    .unwrap();
    private(&path);
    let e = connect_err(&path).await;
    assert_eq!(e.kind, JournalErrorKind::Corrupt, "{e}");
    assert_eq!(Error::Journal(e.clone()).code_name(), "JOURNAL_CORRUPT");
    // Left untouched.
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .starts_with("this is not"));
}

#[tokio::test]
async fn a_damaged_journal_is_refused_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    {
        let mock = mock().await;
        let client = builder(&mock.ws_url())
            .journal_path(&path)
            .connect()
            .await
            .unwrap();
        for i in 0..200 {
            client
                .invoke_tool("refund", json!({"order": i, "pad": "x".repeat(200)}))
                .await
                .unwrap();
        }
        client.close().await;
    }
    // Checkpoint the WAL into the main file, then overwrite a page in the
    // middle (not the header) with garbage.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        conn.pragma_update(None, "journal_mode", "DELETE").unwrap();
    }
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 8 * 4096, "{} bytes", bytes.len());
    for b in &mut bytes[3 * 4096..5 * 4096] {
        *b = 0xA5;
    }
    std::fs::write(&path, bytes).unwrap();
    let e = connect_err(&path).await;
    assert_eq!(e.kind, JournalErrorKind::Corrupt, "{e}");
}

#[tokio::test]
async fn a_database_of_something_else_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users (name) VALUES ('ada');")
            .unwrap();
    }
    private(&path);
    let e = connect_err(&path).await;
    assert_eq!(e.kind, JournalErrorKind::Schema, "{e}");
    assert!(e.message.contains("users"), "{e}");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM users", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn a_journal_of_a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    drop(SqliteJournal::open(&path).unwrap());
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
    }
    let e = connect_err(&path).await;
    assert_eq!(e.kind, JournalErrorKind::Schema, "{e}");
    assert!(e.message.contains("99"), "{e}");
}

#[tokio::test]
async fn a_journal_held_by_another_client_is_refused_as_locked() {
    let mock = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let holder = builder(&mock.ws_url())
        .journal_path(&path)
        .connect()
        .await
        .unwrap();
    let e = connect_err(&path).await;
    assert_eq!(e.kind, JournalErrorKind::Locked, "{e}");
    let err = Error::Journal(e);
    assert_eq!(err.code_name(), "JOURNAL_LOCKED");
    assert!(err.is_retryable());
    // The holder is unaffected, and once it closes the file opens.
    holder
        .invoke_tool("refund", json!({"order": 1}))
        .await
        .unwrap();
    holder.close().await;
    let other = builder(&mock.ws_url())
        .journal_path(&path)
        .connect()
        .await
        .expect("free after close");
    other.close().await;
}

#[tokio::test]
async fn a_missing_directory_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let e = connect_err(&dir.path().join("no/such/dir/j.db")).await;
    assert_eq!(e.kind, JournalErrorKind::Io, "{e}");
}

#[tokio::test]
async fn a_journal_instance_survives_a_failed_connect_and_serves_one_client() {
    // A free port with nothing listening yet.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("ws://127.0.0.1:{port}/arcp");
    let configured = builder(&url)
        .connect_budget(Duration::from_millis(300))
        .journal(MemoryJournal::new());
    let err = configured.clone().connect().await.unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    // The runtime comes up; a clone of the same builder connects with the
    // journal it was given.
    let mock = MockRuntime::builder()
        .port(port)
        .tool("refund", |args: Value, _ctx| async move {
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await
        .unwrap();
    let client = configured.clone().connect().await.expect("connects");
    let out = client
        .invoke_tool("refund", json!({"order": 3}))
        .await
        .unwrap();
    assert!(client.lookup(&out.key).await.unwrap().is_some());
    // A second client cannot share that journal.
    match configured.connect().await {
        Err(Error::Journal(e)) => assert_eq!(e.kind, JournalErrorKind::Locked, "{e}"),
        other => panic!("{other:?}"),
    }
    drop(mock);
}

/// A journal that keeps every write it is given, in order.
struct Recording {
    inner: MemoryJournal,
    writes: Arc<std::sync::Mutex<Vec<arcp_sdk::JournalWrite>>>,
}

impl Journal for Recording {
    fn apply(&self, writes: &[arcp_sdk::JournalWrite]) -> Result<(), arcp_sdk::JournalError> {
        self.writes.lock().unwrap().extend_from_slice(writes);
        self.inner.apply(writes)
    }
    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, arcp_sdk::JournalError> {
        self.inner.get(key)
    }
    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, arcp_sdk::JournalError> {
        self.inner.unfinished(limit)
    }
    fn purge(
        &self,
        retention: &Retention,
        now: std::time::SystemTime,
    ) -> Result<arcp_sdk::PurgeReport, arcp_sdk::JournalError> {
        self.inner.purge(retention, now)
    }
}

/// The kinds of write `log` holds for `key`, in order.
fn writes_of(log: &[arcp_sdk::JournalWrite], key: &IdempotencyKey) -> Vec<&'static str> {
    use arcp_sdk::JournalWrite as W;
    log.iter()
        .filter_map(|w| match w {
            W::Prepare(e) if &e.key == key => Some("prepare"),
            W::Sent { key: k, .. } if k == key => Some("sent"),
            W::Accepted { key: k, .. } if k == key => Some("accepted"),
            W::Terminal { key: k, .. } if k == key => Some("terminal"),
            W::Release { key: k } if k == key => Some("release"),
            W::Remove { key: k } if k == key => Some("remove"),
            _ => None,
        })
        .collect()
}

/// A call that ends soon after it was sent records its sent and accepted
/// marks in its terminal write (one change of the record, not three); a
/// call that runs longer has them recorded while it runs, with the job it
/// was bound to.
#[tokio::test]
async fn a_calls_marks_ride_in_its_end_unless_it_runs_long() {
    let mock = MockRuntime::builder()
        .tool("fast", |args: Value, _ctx| async move { Ok(args) })
        .tool("slow", |args: Value, _ctx| async move {
            tokio::time::sleep(Duration::from_millis(600)).await;
            Ok(args)
        })
        .start()
        .await
        .unwrap();
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let client = builder(&mock.ws_url())
        .journal(Recording {
            inner: MemoryJournal::new(),
            writes: log.clone(),
        })
        .connect()
        .await
        .unwrap();

    // Calls in flight together: batches are committed back to back, so a
    // mark is never far from a commit it could ride in.
    let mut fast = Vec::new();
    for round in 0..4 {
        let calls = (0..32).map(|i| {
            let client = client.clone();
            async move {
                let args = json!({ "round": round, "i": i });
                client.invoke_tool("fast", args).send().await.unwrap().key
            }
        });
        fast.extend(futures_util::future::join_all(calls).await);
    }
    let slow = {
        let client = client.clone();
        tokio::spawn(async move { client.invoke_tool("slow", json!({})).send().await })
    };
    // Well past the marks' delay, well before the slow call ends.
    tokio::time::sleep(Duration::from_millis(350)).await;
    let running = log.lock().unwrap().clone();
    let slow = slow.await.unwrap().unwrap();
    client.close().await;

    let log = log.lock().unwrap().clone();
    let merged = fast
        .iter()
        .filter(|k| writes_of(&log, k) == ["prepare", "terminal"])
        .count();
    // A fast call here takes a few milliseconds at most; a loaded machine
    // may stall some past the delay (a quarter, seen beside a build and a
    // test run). Without the marks riding in the end, none would merge.
    assert!(
        merged * 2 >= fast.len(),
        "{merged} of {} fast calls wrote one change",
        fast.len()
    );
    for k in &fast {
        let kinds = writes_of(&log, k);
        assert_eq!(kinds.first(), Some(&"prepare"), "{k}: {kinds:?}");
        assert_eq!(kinds.last(), Some(&"terminal"), "{k}: {kinds:?}");
    }
    assert_eq!(
        writes_of(&running, &slow.key),
        ["prepare", "sent", "accepted"],
        "the slow call's marks, recorded while it ran"
    );
    let job = running.iter().find_map(|w| match w {
        arcp_sdk::JournalWrite::Accepted { key, job_id, .. } if key == &slow.key => {
            Some(job_id.clone())
        }
        _ => None,
    });
    assert_eq!(job.as_deref(), slow.job_id.as_deref());
    assert_eq!(writes_of(&log, &slow.key).last(), Some(&"terminal"));
}

/// A journal store that can go away: while `away` is set, every commit and
/// read fails as unavailable, and the writer retries them once it is back.
struct Away {
    inner: MemoryJournal,
    away: Arc<std::sync::atomic::AtomicBool>,
}

impl Away {
    fn check(&self) -> Result<(), arcp_sdk::JournalError> {
        if self.away.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(arcp_sdk::JournalError::new(
                JournalErrorKind::Unavailable,
                "away",
                "the store does not answer",
            ));
        }
        Ok(())
    }
}

impl Journal for Away {
    fn apply(&self, writes: &[arcp_sdk::JournalWrite]) -> Result<(), arcp_sdk::JournalError> {
        self.check()?;
        self.inner.apply(writes)
    }
    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, arcp_sdk::JournalError> {
        self.check()?;
        self.inner.get(key)
    }
    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, arcp_sdk::JournalError> {
        self.check()?;
        self.inner.unfinished(limit)
    }
    fn purge(
        &self,
        retention: &Retention,
        now: std::time::SystemTime,
    ) -> Result<arcp_sdk::PurgeReport, arcp_sdk::JournalError> {
        self.check()?;
        self.inner.purge(retention, now)
    }
}

/// Two calls under one key: the first runs while the store is away (its
/// result waits in the writer's queue); the second, re-issued with a short
/// deadline, ends while its prepare waits for the store. The second sent
/// nothing, but its key's call ran: it must not say "did not run" (the
/// work re-issued under a new key would run twice), and it must not touch
/// the key's record, which ends with the first call's result once the
/// store is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_ends_before_its_key_is_read_leaves_the_keys_outcome_alone() {
    let mock = MockRuntime::builder()
        .tool("refund", |args: Value, ctx| async move {
            ctx.sleep(Duration::from_millis(300)).await;
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await
        .expect("mock");
    let away = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = builder(&mock.ws_url())
        .journal(Away {
            inner: MemoryJournal::new(),
            away: away.clone(),
        })
        .connect()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let first = client
        .invoke_tool("refund", json!({"order": 21}))
        .idempotency_key(key.clone())
        .send();
    let first = tokio::spawn(first);
    // Its prepare is committed and it runs; then the store goes away.
    tokio::time::sleep(Duration::from_millis(150)).await;
    away.store(true, std::sync::atomic::Ordering::SeqCst);
    let out = first.await.unwrap().expect("the first call's result");
    assert_eq!(out.value, json!({"refunded": 21}));

    let second = client
        .invoke_tool("refund", json!({"order": 21}))
        .idempotency_key(key.clone())
        .deadline(Duration::from_millis(150))
        .send()
        .await
        .unwrap_err();
    assert_ne!(second.execution(), Execution::NotRun, "{second:?}");

    away.store(false, std::sync::atomic::Ordering::SeqCst);
    // Read behind the writes queued before it, once the store answers.
    let entry = loop {
        match client.lookup(&key).await {
            Ok(entry) => break entry.expect("the key's record"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    assert!(
        matches!(
            entry.state,
            JournalState::Terminal(JournalOutcome::Ok { .. })
        ),
        "the key's record lost its result: {entry:?}"
    );
    assert_eq!(submits(&mock, key.as_str()), 1);
}

/// A journal file as earlier releases created it: its state check is a
/// constant `IN` list, with the guard triggers they installed.
const EARLIER_SCHEMA: &str = "
CREATE TABLE arcp_calls (
    key         TEXT    NOT NULL PRIMARY KEY,
    tool        TEXT    NOT NULL,
    intent      TEXT    NOT NULL,
    trace_id    TEXT    NOT NULL,
    deadline_ms INTEGER NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('prepared', 'sent', 'accepted', 'terminal')),
    attempts    INTEGER NOT NULL DEFAULT 0,
    job_id      TEXT,
    outcome     TEXT,
    created_ms  INTEGER NOT NULL,
    updated_ms  INTEGER NOT NULL,
    CHECK (state != 'accepted' OR job_id IS NOT NULL),
    CHECK ((state = 'terminal') = (outcome IS NOT NULL))
);
CREATE INDEX arcp_calls_by_state ON arcp_calls (state, updated_ms);
CREATE TRIGGER arcp_calls_terminal_is_final
BEFORE UPDATE ON arcp_calls WHEN OLD.state = 'terminal'
BEGIN
    SELECT RAISE(ABORT, 'arcp journal: a terminal record is final');
END;
CREATE TRIGGER arcp_calls_forward_only
BEFORE UPDATE ON arcp_calls
WHEN (OLD.state = 'sent' AND NEW.state = 'prepared')
  OR (OLD.state = 'accepted' AND NEW.state IN ('prepared', 'sent'))
  OR NEW.attempts < OLD.attempts
BEGIN
    SELECT RAISE(ABORT, 'arcp journal: a record never moves backwards');
END;
PRAGMA application_id = 1095910224;
PRAGMA user_version = 1;
";

/// An earlier release's journal with an unfinished and a finished call.
fn earlier_journal(path: &Path, unfinished: &IdempotencyKey, finished: &IdempotencyKey) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(EARLIER_SCHEMA).unwrap();
    conn.execute(
        "INSERT INTO arcp_calls VALUES (?1, 'refund', '{\"order\":1}', \
         '0123456789abcdef0123456789abcdef', 10000, 'sent', 1, NULL, NULL, 1000, 1001)",
        [unfinished.as_str()],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO arcp_calls VALUES (?1, 'refund', '{\"order\":2}', \
         '0123456789abcdef0123456789abcdef', 10000, 'terminal', 1, 'job-2', \
         '{\"ok\":{\"value\":{\"refunded\":2},\"job_id\":\"job-2\",\"replayed\":false,\"attempts\":1}}', \
         1000, 1002)",
        [finished.as_str()],
    )
    .unwrap();
}

/// Whether SQLite's plan for `sql` builds a temporary table (`OpenEphemeral`).
fn plan_builds_a_temporary_table(conn: &rusqlite::Connection, sql: &str) -> bool {
    let mut stmt = conn.prepare(&format!("EXPLAIN {sql}")).unwrap();
    let ops: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(1))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    ops.iter().any(|op| op == "OpenEphemeral")
}

/// Earlier releases wrote the state check as a constant `IN` list, which
/// SQLite checks through a temporary index built for every row written
/// (about 40 % of the writer's instructions). A read-write open rebuilds
/// the table in place: every record kept as it was, the file's checks and
/// guards still on, no temporary table in any write's plan, and the schema
/// version unchanged (the same columns and meaning: any build reads the
/// file). A read-only open reads the file as it is, without changing it.
#[tokio::test]
async fn an_earlier_journal_table_is_rebuilt_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let (unfinished, finished) = (IdempotencyKey::new(), IdempotencyKey::new());
    earlier_journal(&path, &unfinished, &finished);
    private(&path);
    let insert = "INSERT INTO arcp_calls (key, tool, intent, trace_id, deadline_ms, state, \
                  attempts, job_id, outcome, created_ms, updated_ms) \
                  VALUES ('k', 't', '{}', 'x', 1, 'prepared', 0, NULL, NULL, 1, 1)";
    let terminal = "UPDATE arcp_calls SET state = 'terminal', outcome = '{}', updated_ms = 2 \
                    WHERE key = 'k' AND state != 'terminal'";
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        assert!(
            plan_builds_a_temporary_table(&conn, insert),
            "the earlier check builds a temporary table"
        );
    }

    let table_sql = |path: &Path| -> String {
        rusqlite::Connection::open(path)
            .unwrap()
            .query_row(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'arcp_calls'",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    let earlier = table_sql(&path);

    // Read-only: read as it is, left as it was.
    {
        let reader = SqliteJournal::open_read_only(&path).expect("read an earlier file");
        assert_eq!(reader.list(10).unwrap().len(), 2);
        assert!(reader.get(&finished).unwrap().unwrap().is_terminal());
    }
    assert_eq!(
        table_sql(&path),
        earlier,
        "a read-only open changes nothing"
    );

    // Read-write: rebuilt, records unchanged.
    let journal = SqliteJournal::open(&path).expect("open an earlier file");
    let open = journal
        .get(&unfinished)
        .unwrap()
        .expect("the unfinished call");
    assert_eq!(open.state, JournalState::Sent);
    assert_eq!((open.attempts, open.intent.as_str()), (1, "{\"order\":1}"));
    assert_eq!(journal.unfinished(10).unwrap().len(), 1);
    let done = journal.get(&finished).unwrap().expect("the finished call");
    assert_eq!(
        done.state,
        JournalState::Terminal(JournalOutcome::Ok {
            value: json!({"refunded": 2}),
            job_id: Some("job-2".into()),
            replayed: false,
            attempts: 1,
        })
    );
    // New writes still go through.
    let key = IdempotencyKey::new();
    journal
        .apply(&[arcp_sdk::JournalWrite::Prepare(prepared(&key, "{}"))])
        .unwrap();
    assert!(journal.get(&key).unwrap().is_some());
    drop(journal);

    assert_ne!(table_sql(&path), earlier, "the table was rebuilt");
    let conn = rusqlite::Connection::open(&path).unwrap();
    for sql in [insert, terminal] {
        assert!(
            !plan_builds_a_temporary_table(&conn, sql),
            "a temporary table in the plan of {sql}"
        );
    }
    // The file's own checks and guards hold after the migration.
    let bad_state = conn.execute(
        "UPDATE arcp_calls SET state = 'lost' WHERE key = ?1",
        [unfinished.as_str()],
    );
    assert!(bad_state.is_err(), "an unknown state was stored");
    let reopened = conn.execute(
        "UPDATE arcp_calls SET state = 'sent', outcome = NULL WHERE key = ?1",
        [finished.as_str()],
    );
    assert!(reopened.is_err(), "a terminal record was reopened");
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    let schema_objects = "SELECT count(*) FROM sqlite_master WHERE";
    assert_eq!(
        count(&format!(
            "{schema_objects} type = 'index' AND name = 'arcp_calls_by_state'"
        )),
        1,
        "the state index"
    );
    assert_eq!(
        count(&format!(
            "{schema_objects} type = 'trigger' AND tbl_name = 'arcp_calls'"
        )),
        2,
        "the two guards, on the rebuilt table"
    );
    assert_eq!(
        count(&format!("{schema_objects} name LIKE 'arcp_calls_rebuilt%'")),
        0,
        "nothing of the rebuild is left"
    );
    assert_eq!(count("PRAGMA user_version"), 1, "the same schema version");
}

/// Makes a file written here as private as a journal must be (0600).
fn private(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    #[cfg(not(unix))]
    let _ = path;
}
