//! "Did not run" is a claim about the key, and `replayed` a claim about the
//! answer: one test per path where either was claimed without proof. Each
//! checks the outcome against what the mock runtime executed.
//!
//! - a gateway that fingerprints whole bodies answers our own retry 422
//!   after the first attempt ran: the conflict says "may have run";
//! - a second caller of a supplied key whose first call ran, refused at
//!   once (404, a failed connect): "not sent", never "did not run";
//! - a policy close (1008) after the submit was forwarded, then 401 on the
//!   reconnect: "may have run";
//! - a 409 that names no job, then an answer from a fresh execution, and a
//!   terminal with no acceptance before it: not replays.
//! - a journaled call that did not run (refused reconnects over WebSocket,
//!   a gateway's 401 over HTTP), answered after another caller of its key
//!   started while its ending was being recorded: "may have run".

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use arcp_mock::{ChaosProxy, Dialect, Fault, JobStatus};
use arcp_sdk::{Error, Execution, IdempotencyKey, Journal, Retention};
use serde_json::json;
use support::gateway::{Gateway, Move};
use support::mock::{client, mock, unreachable_call_on_journal};
use support::relay::{Relay, RelayHandle};

/// The gateway's moves, in order; forwarding once they run out.
fn moves(list: Vec<Move>) -> impl FnMut() -> Move + Send + 'static {
    let mut list = list.into_iter();
    move || list.next().unwrap_or(Move::Forward)
}

/// The first attempt is forwarded and runs, but the gateway answers 502;
/// the retry (a fresh envelope, so another body) gets the gateway's 422.
/// The conflict is kept, but it proves nothing about the first attempt.
#[tokio::test]
async fn a_gateway_that_fingerprints_whole_bodies_conflicts_with_our_retry_after_it_ran() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    // Each call: its first attempt forwarded, then 502; the retry's move
    // is drawn too, though the fingerprint answers it first.
    let each = [Move::ForwardThen(502), Move::Forward];
    let gateway = Gateway::fingerprinting(mock.http_address(), moves([each, each].concat()))
        .await
        .unwrap();
    let client = client(&gateway.url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    for supplied in [false, true] {
        let before = mock.executions("refund");
        let mut call = client.invoke_tool("refund", json!({"order": 7}));
        if supplied {
            call = call.idempotency_key(IdempotencyKey::new());
        }
        let err = call.send().await.unwrap_err();
        assert_eq!(
            mock.executions("refund") - before,
            1,
            "the first attempt ran"
        );
        let Error::DuplicateKey {
            execution,
            attempts,
            ..
        } = &err
        else {
            panic!("the conflict is kept: {err:?}");
        };
        assert_eq!(*execution, Execution::MayHaveRun, "{err}");
        assert_eq!(err.execution(), Execution::MayHaveRun);
        assert_eq!(*attempts, 2, "{err:?}");
        assert!(err.to_string().contains("may have run"), "{err}");
    }
}

/// A supplied key whose first call ran, in another client: the second
/// caller is refused at once (404 from a gateway before any forward; a
/// connect that fails). It sent nothing, but it cannot say "did not run".
#[tokio::test]
async fn a_second_caller_of_a_key_whose_first_call_ran_is_told_not_sent() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let key = IdempotencyKey::new();
    let first = client(&mock.http_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    first
        .invoke_tool("refund", json!({"order": 8}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(mock.executions("refund"), 1);

    let gateway = Gateway::start(mock.http_address(), || Move::Refuse(404))
        .await
        .unwrap();
    let second = client(&gateway.url(), Dialect::V1_1).connect_lazy();
    let err = second
        .invoke_tool("refund", json!({"order": 8}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.execution(), Execution::NotSent, "{err:?}");
    assert_eq!(err.key(), Some(&key), "{err:?}");
    let Error::NotSent { cause, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(
        matches!(cause.as_ref(), Error::Http { status: 404, .. }),
        "{cause:?}"
    );
    assert_eq!(err.code_name(), "HTTP_ERROR");
    // A key generated for the call is new: nothing sent proves it.
    let err = second
        .invoke_tool("refund", json!({"order": 9}))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Http { status: 404, .. }), "{err:?}");
    assert_eq!(err.execution(), Execution::NotRun);

    // Over WebSocket: a runtime that cannot be reached at all.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/arcp", closed.local_addr().unwrap());
    drop(closed);
    let third = client(&url, Dialect::V1_1).connect_lazy();
    let err = third
        .invoke_tool("refund", json!({"order": 8}))
        .idempotency_key(key.clone())
        .deadline(Duration::from_secs(2))
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.execution(), Execution::NotSent, "{err:?}");
    let err = third
        .invoke_tool("refund", json!({"order": 10}))
        .deadline(Duration::from_secs(2))
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.execution(), Execution::NotRun, "{err:?}");
    assert_eq!(mock.executions("refund"), 1);
}

/// The submit reaches the runtime and runs; a policy close (1008) arrives
/// before its acceptance, then the reconnect is refused with 401. A close
/// is no refusal frame for the submit: the call may have run.
#[tokio::test]
async fn a_policy_close_after_the_submit_then_401_may_have_run() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let upstream: SocketAddr = mock.ws_url()[5..]
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let relay = RelayHandle::start(upstream, Relay::PolicyCloseThen401)
        .await
        .unwrap();
    relay.arm(Duration::MAX);
    let client = client(&relay.ws_url("/arcp"), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let err = client
        .invoke_tool("refund", json!({"order": 11, "ms": 50}))
        .deadline(Duration::from_secs(5))
        .send()
        .await
        .unwrap_err();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(mock.executions("refund"), 1, "the submit ran");
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err:?}");
    assert!(err.key().is_some(), "the key is kept: {err:?}");
}

/// Over HTTP, a 409 (a request with this key in progress, no job named),
/// then a fresh execution answers (another instance ran it): not a replay.
#[tokio::test]
async fn a_409_then_a_fresh_execution_is_not_a_replay() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let gateway = Gateway::start(mock.http_address(), moves(vec![Move::Refuse(409)]))
        .await
        .unwrap();
    let client = client(&gateway.url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let out = client
        .invoke_tool("refund", json!({"order": 12}))
        .await
        .unwrap();
    assert_eq!(mock.executions("refund"), 1);
    assert_eq!(mock.jobs().len(), 1, "one fresh job");
    assert!(!out.replayed, "a fresh execution is no replay: {out:?}");
    assert_eq!(out.attempts, 2);
}

/// A legacy client connected to `mock` through a relay that drops every
/// `job.accepted` (the relay lives as long as its handle).
async fn through_hidden_acceptance(
    mock: &arcp_mock::MockRuntime,
) -> (arcp_sdk::Client, RelayHandle) {
    let upstream: SocketAddr = mock.ws_url()[5..]
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let relay = RelayHandle::start(upstream, Relay::HideAcceptance)
        .await
        .unwrap();
    let client = client(&relay.ws_url("/arcp"), Dialect::Legacy)
        .connect()
        .await
        .unwrap();
    (client, relay)
}

/// Over WebSocket, a terminal with no acceptance before it on the attempt
/// (the acceptance lost on the way) from a fresh execution: not a replay.
/// (The legacy dialect correlates every frame to the request.)
#[tokio::test]
async fn a_terminal_without_acceptance_from_a_fresh_execution_is_not_a_replay() {
    let mock = mock(Dialect::Legacy).start().await.unwrap();
    let (client, _relay) = through_hidden_acceptance(&mock).await;
    let out = client
        .invoke_tool("refund", json!({"order": 13, "ms": 30}))
        .await
        .unwrap();
    assert_eq!(mock.executions("refund"), 1);
    assert!(!out.replayed, "a fresh execution is no replay: {out:?}");
}

/// The same relay, a tool that fails: the job's error names its job with no
/// acceptance seen on the attempt. Only the legacy refusal of an unknown
/// tool has that shape without running; any other such error ran.
#[tokio::test]
async fn a_job_error_without_acceptance_from_a_fresh_execution_ran() {
    let mock = mock(Dialect::Legacy).start().await.unwrap();
    let (client, _relay) = through_hidden_acceptance(&mock).await;
    let e = client
        .invoke_tool("fail", json!({"code": "INTERNAL"}))
        .await
        .expect_err("the tool fails");
    assert_eq!(mock.executions("fail"), 1);
    assert_eq!(e.execution(), Execution::Ran, "it ran: {e:?}");
}

/// A journal record of the key whose intent text lists the same arguments
/// in another order (written by a build whose maps keep insertion order):
/// the same intent, not a local key conflict. The call goes out and runs.
#[tokio::test]
async fn a_recorded_intent_in_another_member_order_is_the_same_intent() {
    use arcp_sdk::{Journal, JournalEntry, JournalWrite, MemoryJournal};
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let key = IdempotencyKey::new();
    let recorded =
        format!(r#"{{"tool":"echo","arguments":{{"b":2,"a":1}},"idempotency_key":"{key}"}}"#);
    let journal = MemoryJournal::new();
    let entry = JournalEntry::new(
        key.clone(),
        "echo",
        recorded,
        "4bf92f3577b34da6a3ce929d0e0e4736",
        Duration::from_secs(5),
    );
    journal.apply(&[JournalWrite::Prepare(entry)]).unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .journal(journal)
        .connect()
        .await
        .unwrap();
    let out = client
        .invoke_tool("echo", json!({"a": 1, "b": 2}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_or_else(|e| panic!("not a conflict: {e:?}"));
    assert_eq!(out.value, json!({"a": 1, "b": 2}));
    assert_eq!(mock.executions("echo"), 1);
}

/// A recovered record whose intent no longer reads back byte for byte is
/// not sent; an earlier process may have sent it: "may have run".
#[tokio::test]
async fn a_recovered_record_that_no_longer_reads_back_may_have_run() {
    use arcp_sdk::{Journal, JournalEntry, JournalErrorKind, JournalWrite, MemoryJournal};
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let key = IdempotencyKey::new();
    let recorded =
        format!(r#"{{"tool" : "echo", "arguments" : {{"a" : 1}}, "idempotency_key" : "{key}"}}"#);
    let journal = MemoryJournal::new();
    let mut entry = JournalEntry::new(
        key.clone(),
        "echo",
        recorded,
        "4bf92f3577b34da6a3ce929d0e0e4736",
        Duration::from_secs(5),
    );
    entry.attempts = 1;
    journal.apply(&[JournalWrite::Prepare(entry)]).unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .journal(journal)
        .connect()
        .await
        .unwrap();
    let calls = client.recover().await.unwrap();
    assert_eq!(calls.len(), 1);
    for call in calls {
        let err = call.await.unwrap_err();
        assert!(
            matches!(&err, Error::Journal(e) if e.kind == JournalErrorKind::Intent),
            "{err:?}"
        );
        assert_eq!(err.execution(), Execution::MayHaveRun, "{err}");
    }
    assert_eq!(mock.executions("echo"), 0, "nothing is sent");
}

/// The legacy runtime accepts a request for a tool it does not know under a
/// fresh job, then fails it (`NOT_FOUND` "tool not registered"), binding no
/// key. Not the key's outcome: not "ran", and not answered from the cache
/// to a repeat of the key (the runtime is asked again).
#[tokio::test]
async fn an_unknown_tools_refusal_after_acceptance_is_not_the_keys_outcome() {
    let mock = mock(Dialect::Legacy).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::Legacy)
        .connect()
        .await
        .unwrap();
    let err = client
        .invoke_tool("no-such-tool", json!({}))
        .await
        .unwrap_err();
    let Error::Tool(tool) = &err else {
        panic!("{err:?}");
    };
    assert_eq!(tool.code.as_str(), "NOT_FOUND", "{err:?}");
    assert!(!tool.replayed);
    assert_eq!(err.execution(), Execution::NotRun, "{err:?}");
    let key = err.key().cloned().unwrap();
    let submits = |mock: &arcp_mock::MockRuntime| {
        mock.received()
            .iter()
            .filter(|e| e.idempotency_key.as_deref() == Some(key.as_str()))
            .count()
    };
    assert_eq!(submits(&mock), 1);
    let again = client
        .invoke_tool("no-such-tool", json!({}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    assert_eq!(submits(&mock), 2, "asked the runtime again: {again:?}");
    // A key of the caller's now: not sent, around the runtime's refusal.
    let Error::NotSent { cause, .. } = &again else {
        panic!("{again:?}");
    };
    assert!(
        matches!(cause.as_ref(), Error::Tool(t) if !t.replayed),
        "{again:?}"
    );
    assert_eq!(again.execution(), Execution::NotSent, "{again:?}");
    assert_eq!(mock.total_executions(), 0);
}

/// A journal that forgot a key's record (its terminal records expire) does
/// not prove a supplied key unused: the key's call ran, its record expired,
/// and a later call of the key that sends nothing says "not sent", not
/// "did not run". Nor does any journal for a key it has no record of.
#[tokio::test]
async fn a_journal_without_a_record_of_the_key_does_not_prove_it_unused() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite");
    let short = Duration::from_millis(200);
    let key = IdempotencyKey::new();
    let first = client(&mock.ws_url(), Dialect::V1_1)
        .journal_path(&path)
        .journal_retention(arcp_sdk::Retention::default().terminal_ttl(short))
        .connect()
        .await
        .unwrap();
    first
        .invoke_tool("refund", json!({"order": 15}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    first.close().await;
    // The record expires; the next client's start-up purge deletes it.
    tokio::time::sleep(short * 2).await;
    let forgets = Retention::default().terminal_ttl(short);
    let err = unreachable_call_on_journal(&path, &key, forgets.clone(), HOUR).await;
    assert_eq!(mock.executions("refund"), 1, "the key ran");
    assert_eq!(err.execution(), Execution::NotSent, "{err:?}");
    assert!(err.is_retryable(), "retry with the same key: {err:?}");

    // Nor does a key the journal never saw, whatever its retention: it may
    // have run through another client.
    let fresh = IdempotencyKey::new();
    let err = unreachable_call_on_journal(&path, &fresh, Retention::default(), short).await;
    assert_eq!(err.execution(), Execution::NotSent, "{err:?}");
}

const HOUR: Duration = Duration::from_secs(3600);

/// The same for unfinished records that expire before the runtime forgets
/// keys: the call ran (its caller gave up first: "may have run"), its record
/// expired unrecovered, and a later call of the key that sends nothing says
/// "not sent", not "did not run".
#[tokio::test]
async fn a_journal_whose_unfinished_records_expire_first_does_not_vouch_for_keys() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.sqlite");
    let short = Duration::from_millis(300);
    let key = IdempotencyKey::new();
    let forgets = Retention::default().unfinished_ttl(short);
    let first = client(&mock.ws_url(), Dialect::V1_1)
        .journal_path(&path)
        .journal_retention(forgets.clone())
        .connect()
        .await
        .unwrap();
    let gave_up = first
        .invoke_tool("refund", json!({"order": 15, "ms": 500}))
        .idempotency_key(key.clone())
        .deadline(Duration::from_millis(150))
        .send()
        .await
        .unwrap_err();
    assert_eq!(gave_up.execution(), Execution::MayHaveRun, "{gave_up:?}");
    first.close().await;
    // The tool finishes; the unfinished record expires, and the next
    // client's start-up purge deletes it.
    tokio::time::sleep(short * 3).await;
    assert_eq!(mock.executions("refund"), 1, "the key ran");
    let err = unreachable_call_on_journal(&path, &key, forgets, HOUR).await;
    assert_eq!(err.execution(), Execution::NotSent, "{err:?}");
}

/// The same for a journal that evicted the key's record for its record
/// cap: from then on it vouches for no key it has no record of.
#[tokio::test]
async fn a_journal_that_evicted_records_for_its_cap_does_not_vouch_for_keys() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let proxy = ChaosProxy::builder(mock.address()).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let client = client(&proxy.ws_url("/arcp"), Dialect::V1_1)
        .journal_path(dir.path().join("journal.sqlite"))
        .journal_retention(Retention::default().max_records(2))
        // Only the journal remembers keys here.
        .tuning(arcp_sdk::tuning::Tuning::new().outcome_cache(0, HOUR))
        .connect()
        .await
        .unwrap();
    let keys: Vec<IdempotencyKey> = (0..4).map(|_| IdempotencyKey::new()).collect();
    for (order, key) in keys.iter().enumerate() {
        client
            .invoke_tool("refund", json!({"order": order}))
            .idempotency_key(key.clone())
            .send()
            .await
            .unwrap();
    }
    assert_eq!(mock.executions("refund"), 4);
    // The runtime refuses the reconnect: the next call sends nothing.
    mock.inject_always(Fault::RefuseUpgrade {
        status: 401,
        retry_after: None,
    });
    proxy.kill_all();
    let err = client
        .invoke_tool("refund", json!({"order": 0}))
        .idempotency_key(keys[0].clone())
        .deadline(Duration::from_secs(2))
        .send()
        .await
        .unwrap_err();
    client.close().await;
    assert_eq!(mock.executions("refund"), 4, "nothing more ran");
    assert_eq!(err.execution(), Execution::NotSent, "{err:?}");
}

/// The runtime accepts the job, but its tool waits in the runtime's queue
/// (a busy worker pool), and the caller's cancel ends the job there: the
/// job is cancelled and its tool never ran. A cancellation proves the key's
/// outcome, not an execution: the call may have run.
async fn cancelled_while_queued(dialect: Dialect) {
    let mock = mock(dialect).start().await.unwrap();
    mock.inject(Fault::QueueJob(Duration::from_secs(30)));
    let client = client(&mock.ws_url(), dialect).connect().await.unwrap();
    let invocation = client.invoke_tool("refund", json!({"order": 14})).send();
    let handle = invocation.handle();
    let call = tokio::spawn(invocation);
    let accepted = tokio::time::Instant::now() + Duration::from_secs(5);
    while handle.job_id().is_none() {
        assert!(tokio::time::Instant::now() < accepted, "never accepted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    handle.cancel().await;
    let err = call.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::Cancelled { .. }), "{err:?}");
    // The job's own record: its tool's runs (the per-tool counter counts
    // accepted jobs).
    let jobs = mock.jobs();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].status, JobStatus::Cancelled, "{jobs:?}");
    assert_eq!(jobs[0].executions, 0, "the job never left the queue");
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err:?}");
    assert!(!err.is_retryable(), "the key's outcome is final: {err:?}");
    assert!(err.job_id().is_some(), "the job is named: {err:?}");
}

#[tokio::test]
async fn a_job_cancelled_before_its_tool_started_may_have_run_v1_1() {
    cancelled_while_queued(Dialect::V1_1).await;
}

#[tokio::test]
async fn a_job_cancelled_before_its_tool_started_may_have_run_legacy() {
    cancelled_while_queued(Dialect::Legacy).await;
}

/// A call refused before sending for a bad option stays an
/// `Error::InvalidCall` (what a caller matches on) and says, by its key's
/// origin, what it proves: a supplied key may have run in an earlier call
/// ("not sent"), a generated one did not run.
#[tokio::test]
async fn an_invalid_call_says_not_sent_for_a_supplied_key_and_not_run_for_a_generated_one() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    for supplied in [true, false] {
        let mut call = client
            .invoke_tool("refund", json!({"order": 15}))
            .traceparent("00-not-a-trace-01");
        if supplied {
            call = call.idempotency_key(IdempotencyKey::new());
        }
        let err = call.send().await.unwrap_err();
        assert_eq!(err.code_name(), "INVALID_CALL", "{err:?}");
        assert!(
            !matches!(err, Error::NotSent { .. }),
            "the error keeps its variant: {err:?}"
        );
        let expected = if supplied {
            Execution::NotSent
        } else {
            Execution::NotRun
        };
        assert_eq!(err.execution(), expected, "supplied: {supplied}: {err:?}");
    }
    // Refused by the transport (a request over the frame size limit).
    let small = support::mock::client(&mock.ws_url(), Dialect::V1_1)
        .max_frame_size(64 * 1024)
        .connect()
        .await
        .unwrap();
    for supplied in [true, false] {
        let mut call = small.invoke_tool("refund", json!({"blob": "y".repeat(100_000)}));
        if supplied {
            call = call.idempotency_key(IdempotencyKey::new());
        }
        let err = call.send().await.unwrap_err();
        assert!(matches!(err, Error::InvalidCall { .. }), "{err:?}");
        let expected = if supplied {
            Execution::NotSent
        } else {
            Execution::NotRun
        };
        assert_eq!(err.execution(), expected, "supplied: {supplied}: {err:?}");
    }
    assert_eq!(mock.total_executions(), 0);
    assert!(mock.received().iter().all(|e| e.kind != "job.submit"));
}

/// A store that holds back the commit of a key's terminal record while its
/// gate is closed (the commit waits on the client's journal thread); other
/// commits pass.
#[derive(Clone, Default)]
struct GatedJournal(std::sync::Arc<GatedStore>);

#[derive(Default)]
struct GatedStore {
    store: arcp_sdk::MemoryJournal,
    gate: std::sync::Mutex<Gate>,
    changed: std::sync::Condvar,
}

#[derive(Default)]
struct Gate {
    /// The key whose terminal waits, while the gate is closed.
    holds: Option<IdempotencyKey>,
    /// Commits waiting.
    waiting: usize,
}

impl GatedJournal {
    fn hold_terminal_of(&self, key: Option<IdempotencyKey>) {
        self.0.gate.lock().unwrap().holds = key;
        self.0.changed.notify_all();
    }

    fn waiting(&self) -> usize {
        self.0.gate.lock().unwrap().waiting
    }

    fn pass(&self, writes: &[arcp_sdk::JournalWrite]) {
        let held = |gate: &Gate| {
            writes.iter().any(|w| {
                matches!(w, arcp_sdk::JournalWrite::Terminal { key, .. }
                    if gate.holds.as_ref() == Some(key))
            })
        };
        let mut gate = self.0.gate.lock().unwrap();
        gate.waiting += 1;
        while held(&gate) {
            gate = self.0.changed.wait(gate).unwrap();
        }
        gate.waiting -= 1;
    }
}

impl Journal for GatedJournal {
    fn apply(&self, writes: &[arcp_sdk::JournalWrite]) -> Result<(), arcp_sdk::JournalError> {
        self.pass(writes);
        self.0.store.apply(writes)
    }
    fn apply_and_insert_new(
        &self,
        writes: &[arcp_sdk::JournalWrite],
        new: &[arcp_sdk::JournalEntry],
    ) -> Result<Vec<bool>, arcp_sdk::JournalError> {
        self.pass(writes);
        self.0.store.apply_and_insert_new(writes, new)
    }
    fn get(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<arcp_sdk::JournalEntry>, arcp_sdk::JournalError> {
        self.0.store.get(key)
    }
    fn unfinished(
        &self,
        limit: usize,
    ) -> Result<Vec<arcp_sdk::JournalEntry>, arcp_sdk::JournalError> {
        self.0.store.unfinished(limit)
    }
    fn purge(
        &self,
        retention: &Retention,
        now: std::time::SystemTime,
    ) -> Result<arcp_sdk::PurgeReport, arcp_sdk::JournalError> {
        self.0.store.purge(retention, now)
    }
}

/// Waits (bounded) until `ready` holds.
async fn until(what: &str, mut ready: impl FnMut() -> bool) {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(5);
    while !ready() {
        assert!(tokio::time::Instant::now() < give_up, "{what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How the first call of the key ends without running it.
#[derive(Clone, Copy, Debug)]
enum NotRunBy {
    /// WebSocket: the runtime refuses the reconnect (401), which ends the
    /// call well before its deadline.
    RefusedReconnects,
    /// HTTP: a gateway answers 401 without forwarding.
    GatewayRefusal,
}

/// A journaled call of a supplied key sends nothing that runs and ends
/// "did not run"; while the journal records that, a second call of the key
/// starts, and runs the key once the way is clear. The first caller is
/// answered after the second one started: it cannot say "did not run".
async fn ends_while_another_caller_of_its_key_starts(by: NotRunBy) {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let journal = GatedJournal::default();
    let key = IdempotencyKey::new();
    // The way to the runtime, and the proxy to cut for WebSocket.
    let (url, proxy, _gateway) = match by {
        NotRunBy::RefusedReconnects => {
            let proxy = ChaosProxy::builder(mock.address()).start().await.unwrap();
            (proxy.ws_url("/arcp"), Some(proxy), None)
        }
        NotRunBy::GatewayRefusal => {
            let gateway = Gateway::start(mock.http_address(), moves(vec![Move::Refuse(401)]))
                .await
                .unwrap();
            (gateway.url(), None, Some(gateway))
        }
    };
    let client = client(&url, Dialect::V1_1)
        .journal(journal.clone())
        .connect()
        .await
        .unwrap();
    if let Some(proxy) = &proxy {
        mock.inject_always(Fault::RefuseUpgrade {
            status: 401,
            retry_after: None,
        });
        // The first call starts once the client knows the link is down (else
        // its submit may go out on the dying connection).
        let mut events = client.events();
        proxy.kill_all();
        let down = async {
            while !matches!(
                events.next().await,
                Some(arcp_sdk::ConnectionEvent::Disconnected { .. }) | None
            ) {}
        };
        tokio::time::timeout(Duration::from_secs(5), down)
            .await
            .expect("the client sees the link go down");
    }
    journal.hold_terminal_of(Some(key.clone()));
    let invoke = || {
        client
            .invoke_tool("refund", json!({"order": 21}))
            .idempotency_key(key.clone())
    };
    // A long deadline: the call ends on the refusal, and its record's
    // commit may wait as long as the deadline leaves (not a short grace).
    let first = tokio::spawn(invoke().deadline(Duration::from_secs(5)).send());
    // Its ending ("did not run") waits for the commit of its record.
    until("the first call's terminal record waits", || {
        journal.waiting() > 0
    })
    .await;
    assert!(!first.is_finished(), "it waits for its record");
    // The second caller starts (one poll makes it a caller of the key),
    // then is driven on a task of its own.
    let mut second = Box::pin(invoke().deadline(Duration::from_secs(10)).send());
    assert!(futures_util::poll!(second.as_mut()).is_pending());
    let second = tokio::spawn(second);
    mock.clear_faults();
    journal.hold_terminal_of(None);
    let first = first.await.unwrap().unwrap_err();
    let second = second.await.unwrap();
    client.close().await;
    assert!(second.is_ok(), "{by:?}: the second call ran it: {second:?}");
    assert_eq!(mock.executions_for_key(key.as_ref()), 1, "{by:?}");
    assert_eq!(
        first.execution(),
        Execution::MayHaveRun,
        "{by:?}: {first:?}"
    );
    assert_eq!(first.key(), Some(&key), "{by:?}: {first:?}");
    assert!(
        first
            .to_string()
            .contains("another call with this key was in flight in this client"),
        "{by:?}: it says so because of the second caller: {first}"
    );
}

#[tokio::test]
async fn a_caller_that_ends_while_another_caller_of_its_key_starts_may_have_run_ws() {
    ends_while_another_caller_of_its_key_starts(NotRunBy::RefusedReconnects).await;
}

#[tokio::test]
async fn a_caller_that_ends_while_another_caller_of_its_key_starts_may_have_run_http() {
    ends_while_another_caller_of_its_key_starts(NotRunBy::GatewayRefusal).await;
}
