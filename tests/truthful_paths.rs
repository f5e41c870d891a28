//! One named regression test per path where a call whose tool ran once came
//! back "did not run": the HTTP binding with a POST in flight, a tool's own
//! error that looks like a key conflict or a refused credential, a journaled
//! key re-issued by a second process, a request-level close after
//! acceptance, and a "did not run" the journal could not make durable. Each
//! checks the outcome's claim against what the mock runtime executed.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arcp_mock::{Dialect, Fault};
use arcp_sdk::{
    Client, Error, Execution, IdempotencyKey, Journal, JournalEntry, JournalError,
    JournalErrorKind, JournalState, JournalWrite, MemoryJournal, PurgeReport, Retention,
};
use serde_json::json;
use support::mock::{client, mock};

/// Codes and wordings a tool may fail with that the runtime also uses for
/// its own refusals.
const LOOKALIKES: [(&str, bool); 3] = [
    ("DUPLICATE_KEY", false),
    ("FAILED_PRECONDITION", true),
    ("UNAUTHENTICATED", false),
];

fn failing_args(code: &str, conflict_wording: bool) -> serde_json::Value {
    // The mock's `fail` tool fails with `code`; the message of a
    // FAILED_PRECONDITION below reads like the legacy runtime's conflict.
    json!({"code": code, "wording": conflict_wording})
}

/// A tool that fails, after `job.accepted`, with a conflict- or auth-looking
/// code ran: `Error::Tool`, `Execution::Ran`, over WebSocket in both
/// dialects and over HTTP.
#[tokio::test]
async fn a_tools_own_conflict_looking_error_ran_on_every_transport() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = mock(dialect)
            .tool("conflicty", |args: serde_json::Value, _ctx| async move {
                let code = args["code"].as_str().unwrap_or("DUPLICATE_KEY").to_owned();
                let message = if args["wording"].as_bool().unwrap_or(false) {
                    "idempotency key k already bound to a different command intent".to_owned()
                } else {
                    format!("the tool failed with {code}")
                };
                Err(arcp_mock::ToolFailure::new(code.as_str(), message))
            })
            .start()
            .await
            .unwrap();
        let mut urls = vec![("ws", mock.ws_url())];
        if dialect == Dialect::V1_1 {
            urls.push(("http", mock.http_url()));
        }
        for (transport, url) in urls {
            let client = client(&url, dialect).connect().await.unwrap();
            for (code, wording) in LOOKALIKES {
                let before = mock.executions("conflicty");
                let err = client
                    .invoke_tool("conflicty", failing_args(code, wording))
                    .await
                    .unwrap_err();
                let ran = mock.executions("conflicty") - before;
                assert_eq!(ran, 1, "{dialect:?} {transport} {code}");
                match &err {
                    Error::Tool(e) => {
                        assert_eq!(e.code.as_str(), code, "{dialect:?} {transport}");
                        assert_eq!(
                            e.execution,
                            Execution::Ran,
                            "{dialect:?} {transport} {code}"
                        );
                    }
                    other => panic!("{dialect:?} {transport} {code}: {other:?}"),
                }
            }
            client.close().await;
        }
    }
}

/// Over HTTP, the deadline passes while the POST's answer is delayed: the
/// tool runs, so the call may have run.
#[tokio::test]
async fn http_a_deadline_during_the_post_may_have_run() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    // The answer (its `job.accepted` too) is delayed past the deadline.
    mock.inject_always(Fault::DelayReplies(Duration::from_millis(500)));
    let client = client(&mock.http_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let err = client
        .invoke_tool("refund", json!({"order": 1, "ms": 600}))
        .deadline(Duration::from_millis(200))
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DeadlineExceeded { .. }), "{err:?}");
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err}");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(mock.executions("refund"), 1);
}

/// Over HTTP, `close()` during the POST: interrupted, may have run.
#[tokio::test]
async fn http_a_close_during_the_post_may_have_run() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    // The answer (its `job.accepted` too) is delayed past the deadline.
    mock.inject_always(Fault::DelayReplies(Duration::from_millis(500)));
    let client = client(&mock.http_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let call = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke_tool("refund", json!({"order": 2, "ms": 400}))
                .await
        }
    });
    while mock.total_executions() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    client.close().await;
    let err = call.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::Interrupted { .. }), "{err:?}");
    assert_eq!(err.execution(), Execution::MayHaveRun);
}

/// A legacy call is accepted, its connection drops, and every reconnect is
/// closed with 1008 when the call is re-sent: the tool ran, so the call
/// may have run, and keeps its job id.
#[tokio::test]
async fn a_request_level_close_after_acceptance_may_have_run() {
    let mock = mock(Dialect::Legacy).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::Legacy)
        .connect()
        .await
        .unwrap();
    mock.inject(Fault::DropAfterAccepted);
    let call = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .invoke_tool("refund", json!({"order": 3, "ms": 100}))
                .await
        }
    });
    while mock.jobs().is_empty() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    mock.inject_always(Fault::CloseWith { code: 1008 });
    let err = call.await.unwrap().unwrap_err();
    assert_eq!(mock.executions("refund"), 1);
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err:?}");
    assert_eq!(
        err.job_id(),
        Some(mock.jobs()[0].job_id.as_str()),
        "{err:?}"
    );
}

/// Process A calls with a derived key through a SQLite journal; its
/// deadline passes after acceptance. Process B opens the same journal
/// while the runtime refuses new connections and calls with the same key
/// and intent: it may have run (A's attempt did), and A's record of the
/// job is kept.
#[tokio::test]
async fn a_journaled_key_re_issued_by_a_new_process_may_have_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.db");
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let args = json!({"order": 4, "ms": 300});
    let key = IdempotencyKey::derive("orders", "refund", &args);
    {
        let a = client(&mock.ws_url(), Dialect::V1_1)
            .journal_path(&path)
            .connect()
            .await
            .unwrap();
        let err = a
            .invoke_tool("refund", args.clone())
            .idempotency_key(key.clone())
            .deadline(Duration::from_millis(100))
            .send()
            .await
            .unwrap_err();
        assert_eq!(err.execution(), Execution::MayHaveRun, "{err}");
        a.close().await;
    }
    let job = mock.jobs()[0].job_id.clone();
    mock.inject_always(Fault::RefuseUpgrade {
        status: 503,
        retry_after: None,
    });
    let b = client(&mock.ws_url(), Dialect::V1_1)
        .journal_path(&path)
        .connect_lazy();
    let err = b
        .invoke_tool("refund", args.clone())
        .idempotency_key(key.clone())
        .deadline(Duration::from_millis(300))
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err}");
    assert_eq!(err.job_id(), Some(job.as_str()), "{err:?}");
    let entry = b.lookup(&key).await.unwrap().expect("the record stays");
    assert_eq!(
        entry.state,
        JournalState::Accepted {
            job_id: job.clone()
        },
        "A's record of the job is not overwritten"
    );
    b.close().await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(mock.executions("refund"), 1);
}

/// A journal whose terminal writes fail while `failing` is set.
struct RefusesTerminals {
    inner: MemoryJournal,
    failing: Arc<AtomicBool>,
}

impl Journal for RefusesTerminals {
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError> {
        let terminal = writes
            .iter()
            .any(|w| matches!(w, JournalWrite::Terminal { .. }));
        if terminal && self.failing.load(Ordering::SeqCst) {
            return Err(JournalError::new(
                JournalErrorKind::Io,
                "test",
                "the disk is full (a test journal)",
            ));
        }
        self.inner.apply(writes)
    }
    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError> {
        self.inner.get(key)
    }
    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        self.inner.unfinished(limit)
    }
    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError> {
        self.inner.purge(retention, now)
    }
}

/// A journaled call that did not run (every connection refused until its
/// deadline) whose "not run" record cannot be written: a recovery would
/// still send it, so the caller is told it may have run; and a recovery
/// then runs it once.
#[tokio::test]
async fn not_run_is_said_only_once_the_journal_records_it() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    mock.inject_always(Fault::RefuseUpgrade {
        status: 503,
        retry_after: None,
    });
    let failing = Arc::new(AtomicBool::new(true));
    let journal = RefusesTerminals {
        inner: MemoryJournal::new(),
        failing: failing.clone(),
    };
    let client: Client = client(&mock.ws_url(), Dialect::V1_1)
        .journal(journal)
        .connect_lazy();
    let err = client
        .invoke_tool("refund", json!({"order": 5}))
        .deadline(Duration::from_millis(200))
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err:?}");
    // The record stayed unfinished: a recovery sends it, and it runs once.
    failing.store(false, Ordering::SeqCst);
    mock.clear_faults();
    let recovered = client.recover().await.unwrap();
    assert_eq!(recovered.len(), 1);
    for call in recovered {
        call.await.unwrap();
    }
    assert_eq!(mock.executions("refund"), 1);
    client.close().await;
}

/// Two callers of one key through a journal: the first gives up (its
/// deadline) while the runtime is unreachable, the second, more patient,
/// runs the tool once the runtime is back. The record ends with the tool's
/// result, not the first caller's "did not run", and the first caller does
/// not claim "did not run".
#[tokio::test]
async fn one_callers_give_up_does_not_end_the_record_another_drives() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    mock.inject_always(Fault::RefuseUpgrade {
        status: 503,
        retry_after: None,
    });
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .journal(MemoryJournal::new())
        .connect_lazy();
    let key = IdempotencyKey::new();
    let args = json!({"order": 6});
    let patient = tokio::spawn({
        let (client, key, args) = (client.clone(), key.clone(), args.clone());
        async move {
            client
                .invoke_tool("refund", args)
                .idempotency_key(key)
                .deadline(Duration::from_secs(10))
                .send()
                .await
        }
    });
    let hasty = client
        .invoke_tool("refund", args.clone())
        .idempotency_key(key.clone())
        .deadline(Duration::from_millis(200))
        .send()
        .await
        .unwrap_err();
    assert_eq!(hasty.execution(), Execution::MayHaveRun, "{hasty}");
    mock.clear_faults();
    let out = patient.await.unwrap().expect("the patient caller's result");
    assert_eq!(out.value, json!({"refunded": 6}));
    assert_eq!(mock.executions("refund"), 1);
    let entry = client.lookup(&key).await.unwrap().expect("a record");
    assert!(
        matches!(entry.outcome(), Some(Ok(_))),
        "the record holds the result: {:?}",
        entry.state
    );
}

/// A call the journal refuses itself (its key is recorded for another
/// intent still running) does not write its refusal over that record.
#[tokio::test]
async fn a_conflict_the_journal_answers_is_not_written_over_the_running_call() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .journal(MemoryJournal::new())
        .connect()
        .await
        .unwrap();
    let key = IdempotencyKey::new();
    let running = tokio::spawn({
        let (client, key) = (client.clone(), key.clone());
        async move {
            client
                .invoke_tool("refund", json!({"order": 7, "ms": 300}))
                .idempotency_key(key)
                .send()
                .await
        }
    });
    while mock.total_executions() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let conflict = client
        .invoke_tool("refund", json!({"order": 8}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(conflict, Error::DuplicateKey { .. }),
        "{conflict:?}"
    );
    // The record has not reached the runtime's answer: it proves no
    // binding of the key (only the runtime's answer would).
    assert_eq!(conflict.execution(), Execution::NotSent);
    running.await.unwrap().expect("the first intent's result");
    let entry = client.lookup(&key).await.unwrap().expect("a record");
    assert!(
        matches!(entry.outcome(), Some(Ok(_))),
        "the record holds the first intent's result: {:?}",
        entry.state
    );
}
