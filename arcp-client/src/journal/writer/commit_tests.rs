//! The batch commit's steps on a memory journal that counts reads and
//! writes.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use arcp_types::IdempotencyKey;
use serde_json::json;
use tokio::sync::{oneshot, watch, Notify};

use super::super::queue::{PrepareReply, Prepared, Prior, Queue, Shared};
use super::super::state::Writer;
use crate::journal::{
    Journal, JournalEntry, JournalError, JournalErrorKind, JournalOutcome, JournalState,
    JournalWrite, MemoryJournal, PurgeReport, Retention,
};

/// A memory journal that counts reads and writes, and can be made
/// unavailable.
#[derive(Default)]
struct Counting {
    inner: MemoryJournal,
    reads: AtomicUsize,
    writes: AtomicUsize,
    down: std::sync::atomic::AtomicBool,
    /// The next write lands but its answer is lost (`Unavailable`).
    lose_answer: std::sync::atomic::AtomicBool,
    /// Writes are refused outright (as a read-only database refuses them).
    refuse: std::sync::atomic::AtomicBool,
    /// The next `apply` is not answered (`Unavailable`) and does not commit
    /// now: the test lands it later by hand, as a commit that lands late.
    hold_next_apply: std::sync::atomic::AtomicBool,
}

impl Counting {
    fn check(&self) -> Result<(), JournalError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(JournalError::new(
                JournalErrorKind::Unavailable,
                "test",
                "down",
            ));
        }
        Ok(())
    }
}

impl Journal for Counting {
    fn apply(&self, writes: &[JournalWrite]) -> Result<(), JournalError> {
        self.check()?;
        if self.refuse.load(Ordering::SeqCst) {
            return Err(JournalError::new(JournalErrorKind::Io, "test", "read-only"));
        }
        if self.hold_next_apply.swap(false, Ordering::SeqCst) {
            return Err(JournalError::new(
                JournalErrorKind::Unavailable,
                "test",
                "not answered (lands later)",
            ));
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.apply(writes)
    }
    fn apply_and_insert_new(
        &self,
        writes: &[JournalWrite],
        new: &[JournalEntry],
    ) -> Result<Vec<bool>, JournalError> {
        // One transaction, no read counted: as a store that inserts
        // only absent keys would.
        self.check()?;
        if self.refuse.load(Ordering::SeqCst) {
            return Err(JournalError::new(JournalErrorKind::Io, "test", "read-only"));
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
        let inserted: Vec<bool> = new
            .iter()
            .map(|e| self.inner.get(&e.key).map(|r| r.is_none()))
            .collect::<Result<_, _>>()?;
        let mut all = writes.to_vec();
        all.extend(
            new.iter()
                .zip(&inserted)
                .filter(|(_, i)| **i)
                .map(|(e, _)| JournalWrite::Prepare(e.clone())),
        );
        self.inner.apply(&all)?;
        if self.lose_answer.swap(false, Ordering::SeqCst) {
            return Err(JournalError::new(
                JournalErrorKind::Unavailable,
                "test",
                "answer lost",
            ));
        }
        Ok(inserted)
    }
    fn get(&self, key: &IdempotencyKey) -> Result<Option<JournalEntry>, JournalError> {
        self.check()?;
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.get(key)
    }
    fn unfinished(&self, limit: usize) -> Result<Vec<JournalEntry>, JournalError> {
        self.inner.unfinished(limit)
    }
    fn purge(&self, retention: &Retention, now: SystemTime) -> Result<PurgeReport, JournalError> {
        self.inner.purge(retention, now)
    }
}

fn writer(max_records: usize) -> Writer {
    Writer {
        journal: None,
        shared: Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            space: Notify::new(),
            location: "test".into(),
            capacity: 8,
            fenced: Mutex::new(HashSet::new()),
            driving: Mutex::new(HashMap::new()),
            fence: watch::Sender::new(0),
            lease: watch::Sender::new(None),
            runtime_key_retention: super::super::DEFAULT_RUNTIME_KEY_RETENTION,
        }),
        retention: Retention {
            max_records,
            ..Retention::default()
        },
        records: 0,
        retry_delay: None,
        unavailable_since: None,
        unsure: HashSet::new(),
        landing: HashMap::new(),
        late_writes: Default::default(),
        runtime_key_retention: super::super::DEFAULT_RUNTIME_KEY_RETENTION,
    }
}

fn prepare(key: &IdempotencyKey, intent: &str) -> (JournalEntry, PrepareReply) {
    let entry = JournalEntry::new(
        key.clone(),
        "refund",
        intent,
        arcp_types::new_trace_id(),
        Duration::from_secs(5),
    );
    // The receiver is not needed: `commit` only decides.
    (entry, oneshot::channel().0)
}

fn decisions(committed: &super::Committed) -> Vec<Result<&Prepared, JournalErrorKind>> {
    committed
        .decisions
        .iter()
        .map(|(d, _)| d.as_ref().map_err(|e| e.kind))
        .collect()
}

#[test]
fn a_burst_of_new_calls_is_recorded_in_one_write_without_a_read() {
    let journal = Counting::default();
    let mut w = writer(100);
    let keys: Vec<IdempotencyKey> = (0..5).map(|_| IdempotencyKey::new()).collect();
    let prepares: Vec<_> = keys.iter().map(|k| prepare(k, "a")).collect();
    let committed = w.commit(&journal, &prepares, &HashMap::new()).unwrap();
    let fresh = Prepared::Proceed(Prior::default());
    assert_eq!(decisions(&committed), vec![Ok(&fresh); 5]);
    assert!(committed.result.is_ok() && committed.transitions.is_ok());
    assert_eq!(journal.reads.load(Ordering::SeqCst), 0);
    assert_eq!(journal.writes.load(Ordering::SeqCst), 1);
    assert_eq!((w.records, journal.inner.len()), (5, 5));
}

#[test]
fn a_key_with_a_record_is_decided_against_it() {
    let journal = Counting::default();
    let (done, running, other) = (
        IdempotencyKey::new(),
        IdempotencyKey::new(),
        IdempotencyKey::new(),
    );
    let mut finished = prepare(&done, "a").0;
    finished.state = JournalState::Terminal(JournalOutcome::Ok {
        value: json!(1),
        job_id: None,
        replayed: false,
        attempts: 1,
    });
    journal
        .inner
        .apply(&[
            JournalWrite::Prepare(finished),
            JournalWrite::Prepare(prepare(&running, "b").0),
        ])
        .unwrap();
    let mut w = writer(100);
    let prepares = vec![
        prepare(&done, "a"),
        prepare(&running, "other intent"),
        prepare(&other, "c"),
    ];
    let committed = w.commit(&journal, &prepares, &HashMap::new()).unwrap();
    let d = decisions(&committed);
    assert!(matches!(d[0], Ok(Prepared::Answer(_))), "{:?}", d[0]);
    assert!(matches!(d[1], Ok(Prepared::Conflict(_))), "{:?}", d[1]);
    assert_eq!(d[2], Ok(&Prepared::Proceed(Prior::default())));
    // The fresh insert, then one read of the two that had records.
    assert_eq!(journal.writes.load(Ordering::SeqCst), 1);
    assert_eq!(journal.reads.load(Ordering::SeqCst), 2);
    assert_eq!(journal.inner.len(), 3);
}

#[test]
fn a_key_prepared_twice_in_a_batch_is_one_record_and_the_second_is_in_doubt() {
    let journal = Counting::default();
    let key = IdempotencyKey::new();
    let mut w = writer(100);
    let prepares = vec![prepare(&key, "a"), prepare(&key, "a")];
    let committed = w.commit(&journal, &prepares, &HashMap::new()).unwrap();
    let d = decisions(&committed);
    assert_eq!(d[0], Ok(&Prepared::Proceed(Prior::default())));
    assert!(
        matches!(d[1], Ok(Prepared::Proceed(Prior { in_doubt: true, .. }))),
        "{:?}",
        d[1]
    );
    assert_eq!((w.records, journal.inner.len()), (1, 1));
}

/// Two prepares of a new key in one batch: the second is decided against
/// the record the first writes. If the store refuses that write, neither
/// proceeds: the second would send a call whose key has no record (a later
/// prepare of the key would find none, and vouch that it never ran).
#[test]
fn a_prepare_decided_against_a_record_its_batch_failed_to_write_fails_too() {
    let journal = Counting::default();
    journal.refuse.store(true, Ordering::SeqCst);
    let key = IdempotencyKey::new();
    let mut w = writer(100);
    let (mut prepares, mut answers) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        let (entry, _) = prepare(&key, "a");
        let (tx, rx) = oneshot::channel();
        prepares.push((entry, tx));
        answers.push(rx);
    }
    let committed = w.commit(&journal, &prepares, &HashMap::new()).unwrap();
    assert!(committed.result.is_err());
    w.answer(committed, prepares, Vec::new());
    for mut rx in answers {
        let answer = rx.try_recv().expect("answered");
        assert!(
            matches!(&answer, Err(e) if e.kind == JournalErrorKind::Io),
            "{answer:?}"
        );
    }
    assert!(
        journal.inner.get(&key).unwrap().is_none(),
        "nothing written"
    );
}

#[test]
fn new_calls_that_would_not_fit_are_refused_one_by_one() {
    let journal = Counting::default();
    let mut w = writer(2);
    let keys: Vec<IdempotencyKey> = (0..3).map(|_| IdempotencyKey::new()).collect();
    let prepares: Vec<_> = keys.iter().map(|k| prepare(k, "a")).collect();
    let committed = w.commit(&journal, &prepares, &HashMap::new()).unwrap();
    let d = decisions(&committed);
    assert!(d[0].is_ok() && d[1].is_ok(), "{d:?}");
    assert_eq!(d[2], Err(JournalErrorKind::Full));
    assert_eq!((w.records, journal.inner.len()), (2, 2));
}

#[test]
fn an_unavailable_store_retries_the_batch_and_leaves_its_keys_unsure() {
    let journal = Counting::default();
    journal.down.store(true, Ordering::SeqCst);
    let mut w = writer(100);
    let key = IdempotencyKey::new();
    let prepares = vec![prepare(&key, "a")];
    let err = w
        .commit(&journal, &prepares, &HashMap::new())
        .err()
        .expect("unavailable");
    assert_eq!(err.kind, JournalErrorKind::Unavailable);
    assert!(w.unsure.contains(&key));
    // Back: the retried batch commits, and the key is sure again.
    journal.down.store(false, Ordering::SeqCst);
    let committed = w.commit(&journal, &prepares, &HashMap::new()).unwrap();
    assert_eq!(
        decisions(&committed),
        vec![Ok(&Prepared::Proceed(Prior::default()))]
    );
    assert!(!w.unsure.contains(&key));
}

/// A prepare's commit landed but its answer was lost; the retry is refused
/// outright (a read-only database after a failover). The record is there
/// for a recovery to send: the caller is told the call may have run, never
/// the refusal's "did not run". A key new to the refused batch keeps the
/// refusal (nothing of it landed).
#[test]
fn a_refused_retry_of_a_commit_whose_answer_was_lost_says_may_have_run() {
    let journal = Counting::default();
    let mut w = writer(100);
    let key = IdempotencyKey::new();
    journal.lose_answer.store(true, Ordering::SeqCst);
    let err = w
        .commit(&journal, &[prepare(&key, "a")], &HashMap::new())
        .err()
        .expect("the answer was lost");
    assert_eq!(err.kind, JournalErrorKind::Unavailable);
    assert!(journal.inner.get(&key).unwrap().is_some(), "it landed");
    journal.refuse.store(true, Ordering::SeqCst);
    let fresh = IdempotencyKey::new();
    let prepares = vec![prepare(&key, "a"), prepare(&fresh, "a")];
    let committed = w.commit(&journal, &prepares, &HashMap::new()).unwrap();
    assert_eq!(
        decisions(&committed),
        vec![
            Err(JournalErrorKind::Unavailable),
            Err(JournalErrorKind::Io)
        ]
    );
}

/// A "did not run" terminal for a key whose prepare's commit may still
/// land (the store did not answer it) is never taken as durable: the late
/// record would be re-sent by a recovery after the caller was told the call
/// did not run. That doubt must survive a batch that did not commit either
/// (the store unavailable again): the retried batch still reports it.
#[test]
fn a_doubtful_terminal_stays_doubtful_when_its_batch_is_retried() {
    use super::super::batch::Batch;
    use super::super::queue::Pending;

    let journal = Counting::default();
    let mut w = writer(100);
    let key = IdempotencyKey::new();
    // Its prepare went out in a batch whose answer was lost.
    journal.down.store(true, Ordering::SeqCst);
    let (entry, _) = prepare(&key, "a");
    let (reply, waiting) = oneshot::channel();
    let batch = Batch {
        prepares: vec![(entry, reply)],
        ..Batch::default()
    };
    let _ = w.process_with(&journal, batch);
    assert!(w.unsure.contains(&key), "its record may land late");
    // Then its caller gives up: its prepare is not written again.
    drop(waiting);
    lock_queue_clear(&w);

    // The caller gave up before it was sent: "did not run", to be recorded
    // durably. The store is still away for this batch...
    let not_run = Pending {
        terminal: Some((
            JournalOutcome::NotAccepted {
                last_error: "deadline before the first send".into(),
                attempts: 0,
                key_unused: true,
            },
            SystemTime::now(),
        )),
        ..Pending::default()
    };
    let (tx, mut rx) = oneshot::channel();
    let batch = Batch {
        transitions: HashMap::from([(key.clone(), not_run)]),
        durable: vec![(key.clone(), tx)],
        ..Batch::default()
    };
    let _ = w.process_with(&journal, batch);
    assert!(rx.try_recv().is_err(), "requeued: its caller still waits");

    // ...and back for the retry, which finds no record (the late commit has
    // not landed yet).
    journal.down.store(false, Ordering::SeqCst);
    let batch = {
        let mut q = w.shared.queue.lock().unwrap();
        Batch {
            prepares: std::mem::take(&mut q.prepares),
            transitions: std::mem::take(&mut q.transitions),
            durable: std::mem::take(&mut q.durable),
            ..Batch::default()
        }
    };
    assert_eq!(batch.durable.len(), 1, "the waiter was requeued");
    let _ = w.process_with(&journal, batch);
    let answer = rx.try_recv().expect("answered");
    assert!(
        answer.is_err(),
        "the prepare of {key} may still commit (its answer was lost), yet its \"did not \
         run\" was reported durable after one retry: the doubt was spent by the batch that \
         did not commit"
    );
}

/// Empties the queue (what a requeue put back).
fn lock_queue_clear(w: &Writer) {
    let mut q = w.shared.queue.lock().unwrap();
    q.prepares.clear();
    q.transitions.clear();
    q.durable.clear();
}

/// A prepare retried after the store went away may have landed without
/// this client's journal knowing it holds the call. A recovery here
/// meanwhile must not hand the call out: the caller still waiting on the
/// prepare drives it, and two drivers in one process would both send it.
#[test]
fn a_recovery_does_not_hand_out_a_call_still_being_prepared() {
    use super::super::batch::Batch;
    use super::super::queue::Request;

    let journal = Counting::default();
    let mut w = writer(100);
    let key = IdempotencyKey::new();
    journal.down.store(true, Ordering::SeqCst);
    let (entry, _) = prepare(&key, "a");
    let (reply, _waiting) = oneshot::channel();
    let batch = Batch {
        prepares: vec![(entry.clone(), reply)],
        ..Batch::default()
    };
    let _ = w.process_with(&journal, batch);
    assert_eq!(
        lock_queue_prepares(&w),
        1,
        "requeued: its caller still waits"
    );
    // Its commit landed after all (only the answer was lost), and the store
    // is back when a recovery asks for unfinished calls.
    journal
        .inner
        .apply(&[JournalWrite::Prepare(entry)])
        .unwrap();
    journal.down.store(false, Ordering::SeqCst);
    let (tx, mut rx) = oneshot::channel();
    let _ = w.serve(&journal, vec![Request::Unfinished(None, tx)]);
    let claimed = rx.try_recv().expect("answered").expect("claimed");
    assert!(
        claimed.calls.iter().all(|(e, _)| e.key != key),
        "the recovery took {key}, which a caller here is still preparing"
    );
}

fn lock_queue_prepares(w: &Writer) -> usize {
    w.shared.queue.lock().unwrap().prepares.len()
}

/// A prepare's commit went unanswered (its record may land late); its
/// caller then gave up (its release is written, its prepare dropped). A
/// second call with the key, prepared before that record shows, must not
/// be taken as the key's first: the late record is one a recovery sends,
/// so the second call may not be vouched "did not run".
#[test]
fn a_prepare_after_a_released_unanswered_one_of_its_key_is_in_doubt() {
    use super::super::queue::Pending;

    let journal = Counting::default();
    let mut w = writer(100);
    let key = IdempotencyKey::new();
    journal.down.store(true, Ordering::SeqCst);
    let first = vec![prepare(&key, "a")];
    let err = w
        .commit(&journal, &first, &HashMap::new())
        .err()
        .expect("unanswered");
    assert_eq!(err.kind, JournalErrorKind::Unavailable);
    // Its caller gives up: the release commits, the prepare is dropped.
    journal.down.store(false, Ordering::SeqCst);
    let released = Pending {
        released: true,
        ..Pending::default()
    };
    w.commit(&journal, &[], &HashMap::from([(key.clone(), released)]))
        .unwrap();
    // Another caller of the key, before the late record shows.
    let second = vec![prepare(&key, "a")];
    let committed = w.commit(&journal, &second, &HashMap::new()).unwrap();
    match decisions(&committed)[..] {
        [Ok(Prepared::Proceed(Prior { in_doubt, .. }))] => assert!(
            *in_doubt,
            "an earlier prepare of the key may land late: {committed:?}",
            committed = decisions(&committed)
        ),
        ref other => panic!("{other:?}"),
    }
}

/// A prepare that replaces the key's record (its earlier call did not run)
/// went out in a commit that was not answered; the retried batch committed.
/// The unanswered write may still land, at any later time, and a late
/// `Prepare` replaces whatever the record is then (it is not an insert of an
/// absent key, which a committed record stops): the call's "did not run"
/// terminal is never taken as durable, since that record would be made
/// unfinished again and sent by a recovery.
#[test]
fn a_replacing_prepare_whose_commit_went_unanswered_keeps_not_run_doubtful() {
    use super::super::batch::Batch;
    use super::super::queue::Pending;

    let journal = Counting::default();
    let mut w = writer(100);
    let key = IdempotencyKey::new();
    let not_run = || JournalOutcome::NotAccepted {
        last_error: "refused before the first send".into(),
        attempts: 0,
        key_unused: true,
    };
    // The key's earlier call did not run: its record says so.
    let (earlier, _) = prepare(&key, "a");
    journal
        .inner
        .apply(&[
            JournalWrite::Prepare(earlier),
            JournalWrite::Terminal {
                key: key.clone(),
                outcome: not_run(),
                at: SystemTime::now(),
            },
        ])
        .unwrap();

    // A second call of the key: its prepare replaces that record, in a
    // commit the store does not answer (it lands later).
    journal.hold_next_apply.store(true, Ordering::SeqCst);
    let (entry, _) = prepare(&key, "a");
    let (reply, mut prepared) = oneshot::channel();
    let batch = Batch {
        prepares: vec![(entry.clone(), reply)],
        ..Batch::default()
    };
    let _ = w.process_with(&journal, batch);
    let retry = {
        let mut q = w.shared.queue.lock().unwrap();
        Batch {
            prepares: std::mem::take(&mut q.prepares),
            ..Batch::default()
        }
    };
    assert_eq!(retry.prepares.len(), 1, "requeued: its caller still waits");
    let _ = w.process_with(&journal, retry);
    assert!(
        matches!(prepared.try_recv(), Ok(Ok(Prepared::Proceed(_)))),
        "the retry committed"
    );

    // The call ends before anything is sent: "did not run", to be durable.
    let (tx, mut rx) = oneshot::channel();
    let batch = Batch {
        transitions: HashMap::from([(
            key.clone(),
            Pending {
                terminal: Some((not_run(), SystemTime::now())),
                ..Pending::default()
            },
        )]),
        durable: vec![(key.clone(), tx)],
        ..Batch::default()
    };
    let _ = w.process_with(&journal, batch);
    let answer = rx.try_recv().expect("answered");

    // The unanswered commit lands after all: the record is unfinished again,
    // for a recovery to send.
    journal
        .inner
        .apply(&[JournalWrite::Prepare(entry)])
        .unwrap();
    let unfinished = journal.inner.unfinished(10).unwrap();
    assert!(unfinished.iter().any(|e| e.key == key), "it landed");
    assert!(
        answer.is_err(),
        "{key}'s \"did not run\" was reported durable, though the replacing prepare of an \
         unanswered commit could still land (and did): a recovery sends it"
    );
}

/// Near `max_records`, a new key's prepare is written by step 3 (a replacing
/// write); its commit goes unanswered, and the retry is refused outright.
/// The record may have landed: the caller is told the call may have run
/// (`Unavailable`), never the refusal's "did not run".
#[test]
fn a_step_three_prepare_unanswered_then_refused_says_may_have_run() {
    let journal = Counting::default();
    let mut w = writer(1);
    let (a, b) = (IdempotencyKey::new(), IdempotencyKey::new());
    journal.hold_next_apply.store(true, Ordering::SeqCst);
    let prepares = vec![prepare(&a, "a"), prepare(&b, "a")];
    let err = w
        .commit(&journal, &prepares, &HashMap::new())
        .err()
        .expect("unanswered");
    assert_eq!(err.kind, JournalErrorKind::Unavailable);
    journal.refuse.store(true, Ordering::SeqCst);
    let committed = w.commit(&journal, &prepares[..1], &HashMap::new()).unwrap();
    assert_eq!(
        decisions(&committed),
        vec![Err(JournalErrorKind::Unavailable)]
    );
}

/// A call's "did not run" terminal goes out in a commit the store does not
/// answer (it lands later); the key's next call replaces the record and
/// runs; the late terminal lands over that call's record. A third call that
/// finds the "did not run" record cannot be vouched for: it is in doubt.
#[test]
fn a_prepare_over_a_not_run_record_a_late_write_may_have_put_there_is_in_doubt() {
    use super::super::batch::Batch;
    use super::super::queue::Pending;

    let journal = Counting::default();
    let mut w = writer(100);
    let key = IdempotencyKey::new();
    let not_run = || JournalOutcome::NotAccepted {
        last_error: "refused before the first send".into(),
        attempts: 0,
        key_unused: true,
    };
    journal
        .inner
        .apply(&[JournalWrite::Prepare(prepare(&key, "a").0)])
        .unwrap();
    // The first call's terminal: unanswered, then committed by the retry.
    journal.hold_next_apply.store(true, Ordering::SeqCst);
    let ending = || {
        HashMap::from([(
            key.clone(),
            Pending {
                terminal: Some((not_run(), SystemTime::now())),
                ..Pending::default()
            },
        )])
    };
    let _ = w.process_with(
        &journal,
        Batch {
            transitions: ending(),
            ..Batch::default()
        },
    );
    let retry = std::mem::take(&mut w.shared.queue.lock().unwrap().transitions);
    assert_eq!(retry.len(), 1, "requeued");
    let _ = w.process_with(
        &journal,
        Batch {
            transitions: retry,
            ..Batch::default()
        },
    );
    // The second call replaces the record; the late terminal lands over it.
    let committed = w
        .commit(&journal, &[prepare(&key, "a")], &HashMap::new())
        .unwrap();
    assert!(matches!(decisions(&committed)[0], Ok(Prepared::Proceed(_))));
    journal
        .inner
        .apply(&[JournalWrite::Terminal {
            key: key.clone(),
            outcome: not_run(),
            at: SystemTime::now(),
        }])
        .unwrap();
    // The third call finds "did not run".
    let committed = w
        .commit(&journal, &[prepare(&key, "a")], &HashMap::new())
        .unwrap();
    assert!(
        matches!(
            decisions(&committed)[0],
            Ok(Prepared::Proceed(Prior { in_doubt: true, .. }))
        ),
        "{:?}",
        decisions(&committed)
    );
}

/// A discard's write goes unanswered (it may land later, over the record of
/// the key's next call, which may run): a later prepare of the key that
/// finds no record (purged since) cannot take it as the key's first.
#[test]
fn a_prepare_after_an_unanswered_discard_of_its_key_is_in_doubt() {
    use super::super::queue::Request;

    let journal = Counting::default();
    let mut w = writer(100);
    let key = IdempotencyKey::new();
    journal
        .inner
        .apply(&[JournalWrite::Prepare(prepare(&key, "a").0)])
        .unwrap();
    journal.hold_next_apply.store(true, Ordering::SeqCst);
    let (tx, mut rx) = oneshot::channel();
    let _ = w.serve(&journal, vec![Request::Discard(key.clone(), tx)]);
    let discarded = rx.try_recv().expect("answered");
    assert!(
        matches!(&discarded, Err(e) if e.kind == JournalErrorKind::Unavailable),
        "{discarded:?}"
    );
    // The record is gone (purged, say).
    journal
        .inner
        .apply(&[JournalWrite::Remove { key: key.clone() }])
        .unwrap();
    let committed = w
        .commit(&journal, &[prepare(&key, "a")], &HashMap::new())
        .unwrap();
    assert!(
        matches!(
            decisions(&committed)[0],
            Ok(Prepared::Proceed(Prior { in_doubt: true, .. }))
        ),
        "{:?}",
        decisions(&committed)
    );
}
