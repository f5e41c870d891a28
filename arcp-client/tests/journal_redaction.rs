//! The journal redaction hook (`ClientBuilder::journal_redact`): a field
//! the hook drops never reaches the journal file, while the live call
//! sends it; a record it changed is never re-sent by a recovery (it ends
//! "outcome unknown: not recoverable"); a re-issue of its key is compared
//! by its full arguments. Ground truth: the mock's received frames and
//! execution counts.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arcp_mock::{MockRuntime, ReplayPolicy};
use arcp_sdk::{
    Client, ClientBuilder, Error, Execution, IdempotencyKey, JournalOutcome, JournalState,
    RetryPolicy,
};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

const SECRET: &str = "4111-1111-1111-SECRET";

fn builder(url: &str, path: &Path) -> ClientBuilder {
    Client::builder(url)
        .journal_path(path)
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
        .journal_redact(|tool: &str, args: &mut Value| {
            if tool == "charge" {
                if let Some(map) = args.as_object_mut() {
                    map.remove("card");
                }
            }
        })
}

/// A `charge` tool that waits for a permit when `gate` has none, and
/// returns no part of the card.
async fn mock(gate: Arc<Semaphore>) -> MockRuntime {
    MockRuntime::builder()
        .tool("charge", move |args: Value, _ctx| {
            let gate = gate.clone();
            async move {
                let _permit = gate.acquire().await;
                Ok(json!({"charged": args["cents"]}))
            }
        })
        .replay_policy(ReplayPolicy::TerminalReplay)
        .start()
        .await
        .expect("mock")
}

/// The submits the mock received for `key`.
fn submits(mock: &MockRuntime, key: &str) -> Vec<Value> {
    mock.received()
        .into_iter()
        .filter(|e| e.kind == "job.submit" && e.payload["idempotency_key"] == key)
        .map(|e| e.payload)
        .collect()
}

/// Every byte of the journal file and its companions (`-wal`, `-shm`).
fn journal_bytes(dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("j.db")
        {
            all.extend(std::fs::read(&path).unwrap());
        }
    }
    all
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn a_redacted_field_is_sent_but_never_written_to_the_journal_file() {
    let mock = mock(Arc::new(Semaphore::new(1_000))).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let client = builder(&mock.ws_url(), &path).connect().await.unwrap();
    let out = client
        .invoke_tool("charge", json!({"card": SECRET, "cents": 250}))
        .send()
        .await
        .unwrap();
    assert_eq!(out.value, json!({"charged": 250}));
    // The live call sent the real arguments.
    let sent = submits(&mock, out.key.as_str());
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["input"]["card"], SECRET, "{:?}", sent[0]);
    assert_eq!(mock.executions_for_key(out.key.as_str()), 1);
    let entry = client.lookup(&out.key).await.unwrap().expect("recorded");
    assert!(entry.is_redacted());
    assert!(!entry.intent.contains(SECRET), "{}", entry.intent);
    assert!(entry.intent.contains("\"cents\":250"), "{}", entry.intent);
    client.close().await;
    drop(client);
    let bytes = journal_bytes(dir.path());
    assert!(
        contains(&bytes, out.key.as_str()),
        "the record is in the file"
    );
    assert!(
        !contains(&bytes, SECRET),
        "the card reached the journal file"
    );
}

#[tokio::test]
async fn a_crashed_redacted_call_is_not_resent_and_ends_not_recoverable() {
    let gate = Arc::new(Semaphore::new(0));
    let mock = mock(gate.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let key = IdempotencyKey::new();
    let args = json!({"card": SECRET, "cents": 300});

    // The first process: the tool still runs when the call gives up, so
    // the record stays unfinished (accepted).
    let first = builder(&mock.ws_url(), &path).connect().await.unwrap();
    let err = first
        .invoke_tool("charge", args.clone())
        .idempotency_key(key.clone())
        .deadline(Duration::from_millis(300))
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DeadlineExceeded { .. }), "{err:?}");
    let entry = first.lookup(&key).await.unwrap().expect("recorded");
    assert!(
        matches!(entry.state, JournalState::Accepted { .. }),
        "{entry:?}"
    );
    first.close().await;
    drop(first);
    gate.add_permits(1_000);
    assert_eq!(submits(&mock, key.as_str()).len(), 1);

    // The restarted process: recovery hands nothing out and sends nothing.
    let second = builder(&mock.ws_url(), &path).connect().await.unwrap();
    let recovered = second.recover().await.unwrap();
    assert!(
        recovered.iter().all(|c| c.key() != Some(&key)),
        "a redacted record was handed out for re-sending"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        submits(&mock, key.as_str()).len(),
        1,
        "recovery re-sent a redacted record"
    );
    assert_eq!(mock.executions_for_key(key.as_str()), 1);
    let entry = second.lookup(&key).await.unwrap().unwrap();
    let JournalState::Terminal(JournalOutcome::OutcomeUnknown { reason, job_id, .. }) =
        &entry.state
    else {
        panic!("{entry:?}");
    };
    assert!(reason.contains("not recoverable"), "{reason}");
    assert!(reason.contains("redaction"), "{reason}");
    assert!(job_id.is_some(), "the job the runtime bound it to is kept");
    let err = entry.outcome().unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutcomeUnavailable {
                permanent: true,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.execution(), Execution::MayHaveRun);
    assert!(second.recover().await.unwrap().is_empty());

    // Re-issued with its key and full arguments, the call gets its outcome
    // from the runtime, without a second execution.
    let out = second
        .invoke_tool("charge", args)
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(out.value, json!({"charged": 300}));
    assert_eq!(mock.executions_for_key(key.as_str()), 1);
    second.close().await;
}

#[tokio::test]
async fn a_reissued_redacted_key_is_the_same_call_only_with_the_same_arguments() {
    let mock = mock(Arc::new(Semaphore::new(1_000))).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("j.db");
    let key = IdempotencyKey::new();
    let first = builder(&mock.ws_url(), &path).connect().await.unwrap();
    first
        .invoke_tool("charge", json!({"card": SECRET, "cents": 100}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    first.close().await;
    drop(first);

    // A restarted process (no outcome cache): only the journal can tell.
    let second = builder(&mock.ws_url(), &path).connect().await.unwrap();
    let again = second
        .invoke_tool("charge", json!({"cents": 100, "card": SECRET}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(again.value, json!({"charged": 100}));
    assert!(again.replayed, "answered from the journal");
    // Another card: the redacted records look alike, the calls do not.
    let err = second
        .invoke_tool(
            "charge",
            json!({"card": "5500-0000-0000-OTHER", "cents": 100}),
        )
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DuplicateKey { .. }), "{err:?}");
    // A conflict found in the journal proves no binding the runtime still
    // holds: "not sent", never "did not run".
    assert_eq!(err.execution(), Execution::NotSent);
    assert_eq!(
        submits(&mock, key.as_str()).len(),
        1,
        "only the first call was sent"
    );
    assert_eq!(mock.executions_for_key(key.as_str()), 1);
    second.close().await;
}
