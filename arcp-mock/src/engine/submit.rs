//! The one submit path, shared by both dialects and both transports: faults
//! on submit, the tool lookup, the idempotency binding and its answers
//! (replay per [`ReplayPolicy`], refusal per [`ConflictSignal`]), then the
//! job and its tool task. The HTTP binding answers a key that is already
//! bound itself (409, the stored terminal, 422) before anything else.

use std::sync::Arc;
use std::time::Duration;

use arcp_types::{Accepted, ErrorCode, Frame, Invoke, Message, Receipt};
use serde_json::json;
use tokio::sync::mpsc;

use super::conns::{Link, Out};
use super::flavor::{error_reply, new_id, object, session_error};
use super::jobs::{spawn_tool, Job};
use super::state::{Bound, Host, State};
use crate::config::{ConflictSignal, ReplayPolicy};
use crate::fault::{Call, Fault};
use crate::tool::ToolContext;

/// Who sent a submit.
pub(crate) enum Caller {
    /// A WebSocket connection with an open session.
    Socket(u64),
    /// One request of the HTTP binding: its connection id (allocated, not
    /// yet registered), the queue its response reads, and the principal its
    /// credentials mapped to.
    Http {
        conn: u64,
        tx: mpsc::Sender<Out>,
        principal: String,
    },
}

/// What a submit came to.
pub(crate) enum Submitted {
    /// Answered with frames on the caller's connection: accepted and
    /// started, replayed, or refused.
    Answered,
    /// HTTP: the key's job is still running.
    InFlight,
    /// HTTP: the key's job has finished; its stored terminal.
    Replay(Box<Frame>),
    /// HTTP: the key is bound to another intent.
    Conflict,
}

impl State {
    /// A submit (`job.submit` / `tool.invoke`, or one HTTP `POST`) with
    /// envelope id `request_id`.
    pub(super) fn submit(
        &mut self,
        host: &Host,
        caller: Caller,
        request_id: &str,
        invoke: Invoke,
    ) -> Submitted {
        let conn = match caller {
            Caller::Socket(conn) => conn,
            Caller::Http {
                conn,
                tx,
                principal,
            } => {
                if let Some(answer) = self.http_bound(&principal, &invoke) {
                    return answer;
                }
                self.open_http(conn, tx, principal);
                conn
            }
        };
        self.run(host, conn, request_id, invoke);
        Submitted::Answered
    }

    /// The HTTP binding's own answer to a key already bound, if it is.
    fn http_bound(&mut self, principal: &str, invoke: &Invoke) -> Option<Submitted> {
        let key = invoke.idempotency_key.as_deref()?;
        let fingerprint = self.flavor.fingerprint(invoke);
        match self.bound(principal, key, &fingerprint) {
            Bound::Fresh => None,
            Bound::Conflict => Some(Submitted::Conflict),
            Bound::Job(job_id) => match self.jobs.get(&job_id).and_then(Job::terminal) {
                Some(terminal) => Some(Submitted::Replay(Box::new(terminal))),
                None => Some(Submitted::InFlight),
            },
        }
    }

    /// A connection and a session for one HTTP submit (not counted in
    /// [`crate::MockRuntime::connections`]); both end with the response.
    fn open_http(&mut self, conn: u64, tx: mpsc::Sender<Out>, principal: String) {
        self.conns.insert(conn, tx, Arc::new(Link::new()));
        let session = new_id("sess");
        self.sessions
            .open(session.clone(), principal.clone(), Some(conn));
        self.bind(conn, &session, principal);
    }

    /// The submit proper, on a connection with a session.
    fn run(&mut self, host: &Host, conn: u64, request_id: &str, invoke: Invoke) {
        let Some(session_id) = self.conns.session(conn) else {
            return;
        };
        let principal = self.conns.principal(conn);
        let call = Call {
            tool: &invoke.tool,
            key: invoke.idempotency_key.as_deref(),
        };
        let fault = self.faults.take_for(
            |f| {
                matches!(
                    f,
                    Fault::DropOnSubmit | Fault::RejectNextSubmit { .. } | Fault::CloseWith { .. }
                )
            },
            Some(call),
        );
        match fault {
            Some(Fault::DropOnSubmit) => return self.kill(conn),
            Some(Fault::CloseWith { code }) => return self.end(conn, Out::Close(code)),
            Some(Fault::RejectNextSubmit { code, retry_after }) => {
                return self.reject(conn, request_id, code, retry_after)
            }
            _ => {}
        }
        let Some(tool) = self.tools.get(&invoke.tool).cloned() else {
            return self.unknown_tool(conn, request_id, &invoke.tool);
        };
        let key = invoke.idempotency_key.clone();
        let fingerprint = self.flavor.fingerprint(&invoke);
        if let Some(key) = &key {
            match self.bound(&principal, key, &fingerprint) {
                Bound::Fresh => {}
                Bound::Conflict => return self.conflict(conn, request_id, key),
                Bound::Job(job_id) => return self.replay(conn, request_id, key, &job_id),
            }
        }
        if self.jobs.at_capacity() {
            return self.reject(conn, request_id, ErrorCode::ResourceExhausted, None);
        }

        let job_id = new_id("job");
        let mut accepted =
            self.flavor
                .frame(self.flavor.accepted(&job_id, request_id, &invoke.tool));
        accepted.envelope.session_id = Some(session_id.clone());
        accepted.envelope.job_id = Some(job_id.clone());
        self.stamp(conn, &mut accepted);
        if let Some(key) = &key {
            self.bindings.bind(&principal, key, fingerprint, &job_id);
        }
        let job = Job::new(
            job_id.clone(),
            invoke.tool.clone(),
            session_id,
            conn,
            principal.clone(),
            request_id.to_owned(),
            key.clone(),
            invoke.arguments.clone(),
            accepted.clone(),
        );
        self.jobs.start(job);
        self.send_accepted(conn, &job_id, accepted);
        if self.flavor.announces_start() {
            let description = format!("invoking {}", invoke.tool);
            let started = Message::Started(object(json!({ "description": description })));
            if let Some(job) = self.jobs.get(&job_id) {
                let frame = self.job_frame(job, started);
                self.send_stamped(conn, frame);
            }
        }

        let call = Call {
            tool: &invoke.tool,
            key: key.as_deref(),
        };
        let queued = match self
            .faults
            .take_for(|f| matches!(f, Fault::QueueJob(_)), Some(call))
        {
            Some(Fault::QueueJob(wait)) => Some(wait),
            _ => None,
        };
        let ctx = ToolContext::new(
            Arc::clone(&host.sink),
            job_id.clone(),
            invoke.tool,
            key,
            principal,
        );
        let abort = spawn_tool(
            Arc::clone(&host.jobs),
            job_id.clone(),
            tool,
            invoke.arguments,
            ctx,
            queued,
        );
        self.jobs.set_abort(&job_id, abort);
    }

    /// Sends job `job_id`'s `job.accepted`, then applies
    /// [`Fault::DropAfterAccepted`].
    fn send_accepted(&mut self, conn: u64, job_id: &str, frame: Frame) {
        self.send(conn, frame);
        if self.job_fault(job_id, |f| matches!(f, Fault::DropAfterAccepted)) {
            self.kill(conn);
        }
    }

    /// A refusal before acceptance (not executed, key not bound).
    fn reject(
        &mut self,
        conn: u64,
        request_id: &str,
        code: ErrorCode,
        retry_after: Option<Duration>,
    ) {
        let message = format!("submit refused ({code}); retry later");
        let mut error = error_reply(code, message, true, Some(request_id));
        error.details = retry_after.map(|d| json!({"retry_after_seconds": d.as_secs_f64()}));
        let frame = self.reply(conn, self.flavor.refusal(error));
        self.send_stamped(conn, frame);
    }

    /// A submit for a tool that is not registered (the key is not bound).
    fn unknown_tool(&mut self, conn: u64, request_id: &str, tool: &str) {
        if !self.flavor.accepts_unknown_tools() {
            // Python 1.1.3: a session-level error without the request id.
            let message = format!("unknown agent: {tool}");
            let error = session_error(ErrorCode::AgentNotAvailable, message);
            let frame = self.reply(conn, Message::SessionError(error));
            self.send(conn, frame);
            return;
        }
        // Rust 2.0.0: accepted under a fresh job id, then failed; the key is
        // not bound, so a retry gets yet another job.
        let job_id = new_id("job");
        let accepted = Message::Accepted(Accepted::new(job_id.clone()).with_request_id(request_id));
        let mut accepted = self.reply(conn, accepted);
        accepted.envelope.job_id = Some(job_id.clone());
        self.send_stamped(conn, accepted);
        let message = format!("tool not registered: {tool}");
        let error = error_reply(ErrorCode::NotFound, message, false, Some(request_id));
        let mut failed = self.reply(conn, Message::Error(error));
        failed.envelope.job_id = Some(job_id);
        self.send_stamped(conn, failed);
    }

    /// A same-key, other-intent submit, refused per the [`ConflictSignal`].
    fn conflict(&mut self, conn: u64, request_id: &str, key: &str) {
        let python = format!("idempotency key '{key}' already used with different parameters");
        let rust = format!("idempotency key {key} already bound to a different command intent");
        let refuse = |code, text| error_reply(code, text, false, Some(request_id));
        let (message, legacy_style) = match self.cfg.conflict {
            ConflictSignal::SessionError => (
                Message::SessionError(session_error(ErrorCode::DuplicateKey, python)),
                false,
            ),
            ConflictSignal::JobError => (
                Message::Error(refuse(ErrorCode::DuplicateKey, python)),
                false,
            ),
            ConflictSignal::FailedPrecondition => (
                Message::Error(refuse(ErrorCode::FailedPrecondition, rust)),
                true,
            ),
            ConflictSignal::DuplicateKeyFailed => {
                (Message::Error(refuse(ErrorCode::DuplicateKey, rust)), true)
            }
            ConflictSignal::Nack | ConflictSignal::Ignored => {
                // A legacy `nack` payload has no `retryable` (arcp-core's
                // NackPayload: code, message, details).
                let mut nack = refuse(ErrorCode::DuplicateKey, rust);
                nack.retryable = None;
                (Message::Nack(nack), true)
            }
        };
        let session_level = matches!(message, Message::SessionError(_));
        let mut frame = self.reply(conn, message);
        if legacy_style {
            frame.envelope.idempotency_key = Some(key.to_owned());
        }
        if !session_level {
            self.stamp(conn, &mut frame);
        }
        self.send(conn, frame);
    }

    /// A same-key resubmit of job `job_id`, answered per the [`ReplayPolicy`].
    fn replay(&mut self, conn: u64, request_id: &str, key: &str, job_id: &str) {
        let Some(job) = self.jobs.get(job_id) else {
            return;
        };
        let terminal = job.terminal();
        match self.cfg.replay {
            ReplayPolicy::TerminalReplay => {
                self.replay_accepted(conn, request_id, key, job_id);
                if let Some(terminal) = terminal {
                    self.replay_terminal(conn, request_id, key, terminal, false);
                }
            }
            ReplayPolicy::AcceptedOnly => self.replay_accepted(conn, request_id, key, job_id),
            ReplayPolicy::AckReplay => {
                let receipt = Message::Receipt(Receipt::new(Some(job_id.to_owned()), true));
                let mut frame = self.reply(conn, receipt);
                frame.envelope.correlation_id = Some(request_id.to_owned());
                frame.envelope.idempotency_key = Some(key.to_owned());
                self.send_stamped(conn, frame);
            }
            ReplayPolicy::TerminalOnly => match terminal {
                Some(terminal) => self.replay_terminal(conn, request_id, key, terminal, true),
                None => {
                    if let Some(job) = self.jobs.get_mut(job_id) {
                        job.wait(conn, request_id, key);
                    }
                }
            },
        }
    }

    fn replay_accepted(&mut self, conn: u64, request_id: &str, key: &str, job_id: &str) {
        let Some(job) = self.jobs.get(job_id) else {
            return;
        };
        let frame = if !self.flavor.replays_stored_envelopes() {
            // Rust 2.0.0: a fresh envelope on the current session, the new
            // request in `correlation_id`, the key echoed on the envelope.
            let mut frame = self.reply(conn, self.flavor.accepted(job_id, request_id, &job.tool));
            frame.envelope.job_id = Some(job_id.to_owned());
            frame.envelope.idempotency_key = Some(key.to_owned());
            self.stamp(conn, &mut frame);
            frame
        } else {
            // Python 1.1.3: the original envelope (id, session_id) with the
            // new request id in the payload.
            let mut frame = job.accepted.clone();
            if let Message::Accepted(accepted) = &mut frame.message {
                accepted.request_id = Some(request_id.to_owned());
            }
            frame
        };
        self.send_accepted(conn, job_id, frame);
    }
}
