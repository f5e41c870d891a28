//! `connect_lazy` returns a client at once, without waiting or failing:
//! what `connect` would refuse (a configuration that can never work, a
//! journal that cannot be opened) ends each call instead, before anything
//! is sent, with the error that names it.

mod support;

use std::time::{Duration, Instant};

use arcp_mock::Dialect;
use arcp_sdk::{Client, Error, Execution, IdempotencyKey, JournalErrorKind, MemoryJournal};
use serde_json::json;
use support::mock::mock;

/// A URL that can never work: the client is built, and its first call ends
/// at once with the connect error, which says it did not run.
#[tokio::test]
async fn a_bad_url_ends_the_first_call_not_the_build() {
    let client = Client::builder("ftp://127.0.0.1:7777/arcp").connect_lazy();
    let started = Instant::now();
    let err = client
        .invoke_tool("echo", json!({}))
        .deadline(Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "{err:?}");
    assert!(
        matches!(&err, Error::Connect { retryable: false, message, .. } if message.contains("ftp")),
        "{err:?}"
    );
    assert_eq!(err.execution(), Execution::NotRun, "{err:?}");
    // A supplied key: this call sent nothing, but the key is the caller's.
    let err = client
        .invoke_tool("echo", json!({}))
        .idempotency_key(IdempotencyKey::new())
        .await
        .unwrap_err();
    assert_eq!(err.execution(), Execution::NotSent, "{err:?}");
    client.close().await;
}

/// Built outside any Tokio runtime (no panic); its calls, made inside one,
/// end with an error that says why.
#[test]
fn built_outside_a_runtime_it_says_so_on_the_first_call() {
    let mock_rt = tokio::runtime::Runtime::new().unwrap();
    let mock = mock_rt.block_on(async { mock(Dialect::V1_1).start().await.unwrap() });
    let client = Client::builder(mock.ws_url()).connect_lazy();
    let err = mock_rt
        .block_on(client.invoke_tool("echo", json!({})).send())
        .unwrap_err();
    assert!(
        matches!(&err, Error::Connect { retryable: false, message, .. } if message.contains("Tokio runtime")),
        "{err:?}"
    );
    assert_eq!(err.execution(), Execution::NotRun);
    assert_eq!(mock.executions("echo"), 0);
}

/// A journal that cannot be opened (here: an instance that already serves
/// another client) does not fail the build: every call, lookup and recover
/// of the client ends with the journal's own error, and the runtime runs
/// nothing.
#[tokio::test]
async fn a_journal_that_cannot_open_fails_each_call_by_name() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let builder = Client::builder(mock.ws_url()).journal(MemoryJournal::new());
    let first = builder.clone().connect().await.unwrap();
    let second = builder.connect_lazy();
    for _ in 0..2 {
        let err = second
            .invoke_tool("echo", json!({"n": 1}))
            .deadline(Duration::from_secs(5))
            .await
            .unwrap_err();
        match &err {
            Error::Journal(e) => {
                assert_eq!(e.kind, JournalErrorKind::Locked, "{err:?}");
                assert!(e.to_string().contains("journal"), "{e}");
            }
            other => panic!("expected the journal's error, got {other:?}"),
        }
        assert_eq!(err.execution(), Execution::NotRun, "{err:?}");
    }
    assert!(matches!(
        second.lookup(&IdempotencyKey::new()).await,
        Err(Error::Journal(_))
    ));
    assert!(matches!(second.recover().await, Err(Error::Journal(_))));
    assert_eq!(mock.executions("echo"), 0);
    // The client that holds the journal is untouched.
    first.invoke_tool("echo", json!({"n": 2})).await.unwrap();
    assert_eq!(mock.executions("echo"), 1);
    first.close().await;
    second.close().await;
}

/// With a journal that opens, a lazily built client records its calls in
/// it on first use, as a connected one does.
#[tokio::test]
async fn a_journal_opens_on_first_use() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = Client::builder(mock.ws_url())
        .journal(MemoryJournal::new())
        .connect_lazy();
    let key = IdempotencyKey::new();
    client
        .invoke_tool("echo", json!({"n": 3}))
        .idempotency_key(key.clone())
        .await
        .unwrap();
    let entry = client.lookup(&key).await.unwrap().expect("recorded");
    assert!(entry.outcome().is_some(), "{entry:?}");
    assert_eq!(mock.executions("echo"), 1);
    client.close().await;
}

/// A client closed before its journal was opened never opens it: journal
/// operations then fail with `JOURNAL_CLOSED`, and the journal's file stays
/// free for another client.
#[tokio::test]
async fn a_client_closed_before_its_journal_opened_never_opens_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite");
    let client = Client::builder("ws://127.0.0.1:9/arcp")
        .journal_path(&path)
        .connect_lazy();
    client.close().await;
    for err in [
        client.discard(&IdempotencyKey::new()).await.unwrap_err(),
        client.lookup(&IdempotencyKey::new()).await.unwrap_err(),
        client.recover().await.unwrap_err(),
    ] {
        match &err {
            Error::Journal(e) => assert_eq!(e.kind, JournalErrorKind::Closed, "{e}"),
            other => panic!("{other:?}"),
        }
    }
    let other = Client::builder("ws://127.0.0.1:9/arcp")
        .journal_path(&path)
        .connect_lazy();
    assert!(other
        .lookup(&IdempotencyKey::new())
        .await
        .unwrap()
        .is_none());
    other.close().await;
}
