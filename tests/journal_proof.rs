//! A journal proves a supplied key unused only through a record of it: a
//! "did not run" record whose own claim was proven (a generated key that
//! sent nothing, a refusal by the runtime, or a proven record before it).
//! The lack of a record proves nothing: the store may be new, or in memory,
//! or have purged or evicted the key's record, or the key may have run
//! through a client without this journal. A call of such a key that sends
//! nothing says "not sent". Ground truth: the mock's executions.

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

/// A record that proves the key unused still does: a generated key's call
/// that sent nothing said "did not run"; a later call that supplies that
/// key and sends nothing says so too, and so does the next one (each
/// proven by the one before).
#[tokio::test]
async fn a_proven_did_not_run_record_proves_the_key_unused() {
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
    for _ in 0..2 {
        let err = unreachable_call_on_journal(&path, &key, Retention::default(), HOUR).await;
        assert_eq!(err.execution(), Execution::NotRun, "{err:?}");
    }
}
