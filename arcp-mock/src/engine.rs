//! The runtime's state and protocol logic.
//!
//! Everything here is synchronous: a handler runs under the one state lock,
//! decides, and enqueues outbound frames on the bounded per-connection
//! channels; the connection tasks in `server` do the I/O. Every frame is built
//! as a [`Frame`] and encoded by the `arcp-types` codec of the configured
//! dialect, so the mock and the client share one definition of the wire.

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arcp_types::{
    canonical_json, format_rfc3339, is_message_id, now_rfc3339, Accepted, Auth, Cancel, Dialect,
    Envelope, ErrorCode, ErrorReply, Frame, Invoke, JobEvent, JobResult, Message, Object, Open,
    PeerInfo, Ping, Pong, Receipt, ResumeRequest, Subscribe, Welcome, PROTOCOL_VERSION,
};
use futures_util::FutureExt;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

use crate::config::{Config, ConflictSignal, ReplayPolicy};
use crate::fault::{Fault, Faults, FrameAction};
use crate::tool::{ToolContext, ToolFailure};
use crate::verify::{ConnRecord, Expectation, JobRecord, JobStatus, VerifyError};

/// Outbound frames queued per connection before it counts as a slow consumer
/// and is dropped.
pub(crate) const OUTBOUND_CAPACITY: usize = 4096;
/// Client envelopes kept for [`crate::MockRuntime::received`].
pub(crate) const MAX_RECEIVED: usize = 10_000;
/// v1.1 sessions kept; beyond this the longest-detached one is forgotten.
const MAX_SESSIONS: usize = 1024;
/// Finished jobs (and their idempotency bindings) kept for replay.
const MAX_FINISHED_JOBS: usize = 10_000;
/// Jobs running at once; more submits are refused with `RESOURCE_EXHAUSTED`.
const MAX_RUNNING_JOBS: usize = 1024;
/// Distinct idempotency keys counted by `executions_for_key`.
const MAX_KEY_COUNTERS: usize = 100_000;
/// Duplicates waiting for a running job's terminal (`TerminalOnly`).
const MAX_WAITERS: usize = 64;
/// Subscribers per job.
const MAX_SUBSCRIBERS: usize = 64;
/// Envelopes kept per connection and direction in the connection log.
pub(crate) const MAX_LOG_PER_CONN: usize = 10_000;
/// Connections kept in the connection log (oldest forgotten first).
const MAX_LOGGED_CONNS: usize = 1024;
/// Envelopes kept in the whole connection log (oldest connections forgotten
/// first).
const MAX_LOGGED_TOTAL: usize = 200_000;

/// What a connection task is asked to do.
pub(crate) enum Out {
    /// Encode and send a frame.
    Frame(Box<Frame>),
    /// Encode and send a stray frame (never counted as a delivery).
    Stray(Box<Frame>),
    /// Send a close frame with this code and end the connection.
    Close(u16),
    /// End the connection abruptly: no close frame.
    Kill,
}

/// What the HTTP binding answers one `POST` with (see `crate::http`).
pub(crate) enum HttpSubmit {
    /// Not one valid `job.submit` envelope (400), and why.
    BadRequest(String),
    /// The credentials were refused (401).
    Unauthenticated(String),
    /// The key is bound to a different intent (422).
    Conflict(String),
    /// The key's job is still running (409).
    InFlight,
    /// The key's job finished: its stored terminal, replayed.
    Replay(Box<Frame>),
    /// Submitted on this connection; its frames arrive on the channel.
    Started(u64),
    /// Black-holed: recorded, never answered.
    Ignored,
}

/// Per-connection state shared with its task.
pub(crate) struct Link {
    /// When the client last sent anything.
    pub last_inbound: Mutex<Instant>,
    /// The negotiated heartbeat interval, set on welcome.
    pub heartbeat: watch::Sender<Option<Duration>>,
}

impl Link {
    pub fn new() -> Self {
        Link {
            last_inbound: Mutex::new(Instant::now()),
            heartbeat: watch::Sender::new(None),
        }
    }

    pub fn touch(&self) {
        *self.last_inbound.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    pub fn last_inbound(&self) -> Instant {
        *self.last_inbound.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Everything the runtime shares between its tasks.
pub(crate) struct Shared {
    pub cfg: Config,
    state: Mutex<State>,
    blackhole: AtomicBool,
}

struct Conn {
    tx: mpsc::Sender<Out>,
    abort: Option<AbortHandle>,
    link: Arc<Link>,
    session: Option<String>,
    principal: Option<String>,
    /// False once a drop or close is queued: nothing more is sent.
    live: bool,
    frames_sent: u64,
}

struct Session {
    principal: String,
    token: String,
    conn: Option<u64>,
    next_seq: u64,
    /// Sequenced envelopes for resume (v1.1), oldest first.
    buffer: VecDeque<Frame>,
    /// Highest sequence evicted for lack of room (not trimmed by an ack).
    evicted_upto: u64,
    detached_at: Option<Instant>,
}

enum JobState {
    Running { abort: Option<AbortHandle> },
    Done { terminal: Box<Frame> },
}

struct Job {
    id: String,
    tool: String,
    session: String,
    origin_conn: u64,
    principal: String,
    request_id: String,
    key: Option<String>,
    /// The original `job.accepted`, re-sent verbatim by v1.1 replays.
    accepted: Frame,
    state: JobState,
    /// Duplicates waiting for the terminal: (connection, request id, key).
    waiters: Vec<(u64, String, String)>,
    /// Streamed-result id and next chunk number.
    chunks: Option<(String, u64)>,
    /// The arguments it runs with.
    arguments: Value,
    /// Times the tool closure was called.
    executions: u64,
    /// Whether the terminal was ever written to a client.
    terminal_delivered: bool,
    /// The job's events, oldest first (bounded like a resume buffer), for
    /// `job.subscribe` with history.
    history: VecDeque<Frame>,
    /// Subscribed connections (v1.1) and their sessions.
    subscribers: Vec<(u64, String)>,
}

impl Job {
    fn is_running(&self) -> bool {
        matches!(self.state, JobState::Running { .. })
    }
}

/// What identifies "the same intent" for an idempotency key.
enum Fingerprint {
    /// Python: the whole `job.submit` payload, compared as Python compares
    /// dicts (key order ignored, `1 == 1.0`).
    Payload(Value),
    /// Rust: tool name + `serde_json::to_string(arguments)` with sorted keys
    /// (`1` and `1.0` differ).
    Text(String),
}

impl Fingerprint {
    fn matches(&self, other: &Fingerprint) -> bool {
        match (self, other) {
            (Fingerprint::Payload(a), Fingerprint::Payload(b)) => python_eq(a, b),
            (Fingerprint::Text(a), Fingerprint::Text(b)) => a == b,
            _ => false,
        }
    }
}

struct Binding {
    fingerprint: Fingerprint,
    job_id: String,
}

/// How a tool execution ended.
pub(crate) enum Outcome {
    Done(Result<Value, ToolFailure>),
    Panicked,
    Cancelled,
}

pub(crate) struct State {
    legacy: bool,
    conns: HashMap<u64, Conn>,
    next_conn: u64,
    connections_total: u64,
    sessions: HashMap<String, Session>,
    jobs: HashMap<String, Job>,
    finished: VecDeque<String>,
    running: usize,
    bindings: HashMap<(String, String), Binding>,
    exec_tool: HashMap<String, u64>,
    exec_key: HashMap<String, u64>,
    exec_total: u64,
    received: VecDeque<Envelope>,
    /// Requests received by the HTTP binding.
    http_requests: u64,
    pub faults: Faults,
    pub expectations: Vec<Expectation>,
    log: ConnLog,
}

/// The per-connection log behind [`crate::MockRuntime::connection_log`]:
/// bounded per connection, in connections, and in total.
#[derive(Default)]
struct ConnLog {
    records: VecDeque<LogEntry>,
    total: usize,
}

struct LogEntry {
    id: u64,
    http: bool,
    received: VecDeque<Envelope>,
    sent: VecDeque<Envelope>,
}

impl ConnLog {
    fn open(&mut self, id: u64, http: bool) {
        self.records.push_back(LogEntry {
            id,
            http,
            received: VecDeque::new(),
            sent: VecDeque::new(),
        });
        self.trim();
    }

    fn push(&mut self, id: u64, envelope: Envelope, sent: bool) {
        let Ok(i) = self.records.binary_search_by_key(&id, |r| r.id) else {
            return;
        };
        let entry = &mut self.records[i];
        let list = if sent {
            &mut entry.sent
        } else {
            &mut entry.received
        };
        list.push_back(envelope);
        self.total += 1;
        if list.len() > MAX_LOG_PER_CONN {
            list.pop_front();
            self.total -= 1;
        }
        self.trim();
    }

    fn trim(&mut self) {
        while self.records.len() > MAX_LOGGED_CONNS
            || (self.total > MAX_LOGGED_TOTAL && self.records.len() > 1)
        {
            if let Some(old) = self.records.pop_front() {
                self.total -= old.received.len() + old.sent.len();
            }
        }
    }

    fn snapshot(&self) -> Vec<ConnRecord> {
        self.records
            .iter()
            .map(|r| ConnRecord {
                id: r.id,
                http: r.http,
                received: r.received.iter().cloned().collect(),
                sent: r.sent.iter().cloned().collect(),
            })
            .collect()
    }
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", ulid::Ulid::new())
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// Python's `==` on decoded JSON: key order never matters and numbers compare
/// by value, so `1 == 1.0`.
fn python_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let int = |n: &serde_json::Number| {
                n.as_i64()
                    .map(i128::from)
                    .or_else(|| n.as_u64().map(i128::from))
            };
            match (int(x), int(y)) {
                (Some(p), Some(q)) => p == q,
                _ => x.as_f64() == y.as_f64(),
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| python_eq(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| python_eq(v, w))
        }
        _ => a == b,
    }
}

fn session_error(code: ErrorCode, message: impl Into<String>) -> ErrorReply {
    ErrorReply {
        code,
        message: message.into(),
        retryable: Some(false),
        details: Some(Value::Null),
        request_id: None,
        extra: Object::new(),
    }
}

fn error_reply(
    code: ErrorCode,
    message: impl Into<String>,
    retryable: bool,
    request_id: Option<&str>,
) -> ErrorReply {
    ErrorReply {
        code,
        message: message.into(),
        retryable: Some(retryable),
        details: None,
        request_id: request_id.map(str::to_owned),
        extra: Object::new(),
    }
}

fn object(value: Value) -> Object {
    match value {
        Value::Object(map) => map,
        _ => Object::new(),
    }
}

impl Shared {
    pub fn new(cfg: Config) -> Self {
        let legacy = cfg.dialect == Dialect::Legacy;
        Shared {
            cfg,
            state: Mutex::new(State {
                legacy,
                conns: HashMap::new(),
                next_conn: 0,
                connections_total: 0,
                sessions: HashMap::new(),
                jobs: HashMap::new(),
                finished: VecDeque::new(),
                running: 0,
                bindings: HashMap::new(),
                exec_tool: HashMap::new(),
                exec_key: HashMap::new(),
                exec_total: 0,
                received: VecDeque::new(),
                http_requests: 0,
                faults: Faults::default(),
                expectations: Vec::new(),
                log: ConnLog::default(),
            }),
            blackhole: AtomicBool::new(false),
        }
    }

    /// The state. A panic in another thread while holding the lock (a bug)
    /// does not cascade: the state is used as it is.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_legacy(&self) -> bool {
        self.cfg.dialect == Dialect::Legacy
    }

    pub fn blackholed(&self) -> bool {
        self.blackhole.load(Ordering::Acquire)
    }

    pub fn set_blackhole(&self, on: bool) {
        self.blackhole.store(on, Ordering::Release);
    }

    /// Registers a new connection; returns its id.
    pub fn register(&self, tx: mpsc::Sender<Out>, link: Arc<Link>) -> u64 {
        let mut st = self.lock();
        st.next_conn += 1;
        st.connections_total += 1;
        let id = st.next_conn;
        st.log.open(id, false);
        st.conns.insert(
            id,
            Conn {
                tx,
                abort: None,
                link,
                session: None,
                principal: None,
                live: true,
                frames_sent: 0,
            },
        );
        id
    }

    pub fn set_abort(&self, conn: u64, abort: AbortHandle) {
        if let Some(c) = self.lock().conns.get_mut(&conn) {
            c.abort = Some(abort);
        }
    }

    /// Forgets a connection whose task ended.
    pub fn unregister(&self, conn: u64) {
        let mut st = self.lock();
        st.detach(conn);
        st.conns.remove(&conn);
    }

    /// Decides what the writer does with its next frame.
    pub fn outbound_action(&self, conn: u64) -> FrameAction {
        let mut st = self.lock();
        let State { conns, faults, .. } = &mut *st;
        let mut scratch = 0;
        let sent = conns
            .get_mut(&conn)
            .map_or(&mut scratch, |c| &mut c.frames_sent);
        faults.on_frame(sent)
    }

    /// Heartbeat loss: close the connection with a close frame, as Python does.
    pub fn close_conn(&self, conn: u64) {
        self.lock().close(conn);
    }

    /// Closes a connection with a close frame carrying `code`.
    pub fn close_conn_with(&self, conn: u64, code: u16) {
        self.lock().enqueue_end(conn, Out::Close(code));
    }

    /// Consumes a [`Fault::RefuseUpgrade`] for a WebSocket upgrade: the
    /// status and `Retry-After` to answer with instead.
    pub fn upgrade_refusal(&self) -> Option<(u16, Option<Duration>)> {
        match self
            .lock()
            .faults
            .take(|f| matches!(f, Fault::RefuseUpgrade { .. }))
        {
            Some(Fault::RefuseUpgrade {
                status,
                retry_after,
            }) => Some((status, retry_after)),
            _ => None,
        }
    }

    /// Sends a `session.ping` on a connection.
    pub fn send_ping(&self, conn: u64) {
        let mut st = self.lock();
        let ping = Message::Ping(Ping {
            nonce: ulid::Ulid::new().to_string(),
            sent_at: Some(now_rfc3339()),
            extra: Object::new(),
        });
        let frame = st.reply(conn, ping);
        st.send(conn, frame);
    }

    /// A job event from a running tool.
    pub fn emit_event(&self, job_id: &str, kind: &str, body: Value) {
        let mut st = self.lock();
        st.emit(&self.cfg, job_id, kind, body);
    }

    /// One streamed result chunk from a running tool.
    pub fn emit_chunk(&self, job_id: &str, data: String, more: bool) {
        let mut st = self.lock();
        let Some(job) = st.jobs.get_mut(job_id).filter(|j| j.is_running()) else {
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
        st.emit(&self.cfg, job_id, "result_chunk", body);
    }

    /// A tool finished (or panicked).
    pub fn finish(&self, job_id: &str, outcome: Outcome) {
        self.lock().finish(&self.cfg, job_id, outcome);
    }

    /// A tool closure is being called for `job_id`.
    pub fn ran(&self, job_id: &str) {
        if let Some(job) = self.lock().jobs.get_mut(job_id) {
            job.executions += 1;
        }
    }

    /// A frame was written to a client: log it, and note a job terminal as
    /// delivered (unless the frame is a stray).
    pub fn written(&self, conn: u64, envelope: Envelope, frame: &Frame, stray: bool) {
        let mut st = self.lock();
        let terminal = matches!(
            frame.message,
            Message::Result(_) | Message::Error(_) | Message::Cancelled(_)
        );
        if terminal && !stray {
            if let Some(job) = frame
                .envelope
                .job_id
                .as_deref()
                .and_then(|id| st.jobs.get_mut(id))
                .filter(|j| !j.is_running())
            {
                job.terminal_delivered = true;
            }
        }
        st.log.push(conn, envelope, true);
    }

    /// Handles one text frame from a client.
    pub fn handle_text(self: &Arc<Self>, conn: u64, text: &str) {
        let cfg = &self.cfg;
        let legacy = self.is_legacy();
        let mut st = self.lock();
        let envelope: Envelope = match serde_json::from_str(text) {
            Ok(envelope) => envelope,
            Err(e) => {
                if self.blackholed() {
                } else if legacy {
                    st.unparseable(cfg, conn, None, &format!("invalid envelope: {e}"));
                } else {
                    st.invalid(conn, format!("invalid envelope: {e}"));
                }
                return;
            }
        };
        st.record(conn, envelope.clone());
        if self.blackholed() {
            return;
        }
        if legacy {
            if !envelope.id.starts_with("msg_") {
                st.unparseable(
                    cfg,
                    conn,
                    Some(&envelope.id),
                    "envelope id must start with msg_",
                );
                return;
            }
        } else if envelope.arcp != PROTOCOL_VERSION {
            let msg = format!("arcp must be '{PROTOCOL_VERSION}', got '{}'", envelope.arcp);
            st.invalid(conn, msg);
            return;
        } else if !is_message_id(&envelope.id, false) {
            let msg = format!("id must be a ULID or UUIDv7, got '{}'", envelope.id);
            st.invalid(conn, msg);
            return;
        }
        let kind = envelope.kind.clone();
        let kind_id = envelope.id.clone();
        let frame = match cfg.dialect.decode_envelope(envelope) {
            Ok(frame) => frame,
            Err(e) => {
                if legacy {
                    st.unparseable(cfg, conn, Some(&kind_id), &e.to_string());
                } else {
                    st.invalid(conn, e.to_string());
                }
                return;
            }
        };
        if legacy {
            st.dispatch_legacy(self, conn, frame);
        } else {
            st.dispatch_v1_1(self, conn, &kind, frame);
        }
    }

    /// One `POST` of the HTTP binding (`crate::http`): the same checks and
    /// submit path as a v1.1 frame on a WebSocket, after the binding's own
    /// idempotency answers (409 while the key's job runs, the stored
    /// terminal once it finished, 422 for another intent). A fresh submit
    /// runs on a connection and session of its own, whose frames go to `tx`;
    /// [`Shared::http_done`] removes both when the response ends.
    pub fn http_submit(
        self: &Arc<Self>,
        auth: &Auth,
        header_key: Option<&str>,
        body: &str,
        tx: mpsc::Sender<Out>,
    ) -> (u64, HttpSubmit) {
        let mut st = self.lock();
        st.http_requests += 1;
        st.next_conn += 1;
        let conn = st.next_conn;
        st.log.open(conn, true);
        let answer = self.http_answer(&mut st, conn, auth, header_key, body, tx);
        (conn, answer)
    }

    fn http_answer(
        self: &Arc<Self>,
        st: &mut State,
        conn: u64,
        auth: &Auth,
        header_key: Option<&str>,
        body: &str,
        tx: mpsc::Sender<Out>,
    ) -> HttpSubmit {
        let cfg = &self.cfg;
        let envelope: Envelope = match serde_json::from_str(body) {
            Ok(envelope) => envelope,
            Err(e) => return HttpSubmit::BadRequest(format!("invalid envelope: {e}")),
        };
        st.record(conn, envelope.clone());
        if self.blackholed() {
            return HttpSubmit::Ignored;
        }
        if envelope.arcp != PROTOCOL_VERSION {
            let msg = format!("arcp must be '{PROTOCOL_VERSION}', got '{}'", envelope.arcp);
            return HttpSubmit::BadRequest(msg);
        }
        if !is_message_id(&envelope.id, false) {
            let msg = format!("id must be a ULID or UUIDv7, got '{}'", envelope.id);
            return HttpSubmit::BadRequest(msg);
        }
        let kind = envelope.kind.clone();
        let Frame { envelope, message } = match Dialect::V1_1.decode_envelope(envelope) {
            Ok(frame) => frame,
            Err(e) => return HttpSubmit::BadRequest(e.to_string()),
        };
        let Message::Invoke(mut invoke) = message else {
            return HttpSubmit::BadRequest(format!(
                "the HTTP binding takes one job.submit envelope per request, got '{kind}'"
            ));
        };
        match (header_key, invoke.idempotency_key.as_deref()) {
            (Some(header), Some(payload)) if header != payload => {
                return HttpSubmit::BadRequest(
                    "the Idempotency-Key header and the payload's idempotency_key differ".into(),
                )
            }
            (Some(header), None) => invoke.idempotency_key = Some(header.to_owned()),
            _ => {}
        }
        let principal = match st.authenticate(cfg, auth) {
            Ok(principal) => principal,
            Err(message) => return HttpSubmit::Unauthenticated(message.to_owned()),
        };
        if let Some(key) = invoke.idempotency_key.clone() {
            let fingerprint = st.fingerprint(&invoke);
            let scope = (principal.clone(), key.clone());
            if let Some(binding) = st.bindings.get(&scope) {
                if !binding.fingerprint.matches(&fingerprint)
                    && cfg.conflict != ConflictSignal::Ignored
                {
                    return HttpSubmit::Conflict(format!(
                        "idempotency key '{key}' already used with different parameters"
                    ));
                }
                match st.jobs.get(&binding.job_id).map(|job| &job.state) {
                    Some(JobState::Running { .. }) => return HttpSubmit::InFlight,
                    Some(JobState::Done { terminal }) => {
                        return HttpSubmit::Replay(terminal.clone())
                    }
                    None => {
                        st.bindings.remove(&scope);
                    }
                }
            }
        }
        st.open_http(conn, tx, principal);
        st.on_submit(self, conn, &envelope, invoke);
        HttpSubmit::Started(conn)
    }

    /// Ends an HTTP submit's connection and session. Its job runs on; the
    /// terminal is stored for replay.
    pub fn http_done(&self, conn: u64) {
        let mut st = self.lock();
        if let Some(c) = st.conns.remove(&conn) {
            if let Some(sid) = c.session {
                st.sessions.remove(&sid);
            }
        }
    }

    pub fn counts(&self) -> (u64, u64) {
        let st = self.lock();
        (
            st.connections_total,
            st.conns.values().filter(|c| c.live).count() as u64,
        )
    }

    /// Drops every connection now, abruptly.
    pub fn kill_all(&self) {
        let handles: Vec<AbortHandle> = {
            let mut st = self.lock();
            let ids: Vec<u64> = st.conns.keys().copied().collect();
            ids.into_iter()
                .filter_map(|id| {
                    st.detach(id);
                    let conn = st.conns.get_mut(&id)?;
                    conn.live = false;
                    conn.abort.clone()
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
    pub fn shutdown(&self) {
        let handles: Vec<AbortHandle> = {
            let st = self.lock();
            let conns = st.conns.values().filter_map(|c| c.abort.clone());
            let jobs = st.jobs.values().filter_map(|j| match &j.state {
                JobState::Running { abort } => abort.clone(),
                JobState::Done { .. } => None,
            });
            conns.chain(jobs).collect()
        };
        for handle in handles {
            handle.abort();
        }
    }
}

impl State {
    // ---------------------------------------------------------------- counters

    pub fn http_requests(&self) -> u64 {
        self.http_requests
    }

    pub fn executions(&self, tool: &str) -> u64 {
        self.exec_tool.get(tool).copied().unwrap_or(0)
    }

    pub fn executions_for_key(&self, key: &str) -> u64 {
        self.exec_key.get(key).copied().unwrap_or(0)
    }

    pub fn total_executions(&self) -> u64 {
        self.exec_total
    }

    pub fn received(&self) -> Vec<Envelope> {
        self.received.iter().cloned().collect()
    }

    pub fn verify(&self) -> Result<(), VerifyError> {
        let failures: Vec<String> = self
            .expectations
            .iter()
            .filter_map(|e| {
                let actual = match e {
                    Expectation::Tool { tool, .. } => self.executions(tool),
                    Expectation::Key { key, .. } => self.executions_for_key(key),
                    Expectation::Total { .. } => self.exec_total,
                };
                e.check(actual)
            })
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(VerifyError::new(self.expectations.len(), failures))
        }
    }

    fn record(&mut self, conn: u64, envelope: Envelope) {
        if self.received.len() >= MAX_RECEIVED {
            self.received.pop_front();
        }
        self.log.push(conn, envelope.clone(), false);
        self.received.push_back(envelope);
    }

    pub fn connection_log(&self) -> Vec<ConnRecord> {
        self.log.snapshot()
    }

    pub fn executions_by_key(&self) -> HashMap<String, u64> {
        self.exec_key.clone()
    }

    pub fn jobs(&self) -> Vec<JobRecord> {
        let mut jobs: Vec<JobRecord> = self
            .jobs
            .values()
            .map(|j| JobRecord {
                job_id: j.id.clone(),
                idempotency_key: j.key.clone(),
                tool: j.tool.clone(),
                arguments: j.arguments.clone(),
                principal: j.principal.clone(),
                executions: j.executions,
                status: match &j.state {
                    JobState::Running { .. } => JobStatus::Running,
                    JobState::Done { terminal } => match terminal.message {
                        Message::Result(_) => JobStatus::Completed,
                        Message::Cancelled(_) => JobStatus::Cancelled,
                        _ => JobStatus::Failed,
                    },
                },
                terminal_delivered: j.terminal_delivered,
            })
            .collect();
        // Job ids are ULIDs: sorting by id is sorting by creation.
        jobs.sort_by(|a, b| a.job_id.cmp(&b.job_id));
        jobs
    }

    // ------------------------------------------------------------- connections

    fn is_live(&self, conn: u64) -> bool {
        self.conns.get(&conn).is_some_and(|c| c.live)
    }

    fn conn_session(&self, conn: u64) -> Option<String> {
        self.conns.get(&conn).and_then(|c| c.session.clone())
    }

    fn conn_principal(&self, conn: u64) -> String {
        self.conns
            .get(&conn)
            .and_then(|c| c.principal.clone())
            .unwrap_or_default()
    }

    /// Enqueues a frame on a live connection. A connection whose queue is full
    /// is a slow consumer: it is dropped.
    fn send(&mut self, conn: u64, frame: Frame) -> bool {
        let Some(c) = self.conns.get(&conn).filter(|c| c.live) else {
            return false;
        };
        match c.tx.try_send(Out::Frame(Box::new(frame))) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(conn, "arcp-mock: client is not reading; dropping it");
                self.abort(conn);
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    fn enqueue_end(&mut self, conn: u64, out: Out) {
        self.detach(conn);
        if let Some(c) = self.conns.get_mut(&conn) {
            if c.live {
                c.live = false;
                if c.tx.try_send(out).is_err() {
                    if let Some(abort) = &c.abort {
                        abort.abort();
                    }
                }
            }
        }
    }

    /// Drops the connection abruptly once the frames queued so far are sent.
    fn kill(&mut self, conn: u64) {
        self.enqueue_end(conn, Out::Kill);
    }

    /// Closes the connection (close frame 1000) once queued frames are sent.
    fn close(&mut self, conn: u64) {
        self.enqueue_end(conn, Out::Close(1000));
    }

    /// Legacy: a frame the runtime cannot parse. Rust 2.0.0 drops the TCP
    /// connection; with the knob off, `nack INVALID_ARGUMENT`.
    fn unparseable(&mut self, cfg: &Config, conn: u64, id: Option<&str>, why: &str) {
        if cfg.drop_on_unparseable {
            self.kill(conn);
            return;
        }
        let mut nack = error_reply(ErrorCode::InvalidArgument, why, false, id);
        nack.retryable = None;
        let mut frame = self.reply(conn, Message::Nack(nack));
        frame.envelope.correlation_id = id.map(str::to_owned);
        self.send(conn, frame);
    }

    /// Drops the connection now, discarding queued frames.
    fn abort(&mut self, conn: u64) {
        self.detach(conn);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.live = false;
            if let Some(abort) = &c.abort {
                abort.abort();
            }
        }
    }

    /// Unbinds a connection from its session: v1.1 sessions wait for a
    /// resume; legacy sessions end with their connection.
    fn detach(&mut self, conn: u64) {
        let Some(sid) = self.conns.get(&conn).and_then(|c| c.session.clone()) else {
            return;
        };
        if self.legacy {
            self.sessions.remove(&sid);
        } else if let Some(s) = self.sessions.get_mut(&sid) {
            if s.conn == Some(conn) {
                s.conn = None;
                s.detached_at = Some(Instant::now());
            }
        }
    }

    // ---------------------------------------------------------------- framing

    fn frame(&self, message: Message) -> Frame {
        let mut frame = Frame::new(message);
        if !self.legacy {
            // The Python runtime sends no envelope timestamp.
            frame.envelope.timestamp = None;
        }
        frame
    }

    /// A frame for a connection, carrying its session id.
    fn reply(&self, conn: u64, message: Message) -> Frame {
        let mut frame = self.frame(message);
        frame.envelope.session_id = self.conn_session(conn);
        frame
    }

    /// A frame about a job: session, job and (legacy) the request it answers.
    fn job_frame(&self, job: &Job, message: Message) -> Frame {
        let mut frame = self.frame(message);
        frame.envelope.session_id = Some(job.session.clone());
        frame.envelope.job_id = Some(job.id.clone());
        if self.legacy {
            frame.envelope.correlation_id = Some(job.request_id.clone());
        }
        frame
    }

    fn next_seq(&mut self, session: &str) -> Option<u64> {
        let s = self.sessions.get_mut(session)?;
        let seq = s.next_seq;
        s.next_seq += 1;
        Some(seq)
    }

    /// Legacy: every job-related reply is sequenced on its session, like the
    /// Rust runtime's writer does.
    fn stamp_legacy(&mut self, conn: u64, frame: &mut Frame) {
        if self.legacy {
            if let Some(sid) = self.conn_session(conn) {
                frame.envelope.event_seq = self.next_seq(&sid);
            }
        }
    }

    fn buffer(&mut self, cfg: &Config, session: &str, frame: Frame) {
        if let Some(s) = self.sessions.get_mut(session) {
            s.buffer.push_back(frame);
            while s.buffer.len() > cfg.resume_buffer {
                if let Some(old) = s.buffer.pop_front() {
                    s.evicted_upto = s.evicted_upto.max(old.envelope.event_seq.unwrap_or(0));
                }
            }
        }
    }

    /// `session.error INVALID_REQUEST` (v1.1).
    fn invalid(&mut self, conn: u64, message: impl Into<String>) {
        let frame = self.reply(
            conn,
            Message::SessionError(session_error(ErrorCode::InvalidRequest, message)),
        );
        self.send(conn, frame);
    }

    /// A refused handshake (v1.1): `session.error`, then close.
    fn refuse(&mut self, conn: u64, code: ErrorCode, message: String) {
        let frame = self.reply(conn, Message::SessionError(session_error(code, message)));
        self.send(conn, frame);
        self.close(conn);
    }

    // ---------------------------------------------------------------- routing

    /// Delivers a job event or terminal: to its submitter (see
    /// [`Self::route_origin`]), then to its subscribers. Returns the
    /// connection the submitter's copy was sent to, and that copy.
    fn route(
        &mut self,
        cfg: &Config,
        job_id: &str,
        frame: Frame,
        terminal: bool,
    ) -> Option<(u64, Frame)> {
        let (target, stamped) = self.route_origin(cfg, job_id, frame.clone(), terminal)?;
        let job = self.jobs.get_mut(job_id)?;
        if !terminal {
            job.history.push_back(stamped.clone());
            while job.history.len() > cfg.resume_buffer {
                job.history.pop_front();
            }
        }
        let subscribers = job.subscribers.clone();
        for (conn, sid) in subscribers {
            if target != Some(conn) {
                self.deliver_to(cfg, conn, &sid, frame.clone());
            }
        }
        target.map(|conn| (conn, stamped))
    }

    /// Sends a job frame to a subscriber: on its own session (as the Rust
    /// runtime's subscriber frames are), sequenced and buffered there.
    fn deliver_to(&mut self, cfg: &Config, conn: u64, sid: &str, mut frame: Frame) {
        if !self.is_live(conn) {
            return;
        }
        frame.envelope.session_id = Some(sid.to_owned());
        frame.envelope.event_seq = self.next_seq(sid);
        self.buffer(cfg, sid, frame.clone());
        self.send(conn, frame);
    }

    /// Delivers a job frame to its submitter: v1.1 to the session
    /// (sequenced, buffered for resume, sent to the attached connection);
    /// legacy to the submitting connection only, discarded once it is gone.
    /// Returns the connection it was sent to and the frame as stamped.
    fn route_origin(
        &mut self,
        cfg: &Config,
        job_id: &str,
        mut frame: Frame,
        terminal: bool,
    ) -> Option<(Option<u64>, Frame)> {
        let job = self.jobs.get(job_id)?;
        let origin = job.origin_conn;
        let sid = job.session.clone();
        if self.legacy {
            if !self.is_live(origin) {
                return Some((None, frame));
            }
            if terminal
                && self
                    .faults
                    .take(|f| matches!(f, Fault::DropBeforeTerminal))
                    .is_some()
            {
                self.kill(origin);
                return Some((None, frame));
            }
            frame.envelope.event_seq = self.next_seq(&sid);
            self.send(origin, frame.clone());
            return Some((Some(origin), frame));
        }
        let Some(session) = self.sessions.get(&sid) else {
            return Some((None, frame));
        };
        let mut target = session.conn.filter(|&c| self.is_live(c));
        if !cfg.reattach && target != Some(origin) {
            // Python 1.1.3: events of a job whose connection dropped are lost.
            return Some((None, frame));
        }
        if terminal && target.is_some() {
            if let Some(conn) = target.filter(|_| {
                self.faults
                    .take(|f| matches!(f, Fault::DropBeforeTerminal))
                    .is_some()
            }) {
                self.kill(conn);
                target = None;
                if !cfg.reattach {
                    return Some((None, frame));
                }
            }
        }
        frame.envelope.event_seq = self.next_seq(&sid);
        self.buffer(cfg, &sid, frame.clone());
        if let Some(conn) = target {
            self.send(conn, frame.clone());
        }
        Some((target, frame))
    }

    /// [`Fault::StrayFrames`]: after a terminal went out on `conn`, a
    /// duplicate of it, a late event for its job, and a terminal for a job
    /// and a request that never existed.
    fn after_terminal(&mut self, conn: u64, terminal: &Frame) {
        if self
            .faults
            .take(|f| matches!(f, Fault::StrayFrames))
            .is_none()
        {
            return;
        }
        self.send_stray(conn, terminal.clone());
        let event = JobEvent {
            kind: "log".into(),
            ts: (!self.legacy).then(now_rfc3339),
            body: json!({"level": "warn", "message": "stray event after the terminal"}),
            extra: Object::new(),
        };
        let mut late = self.frame(Message::Event(event));
        late.envelope.session_id = terminal.envelope.session_id.clone();
        late.envelope.job_id = terminal.envelope.job_id.clone();
        late.envelope.correlation_id = terminal.envelope.correlation_id.clone();
        if let Some(sid) = self.conn_session(conn) {
            late.envelope.event_seq = self.next_seq(&sid);
        }
        self.send_stray(conn, late);
        let ghost_request = if self.legacy {
            format!("msg_{}", ulid::Ulid::new())
        } else {
            ulid::Ulid::new().to_string()
        };
        let code = if self.legacy {
            ErrorCode::Internal
        } else {
            ErrorCode::InternalError
        };
        let failure = ToolFailure::new(code, "stray terminal").retryable(false);
        let mut message = terminal_message(self.legacy, Outcome::Done(Err(failure)), None);
        if let Message::Error(e) = &mut message {
            e.request_id = Some(ghost_request.clone());
        }
        let mut ghost = self.reply(conn, message);
        ghost.envelope.job_id = Some(new_id("job"));
        if self.legacy {
            ghost.envelope.correlation_id = Some(ghost_request);
        }
        if let Some(sid) = self.conn_session(conn) {
            ghost.envelope.event_seq = self.next_seq(&sid);
        }
        self.send_stray(conn, ghost);
    }

    fn send_stray(&mut self, conn: u64, frame: Frame) {
        if let Some(c) = self.conns.get(&conn).filter(|c| c.live) {
            let _ = c.tx.try_send(Out::Stray(Box::new(frame)));
        }
    }

    fn emit(&mut self, cfg: &Config, job_id: &str, kind: &str, body: Value) {
        let Some(job) = self.jobs.get(job_id).filter(|j| j.is_running()) else {
            return;
        };
        let event = JobEvent {
            kind: kind.to_owned(),
            ts: (!self.legacy).then(now_rfc3339),
            body,
            extra: Object::new(),
        };
        let frame = self.job_frame(job, Message::Event(event));
        self.route(cfg, job_id, frame, false);
    }

    fn finish(&mut self, cfg: &Config, job_id: &str, outcome: Outcome) {
        let legacy = self.legacy;
        let Some(job) = self.jobs.get_mut(job_id) else {
            return;
        };
        let JobState::Running { abort } = &job.state else {
            return;
        };
        if matches!(outcome, Outcome::Cancelled) {
            if let Some(abort) = abort {
                abort.abort();
            }
        }
        let result_id = job.chunks.as_ref().map(|(id, _)| id.clone());
        let waiters = std::mem::take(&mut job.waiters);
        let message = terminal_message(legacy, outcome, result_id);
        let job = &self.jobs[job_id];
        let frame = self.job_frame(job, message);
        if let Some(job) = self.jobs.get_mut(job_id) {
            job.state = JobState::Done {
                terminal: Box::new(frame.clone()),
            };
        }
        self.running = self.running.saturating_sub(1);
        self.finished.push_back(job_id.to_owned());
        if let Some((conn, sent)) = self.route(cfg, job_id, frame.clone(), true) {
            self.after_terminal(conn, &sent);
        }
        for (conn, request_id, key) in waiters {
            self.replay_terminal(cfg, conn, &request_id, &key, frame.clone(), true);
        }
        self.evict_finished();
    }

    fn evict_finished(&mut self) {
        while self.finished.len() > MAX_FINISHED_JOBS {
            let Some(id) = self.finished.pop_front() else {
                break;
            };
            if let Some(job) = self.jobs.remove(&id) {
                if let Some(key) = job.key {
                    let scope = (job.principal, key);
                    if self.bindings.get(&scope).is_some_and(|b| b.job_id == id) {
                        self.bindings.remove(&scope);
                    }
                }
            }
        }
    }

    fn cancel_job(&mut self, cfg: &Config, job_id: &str) {
        self.finish(cfg, job_id, Outcome::Cancelled);
    }

    // ------------------------------------------------------------ v1.1 inbound

    fn dispatch_v1_1(&mut self, shared: &Arc<Shared>, conn: u64, kind: &str, frame: Frame) {
        let cfg = &shared.cfg;
        let Frame { envelope, message } = frame;
        if let Message::Open(open) = message {
            self.on_hello(cfg, conn, open);
            return;
        }
        if self.conn_session(conn).is_none() {
            self.invalid(conn, "no session: send session.hello first");
            return;
        }
        match message {
            Message::Ping(ping) => self.on_ping(conn, &envelope, ping),
            Message::Pong(_) => {}
            Message::Ack(ack) => self.on_ack(conn, ack.last_processed_seq),
            Message::Close(_) => self.close(conn),
            Message::ListJobs(_) => self.on_list_jobs(conn, &envelope),
            Message::Invoke(invoke) => self.on_submit(shared, conn, &envelope, invoke),
            Message::Cancel(cancel) => self.on_cancel(cfg, conn, &envelope, cancel),
            Message::Subscribe(sub) if cfg.subscribe => {
                self.on_subscribe(cfg, conn, &envelope, sub)
            }
            Message::Unknown(u) => {
                let msg = format!("unknown envelope type: '{}'", u.kind);
                self.invalid(conn, msg);
            }
            _ => self.invalid(conn, format!("unsupported envelope type: '{kind}'")),
        }
    }

    fn authenticate(&self, cfg: &Config, auth: &Auth) -> Result<String, &'static str> {
        if cfg.tokens.is_empty() {
            return Ok("anonymous".to_owned());
        }
        match (auth.scheme.as_str(), auth.token.as_deref()) {
            ("bearer", Some(token)) => cfg.tokens.get(token).cloned().ok_or("unknown bearer token"),
            _ => Err("auth scheme None not configured"),
        }
    }

    fn on_hello(&mut self, cfg: &Config, conn: u64, open: Open) {
        if self
            .faults
            .take(|f| matches!(f, Fault::DropDuringHandshake))
            .is_some()
        {
            self.kill(conn);
            return;
        }
        if self.conn_session(conn).is_some() {
            self.invalid(conn, "session already established");
            return;
        }
        let Ok(principal) = self.authenticate(cfg, &open.auth) else {
            self.refuse(
                conn,
                ErrorCode::Unauthenticated,
                "invalid bearer token".into(),
            );
            return;
        };
        let features: Vec<&str> = open
            .capabilities
            .get("features")
            .and_then(Value::as_array)
            .map(|list| list.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let heartbeat = cfg.heartbeat.filter(|_| features.contains(&"heartbeat"));
        let agent_versions = features.contains(&"agent_versions");

        let (session_id, replay_after) = match &open.resume {
            None => (self.new_session(principal.clone()), None),
            Some(resume) => match self.check_resume(cfg, &principal, resume) {
                Ok(()) => (resume.session_id.clone(), Some(resume.last_event_seq)),
                Err((code, message)) => {
                    self.refuse(conn, code, message);
                    return;
                }
            },
        };
        // A resume while the old connection still looks alive takes over.
        if let Some(old) = self
            .sessions
            .get(&session_id)
            .and_then(|s| s.conn)
            .filter(|&c| c != conn)
        {
            self.abort(old);
        }
        let token = new_id("rtk");
        let Some(session) = self.sessions.get_mut(&session_id) else {
            return;
        };
        session.token = token.clone();
        session.conn = Some(conn);
        session.detached_at = None;
        let replay: Vec<Frame> = match replay_after {
            Some(last) => session
                .buffer
                .iter()
                .filter(|f| f.envelope.event_seq.is_some_and(|s| s > last))
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        if let Some(c) = self.conns.get_mut(&conn) {
            c.session = Some(session_id.clone());
            c.principal = Some(principal);
            if let Some(interval) = heartbeat {
                c.link.heartbeat.send_replace(Some(interval));
            }
        }
        let welcome = self.welcome_v1_1(cfg, &session_id, token, heartbeat, agent_versions);
        self.send(conn, welcome);
        for frame in replay {
            self.send(conn, frame);
        }
    }

    fn check_resume(
        &mut self,
        cfg: &Config,
        principal: &str,
        resume: &ResumeRequest,
    ) -> Result<(), (ErrorCode, String)> {
        let sid = &resume.session_id;
        let denied = ErrorCode::PermissionDenied;
        let Some(session) = self.sessions.get(sid) else {
            return Err((
                denied,
                format!("no resumable session for session_id='{sid}'"),
            ));
        };
        if session.principal != principal {
            return Err((
                denied,
                "resume principal does not match the original session".into(),
            ));
        }
        if session.token != resume.resume_token {
            // Python 1.1.3 forgets the session after a wrong token (capture
            // F3): a later resume with the right token finds nothing.
            self.sessions.remove(sid);
            return Err((denied, "resume_token does not match".into()));
        }
        if session
            .detached_at
            .is_some_and(|t| t.elapsed() > cfg.resume_window)
        {
            self.sessions.remove(sid);
            return Err((
                ErrorCode::ResumeWindowExpired,
                format!(
                    "session '{sid}' was detached longer than the {}s resume window",
                    ceil_secs(cfg.resume_window)
                ),
            ));
        }
        if resume.last_event_seq < session.evicted_upto {
            return Err((
                ErrorCode::ResumeWindowExpired,
                format!(
                    "cannot resume from event_seq {}: events up to {} are no longer buffered",
                    resume.last_event_seq, session.evicted_upto
                ),
            ));
        }
        Ok(())
    }

    fn new_session(&mut self, principal: String) -> String {
        if self.sessions.len() >= MAX_SESSIONS {
            let oldest = self
                .sessions
                .iter()
                .filter_map(|(id, s)| s.detached_at.map(|t| (t, id.clone())))
                .min();
            if let Some((_, id)) = oldest {
                self.sessions.remove(&id);
            }
        }
        let id = new_id("sess");
        self.sessions.insert(
            id.clone(),
            Session {
                principal,
                token: String::new(),
                conn: None,
                next_seq: 1,
                buffer: VecDeque::new(),
                evicted_upto: 0,
                detached_at: None,
            },
        );
        id
    }

    fn welcome_v1_1(
        &self,
        cfg: &Config,
        session_id: &str,
        token: String,
        heartbeat: Option<Duration>,
        agent_versions: bool,
    ) -> Frame {
        let mut tools: Vec<&String> = cfg.tools.keys().collect();
        tools.sort();
        let agents: Vec<Value> = tools
            .into_iter()
            .map(|name| {
                if agent_versions {
                    json!({"name": name, "versions": []})
                } else {
                    json!(name)
                }
            })
            .collect();
        let mut features = Vec::new();
        if cfg.heartbeat.is_some() {
            features.push("heartbeat");
        }
        features.extend(["ack", "list_jobs"]);
        if cfg.subscribe {
            // Where Python 1.1.3 lists it.
            features.push("subscribe");
        }
        features.extend(["progress", "result_chunk", "agent_versions"]);
        let mut extra = Map::new();
        extra.insert("accepted_at".into(), json!(now_rfc3339()));
        if let Some(interval) = heartbeat {
            extra.insert(
                "heartbeat_interval_ms".into(),
                json!(u64::try_from(interval.as_millis()).unwrap_or(u64::MAX)),
            );
        }
        let welcome = Welcome {
            session_id: session_id.to_owned(),
            runtime: PeerInfo {
                name: cfg.runtime_name.clone(),
                version: cfg.runtime_version.clone(),
                extra: Object::new(),
            },
            resume_token: Some(token),
            resume_window_sec: Some(ceil_secs(cfg.resume_window)),
            heartbeat_interval_sec: heartbeat.map(ceil_secs),
            capabilities: json!({
                "encodings": ["json"],
                "features": features,
                "agents": agents,
            }),
            extra,
        };
        let mut frame = self.frame(Message::Welcome(welcome));
        frame.envelope.session_id = Some(session_id.to_owned());
        frame
    }

    /// `job.subscribe` (v1.1, when offered): `job.subscribed`, the job's
    /// buffered events after `from_event_seq` when `history` is asked, the
    /// terminal if the job has finished, then live events.
    fn on_subscribe(&mut self, cfg: &Config, conn: u64, envelope: &Envelope, sub: Subscribe) {
        let principal = self.conn_principal(conn);
        let Some(sid) = self.conn_session(conn) else {
            return;
        };
        let refusal = match self.jobs.get(&sub.job_id) {
            None => Some((
                ErrorCode::JobNotFound,
                format!("no such job: {}", sub.job_id),
            )),
            Some(job) if job.principal != principal => Some((
                ErrorCode::PermissionDenied,
                "permission denied: not authorized to observe this job".to_owned(),
            )),
            Some(_) => None,
        };
        if let Some((code, message)) = refusal {
            let mut error = session_error(code, message);
            error.request_id = Some(envelope.id.clone());
            let frame = self.reply(conn, Message::SessionError(error));
            self.send(conn, frame);
            return;
        }
        let job = &self.jobs[&sub.job_id];
        let from = sub.from_event_seq.unwrap_or(0);
        let history: Vec<Frame> = if sub.history.unwrap_or(false) {
            job.history
                .iter()
                .filter(|f| f.envelope.event_seq.is_none_or(|seq| seq > from))
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        let latest = job
            .history
            .back()
            .and_then(|f| f.envelope.event_seq)
            .unwrap_or(0);
        let terminal = match &job.state {
            JobState::Done { terminal } => Some((**terminal).clone()),
            JobState::Running { .. } => None,
        };
        let body = json!({
            "job_id": job.id,
            "current_status": status_name(job),
            "agent": job.tool,
            "lease": {},
            "subscribed_from": if sub.history.unwrap_or(false) { from } else { latest },
            "replayed": !history.is_empty(),
            "request_id": envelope.id,
        });
        let job_id = job.id.clone();
        let mut frame = self.reply(conn, Message::Subscribed(object(body)));
        frame.envelope.job_id = Some(job_id.clone());
        self.send(conn, frame);
        for event in history {
            self.deliver_to(cfg, conn, &sid, event);
        }
        if let Some(terminal) = terminal {
            self.deliver_to(cfg, conn, &sid, terminal);
            return;
        }
        let live: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.live)
            .map(|(id, _)| *id)
            .collect();
        if let Some(job) = self.jobs.get_mut(&job_id) {
            job.subscribers.retain(|(c, _)| live.contains(c));
            if job.subscribers.len() < MAX_SUBSCRIBERS
                && !job.subscribers.iter().any(|(c, _)| *c == conn)
            {
                job.subscribers.push((conn, sid));
            }
        }
    }

    fn on_ping(&mut self, conn: u64, envelope: &Envelope, ping: Ping) {
        let pong = Message::Pong(Pong {
            ping_nonce: ping.nonce,
            received_at: Some(now_rfc3339()),
            extra: Object::new(),
        });
        let mut frame = self.reply(conn, pong);
        if self.legacy {
            frame.envelope.correlation_id = Some(envelope.id.clone());
        }
        self.send(conn, frame);
    }

    fn on_ack(&mut self, conn: u64, last_processed: u64) {
        let Some(sid) = self.conn_session(conn) else {
            return;
        };
        if let Some(s) = self.sessions.get_mut(&sid) {
            s.buffer
                .retain(|f| f.envelope.event_seq.is_some_and(|seq| seq > last_processed));
        }
    }

    fn on_list_jobs(&mut self, conn: u64, envelope: &Envelope) {
        let sid = self.conn_session(conn).unwrap_or_default();
        let mut jobs: Vec<(&String, Value)> = self
            .jobs
            .values()
            .filter(|j| j.session == sid)
            .map(|j| {
                let status = status_name(j);
                (
                    &j.id,
                    json!({"job_id": j.id, "agent": j.tool, "status": status}),
                )
            })
            .collect();
        jobs.sort_by(|a, b| a.0.cmp(b.0));
        let body = json!({
            "request_id": envelope.id,
            "jobs": jobs.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
            "next_cursor": null,
        });
        let mut frame = self.reply(conn, Message::Jobs(object(body)));
        if self.legacy {
            frame.envelope.correlation_id = Some(envelope.id.clone());
        }
        self.send(conn, frame);
    }

    /// The intent a key is bound to, compared as the dialect's reference
    /// runtime compares it.
    fn fingerprint(&self, invoke: &Invoke) -> Fingerprint {
        if self.legacy {
            Fingerprint::Text(format!(
                "{}\n{}",
                invoke.tool,
                canonical_json(&invoke.arguments)
            ))
        } else {
            let mut payload = invoke.extra.clone();
            payload.insert("agent".into(), json!(invoke.tool));
            payload.insert("input".into(), invoke.arguments.clone());
            Fingerprint::Payload(Value::Object(payload))
        }
    }

    /// A connection and a session for one HTTP submit (not counted in
    /// [`crate::MockRuntime::connections`]).
    fn open_http(&mut self, id: u64, tx: mpsc::Sender<Out>, principal: String) {
        let session = self.new_session(principal.clone());
        if let Some(s) = self.sessions.get_mut(&session) {
            s.conn = Some(id);
        }
        self.conns.insert(
            id,
            Conn {
                tx,
                abort: None,
                link: Arc::new(Link::new()),
                session: Some(session),
                principal: Some(principal),
                live: true,
                frames_sent: 0,
            },
        );
    }

    fn on_submit(&mut self, shared: &Arc<Shared>, conn: u64, envelope: &Envelope, invoke: Invoke) {
        let cfg = &shared.cfg;
        let Some(session_id) = self.conn_session(conn) else {
            return;
        };
        let principal = self.conn_principal(conn);
        let request_id = envelope.id.clone();
        match self.faults.take(|f| {
            matches!(
                f,
                Fault::DropOnSubmit | Fault::RejectNextSubmit { .. } | Fault::CloseWith { .. }
            )
        }) {
            Some(Fault::DropOnSubmit) => {
                self.kill(conn);
                return;
            }
            Some(Fault::CloseWith { code }) => {
                self.enqueue_end(conn, Out::Close(code));
                return;
            }
            Some(Fault::RejectNextSubmit { code, retry_after }) => {
                self.reject(conn, &request_id, code, retry_after);
                return;
            }
            _ => {}
        }
        let Some(tool_fn) = cfg.tools.get(&invoke.tool).cloned() else {
            self.unknown_tool(conn, &request_id, &invoke.tool);
            return;
        };
        let key = invoke.idempotency_key.clone();
        let fingerprint = self.fingerprint(&invoke);
        if let Some(key) = &key {
            let scope = (principal.clone(), key.clone());
            if let Some(binding) = self.bindings.get(&scope) {
                if !binding.fingerprint.matches(&fingerprint)
                    && cfg.conflict != ConflictSignal::Ignored
                {
                    self.conflict(cfg, conn, &request_id, key);
                    return;
                }
                let job_id = binding.job_id.clone();
                if self.jobs.contains_key(&job_id) {
                    self.replay(cfg, conn, &request_id, key, &job_id);
                    return;
                }
                self.bindings.remove(&scope);
            }
        }
        if self.running >= MAX_RUNNING_JOBS {
            self.reject(conn, &request_id, ErrorCode::ResourceExhausted, None);
            return;
        }

        let job_id = new_id("job");
        let mut accepted = if self.legacy {
            self.frame(Message::Accepted(Accepted {
                job_id: job_id.clone(),
                request_id: Some(request_id.clone()),
                extra: Object::new(),
            }))
        } else {
            let extra = object(json!({
                "agent": invoke.tool,
                "accepted_at": now_rfc3339(),
                "lease": {},
            }));
            self.frame(Message::Accepted(Accepted {
                job_id: job_id.clone(),
                request_id: Some(request_id.clone()),
                extra,
            }))
        };
        accepted.envelope.session_id = Some(session_id.clone());
        accepted.envelope.job_id = Some(job_id.clone());
        self.stamp_legacy(conn, &mut accepted);

        self.jobs.insert(
            job_id.clone(),
            Job {
                id: job_id.clone(),
                tool: invoke.tool.clone(),
                session: session_id,
                origin_conn: conn,
                principal: principal.clone(),
                request_id: request_id.clone(),
                key: key.clone(),
                accepted: accepted.clone(),
                state: JobState::Running { abort: None },
                waiters: Vec::new(),
                chunks: None,
                arguments: invoke.arguments.clone(),
                executions: 0,
                terminal_delivered: false,
                history: VecDeque::new(),
                subscribers: Vec::new(),
            },
        );
        if let Some(key) = &key {
            self.bindings.insert(
                (principal.clone(), key.clone()),
                Binding {
                    fingerprint,
                    job_id: job_id.clone(),
                },
            );
            if self.exec_key.len() < MAX_KEY_COUNTERS || self.exec_key.contains_key(key) {
                *self.exec_key.entry(key.clone()).or_default() += 1;
            }
        }
        *self.exec_tool.entry(invoke.tool.clone()).or_default() += 1;
        self.exec_total += 1;
        self.running += 1;

        self.send_accepted(conn, accepted);
        if self.legacy {
            let job = &self.jobs[&job_id];
            let started = Message::Started(object(
                json!({"description": format!("invoking {}", invoke.tool)}),
            ));
            let mut frame = self.job_frame(job, started);
            self.stamp_legacy(conn, &mut frame);
            self.send(conn, frame);
        }

        let ctx = ToolContext::new(
            Arc::clone(shared),
            job_id.clone(),
            invoke.tool,
            key,
            principal,
        );
        let args = invoke.arguments;
        let task_shared = Arc::clone(shared);
        let task_job = job_id.clone();
        let handle = tokio::spawn(async move {
            task_shared.ran(&task_job);
            let outcome = match std::panic::catch_unwind(AssertUnwindSafe(|| tool_fn(args, ctx))) {
                Ok(future) => match AssertUnwindSafe(future).catch_unwind().await {
                    Ok(result) => Outcome::Done(result),
                    Err(_) => Outcome::Panicked,
                },
                Err(_) => Outcome::Panicked,
            };
            task_shared.finish(&task_job, outcome);
        });
        if let Some(job) = self.jobs.get_mut(&job_id) {
            if job.is_running() {
                job.state = JobState::Running {
                    abort: Some(handle.abort_handle()),
                };
            }
        }
    }

    /// Sends a `job.accepted`, then applies `DropAfterAccepted`.
    fn send_accepted(&mut self, conn: u64, frame: Frame) {
        self.send(conn, frame);
        if self
            .faults
            .take(|f| matches!(f, Fault::DropAfterAccepted))
            .is_some()
        {
            self.kill(conn);
        }
    }

    fn reject(
        &mut self,
        conn: u64,
        request_id: &str,
        code: ErrorCode,
        retry_after: Option<Duration>,
    ) {
        let mut error = error_reply(
            code.clone(),
            format!("submit refused ({code}); retry later"),
            true,
            Some(request_id),
        );
        error.details = retry_after.map(|d| json!({"retry_after_seconds": d.as_secs_f64()}));
        let message = if self.legacy {
            Message::Nack(error)
        } else {
            Message::Error(error)
        };
        let mut frame = self.reply(conn, message);
        self.stamp_legacy(conn, &mut frame);
        self.send(conn, frame);
    }

    fn unknown_tool(&mut self, conn: u64, request_id: &str, tool: &str) {
        if !self.legacy {
            // Python 1.1.3: a session-level error without the request id.
            let error = session_error(
                ErrorCode::AgentNotAvailable,
                format!("unknown agent: {tool}"),
            );
            let frame = self.reply(conn, Message::SessionError(error));
            self.send(conn, frame);
            return;
        }
        // Rust 2.0.0: accepted under a fresh job id, then failed; the key is
        // not bound, so a retry gets yet another job.
        let job_id = new_id("job");
        let mut accepted = self.reply(
            conn,
            Message::Accepted(Accepted {
                job_id: job_id.clone(),
                request_id: Some(request_id.to_owned()),
                extra: Object::new(),
            }),
        );
        accepted.envelope.job_id = Some(job_id.clone());
        self.stamp_legacy(conn, &mut accepted);
        self.send(conn, accepted);
        let error = error_reply(
            ErrorCode::NotFound,
            format!("tool not registered: {tool}"),
            false,
            Some(request_id),
        );
        let mut failed = self.reply(conn, Message::Error(error));
        failed.envelope.job_id = Some(job_id);
        self.stamp_legacy(conn, &mut failed);
        self.send(conn, failed);
    }

    fn conflict(&mut self, cfg: &Config, conn: u64, request_id: &str, key: &str) {
        let python = format!("idempotency key '{key}' already used with different parameters");
        let rust = format!("idempotency key {key} already bound to a different command intent");
        let (message, echo_key) = match cfg.conflict {
            ConflictSignal::SessionError => (
                Message::SessionError(session_error(ErrorCode::DuplicateKey, python)),
                false,
            ),
            ConflictSignal::JobError => (
                Message::Error(error_reply(
                    ErrorCode::DuplicateKey,
                    python,
                    false,
                    Some(request_id),
                )),
                false,
            ),
            ConflictSignal::FailedPrecondition => (
                Message::Error(error_reply(
                    ErrorCode::FailedPrecondition,
                    rust,
                    false,
                    Some(request_id),
                )),
                true,
            ),
            ConflictSignal::DuplicateKeyFailed => (
                Message::Error(error_reply(
                    ErrorCode::DuplicateKey,
                    rust,
                    false,
                    Some(request_id),
                )),
                true,
            ),
            ConflictSignal::Nack | ConflictSignal::Ignored => {
                // A legacy `nack` payload has no `retryable` (arcp-core's
                // NackPayload: code, message, details).
                let mut nack = error_reply(ErrorCode::DuplicateKey, rust, false, Some(request_id));
                nack.retryable = None;
                (Message::Nack(nack), true)
            }
        };
        let stamp = !matches!(message, Message::SessionError(_));
        let mut frame = self.reply(conn, message);
        if echo_key {
            frame.envelope.idempotency_key = Some(key.to_owned());
        }
        if stamp {
            self.stamp_legacy(conn, &mut frame);
        }
        self.send(conn, frame);
    }

    fn replay(&mut self, cfg: &Config, conn: u64, request_id: &str, key: &str, job_id: &str) {
        let terminal = match &self.jobs[job_id].state {
            JobState::Done { terminal } => Some((**terminal).clone()),
            JobState::Running { .. } => None,
        };
        match cfg.replay {
            ReplayPolicy::TerminalReplay => {
                self.replay_accepted(conn, request_id, key, job_id);
                if let Some(terminal) = terminal {
                    self.replay_terminal(cfg, conn, request_id, key, terminal, false);
                }
            }
            ReplayPolicy::AcceptedOnly => self.replay_accepted(conn, request_id, key, job_id),
            ReplayPolicy::AckReplay => {
                let receipt = Message::Receipt(Receipt {
                    replay: true,
                    job_id: Some(job_id.to_owned()),
                    extra: Object::new(),
                });
                let mut frame = self.reply(conn, receipt);
                frame.envelope.correlation_id = Some(request_id.to_owned());
                frame.envelope.idempotency_key = Some(key.to_owned());
                self.stamp_legacy(conn, &mut frame);
                self.send(conn, frame);
            }
            ReplayPolicy::TerminalOnly => match terminal {
                Some(terminal) => self.replay_terminal(cfg, conn, request_id, key, terminal, true),
                None => {
                    if let Some(job) = self.jobs.get_mut(job_id) {
                        if job.waiters.len() < MAX_WAITERS {
                            job.waiters
                                .push((conn, request_id.to_owned(), key.to_owned()));
                        }
                    }
                }
            },
        }
    }

    fn replay_accepted(&mut self, conn: u64, request_id: &str, key: &str, job_id: &str) {
        let frame = if self.legacy {
            // Rust 2.0.0: a fresh envelope on the current session, the new
            // request in `correlation_id`, the key echoed on the envelope.
            let mut frame = self.reply(
                conn,
                Message::Accepted(Accepted {
                    job_id: job_id.to_owned(),
                    request_id: Some(request_id.to_owned()),
                    extra: Object::new(),
                }),
            );
            frame.envelope.job_id = Some(job_id.to_owned());
            frame.envelope.idempotency_key = Some(key.to_owned());
            self.stamp_legacy(conn, &mut frame);
            frame
        } else {
            // Python 1.1.3: the original envelope (id, session_id) with the
            // new request id in the payload.
            let mut frame = self.jobs[job_id].accepted.clone();
            if let Message::Accepted(accepted) = &mut frame.message {
                accepted.request_id = Some(request_id.to_owned());
            }
            frame
        };
        self.send_accepted(conn, frame);
    }

    /// Re-sends a stored terminal. v1.1: the original envelope with a fresh
    /// `event_seq` of the requesting session (as Python does); legacy: a fresh
    /// envelope correlated to the new request. `correlate` also names the
    /// request in a v1.1 payload (`TerminalOnly`).
    fn replay_terminal(
        &mut self,
        cfg: &Config,
        conn: u64,
        request_id: &str,
        key: &str,
        stored: Frame,
        correlate: bool,
    ) {
        if !self.is_live(conn) {
            return;
        }
        if self.legacy {
            let mut frame = self.frame(stored.message);
            frame.envelope.session_id = self.conn_session(conn);
            frame.envelope.job_id = stored.envelope.job_id;
            frame.envelope.correlation_id = Some(request_id.to_owned());
            frame.envelope.idempotency_key = Some(key.to_owned());
            self.stamp_legacy(conn, &mut frame);
            self.send(conn, frame.clone());
            self.after_terminal(conn, &frame);
            return;
        }
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
        let Some(sid) = self.conn_session(conn) else {
            return;
        };
        frame.envelope.event_seq = self.next_seq(&sid);
        self.buffer(cfg, &sid, frame.clone());
        self.send(conn, frame.clone());
        self.after_terminal(conn, &frame);
    }

    fn on_cancel(&mut self, cfg: &Config, conn: u64, envelope: &Envelope, cancel: Cancel) {
        let principal = self.conn_principal(conn);
        let job_id = cancel.job_id;
        let job = self.jobs.get(&job_id);
        let refusal = match job {
            None => Some("no such in-flight job"),
            Some(job) if job.principal != principal => {
                Some("permission denied: not authorized to cancel this job")
            }
            Some(job) if !job.is_running() => Some("job is no longer in-flight"),
            Some(_) => None,
        };
        if self.legacy {
            let body = match refusal {
                None => Message::CancelAccepted(object(json!({"target_id": job_id}))),
                Some(reason) => {
                    Message::CancelRefused(object(json!({"target_id": job_id, "reason": reason})))
                }
            };
            let mut frame = self.reply(conn, body);
            frame.envelope.correlation_id = Some(envelope.id.clone());
            self.stamp_legacy(conn, &mut frame);
            self.send(conn, frame);
        } else if let Some(reason) = refusal {
            let mut error = session_error(ErrorCode::JobNotFound, format!("{reason}: {job_id}"));
            error.request_id = Some(envelope.id.clone());
            let frame = self.reply(conn, Message::SessionError(error));
            self.send(conn, frame);
            return;
        } else if cfg.cancel_ack {
            let mut frame = self.reply(
                conn,
                Message::CancelAccepted(object(json!({"job_id": job_id}))),
            );
            frame.envelope.job_id = Some(job_id.clone());
            self.send(conn, frame);
        }
        if refusal.is_none() {
            self.cancel_job(cfg, &job_id);
        }
    }

    // ---------------------------------------------------------- legacy inbound

    fn dispatch_legacy(&mut self, shared: &Arc<Shared>, conn: u64, frame: Frame) {
        let cfg = &shared.cfg;
        let Frame { envelope, message } = frame;
        match message {
            Message::Open(open) => self.on_open(cfg, conn, &envelope, open),
            // The Rust runtime cannot parse these and drops the TCP connection.
            Message::Resume(_) | Message::Unknown(_) => self.unparseable(
                cfg,
                conn,
                Some(&envelope.id),
                &format!("unknown message type '{}'", envelope.kind),
            ),
            // ... and ignores anything else until the session is open.
            _ if self.conn_session(conn).is_none() => {}
            Message::Ping(ping) => self.on_ping(conn, &envelope, ping),
            Message::Close(_) => {
                // Rust 2.0.0 cancels the session's jobs and drops the socket.
                let running: Vec<String> = self
                    .jobs
                    .values()
                    .filter(|j| j.origin_conn == conn && j.is_running())
                    .map(|j| j.id.clone())
                    .collect();
                for job_id in running {
                    self.cancel_job(cfg, &job_id);
                }
                self.kill(conn);
            }
            Message::ListJobs(_) => self.on_list_jobs(conn, &envelope),
            Message::Invoke(invoke) => self.on_submit(shared, conn, &envelope, invoke),
            Message::Cancel(cancel) => self.on_cancel(cfg, conn, &envelope, cancel),
            Message::Subscribe(_) => {
                let error = error_reply(
                    ErrorCode::Unimplemented,
                    "subscriptions are not supported",
                    false,
                    Some(&envelope.id),
                );
                let mut frame = self.reply(conn, Message::Nack(error));
                self.stamp_legacy(conn, &mut frame);
                self.send(conn, frame);
            }
            _ => {}
        }
    }

    fn on_open(&mut self, cfg: &Config, conn: u64, envelope: &Envelope, open: Open) {
        if self
            .faults
            .take(|f| matches!(f, Fault::DropDuringHandshake))
            .is_some()
        {
            self.kill(conn);
            return;
        }
        let principal = match self.authenticate(cfg, &open.auth) {
            Ok(principal) => principal,
            Err(message) => {
                // Rust 2.0.0 keeps the connection open after a rejection.
                let error = ErrorReply {
                    code: ErrorCode::Unauthenticated,
                    message: message.into(),
                    retryable: None,
                    details: None,
                    request_id: Some(envelope.id.clone()),
                    extra: Object::new(),
                };
                let frame = self.frame(Message::Rejected(error));
                self.send(conn, frame);
                return;
            }
        };
        self.detach(conn);
        let session_id = new_id("sess");
        self.sessions.insert(
            session_id.clone(),
            Session {
                principal: principal.clone(),
                token: String::new(),
                conn: Some(conn),
                next_seq: 1,
                buffer: VecDeque::new(),
                evicted_upto: 0,
                detached_at: None,
            },
        );
        if let Some(c) = self.conns.get_mut(&conn) {
            c.session = Some(session_id.clone());
            c.principal = Some(principal);
        }
        let expires = SystemTime::now()
            .checked_add(Duration::from_secs(3600))
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .unwrap_or_default();
        let welcome = Welcome {
            session_id: session_id.clone(),
            runtime: PeerInfo {
                name: cfg.runtime_name.clone(),
                version: cfg.runtime_version.clone(),
                extra: object(json!({"trust_level": "trusted"})),
            },
            resume_token: None,
            resume_window_sec: None,
            heartbeat_interval_sec: None,
            capabilities: json!({
                "streaming": true,
                "durable_jobs": true,
                "artifacts": false,
                "subscriptions": false,
            }),
            extra: object(json!({
                "lease": {"expires_at": format_rfc3339(expires.as_secs(), expires.subsec_micros())},
            })),
        };
        let mut frame = self.frame(Message::Welcome(welcome));
        frame.envelope.session_id = Some(session_id);
        frame.envelope.correlation_id = Some(envelope.id.clone());
        self.send(conn, frame);
    }
}

/// A job's status as `session.jobs` and `job.subscribed` name it.
fn status_name(job: &Job) -> &'static str {
    match &job.state {
        JobState::Running { .. } => "running",
        JobState::Done { terminal } => match &terminal.message {
            Message::Result(_) => "success",
            Message::Cancelled(_) => "cancelled",
            _ => "error",
        },
    }
}

/// The terminal message of a finished job, in the dialect's shape.
fn terminal_message(legacy: bool, outcome: Outcome, result_id: Option<String>) -> Message {
    let failure = match outcome {
        Outcome::Done(Ok(value)) => {
            let mut extra = Object::new();
            let streamed = result_id.is_some();
            if let Some(id) = result_id {
                extra.insert("result_id".into(), json!(id));
            }
            if !legacy {
                extra.insert("completed_at".into(), json!(now_rfc3339()));
            }
            let result = (!(streamed && value.is_null())).then_some(value);
            return Message::Result(JobResult { result, extra });
        }
        Outcome::Cancelled => {
            return Message::Cancelled(if legacy {
                object(json!({"reason": "cancellation token fired"}))
            } else {
                object(json!({"completed_at": now_rfc3339()}))
            });
        }
        Outcome::Done(Err(failure)) => failure,
        Outcome::Panicked => ToolFailure::new(
            if legacy {
                ErrorCode::Internal
            } else {
                ErrorCode::InternalError
            },
            "tool panicked",
        )
        .retryable(false),
    };
    let mut extra = Object::new();
    if !legacy {
        extra.insert("final_status".into(), json!("error"));
        extra.insert("completed_at".into(), json!(now_rfc3339()));
    }
    Message::Error(ErrorReply {
        code: failure.code().clone(),
        message: failure.message().to_owned(),
        retryable: Some(failure.is_retryable()),
        details: failure.details_value().cloned(),
        request_id: None,
        extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_equality_ignores_order_and_number_spelling() {
        assert!(python_eq(
            &json!({"a": 1, "b": [1, 2.0]}),
            &json!({"b": [1.0, 2], "a": 1.0})
        ));
        assert!(!python_eq(&json!({"a": 1}), &json!({"a": 1, "b": null})));
        assert!(!python_eq(&json!({"a": {}}), &json!({})));
        assert!(!python_eq(&json!([1, 2]), &json!([2, 1])));
    }

    #[test]
    fn ceil_secs_rounds_up() {
        assert_eq!(ceil_secs(Duration::from_millis(200)), 1);
        assert_eq!(ceil_secs(Duration::from_secs(2)), 2);
        assert_eq!(ceil_secs(Duration::from_millis(2001)), 3);
    }
}
