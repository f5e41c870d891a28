//! `arcp journal recover` with more unfinished calls than one claim hands
//! out (256), and the SDK's automatic recovery when a claim ends calls past
//! the runtime's key retention: every call is driven once, none twice.

use std::path::Path;
use std::time::Duration;

use arcp_mock::{Dialect, MockRuntime};
use serde_json::{json, Value};

use crate::support::{arcp, runtime};

fn slow_mock(rt: &tokio::runtime::Runtime, retention: Option<Duration>) -> MockRuntime {
    rt.block_on(async {
        let mut builder = MockRuntime::builder().dialect(Dialect::V1_1);
        if let Some(retention) = retention {
            builder = builder.key_retention(retention);
        }
        builder
            .tool("slow", |args: Value, ctx| async move {
                let ms = args["ms"].as_u64().unwrap_or(0);
                ctx.sleep(Duration::from_millis(ms)).await;
                Ok(json!({"slept_ms": ms}))
            })
            .start()
            .await
    })
    .unwrap()
}

/// Leaves `n` unfinished records `{prefix}-{i}` (each tool ran once; the
/// deadline passed while it worked).
fn leave_unfinished(
    rt: &tokio::runtime::Runtime,
    mock: &MockRuntime,
    journal: &Path,
    prefix: &str,
    n: usize,
) {
    rt.block_on(async {
        let client = arcp_sdk::Client::builder(mock.ws_url())
            .journal_path(journal)
            .connect()
            .await
            .unwrap();
        let calls = (0..n).map(|i| {
            let client = client.clone();
            let key = format!("{prefix}-{i}");
            async move {
                client
                    .invoke_tool("slow", json!({"ms": 600}))
                    .key_str(&key)
                    .deadline(Duration::from_millis(300))
                    .send()
                    .await
            }
        });
        for result in futures_util::future::join_all(calls).await {
            let e = result.expect_err("the deadline passes while the tool works");
            assert_eq!(e.execution(), arcp_sdk::Execution::MayHaveRun, "{e}");
        }
        client.close().await;
    });
}

/// Unfinished records `{prefix}-{i}` of the `slow` tool, first prepared
/// `at` (else now).
struct Records {
    prefix: &'static str,
    n: usize,
    ms: u64,
    deadline: Duration,
    at: Option<std::time::SystemTime>,
}

/// Writes `records` into a new journal at `journal`, as a process that
/// prepared them and died would have left them.
fn write_records(journal: &Path, records: &[Records]) {
    let j = arcp_sdk::SqliteJournal::open(journal).unwrap();
    let mut writes = Vec::new();
    for r in records {
        for i in 0..r.n {
            let key = arcp_sdk::IdempotencyKey::try_from(format!("{}-{i}", r.prefix)).unwrap();
            let intent = format!(
                r#"{{"tool":"slow","arguments":{{"ms":{}}},"idempotency_key":"{key}"}}"#,
                r.ms
            );
            let mut entry = arcp_sdk::JournalEntry::new(
                key,
                "slow",
                &intent,
                "0123456789abcdef0123456789abcdef",
                r.deadline,
            );
            if let Some(at) = r.at {
                entry.created_at = at;
                entry.updated_at = at;
            }
            writes.push(arcp_sdk::JournalWrite::Prepare(entry));
        }
    }
    arcp_sdk::Journal::apply(&j, &writes).unwrap();
}

fn unfinished(journal: &Path) -> usize {
    let out = arcp([
        "journal",
        "list",
        "--unfinished",
        "--json",
        "--limit",
        "100000",
    ])
    .arg("--journal")
    .arg(journal)
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn recover_drives_every_unfinished_call_past_one_claim() {
    let rt = runtime();
    let mock = slow_mock(&rt, None);
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.db");
    leave_unfinished(&rt, &mock, &journal, "many", 300);
    std::thread::sleep(Duration::from_millis(500));
    let out = arcp(["journal", "recover", "--json", "--dialect", "v1.1"])
        .args(["--url", &mock.ws_url()])
        .arg("--journal")
        .arg(&journal)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(mock.executions("slow"), 300, "no tool ran twice");
    let reported = String::from_utf8_lossy(&out.stdout).lines().count();
    assert_eq!((reported, unfinished(&journal)), (300, 0));
}

#[test]
fn automatic_recovery_goes_on_past_a_claim_that_ended_calls_past_the_retention() {
    let retention = Duration::from_secs(2);
    let rt = runtime();
    let mock = slow_mock(&rt, Some(retention));
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.db");
    leave_unfinished(&rt, &mock, &journal, "old", 20);
    std::thread::sleep(retention + Duration::from_millis(300));
    leave_unfinished(&rt, &mock, &journal, "fresh", 280);
    std::thread::sleep(Duration::from_millis(500));
    rt.block_on(async {
        let client = arcp_sdk::Client::builder(mock.ws_url())
            .journal_path(&journal)
            .runtime_key_retention(retention)
            .recovery(arcp_sdk::RecoveryMode::Automatic)
            .connect()
            .await
            .unwrap();
        // (The journal is the client's while it runs: asked through it.)
        let until = tokio::time::Instant::now() + Duration::from_secs(20);
        for i in 0..280 {
            let key = arcp_sdk::IdempotencyKey::try_from(format!("fresh-{i}")).unwrap();
            while !client
                .lookup(&key)
                .await
                .unwrap()
                .is_some_and(|entry| entry.is_terminal())
            {
                assert!(
                    tokio::time::Instant::now() < until,
                    "fresh-{i} not recovered"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        client.close().await;
    });
    for (key, n) in mock.executions_by_key() {
        assert_eq!(n, 1, "key {key} ran {n} times");
    }
    assert_eq!(unfinished(&journal), 0);
}

#[test]
fn recover_reaches_calls_behind_a_claim_of_calls_that_stay_unknown() {
    // 260 calls whose outcome stays unknown (the tool outlives their
    // deadline), older than three others: one run drives all of them once.
    let rt = runtime();
    let mock = slow_mock(&rt, None);
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.db");
    let old = std::time::SystemTime::now() - Duration::from_secs(60);
    write_records(
        &journal,
        &[
            Records {
                prefix: "stuck",
                n: 260,
                ms: 60_000,
                deadline: Duration::from_millis(300),
                at: Some(old),
            },
            Records {
                prefix: "young",
                n: 3,
                ms: 0,
                deadline: Duration::from_millis(300),
                at: None,
            },
        ],
    );
    let out = arcp(["journal", "recover", "--json", "--dialect", "v1.1"])
        .args(["--url", &mock.ws_url()])
        .arg("--journal")
        .arg(&journal)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 263, "each call reported once");
    for i in 0..3 {
        assert_eq!(mock.executions_for_key(&format!("young-{i}")), 1);
    }
    assert_eq!(mock.executions("slow"), 263, "each call driven once");
    assert_eq!(unfinished(&journal), 260);
}

#[test]
fn recover_reaches_live_calls_behind_a_claim_of_expired_ones() {
    // 300 calls past the runtime's key retention, older than 5 live ones:
    // the claims that only end calls do not end the run.
    let rt = runtime();
    let mock = slow_mock(&rt, None);
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.db");
    let old = std::time::SystemTime::now() - Duration::from_secs(7_200);
    write_records(
        &journal,
        &[
            Records {
                prefix: "expired",
                n: 300,
                ms: 0,
                deadline: Duration::from_secs(5),
                at: Some(old),
            },
            Records {
                prefix: "live",
                n: 5,
                ms: 0,
                deadline: Duration::from_secs(5),
                at: None,
            },
        ],
    );
    let out = arcp(["journal", "recover", "--json", "--dialect", "v1.1"])
        .args(["--url", &mock.ws_url(), "--runtime-key-retention", "3600"])
        .arg("--journal")
        .arg(&journal)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    for i in 0..5 {
        assert_eq!(mock.executions_for_key(&format!("live-{i}")), 1, "live-{i}");
    }
    assert_eq!(mock.executions("slow"), 5, "no expired call was sent");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 305, "each call reported once");
    assert_eq!(unfinished(&journal), 0);
}
