//! A key conflict found inside the client (its outcome cache, its journal,
//! a call of the key in flight) never says "did not run": the client
//! cannot prove the runtime still holds the key bound to the other intent
//! (it may have forgotten it, the other intent's outcome may be unknown or
//! a replay of an earlier send, marked or not), and another process may
//! have run this intent under the key. The call sent nothing: "not sent",
//! and nothing of it is sent later (a recovery included). Only the
//! runtime's own refusal says "did not run". Ground truth: the mock's
//! executions.

mod support;

use std::time::Duration;

use arcp_mock::{Dialect, ReplayPolicy};
use arcp_sdk::{Client, Error, Execution, IdempotencyKey, Retention, ToolOutput};
use serde_json::json;
use support::gateway::{Gateway, Move};
use support::link::{Link, LinkMode};
use support::mock::{client, mock};

/// Calls `refund` with `order` under `key`.
async fn refund(client: &Client, key: &IdempotencyKey, order: u64) -> Result<ToolOutput, Error> {
    client
        .invoke_tool("refund", json!({"order": order}))
        .idempotency_key(key.clone())
        .send()
        .await
}

fn is_local_conflict(e: &Error) -> bool {
    matches!(e, Error::DuplicateKey { attempts: 0, .. })
}

/// The client's first call of the key never reached the runtime (a 503
/// from a gateway, "may have run"); another process then ran the other
/// intent under the key.
#[tokio::test]
async fn a_conflict_with_an_unknown_outcome_is_not_sent() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let gateway = Gateway::start(mock.http_address(), || Move::Refuse(503))
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let first = client(&gateway.url(), Dialect::V1_1).connect_lazy();
    let e = first
        .invoke_tool("refund", json!({"order": 1}))
        .idempotency_key(key.clone())
        .deadline(Duration::from_secs(3))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.execution(), Execution::MayHaveRun, "{e:?}");
    assert_eq!(gateway.forwarded(), 0);
    let other = client(&mock.http_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    refund(&other, &key, 2).await.unwrap();
    assert_eq!(mock.executions_for_key(key.as_str()), 1);

    let e = refund(&first, &key, 2).await.unwrap_err();
    assert!(is_local_conflict(&e), "{e:?}");
    assert_eq!(e.execution(), Execution::NotSent, "{e:?}");
}

/// The client holds the other intent's result, but the runtime has
/// forgotten the key since, and another process ran this intent under it.
#[tokio::test]
async fn a_conflict_with_an_outcome_past_the_runtime_key_retention_is_not_sent() {
    let retention = Duration::from_millis(300);
    let mock = mock(Dialect::V1_1)
        .key_retention(retention)
        .start()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let first = client(&mock.ws_url(), Dialect::V1_1)
        .runtime_key_retention(retention)
        .connect()
        .await
        .unwrap();
    refund(&first, &key, 1).await.unwrap();
    tokio::time::sleep(retention * 2).await;
    let other = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    refund(&other, &key, 2).await.unwrap();
    assert_eq!(mock.executions_for_key(key.as_str()), 2);

    let e = refund(&first, &key, 2).await.unwrap_err();
    assert!(is_local_conflict(&e), "{e:?}");
    assert_eq!(e.execution(), Execution::NotSent, "{e:?}");
}

/// Even the other intent's fresh result, well within the runtime's key
/// retention, proves nothing the client can check: "not sent", on both
/// transports; from a client without that entry, the runtime's own
/// refusal says "did not run" (over WebSocket).
#[tokio::test]
async fn a_conflict_with_a_fresh_outcome_is_not_sent() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    for url in [mock.ws_url(), mock.http_url()] {
        let key = IdempotencyKey::new();
        let c = client(&url, Dialect::V1_1).connect().await.unwrap();
        refund(&c, &key, 1).await.unwrap();
        let e = refund(&c, &key, 2).await.unwrap_err();
        assert!(is_local_conflict(&e), "{url}: {e:?}");
        assert_eq!(e.execution(), Execution::NotSent, "{url}: {e:?}");
        assert_eq!(mock.executions_for_key(key.as_str()), 1, "{url}");
        c.close().await;
        let fresh = client(&url, Dialect::V1_1).connect().await.unwrap();
        let e = refund(&fresh, &key, 2).await.unwrap_err();
        assert!(
            matches!(e, Error::DuplicateKey { attempts: 1, .. }),
            "{url}: {e:?}"
        );
        // (An HTTP 422 may be a gateway's, which proves nothing of the
        // key: "not sent" for a supplied one.)
        let proof = if url.starts_with("ws") {
            Execution::NotRun
        } else {
            Execution::NotSent
        };
        assert_eq!(e.execution(), proof, "{url}: {e:?}");
        assert_eq!(mock.executions_for_key(key.as_str()), 1, "{url}");
        fresh.close().await;
    }
}

/// The other intent is in flight (its link black-holed) when another
/// process runs this intent under the key.
#[tokio::test]
async fn a_conflict_with_a_call_in_flight_is_not_sent() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let link = Link::start(mock.address()).await.unwrap();
    let key = IdempotencyKey::new();
    let first = client(&format!("ws://{}/arcp", link.address()), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    link.set(LinkMode::BlackHole);
    let held = tokio::spawn(
        first
            .invoke_tool("refund", json!({"order": 1}))
            .idempotency_key(key.clone())
            .deadline(Duration::from_secs(3))
            .send(),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let other = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    refund(&other, &key, 2).await.unwrap();
    assert_eq!(mock.executions_for_key(key.as_str()), 1);

    let e = first
        .invoke_tool("refund", json!({"order": 2}))
        .idempotency_key(key.clone())
        .deadline(Duration::from_secs(2))
        .send()
        .await
        .unwrap_err();
    assert!(is_local_conflict(&e), "{e:?}");
    assert_eq!(e.execution(), Execution::NotSent, "{e:?}");
    let held = held.await.unwrap().unwrap_err();
    assert_eq!(held.execution(), Execution::MayHaveRun, "{held:?}");
}

/// With a journal whose unfinished record of the other intent expired:
/// the conflict found in the cache is neither answered nor recorded as
/// "did not run".
#[tokio::test]
async fn a_journaled_conflict_with_an_unknown_outcome_is_not_recorded_as_not_run() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let gateway = Gateway::start(mock.http_address(), || Move::Refuse(503))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = IdempotencyKey::new();
    let first = client(&gateway.url(), Dialect::V1_1)
        .journal_path(dir.path().join("j.db"))
        .journal_retention(
            Retention::default()
                .unfinished_ttl(Duration::from_millis(300))
                .purge_interval(Duration::from_millis(100)),
        )
        .connect_lazy();
    let e = first
        .invoke_tool("refund", json!({"order": 1}))
        .idempotency_key(key.clone())
        .deadline(Duration::from_secs(2))
        .send()
        .await
        .unwrap_err();
    assert_eq!(e.execution(), Execution::MayHaveRun, "{e:?}");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let other = client(&mock.http_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    refund(&other, &key, 2).await.unwrap();
    assert_eq!(mock.executions_for_key(key.as_str()), 1);

    let e = refund(&first, &key, 2).await.unwrap_err();
    assert_ne!(e.execution(), Execution::NotRun, "{e:?}");
    if let Some(Err(recorded)) = first
        .lookup(&key)
        .await
        .unwrap()
        .and_then(|entry| entry.outcome())
    {
        assert_ne!(recorded.execution(), Execution::NotRun, "{recorded:?}");
    }
}

/// The client's outcome of the other intent was itself a replay of an
/// execution another process started earlier: the runtime's memory of the
/// key began then, not at this client's send. Once the runtime forgot the
/// key and a third process ran this intent under it, the conflict proves
/// nothing: "not sent", with and without a journal, on both transports.
#[tokio::test]
async fn a_conflict_with_a_replayed_outcome_is_not_sent() {
    for transport in ["ws", "http"] {
        conflict_after_a_replay(Dialect::V1_1, ReplayPolicy::TerminalReplay, transport).await;
    }
}

/// The same, against a runtime that replays a stored terminal without an
/// acceptance (newer PHP runtimes, legacy dialect): the answer carries no
/// replay mark, so only an acceptance of a fresh job on the client's own
/// attempt dates the key's binding.
#[tokio::test]
async fn a_conflict_with_an_unmarked_replay_is_not_sent() {
    conflict_after_a_replay(Dialect::Legacy, ReplayPolicy::TerminalOnly, "ws").await;
}

async fn conflict_after_a_replay(dialect: Dialect, policy: ReplayPolicy, transport: &str) {
    for journaled in [false, true] {
        let retention = Duration::from_millis(1500);
        let mock = mock(dialect)
            .replay_policy(policy)
            .key_retention(retention)
            .start()
            .await
            .unwrap();
        let url = match transport {
            "ws" => mock.ws_url(),
            _ => mock.http_url(),
        };
        let key = IdempotencyKey::new();
        let earlier = client(&url, dialect).connect().await.unwrap();
        refund(&earlier, &key, 1).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let dir = tempfile::tempdir().unwrap();
        let mut builder = client(&url, dialect).runtime_key_retention(retention);
        if journaled {
            builder = builder.journal_path(dir.path().join("j.db"));
        }
        let this = builder.connect().await.unwrap();
        refund(&this, &key, 1).await.unwrap();
        assert_eq!(mock.executions_for_key(key.as_str()), 1);
        // The runtime forgets the key 1.5 s after the earlier send; then
        // another process runs the other intent under it.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let later = client(&url, dialect).connect().await.unwrap();
        refund(&later, &key, 2).await.unwrap();
        assert_eq!(mock.executions_for_key(key.as_str()), 2);

        let e = refund(&this, &key, 2).await.unwrap_err();
        assert!(is_local_conflict(&e), "{transport} {journaled}: {e:?}");
        assert_eq!(
            e.execution(),
            Execution::NotSent,
            "{transport} {journaled}: {e:?}"
        );
        this.close().await;
    }
}

/// The journal's record of the key is gone (purged), and the outcome cache
/// still knows the key with another intent: the conflicting call, told
/// "not sent", leaves no record a recovery would send, here or in another
/// process.
#[tokio::test]
async fn a_call_told_not_sent_is_never_recovered() {
    let retention = Duration::from_millis(600);
    let mock = mock(Dialect::V1_1)
        .key_retention(retention)
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let key = IdempotencyKey::new();
    let first = client(&mock.ws_url(), Dialect::V1_1)
        .journal_path(&path)
        .runtime_key_retention(retention)
        .journal_retention(
            Retention::default()
                .terminal_ttl(Duration::from_millis(300))
                .purge_interval(Duration::from_millis(100)),
        )
        .connect()
        .await
        .unwrap();
    refund(&first, &key, 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let e = refund(&first, &key, 2).await.unwrap_err();
    assert!(is_local_conflict(&e), "{e:?}");
    assert_eq!(e.execution(), Execution::NotSent, "{e:?}");
    first.close().await;
    drop(first);

    let second = client(&mock.ws_url(), Dialect::V1_1)
        .journal_path(&path)
        .runtime_key_retention(retention)
        .connect()
        .await
        .unwrap();
    let recovered = second.recover().await.unwrap();
    assert!(recovered.is_empty(), "handed out {}", recovered.len());
    second.close().await;
    assert_eq!(mock.executions_for_key(key.as_str()), 1);
}

/// The cache let the key go; the same intent re-issued on the same session
/// gets the runtime's stored answer, which reads as a fresh execution (the
/// runtime replays it unmarked on the session that ran it); the runtime
/// then forgets the key and another process runs the other intent: this
/// client's conflict is "not sent".
#[tokio::test]
async fn a_conflict_after_a_replay_that_reads_fresh_is_not_sent() {
    let retention = Duration::from_millis(1500);
    let mock = mock(Dialect::V1_1)
        .key_retention(retention)
        .start()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let this = client(&mock.ws_url(), Dialect::V1_1)
        .runtime_key_retention(retention)
        .tuning(arcp_sdk::tuning::Tuning::default().outcome_cache(1024, Duration::from_millis(600)))
        .connect()
        .await
        .unwrap();
    let t0 = tokio::time::Instant::now();
    for _ in 0..2 {
        refund(&this, &key, 1).await.unwrap();
        tokio::time::sleep_until(t0 + Duration::from_millis(1200)).await;
    }
    assert_eq!(mock.executions_for_key(key.as_str()), 1);
    tokio::time::sleep_until(t0 + Duration::from_millis(1550)).await;
    let other = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    refund(&other, &key, 2).await.unwrap();
    assert_eq!(mock.executions_for_key(key.as_str()), 2);
    let e = refund(&this, &key, 2).await.unwrap_err();
    assert_ne!(e.execution(), Execution::NotRun, "{e:?}");
}
