//! The journal invariants on one host (the SQLite file, and the in-memory
//! journal where they apply), the same rules the PostgreSQL fleet journal
//! enforces (`journal_postgres.rs`): a call is prepared before its first
//! send, a terminal record is final, recovery is idempotent, silence is not
//! success. (One driver per call is the file's exclusive lock:
//! `journal.rs`, a second opener gets `JOURNAL_LOCKED`.)

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use arcp_mock::MockRuntime;
use arcp_sdk::{
    Client, ClientBuilder, IdempotencyKey, Journal, JournalEntry, JournalOutcome, JournalState,
    JournalWrite, MemoryJournal, RetryPolicy, SqliteJournal,
};
use serde_json::{json, Value};

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

fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::try_from(k).unwrap()
}

fn entry(k: &str, order: u32) -> JournalEntry {
    JournalEntry::new(
        key(k),
        "refund",
        format!(r#"{{"tool":"refund","arguments":{{"order":{order}}},"idempotency_key":"{k}"}}"#),
        arcp_types::new_trace_id(),
        Duration::from_secs(10),
    )
}

fn ok(value: Value) -> JournalOutcome {
    JournalOutcome::Ok {
        value,
        job_id: None,
        replayed: false,
        attempts: 1,
    }
}

fn terminal_twice(j: &dyn Journal) {
    let now = SystemTime::now();
    j.apply(&[
        JournalWrite::Prepare(entry("k1", 1)),
        JournalWrite::Terminal {
            key: key("k1"),
            outcome: ok(json!("first")),
            at: now,
        },
    ])
    .unwrap();
    j.apply(&[
        JournalWrite::Terminal {
            key: key("k1"),
            outcome: ok(json!("second")),
            at: now,
        },
        JournalWrite::Accepted {
            key: key("k1"),
            job_id: "job_2".into(),
            at: now,
        },
    ])
    .unwrap();
    assert_eq!(
        j.get(&key("k1")).unwrap().unwrap().state,
        JournalState::Terminal(ok(json!("first")))
    );
}

/// A terminal record is final: in the journal, and in the SQLite file
/// itself (a trigger refuses any update of a terminal row, and any update
/// that moves a record backwards).
#[test]
fn a_terminal_record_is_final() {
    terminal_twice(&MemoryJournal::new());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    {
        let j = SqliteJournal::open(&path).unwrap();
        terminal_twice(&j);
        j.apply(&[
            JournalWrite::Prepare(entry("k2", 2)),
            JournalWrite::Accepted {
                key: key("k2"),
                job_id: "job_3".into(),
                at: SystemTime::now(),
            },
        ])
        .unwrap();
    }
    let db = rusqlite::Connection::open(&path).unwrap();
    for attack in [
        "UPDATE arcp_calls SET state = 'accepted', outcome = NULL, job_id = 'j' WHERE key = 'k1'",
        "UPDATE arcp_calls SET outcome = '{\"ok\":{\"value\":2}}' WHERE key = 'k1'",
        "UPDATE arcp_calls SET state = 'sent' WHERE key = 'k2'",
        "UPDATE arcp_calls SET attempts = attempts - 1 WHERE key = 'k2'",
    ] {
        let err = db.execute(attack, []).unwrap_err();
        assert!(err.to_string().contains("arcp journal"), "{attack}: {err}");
    }
}

/// A call is prepared before its first send: when the request reaches the
/// runtime, the client's journal already holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_is_prepared_before_its_first_send() {
    let client_slot: Arc<OnceLock<Client>> = Arc::default();
    let seen: Arc<Mutex<Vec<Option<&'static str>>>> = Arc::default();
    let mock = {
        let (slot, seen) = (client_slot.clone(), seen.clone());
        MockRuntime::builder()
            .tool("refund", move |args: Value, ctx| {
                let (slot, seen) = (slot.clone(), seen.clone());
                async move {
                    let k = key(ctx.idempotency_key().unwrap_or("none"));
                    let client = slot.get().expect("connected before any call").clone();
                    let state = client.lookup(&k).await.unwrap().map(|e| e.state.name());
                    seen.lock().unwrap().push(state);
                    Ok(json!({"refunded": args["order"]}))
                }
            })
            .start()
            .await
            .unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let client = builder(&mock.ws_url())
        .journal_path(dir.path().join("j.db"))
        .connect()
        .await
        .unwrap();
    let _ = client_slot.set(client.clone());
    let calls = (0..10).map(|i| client.invoke_tool("refund", json!({"order": i})).send());
    for out in futures_util::future::join_all(calls).await {
        out.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 10);
    assert!(seen.iter().all(Option::is_some), "{seen:?}");
    client.close().await;
}

/// Recovery is idempotent: a call recovered and still in flight is not
/// handed out again, and a second recovery after the first finished finds
/// nothing. The tool ran once. Silence is not success: the record a dead
/// process left is unfinished until an outcome arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_is_idempotent_and_silence_is_not_success() {
    let mock = MockRuntime::builder()
        .tool("refund", |args: Value, ctx| async move {
            ctx.sleep(Duration::from_millis(300)).await;
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    {
        // A process that prepared two calls and vanished.
        let j = SqliteJournal::open(&path).unwrap();
        j.apply(&[
            JournalWrite::Prepare(entry("order-1", 1)),
            JournalWrite::Prepare(entry("order-2", 2)),
            JournalWrite::Sent {
                key: key("order-2"),
                attempts: 1,
                at: SystemTime::now(),
            },
        ])
        .unwrap();
    }
    let client = builder(&mock.ws_url())
        .journal_path(&path)
        .connect()
        .await
        .unwrap();
    for k in ["order-1", "order-2"] {
        let e = client.lookup(&key(k)).await.unwrap().unwrap();
        assert!(!e.is_terminal(), "{k}: silence is not success");
    }
    let first = client.recover().await.unwrap();
    assert_eq!(first.len(), 2);
    let running: Vec<_> = first.into_iter().map(tokio::spawn).collect();
    // While they run, a second recovery hands nothing out again.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(client.recover().await.unwrap().is_empty());
    for call in running {
        call.await.unwrap().unwrap();
    }
    assert!(client.recover().await.unwrap().is_empty());
    for k in ["order-1", "order-2"] {
        assert_eq!(mock.executions_for_key(k), 1, "{k}");
        assert!(client.lookup(&key(k)).await.unwrap().unwrap().is_terminal());
    }
    client.close().await;
}
