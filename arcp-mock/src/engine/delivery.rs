//! Where a job's events and terminal go: its submitter (v1.1: the session,
//! buffered for resume; legacy: the submitting connection), its
//! subscribers, and the duplicates waiting for it; stored terminals re-sent
//! as replays; and the stray frames of [`Fault::StrayFrames`].

use arcp_types::{Frame, Message};
use serde_json::{json, Value};

use super::flavor::new_id;
use super::jobs::Outcome;
use super::state::State;
use crate::fault::Fault;
use crate::tool::ToolFailure;

impl State {
    /// A job event from a running tool.
    pub(super) fn emit(&mut self, job_id: &str, kind: &str, body: Value) {
        let Some(job) = self.jobs.get(job_id).filter(|j| j.is_running()) else {
            return;
        };
        let frame = self.job_frame(job, self.flavor.event(kind, body));
        self.route(job_id, frame, false);
    }

    /// One streamed result chunk from a running tool.
    pub(super) fn emit_chunk(&mut self, job_id: &str, data: String, more: bool) {
        let Some(job) = self.jobs.get_mut(job_id).filter(|j| j.is_running()) else {
            return;
        };
        let (result_id, next) = job.chunks.get_or_insert_with(|| (new_id("res"), 0));
        let body = json!({
            "result_id": result_id.clone(),
            "chunk_seq": *next,
            "data": data,
            "encoding": "utf8",
            "more": more,
        });
        *next += 1;
        self.emit(job_id, "result_chunk", body);
    }

    /// A job ended: store its terminal, deliver it, answer the duplicates
    /// waiting for it.
    pub(super) fn finish(&mut self, job_id: &str, outcome: Outcome) {
        let Some(job) = self.jobs.get(job_id).filter(|j| j.is_running()) else {
            return;
        };
        let result_id = job.chunks.as_ref().map(|(id, _)| id.clone());
        let frame = self.job_frame(job, self.flavor.terminal(outcome, result_id));
        let waiters = self.jobs.complete(job_id, frame.clone());
        if let Some((conn, sent)) = self.route(job_id, frame.clone(), true) {
            self.after_terminal(conn, &sent);
        }
        for (conn, request_id, key) in waiters {
            self.replay_terminal(conn, &request_id, &key, frame.clone(), true);
        }
        self.evict_finished();
    }

    /// A running tool asked to lose its connection: the one its job's
    /// frames go to now (v1.1: its session's; legacy and HTTP: the
    /// submitting one) is dropped abruptly once the frames already queued
    /// are sent. The job runs on; its terminal is stored for replay (and
    /// kept in a v1.1 session's resume buffer).
    pub(super) fn drop_job_connection(&mut self, job_id: &str) {
        let Some(job) = self.jobs.get(job_id).filter(|j| j.is_running()) else {
            return;
        };
        let conn = if self.flavor.sessions_outlive_connections() {
            self.sessions.conn(&job.session).unwrap_or(job.origin_conn)
        } else {
            job.origin_conn
        };
        if self.conns.is_live(conn) {
            self.kill(conn);
        }
    }

    pub(super) fn cancel_job(&mut self, job_id: &str) {
        self.finish(job_id, Outcome::Cancelled);
    }

    /// Delivers a job frame to its submitter, then to its subscribers.
    /// Returns the connection the submitter's copy went to, and that copy.
    fn route(&mut self, job_id: &str, frame: Frame, terminal: bool) -> Option<(u64, Frame)> {
        let (target, stamped) = if self.flavor.sessions_outlive_connections() {
            self.via_session(job_id, frame.clone(), terminal)?
        } else {
            self.via_connection(job_id, frame.clone(), terminal)?
        };
        let capacity = self.cfg.resume_buffer;
        let job = self.jobs.get_mut(job_id)?;
        if !terminal {
            job.remember(stamped.clone(), capacity);
        }
        for (conn, sid) in job.subscribers.clone() {
            if target != Some(conn) {
                self.deliver_to(conn, &sid, frame.clone());
            }
        }
        target.map(|conn| (conn, stamped))
    }

    /// Sends a job frame to a subscriber: on its own session (as the Rust
    /// runtime's subscriber frames are), sequenced and buffered there.
    pub(super) fn deliver_to(&mut self, conn: u64, sid: &str, mut frame: Frame) {
        if !self.conns.is_live(conn) {
            return;
        }
        frame.envelope.session_id = Some(sid.to_owned());
        frame.envelope.event_seq = self.sessions.next_seq(sid);
        self.sessions
            .buffer(sid, frame.clone(), self.cfg.resume_buffer);
        self.send(conn, frame);
    }

    /// Legacy: to the submitting connection only, discarded once it is gone.
    fn via_connection(
        &mut self,
        job_id: &str,
        mut frame: Frame,
        terminal: bool,
    ) -> Option<(Option<u64>, Frame)> {
        let job = self.jobs.get(job_id)?;
        let (origin, sid) = (job.origin_conn, job.session.clone());
        if !self.conns.is_live(origin) {
            return Some((None, frame));
        }
        if terminal && self.job_fault(job_id, |f| matches!(f, Fault::DropBeforeTerminal)) {
            self.kill(origin);
            return Some((None, frame));
        }
        frame.envelope.event_seq = self.sessions.next_seq(&sid);
        self.send(origin, frame.clone());
        Some((Some(origin), frame))
    }

    /// v1.1: to the session, sequenced and buffered for resume, sent to the
    /// connection attached to it.
    fn via_session(
        &mut self,
        job_id: &str,
        mut frame: Frame,
        terminal: bool,
    ) -> Option<(Option<u64>, Frame)> {
        let job = self.jobs.get(job_id)?;
        let (origin, sid) = (job.origin_conn, job.session.clone());
        if self.sessions.get(&sid).is_none() {
            // The session is gone (an HTTP submit's, or forgotten): the
            // frame reaches only the job's history and subscribers.
            return Some((None, frame));
        }
        let mut target = self.sessions.conn(&sid).filter(|&c| self.conns.is_live(c));
        let reattach = self.cfg.reattach;
        if !reattach && target != Some(origin) {
            // Python 1.1.3: events of a job whose connection dropped are lost.
            return Some((None, frame));
        }
        if let Some(conn) = target.filter(|_| terminal) {
            if self.job_fault(job_id, |f| matches!(f, Fault::DropBeforeTerminal)) {
                self.kill(conn);
                target = None;
                if !reattach {
                    return Some((None, frame));
                }
            }
        }
        frame.envelope.event_seq = self.sessions.next_seq(&sid);
        self.sessions
            .buffer(&sid, frame.clone(), self.cfg.resume_buffer);
        if let Some(conn) = target {
            self.send(conn, frame.clone());
        }
        Some((target, frame))
    }

    /// [`Fault::StrayFrames`]: after a terminal went out on `conn`, an exact
    /// duplicate of it, a late event for its job, and a terminal for a job
    /// and a request that never existed.
    pub(super) fn after_terminal(&mut self, conn: u64, terminal: &Frame) {
        let stray = |f: &Fault| matches!(f, Fault::StrayFrames);
        let fault = match terminal.envelope.job_id.as_deref() {
            Some(job_id) => self.job_fault(job_id, stray),
            None => self.fault(stray),
        };
        if !fault {
            return;
        }
        self.send_stray(conn, terminal.clone());
        let body = json!({"level": "warn", "message": "stray event after the terminal"});
        let mut late = self.flavor.frame(self.flavor.event("log", body));
        late.envelope.session_id = terminal.envelope.session_id.clone();
        late.envelope.job_id = terminal.envelope.job_id.clone();
        late.envelope.correlation_id = terminal.envelope.correlation_id.clone();
        let sid = self.conns.session(conn);
        if let Some(sid) = &sid {
            late.envelope.event_seq = self.sessions.next_seq(sid);
        }
        self.send_stray(conn, late);

        let ghost_request = self.flavor.request_id();
        let failure = ToolFailure::new(self.flavor.internal_code(), "stray terminal");
        let mut message = self
            .flavor
            .terminal(Outcome::Done(Err(failure.retryable(false))), None);
        if let Message::Error(e) = &mut message {
            e.request_id = Some(ghost_request.clone());
        }
        let mut ghost = self.reply(conn, message);
        ghost.envelope.job_id = Some(new_id("job"));
        self.flavor.correlate(&mut ghost, &ghost_request);
        if let Some(sid) = &sid {
            ghost.envelope.event_seq = self.sessions.next_seq(sid);
        }
        self.send_stray(conn, ghost);
    }

    /// Re-sends a stored terminal. v1.1: the original envelope with a fresh
    /// `event_seq` of the requesting session (as Python does); legacy: a
    /// fresh envelope correlated to the new request. `correlate` also names
    /// the request in a v1.1 payload (`TerminalOnly`).
    pub(super) fn replay_terminal(
        &mut self,
        conn: u64,
        request_id: &str,
        key: &str,
        stored: Frame,
        correlate: bool,
    ) {
        if !self.conns.is_live(conn) {
            return;
        }
        let frame = if self.flavor.replays_stored_envelopes() {
            // Python 1.1.3: the stored envelope, sequenced and buffered on
            // the requesting session.
            let Some(sid) = self.conns.session(conn) else {
                return;
            };
            let mut frame = stored;
            if correlate {
                match &mut frame.message {
                    Message::Error(e) => e.request_id = Some(request_id.to_owned()),
                    Message::Result(r) => {
                        r.extra.insert("request_id".into(), json!(request_id));
                    }
                    Message::Cancelled(o) => {
                        o.insert("request_id".into(), json!(request_id));
                    }
                    _ => {}
                }
            }
            frame.envelope.event_seq = self.sessions.next_seq(&sid);
            self.sessions
                .buffer(&sid, frame.clone(), self.cfg.resume_buffer);
            frame
        } else {
            // Rust 2.0.0: a fresh envelope on the current session,
            // correlated to the new request, the key echoed on it.
            let mut frame = self.flavor.frame(stored.message);
            frame.envelope.session_id = self.conns.session(conn);
            frame.envelope.job_id = stored.envelope.job_id;
            frame.envelope.correlation_id = Some(request_id.to_owned());
            frame.envelope.idempotency_key = Some(key.to_owned());
            self.stamp(conn, &mut frame);
            frame
        };
        self.send(conn, frame.clone());
        self.after_terminal(conn, &frame);
    }
}
