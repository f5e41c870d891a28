//! A record's age is read on this process's clock, from a time another
//! process wrote on its own. A record dated ahead of this clock by more
//! than the margin for clocks that run ahead (a tenth of the runtime's key
//! retention, at most a minute) has no age this process can know: it
//! counts as older than the retention, so it is never sent again. Ground
//! truth: the mock's executions.

use std::time::Duration;

use arcp_mock::MockRuntime;
use arcp_sdk::{
    Client, Execution, IdempotencyKey, Journal, JournalWrite, RetryPolicy, SqliteJournal,
};
use serde_json::{json, Value};

/// A call left unfinished, its record then dated `skew` ahead (as a worker
/// whose clock runs ahead writes it), the runtime's memory of the key
/// (400 ms) past: a later client's recovery hands nothing out, sends
/// nothing, and records the call "outcome unknown".
async fn recover_a_record_dated_ahead(skew: Duration) {
    let retention = Duration::from_millis(400);
    let mock = MockRuntime::builder()
        .key_retention(retention)
        .tool("refund", |args: Value, _ctx| async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let builder = || {
        Client::builder(mock.ws_url())
            .handshake_timeout(Duration::from_secs(2))
            .retry(RetryPolicy::exponential().max_elapsed(Duration::from_secs(2)))
            .journal_path(&path)
            .runtime_key_retention(retention)
    };
    let key = IdempotencyKey::new();
    let client = builder().connect().await.unwrap();
    let e = client
        .invoke_tool("refund", json!({"order": 1}))
        .idempotency_key(key.clone())
        .deadline(Duration::from_millis(100))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.execution(), Execution::MayHaveRun, "{e:?}");
    client.close().await;
    {
        let journal = SqliteJournal::open(&path).unwrap();
        let mut entry = journal.get(&key).unwrap().unwrap();
        assert!(!entry.is_terminal());
        entry.created_at += skew;
        entry.updated_at += skew;
        journal.apply(&[JournalWrite::Prepare(entry)]).unwrap();
    }
    tokio::time::sleep(retention * 2 + Duration::from_millis(300)).await;
    assert_eq!(mock.executions_for_key(key.as_str()), 1);

    let client = builder().connect().await.unwrap();
    let recovered = client.recover().await.unwrap();
    assert!(
        recovered.is_empty(),
        "{skew:?}: handed out {}",
        recovered.len()
    );
    let entry = client.lookup(&key).await.unwrap().unwrap();
    let Some(Err(e)) = entry.outcome() else {
        panic!("{entry:?}")
    };
    assert_eq!(e.execution(), Execution::MayHaveRun, "{e:?}");
    assert!(e.to_string().contains("ahead"), "{e}");
    client.close().await;
    assert_eq!(mock.executions_for_key(key.as_str()), 1, "{skew:?}");
}

/// Ten minutes ahead: beyond any margin.
#[tokio::test]
async fn a_record_dated_ahead_of_this_clock_is_not_re_sent_past_the_key_retention() {
    recover_a_record_dated_ahead(Duration::from_secs(600)).await;
}

/// Thirty seconds ahead: within a minute, but beyond the margin of a short
/// retention (a tenth of it).
#[tokio::test]
async fn a_record_dated_ahead_by_more_than_the_margin_is_not_re_sent() {
    recover_a_record_dated_ahead(Duration::from_secs(30)).await;
}
