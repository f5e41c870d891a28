//! The journal over the HTTP binding: a call's record goes through sent
//! and accepted (with its job) while the call runs, as over WebSocket, so
//! a process that stops mid-call leaves the job id to recover by.

mod http_support;

use std::time::{Duration, Instant};

use arcp_mock::{Fault, MockRuntime};
use arcp_sdk::{Client, Execution, IdempotencyKey, JournalState, MemoryJournal};
use http_support::*;
use serde_json::{json, Value};
use tokio::sync::watch;

/// An HTTP client of `mock` with a journal in memory.
async fn journaled(mock: &MockRuntime) -> Client {
    client(&mock.http_url())
        .journal(MemoryJournal::new())
        .connect()
        .await
        .unwrap()
}

/// A tool held until the test releases it: the call is accepted and runs
/// while the test reads its record.
#[tokio::test]
async fn a_running_http_call_is_recorded_as_accepted_with_its_job() {
    let (release, released) = watch::channel(false);
    let mock = MockRuntime::builder()
        .tool("refund", move |args: Value, _ctx| {
            let mut released = released.clone();
            async move {
                let _ = released.wait_for(|go| *go).await;
                Ok(json!({"refunded": args["order"]}))
            }
        })
        .start()
        .await
        .unwrap();
    let client = journaled(&mock).await;
    let key = IdempotencyKey::new();
    let call = {
        let (client, key) = (client.clone(), key.clone());
        tokio::spawn(async move {
            client
                .invoke_tool("refund", json!({"order": 7}))
                .idempotency_key(key)
                .send()
                .await
        })
    };
    // The record reaches `accepted` while the tool is held; the marks are
    // written a little after the fact, so wait for them (bounded).
    let started = Instant::now();
    let recorded_job = loop {
        let entry = client.lookup(&key).await.unwrap();
        if let Some(JournalState::Accepted { job_id }) = entry.as_ref().map(|e| &e.state) {
            break job_id.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the running call's record never showed its job: {entry:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    release.send_replace(true);
    let out = call.await.unwrap().unwrap();
    assert_eq!(out.value, json!({"refunded": 7}));
    assert_eq!(out.job_id.as_deref(), Some(recorded_job.as_str()));
    assert_eq!(mock.executions("refund"), 1);
    let entry = client.lookup(&key).await.unwrap().expect("recorded");
    assert!(entry.is_terminal(), "{entry:?}");
    assert_eq!(entry.job_id(), Some(recorded_job.as_str()));
}

/// The answer is cut right after `job.accepted` and the deadline passes
/// while the job still runs: the call may have run, and its record, left
/// unfinished for a recovery, names the job it was bound to.
#[tokio::test]
async fn a_call_cut_after_acceptance_leaves_its_job_in_the_record() {
    let mock = MockRuntime::builder()
        .tool("slow", |_args: Value, ctx| async move {
            ctx.sleep(Duration::from_secs(3)).await;
            Ok(json!("done"))
        })
        .start()
        .await
        .unwrap();
    mock.inject(Fault::DropAfterAccepted);
    let client = journaled(&mock).await;
    let err = client
        .invoke_tool("slow", json!({}))
        .deadline(Duration::from_millis(400))
        .await
        .unwrap_err();
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err:?}");
    let (key, job) = (err.key().expect("named").clone(), err.job_id());
    let job = job.expect("bound before the cut").to_owned();
    let started = Instant::now();
    loop {
        let entry = client.lookup(&key).await.unwrap().expect("recorded");
        match &entry.state {
            JournalState::Accepted { job_id } => {
                assert_eq!(job_id, &job);
                break;
            }
            state => assert!(
                started.elapsed() < Duration::from_secs(5),
                "the record never showed the job: {state:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(mock.executions_for_key(key.as_str()) <= 1);
}
