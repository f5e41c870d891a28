//! `State`: the sub-stores under the one lock, and the primitives every
//! handler uses (send, end a connection, stamp a frame, authenticate).

use std::collections::VecDeque;
use std::sync::Arc;

use arcp_types::{Auth, Envelope, Frame, Message};

use super::conns::{Conns, Out};
use super::flavor::Flavor;
use super::idempotency::{Bindings, Fingerprint, Lookup};
use super::jobs::{Job, JobHost, Jobs};
use super::sessions::Sessions;
use crate::config::{Config, ConflictSignal};
use crate::expect::{Counted, Expectation};
use crate::fault::{Call, Fault, Faults};
use crate::tool::{EventSink, Tools};
use crate::verify::VerifyError;

/// Client envelopes kept for [`crate::MockRuntime::received`].
const MAX_RECEIVED: usize = 10_000;

/// What a submit's idempotency key is bound to ([`State::bound`]).
pub(crate) enum Bound {
    /// Nothing: the submit runs.
    Fresh,
    /// Another intent, and the runtime signals conflicts.
    Conflict,
    /// This job: the submit is answered as a replay of it.
    Job(String),
}

/// An expectation registered with the runtime. A scoped one counts from
/// `baseline`, the count when its guard was made.
pub(crate) struct Registered {
    pub id: u64,
    pub expectation: Expectation,
    pub baseline: u64,
}

/// What a submit needs to run a tool: where its events go and whom its task
/// reports to.
#[derive(Clone)]
pub(crate) struct Host {
    pub sink: Arc<dyn EventSink>,
    pub jobs: Arc<dyn JobHost>,
}

/// Everything mutable, behind the runtime's one lock.
pub(crate) struct State {
    pub cfg: Arc<Config>,
    pub flavor: Flavor,
    pub tools: Tools,
    pub conns: Conns,
    pub sessions: Sessions,
    pub jobs: Jobs,
    pub bindings: Bindings,
    pub faults: Faults,
    pub expectations: Vec<Registered>,
    /// The id of the next registered expectation.
    next_expectation: u64,
    /// Requests received by the HTTP binding.
    pub http_requests: u64,
    received: VecDeque<Envelope>,
}

impl State {
    pub(super) fn new(cfg: Arc<Config>, tools: Tools) -> Self {
        State {
            flavor: Flavor::of(cfg.dialect),
            cfg,
            tools,
            conns: Conns::default(),
            sessions: Sessions::default(),
            jobs: Jobs::default(),
            bindings: Bindings::default(),
            faults: Faults::default(),
            expectations: Vec::new(),
            next_expectation: 0,
            http_requests: 0,
            received: VecDeque::new(),
        }
    }

    // ------------------------------------------------------------ records

    /// Logs an envelope a client sent on `conn`.
    pub(super) fn record(&mut self, conn: u64, envelope: Envelope) {
        if self.received.len() >= MAX_RECEIVED {
            self.received.pop_front();
        }
        self.conns.log_received(conn, envelope.clone());
        self.received.push_back(envelope);
    }

    pub(super) fn received(&self) -> Vec<Envelope> {
        self.received.iter().cloned().collect()
    }

    pub(super) fn clear_received(&mut self) {
        self.received.clear();
    }

    /// How many executions `counted` has had so far.
    pub(super) fn count(&self, counted: &Counted) -> u64 {
        match counted {
            Counted::Tool(tool) => self.jobs.executions(tool),
            Counted::Key(key) => self.jobs.executions_for_key(key),
            Counted::Total => self.jobs.total_executions(),
        }
    }

    /// Registers an expectation, counting from now when `scoped`; returns
    /// its id.
    pub(super) fn expect(&mut self, expectation: Expectation, scoped: bool) -> u64 {
        let baseline = if scoped {
            self.count(expectation.counted())
        } else {
            0
        };
        self.next_expectation += 1;
        let id = self.next_expectation;
        self.expectations.push(Registered {
            id,
            expectation,
            baseline,
        });
        id
    }

    /// The mismatch of one registered expectation, if any.
    fn mismatch(&self, registered: &Registered) -> Option<String> {
        let actual = self
            .count(registered.expectation.counted())
            .saturating_sub(registered.baseline);
        registered.expectation.check(actual)
    }

    /// Executions counted by expectation `id` so far (0 once it is gone).
    pub(super) fn counted_by(&self, id: u64) -> u64 {
        self.expectations
            .iter()
            .find(|r| r.id == id)
            .map_or(0, |r| {
                self.count(r.expectation.counted())
                    .saturating_sub(r.baseline)
            })
    }

    /// Checks expectation `id` alone; `remove` unregisters it.
    pub(super) fn verify_one(&mut self, id: u64, remove: bool) -> Result<(), VerifyError> {
        let Some(i) = self.expectations.iter().position(|r| r.id == id) else {
            return Ok(());
        };
        let failure = self.mismatch(&self.expectations[i]);
        if remove {
            self.expectations.remove(i);
        }
        match failure {
            None => Ok(()),
            Some(failure) => Err(VerifyError::new(1, vec![failure])),
        }
    }

    pub(super) fn verify(&self) -> Result<(), VerifyError> {
        let failures: Vec<String> = self
            .expectations
            .iter()
            .filter_map(|r| self.mismatch(r))
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(VerifyError::new(self.expectations.len(), failures))
        }
    }

    /// Consumes the oldest queued fault matching `pred` (or finds a standing
    /// one); `true` when there was one.
    pub(super) fn fault(&mut self, pred: impl Fn(&Fault) -> bool) -> bool {
        self.faults.take(pred).is_some()
    }

    /// As [`State::fault`], for an event of job `job_id`: faults scoped to
    /// its tool or key apply too.
    pub(super) fn job_fault(&mut self, job_id: &str, pred: impl Fn(&Fault) -> bool) -> bool {
        let Some(job) = self.jobs.get(job_id) else {
            return self.fault(pred);
        };
        let call = Call {
            tool: &job.tool,
            key: job.key.as_deref(),
        };
        self.faults.take_for(pred, Some(call)).is_some()
    }

    // -------------------------------------------------------- connections

    /// Enqueues a frame on a live connection. A connection whose queue is
    /// full is a slow consumer: it is dropped.
    pub(super) fn send(&mut self, conn: u64, frame: Frame) -> bool {
        match self.conns.send(conn, Out::Frame(Box::new(frame))) {
            Ok(sent) => sent,
            Err(()) => {
                tracing::warn!(conn, "arcp-mock: client is not reading; dropping it");
                self.abort(conn);
                false
            }
        }
    }

    /// Enqueues a stray frame (not counted as a delivery).
    pub(super) fn send_stray(&mut self, conn: u64, frame: Frame) {
        let _ = self.conns.send(conn, Out::Stray(Box::new(frame)));
    }

    /// Ends a connection once the frames queued so far are sent: `Out::Kill`
    /// (no close frame) or `Out::Close(code)`.
    pub(super) fn end(&mut self, conn: u64, out: Out) {
        self.detach(conn);
        self.conns.end(conn, out);
    }

    /// Drops the connection abruptly once queued frames are sent.
    pub(super) fn kill(&mut self, conn: u64) {
        self.end(conn, Out::Kill);
    }

    /// Closes the connection (close frame 1000) once queued frames are sent.
    pub(super) fn close(&mut self, conn: u64) {
        self.end(conn, Out::Close(1000));
    }

    /// Drops the connection now, discarding queued frames.
    pub(super) fn abort(&mut self, conn: u64) {
        self.detach(conn);
        if let Some(handle) = self.conns.abort(conn) {
            handle.abort();
        }
    }

    /// Unbinds a connection from its session: v1.1 sessions wait for a
    /// resume; legacy sessions end with their connection.
    pub(super) fn detach(&mut self, conn: u64) {
        let Some(sid) = self.conns.session(conn) else {
            return;
        };
        if self.flavor.sessions_outlive_connections() {
            self.sessions.detach(&sid, conn);
        } else {
            self.sessions.remove(&sid);
        }
    }

    /// Binds a connection to a session and principal.
    pub(super) fn bind(&mut self, conn: u64, session: &str, principal: String) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.session = Some(session.to_owned());
            c.principal = Some(principal);
        }
    }

    // ------------------------------------------------------------ framing

    /// A frame for a connection, carrying its session id.
    pub(super) fn reply(&self, conn: u64, message: Message) -> Frame {
        let mut frame = self.flavor.frame(message);
        frame.envelope.session_id = self.conns.session(conn);
        frame
    }

    /// A frame about a job: its session, its id and (legacy) the request it
    /// answers.
    pub(super) fn job_frame(&self, job: &Job, message: Message) -> Frame {
        let mut frame = self.flavor.frame(message);
        frame.envelope.session_id = Some(job.session.clone());
        frame.envelope.job_id = Some(job.id.clone());
        self.flavor.correlate(&mut frame, &job.request_id);
        frame
    }

    /// Sequences a reply on the connection's session where the dialect does
    /// (legacy).
    pub(super) fn stamp(&mut self, conn: u64, frame: &mut Frame) {
        if self.flavor.sequences_replies() {
            if let Some(sid) = self.conns.session(conn) {
                frame.envelope.event_seq = self.sessions.next_seq(&sid);
            }
        }
    }

    /// Sequences a reply and sends it.
    pub(super) fn send_stamped(&mut self, conn: u64, mut frame: Frame) {
        self.stamp(conn, &mut frame);
        self.send(conn, frame);
    }

    // ------------------------------------------------------------- access

    /// The principal `auth` maps to. With no tokens registered, anyone is
    /// `anonymous`.
    pub(super) fn authenticate(&self, auth: &Auth) -> Result<String, &'static str> {
        if self.cfg.tokens.is_empty() {
            return Ok("anonymous".to_owned());
        }
        match (auth.scheme.as_str(), auth.token.as_deref()) {
            ("bearer", Some(token)) => self
                .cfg
                .tokens
                .get(token)
                .cloned()
                .ok_or("unknown bearer token"),
            _ => Err("auth scheme None not configured"),
        }
    }

    /// What a submit's key is bound to, as both transports read it: a
    /// conflict only when the runtime signals conflicts (else another intent
    /// is answered as the bound job), and a binding to a job no longer kept
    /// is dropped.
    pub(super) fn bound(&mut self, principal: &str, key: &str, fingerprint: &Fingerprint) -> Bound {
        match self
            .bindings
            .lookup(principal, key, fingerprint, self.cfg.key_retention)
        {
            Lookup::Fresh => Bound::Fresh,
            Lookup::Other(_) if self.cfg.conflict != ConflictSignal::Ignored => Bound::Conflict,
            Lookup::Same(job_id) | Lookup::Other(job_id) if self.jobs.contains(&job_id) => {
                Bound::Job(job_id)
            }
            Lookup::Same(_) | Lookup::Other(_) => {
                self.bindings.unbind(principal, key);
                Bound::Fresh
            }
        }
    }

    /// Forgets the oldest finished jobs beyond the bound, with their
    /// bindings.
    pub(super) fn evict_finished(&mut self) {
        for job in self.jobs.evict() {
            if let Some(key) = &job.key {
                self.bindings.forget(&job.principal, key, &job.id);
            }
        }
    }
}
