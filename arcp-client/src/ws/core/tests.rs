//! The connection core on a fake clock, fed with frames captured from the
//! Python 1.1.3 reference runtime (`tests/fixtures/`, a link to arcp-types' captures): no socket, no sleep.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arcp_types::{Dialect, IdempotencyKey, Invoke, Message};
use serde_json::{json, Value};
use tokio::sync::oneshot;

use super::{Command, Core};
use crate::cache::{Outcome, Settled};
use crate::config::Config;
use crate::error::{Error, Execution};
use crate::request::{CallRequest, CallShared, EventsEnd};
use crate::ws::link_io::{Established, Loss};

const PYTHON: &str = include_str!("../../../tests/fixtures/python-runtime-1.1.3.jsonl");

/// The `n`-th frame of `kind` the Python runtime sent in the capture.
fn captured(kind: &str, n: usize) -> Value {
    PYTHON
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["dir"] == "recv")
        .filter_map(|l| serde_json::from_str::<Value>(l["raw"].as_str()?).ok())
        .filter(|f| f["type"] == kind)
        .nth(n)
        .unwrap_or_else(|| panic!("no captured {kind} #{n}"))
}

/// A caller's end of a call: what the connection task handed out, with
/// its value in place (as `Backend::invoke` reads it).
struct Answer(oneshot::Receiver<Settled>);

impl Answer {
    fn try_recv(&mut self) -> Result<Outcome, oneshot::error::TryRecvError> {
        self.0.try_recv().map(Settled::into_outcome)
    }
}

struct Harness {
    core: Core,
    t0: Instant,
}

impl Harness {
    fn new() -> Self {
        Self::with_config(|_| {})
    }

    /// A harness whose configuration `adjust` changes first.
    fn with_config(adjust: impl FnOnce(&mut Config)) -> Self {
        let t0 = Instant::now();
        // The captured frames are v1.1's: no dialect probe.
        let mut config = Config::new("ws://127.0.0.1:9/arcp".into());
        config.dialect = crate::config::DialectChoice::V1_1;
        adjust(&mut config);
        let config = Arc::new(config);
        let (events, _) = tokio::sync::broadcast::channel(8);
        let core = Core::new(config, None, Arc::new(Mutex::new(None)), events, t0);
        Harness { core, t0 }
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    /// A call under a key generated for it.
    fn invoke(&mut self, args: Value, deadline: Duration, ms: u64) -> Answer {
        self.submit((IdempotencyKey::new(), false), args, deadline, ms)
    }

    /// A call under a key the caller supplied.
    fn invoke_with(
        &mut self,
        key: IdempotencyKey,
        args: Value,
        deadline: Duration,
        ms: u64,
    ) -> Answer {
        self.submit((key, true), args, deadline, ms)
    }

    fn submit(
        &mut self,
        (key, key_supplied): (IdempotencyKey, bool),
        args: Value,
        deadline: Duration,
        ms: u64,
    ) -> Answer {
        let shared = Arc::new(CallShared::default());
        let request = CallRequest {
            key,
            trace_id: crate::request::TraceId::random(),
            invoke: Invoke::new("echo", args),
            deadline,
            started: self.at(ms),
            events_end: EventsEnd(shared.clone()),
            shared,
            recorder: None,
            in_doubt: false,
            prior_job: None,
            key_supplied,
            prepared: None,
            claim: None,
        };
        let (tx, rx) = oneshot::channel();
        self.core.command(Command::Invoke(request, tx), self.at(ms));
        Answer(rx)
    }

    /// Answers the submit sent by `ms`: accepted as `job`, then its result,
    /// handed out.
    fn answer_with_result(&mut self, job: &str, ms: u64) {
        let submit = self.sent_submit_id(ms);
        self.feed(captured("job.accepted", 0), Some(&submit), job, ms + 1);
        self.feed(captured("job.result", 0), None, job, ms + 2);
        self.core.hand_out_replies();
    }

    /// Dials (as the driver would) and establishes the captured session.
    fn establish(&mut self, ms: u64) {
        self.establish_with(captured("session.welcome", 0), ms);
    }

    /// Dials and establishes a session the runtime opened with `welcome`.
    fn establish_with(&mut self, welcome: Value, ms: u64) {
        let plan = self
            .core
            .poll_dial(self.at(ms))
            .expect("the core wants a connection");
        assert_eq!(plan.dialects, vec![Dialect::V1_1]);
        let welcome = match Dialect::V1_1.decode(&welcome.to_string()).unwrap().message {
            Message::Welcome(w) => w,
            other => panic!("{other:?}"),
        };
        let est = Established {
            dialect: Dialect::V1_1,
            welcome,
            resuming: plan.resume.is_some(),
            resume_refused: None,
        };
        self.core.on_established(est, self.at(ms));
    }

    /// The frames the core wants written, decoded as JSON.
    fn transmit(&mut self, ms: u64) -> Vec<Value> {
        let mut out = Vec::new();
        let upto = self.core.take_transmit(&mut out);
        self.core.on_flushed(upto, self.at(ms));
        out.iter()
            .map(|t| serde_json::from_str(t).unwrap())
            .collect()
    }

    /// Writes what the core wants written and returns the envelope id of
    /// the one submit among it.
    fn sent_submit_id(&mut self, ms: u64) -> String {
        submits(&self.transmit(ms))[0]["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Feeds a captured frame, answering `request_id` when given.
    fn feed(&mut self, mut frame: Value, request_id: Option<&str>, job_id: &str, ms: u64) {
        if let Some(r) = request_id {
            frame["payload"]["request_id"] = json!(r);
        }
        frame["job_id"] = json!(job_id);
        if frame["payload"].get("job_id").is_some() {
            frame["payload"]["job_id"] = json!(job_id);
        }
        self.core.on_text(&frame.to_string(), self.at(ms));
    }
}

fn submits(frames: &[Value]) -> Vec<&Value> {
    frames
        .iter()
        .filter(|f| f["type"] == "job.submit")
        .collect()
}

#[test]
fn a_call_resolves_from_captured_frames_and_leaves_nothing_behind() {
    let mut h = Harness::new();
    let mut rx = h.invoke(json!({"hello": "world"}), Duration::from_secs(5), 0);
    assert!(
        h.transmit(0).is_empty(),
        "nothing is written before a session"
    );
    h.establish(5);
    let sent = h.transmit(6);
    let submit = submits(&sent)[0].clone();
    let request = submit["id"].as_str().unwrap();
    h.feed(captured("job.accepted", 0), Some(request), "job_1", 10);
    h.core.hand_out_replies();
    assert!(rx.try_recv().is_err(), "accepted is not an outcome");
    h.feed(captured("job.result", 0), None, "job_1", 12);
    h.core.hand_out_replies();
    let out = rx.try_recv().expect("resolved").expect("ok");
    assert_eq!(out.value, json!({"hello": "world", "n": [1, 2, 3]}));
    assert_eq!(out.job_id.as_deref(), Some("job_1"));
    assert!(!out.replayed);
    let stats = h.core.stats();
    assert_eq!((stats.calls, stats.requests), (0, 0), "{stats:?}");
}

/// A runtime of unknown habits may hold a reply's next piece until the
/// client acknowledges the last: the client acknowledges at once while a
/// call waits, and leaves the ACK to its next request once none does.
#[test]
fn quick_acks_are_wanted_only_while_a_call_waits_for_the_runtime() {
    let mut h = Harness::new();
    let mut welcome = captured("session.welcome", 0);
    welcome["payload"]["runtime"] = json!({"name": "unknown-runtime", "version": "0"});
    let mut rx = h.invoke(json!({}), Duration::from_secs(5), 0);
    h.establish_with(welcome, 5);
    let sent = h.transmit(6);
    let request = submits(&sent)[0]["id"].as_str().unwrap().to_owned();
    assert!(h.core.wants_quickack(), "the submit waits for its answer");
    h.feed(captured("job.accepted", 0), Some(&request), "job_1", 10);
    assert!(h.core.wants_quickack(), "the result is still to come");
    h.feed(captured("job.result", 0), None, "job_1", 12);
    h.core.hand_out_replies();
    rx.try_recv().expect("resolved").expect("ok");
    assert!(!h.core.wants_quickack(), "nothing waits: no ACK of its own");
}

/// A runtime known to set TCP_NODELAY never holds a piece back.
#[test]
fn quick_acks_are_never_wanted_from_a_runtime_that_sets_nodelay() {
    let mut h = Harness::new();
    let _rx = h.invoke(json!({}), Duration::from_secs(5), 0);
    h.establish(5);
    h.transmit(6);
    assert!(!h.core.wants_quickack(), "the Python runtime writes whole");
}

#[test]
fn a_deadline_fires_on_the_fake_clock_while_dialing() {
    let mut h = Harness::new();
    let mut rx = h.invoke(json!({}), Duration::from_millis(300), 0);
    assert!(h.core.poll_dial(h.at(1)).is_some(), "dialing");
    // The driver asks when to look next: no later than the deadline.
    assert!(h.core.poll_timeout().unwrap() <= h.at(300));
    h.core.handle_timeout(h.at(299));
    h.core.hand_out_replies();
    assert!(rx.try_recv().is_err());
    h.core.handle_timeout(h.at(300));
    h.core.hand_out_replies();
    match rx.try_recv().expect("resolved at the deadline") {
        Err(e @ Error::DeadlineExceeded { .. }) => assert_eq!(e.execution(), Execution::NotRun),
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_attempt_resends_the_same_payload_with_a_fresh_envelope() {
    let mut h = Harness::new();
    let _rx = h.invoke(json!({"x": 1.0, "y": [1, 2]}), Duration::from_secs(30), 0);
    h.establish(1);
    let first = submits(&h.transmit(2))[0].clone();
    h.core.on_lost(Loss::Network("cut".into()), h.at(3));
    // Reconnect (the resume is refused here: a fresh session) and re-send.
    h.core.handle_timeout(h.at(500));
    h.establish(500);
    let second = submits(&h.transmit(501))[0].clone();
    assert_ne!(first["id"], second["id"], "a fresh envelope id per attempt");
    assert_eq!(
        first["payload"].to_string(),
        second["payload"].to_string(),
        "byte-identical intent"
    );
}

#[test]
fn an_idless_duplicate_key_error_goes_to_the_waiting_submit_not_a_cancel() {
    let mut h = Harness::new();
    let _long = h.invoke(json!({"long": true}), Duration::from_secs(30), 0);
    h.establish(1);
    let long = h.sent_submit_id(2);
    h.feed(captured("job.accepted", 0), Some(&long), "job_long", 3);
    // Cancel the long call: its request stays outstanding, unanswered.
    let (cancel_tx, _cancel_rx) = oneshot::channel();
    let key = h.core_key_of("job_long");
    let shared = h.core_shared_of("job_long");
    h.core.command(
        Command::Cancel {
            key,
            shared,
            reply: cancel_tx,
        },
        h.at(4),
    );
    let mut conflict = h.invoke(json!({"other": 1}), Duration::from_secs(30), 5);
    let sent = h.transmit(6);
    assert!(sent.iter().any(|f| f["type"] == "job.cancel"), "{sent:?}");
    // The runtime's refusal names no request (as Python 1.1.3 sends it).
    let error = captured("session.error", 1);
    assert_eq!(error["payload"]["code"], "DUPLICATE_KEY");
    h.core.on_text(&error.to_string(), h.at(7));
    h.core.hand_out_replies();
    match conflict
        .try_recv()
        .expect("the conflicting call is answered")
    {
        Err(Error::DuplicateKey { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(h.core.stats().calls, 1, "the long call is untouched");
}

impl Harness {
    fn core_key_of(&self, job: &str) -> IdempotencyKey {
        self.core.key_of_job(job).expect("a call bound to the job")
    }
    fn core_shared_of(&self, job: &str) -> Arc<CallShared> {
        self.core
            .shared_of_job(job)
            .expect("a call bound to the job")
    }
}

#[test]
fn a_stray_frame_for_no_call_changes_nothing() {
    let mut h = Harness::new();
    h.core.on_text("{not json", h.at(0));
    let _rx = h.invoke(json!({}), Duration::from_secs(5), 0);
    h.establish(1);
    h.transmit(2);
    for kind in ["job.result", "job.accepted", "job.event", "session.error"] {
        h.feed(captured(kind, 0), Some("no-such-request"), "job_unknown", 3);
    }
    let stats = h.core.stats();
    assert_eq!((stats.calls, stats.requests), (1, 1), "{stats:?}");
}

#[test]
fn a_deadline_with_a_request_on_the_wire_says_it_may_have_run() {
    let mut h = Harness::new();
    let mut rx = h.invoke(json!({}), Duration::from_millis(300), 0);
    h.establish(1);
    assert_eq!(submits(&h.transmit(2)).len(), 1);
    // The runtime never answers; the deadline passes.
    h.core.handle_timeout(h.at(300));
    h.core.hand_out_replies();
    match rx.try_recv().expect("resolved at the deadline") {
        Err(e @ Error::DeadlineExceeded { .. }) => {
            assert_eq!(e.execution(), Execution::MayHaveRun, "{e}")
        }
        other => panic!("{other:?}"),
    }
}

/// A cancel races its job's end: the job's terminal arrives first (the call
/// ends), then the runtime's refusal of the cancel, a `session.error` that
/// names no request. Another call is awaiting acceptance: the refusal is
/// not its answer (it would end as "did not run" while its request may run).
#[test]
fn an_idless_refusal_after_a_raced_cancel_is_not_a_waiting_submits() {
    let mut h = Harness::new();
    let mut first = h.invoke(json!({"n": 1}), Duration::from_secs(30), 0);
    h.establish(1);
    let id = h.sent_submit_id(2);
    h.feed(captured("job.accepted", 0), Some(&id), "job_1", 3);
    let (cancel_tx, _cancel_rx) = oneshot::channel();
    let key = h.core_key_of("job_1");
    let shared = h.core_shared_of("job_1");
    h.core.command(
        Command::Cancel {
            key,
            shared,
            reply: cancel_tx,
        },
        h.at(4),
    );
    assert!(h.transmit(5).iter().any(|f| f["type"] == "job.cancel"));
    // The job ended before the runtime read the cancel.
    h.feed(captured("job.result", 0), None, "job_1", 6);
    h.core.hand_out_replies();
    assert!(first.try_recv().is_ok(), "the first call ended");
    let mut second = h.invoke(json!({"n": 2}), Duration::from_secs(30), 7);
    assert_eq!(submits(&h.transmit(8)).len(), 1);
    // The cancel's refusal, naming nothing (as Python 1.1.3 sends errors).
    let mut refusal = captured("session.error", 1);
    refusal["payload"]["code"] = json!("JOB_NOT_FOUND");
    refusal["payload"]["message"] = json!("no such job");
    h.core.on_text(&refusal.to_string(), h.at(9));
    h.core.hand_out_replies();
    assert!(
        matches!(second.try_recv(), Err(oneshot::error::TryRecvError::Empty)),
        "the waiting call is not ended by the cancel's refusal"
    );
    assert_eq!(h.core.stats().calls, 1);
}

/// A call accepted as `job_1` on its first attempt (by a frame of
/// `first_session` when given: a session other than the current one), the
/// connection lost, the request sent again on a new session and answered
/// there as `second_job`: the call's outcome.
fn resent_and_answered_by(first_session: Option<&str>, second_job: &str) -> crate::ToolOutput {
    let mut h = Harness::new();
    let mut rx = h.invoke(json!({"n": 1}), Duration::from_secs(30), 0);
    h.establish(1);
    let first = h.sent_submit_id(2);
    let mut accepted = captured("job.accepted", 0);
    if let Some(session) = first_session {
        accepted["session_id"] = json!(session);
    }
    h.feed(accepted, Some(&first), "job_1", 3);
    h.core.on_lost(Loss::Network("cut".into()), h.at(4));
    // A new session (another id): the request is sent again.
    let mut welcome = captured("session.welcome", 0);
    welcome["payload"]["session_id"] = json!("sess_after_restart");
    h.establish_with(welcome, 10_000);
    let sent = h.transmit(10_001);
    let again = submits(&sent);
    assert_eq!(again.len(), 1, "{sent:?}");
    let second = again[0]["id"].as_str().unwrap().to_owned();
    let of_new_session = |mut frame: Value| {
        frame["session_id"] = json!("sess_after_restart");
        frame
    };
    let accepted = of_new_session(captured("job.accepted", 0));
    h.feed(accepted, Some(&second), second_job, 10_002);
    let result = of_new_session(captured("job.result", 0));
    h.feed(result, None, second_job, 10_003);
    h.core.hand_out_replies();
    rx.try_recv().expect("resolved").expect("ok")
}

/// After a lost connection, the re-sent request is answered by another job
/// than the one the key was bound to: the runtime lost its record of the key
/// and ran the call again, so the result is a first execution, not a replay
/// (the HTTP binding says the same). Answered by the bound job, the call's
/// own first attempt started (accepted fresh), it is that attempt's
/// execution: no replay either. Bound by an earlier process (its
/// acceptance a frame of another session), the same job is one.
#[test]
fn a_resend_answered_by_another_job_is_not_a_replay() {
    for (first_session, second_job, replay) in [
        (None, "job_2", false),
        (None, "job_1", false),
        (Some("sess_of_an_earlier_process"), "job_1", true),
    ] {
        let out = resent_and_answered_by(first_session, second_job);
        assert_eq!(out.job_id.as_deref(), Some(second_job));
        assert_eq!((out.attempts, out.replayed), (2, replay), "{second_job}");
    }
}

/// An earlier attempt's acceptance showed a stored binding (a frame of
/// another session); after a lost connection the re-sent request is
/// accepted as another job: the runtime ran the call again, and the
/// outcome is that new execution's, not a replay.
#[test]
fn an_earlier_replayed_acceptance_does_not_make_a_new_job_a_replay() {
    let out = resent_and_answered_by(Some("sess_of_an_earlier_process"), "job_2");
    assert_eq!(out.job_id.as_deref(), Some("job_2"));
    assert_eq!((out.attempts, out.replayed), (2, false));
}

/// Dials once the core wants to (stepping the fake clock a millisecond at
/// a time from `from`) and establishes the captured session; the instant.
fn establish_when_due(h: &mut Harness, from: u64) -> u64 {
    let mut ms = from;
    let plan = loop {
        if let Some(plan) = h.core.poll_dial(h.at(ms)) {
            break plan;
        }
        ms += 1;
        assert!(ms < from + 60_000, "no dial within a minute");
    };
    let welcome = match Dialect::V1_1
        .decode(&captured("session.welcome", 0).to_string())
        .unwrap()
        .message
    {
        Message::Welcome(w) => w,
        other => panic!("{other:?}"),
    };
    let est = Established {
        dialect: Dialect::V1_1,
        welcome,
        resuming: plan.resume.is_some(),
        resume_refused: None,
    };
    h.core.on_established(est, h.at(ms));
    ms
}

/// A runtime that accepts a call on each connection and then drops it at
/// once gets no reconnect loop: a connection that lived less than
/// `min_connection_lifetime` does not reset the backoff, however useful,
/// so the waits before the next dials grow.
#[test]
fn short_lived_connections_do_not_reset_the_reconnect_backoff() {
    let mut h = Harness::with_config(|c| c.min_connection_lifetime = Duration::from_millis(200));
    let mut answers = Vec::new();
    let mut at = 0;
    let mut waited = 0;
    for n in 0..6u64 {
        answers.push(h.invoke(json!({ "n": n }), Duration::from_secs(3600), at));
        let dialed = establish_when_due(&mut h, at);
        waited += dialed - at;
        let sent = h.transmit(dialed + 1);
        let submit = submits(&sent)
            .into_iter()
            .find(|s| s["payload"]["input"]["n"] == json!(n))
            .unwrap_or_else(|| panic!("call {n} sent: {sent:?}"))["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let job = format!("job_{n}");
        h.feed(captured("job.accepted", 0), Some(&submit), &job, dialed + 2);
        at = dialed + 5;
        h.core.on_lost(Loss::Network("cut".into()), h.at(at));
    }
    // Full jitter: each wait is uniform up to 100 ms, 200 ms, ... 3.2 s.
    assert!(waited > 200, "waited only {waited} ms across six cuts");
}

/// A finished call under a key generated for it leaves nothing in the
/// cache (only its own handles know the key); a supplied key's outcome is
/// kept.
#[test]
fn only_a_named_keys_outcome_is_cached() {
    let mut h = Harness::with_config(|_| {});
    let mut generated = h.invoke(json!({"n": 1}), Duration::from_secs(30), 0);
    h.establish(1);
    h.answer_with_result("job_1", 2);
    generated.try_recv().expect("resolved").expect("ok");
    assert_eq!(h.core.stats().cached_outcomes, 0);
    let mut supplied = h.invoke_with(
        IdempotencyKey::new(),
        json!({"n": 2}),
        Duration::from_secs(30),
        5,
    );
    h.answer_with_result("job_2", 6);
    supplied.try_recv().expect("resolved").expect("ok");
    assert_eq!(h.core.stats().cached_outcomes, 1);
}

/// A repeat under a generated key (taken from a handle) asks the runtime
/// and starts bound to the job the key was bound to: the runtime's
/// unmarked replay of that job on the same session reads as a replay.
#[test]
fn a_generated_keys_repeat_asks_the_runtime_and_knows_its_job() {
    let mut h = Harness::with_config(|_| {});
    let key = IdempotencyKey::new();
    let args = json!({"n": 1});
    let mut generated = h.submit(
        (key.clone(), false),
        args.clone(),
        Duration::from_secs(30),
        0,
    );
    h.establish(1);
    h.answer_with_result("job_1", 2);
    assert!(
        !generated
            .try_recv()
            .expect("resolved")
            .expect("ok")
            .replayed
    );
    let mut again = h.invoke_with(key, args, Duration::from_secs(30), 5);
    h.answer_with_result("job_1", 6);
    let again = again.try_recv().expect("resolved").expect("ok");
    assert!(again.replayed, "{again:?}");
}

/// A call that may have run (accepted, then its deadline) leaves its
/// binding with its job: a retry under its key starts bound to that job,
/// so the runtime's unmarked replay of it on the same session (the Python
/// runtime's stored acceptance) reads as a replay, not a fresh run.
#[test]
fn a_retry_after_a_call_that_may_have_run_knows_its_job() {
    let mut h = Harness::with_config(|_| {});
    let key = IdempotencyKey::new();
    let args = json!({"n": 1});
    let mut first = h.submit(
        (key.clone(), false),
        args.clone(),
        Duration::from_millis(100),
        0,
    );
    h.establish(1);
    let submit = h.sent_submit_id(2);
    h.feed(captured("job.accepted", 0), Some(&submit), "job_1", 3);
    h.core.handle_timeout(h.at(150));
    h.core.hand_out_replies();
    let e = first.try_recv().expect("resolved").unwrap_err();
    assert_eq!(e.execution(), Execution::MayHaveRun, "{e:?}");
    let mut again = h.invoke_with(key, args, Duration::from_secs(30), 160);
    h.answer_with_result("job_1", 161);
    let again = again.try_recv().expect("resolved").expect("ok");
    assert!(again.replayed, "{again:?}");
}

/// A finished call's outcome leaves the cache when its TTL runs out, on
/// the core's own timer: no later call has to come and look.
#[test]
fn cached_outcomes_expire_on_the_cores_timer() {
    let t0 = Instant::now();
    let ttl = Duration::from_secs(5);
    let mut config = Config::new("ws://127.0.0.1:9/arcp".into());
    config.dialect = crate::config::DialectChoice::V1_1;
    config.outcome_cache_ttl = ttl;
    let (events, _) = tokio::sync::broadcast::channel(8);
    let core = Core::new(
        Arc::new(config),
        None,
        Arc::new(Mutex::new(None)),
        events,
        t0,
    );
    let mut h = Harness { core, t0 };
    let mut rx = h.invoke_with(
        IdempotencyKey::new(),
        json!({"n": 1}),
        Duration::from_secs(30),
        0,
    );
    h.establish(1);
    let submit = h.sent_submit_id(2);
    h.feed(captured("job.accepted", 0), Some(&submit), "job_1", 3);
    h.feed(captured("job.result", 0), None, "job_1", 4);
    h.core.hand_out_replies();
    rx.try_recv().expect("resolved").expect("ok");
    assert_eq!(h.core.stats().cached_outcomes, 1);
    let expiry = h.at(4) + ttl;
    let wake = h.core.poll_timeout().expect("a timer is armed");
    assert!(wake <= expiry, "the core wakes by the expiry");
    h.core.handle_timeout(expiry);
    assert_eq!(h.core.stats().cached_outcomes, 0);
}

/// The application keeps submitting while the writer is stalled (a
/// runtime that reads nothing, and sends nothing that would run the
/// inbound check): the frames waiting for the writer stay within the
/// outbox bound, the link stays up, and the held submits go out, each
/// once, as the writer takes the queue.
#[test]
fn submits_behind_a_stalled_writer_stay_within_the_outbox_bound() {
    let bound = 64 << 10;
    let mut h = Harness::with_config(|c| {
        c.max_outbox_bytes = bound;
        c.max_frame_size = 16 << 10;
    });
    // A send window wide enough that only the outbox holds submits back.
    h.core.window_after_loss = 1000;
    let padding = "x".repeat(8 << 10);
    let mut answers = vec![h.invoke(json!({"n": 0, "pad": padding}), Duration::from_secs(60), 0)];
    h.establish(0);
    for n in 1..100 {
        answers.push(h.invoke(json!({"n": n, "pad": padding}), Duration::from_secs(60), 1));
        h.core.handle_timeout(h.at(1));
        let queued = h.core.outbox.queued_bytes();
        assert!(queued <= bound, "{queued} bytes queued after {n} submits");
    }
    assert!(!h.core.drop_pending(), "the link was dropped");
    let mut sent = std::collections::BTreeMap::new();
    for turn in 0..100u64 {
        let frames = h.transmit(2 + turn);
        for s in submits(&frames) {
            *sent
                .entry(s["payload"]["input"]["n"].as_u64().unwrap())
                .or_insert(0) += 1;
        }
        h.core.handle_timeout(h.at(2 + turn));
        assert!(h.core.outbox.queued_bytes() <= bound);
        if sent.len() == 100 {
            break;
        }
    }
    assert_eq!(sent.len(), 100, "every call is sent once the writer drains");
    assert!(sent.values().all(|&n| n == 1), "{sent:?}");
    assert!(!h.core.drop_pending());
    for answer in &mut answers {
        assert!(answer.try_recv().is_err(), "no call ended");
    }
}

/// Drives `connections` connections of a runtime that answers one request
/// per connection and then drops it; returns how many were dialed at once
/// after the loss, and the fake clock's final instant (ms).
fn answer_once_and_drop(h: &mut Harness, connections: u64) -> (u64, u64) {
    let mut at = 0;
    let mut immediate = 0;
    let mut answers = Vec::new();
    for n in 0..connections {
        answers.push(h.invoke(json!({ "n": n }), Duration::from_secs(3600), at));
        let dialed = establish_when_due(h, at);
        if n > 0 && dialed == at {
            immediate += 1;
        }
        let sent = h.transmit(dialed);
        let submit = submits(&sent)
            .into_iter()
            .find(|s| s["payload"]["input"]["n"] == json!(n))
            .unwrap_or_else(|| panic!("call {n} sent: {sent:?}"))["id"]
            .as_str()
            .unwrap()
            .to_owned();
        h.feed(
            captured("job.accepted", 0),
            Some(&submit),
            &format!("job_{n}"),
            dialed,
        );
        at = dialed;
        h.core.on_lost(Loss::Network("dropped".into()), h.at(at));
    }
    (immediate, at)
}

/// A runtime that answers once per connection and drops it gets, by
/// default, the burst of immediate reconnects (10), then at most one per
/// second plus one per four answers; the other reconnects wait the
/// retry policy's backoff. Without the bucket, every reconnect is
/// immediate: a hot loop.
#[test]
fn a_runtime_dropping_every_connection_is_throttled_to_the_bucket_rate() {
    let mut h = Harness::new();
    let connections = 60;
    let (immediate, end_ms) = answer_once_and_drop(&mut h, connections);
    let seconds = end_ms.div_ceil(1000);
    let allowed = 10 + seconds + connections.div_ceil(4);
    assert!(
        immediate <= allowed,
        "{immediate} immediate reconnects of {connections} in {end_ms} ms (allowed {allowed})"
    );
    assert!(immediate >= 10, "the burst is immediate: {immediate}");
    assert!(
        immediate < connections - 1,
        "every reconnect was immediate: {immediate}"
    );

    let mut unthrottled = Harness::with_config(|c| c.reconnect_burst = u32::MAX);
    let (immediate, end_ms) = answer_once_and_drop(&mut unthrottled, connections);
    assert_eq!(immediate, connections - 1, "without the bucket: a hot loop");
    assert_eq!(end_ms, 0, "all at one instant");
}

/// Connections cut after real work (several answers each, as on a network
/// that cuts busy connections) pay for their own reconnects: each is
/// immediate, however many.
#[test]
fn busy_connections_always_reconnect_at_once() {
    let mut h = Harness::new();
    // The fake clock never moves: no token comes from time, only from
    // the answers.
    let at = 0;
    let mut answers = Vec::new();
    for round in 0..40u64 {
        let first = round * 4;
        for n in first..first + 4 {
            answers.push(h.invoke(json!({ "n": n }), Duration::from_secs(3600), at));
        }
        let dialed = establish_when_due(&mut h, at);
        assert_eq!(dialed, at, "round {round}: the reconnect waited");
        let sent = h.transmit(dialed);
        for s in submits(&sent) {
            let n = s["payload"]["input"]["n"].as_u64().unwrap();
            if n >= first {
                let id = s["id"].as_str().unwrap().to_owned();
                h.feed(
                    captured("job.accepted", 0),
                    Some(&id),
                    &format!("job_{n}"),
                    dialed,
                );
            }
        }
        h.core.on_lost(Loss::Network("cut".into()), h.at(at));
    }
}
