//! Many calls journaled at once from several tasks: the SQLite file stays
//! consistent (every key present once, every state valid, `PRAGMA
//! integrity_check` ok), and every call ran once.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use arcp_mock::{Fault, MockRuntime, ToolFailure};
use arcp_sdk::{Client, Error, IdempotencyKey, JournalOutcome, RetryPolicy};
use serde_json::{json, Value};

const TASKS: usize = 8;
const CALLS_PER_TASK: usize = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_leave_a_consistent_journal() {
    let mock = MockRuntime::builder()
        .tool("echo", |args: Value, ctx| async move {
            ctx.sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(0)))
                .await;
            Ok(args)
        })
        .tool("fail", |_args: Value, _ctx| async move {
            Err(ToolFailure::new("PERMISSION_DENIED", "not allowed"))
        })
        .start()
        .await
        .expect("mock");
    // Connection cuts mid-run: calls are re-sent under their keys, and the
    // journal sees sent/accepted transitions more than once.
    mock.inject(Fault::DropAfterFrames(150));
    mock.inject(Fault::DropAfterFrames(300));

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("journal.db");
    let client = Client::builder(mock.ws_url())
        .journal_path(&path)
        .max_in_flight(64)
        .default_deadline(Duration::from_secs(30))
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(10))
                .max_delay(Duration::from_millis(200))
                .max_attempts(10)
                .max_elapsed(Duration::from_secs(20))
                .outcome_poll(Duration::from_millis(100)),
        )
        .connect()
        .await
        .expect("connect");

    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut calls = Vec::new();
            for i in 0..CALLS_PER_TASK {
                let tool = if i % 10 == 9 { "fail" } else { "echo" };
                let args = json!({"task": t, "call": i, "ms": (i % 5) * 3, "x": 0.1 * i as f64});
                let call = client.invoke_tool(tool, args.clone()).send();
                let key = call.key().cloned().expect("key");
                calls.push((key, tool, args, call));
            }
            // Await them together (all in flight), then look each one up.
            let mut results = Vec::new();
            for (key, tool, args, call) in calls {
                results.push((key, tool, args, call.await));
            }
            let mut out = Vec::new();
            for (key, tool, args, result) in results {
                let entry = client
                    .lookup(&key)
                    .await
                    .expect("lookup")
                    .expect("every call is recorded");
                out.push((key, tool, args, result, entry));
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    assert_eq!(all.len(), TASKS * CALLS_PER_TASK);
    for (key, tool, args, result, entry) in &all {
        match (*tool, result) {
            ("echo", Ok(out)) => assert_eq!(&out.value, args),
            ("fail", Err(Error::Tool(e))) => assert_eq!(e.code.as_str(), "PERMISSION_DENIED"),
            other => panic!("{key}: unexpected {other:?}"),
        }
        assert!(entry.is_terminal(), "{key}: {entry:?}");
        assert_eq!(&entry.outcome().expect("terminal").is_ok(), &result.is_ok());
        assert_eq!(entry.tool, *tool);
        assert!(entry.attempts >= 1, "{entry:?}");
        // The recorded intent is what was sent.
        let invoke = entry.invoke().expect("byte-exact intent");
        assert_eq!(&invoke.arguments, args);
        assert_eq!(invoke.idempotency_key.as_deref(), Some(key.as_str()));
    }
    assert!(mock.connections() >= 2, "the faults cut the connection");
    assert_eq!(mock.total_executions(), (TASKS * CALLS_PER_TASK) as u64);
    client.close().await;
    drop(client);

    // The file, read independently of the client.
    let conn = rusqlite::Connection::open(&path).expect("open the journal file");
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check");
    assert_eq!(check, "ok");
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("journal_mode");
    assert_eq!(mode, "wal");
    let mut stmt = conn
        .prepare("SELECT key, state, outcome, attempts FROM arcp_calls")
        .expect("select");
    let rows: Vec<(String, String, Option<String>, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    assert_eq!(rows.len(), TASKS * CALLS_PER_TASK, "every key once");
    let keys: HashSet<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(keys.len(), rows.len());
    let expected: HashMap<String, &str> = all
        .iter()
        .map(|(key, tool, ..)| (key.to_string(), *tool))
        .collect();
    for (key, state, outcome, attempts) in &rows {
        let tool = expected.get(key).expect("only keys this test invoked");
        assert_eq!(state, "terminal", "{key}");
        assert!(*attempts >= 1);
        let outcome: JournalOutcome =
            serde_json::from_str(outcome.as_deref().expect("terminal has an outcome"))
                .expect("outcome JSON");
        match (*tool, outcome) {
            ("echo", JournalOutcome::Ok { .. }) | ("fail", JournalOutcome::ToolError { .. }) => {}
            (tool, other) => panic!("{key} ({tool}): {other:?}"),
        }
        IdempotencyKey::try_from(key.as_str()).expect("valid key");
    }
}
