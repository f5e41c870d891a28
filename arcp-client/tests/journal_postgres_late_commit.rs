//! The PostgreSQL journal keeps the ordering `Journal::apply` asks of a
//! store shared by several workers: a batch whose answer was lost while its
//! commit was still pending commits, if ever, before any later batch of
//! another worker that touches its keys. Otherwise the late commit could
//! land over the other worker's newer record (a "did not run" reopened for
//! a recovery to send).
//!
//! The commit is held for real: the server waits for a synchronous standby
//! that does not exist (`synchronous_standby_names`), so the commit stays
//! pending past the journal's round-trip bound (its answer is lost), and
//! lands once the requirement is dropped.

mod pg_support;

use std::time::{Duration, Instant, SystemTime};

use arcp_sdk::{
    IdempotencyKey, Journal, JournalEntry, JournalErrorKind, JournalOutcome, JournalState,
    JournalWrite, PostgresJournal, PostgresOptions,
};
use pg_support::OwnServer;
use tokio_postgres::NoTls;

async fn journal(url: &str, worker: &str) -> PostgresJournal {
    PostgresJournal::connect(
        url,
        PostgresOptions::default()
            .worker_id(worker)
            .lease_ttl(Duration::from_secs(30))
            .round_trip_timeout(Duration::from_millis(500)),
    )
    .await
    .expect("open the journal")
}

fn entry(key: &IdempotencyKey) -> JournalEntry {
    JournalEntry::new(
        key.clone(),
        "refund",
        format!(r#"{{"tool":"refund","arguments":{{}},"idempotency_key":"{key}"}}"#),
        arcp_types::new_trace_id(),
        Duration::from_secs(5),
    )
}

/// A call of `key` that ended "did not run" (refused before it was sent).
fn ended_not_run(key: &IdempotencyKey) -> Vec<JournalWrite> {
    vec![
        JournalWrite::Prepare(entry(key)),
        JournalWrite::Terminal {
            key: key.clone(),
            outcome: JournalOutcome::NotAccepted {
                last_error: "refused before it was sent".into(),
                attempts: 0,
                key_unused: true,
            },
            at: SystemTime::now(),
        },
    ]
}

/// Sets `synchronous_standby_names` on the server (empty: no standby
/// awaited) and waits until new sessions see it.
async fn standby_required(url: &str, names: &str) {
    let (db, conn) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    let task = tokio::spawn(conn);
    db.batch_execute(&format!(
        "ALTER SYSTEM SET synchronous_standby_names = '{names}'"
    ))
    .await
    .expect("ALTER SYSTEM");
    db.batch_execute("SELECT pg_reload_conf()")
        .await
        .expect("reload");
    drop(db);
    let _ = task.await;
    let start = Instant::now();
    loop {
        let (db, conn) = tokio_postgres::connect(url, NoTls).await.expect("connect");
        let task = tokio::spawn(conn);
        let now: String = db
            .query_one("SHOW synchronous_standby_names", &[])
            .await
            .expect("SHOW")
            .get(0);
        drop(db);
        let _ = task.await;
        if now == names {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "not reloaded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_was_lost_lands_before_another_workers_later_write() {
    // Durable: commits wait for synchronous replication when asked to.
    let Some(server) = OwnServer::start(true) else {
        return;
    };
    let url = server.database("late_commit").await;
    let a = journal(&url, "a").await;
    // b's own commits never wait for the standby.
    let b = journal(&format!("{url} options='-c synchronous_commit=local'"), "b").await;
    let key = IdempotencyKey::new();
    a.apply(&ended_not_run(&key)).expect("the key's first call");

    // Worker a prepares the key's next call, replacing the record; its
    // commit waits for a standby that never comes: the answer is lost.
    standby_required(&url, "phantom").await;
    let a_call = entry(&key);
    let a_trace = a_call.trace_id.clone();
    let a_thread = std::thread::spawn(move || {
        let result = a.apply(&[JournalWrite::Prepare(a_call)]);
        (a, result)
    });
    let (a, a_result) = a_thread.join().unwrap();
    let err = a_result.expect_err("the commit's answer is lost");
    assert_eq!(err.kind, JournalErrorKind::Unavailable, "{err}");

    // Worker b, reading the key's record as it was (the pending commit is
    // not visible), records another call of the key ending "did not run".
    // It must not commit before a's pending commit ends.
    let other = IdempotencyKey::new();
    b.apply(&ended_not_run(&other))
        .expect("b commits another key's writes meanwhile");
    let seen = b.get(&key).unwrap().expect("the first call's record");
    assert!(seen.is_terminal(), "{:?}", seen.state);
    let b_writes = ended_not_run(&key);
    let b_thread = std::thread::spawn(move || {
        let result = b.apply(&b_writes);
        (b, result)
    });
    let (b, b_result) = b_thread.join().unwrap();
    match b_result {
        Err(e) => assert_eq!(e.kind, JournalErrorKind::Unavailable, "{e}"),
        Ok(()) => {
            panic!("a later write of the key committed while an earlier commit of it was pending")
        }
    }

    // The standby requirement is dropped: the pending commit lands.
    standby_required(&url, "").await;
    let start = Instant::now();
    let landed = loop {
        let record = b.get(&key).unwrap().expect("a record");
        if record.trace_id == a_trace {
            break record;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "a's commit did not land: {record:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(landed.state, JournalState::Prepared);

    // b, trying again, finds a's call (a live lease) and is refused; a's
    // record stays what it committed.
    b.apply(&ended_not_run(&key)).unwrap();
    let fenced = b.take_fenced();
    assert!(
        !fenced.is_empty() && fenced.iter().all(|k| *k == key),
        "{fenced:?}"
    );
    let record = a.get(&key).unwrap().unwrap();
    assert_eq!(record.trace_id, a_trace);
    assert_eq!(record.state, JournalState::Prepared);
}
