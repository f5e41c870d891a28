//! `Client::discard` stops the journal from recovering a call or answering
//! its key from the record, without losing what the record proved about the
//! key: a later call of the key is in doubt ("may have run") where the
//! record's call may have run, and "did not run" only where the record
//! proved it. Each test checks the
//! claims against what the mock runtime executed. (Two workers racing on a
//! shared journal: `arcp-client/tests/journal_postgres.rs`.)

mod support;

use std::time::Duration;

use arcp_mock::Dialect;
use arcp_sdk::{Execution, IdempotencyKey, JournalOutcome, JournalState, Retention};
use serde_json::json;
use support::gateway::{Gateway, Move};
use support::mock::{
    client, key_of, mock, submits, unreachable_call_of, unreachable_call_on_journal,
};

const HOUR: Duration = Duration::from_secs(3600);

/// The reason a discarded record ended "outcome unknown" with, if it did.
fn discarded_reason(state: &JournalState) -> Option<&str> {
    match state {
        JournalState::Terminal(JournalOutcome::OutcomeUnknown { reason, .. }) => Some(reason),
        _ => None,
    }
}

/// Submits of `key` the mock received.
fn submits_of(mock: &arcp_mock::MockRuntime, key: &IdempotencyKey) -> usize {
    submits(mock)
        .iter()
        .filter(|s| key_of(s).as_deref() == Some(key.as_str()))
        .count()
}

/// The key's call ran; its record is discarded. The record stays, ended
/// "outcome unknown": a later call of the key that sends nothing (the
/// runtime unreachable) says "may have run", and one that reaches the
/// runtime gets the key's answer, without a second execution.
#[tokio::test]
async fn discarding_the_record_of_a_call_that_ran_keeps_its_key_in_doubt() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite");
    let key = IdempotencyKey::new();
    let first = client(&mock.ws_url(), Dialect::V1_1)
        .journal_path(&path)
        .connect()
        .await
        .unwrap();
    first
        .invoke_tool("refund", json!({"order": 15}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    assert!(first.discard(&key).await.unwrap(), "there was a record");
    let record = first.lookup(&key).await.unwrap().expect("the record stays");
    let reason = discarded_reason(&record.state).expect("ended outcome unknown");
    assert!(reason.contains("discarded"), "{reason}");
    assert!(
        first.recover().await.unwrap().is_empty(),
        "nothing to recover"
    );
    // Discarding it again changes nothing, and says there is a record.
    assert!(first.discard(&key).await.unwrap());
    first.close().await;

    let err = unreachable_call_on_journal(&path, &key, Retention::default(), HOUR).await;
    assert_eq!(mock.executions("refund"), 1, "the key ran once");
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err:?}");

    // Reaching the runtime, the key's call is sent again and answered from
    // the runtime's memory of the key.
    let second = client(&mock.ws_url(), Dialect::V1_1)
        .journal_path(&path)
        .connect()
        .await
        .unwrap();
    let out = second
        .invoke_tool("refund", json!({"order": 15}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(out.value, json!({"refunded": 15}));
    assert_eq!(mock.executions("refund"), 1, "not run again");
    second.close().await;
}

/// The same in the client that made the call, with the outcome cache off
/// (only the journal remembers the key), over HTTP.
#[tokio::test]
async fn discarding_in_the_same_client_over_http_keeps_the_key_in_doubt() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    // The first request is forwarded; from then on the gateway refuses
    // every request (401) before it reaches the runtime.
    let mut forwarded = false;
    let gateway = Gateway::start(mock.http_address(), move || {
        if std::mem::replace(&mut forwarded, true) {
            Move::Refuse(401)
        } else {
            Move::Forward
        }
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = IdempotencyKey::new();
    let client = client(&gateway.url(), Dialect::V1_1)
        .journal_path(dir.path().join("journal.sqlite"))
        .tuning(arcp_sdk::tuning::Tuning::new().outcome_cache(0, HOUR))
        .connect()
        .await
        .unwrap();
    client
        .invoke_tool("refund", json!({"order": 16}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    assert!(client.discard(&key).await.unwrap());
    let err = client
        .invoke_tool("refund", json!({"order": 16}))
        .idempotency_key(key.clone())
        .deadline(Duration::from_secs(2))
        .send()
        .await
        .unwrap_err();
    client.close().await;
    assert_eq!(mock.executions("refund"), 1, "the key ran once");
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err:?}");
}

/// An unfinished call (its caller gave up while the tool ran) that is
/// discarded is not recovered: `recover()` sends nothing, and a later call
/// of the key that sends nothing says "may have run".
#[tokio::test]
async fn a_discarded_unfinished_call_is_not_recovered_and_stays_in_doubt() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite");
    let key = IdempotencyKey::new();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .journal_path(&path)
        .connect()
        .await
        .unwrap();
    let gave_up = client
        .invoke_tool("refund", json!({"order": 15, "ms": 400}))
        .idempotency_key(key.clone())
        .deadline(Duration::from_millis(150))
        .send()
        .await
        .unwrap_err();
    assert_eq!(gave_up.execution(), Execution::MayHaveRun, "{gave_up:?}");
    let record = client.lookup(&key).await.unwrap().unwrap();
    assert!(!record.is_terminal(), "{record:?}");

    assert!(client.discard(&key).await.unwrap());
    let record = client.lookup(&key).await.unwrap().unwrap();
    let reason = discarded_reason(&record.state).expect("ended outcome unknown");
    assert!(reason.contains("discarded"), "{reason}");
    let sent_before = submits_of(&mock, &key);
    assert!(client.recover().await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(submits_of(&mock, &key), sent_before, "not sent again");
    assert_eq!(mock.executions("refund"), 1);
    client.close().await;

    // No later call of the key claims "did not run".
    let args = json!({"order": 15, "ms": 400});
    let err = unreachable_call_of(&path, &key, args, Retention::default(), HOUR).await;
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err:?}");
}

/// A record that proves the key's call did not run (a generated key's call
/// that sent nothing) is final already: a discard leaves it as it is (a
/// delete could race another worker's call of the key that replaced it).
#[tokio::test]
async fn a_record_proving_the_call_did_not_run_stays_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite");
    let client = client("ws://127.0.0.1:9/arcp", Dialect::V1_1)
        .journal_path(&path)
        .connect_lazy();
    // A generated key that sent nothing: proven not run.
    let err = client
        .invoke_tool("refund", json!({"order": 15}))
        .deadline(Duration::from_secs(1))
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.execution(), Execution::NotRun, "{err:?}");
    let key = err.key().expect("the generated key").clone();
    let before = client.lookup(&key).await.unwrap().expect("recorded");
    assert!(before.is_terminal(), "{before:?}");
    assert!(client.discard(&key).await.unwrap());
    let after = client.lookup(&key).await.unwrap().expect("kept");
    assert_eq!(after, before);
    assert!(client.recover().await.unwrap().is_empty());
    client.close().await;
}
