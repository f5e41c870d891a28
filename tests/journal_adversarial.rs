//! Adversarial journal scenarios: a recovered call (in doubt: an earlier
//! process sent it) that the runtime refuses before acceptance, as a
//! runtime restarted with a different tool set does. The refusal says
//! "may have run", and is not the job's outcome: the journal keeps the
//! record unfinished, so a later call with the key reaches the runtime
//! again (which replays the job's outcome, or runs the call once).

mod support;

use std::time::Duration;

use arcp_mock::{Dialect, Fault, MockRuntime};
use arcp_sdk::{Error, Execution, IdempotencyKey, SqliteJournal};
use serde_json::{json, Value};
use support::mock::{client, mock};

/// A runtime with the tool `gone` (sleeps `ms`, returns 1).
async fn with_tool() -> MockRuntime {
    mock(Dialect::V1_1)
        .tool("gone", |args: Value, ctx| async move {
            let ms = args["ms"].as_u64().unwrap_or(0);
            ctx.sleep(Duration::from_millis(ms)).await;
            Ok(json!(1))
        })
        .start()
        .await
        .unwrap()
}

/// Process A sends a journaled call with key `key` to `first` and closes
/// before its outcome (Interrupted, may have run); process B, restarted
/// against a runtime without the tool, recovers it: the runtime refuses
/// it before acceptance ("may have run", rightly).
async fn interrupted_then_recovered_against_a_runtime_without_the_tool(
    first: &MockRuntime,
    path: &std::path::Path,
    key: &IdempotencyKey,
    args: Value,
    black_hole: bool,
) {
    let a = client(&first.ws_url(), Dialect::V1_1)
        .journal(SqliteJournal::open(path).unwrap())
        .connect()
        .await
        .unwrap();
    if black_hole {
        // The submit reaches the runtime and is never processed.
        first.inject(Fault::BlackHole);
    }
    let call = tokio::spawn({
        let (a, key) = (a.clone(), key.clone());
        async move {
            a.invoke_tool("gone", args)
                .idempotency_key(key)
                .send()
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    a.close().await;
    let err = call.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::Interrupted { .. }), "{err:?}");
    drop(a);

    let other = mock(Dialect::V1_1).start().await.unwrap();
    let b = client(&other.ws_url(), Dialect::V1_1)
        .journal(SqliteJournal::open(path).unwrap())
        .connect()
        .await
        .unwrap();
    let recovered = b.recover().await.unwrap();
    assert_eq!(recovered.len(), 1);
    for call in recovered {
        let err = call.await.unwrap_err();
        assert_eq!(err.execution(), Execution::MayHaveRun, "{err:?}");
    }
    b.close().await;
}

/// The earlier attempt never ran anywhere (the first runtime black-holed
/// it). After the refused recovery, re-issuing the key is answered from
/// the journal as `Error::Tool` with `Execution::Ran` (replayed): a "ran"
/// claim with zero executions, and the key can never run again.
#[tokio::test]
async fn a_refused_recovery_is_not_recorded_as_the_keys_outcome_that_ran() {
    support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let first = with_tool().await;
    let key = IdempotencyKey::new();
    let args = json!({"ms": 0});
    interrupted_then_recovered_against_a_runtime_without_the_tool(
        &first,
        &path,
        &key,
        args.clone(),
        true,
    )
    .await;
    first.clear_faults();
    assert_eq!(first.executions_for_key(key.as_str()), 0);

    // Process C, against the first runtime again, re-issues the key.
    let c = client(&first.ws_url(), Dialect::V1_1)
        .journal(SqliteJournal::open(&path).unwrap())
        .connect()
        .await
        .unwrap();
    let out = c
        .invoke_tool("gone", args)
        .idempotency_key(key.clone())
        .send()
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ran = first.executions_for_key(key.as_str());
    c.close().await;
    match &out {
        Ok(_) => assert_eq!(ran, 1),
        Err(e) => {
            assert!(
                !(e.execution() == Execution::Ran && ran == 0),
                "claims Ran, but the tool never executed under this key: {e:?}"
            );
        }
    }
}

/// The earlier attempt ran on the first runtime, which stored its result.
/// After the refused recovery, the record is terminal: `recover()` hands
/// nothing out, and re-issuing the key against the first runtime is
/// answered from the journal with the other runtime's refusal instead of
/// the job's stored result.
#[tokio::test]
async fn a_refused_recovery_does_not_lose_the_result_of_the_job_that_ran() {
    support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let first = with_tool().await;
    let key = IdempotencyKey::new();
    let args = json!({"ms": 300});
    interrupted_then_recovered_against_a_runtime_without_the_tool(
        &first,
        &path,
        &key,
        args.clone(),
        false,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(first.executions_for_key(key.as_str()), 1);

    let c = client(&first.ws_url(), Dialect::V1_1)
        .journal(SqliteJournal::open(&path).unwrap())
        .connect()
        .await
        .unwrap();
    let out = c
        .invoke_tool("gone", args)
        .idempotency_key(key.clone())
        .send()
        .await;
    c.close().await;
    assert_eq!(first.executions_for_key(key.as_str()), 1);
    assert_eq!(
        out.as_ref().map(|o| o.value.clone()).ok(),
        Some(json!(1)),
        "the job's stored result is lost: {out:?}"
    );
}
