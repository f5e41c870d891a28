//! The runtime's state and protocol logic, behind one lock.
//!
//! Everything here is synchronous: a handler runs under the lock, decides,
//! and enqueues outbound frames on the bounded per-connection queues; the
//! transports (`crate::ws`, `crate::http`) do the I/O. Every frame is built
//! as a [`Frame`] and encoded by the `arcp-types` codec of the dialect, so
//! the mock and the client share one definition of the wire.
//!
//! Module order (each imports only modules listed before it):
//!
//! 1. `conns`, `sessions`, `jobs`, `idempotency`: the typed sub-stores;
//! 2. `flavor`: what differs between the dialects, as methods;
//! 3. `state`: the stores under the lock, and the primitives (send, end a
//!    connection, stamp a frame, authenticate, read a key's binding);
//! 4. `delivery`, `submit`, `control`: the shared operations (where a job's
//!    frames go; the one submit path of both dialects and transports;
//!    ping, job listing, cancel checks);
//! 5. `v1_1`, `legacy`: one front-end per dialect, decoding its frames and
//!    calling the shared operations;
//! 6. this file: [`Engine`], the handle the transports and the public
//!    [`crate::MockRuntime`] hold.

mod conns;
mod sessions;

mod idempotency;
mod jobs;

mod flavor;

mod state;

mod control;
mod delivery;
mod submit;

mod legacy;
mod v1_1;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use arcp_types::{Auth, Envelope, Frame, Message};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

pub(crate) use conns::{Link, Out, OUTBOUND_CAPACITY};
pub(crate) use v1_1::HttpSubmit;

use flavor::Flavor;
use jobs::{JobHost, Outcome};
use state::{Host, State};

use crate::config::Config;
use crate::expect::Expectation;
use crate::fault::{Fault, FaultScope, FrameAction};
use crate::tool::{EventSink, ToolFn, Tools};
use crate::verify::{ConnRecord, JobRecord, VerifyError};

/// The runtime shared by its tasks: the settings, the state under its lock,
/// and the black-hole switch (read on every frame, so kept out of the lock).
pub(crate) struct Engine {
    cfg: Arc<Config>,
    state: Mutex<State>,
    blackhole: AtomicBool,
}

impl Engine {
    pub(crate) fn new(cfg: Config, tools: Tools) -> Self {
        let cfg = Arc::new(cfg);
        Engine {
            state: Mutex::new(State::new(Arc::clone(&cfg), tools)),
            cfg,
            blackhole: AtomicBool::new(false),
        }
    }

    /// The settings.
    pub(crate) fn cfg(&self) -> &Config {
        &self.cfg
    }

    /// The state. A panic in another thread while holding the lock (a bug)
    /// does not cascade: the state is used as it is.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where a submit's tool task reports: this engine.
    fn host(self: &Arc<Self>) -> Host {
        Host {
            sink: Arc::clone(self) as Arc<dyn EventSink>,
            jobs: Arc::clone(self) as Arc<dyn JobHost>,
        }
    }

    pub(crate) fn blackholed(&self) -> bool {
        self.blackhole.load(Ordering::Acquire)
    }

    pub(crate) fn set_blackhole(&self, on: bool) {
        self.blackhole.store(on, Ordering::Release);
    }

    // ------------------------------------------------------------ transports

    /// Registers a new WebSocket connection; returns its id.
    pub(crate) fn register(&self, tx: mpsc::Sender<Out>, link: Arc<Link>) -> u64 {
        let mut st = self.lock();
        let id = st.conns.allocate(false);
        st.conns.insert(id, tx, link);
        id
    }

    pub(crate) fn set_abort(&self, conn: u64, abort: AbortHandle) {
        self.lock().conns.set_abort(conn, abort);
    }

    /// Forgets a connection whose task ended.
    pub(crate) fn unregister(&self, conn: u64) {
        let mut st = self.lock();
        st.detach(conn);
        st.conns.remove(conn);
    }

    /// Decides what the writer does with its next frame.
    pub(crate) fn outbound_action(&self, conn: u64) -> FrameAction {
        let mut st = self.lock();
        let State { conns, faults, .. } = &mut *st;
        let mut scratch = 0;
        let sent = conns
            .get_mut(conn)
            .map_or(&mut scratch, |c| &mut c.frames_sent);
        faults.on_frame(sent)
    }

    /// Heartbeat loss: close the connection with a close frame, as Python
    /// does.
    pub(crate) fn close_conn(&self, conn: u64) {
        self.lock().close(conn);
    }

    /// Closes a connection with a close frame carrying `code`.
    pub(crate) fn close_conn_with(&self, conn: u64, code: u16) {
        self.lock().end(conn, Out::Close(code));
    }

    /// Consumes a [`Fault::RefuseUpgrade`] for a WebSocket upgrade: the
    /// status and `Retry-After` to answer with instead.
    pub(crate) fn upgrade_refusal(&self) -> Option<(u16, Option<Duration>)> {
        let refusal = self
            .lock()
            .faults
            .take(|f| matches!(f, Fault::RefuseUpgrade { .. }));
        match refusal {
            Some(Fault::RefuseUpgrade {
                status,
                retry_after,
            }) => Some((status, retry_after)),
            _ => None,
        }
    }

    /// Sends a runtime `session.ping` on a connection.
    pub(crate) fn send_ping(&self, conn: u64) {
        self.lock().ping(conn);
    }

    /// A frame was written to a client: log it, and note a job terminal as
    /// delivered (unless the frame is a stray).
    pub(crate) fn written(&self, conn: u64, envelope: Envelope, frame: &Frame, stray: bool) {
        let mut st = self.lock();
        let terminal = matches!(
            frame.message,
            Message::Result(_) | Message::Error(_) | Message::Cancelled(_)
        );
        if terminal && !stray {
            if let Some(job_id) = frame.envelope.job_id.as_deref() {
                st.jobs.delivered(job_id);
            }
        }
        st.conns.log_sent(conn, envelope);
    }

    /// Handles one text frame from a WebSocket client, in the dialect's
    /// front-end. Every envelope is recorded, even black-holed.
    pub(crate) fn handle_text(self: &Arc<Self>, conn: u64, text: &str) {
        let host = self.host();
        let mut st = self.lock();
        let flavor = st.flavor;
        let envelope: Envelope = match serde_json::from_str(text) {
            Ok(envelope) => envelope,
            Err(e) => {
                if !self.blackholed() {
                    let why = format!("invalid envelope: {e}");
                    match flavor {
                        Flavor::V1_1 => v1_1::malformed(&mut st, conn, why),
                        Flavor::Legacy => legacy::malformed(&mut st, conn, why),
                    }
                }
                return;
            }
        };
        st.record(conn, envelope.clone());
        if self.blackholed() {
            return;
        }
        match flavor {
            Flavor::V1_1 => v1_1::receive(&mut st, &host, conn, envelope),
            Flavor::Legacy => legacy::receive(&mut st, &host, conn, envelope),
        }
    }

    /// One `POST` of the HTTP binding (`crate::http`): the checks of a v1.1
    /// frame and the shared submit, after the binding's own idempotency
    /// answers (409 while the key's job runs, the stored terminal once it
    /// finished, 422 for another intent). A fresh submit runs on a
    /// connection and session of its own, whose frames go to `tx`;
    /// [`Engine::http_done`] removes both when the response ends.
    pub(crate) fn http_submit(
        self: &Arc<Self>,
        auth: &Auth,
        header_key: Option<&str>,
        body: &str,
        tx: mpsc::Sender<Out>,
    ) -> (u64, HttpSubmit) {
        let host = self.host();
        let mut st = self.lock();
        st.http_requests += 1;
        let conn = st.conns.allocate(true);
        let blackholed = self.blackholed();
        let answer =
            v1_1::http_submit(&mut st, &host, blackholed, conn, auth, header_key, body, tx);
        (conn, answer)
    }

    /// Ends an HTTP submit's connection and session. Its job runs on; the
    /// terminal is stored for replay.
    pub(crate) fn http_done(&self, conn: u64) {
        let mut st = self.lock();
        if let Some(sid) = st.conns.remove(conn).and_then(|c| c.session) {
            st.sessions.remove(&sid);
        }
    }

    /// Drops every connection now, abruptly.
    pub(crate) fn kill_all(&self) {
        let handles: Vec<AbortHandle> = {
            let mut st = self.lock();
            st.conns
                .ids()
                .into_iter()
                .filter_map(|id| {
                    st.detach(id);
                    st.conns.abort(id)
                })
                .collect()
        };
        // Aborted outside the lock: a task dropped in place unregisters
        // itself, which takes the lock.
        for handle in handles {
            handle.abort();
        }
    }

    /// Aborts every task: connections and running tools.
    pub(crate) fn shutdown(&self) {
        let handles: Vec<AbortHandle> = {
            let st = self.lock();
            let mut handles = st.conns.abort_handles();
            handles.extend(st.jobs.abort_handles());
            handles
        };
        for handle in handles {
            handle.abort();
        }
    }

    // ----------------------------------------------------------- ground truth

    /// (WebSocket connections accepted, connections open now).
    pub(crate) fn counts(&self) -> (u64, u64) {
        self.lock().conns.counts()
    }

    pub(crate) fn http_requests(&self) -> u64 {
        self.lock().http_requests
    }

    pub(crate) fn executions(&self, tool: &str) -> u64 {
        self.lock().jobs.executions(tool)
    }

    pub(crate) fn executions_for_key(&self, key: &str) -> u64 {
        self.lock().jobs.executions_for_key(key)
    }

    pub(crate) fn total_executions(&self) -> u64 {
        self.lock().jobs.total_executions()
    }

    pub(crate) fn executions_by_key(&self) -> HashMap<String, u64> {
        self.lock().jobs.executions_by_key()
    }

    pub(crate) fn jobs(&self) -> Vec<JobRecord> {
        self.lock().jobs.records()
    }

    pub(crate) fn received(&self) -> Vec<Envelope> {
        self.lock().received()
    }

    pub(crate) fn connection_log(&self) -> Vec<ConnRecord> {
        self.lock().conns.log()
    }

    /// Registers an expectation (`scoped`: counting from now); returns its id.
    pub(crate) fn expect(&self, expectation: Expectation, scoped: bool) -> u64 {
        self.lock().expect(expectation, scoped)
    }

    pub(crate) fn verify(&self) -> Result<(), VerifyError> {
        self.lock().verify()
    }

    /// Checks expectation `id` alone; `remove` unregisters it.
    pub(crate) fn verify_one(&self, id: u64, remove: bool) -> Result<(), VerifyError> {
        self.lock().verify_one(id, remove)
    }

    /// Executions counted by expectation `id` so far.
    pub(crate) fn counted_by(&self, id: u64) -> u64 {
        self.lock().counted_by(id)
    }

    /// Queues a one-shot fault, or (`always`) a standing one, for every call
    /// or (`scope`) some.
    pub(crate) fn push_fault(&self, fault: Fault, scope: Option<FaultScope>, always: bool) {
        let mut st = self.lock();
        if always {
            st.faults.push_always(fault, scope);
        } else {
            st.faults.push(fault, scope);
        }
    }

    pub(crate) fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Registers (or replaces) a tool; submits from now on find it. Jobs
    /// already running keep the closure they started with.
    pub(crate) fn add_tool(&self, name: String, tool: ToolFn) {
        self.lock().tools.insert(name, tool);
    }

    /// Zeroes the execution counts, removes every expectation and fault,
    /// ends a black hole and empties the received log.
    pub(crate) fn reset(&self) {
        let mut st = self.lock();
        st.jobs.reset_counts();
        st.expectations.clear();
        st.faults.clear();
        st.clear_received();
        drop(st);
        self.set_blackhole(false);
    }
}

impl EventSink for Engine {
    fn event(&self, job_id: &str, kind: &str, body: Value) {
        self.lock().emit(job_id, kind, body);
    }

    fn progress(&self, job_id: &str, current: u64, total: u64) {
        let mut st = self.lock();
        let body = st.flavor.progress(current, total);
        st.emit(job_id, "progress", body);
    }

    fn result_chunk(&self, job_id: &str, data: String, more: bool) {
        self.lock().emit_chunk(job_id, data, more);
    }

    fn drop_connection(&self, job_id: &str) {
        self.lock().drop_job_connection(job_id);
    }
}

impl JobHost for Engine {
    fn ran(&self, job_id: &str) {
        self.lock().jobs.ran(job_id);
    }

    fn finish(&self, job_id: &str, outcome: Outcome) {
        self.lock().finish(job_id, outcome);
    }
}
