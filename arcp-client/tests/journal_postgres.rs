//! The PostgreSQL journal's invariants, each against a real server (see
//! `pg_support`): prepared before the first send, one active attempt per
//! call, terminal is final, fencing of a worker that lost its lease,
//! idempotent recovery (twice, and on two workers at once), silence is not
//! success, and state changes committed with their history rows.

mod pg_support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arcp_mock::MockRuntime;
use arcp_sdk::{
    Client, ClientBuilder, Error, IdempotencyKey, Journal, JournalEntry, JournalErrorKind,
    JournalOutcome, JournalState, JournalWrite, PostgresJournal, PostgresOptions, RetryPolicy,
};
use serde_json::{json, Value};
use tokio_postgres::NoTls;

/// A raw connection, to read and attack the tables directly.
async fn sql(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(conn);
    client
}

async fn journal(url: &str, worker: &str, lease: Duration) -> PostgresJournal {
    PostgresJournal::connect(
        url,
        PostgresOptions::default()
            .worker_id(worker)
            .lease_ttl(lease)
            // These tests are about leases, not slow links: a loaded test
            // machine must not turn a short lease's round-trip bound into
            // a failed write.
            .round_trip_timeout(Duration::from_secs(2)),
    )
    .await
    .expect("open the journal")
}

fn entry(key: &str) -> JournalEntry {
    let key = IdempotencyKey::try_from(key).unwrap();
    JournalEntry::new(
        key.clone(),
        "refund",
        format!(r#"{{"tool":"refund","arguments":{{}},"idempotency_key":"{key}"}}"#),
        arcp_types::new_trace_id(),
        Duration::from_secs(5),
    )
}

fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::try_from(k).unwrap()
}

fn sent(k: &str, attempts: u32) -> JournalWrite {
    JournalWrite::Sent {
        key: key(k),
        attempts,
        at: SystemTime::now(),
    }
}

fn accepted(k: &str, job: &str) -> JournalWrite {
    JournalWrite::Accepted {
        key: key(k),
        job_id: job.into(),
        at: SystemTime::now(),
    }
}

fn terminal(k: &str, value: Value) -> JournalWrite {
    JournalWrite::Terminal {
        key: key(k),
        outcome: ok(value),
        at: SystemTime::now(),
    }
}

fn ok(value: Value) -> JournalOutcome {
    JournalOutcome::Ok {
        value,
        job_id: None,
        replayed: false,
        attempts: 1,
    }
}

/// History rows, attempts, and the sum of the calls' generations.
async fn snapshot(db: &tokio_postgres::Client) -> (i64, i64, i64) {
    let r = db
        .query_one(
            "SELECT (SELECT count(*) FROM arcp_history), \
                    (SELECT count(*) FROM arcp_attempts), \
                    (SELECT sum(generation) FROM arcp_calls)::bigint",
            &[],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

/// `(event, worker, generation)` of every history row of `key`, in order.
async fn history(db: &tokio_postgres::Client, key: &str) -> Vec<(String, String, i64)> {
    db.query(
        "SELECT event, worker, generation FROM arcp_history WHERE key = $1 ORDER BY id",
        &[&key],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

fn builder(url: &str) -> ClientBuilder {
    Client::builder(url)
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
}

#[tokio::test]
async fn migrations_are_versioned_applied_once_and_a_newer_schema_is_refused() {
    let url = postgres_or_skip!();
    // Four workers starting together migrate once (advisory lock).
    let opens = (0..4).map(|i| {
        let url = url.clone();
        tokio::spawn(async move { journal(&url, &format!("w{i}"), Duration::from_secs(5)).await })
    });
    for j in futures_util::future::join_all(opens).await {
        let j = j.unwrap();
        assert_eq!(j.schema_version().await.unwrap(), 3);
    }
    assert_eq!(PostgresJournal::latest_schema_version(), 3);
    let db = sql(&url).await;
    let rows: i64 = db
        .query_one("SELECT count(*) FROM arcp_journal_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        rows,
        i64::from(PostgresJournal::latest_schema_version()),
        "one row per migration"
    );
    db.execute(
        "INSERT INTO arcp_journal_schema (version, description) VALUES (99, 'from the future')",
        &[],
    )
    .await
    .unwrap();
    let err = PostgresJournal::connect(&url, PostgresOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind, JournalErrorKind::Schema, "{err}");
    assert!(err.message.contains("99"), "{err}");
}

#[tokio::test]
async fn an_unreachable_server_is_a_typed_error() {
    let err = PostgresJournal::connect(
        "host=/nonexistent-arcp-socket-dir user=x dbname=x",
        PostgresOptions::default().connect_timeout(Duration::from_secs(1)),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind, JournalErrorKind::Io, "{err}");
    let err = PostgresJournal::connect("postgres://[::1", PostgresOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind, JournalErrorKind::Io, "{err}");
}

/// A key as the runtime got it, and the state the journal had for it then.
type Seen = (String, Option<&'static str>);

/// Invariant: a call is prepared before its first send. The runtime's tool
/// looks the key up in the journal (another worker's view of the same
/// database) when the request reaches it; and a `sent` for a key nobody
/// prepared creates nothing.
#[tokio::test]
async fn a_call_is_prepared_before_its_first_send() {
    let url = postgres_or_skip!();
    let observer = Arc::new(journal(&url, "observer", Duration::from_secs(5)).await);
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let mock = {
        let (observer, seen) = (observer.clone(), seen.clone());
        MockRuntime::builder()
            .tool("refund", move |args: Value, ctx| {
                let (observer, seen) = (observer.clone(), seen.clone());
                async move {
                    let key = ctx.idempotency_key().unwrap_or_default().to_owned();
                    let state = observer
                        .get(&IdempotencyKey::try_from(key.as_str()).unwrap())
                        .unwrap()
                        .map(|e| e.state.name());
                    seen.lock().unwrap().push((key, state));
                    Ok(json!({"refunded": args["order"]}))
                }
            })
            .start()
            .await
            .unwrap()
    };
    let client = builder(&mock.ws_url())
        .journal(journal(&url, "w1", Duration::from_secs(5)).await)
        .connect()
        .await
        .unwrap();
    let calls = (0..20).map(|i| client.invoke_tool("refund", json!({"order": i})).send());
    for out in futures_util::future::join_all(calls).await {
        out.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 20);
    for (key, state) in &seen {
        assert!(
            state.is_some(),
            "{key} reached the runtime before its record"
        );
    }

    let db = sql(&url).await;
    observer.apply(&[sent("never-prepared", 1)]).unwrap();
    let n: i64 = db
        .query_one(
            "SELECT count(*) FROM arcp_history WHERE key = 'never-prepared'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    assert!(observer.get(&key("never-prepared")).unwrap().is_none());
    // The database: history (and attempts) only of a recorded call.
    let err = db
        .execute(
            "INSERT INTO arcp_history (key, generation, worker, event, state, attempts) \
             VALUES ('never-prepared', 1, 'x', 'sent', 'sent', 1)",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "23503", "{err}");
}

/// Invariant: exactly one attempt per call has execution authority.
#[tokio::test]
async fn one_active_attempt_per_call() {
    let url = postgres_or_skip!();
    let a = journal(&url, "a", Duration::from_millis(200)).await;
    let b = journal(&url, "b", Duration::from_millis(200)).await;
    a.apply(&[JournalWrite::Prepare(entry("k1"))]).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.claim(10, &HashSet::new()).unwrap().len(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(a.claim(10, &HashSet::new()).unwrap().len(), 1);
    let db = sql(&url).await;
    let rows = db
        .query(
            "SELECT generation, worker, ended_by FROM arcp_attempts WHERE key = 'k1' \
             ORDER BY generation",
            &[],
        )
        .await
        .unwrap();
    let rows: Vec<(i64, String, Option<String>)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        rows,
        vec![
            (1, "a".into(), Some("superseded".into())),
            (2, "b".into(), Some("superseded".into())),
            (3, "a".into(), None),
        ]
    );
    // A second active attempt is refused by the partial unique index.
    let err = db
        .execute(
            "INSERT INTO arcp_attempts (key, generation, worker) VALUES ('k1', 4, 'intruder')",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "23505", "{err}");
    a.apply(&[terminal("k1", json!(1))]).unwrap();
    let active: i64 = db
        .query_one(
            "SELECT count(*) FROM arcp_attempts WHERE key = 'k1' AND ended_at IS NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(active, 0, "a terminal call has no active attempt");
}

/// Invariant: a terminal state is final, through the journal and through
/// SQL (a trigger).
#[tokio::test]
async fn a_terminal_record_is_final() {
    let url = postgres_or_skip!();
    let a = journal(&url, "a", Duration::from_secs(5)).await;
    a.apply(&[
        JournalWrite::Prepare(entry("k1")),
        sent("k1", 1),
        accepted("k1", "job_1"),
        terminal("k1", json!("first")),
    ])
    .unwrap();
    a.apply(&[
        sent("k1", 5),
        accepted("k1", "job_2"),
        terminal("k1", json!("second")),
        JournalWrite::Release { key: key("k1") },
    ])
    .unwrap();
    let e = a.get(&key("k1")).unwrap().unwrap();
    assert_eq!(e.state, JournalState::Terminal(ok(json!("first"))));
    assert_eq!(e.attempts, 1);
    let db = sql(&url).await;
    for attack in [
        "UPDATE arcp_calls SET state = 'accepted', outcome = NULL, job_id = 'j', \
         lease_until = now() WHERE key = 'k1'",
        "UPDATE arcp_calls SET outcome = '{\"ok\":{\"value\":2}}' WHERE key = 'k1'",
        "UPDATE arcp_calls SET updated_ms = 0 WHERE key = 'k1'",
    ] {
        let err = db.execute(attack, &[]).await.unwrap_err();
        assert_eq!(err.code().unwrap().code(), "AR001", "{attack}: {err}");
    }
    // Transitions never move backwards either.
    a.apply(&[
        JournalWrite::Prepare(entry("k2")),
        accepted("k2", "job_3"),
        sent("k2", 1),
    ])
    .unwrap();
    assert_eq!(
        a.get(&key("k2")).unwrap().unwrap().state,
        JournalState::Accepted {
            job_id: "job_3".into()
        }
    );
    let err = db
        .execute("UPDATE arcp_calls SET state = 'sent' WHERE key = 'k2'", &[])
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "AR003", "{err}");
    // A terminal record is replaced only by a new record (a new attempt of
    // a key that ended without an outcome), under the next generation.
    let mut again = entry("k1");
    again.state = JournalState::Prepared;
    a.apply(&[JournalWrite::Prepare(again)]).unwrap();
    let generation: i64 = db
        .query_one("SELECT generation FROM arcp_calls WHERE key = 'k1'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(generation, 2);
}

/// Fencing: a worker that froze past its lease and wakes up after another
/// worker claimed its call writes nothing, learns it lost the call, and the
/// database itself refuses a write under the old generation.
#[tokio::test]
async fn a_worker_that_lost_its_lease_is_fenced_out() {
    let url = postgres_or_skip!();
    let a = journal(&url, "a", Duration::from_millis(300)).await;
    let b = journal(&url, "b", Duration::from_secs(30)).await;
    a.apply(&[
        JournalWrite::Prepare(entry("k1")),
        JournalWrite::Prepare(entry("k2")),
        JournalWrite::Prepare(entry("k9")),
        sent("k1", 1),
    ])
    .unwrap();
    // Within the lease nothing is claimable.
    assert!(b.claim(10, &HashSet::new()).unwrap().is_empty());
    assert!(!b.acquire(&key("k1")).unwrap());
    tokio::time::sleep(Duration::from_millis(400)).await; // "a" is frozen
    let claimed = b.claim(1, &HashSet::new()).unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].key, key("k1"));
    assert_eq!(claimed[0].state, JournalState::Sent);
    assert!(
        b.acquire(&key("k9")).unwrap(),
        "an expired lease is taken over"
    );

    // "a" still believes it holds k9: its write names generation 1, the
    // call is at generation 2, and the database refuses it.
    a.apply(&[sent("k9", 3)]).unwrap();
    assert_eq!(a.take_fenced(), vec![key("k9")]);
    let k9 = a.get(&key("k9")).unwrap().unwrap();
    assert_eq!((k9.state, k9.attempts), (JournalState::Prepared, 0));

    // "a" wakes up: its renewal finds k1 gone (k2 it still holds: nobody
    // claimed it, so its lease is renewed).
    assert_eq!(a.renew().unwrap(), vec![key("k1")]);
    assert_eq!(a.held(), vec![(key("k2"), 1)]);
    // Its late writes are refused and reported (the key once); the rest of
    // the batch applies.
    a.apply(&[
        accepted("k1", "stale"),
        terminal("k1", json!("stale")),
        sent("k2", 1),
    ])
    .unwrap();
    assert_eq!(a.take_fenced(), vec![key("k1")]);
    assert_eq!(
        a.get(&key("k1")).unwrap().unwrap().state,
        JournalState::Sent
    );
    assert_eq!(
        a.get(&key("k2")).unwrap().unwrap().state,
        JournalState::Sent
    );
    // "a" cannot take it back by preparing it again either.
    let mut e = entry("k1");
    e.intent = claimed[0].intent.clone();
    a.apply(&[JournalWrite::Prepare(e)]).unwrap();
    assert_eq!(a.take_fenced(), vec![key("k1")]);
    // The new owner writes.
    b.apply(&[accepted("k1", "job_1"), terminal("k1", json!("b"))])
        .unwrap();
    assert!(b.take_fenced().is_empty());
    assert_eq!(
        b.get(&key("k1")).unwrap().unwrap().state,
        JournalState::Terminal(ok(json!("b")))
    );

    let db = sql(&url).await;
    let h = history(&db, "k1").await;
    assert_eq!(
        h,
        vec![
            ("prepared".into(), "a".into(), 1),
            ("sent".into(), "a".into(), 1),
            ("claimed".into(), "b".into(), 2),
            ("accepted".into(), "b".into(), 2),
            ("terminal".into(), "b".into(), 2),
        ]
    );
    // Behind the WHERE guards, the trigger refuses a write that names an
    // older generation, or another worker than the owner.
    // k2 is still a's, under generation 1: its own write passes.
    db.execute(
        "UPDATE arcp_calls SET attempts = 3, writer = 'a', writer_generation = 1 \
         WHERE key = 'k2'",
        &[],
    )
    .await
    .unwrap();
    db.execute(
        "UPDATE arcp_calls SET lease_until = now() - interval '1 second' WHERE key = 'k2'",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(b.claim(10, &HashSet::new()).unwrap().len(), 1);
    for attack in [
        "UPDATE arcp_calls SET attempts = 9, writer = 'a', writer_generation = 1 WHERE key = 'k2'",
        "UPDATE arcp_calls SET attempts = 9, writer = 'a', writer_generation = 2 WHERE key = 'k2'",
        "UPDATE arcp_calls SET owner = 'a' WHERE key = 'k2'",
        "UPDATE arcp_calls SET generation = 1, owner = 'a', writer = 'a', writer_generation = 1 \
         WHERE key = 'k2'",
    ] {
        let err = db.execute(attack, &[]).await.unwrap_err();
        assert_eq!(err.code().unwrap().code(), "AR002", "{attack}: {err}");
    }
}

/// Invariant: recovery is idempotent. Two workers recovering at once claim
/// each call once; running it again changes nothing.
#[tokio::test]
async fn recovery_is_idempotent_across_workers_and_repeats() {
    let url = postgres_or_skip!();
    {
        let dead = journal(&url, "dead", Duration::from_millis(300)).await;
        let writes: Vec<JournalWrite> = (0..60)
            .map(|i| JournalWrite::Prepare(entry(&format!("k{i:02}"))))
            .collect();
        dead.apply(&writes).unwrap();
    } // the worker disappears without a word
    tokio::time::sleep(Duration::from_millis(400)).await;
    let b = Arc::new(journal(&url, "b", Duration::from_secs(30)).await);
    let c = Arc::new(journal(&url, "c", Duration::from_secs(30)).await);
    let claim = |j: Arc<PostgresJournal>| {
        std::thread::spawn(move || {
            let mut keys = Vec::new();
            // Small claims, interleaving with the other worker's.
            loop {
                let got = j.claim(7, &HashSet::new()).unwrap();
                if got.is_empty() {
                    return keys;
                }
                keys.extend(got.into_iter().map(|e| e.key));
            }
        })
    };
    let (tb, tc) = (claim(b.clone()), claim(c.clone()));
    let (kb, kc) = (tb.join().unwrap(), tc.join().unwrap());
    let sb: HashSet<_> = kb.iter().cloned().collect();
    let sc: HashSet<_> = kc.iter().cloned().collect();
    assert!(sb.is_disjoint(&sc), "a call claimed by both workers");
    assert_eq!(kb.len() + kc.len(), 60);
    assert_eq!(sb.len() + sc.len(), 60);

    let db = sql(&url).await;
    let before = snapshot(&db).await;
    assert_eq!(before, (120, 120, 120), "one claim (generation 2) per call");
    // Again, on both, and a third worker: nothing to claim, nothing changes.
    assert!(b.claim(100, &HashSet::new()).unwrap().is_empty());
    assert!(c.claim(100, &HashSet::new()).unwrap().is_empty());
    let d = journal(&url, "d", Duration::from_secs(30)).await;
    assert!(d.claim(100, &HashSet::new()).unwrap().is_empty());
    assert_eq!(snapshot(&db).await, before);
}

/// Invariant: silence is not success. A worker that disappears leaves its
/// calls unfinished (never done), claimable once its lease lapses; a call
/// this worker stops driving without an outcome is released at once.
#[tokio::test]
async fn silence_is_not_success() {
    let url = postgres_or_skip!();
    {
        let gone = journal(&url, "gone", Duration::from_millis(300)).await;
        gone.apply(&[
            JournalWrite::Prepare(entry("k1")),
            sent("k1", 1),
            accepted("k1", "job_1"),
            JournalWrite::Prepare(entry("k2")),
        ])
        .unwrap();
    }
    let b = journal(&url, "b", Duration::from_secs(30)).await;
    let unfinished = b.unfinished(10).unwrap();
    assert_eq!(unfinished.len(), 2);
    assert!(unfinished.iter().all(|e| !e.is_terminal()));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let claimed = b.claim(10, &HashSet::new()).unwrap();
    assert_eq!(claimed.len(), 2);
    assert_eq!(
        claimed[0].state,
        JournalState::Accepted {
            job_id: "job_1".into()
        }
    );
    assert_eq!(claimed[1].state, JournalState::Prepared);

    // Through a client: a call whose deadline passes stays unfinished, and
    // is released for any worker's recovery at once (a 30 s lease).
    let mock = MockRuntime::builder()
        .tool("slow", |_args: Value, ctx| async move {
            ctx.sleep(Duration::from_secs(30)).await;
            Ok(json!("late"))
        })
        .start()
        .await
        .unwrap();
    let client = builder(&mock.ws_url())
        .journal(journal(&url, "caller", Duration::from_secs(30)).await)
        .connect()
        .await
        .unwrap();
    let err = client
        .invoke_tool("slow", json!({}))
        .key_str("slow-1")
        .deadline(Duration::from_millis(300))
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DeadlineExceeded { .. }), "{err}");
    let entry = client.lookup(&key("slow-1")).await.unwrap().unwrap();
    assert!(!entry.is_terminal(), "{:?}", entry.state);
    let claimed = b.claim(10, &HashSet::new()).unwrap();
    assert_eq!(claimed.len(), 1, "released at once");
    assert_eq!(claimed[0].key, key("slow-1"));
    assert!(!claimed[0].is_terminal());
    client.close().await;
}

/// Invariant: a state change and its history row commit in one
/// transaction: a batch that fails leaves neither.
#[tokio::test]
async fn state_changes_and_history_commit_together() {
    let url = postgres_or_skip!();
    let a = journal(&url, "a", Duration::from_secs(30)).await;
    a.apply(&[JournalWrite::Prepare(entry("k1"))]).unwrap();
    let mut bad = entry("k2");
    // PostgreSQL text cannot hold NUL: the insert fails inside the batch.
    bad.intent = "\u{0}".into();
    let err = a
        .apply(&[
            sent("k1", 1),
            accepted("k1", "job_1"),
            JournalWrite::Prepare(bad),
        ])
        .unwrap_err();
    assert_eq!(err.kind, JournalErrorKind::Io, "{err}");
    assert_eq!(
        a.get(&key("k1")).unwrap().unwrap().state,
        JournalState::Prepared
    );
    assert!(a.get(&key("k2")).unwrap().is_none());
    let db = sql(&url).await;
    assert_eq!(
        history(&db, "k1").await,
        vec![("prepared".into(), "a".into(), 1)]
    );
    // Still the owner: the same writes apply.
    a.apply(&[sent("k1", 1), accepted("k1", "job_1")]).unwrap();
    assert_eq!(history(&db, "k1").await.len(), 3);
    // Every row of the calls table has its history: none without.
    let orphans: i64 = db
        .query_one(
            "SELECT count(*) FROM arcp_calls c WHERE NOT EXISTS \
             (SELECT 1 FROM arcp_history h WHERE h.key = c.key AND h.state = c.state)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(orphans, 0);
}

/// Through clients: calls are journaled end to end, a key owned by a live
/// worker is not driven by another, and recovery claims a dead worker's
/// calls and finishes them (the runtime ran each tool once).
#[tokio::test]
async fn clients_share_the_journal_and_recover_a_dead_workers_calls() {
    let url = postgres_or_skip!();
    let mock = MockRuntime::builder()
        .tool("refund", |args: Value, ctx| async move {
            ctx.sleep(Duration::from_millis(50)).await;
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await
        .unwrap();
    let a = builder(&mock.ws_url())
        .journal(journal(&url, "a", Duration::from_secs(30)).await)
        .connect()
        .await
        .unwrap();
    let out = a
        .invoke_tool("refund", json!({"order": 1}))
        .key_str("order-1")
        .send()
        .await
        .unwrap();
    assert_eq!(out.value, json!({"refunded": 1}));
    let e = a.lookup(&out.key).await.unwrap().unwrap();
    assert_eq!(
        e.state,
        JournalState::Terminal(JournalOutcome::Ok {
            value: json!({"refunded": 1}),
            job_id: out.job_id.clone(),
            replayed: false,
            attempts: 1,
        })
    );

    // A worker that prepared two calls and died before sending them.
    let intent = |k: &str, order: u32| {
        format!(r#"{{"tool":"refund","arguments":{{"order":{order}}},"idempotency_key":"{k}"}}"#)
    };
    {
        let dead = journal(&url, "dead", Duration::from_millis(300)).await;
        let mut writes = Vec::new();
        for (k, order) in [("order-2", 2), ("order-3", 3)] {
            let mut e = entry(k);
            e.intent = intent(k, order);
            writes.push(JournalWrite::Prepare(e));
        }
        dead.apply(&writes).unwrap();
    }
    // While its lease lives, another worker does not drive its call.
    let b = builder(&mock.ws_url())
        .journal(journal(&url, "b", Duration::from_secs(30)).await)
        .connect()
        .await
        .unwrap();
    let err = b
        .invoke_tool("refund", json!({"order": 2}))
        .key_str("order-2")
        .send()
        .await
        .unwrap_err();
    match &err {
        Error::Journal(e) => assert_eq!(e.kind, JournalErrorKind::Fenced, "{e}"),
        other => panic!("{other}"),
    }
    assert_eq!(mock.executions_for_key("order-2"), 0);
    assert!(b.recover().await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(400)).await;
    let calls = b.recover().await.unwrap();
    assert_eq!(calls.len(), 2);
    for call in calls {
        call.await.unwrap();
    }
    assert!(b.recover().await.unwrap().is_empty());
    assert!(a.recover().await.unwrap().is_empty());
    for k in ["order-1", "order-2", "order-3"] {
        assert_eq!(mock.executions_for_key(k), 1, "{k}");
        let e = b.lookup(&key(k)).await.unwrap().unwrap();
        assert!(e.is_terminal(), "{k}: {:?}", e.state);
    }
    // And a re-issued finished call is answered from the shared journal.
    let again = b
        .invoke_tool("refund", json!({"order": 1}))
        .key_str("order-1")
        .send()
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(mock.executions_for_key("order-1"), 1);
    a.close().await;
    b.close().await;
}

/// A recovered call its worker never drives (the `Invocation` dropped
/// unawaited) is released at once: another worker claims it now, not after
/// the first worker exits (its lease would otherwise be renewed for as long
/// as it lives).
#[tokio::test]
async fn a_recovered_call_dropped_unawaited_is_released_to_the_fleet() {
    let url = postgres_or_skip!();
    let mock = MockRuntime::builder()
        .tool("refund", |args: Value, _ctx| async move {
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await
        .unwrap();
    {
        let dead = journal(&url, "dead-20", Duration::from_millis(200)).await;
        let mut e = entry("order-20");
        e.intent =
            r#"{"tool":"refund","arguments":{"order":20},"idempotency_key":"order-20"}"#.to_owned();
        dead.apply(&[JournalWrite::Prepare(e)]).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b = builder(&mock.ws_url())
        .journal(journal(&url, "b-20", Duration::from_secs(30)).await)
        .connect()
        .await
        .unwrap();
    let c = builder(&mock.ws_url())
        .journal(journal(&url, "c-20", Duration::from_secs(30)).await)
        .connect()
        .await
        .unwrap();
    let claimed = b.recover().await.unwrap();
    assert_eq!(claimed.len(), 1);
    drop(claimed);
    let started = std::time::Instant::now();
    let calls = loop {
        let calls = c.recover().await.unwrap();
        if !calls.is_empty() {
            break calls;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the dropped call is still held by the worker that claimed it"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(calls.len(), 1);
    for call in calls {
        call.await.unwrap();
    }
    assert_eq!(mock.executions_for_key("order-20"), 1);
    b.close().await;
    c.close().await;
}

/// Retention never deletes a call a live worker holds, however old its
/// record: a long job renews its lease, not its record.
#[tokio::test]
async fn retention_never_purges_a_call_a_live_worker_holds() {
    let url = postgres_or_skip!();
    let held = journal(&url, "holder-30", Duration::from_secs(30)).await;
    let lapsed = journal(&url, "lapsed-30", Duration::from_millis(50)).await;
    held.apply(&[JournalWrite::Prepare(entry("order-30"))])
        .unwrap();
    lapsed
        .apply(&[JournalWrite::Prepare(entry("order-31"))])
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // An hour from now, with unfinished records kept for one second.
    let later = std::time::SystemTime::now() + Duration::from_secs(3600);
    let report = held
        .purge(
            &arcp_sdk::Retention::default().unfinished_ttl(Duration::from_secs(1)),
            later,
        )
        .unwrap();
    assert_eq!(report.expired_unfinished, 1, "{report:?}");
    assert!(
        held.get(&key("order-30")).unwrap().is_some(),
        "a held call was purged"
    );
    assert!(
        held.get(&key("order-31")).unwrap().is_none(),
        "a lapsed call was kept"
    );
}

/// Invariants hold per statement: a removed record takes its history and
/// attempts with it, and one bad row fails a many-row statement whole.
#[tokio::test]
async fn removal_cascades_and_a_statement_is_guarded_whole() {
    let url = postgres_or_skip!();
    let a = journal(&url, "a", Duration::from_secs(5)).await;
    a.apply(&[
        JournalWrite::Prepare(entry("k1")),
        JournalWrite::Prepare(entry("k2")),
        JournalWrite::Prepare(entry("k3")),
        JournalWrite::Prepare(entry("k4")),
        terminal("k1", json!(1)),
        accepted("k2", "job_2"),
    ])
    .unwrap();
    a.apply(&[JournalWrite::Remove { key: key("k1") }]).unwrap();
    let db = sql(&url).await;
    let rows = |k: &'static str| {
        let db = &db;
        async move {
            let r = db
                .query_one(
                    "SELECT (SELECT count(*) FROM arcp_history WHERE key = $1), \
                            (SELECT count(*) FROM arcp_attempts WHERE key = $1)",
                    &[&k],
                )
                .await
                .unwrap();
            (r.get::<_, i64>(0), r.get::<_, i64>(1))
        }
    };
    assert_eq!(rows("k1").await, (0, 0), "removed with its record");
    assert_eq!(
        rows("k2").await,
        (2, 1),
        "prepared and accepted, one attempt"
    );
    assert_eq!(rows("k3").await, (1, 1));
    // k3 may move forwards, k2 may not move back: the statement fails whole.
    let err = db
        .execute(
            "UPDATE arcp_calls SET state = 'sent' WHERE key IN ('k2', 'k3')",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "AR003", "{err}");
    let message = err.as_db_error().unwrap().message();
    assert!(message.contains("k2"), "names the row: {message}");
    assert_eq!(
        a.get(&key("k3")).unwrap().unwrap().state,
        JournalState::Prepared
    );
    // Identity never changes, whichever column.
    for attack in [
        "UPDATE arcp_calls SET key = 'k9' WHERE key = 'k3'",
        "UPDATE arcp_calls SET intent = '{}' WHERE key = 'k3'",
    ] {
        let err = db.execute(attack, &[]).await.unwrap_err();
        assert_eq!(err.code().unwrap().code(), "AR003", "{attack}: {err}");
        let message = err.as_db_error().unwrap().message();
        assert!(message.contains("never change"), "{attack}: {message}");
    }
    // A many-row statement of the owner is recorded row by row.
    db.execute(
        "UPDATE arcp_calls SET state = 'sent', attempts = 1 WHERE key IN ('k3', 'k4')",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(rows("k3").await, (2, 1));
    assert_eq!(
        history(&db, "k4").await,
        vec![
            ("prepared".into(), "a".into(), 1),
            ("sent".into(), "a".into(), 1)
        ]
    );
}

/// A batch with several writes per key keeps each key's order, however the
/// store groups them: six calls prepared, sent, accepted and ended in one
/// batch each read terminal with their history in order.
#[tokio::test]
async fn a_batch_keeps_each_keys_order() {
    let url = postgres_or_skip!();
    let a = journal(&url, "a", Duration::from_secs(5)).await;
    let keys: Vec<String> = (0..6).map(|i| format!("order-{i}")).collect();
    let mut writes = Vec::new();
    for k in &keys {
        writes.push(JournalWrite::Prepare(entry(k)));
    }
    for k in &keys {
        writes.push(sent(k, 1));
    }
    for k in &keys {
        writes.push(accepted(k, &format!("job-{k}")));
        writes.push(terminal(k, json!(k)));
    }
    a.apply(&writes).unwrap();
    let db = sql(&url).await;
    for k in &keys {
        assert_eq!(
            a.get(&key(k)).unwrap().unwrap().state,
            JournalState::Terminal(ok(json!(k)))
        );
        let events: Vec<String> = history(&db, k).await.into_iter().map(|h| h.0).collect();
        assert_eq!(events, ["prepared", "sent", "accepted", "terminal"], "{k}");
    }
}

/// The common batch (transitions of held calls and new records) is sent in
/// one round trip, `BEGIN` to `COMMIT`, before any answer is read: a
/// statement the database refuses must still leave nothing of the batch
/// behind, and the same batch commits whole once the refusal is lifted.
#[tokio::test]
async fn a_batch_sent_at_once_commits_whole_or_not_at_all() {
    let url = postgres_or_skip!();
    let a = journal(&url, "a", Duration::from_secs(5)).await;
    a.apply(&[
        JournalWrite::Prepare(entry("once-1")),
        JournalWrite::Prepare(entry("once-2")),
    ])
    .unwrap();
    let db = sql(&url).await;
    db.batch_execute(
        "CREATE FUNCTION refuse_once_2() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF NEW.key = 'once-2' THEN RAISE EXCEPTION 'refused by the test'; END IF; \
         RETURN NEW; END $$; \
         CREATE TRIGGER refuse_once_2 BEFORE UPDATE ON arcp_calls \
         FOR EACH ROW EXECUTE FUNCTION refuse_once_2();",
    )
    .await
    .unwrap();
    let writes = [terminal("once-1", json!(1)), terminal("once-2", json!(2))];
    let new = [entry("once-3")];
    let refused = a.apply_and_insert_new(&writes, &new);
    assert!(refused.is_err(), "the refusal is the batch's: {refused:?}");
    assert_eq!(
        a.get(&key("once-1")).unwrap().unwrap().state,
        JournalState::Prepared,
        "the terminal sent before the refused one was rolled back"
    );
    assert!(
        a.get(&key("once-3")).unwrap().is_none(),
        "the new record sent after it was rolled back"
    );
    assert!(a.take_fenced().is_empty(), "a refusal is not a fence");

    db.batch_execute("DROP TRIGGER refuse_once_2 ON arcp_calls")
        .await
        .unwrap();
    assert_eq!(a.apply_and_insert_new(&writes, &new).unwrap(), vec![true]);
    for (k, v) in [("once-1", 1), ("once-2", 2)] {
        assert_eq!(
            a.get(&key(k)).unwrap().unwrap().state,
            JournalState::Terminal(ok(json!(v)))
        );
    }
    assert_eq!(
        a.get(&key("once-3")).unwrap().unwrap().state,
        JournalState::Prepared
    );
    assert!(a.take_fenced().is_empty());
}

/// A batch sent at once commits, then reads why a write changed nothing. A
/// failure of that read (here a lock timeout, `55P03`) must not be taken for
/// "the store refused the batch, nothing of it committed": its prepares
/// would be told they did not run though their records committed (and a
/// recovery would send them). It is reported as the store unavailable, so
/// the batch is retried (idempotent) and its callers wait within their
/// deadlines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_the_commit_is_not_taken_for_nothing_committed() {
    let url = postgres_or_skip!();
    let db = sql(&url).await;
    db.batch_execute(
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET lock_timeout = 200', \
         current_database()); END $$;",
    )
    .await
    .unwrap();
    let lease = Duration::from_secs(3);
    let a = Arc::new(journal(&url, "a", lease).await);
    let b = journal(&url, "b", lease).await;
    b.apply(&[JournalWrite::Prepare(entry("b-owned"))]).unwrap();
    // The commit of the next batch takes half a second (a deferred trigger).
    db.batch_execute(
        "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN PERFORM pg_sleep(0.5); RETURN NULL; END $$; \
         CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON arcp_calls \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();",
    )
    .await
    .unwrap();
    // A late mark of a call `a` does not hold (no statement; read after the
    // commit), and a new call.
    let batch = {
        let a = a.clone();
        tokio::task::spawn_blocking(move || {
            a.apply_and_insert_new(&[sent("b-owned", 1)], &[entry("new-1")])
        })
    };
    // Someone takes the table right after that commit, for a second.
    tokio::time::sleep(Duration::from_millis(200)).await;
    db.batch_execute("SET lock_timeout = 0; BEGIN; LOCK TABLE arcp_calls IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    db.batch_execute("COMMIT").await.unwrap();
    let result = batch.await.unwrap();

    let err = result.expect_err("the read after the commit failed");
    assert!(
        a.get(&key("new-1")).unwrap().is_some(),
        "the batch committed"
    );
    assert_eq!(
        err.kind,
        JournalErrorKind::Unavailable,
        "an error after COMMIT reported as {:?} ({err}): the writer would take it as \
         nothing committed",
        err.kind
    );
    // The writer retries the batch: the new record is decided as its own.
    let retried = a.apply_and_insert_new(&[sent("b-owned", 1)], &[entry("new-1")]);
    assert_eq!(retried.unwrap(), vec![false], "recorded by the first try");
    assert_eq!(
        a.take_fenced(),
        vec![key("b-owned")],
        "b's call: fenced, once"
    );
}

/// A journal of one pooled connection with a short round-trip bound: a
/// connection a timed-out batch leaves behind would be the one the next
/// batch gets.
async fn one_connection_journal(url: &str, worker: &str, round_trip: Duration) -> PostgresJournal {
    PostgresJournal::connect(
        url,
        PostgresOptions::default()
            .worker_id(worker)
            .lease_ttl(Duration::from_secs(10))
            .pool_size(1)
            .round_trip_timeout(round_trip),
    )
    .await
    .expect("open the journal")
}

/// The journal's sessions on the server, by state.
async fn journal_sessions(db: &tokio_postgres::Client) -> Vec<String> {
    db.query(
        "SELECT coalesce(state, '') FROM pg_stat_activity \
         WHERE application_name = 'arcp-journal' AND datname = current_database() \
         ORDER BY state",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// A batch sent at once whose answers do not come within the round-trip
/// bound (here: a row it updates is locked by another session, so the
/// server holds the batch's transaction open) is abandoned with its whole
/// `BEGIN` ... `COMMIT` on the wire. Its connection must not serve the next
/// batch (which would wait behind the open transaction, or run in it): the
/// next batch, on other keys, commits at once on the journal's one pooled
/// connection, and no journal session is left inside a transaction. The
/// abandoned batch then lands whole or not at all, and the writer's retry
/// of it leaves every call as one commit would, nothing reported fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_abandoned_on_the_wire_leaves_no_connection_behind() {
    let url = postgres_or_skip!();
    let a = Arc::new(one_connection_journal(&url, "a", Duration::from_millis(300)).await);
    a.apply(&[
        JournalWrite::Prepare(entry("wire-0")),
        JournalWrite::Prepare(entry("wire-1")),
        JournalWrite::Prepare(entry("wire-2")),
    ])
    .unwrap();
    // Another session locks wire-0's row: the batch's statements wait.
    let locker = sql(&url).await;
    locker
        .batch_execute("BEGIN; SELECT 1 FROM arcp_calls WHERE key = 'wire-0' FOR UPDATE")
        .await
        .unwrap();
    let writes = vec![
        sent("wire-0", 1),
        sent("wire-2", 1),
        terminal("wire-1", json!(1)),
    ];
    let new = vec![entry("wire-3")];
    let apply = |writes: Vec<JournalWrite>, new: Vec<JournalEntry>| {
        let a = a.clone();
        tokio::task::spawn_blocking(move || a.apply_and_insert_new(&writes, &new))
    };
    let err = apply(writes.clone(), new.clone())
        .await
        .unwrap()
        .expect_err("no answer within the bound");
    assert_eq!(err.kind, JournalErrorKind::Unavailable, "{err}");

    // The next batch (other keys) on the journal's one connection: not the
    // abandoned one.
    let started = std::time::Instant::now();
    let next = apply(Vec::new(), vec![entry("wire-4")]).await.unwrap();
    assert_eq!(
        next.as_ref().ok(),
        Some(&vec![true]),
        "the next batch after a timeout: {next:?} after {:?}",
        started.elapsed()
    );
    let db = sql(&url).await;
    let sessions = journal_sessions(&db).await;
    assert!(
        !sessions
            .iter()
            .any(|s| s.starts_with("idle in transaction")),
        "a journal session left inside a transaction: {sessions:?}"
    );
    let visible: i64 = db
        .query_one("SELECT count(*) FROM arcp_calls WHERE key = 'wire-4'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(visible, 1, "the next batch committed on its own");

    // The lock goes: the abandoned batch ends (its connection is closed:
    // the server rolls it back, or commits it if it got that far), whole.
    locker.batch_execute("COMMIT").await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while db
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'arcp-journal' \
             AND datname = current_database() AND state <> 'idle'",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
        > 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the abandoned batch never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let landed = a.get(&key("wire-3")).unwrap().is_some();
    let ended = a.get(&key("wire-1")).unwrap().unwrap().state.is_terminal();
    assert_eq!(landed, ended, "the abandoned batch landed in part");

    // The writer's retry of the same batch.
    let retried = apply(writes, new).await.unwrap();
    assert_eq!(retried.unwrap(), vec![!landed]);
    assert!(a.take_fenced().is_empty(), "this worker's own calls");
    assert_eq!(
        a.get(&key("wire-1")).unwrap().unwrap().state,
        JournalState::Terminal(ok(json!(1)))
    );
    let h: Vec<String> = history(&db, "wire-1")
        .await
        .into_iter()
        .map(|h| h.0)
        .collect();
    assert_eq!(h, ["prepared", "terminal"], "one terminal");
}

/// A batch sent at once whose `COMMIT` is slow (a deferred trigger) is
/// abandoned at the round-trip bound, then commits late. The writer retries
/// the same batch: its new record is found, not inserted again, and is the
/// call's own (still only prepared, its trace): the prepare proceeds, not
/// in doubt, and this worker may drive it; the terminal that landed changes
/// nothing and is not reported fenced (its caller would be told the outcome
/// was not recorded); the marks re-apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_of_a_batch_that_committed_late_is_harmless() {
    let url = postgres_or_skip!();
    let a = Arc::new(one_connection_journal(&url, "a", Duration::from_millis(300)).await);
    a.apply(&[
        JournalWrite::Prepare(entry("late-1")),
        JournalWrite::Prepare(entry("late-2")),
    ])
    .unwrap();
    let db = sql(&url).await;
    db.batch_execute(
        "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF NEW.key = 'late-3' THEN PERFORM pg_sleep(1); END IF; RETURN NULL; END $$; \
         CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON arcp_calls \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();",
    )
    .await
    .unwrap();
    let writes = vec![terminal("late-1", json!(1)), sent("late-2", 1)];
    let new = vec![entry("late-3")];
    let trace = new[0].trace_id.clone();
    let apply = |writes: Vec<JournalWrite>, new: Vec<JournalEntry>| {
        let a = a.clone();
        tokio::task::spawn_blocking(move || a.apply_and_insert_new(&writes, &new))
    };
    let err = apply(writes.clone(), new.clone())
        .await
        .unwrap()
        .expect_err("no answer within the bound");
    assert_eq!(err.kind, JournalErrorKind::Unavailable, "{err}");
    // It commits late.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let n: i64 = db
            .query_one("SELECT count(*) FROM arcp_calls WHERE key = 'late-3'", &[])
            .await
            .unwrap()
            .get(0);
        if n == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "it never committed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let retried = apply(writes, new).await.unwrap();
    assert_eq!(retried.unwrap(), vec![false], "recorded by the first send");
    assert!(
        a.take_fenced().is_empty(),
        "a re-applied batch of this worker's own calls is not fenced"
    );
    let own = a.get(&key("late-3")).unwrap().unwrap();
    assert_eq!((own.state, own.trace_id), (JournalState::Prepared, trace));
    assert!(a.acquire(&key("late-3")).unwrap(), "this worker drives it");
    assert_eq!(
        a.get(&key("late-1")).unwrap().unwrap().state,
        JournalState::Terminal(ok(json!(1)))
    );
    assert_eq!(
        a.get(&key("late-2")).unwrap().unwrap().state,
        JournalState::Sent
    );
    let h: Vec<String> = history(&db, "late-1")
        .await
        .into_iter()
        .map(|h| h.0)
        .collect();
    assert_eq!(h, ["prepared", "terminal"], "one terminal");
    let h: Vec<String> = history(&db, "late-3")
        .await
        .into_iter()
        .map(|h| h.0)
        .collect();
    assert_eq!(
        h,
        ["prepared", "claimed"],
        "one record, then this worker's claim"
    );
}

/// A batch sent at once that the database refuses mid-way (a trigger's
/// error on its second statement, or at `COMMIT`) is rolled back whole and
/// leaves its connection out of any transaction: on a journal of one
/// connection, the next batch and a read run on that same connection and
/// must not find it in an aborted transaction.
#[tokio::test]
async fn a_refused_batch_leaves_its_connection_clean_for_the_next() {
    let url = postgres_or_skip!();
    let a = one_connection_journal(&url, "a", Duration::from_secs(2)).await;
    a.apply(&[
        JournalWrite::Prepare(entry("clean-1")),
        JournalWrite::Prepare(entry("clean-2")),
    ])
    .unwrap();
    let db = sql(&url).await;
    db.batch_execute(
        "CREATE FUNCTION refuse_clean_2() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF NEW.key = 'clean-2' THEN \
           RAISE EXCEPTION 'refused by the test' USING ERRCODE = 'AR002'; END IF; \
         RETURN NEW; END $$; \
         CREATE TRIGGER refuse_clean_2 BEFORE UPDATE ON arcp_calls \
         FOR EACH ROW EXECUTE FUNCTION refuse_clean_2(); \
         CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF NEW.key = 'clean-late' THEN \
           RAISE EXCEPTION 'refused at commit by the test'; END IF; \
         RETURN NULL; END $$; \
         CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON arcp_calls \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit();",
    )
    .await
    .unwrap();
    // Refused by a statement: the terminal sent before it, and the new
    // record after it, are rolled back.
    let refused = a.apply_and_insert_new(
        &[sent("clean-1", 1), terminal("clean-2", json!(2))],
        &[entry("clean-3")],
    );
    assert!(refused.is_err(), "{refused:?}");
    // The same (only) connection, next.
    let next = a.apply_and_insert_new(&[sent("clean-1", 2)], &[entry("clean-4")]);
    assert_eq!(next.as_ref().ok(), Some(&vec![true]), "{next:?}");
    assert!(a.get(&key("clean-3")).unwrap().is_none());
    assert_eq!(
        a.get(&key("clean-1")).unwrap().unwrap().attempts,
        2,
        "the next batch's write, committed"
    );
    // Refused at COMMIT.
    let refused = a.apply_and_insert_new(&[sent("clean-1", 3)], &[entry("clean-late")]);
    assert!(refused.is_err(), "{refused:?}");
    let next = a.apply_and_insert_new(&[], &[entry("clean-5")]);
    assert_eq!(next.as_ref().ok(), Some(&vec![true]), "{next:?}");
    assert_eq!(a.get(&key("clean-1")).unwrap().unwrap().attempts, 2);
    assert!(a.take_fenced().is_empty(), "a refusal is not a fence");
    let sessions = journal_sessions(&db).await;
    assert!(
        !sessions
            .iter()
            .any(|s| s.starts_with("idle in transaction")),
        "{sessions:?}"
    );
    let committed: i64 = db
        .query_one(
            "SELECT count(*) FROM arcp_calls WHERE key IN ('clean-4', 'clean-5')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        committed, 2,
        "each next batch committed, not held in a transaction"
    );
}

/// A prepare that replaces a record that ended without running (a new
/// attempt under the key) is abandoned at the round-trip bound while its
/// `COMMIT` is slow, and commits late. The writer retries it at once: its
/// read still sees the old record (the replacement is not committed yet),
/// so it writes the replacement again, and that write waits for the first
/// and then finds the call's own new record. It must be taken as this
/// call's own (proceed), not reported fenced ("another live worker owns
/// it"): the caller would stop driving a call whose record says this
/// worker drives it, and a recovery would send it later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacing_prepare_retried_while_its_first_commit_lands_is_its_own() {
    let url = postgres_or_skip!();
    let a = Arc::new(one_connection_journal(&url, "a", Duration::from_secs(1)).await);
    let first = entry("again-1");
    a.apply(&[JournalWrite::Prepare(first.clone())]).unwrap();
    a.apply(&[JournalWrite::Terminal {
        key: key("again-1"),
        outcome: JournalOutcome::NotAccepted {
            last_error: "refused before acceptance".into(),
            attempts: 1,
            key_unused: true,
        },
        at: SystemTime::now(),
    }])
    .unwrap();
    let db = sql(&url).await;
    db.batch_execute(
        "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN PERFORM pg_sleep(1.4); RETURN NULL; END $$; \
         CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON arcp_calls \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();",
    )
    .await
    .unwrap();
    // The new attempt's record (the writer's step 3: "ended without being
    // the key's outcome: a new attempt").
    let mut again = entry("again-1");
    again.intent = first.intent.clone();
    let write = vec![JournalWrite::Prepare(again.clone())];
    let apply = |writes: Vec<JournalWrite>| {
        let a = a.clone();
        tokio::task::spawn_blocking(move || a.apply(&writes))
    };
    let err = apply(write.clone())
        .await
        .unwrap()
        .expect_err("no answer within the bound");
    assert_eq!(err.kind, JournalErrorKind::Unavailable, "{err}");
    // The retry (after the writer's first back-off): what it reads, then
    // what it writes.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let seen = a.get_many(&[key("again-1")]).unwrap();
    assert!(
        seen[0].state.is_terminal(),
        "the test's premise: the retry reads before the first commit lands"
    );
    apply(write).await.unwrap().unwrap();
    let record = a.get(&key("again-1")).unwrap().unwrap();
    assert_eq!(record.trace_id, again.trace_id, "the first send's record");
    assert_eq!(
        a.take_fenced(),
        Vec::<IdempotencyKey>::new(),
        "the retried prepare found its own record (owner a, this trace, prepared), \
         yet was reported fenced"
    );
}

/// A tool name PostgreSQL cannot store (a NUL character) is the caller's
/// mistake: that call is refused before anything is recorded or sent, and
/// the calls prepared in the same batch are recorded and run as usual
/// (before, the whole batch's transaction was refused: every call in it
/// failed with the store's error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_name_the_store_cannot_hold_fails_alone() {
    let url = postgres_or_skip!();
    let mock = arcp_mock::MockRuntime::builder()
        .tool(
            "echo",
            |args: serde_json::Value, _ctx| async move { Ok(args) },
        )
        .start()
        .await
        .expect("the runtime");
    let client = arcp_sdk::Client::builder(mock.ws_url())
        .journal(journal(&url, "nul-tool", Duration::from_secs(10)).await)
        .connect()
        .await
        .expect("connect");
    let bad = client.invoke_tool("ec\0ho", serde_json::json!({"n": -1}));
    let good = (0..16).map(|n| {
        client
            .invoke_tool("echo", serde_json::json!({ "n": n }))
            .send()
    });
    let (bad, good) = tokio::join!(bad, futures_util::future::join_all(good));
    match bad {
        Err(arcp_sdk::Error::InvalidCall { message, .. }) => {
            assert!(message.contains("NUL"), "{message}")
        }
        other => panic!("expected an invalid call, got {other:?}"),
    }
    for (n, outcome) in good.into_iter().enumerate() {
        let out = outcome.unwrap_or_else(|e| panic!("call {n}: {e}"));
        assert_eq!(out.value["n"], n);
    }
    assert_eq!(mock.total_executions(), 16);
    client.close().await;
}

/// A table changed under the journal (a column of another type than this
/// code reads, as a hand-made migration might leave it): reads and writes
/// fail at once with a schema error that names it, not "unavailable"
/// (retried until every caller's deadline), and never a panic.
#[tokio::test]
async fn a_column_of_another_type_is_a_schema_error() {
    let url = postgres_or_skip!();
    let a = journal(&url, "a", Duration::from_secs(5)).await;
    a.apply(&[JournalWrite::Prepare(entry("k1"))]).unwrap();
    let db = sql(&url).await;
    db.batch_execute(
        "ALTER TABLE arcp_calls ALTER COLUMN deadline_ms TYPE text, \
         ALTER COLUMN created_ms TYPE text",
    )
    .await
    .unwrap();
    let err = a.list(10).await.unwrap_err();
    assert_eq!(err.kind, JournalErrorKind::Schema, "{err}");
    assert!(err.message.contains("column"), "{err}");
    let err = a.get(&key("k1")).unwrap_err();
    assert_eq!(err.kind, JournalErrorKind::Schema, "{err}");
    // Preparing the key again reads its record (its creation time among
    // the columns) before writing.
    let err = a.apply(&[JournalWrite::Prepare(entry("k1"))]).unwrap_err();
    assert_eq!(err.kind, JournalErrorKind::Schema, "{err}");
}

/// `discard` on a shared journal: a live worker's unfinished call is not
/// discarded (fenced); once its lease lapses it is ended "outcome unknown"
/// and never recovered; a record of a call that ran is ended the same way
/// (kept: the key may have run); a record
/// proving the call did not run stays as it is.
#[tokio::test]
async fn discard_keeps_what_the_record_proved_and_respects_owners() {
    let url = postgres_or_skip!();
    let mock = MockRuntime::builder()
        .tool("refund", |args: Value, _ctx| async move {
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await
        .unwrap();
    let unknown = |e: &JournalEntry| match &e.state {
        JournalState::Terminal(JournalOutcome::OutcomeUnknown { reason, .. }) => {
            reason.contains("discarded")
        }
        _ => false,
    };
    {
        let dead = journal(&url, "dead", Duration::from_millis(300)).await;
        let not_run = JournalWrite::Terminal {
            key: key("order-10"),
            outcome: JournalOutcome::NotAccepted {
                last_error: "refused".into(),
                attempts: 1,
                key_unused: true,
            },
            at: SystemTime::now(),
        };
        dead.apply(&[
            JournalWrite::Prepare(entry("order-9")),
            JournalWrite::Prepare(entry("order-10")),
            not_run,
        ])
        .unwrap();
    }
    let b = builder(&mock.ws_url())
        .journal(journal(&url, "b", Duration::from_secs(30)).await)
        .connect()
        .await
        .unwrap();

    // Held by a live lease: not discarded.
    match b.discard(&key("order-9")).await {
        Err(Error::Journal(e)) => assert_eq!(e.kind, JournalErrorKind::Fenced, "{e}"),
        other => panic!("{other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(b.discard(&key("order-9")).await.unwrap());
    let e = b.lookup(&key("order-9")).await.unwrap().unwrap();
    assert!(unknown(&e), "{:?}", e.state);
    assert!(b.recover().await.unwrap().is_empty(), "never recovered");
    assert_eq!(mock.executions_for_key("order-9"), 0);

    // A call that ran: kept, ended "outcome unknown".
    b.invoke_tool("refund", json!({"order": 1}))
        .key_str("order-1")
        .send()
        .await
        .unwrap();
    assert!(b.discard(&key("order-1")).await.unwrap());
    let e = b.lookup(&key("order-1")).await.unwrap().unwrap();
    assert!(unknown(&e), "{:?}", e.state);

    // Proven not run: final already, kept as it is.
    let before = b.lookup(&key("order-10")).await.unwrap().unwrap();
    assert!(b.discard(&key("order-10")).await.unwrap());
    assert_eq!(b.lookup(&key("order-10")).await.unwrap().unwrap(), before);
    b.close().await;
}

/// A recovery pass over a dead worker's 8,000 calls whose outcome stays
/// unknown goes on from where its last claim ended: each claim costs the
/// same however deep the pass (no growing list of keys to skip, no claim
/// that outlives a short round-trip bound), and it reaches the younger
/// calls behind them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_pass_claims_at_the_same_cost_however_deep() {
    let url = postgres_or_skip!();
    let mock = MockRuntime::builder()
        .tool("refund", |args: Value, _ctx| async move {
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await
        .unwrap();
    {
        let dead = journal(&url, "dead-pass", Duration::from_millis(100)).await;
        let old = SystemTime::now() - Duration::from_secs(60);
        let stuck: Vec<JournalWrite> = (0..8_000)
            .map(|i| {
                let mut e = entry(&format!("stuck-{i:05}"));
                e.created_at = old;
                e.updated_at = old;
                JournalWrite::Prepare(e)
            })
            .collect();
        for chunk in stuck.chunks(500) {
            dead.apply(chunk).unwrap();
        }
        let young: Vec<JournalWrite> = (0..5)
            .map(|i| {
                let k = format!("young-{i}");
                let mut e = entry(&k);
                e.intent = format!(
                    r#"{{"tool":"refund","arguments":{{"order":{i}}},"idempotency_key":"{k}"}}"#
                );
                JournalWrite::Prepare(e)
            })
            .collect();
        dead.apply(&young).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let client = builder(&mock.ws_url())
        .journal(
            PostgresJournal::connect(
                &url,
                PostgresOptions::default()
                    .worker_id("pass")
                    .round_trip_timeout(Duration::from_millis(500)),
            )
            .await
            .unwrap(),
        )
        .connect()
        .await
        .unwrap();
    let mut pass = client.recovery_pass();
    loop {
        let batch = pass.next_batch().await.expect("every claim within 500 ms");
        if batch.is_empty() {
            break;
        }
        // The stuck calls are dropped (as if each ended "outcome unknown":
        // unfinished, claims given back); the young ones are driven.
        for call in batch {
            if call.key().is_some_and(|k| k.as_str().starts_with("young-")) {
                call.await.unwrap();
            }
        }
    }
    assert_eq!(pass.handed_out().len(), 8_005);
    for i in 0..5 {
        assert_eq!(mock.executions_for_key(&format!("young-{i}")), 1);
    }
    assert_eq!(mock.total_executions(), 5);
    client.close().await;
}

/// A database that collates keys otherwise than byte order (ICU en-US:
/// "a-" before "B-"; bytes: "B-" before "a-"), with a burst of unfinished
/// calls first prepared in the same millisecond across a claim's boundary:
/// the pass's place in the claim order is the same on both sides, so it
/// hands out every call. (Skipped where the server has no ICU.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_pass_keeps_its_place_whatever_the_databases_collation() {
    let _ = postgres_or_skip!();
    let Some(admin) = pg_support::admin_url() else {
        return;
    };
    let name = format!("arcp_icu_{}_{:x}", std::process::id(), rand_suffix());
    let created = sql(&admin)
        .await
        .batch_execute(&format!(
            "CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C' \
             LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"
        ))
        .await;
    if let Err(e) = created {
        eprintln!("ICU collation test skipped: {e}");
        return;
    }
    let url = pg_support::with_dbname(&admin, &name);
    let mock = MockRuntime::builder()
        .tool("refund", |args: Value, _ctx| async move {
            Ok(json!({"refunded": args["order"]}))
        })
        .start()
        .await
        .unwrap();
    {
        let dead = journal(&url, "dead-icu", Duration::from_millis(100)).await;
        // One millisecond for all of them.
        let at = SystemTime::UNIX_EPOCH
            + Duration::from_millis(
                u64::try_from(
                    (SystemTime::now() - Duration::from_secs(30))
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .unwrap()
                        .as_millis(),
                )
                .unwrap(),
            );
        let writes: Vec<JournalWrite> = (0..150)
            .flat_map(|i| [format!("a-{i:03}"), format!("B-{i:03}")])
            .map(|k| {
                let mut e = entry(&k);
                e.intent = format!(
                    r#"{{"tool":"refund","arguments":{{"order":"{k}"}},"idempotency_key":"{k}"}}"#
                );
                e.created_at = at;
                e.updated_at = at;
                JournalWrite::Prepare(e)
            })
            .collect();
        dead.apply(&writes).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let client = builder(&mock.ws_url())
        .journal(journal(&url, "pass-icu", Duration::from_secs(30)).await)
        .connect()
        .await
        .unwrap();
    let mut pass = client.recovery_pass();
    loop {
        let batch = pass.next_batch().await.unwrap();
        if batch.is_empty() {
            break;
        }
        for call in batch {
            call.await.unwrap();
        }
    }
    assert_eq!(pass.handed_out().len(), 300);
    assert_eq!(mock.total_executions(), 300);
    client.close().await;
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos()
}
