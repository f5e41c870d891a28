//! A journal never proves a supplied key unused: the store may be new, or
//! in memory, or have purged or evicted the key's record, or the key may
//! have run through a client without this journal, before or after the
//! journal's record of it. A call of a supplied key that sends nothing says
//! "not sent". Ground truth: the mock's executions.

mod support;

use std::time::Duration;

use arcp_mock::Dialect;
use arcp_sdk::{Execution, IdempotencyKey, MemoryJournal, Retention};
use serde_json::json;
use support::mock::{client, mock, unreachable_call_of, unreachable_call_on_journal};

const HOUR: Duration = Duration::from_secs(3600);

/// A URL nothing listens on.
fn dead_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("ws://127.0.0.1:{port}/arcp")
}

/// The key ran through a client without a journal; a new SQLite journal
/// knows nothing of it.
#[tokio::test]
async fn a_new_journal_does_not_vouch_for_a_key_that_ran_without_it() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let key = IdempotencyKey::new();
    let plain = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    plain
        .invoke_tool("refund", json!({"order": 15}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    plain.close().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite");
    let err = unreachable_call_on_journal(&path, &key, Retention::default(), HOUR).await;
    assert_eq!(mock.executions_for_key(key.as_str()), 1, "the key ran");
    assert_eq!(err.execution(), Execution::NotSent, "{err:?}");
}

/// A process's in-memory journal dies with it: the next process's knows
/// nothing of the keys that ran.
#[tokio::test]
async fn a_memory_journal_does_not_vouch_for_a_key_another_one_ran() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let key = IdempotencyKey::new();
    let first = client(&mock.ws_url(), Dialect::V1_1)
        .journal(MemoryJournal::new())
        .connect()
        .await
        .unwrap();
    first
        .invoke_tool("refund", json!({"order": 16}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    first.close().await;
    let second = client(&dead_url(), Dialect::V1_1)
        .journal(MemoryJournal::new())
        .connect_lazy();
    let err = second
        .invoke_tool("refund", json!({"order": 16}))
        .idempotency_key(key.clone())
        .deadline(Duration::from_secs(1))
        .send()
        .await
        .unwrap_err();
    second.close().await;
    assert_eq!(mock.executions_for_key(key.as_str()), 1, "the key ran");
    assert_eq!(err.execution(), Execution::NotSent, "{err:?}");
}

/// An earlier client on the same file removed the key's record (evicted
/// for its record cap, or purged as expired); a later client, whatever its
/// own retention, does not vouch for the key.
#[tokio::test]
async fn a_later_client_does_not_vouch_for_keys_an_earlier_one_removed() {
    for by_ttl in [false, true] {
        let mock = mock(Dialect::V1_1).start().await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.sqlite");
        let short = Duration::from_millis(200);
        let retention = if by_ttl {
            Retention::default().terminal_ttl(short)
        } else {
            Retention::default().max_records(2)
        };
        let first = client(&mock.ws_url(), Dialect::V1_1)
            .journal_path(&path)
            .journal_retention(retention.clone())
            .connect()
            .await
            .unwrap();
        let keys: Vec<IdempotencyKey> = (0..4).map(|_| IdempotencyKey::new()).collect();
        for (order, key) in keys.iter().enumerate() {
            first
                .invoke_tool("refund", json!({"order": order}))
                .idempotency_key(key.clone())
                .send()
                .await
                .unwrap();
        }
        first.close().await;
        if by_ttl {
            // Expired; the next client with that retention purges them.
            tokio::time::sleep(short * 2).await;
            let purger = client(&mock.ws_url(), Dialect::V1_1)
                .journal_path(&path)
                .journal_retention(retention)
                .connect()
                .await
                .unwrap();
            purger.close().await;
        }
        let args = json!({"order": 0});
        let err = unreachable_call_of(&path, &keys[0], args, Retention::default(), HOUR).await;
        assert_eq!(mock.executions_for_key(keys[0].as_str()), 1, "the key ran");
        assert_eq!(
            err.execution(),
            Execution::NotSent,
            "by_ttl {by_ttl}: {err:?}"
        );
    }
}

/// Nor does a record of the key: a generated key's call that sent nothing
/// said "did not run", and its record says so; the key is then run by a
/// client without this journal. A later call of the key on the journal that
/// sends nothing says "not sent": the record covered only its own call.
#[tokio::test]
async fn a_did_not_run_record_does_not_cover_later_calls_elsewhere() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite");
    let first = client(&dead_url(), Dialect::V1_1)
        .journal_path(&path)
        .connect_lazy();
    let err = first
        .invoke_tool("refund", json!({"order": 15}))
        .deadline(Duration::from_secs(1))
        .send()
        .await
        .unwrap_err();
    first.close().await;
    assert_eq!(err.execution(), Execution::NotRun, "{err:?}");
    let key = err.key().expect("the generated key").clone();
    let other = client(&mock.ws_url(), Dialect::V1_1)
        .journal(MemoryJournal::new())
        .connect()
        .await
        .unwrap();
    other
        .invoke_tool("refund", json!({"order": 15}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    other.close().await;
    let err = unreachable_call_on_journal(&path, &key, Retention::default(), HOUR).await;
    assert_eq!(mock.executions_for_key(key.as_str()), 1, "the key ran");
    assert_eq!(err.execution(), Execution::NotSent, "{err:?}");
}

/// A record of another intent that never reached the runtime does not bind
/// the key: the key ran `{"order": 15}` through a client without the
/// journal; the journal holds a record of `{"order": 16}` that sent
/// nothing. The right call, repeated on the journal, is sent and answered
/// by the runtime (its replay), not refused locally as a conflict that
/// "did not run".
#[tokio::test]
async fn a_record_of_another_intent_that_sent_nothing_does_not_bind_the_key() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let key = IdempotencyKey::new();
    let plain = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    plain
        .invoke_tool("refund", json!({"order": 15}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    plain.close().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite");
    let other = json!({"order": 16});
    let err = unreachable_call_of(&path, &key, other, Retention::default(), HOUR).await;
    assert_eq!(err.execution(), Execution::NotSent, "{err:?}");
    let journaled = client(&mock.ws_url(), Dialect::V1_1)
        .journal_path(&path)
        .connect()
        .await
        .unwrap();
    let out = journaled
        .invoke_tool("refund", json!({"order": 15}))
        .idempotency_key(key.clone())
        .send()
        .await;
    journaled.close().await;
    assert_eq!(mock.executions_for_key(key.as_str()), 1, "ran once");
    let out = out.unwrap();
    assert_eq!(out.value, json!({"refunded": 15}));
}

/// A record of another intent is a local conflict, but proves no binding
/// the runtime still holds: "not sent", never "did not run", whether the
/// other intent's call gave up in flight or its answer is recorded (the
/// runtime may have forgotten the key since, or that answer may have been
/// a replay of an earlier send).
#[tokio::test]
async fn a_local_conflict_is_not_sent_never_did_not_run() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let journaled = client(&mock.ws_url(), Dialect::V1_1)
        .journal_path(dir.path().join("journal.sqlite"))
        .connect()
        .await
        .unwrap();
    let in_flight = IdempotencyKey::new();
    let gave_up = journaled
        .invoke_tool("refund", json!({"order": 1, "ms": 400}))
        .idempotency_key(in_flight.clone())
        .deadline(Duration::from_millis(150))
        .send()
        .await
        .unwrap_err();
    assert_eq!(gave_up.execution(), Execution::MayHaveRun, "{gave_up:?}");
    let conflict = journaled
        .invoke_tool("refund", json!({"order": 2}))
        .idempotency_key(in_flight.clone())
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(conflict, arcp_sdk::Error::DuplicateKey { .. }),
        "{conflict:?}"
    );
    assert_eq!(conflict.execution(), Execution::NotSent, "{conflict:?}");

    let answered = IdempotencyKey::new();
    journaled
        .invoke_tool("refund", json!({"order": 3}))
        .idempotency_key(answered.clone())
        .send()
        .await
        .unwrap();
    let conflict = journaled
        .invoke_tool("refund", json!({"order": 4}))
        .idempotency_key(answered.clone())
        .send()
        .await
        .unwrap_err();
    assert_eq!(conflict.execution(), Execution::NotSent, "{conflict:?}");
    journaled.close().await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(mock.executions_for_key(in_flight.as_str()), 1);
    assert_eq!(mock.executions_for_key(answered.as_str()), 1);
}
