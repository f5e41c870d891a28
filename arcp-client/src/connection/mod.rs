//! The connection task: one per [`crate::Client`], owning the socket, the
//! session and every call in flight.
//!
//! ```text
//!            ┌──────────── transport lost / heartbeat lost ─────────────┐
//!            ▼                                                          │
//!  Queued(not_before) ──send──▶ Sent(request id) ──job.accepted──▶ Accepted(job id)
//!       ▲   │                       │  │                                 │  │
//!       │   │ budget spent          │  └ retryable rejection ─▶ Queued   │  └ terminal ─▶ done
//!       │   ▼                       └ terminal / DUPLICATE_KEY ─▶ done   │
//!       │  give up                                                       │ replayed accept:
//!       └──────────── ladder: wait, subscribe (if offered), re-send ◀────┘ live stream not trusted
//! ```
//!
//! Every attempt of a call carries the same key and the same intent
//! (serialized from one `Invoke` value, so byte-identical) under a fresh
//! envelope id. Replies are attributed by request id (v1.1 `request_id`,
//! legacy `correlation_id`), then job id, then, for errors that name
//! nothing, the oldest request still awaiting an answer on this connection.
//! A call is resumed by [`Task::step`], the single place that decides what a
//! call does next; timers only say *when* to look again.

mod transport;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arcp_types::{
    Auth, Dialect, Envelope, ErrorCode, ErrorReply, Frame, IdempotencyKey, Invoke, JobEvent,
    JobResult, Message, Open, PeerInfo, Ping, Pong, ResumeRequest, Subscribe, Welcome,
};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use crate::cache::{Cached, Outcome, OutcomeCache};
use crate::client::{Config, DialectChoice};
use crate::error::{Error, ToolError};
use crate::intent::{fingerprint, is_duplicate_key, read_result, ResultReading};
use crate::invocation::{CallShared, CancelOutcome, EventsEnd, InvocationEvent, ToolOutput};
use crate::profile::RuntimeProfile;
use crate::retry::{later, Schedule};
use transport::{Inbound, Transport};

/// A call handed from an `Invocation` to the task.
pub(crate) struct CallRequest {
    pub(crate) key: IdempotencyKey,
    pub(crate) trace_id: String,
    pub(crate) invoke: Invoke,
    pub(crate) deadline: Duration,
    pub(crate) started: Instant,
    pub(crate) shared: Arc<CallShared>,
    /// Held, never read: dropping it ends the call's event stream.
    #[allow(dead_code)]
    pub(crate) events_end: EventsEnd,
    /// The journal's hook (when journaled): told of sends and acceptance.
    pub(crate) recorder: Option<crate::journal::Recorder>,
}

type Reply = oneshot::Sender<Outcome>;

/// Requests from client handles.
pub(crate) enum Command {
    Invoke(Box<(CallRequest, Reply)>),
    Cancel {
        key: IdempotencyKey,
        reply: oneshot::Sender<CancelOutcome>,
    },
    Close {
        reply: oneshot::Sender<()>,
    },
}

/// Runs the connection task until the client closes or every handle is gone.
pub(crate) async fn run(
    config: Arc<Config>,
    rx: mpsc::Receiver<Command>,
    ready: oneshot::Sender<Result<RuntimeProfile, Error>>,
) {
    let mut task = Task::new(config, rx);
    match task.establish().await {
        Ok(()) => {
            let profile = task.session.profile.clone();
            if ready
                .send(profile.ok_or(Error::Internal("no profile after handshake".into())))
                .is_err()
            {
                return;
            }
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    }
    task.main_loop().await;
}

/// Where one call stands.
#[derive(Debug)]
enum Phase {
    /// Waiting to be (re)sent, not before the instant.
    Queued { not_before: Instant },
    /// An attempt is on the wire, unanswered.
    Sent { request_id: String },
    /// Bound to a job. `ladder_at` is set when the live stream cannot be
    /// trusted to deliver the terminal (the accept was a replay): at that
    /// instant the recovery ladder takes its next step.
    Accepted { ladder_at: Option<Instant> },
}

struct Call {
    req: CallRequest,
    replies: Vec<Reply>,
    fingerprint: u64,
    phase: Phase,
    attempts: u32,
    job_id: Option<String>,
    schedule: Option<Schedule>,
    ladder: Option<Schedule>,
    /// An attempt may have started the job and its answer was lost.
    outcome_uncertain: bool,
    /// The job was bound by an earlier attempt or another session: what we
    /// get back may be a stored outcome.
    replayed: bool,
    last_error: Option<String>,
    /// Highest (session epoch, event_seq) delivered, for deduplication.
    last_event: Option<(u64, u64)>,
    subscribed_generation: Option<u64>,
    subscribe_refused: bool,
    cancel_waiters: Vec<(oneshot::Sender<CancelOutcome>, Instant)>,
    deadline_at: Instant,
    /// When retrying must stop: `max_elapsed` after the call's first failure.
    budget_at: Instant,
    /// Retrying began (first failure); the budget clock runs from here.
    recovering: bool,
    /// The job was accepted when the connection died: a resumed session may
    /// still deliver its outcome without a re-send.
    awaiting_resume: bool,
    dropped_events: u64,
    /// A result streamed in `result_chunk` events, being reassembled.
    assembly: Option<Assembly>,
    span: tracing::Span,
}

/// A streamed result: the decoded bytes of its chunks so far, in order.
struct Assembly {
    result_id: String,
    base64: bool,
    bytes: Vec<u8>,
    next_chunk: u64,
    /// Out of order, undecodable, or over the size limit: the terminal's
    /// reference is returned instead of a partial value.
    broken: bool,
}

impl Assembly {
    fn push(&mut self, chunk: &arcp_types::EventBody, limit: usize) {
        use base64::Engine as _;
        let arcp_types::EventBody::ResultChunk {
            result_id,
            chunk_seq,
            data,
            encoding,
            ..
        } = chunk
        else {
            return;
        };
        if self.broken || *result_id != self.result_id {
            return;
        }
        if *chunk_seq != self.next_chunk {
            self.broken = true;
            return;
        }
        self.next_chunk += 1;
        let decoded = if encoding == "base64" {
            base64::engine::general_purpose::STANDARD.decode(data).ok()
        } else {
            Some(data.as_bytes().to_vec())
        };
        match decoded {
            Some(bytes) if self.bytes.len() + bytes.len() <= limit => self.bytes.extend(bytes),
            _ => {
                self.broken = true;
                self.bytes = Vec::new();
            }
        }
    }

    /// The assembled value: text for `utf8` chunks, base64 for binary.
    fn value(self) -> Option<Value> {
        use base64::Engine as _;
        if self.broken {
            return None;
        }
        Some(Value::String(if self.base64 {
            base64::engine::general_purpose::STANDARD.encode(&self.bytes)
        } else {
            String::from_utf8(self.bytes).ok()?
        }))
    }
}

/// A request awaiting an answer on the current connection.
#[derive(Debug, Clone, Copy)]
enum Pending {
    Submit(u64),
    Subscribe(u64),
    Cancel(u64),
}

#[derive(Default)]
struct Session {
    dialect: Option<Dialect>,
    id: Option<String>,
    resume_token: Option<String>,
    last_event_seq: u64,
    acked_seq: u64,
    profile: Option<RuntimeProfile>,
    heartbeat: Option<Duration>,
    /// The last handshake resumed the previous session.
    resumed: bool,
}

struct Task {
    config: Arc<Config>,
    rx: mpsc::Receiver<Command>,
    transport: Option<Transport>,
    session: Session,
    /// Boxed: the map keeps its peak capacity, so entries stay small.
    calls: HashMap<u64, Box<Call>>,
    next_call_id: u64,
    by_key: HashMap<IdempotencyKey, u64>,
    by_request: HashMap<String, Pending>,
    /// Request ids in send order, for errors that name no request.
    pending_order: VecDeque<String>,
    by_job: HashMap<String, u64>,
    timers: BinaryHeap<Reverse<(Instant, u64)>>,
    /// Heap size that triggers the next compaction.
    timers_compact_at: usize,
    cache: OutcomeCache,
    /// Incremented on every new socket; attribution never crosses it.
    generation: u64,
    /// Incremented on every new (not resumed) session; `event_seq` restarts.
    epoch: u64,
    reconnect: Option<Schedule>,
    /// Requests on this connection not yet answered, and how many may be:
    /// after a connection loss the window restarts small and grows by one
    /// per answer, so a reconnect does not flood a flaky link with every
    /// unfinished call at once (which, under repeated cuts, never finishes).
    sent_unanswered: usize,
    /// When the oldest unanswered request went out; runtimes accept a
    /// submit at once, so requests outstanding while the runtime says
    /// nothing at all for `handshake_timeout` mean a dead connection.
    awaiting_since: Option<Instant>,
    window: usize,
    window_queue: VecDeque<u64>,
    last_inbound: Instant,
    last_outbound: Instant,
    last_ack_sent: Instant,
}

/// Why a handshake did not produce a session.
enum HandshakeFailure {
    /// The runtime refused the credentials.
    Auth(String),
    /// The resume was refused; a fresh session may still work.
    ResumeRefused(String),
    /// The runtime does not speak this dialect.
    WrongDialect(String),
    /// Anything else (timeout, connection lost, other refusal).
    Other(String),
}

const WRITE_TIMEOUT_MIN: Duration = Duration::from_secs(5);
const ACK_EVERY: Duration = Duration::from_millis(200);
const MAX_COMMANDS_PER_TURN: usize = 512;
/// Unanswered requests allowed right after a connection loss.
const WINDOW_AFTER_LOSS: usize = 4;
const WINDOW_RECHECK: Duration = Duration::from_millis(50);
/// The timer heap is never compacted below this size.
const TIMER_COMPACT_MIN: usize = 1024;

impl Task {
    fn new(config: Arc<Config>, rx: mpsc::Receiver<Command>) -> Self {
        let now = Instant::now();
        let window = config.max_in_flight;
        Task {
            cache: OutcomeCache::new(config.outcome_cache_capacity, config.outcome_cache_ttl),
            config,
            rx,
            transport: None,
            session: Session::default(),
            calls: HashMap::new(),
            next_call_id: 0,
            by_key: HashMap::new(),
            by_request: HashMap::new(),
            pending_order: VecDeque::new(),
            by_job: HashMap::new(),
            timers: BinaryHeap::new(),
            timers_compact_at: TIMER_COMPACT_MIN,
            generation: 0,
            epoch: 0,
            reconnect: None,
            sent_unanswered: 0,
            awaiting_since: None,
            window,
            window_queue: VecDeque::new(),
            last_inbound: now,
            last_outbound: now,
            last_ack_sent: now,
        }
    }

    fn dialect(&self) -> Dialect {
        self.session.dialect.unwrap_or(Dialect::V1_1)
    }

    fn write_timeout(&self) -> Duration {
        self.config.handshake_timeout.max(WRITE_TIMEOUT_MIN)
    }

    // ----- connection management -------------------------------------------------

    /// Connects and completes a handshake: resumes the session when the
    /// runtime allows, falls back to a fresh session when the resume is
    /// refused, and (in `Auto`) falls back to the legacy dialect when v1.1
    /// is not understood.
    async fn establish(&mut self) -> Result<(), Error> {
        let candidates: &[Dialect] = match (self.session.dialect, self.config.dialect) {
            (Some(Dialect::Legacy), _) | (None, DialectChoice::Legacy) => &[Dialect::Legacy],
            (Some(_), _) | (None, DialectChoice::V1_1) => &[Dialect::V1_1],
            (None, _) => &[Dialect::V1_1, Dialect::Legacy],
        };
        let mut last = String::new();
        for &dialect in candidates {
            // At most two tries per dialect: a refused resume, then fresh.
            for _ in 0..2 {
                let mut transport = Transport::connect(&self.config).await?;
                let resume = self.resume_request(dialect);
                let resuming = resume.is_some();
                match self.handshake(&mut transport, dialect, resume).await {
                    Ok(welcome) => {
                        self.install(transport, dialect, welcome, resuming);
                        return Ok(());
                    }
                    Err(HandshakeFailure::Auth(message)) => {
                        return Err(Error::Unauthenticated { message })
                    }
                    Err(HandshakeFailure::ResumeRefused(message)) => {
                        info!(%message, "resume refused; opening a new session");
                        self.forget_session();
                        last = message;
                    }
                    Err(HandshakeFailure::WrongDialect(message)) => {
                        debug!(%dialect, %message, "runtime does not speak this dialect");
                        last = message;
                        break;
                    }
                    Err(HandshakeFailure::Other(message)) => {
                        return Err(Error::Handshake {
                            url: self.config.url.clone(),
                            message,
                        })
                    }
                }
            }
        }
        Err(Error::Handshake {
            url: self.config.url.clone(),
            message: format!("no dialect was accepted: {last}"),
        })
    }

    fn resume_request(&self, dialect: Dialect) -> Option<ResumeRequest> {
        let profile = self.session.profile.as_ref()?;
        if dialect != Dialect::V1_1 || !profile.supports_resume {
            return None;
        }
        Some(ResumeRequest {
            session_id: self.session.id.clone()?,
            resume_token: self.session.resume_token.clone()?,
            last_event_seq: self.session.last_event_seq,
        })
    }

    fn forget_session(&mut self) {
        self.session.id = None;
        self.session.resume_token = None;
    }

    async fn handshake(
        &self,
        transport: &mut Transport,
        dialect: Dialect,
        resume: Option<ResumeRequest>,
    ) -> Result<Welcome, HandshakeFailure> {
        let resuming = resume.is_some();
        let open = Open {
            client: PeerInfo {
                name: self.config.client_name.clone(),
                version: self.config.client_version.clone(),
                extra: Default::default(),
            },
            auth: match &self.config.token {
                Some(t) => Auth::bearer(t.0.clone()),
                None => Auth::none(),
            },
            capabilities: Value::Null,
            resume,
            extra: Default::default(),
        };
        transport.queue(dialect.encode(&Frame::new(Message::Open(open))));
        let deadline =
            tokio::time::Instant::from_std(later(Instant::now(), self.config.handshake_timeout));
        transport
            .flush(self.config.handshake_timeout)
            .await
            .map_err(HandshakeFailure::Other)?;
        let mut heard_anything = false;
        loop {
            let inbound = tokio::time::timeout_at(deadline, transport.recv())
                .await
                .map_err(|_| {
                    HandshakeFailure::Other(format!(
                        "no session welcome within {:?}",
                        self.config.handshake_timeout
                    ))
                })?;
            let text = match inbound {
                Inbound::Text(text) => text,
                Inbound::Other => continue,
                Inbound::Closed(reason) if !heard_anything && dialect == Dialect::V1_1 => {
                    // A legacy runtime drops TCP on a type it does not know.
                    return Err(HandshakeFailure::WrongDialect(reason));
                }
                Inbound::Closed(reason) => return Err(HandshakeFailure::Other(reason)),
            };
            heard_anything = true;
            let frame = match dialect.decode(&text) {
                Ok(frame) => frame,
                Err(e) => {
                    warn!(error = %e, "skipping undecodable frame during handshake");
                    continue;
                }
            };
            match frame.message {
                Message::Welcome(welcome) => return Ok(welcome),
                Message::SessionError(e) | Message::Rejected(e) | Message::Nack(e) => {
                    let message = self.redact(e.message);
                    let text = format!("{}: {}", e.code, message);
                    return Err(match e.code {
                        ErrorCode::Unauthenticated => HandshakeFailure::Auth(message),
                        _ if resuming => HandshakeFailure::ResumeRefused(text),
                        ErrorCode::InvalidRequest | ErrorCode::Unimplemented => {
                            HandshakeFailure::WrongDialect(text)
                        }
                        _ => HandshakeFailure::Other(text),
                    });
                }
                Message::Ping(p) => {
                    transport.queue(dialect.encode(&self.pong(p)));
                    let _ = transport.flush(self.config.handshake_timeout).await;
                }
                _ => debug!("ignoring a frame before the session welcome"),
            }
        }
    }

    fn install(
        &mut self,
        transport: Transport,
        dialect: Dialect,
        welcome: Welcome,
        resuming: bool,
    ) {
        let resumed = resuming && self.session.id.as_deref() == Some(welcome.session_id.as_str());
        self.session.resumed = resumed;
        if !resumed {
            self.epoch += 1;
            self.session.last_event_seq = 0;
            self.session.acked_seq = 0;
        }
        let profile = RuntimeProfile::from_welcome(dialect, &welcome);
        let negotiated = welcome
            .extra
            .get("heartbeat_interval_ms")
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
            .or(welcome.heartbeat_interval_sec.map(Duration::from_secs))
            .filter(|d| !d.is_zero());
        self.session.heartbeat = self
            .config
            .heartbeat
            .or(negotiated)
            .or(profile.answers_ping.then_some(self.config.keepalive));
        info!(
            runtime = %profile.name,
            version = %profile.version,
            %dialect,
            session = %welcome.session_id,
            resumed,
            "session established"
        );
        self.session.dialect = Some(dialect);
        self.session.id = Some(welcome.session_id);
        self.session.resume_token = welcome.resume_token;
        self.session.profile = Some(profile);
        self.transport = Some(transport);
        self.generation += 1;
        self.reconnect = None;
        let now = Instant::now();
        self.last_inbound = now;
        self.last_outbound = now;
    }

    /// Drops the connection; every unfinished call will be re-sent with its
    /// key on the next one.
    fn lose_connection(&mut self, reason: &str) {
        if self.transport.take().is_none() {
            return;
        }
        warn!(%reason, calls = self.calls.len(), "connection lost");
        self.by_request.clear();
        self.pending_order.clear();
        self.sent_unanswered = 0;
        self.awaiting_since = None;
        self.window = WINDOW_AFTER_LOSS.min(self.config.max_in_flight);
        self.window_queue.clear();
        let now = Instant::now();
        let max_elapsed = self.config.retry.max_elapsed;
        for (&id, call) in self.calls.iter_mut() {
            match call.phase {
                Phase::Sent { .. } | Phase::Accepted { .. } => {
                    call.awaiting_resume = matches!(call.phase, Phase::Accepted { .. });
                    call.outcome_uncertain = true;
                    call.phase = Phase::Queued { not_before: now };
                    start_recovery(call, now, max_elapsed);
                }
                Phase::Queued { .. } => {}
            }
            self.timers.push(Reverse((call.budget_at, id)));
            call.last_error = Some(format!("connection lost: {reason}"));
            for (waiter, _) in call.cancel_waiters.drain(..) {
                let _ = waiter.send(CancelOutcome::Dispatched);
            }
        }
    }

    // ----- the loop --------------------------------------------------------------

    async fn main_loop(&mut self) {
        loop {
            if self.transport.is_none() {
                if self.calls.is_empty() {
                    // Idle and disconnected: reconnect only when there is work.
                    match self.rx.recv().await {
                        Some(command) => {
                            if !self.handle_command(command) {
                                return;
                            }
                        }
                        None => return,
                    }
                    continue;
                }
                if !self.reconnect_once().await {
                    return;
                }
                continue;
            }

            let wake = self.next_wake();
            let transport = self.transport.as_mut().expect("checked above");
            enum Turn {
                Inbound(Inbound),
                Command(Option<Command>),
                Wake,
            }
            let turn = tokio::select! {
                inbound = transport.recv() => Turn::Inbound(inbound),
                command = self.rx.recv() => Turn::Command(command),
                _ = tokio::time::sleep_until(wake.into()) => Turn::Wake,
            };
            match turn {
                Turn::Inbound(Inbound::Text(text)) => self.on_frame(&text),
                Turn::Inbound(Inbound::Other) => self.last_inbound = Instant::now(),
                Turn::Inbound(Inbound::Closed(reason)) => self.lose_connection(&reason),
                Turn::Command(Some(command)) => {
                    if !self.handle_command(command) {
                        return;
                    }
                }
                Turn::Command(None) => {
                    // Every handle is gone, so nobody awaits an outcome.
                    if let Some(t) = self.transport.take() {
                        t.close().await;
                    }
                    return;
                }
                Turn::Wake => self.on_wake(Instant::now()),
            }
            // Take whatever else is ready before writing, so bursts of calls
            // leave in one flush.
            for _ in 0..MAX_COMMANDS_PER_TURN {
                match self.rx.try_recv() {
                    Ok(command) => {
                        if !self.handle_command(command) {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            self.fill_window();
            self.compact();
            self.maybe_ack();
            self.flush().await;
        }
    }

    async fn flush(&mut self) {
        let timeout = self.write_timeout();
        if let Some(t) = self.transport.as_mut() {
            if t.has_queued() {
                match t.flush(timeout).await {
                    Ok(()) => self.last_outbound = Instant::now(),
                    Err(e) => self.lose_connection(&e),
                }
            }
        }
    }

    /// One reconnect attempt, then (on failure) a backoff wait during which
    /// commands and timers are still served. Returns false when the task
    /// should stop.
    async fn reconnect_once(&mut self) -> bool {
        match self.establish().await {
            Ok(()) => {
                let now = Instant::now();
                let resumed = self.session.resumed;
                let config = self.config.clone();
                let mut ids: Vec<u64> = self.calls.keys().copied().collect();
                ids.sort_unstable();
                for &id in &ids {
                    let call = self.calls.get_mut(&id).expect("listed above");
                    if std::mem::take(&mut call.awaiting_resume) && resumed {
                        // The resumed session may deliver the job's outcome
                        // (buffered or live): wait for it on the ladder
                        // instead of re-sending every accepted call at once.
                        let at = later(now, ladder_wait(call, &config));
                        call.phase = Phase::Accepted {
                            ladder_at: Some(at),
                        };
                        self.timers.push(Reverse((at, id)));
                    }
                }
                for id in ids {
                    self.step(id, now);
                }
                self.flush().await;
                true
            }
            Err(e) => {
                let fatal = matches!(
                    e,
                    Error::Unauthenticated { .. }
                        | Error::Connect {
                            retryable: false,
                            ..
                        }
                );
                warn!(error = %e, fatal, "reconnect failed");
                if fatal {
                    let ids: Vec<u64> = self.calls.keys().copied().collect();
                    for id in ids {
                        self.finish(id, Err(e.clone()));
                    }
                    return true;
                }
                for call in self.calls.values_mut() {
                    call.last_error = Some(e.to_string());
                }
                let delay = self
                    .reconnect
                    .get_or_insert_with(|| self.config.retry.schedule())
                    .next_delay(None);
                self.wait_disconnected(later(Instant::now(), delay)).await
            }
        }
    }

    /// Serves commands and timers while disconnected, until `until`.
    async fn wait_disconnected(&mut self, until: Instant) -> bool {
        loop {
            let now = Instant::now();
            if now >= until || self.calls.is_empty() {
                return true;
            }
            let wake = self.next_timer().map_or(until, |t| t.min(until));
            tokio::select! {
                command = self.rx.recv() => match command {
                    Some(command) => if !self.handle_command(command) { return false },
                    None => return false,
                },
                _ = tokio::time::sleep_until(wake.into()) => self.on_wake(Instant::now()),
            }
        }
    }

    fn next_timer(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((at, _))| *at)
    }

    fn next_wake(&self) -> Instant {
        let mut wake = self
            .next_timer()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        if let Some(interval) = self.session.heartbeat {
            wake = wake
                .min(later(self.last_outbound, interval))
                .min(later(self.last_inbound, interval.saturating_mul(2)));
        }
        if let Some(since) = self.awaiting_since {
            wake = wake.min(later(
                since.max(self.last_inbound),
                self.config.handshake_timeout,
            ));
        }
        if !self.window_queue.is_empty() {
            // Calls waiting for the send window are re-checked at least this
            // often, whatever else wakes the task.
            wake = wake.min(later(Instant::now(), WINDOW_RECHECK));
        }
        if self.session.last_event_seq > self.session.acked_seq && self.accepts_ack() {
            wake = wake.min(self.last_ack_sent + ACK_EVERY);
        }
        wake
    }

    fn on_wake(&mut self, now: Instant) {
        while let Some(Reverse((at, id))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            self.step(id, now);
        }
        if let (Some(since), true) = (self.awaiting_since, self.transport.is_some()) {
            if now.duration_since(since.max(self.last_inbound)) >= self.config.handshake_timeout {
                self.lose_connection("requests unanswered and no frame from the runtime within the handshake timeout");
                return;
            }
        }
        if let (Some(interval), true) = (self.session.heartbeat, self.transport.is_some()) {
            if now.duration_since(self.last_inbound) >= 2 * interval {
                self.lose_connection(
                    "no frame from the runtime for two heartbeat intervals (HEARTBEAT_LOST)",
                );
            } else if now.duration_since(self.last_outbound) >= interval {
                let ping = Frame::new(Message::Ping(Ping {
                    nonce: arcp_types::new_message_id(),
                    sent_at: Some(arcp_types::now_rfc3339()),
                    extra: Default::default(),
                }));
                self.send(ping);
                // Count the probe as traffic so the next one waits a full interval.
                self.last_outbound = now;
            }
        }
    }

    fn accepts_ack(&self) -> bool {
        self.session.profile.as_ref().is_some_and(|p| p.accepts_ack)
    }

    fn maybe_ack(&mut self) {
        let now = Instant::now();
        if self.transport.is_some()
            && self.accepts_ack()
            && self.session.last_event_seq > self.session.acked_seq
            && now.duration_since(self.last_ack_sent) >= ACK_EVERY
        {
            let seq = self.session.last_event_seq;
            self.send(Frame::new(Message::Ack(arcp_types::Ack {
                last_processed_seq: seq,
                extra: Default::default(),
            })));
            self.session.acked_seq = seq;
            self.last_ack_sent = now;
        }
    }

    /// Encodes and queues a frame on the current connection.
    fn send(&mut self, mut frame: Frame) -> Option<String> {
        let dialect = self.dialect();
        let transport = self.transport.as_mut()?;
        frame.envelope.session_id = self.session.id.clone();
        let id = frame.envelope.id.clone();
        transport.queue(dialect.encode(&frame));
        Some(id)
    }

    /// Removes the bearer token from text a runtime sent back (a careless or
    /// hostile runtime may echo it), so it never reaches errors or logs.
    fn redact(&self, text: String) -> String {
        match &self.config.token {
            Some(token) if !token.0.is_empty() && text.contains(token.0.as_str()) => {
                text.replace(token.0.as_str(), "<redacted>")
            }
            _ => text,
        }
    }

    fn pong(&self, ping: Ping) -> Frame {
        let mut frame = Frame::new(Message::Pong(Pong {
            ping_nonce: ping.nonce,
            received_at: Some(arcp_types::now_rfc3339()),
            extra: Default::default(),
        }));
        frame.envelope.session_id = self.session.id.clone();
        frame
    }

    // ----- commands ---------------------------------------------------------------

    /// Returns false when the task should stop.
    fn handle_command(&mut self, command: Command) -> bool {
        match command {
            Command::Invoke(boxed) => {
                let (request, reply) = *boxed;
                self.start_call(request, reply);
                true
            }
            Command::Cancel { key, reply } => {
                self.cancel(key, reply);
                true
            }
            Command::Close { reply } => {
                if self.transport.is_some() {
                    self.send(Frame::new(Message::Close(arcp_types::Close {
                        reason: Some("client closed".into()),
                        extra: Default::default(),
                    })));
                }
                let ids: Vec<u64> = self.calls.keys().copied().collect();
                for id in ids {
                    self.finish(id, Err(Error::Closed));
                }
                let transport = self.transport.take();
                tokio::spawn(async move {
                    if let Some(mut t) = transport {
                        let _ = t.flush(Duration::from_millis(500)).await;
                        t.close().await;
                    }
                    let _ = reply.send(());
                });
                false
            }
        }
    }

    fn start_call(&mut self, mut req: CallRequest, reply: Reply) {
        let now = Instant::now();
        req.invoke.idempotency_key = Some(req.key.to_string());
        let fingerprint = fingerprint(&req.invoke);
        match self.cache.get(&req.key, fingerprint, now) {
            Cached::Hit(outcome) => {
                let _ = reply.send(outcome.map(|mut out| {
                    out.replayed = true;
                    out
                }));
                return;
            }
            Cached::Conflict => {
                let _ = reply.send(Err(Error::DuplicateKey {
                    key: req.key,
                    message:
                        "the key already completed a call with a different intent in this client"
                            .into(),
                    attempts: 0,
                }));
                return;
            }
            Cached::Miss => {}
        }
        if let Some(&existing) = self.by_key.get(&req.key) {
            let call = self
                .calls
                .get_mut(&existing)
                .expect("by_key is in sync with calls");
            if call.fingerprint == fingerprint {
                // The same logical call awaited twice: share one outcome.
                call.replies.push(reply);
            } else {
                let _ = reply.send(Err(Error::DuplicateKey {
                    key: req.key,
                    message: "the key is in use by a call with a different intent in this client"
                        .into(),
                    attempts: 0,
                }));
            }
            return;
        }
        if let Ok(text) = serde_json::to_string(&req.invoke) {
            if text.len() > self.config.max_frame_size {
                let _ = reply.send(Err(Error::InvalidCall(format!(
                    "the request is {} bytes; the frame size limit is {}",
                    text.len(),
                    self.config.max_frame_size
                ))));
                return;
            }
        }
        let id = self.next_call_id;
        self.next_call_id += 1;
        let span = tracing::info_span!(
            "arcp.call",
            tool = %req.invoke.tool,
            key = %req.key,
            trace_id = %req.trace_id,
        );
        let call = Call {
            deadline_at: later(req.started, req.deadline),
            // The retry budget starts at the first failure; until then only
            // the deadline bounds the call.
            budget_at: later(req.started, req.deadline),
            recovering: false,
            awaiting_resume: false,
            req,
            replies: vec![reply],
            fingerprint,
            phase: Phase::Queued { not_before: now },
            attempts: 0,
            job_id: None,
            schedule: None,
            ladder: None,
            outcome_uncertain: false,
            replayed: false,
            last_error: None,
            last_event: None,
            subscribed_generation: None,
            subscribe_refused: false,
            cancel_waiters: Vec::new(),
            dropped_events: 0,
            assembly: None,
            span,
        };
        self.timers.push(Reverse((call.deadline_at, id)));
        self.by_key.insert(call.req.key.clone(), id);
        self.calls.insert(id, Box::new(call));
        self.step(id, now);
    }

    fn cancel(&mut self, key: IdempotencyKey, reply: oneshot::Sender<CancelOutcome>) {
        let Some(&id) = self.by_key.get(&key) else {
            let _ = reply.send(CancelOutcome::AlreadyFinished);
            return;
        };
        let Some(job_id) = self.calls[&id].job_id.clone() else {
            let _ = reply.send(CancelOutcome::NotDispatched {
                reason: "the runtime has not accepted the call yet; there is no job to cancel"
                    .into(),
            });
            return;
        };
        let frame = Frame::new(Message::Cancel(arcp_types::Cancel {
            job_id,
            reason: Some("cancelled by the caller".into()),
            extra: Default::default(),
        }));
        let Some(request_id) = self.send(frame) else {
            let _ = reply.send(CancelOutcome::NotDispatched {
                reason: "not connected; the cancel was not sent".into(),
            });
            return;
        };
        self.by_request
            .insert(request_id.clone(), Pending::Cancel(id));
        self.pending_order.push_back(request_id);
        let until = later(Instant::now(), self.config.handshake_timeout);
        self.calls
            .get_mut(&id)
            .expect("looked up above")
            .cancel_waiters
            .push((reply, until));
        self.timers.push(Reverse((until, id)));
    }

    // ----- the per-call state machine --------------------------------------------

    /// Decides what call `id` does next. Idempotent: timers may fire late or
    /// twice.
    fn step(&mut self, id: u64, now: Instant) {
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        if call.replies.iter().all(|r| r.is_closed()) {
            // Every caller dropped its future: nobody wants the outcome.
            debug!(parent: &call.span, "call abandoned by its caller");
            self.forget(id);
            return;
        }
        if now >= call.deadline_at {
            let err = Error::DeadlineExceeded {
                key: call.req.key.clone(),
                job_id: call.job_id.clone(),
                deadline: call.req.deadline,
                attempts: 0,
            };
            self.finish(id, Err(err));
            return;
        }
        let call = self.calls.get_mut(&id).expect("present");
        // Cancels the runtime did not confirm in time were still dispatched.
        let mut expired = Vec::new();
        for (waiter, until) in std::mem::take(&mut call.cancel_waiters) {
            if until <= now {
                expired.push(waiter);
            } else {
                call.cancel_waiters.push((waiter, until));
            }
        }
        for waiter in expired {
            let _ = waiter.send(CancelOutcome::Dispatched);
        }
        match call.phase {
            Phase::Queued { not_before } => {
                let max_attempts = self.config.retry.max_attempts;
                if call.attempts >= max_attempts || now >= call.budget_at {
                    self.give_up(id, "retry budget exhausted");
                } else if now < not_before {
                    self.timers
                        .push(Reverse((not_before.min(call.budget_at), id)));
                } else if self.transport.is_some() {
                    if self.sent_unanswered < self.window {
                        self.send_attempt(id);
                    } else {
                        // The send window is full: wait for an answer.
                        self.timers.push(Reverse((call.budget_at, id)));
                        self.window_queue.push_back(id);
                    }
                } else {
                    // Disconnected: waiting for a connection is retrying.
                    start_recovery(call, now, self.config.retry.max_elapsed);
                    // The reconnect loop steps every call on success.
                    self.timers.push(Reverse((call.budget_at, id)));
                }
            }
            // Waiting on an untrusted stream counts against the retry budget
            // (a resumed session that keeps dying never re-sends).
            Phase::Accepted { ladder_at: Some(_) } if call.recovering && now >= call.budget_at => {
                self.give_up(id, "retry budget exhausted")
            }
            Phase::Accepted {
                ladder_at: Some(at),
            } if now >= at => self.ladder_step(id, now),
            Phase::Accepted {
                ladder_at: Some(at),
            } => self.timers.push(Reverse((at, id))),
            Phase::Sent { .. } | Phase::Accepted { ladder_at: None } => {}
        }
    }

    fn send_attempt(&mut self, id: u64) {
        let dialect = self.dialect();
        let session_id = self.session.id.clone();
        let Some(transport) = self.transport.as_mut() else {
            return;
        };
        let call = self.calls.get_mut(&id).expect("present");
        call.attempts += 1;
        if let Some(recorder) = &call.req.recorder {
            recorder.sent(&call.req.key, call.attempts);
        }
        // The intent is the same `Invoke` value every time, so the payload
        // is byte-identical; only the envelope (id, timestamp) is new.
        let mut frame = Frame::new(Message::Invoke(call.req.invoke.clone()));
        frame.envelope.session_id = session_id;
        frame.envelope.trace_id = Some(call.req.trace_id.clone());
        let request_id = frame.envelope.id.clone();
        transport.queue(dialect.encode(&frame));
        debug!(parent: &call.span, attempt = call.attempts, request_id = %request_id, "request sent");
        call.phase = Phase::Sent {
            request_id: request_id.clone(),
        };
        self.by_request
            .insert(request_id.clone(), Pending::Submit(id));
        self.pending_order.push_back(request_id);
        self.sent_unanswered += 1;
        self.awaiting_since.get_or_insert_with(Instant::now);
    }

    /// A call left `Sent` (answered, refused or finished): its slot is
    /// free and the window grows by one (slow start).
    fn answered(&mut self) {
        self.sent_unanswered = self.sent_unanswered.saturating_sub(1);
        self.awaiting_since = (self.sent_unanswered > 0).then(Instant::now);
        self.window = (self.window + 1).min(self.config.max_in_flight);
    }

    /// Drops bookkeeping of finished calls, which is removed lazily: the
    /// send-order records of answered requests, and the timers of calls that
    /// ended (otherwise each lives until the call's deadline, so memory would
    /// grow with call rate x deadline). Amortised O(1).
    fn compact(&mut self) {
        if self.pending_order.len() > 2 * self.by_request.len() + 64 {
            let by_request = &self.by_request;
            self.pending_order.retain(|r| by_request.contains_key(r));
        }
        // Amortised: compact only when the heap has doubled since the last
        // time (a call may hold a few live timers, so "more timers than
        // calls" alone would compact on every turn).
        if self.timers.len() > self.timers_compact_at {
            let calls = &self.calls;
            let mut live: Vec<_> = std::mem::take(&mut self.timers)
                .into_vec()
                .into_iter()
                .filter(|Reverse((_, id))| calls.contains_key(id))
                .collect();
            live.sort_unstable();
            live.dedup();
            self.timers = BinaryHeap::from(live);
            self.timers_compact_at = (2 * self.timers.len()).max(TIMER_COMPACT_MIN);
        }
    }

    /// Sends calls that were waiting for the window, oldest first.
    fn fill_window(&mut self) {
        let now = Instant::now();
        while self.sent_unanswered < self.window && self.transport.is_some() {
            let Some(id) = self.window_queue.pop_front() else {
                break;
            };
            self.step(id, now);
        }
    }

    /// The job was accepted but its outcome is not coming on the live
    /// stream: subscribe (where the runtime offers it), else re-send with
    /// the same key, until the budget is spent.
    fn ladder_step(&mut self, id: u64, now: Instant) {
        let generation = self.generation;
        let supports_subscribe = self
            .session
            .profile
            .as_ref()
            .is_some_and(|p| p.supports_subscribe);
        let call = self.calls.get_mut(&id).expect("present");
        let subscribe = supports_subscribe
            && !call.subscribe_refused
            && call.subscribed_generation != Some(generation)
            && call.job_id.is_some()
            && self.transport.is_some();
        if subscribe {
            call.subscribed_generation = Some(generation);
            let frame = Frame::new(Message::Subscribe(Subscribe {
                job_id: call.job_id.clone().expect("checked"),
                from_event_seq: Some(0),
                history: Some(true),
                extra: Default::default(),
            }));
            let wait = ladder_wait(call, &self.config);
            call.phase = Phase::Accepted {
                ladder_at: Some(later(now, wait)),
            };
            debug!(parent: &call.span, "subscribing to the job's stream with history");
            if let Some(request_id) = self.send(frame) {
                self.by_request
                    .insert(request_id.clone(), Pending::Subscribe(id));
                self.pending_order.push_back(request_id);
            }
            self.timers.push(Reverse((later(now, wait), id)));
        } else {
            debug!(parent: &call.span, "no outcome on the live stream; re-sending with the same key");
            call.last_error = Some(
                "the runtime answered with job.accepted only; no outcome was delivered".into(),
            );
            call.phase = Phase::Queued { not_before: now };
            self.step(id, now);
        }
    }

    fn give_up(&mut self, id: u64, reason: &str) {
        let call = &self.calls[&id];
        let err = Error::give_up(
            &call.req.key,
            call.job_id.as_deref(),
            call.outcome_uncertain,
            call.attempts,
            reason,
            call.last_error.as_deref(),
        );
        self.finish(id, Err(err));
    }

    /// Resolves a call: answers every waiter, caches a terminal outcome,
    /// and removes all state of the call.
    fn finish(&mut self, id: u64, outcome: Outcome) {
        let Some(call) = self.forget(id) else {
            return;
        };
        let outcome = outcome.map_err(|e| e.with_attempts(call.attempts));
        // A `DuplicateKey` refusal is not the key's outcome (the key belongs
        // to another intent), so it is not cached.
        let terminal = matches!(
            outcome,
            Ok(_) | Err(Error::Tool(_) | Error::Cancelled { .. })
        );
        match &outcome {
            Ok(out) => {
                info!(parent: &call.span, attempts = out.attempts, replayed = out.replayed, job_id = ?out.job_id, "call succeeded")
            }
            Err(e) => {
                info!(parent: &call.span, attempts = call.attempts, error = %e, "call failed")
            }
        }
        if call.dropped_events > 0 {
            warn!(parent: &call.span, dropped = call.dropped_events, "events dropped: the caller did not drain the event stream");
        }
        if terminal {
            self.cache.insert(
                call.req.key.clone(),
                call.fingerprint,
                outcome.clone(),
                Instant::now(),
            );
        }
        let cancelled = matches!(outcome, Err(Error::Cancelled { .. }));
        for (waiter, _) in call.cancel_waiters {
            let _ = waiter.send(if cancelled {
                CancelOutcome::Acknowledged
            } else {
                CancelOutcome::AlreadyFinished
            });
        }
        for reply in call.replies {
            let _ = reply.send(outcome.clone());
        }
    }

    /// Removes every trace of a call (maps, pending requests) and returns it.
    fn forget(&mut self, id: u64) -> Option<Box<Call>> {
        let call = self.calls.remove(&id)?;
        self.by_key.remove(&call.req.key);
        if let Some(job) = &call.job_id {
            if self.by_job.get(job) == Some(&id) {
                self.by_job.remove(job);
            }
        }
        if let Phase::Sent { request_id } = &call.phase {
            self.by_request.remove(request_id);
            self.answered();
        }
        Some(call)
    }

    // ----- inbound ------------------------------------------------------------------

    fn on_frame(&mut self, text: &str) {
        self.last_inbound = Instant::now();
        let frame = match self.dialect().decode(text) {
            Ok(frame) => frame,
            Err(e) => {
                warn!(error = %e, "skipping a frame that does not decode");
                return;
            }
        };
        if let Some(seq) = frame.envelope.event_seq {
            self.session.last_event_seq = self.session.last_event_seq.max(seq);
        }
        let Frame { envelope, message } = frame;
        match message {
            Message::Ping(ping) => {
                let pong = self.pong(ping);
                self.send(pong);
            }
            Message::Pong(_) | Message::Welcome(_) | Message::Jobs(_) | Message::Started(_) => {}
            Message::Accepted(accepted) => {
                let request_id = accepted
                    .request_id
                    .clone()
                    .or(envelope.correlation_id.clone());
                self.on_accepted(&envelope, request_id, Some(accepted.job_id));
            }
            Message::Receipt(receipt) if receipt.replay => {
                // An older runtime's "duplicate" answer: bound, no outcome.
                let job_id = receipt.job_id.or(envelope.job_id.clone());
                self.on_accepted(&envelope, envelope.correlation_id.clone(), job_id);
            }
            Message::Receipt(_) => {}
            Message::Event(event) => self.on_event(&envelope, event),
            Message::Result(result) => self.on_result(&envelope, result),
            Message::Cancelled(_) => {
                if let Some(id) = self.call_for(&envelope, None) {
                    let call = &self.calls[&id];
                    let err = Error::Cancelled {
                        key: call.req.key.clone(),
                        job_id: call.job_id.clone().or(envelope.job_id.clone()),
                        attempts: 0,
                    };
                    self.finish(id, Err(err));
                }
            }
            Message::Error(e)
            | Message::Nack(e)
            | Message::SessionError(e)
            | Message::Rejected(e) => self.on_error(&envelope, e),
            Message::CancelAccepted(_) => {
                self.on_cancel_reply(&envelope, CancelOutcome::Acknowledged)
            }
            Message::CancelRefused(body) => {
                let reason = body
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("refused")
                    .to_owned();
                self.on_cancel_reply(&envelope, CancelOutcome::Refused { reason });
            }
            Message::Subscribed(_) => {
                if let Some(request_id) = envelope.correlation_id.as_deref() {
                    self.by_request.remove(request_id);
                }
            }
            Message::Evicted(_) | Message::Closed(_) => {
                self.forget_session();
                self.lose_connection("the runtime ended the session");
            }
            other => {
                debug!(message = ?std::mem::discriminant(&other), "ignoring an unexpected message")
            }
        }
    }

    /// The call a frame is about: by the request it answers, else by job.
    fn call_for(&self, envelope: &Envelope, request_id: Option<&str>) -> Option<u64> {
        let by_request = request_id
            .or(envelope.correlation_id.as_deref())
            .and_then(|r| match self.by_request.get(r) {
                Some(Pending::Submit(id) | Pending::Subscribe(id) | Pending::Cancel(id)) => {
                    Some(*id)
                }
                None => None,
            });
        by_request.or_else(|| {
            envelope
                .job_id
                .as_deref()
                .and_then(|j| self.by_job.get(j).copied())
        })
    }

    /// The oldest request on this connection still awaiting an answer.
    fn oldest_pending(&mut self) -> Option<(String, Pending)> {
        while let Some(front) = self.pending_order.front() {
            if let Some(p) = self.by_request.get(front) {
                return Some((front.clone(), *p));
            }
            self.pending_order.pop_front();
        }
        None
    }

    fn on_accepted(
        &mut self,
        envelope: &Envelope,
        request_id: Option<String>,
        job_id: Option<String>,
    ) {
        let now = Instant::now();
        let id = match request_id
            .as_deref()
            .and_then(|r| self.by_request.get(r).copied())
        {
            Some(Pending::Submit(id)) => Some(id),
            Some(_) => None,
            None if request_id.is_none() => {
                // No request named: runtimes answer in order.
                match self.oldest_pending() {
                    Some((_, Pending::Submit(id))) => Some(id),
                    _ => None,
                }
            }
            None => None,
        };
        let Some(id) = id else {
            debug!(
                ?request_id,
                ?job_id,
                "accept for a request that is no longer pending"
            );
            return;
        };
        // Runtimes that re-send a stored accept from another session, or mark
        // a replayed accept by echoing the key, say it is not a fresh job.
        let key_echo = envelope.idempotency_key.is_some()
            && self
                .session
                .profile
                .as_ref()
                .is_some_and(|p| p.key_echo_marks_replay);
        let foreign = is_foreign(envelope, self.session.id.as_deref()) || key_echo;
        let config = self.config.clone();
        let call = self
            .calls
            .get_mut(&id)
            .expect("pending entries point at live calls");
        let Phase::Sent {
            request_id: current,
        } = &call.phase
        else {
            return;
        };
        self.by_request.remove(current);
        // A replay when an earlier attempt may have bound the job, or the
        // accept comes from another session (a stored accept re-sent).
        let replay = call.outcome_uncertain || call.job_id.is_some() || foreign;
        call.replayed |= replay;
        if let Some(job) = job_id {
            if call.job_id.as_deref() != Some(job.as_str()) {
                let _ = call.req.shared.job_id.set(job.clone());
                call.job_id = Some(job.clone());
            }
            self.by_job.insert(job, id);
        }
        if let (Some(recorder), Some(job)) = (&call.req.recorder, &call.job_id) {
            recorder.accepted(&call.req.key, job);
        }
        if replay {
            start_recovery(call, now, config.retry.max_elapsed);
        }
        let ladder_at = replay.then(|| later(now, ladder_wait(call, &config)));
        debug!(parent: &call.span, job_id = ?call.job_id, replay, "accepted");
        call.phase = Phase::Accepted { ladder_at };
        if let Some(at) = ladder_at {
            self.timers.push(Reverse((at, id)));
        }
        self.answered();
    }

    fn on_event(&mut self, envelope: &Envelope, event: JobEvent) {
        let Some(id) = self.call_for(envelope, None) else {
            debug!(job_id = ?envelope.job_id, "event for a job no call is waiting on");
            return;
        };
        let now = Instant::now();
        let epoch = self.epoch;
        let config = self.config.clone();
        let call = self.calls.get_mut(&id).expect("maps point at live calls");
        // Any event of the job (even a repeat) shows its stream reaches us:
        // the ladder waits again instead of re-sending.
        if let Phase::Accepted { ladder_at: Some(_) } = call.phase {
            let at = later(now, ladder_current(call, &config));
            call.phase = Phase::Accepted {
                ladder_at: Some(at),
            };
            self.timers.push(Reverse((at, id)));
        }
        if let Some(seq) = envelope.event_seq {
            if call.last_event.is_some_and(|last| last >= (epoch, seq)) {
                return; // already delivered (replay after resume or subscribe)
            }
            call.last_event = Some((epoch, seq));
        }
        if event.kind == "result_chunk" {
            let typed = event.typed();
            if let arcp_types::EventBody::ResultChunk {
                result_id,
                encoding,
                ..
            } = &typed
            {
                let assembly = call.assembly.get_or_insert_with(|| Assembly {
                    result_id: result_id.clone(),
                    base64: encoding == "base64",
                    bytes: Vec::new(),
                    next_chunk: 0,
                    broken: false,
                });
                assembly.push(&typed, config.max_result_size);
            }
        }
        let event = InvocationEvent {
            event_seq: envelope.event_seq,
            event,
        };
        if !call.req.shared.deliver(event) {
            call.dropped_events += 1;
        }
    }

    fn on_result(&mut self, envelope: &Envelope, result: JobResult) {
        let Some(id) = self.call_for(envelope, None) else {
            debug!(job_id = ?envelope.job_id, "result for a job no call is waiting on");
            return;
        };
        let foreign = is_foreign(envelope, self.session.id.as_deref());
        let call = self.calls.get_mut(&id).expect("maps point at live calls");
        let assembly = call.assembly.take();
        let call = &self.calls[&id];
        let key = call.req.key.clone();
        let job_id = call.job_id.clone().or(envelope.job_id.clone());
        // A result with no acceptance before it on this attempt is a stored
        // outcome re-sent (runtimes accept a fresh job before it runs).
        let unaccepted = matches!(call.phase, Phase::Sent { .. });
        let replayed = call.replayed || foreign || unaccepted;
        let streamed = result.extra.get("result_id").and_then(Value::as_str);
        let assembled = match (assembly, streamed) {
            (Some(a), Some(id)) if a.result_id == id => a.value(),
            _ => None,
        };
        let value = match read_result(result, assembled) {
            ResultReading::Value(value) => value,
            ResultReading::Failed { code, message } => {
                let err = ToolError {
                    attempts: 0,
                    retryable: code.default_retryable(),
                    code,
                    message: self.redact(message),
                    details: None,
                    replayed,
                    job_id,
                    key,
                };
                self.finish(id, Err(Error::Tool(Box::new(err))));
                return;
            }
        };
        let out = ToolOutput {
            value,
            job_id,
            key,
            replayed,
            attempts: call.attempts,
            trace_id: call.req.trace_id.clone(),
        };
        self.finish(id, Ok(out));
    }

    fn on_error(&mut self, envelope: &Envelope, e: ErrorReply) {
        let request_id = e.request_id.clone().or(envelope.correlation_id.clone());
        // 1. by the request it names; 2. by job; 3. the oldest request awaiting
        // an answer (runtimes answer in order; v1.1 `session.error` names none).
        let target = match request_id
            .as_deref()
            .and_then(|r| self.by_request.get(r).copied())
        {
            Some(p) => Some(p),
            None => match envelope
                .job_id
                .as_deref()
                .and_then(|j| self.by_job.get(j).copied())
            {
                Some(id) => Some(Pending::Submit(id)),
                None if request_id.is_none() && envelope.job_id.is_none() => {
                    self.oldest_pending().map(|(_, p)| p)
                }
                None => None,
            },
        };
        let Some(target) = target else {
            warn!(code = %e.code, message = %e.message, "error for no pending request; ignored");
            return;
        };
        match target {
            Pending::Subscribe(id) => {
                if let Some(r) = request_id
                    .as_deref()
                    .or_else(|| self.pending_order.front().map(String::as_str))
                {
                    let r = r.to_owned();
                    self.by_request.remove(&r);
                }
                if let Some(call) = self.calls.get_mut(&id) {
                    debug!(parent: &call.span, code = %e.code, "subscribe refused; the ladder re-sends instead");
                    call.subscribe_refused = true;
                }
            }
            Pending::Cancel(id) => {
                self.remove_pending_of(id, |p| matches!(p, Pending::Cancel(_)));
                if let Some(call) = self.calls.get_mut(&id) {
                    if !call.cancel_waiters.is_empty() {
                        let (waiter, _) = call.cancel_waiters.remove(0);
                        let _ = waiter.send(CancelOutcome::Refused {
                            reason: format!("{}: {}", e.code, e.message),
                        });
                    }
                }
            }
            Pending::Submit(id) => self.on_call_error(id, envelope, e),
        }
    }

    fn remove_pending_of(&mut self, id: u64, kind: impl Fn(&Pending) -> bool) {
        let found = self.pending_order.iter().find(|r| {
            self.by_request
                .get(*r)
                .is_some_and(|p| kind(p) && pending_call(p) == id)
        });
        if let Some(r) = found.cloned() {
            self.by_request.remove(&r);
        }
    }

    fn on_call_error(&mut self, id: u64, envelope: &Envelope, mut e: ErrorReply) {
        e.message = self.redact(e.message);
        let foreign = is_foreign(envelope, self.session.id.as_deref());
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        let key = call.req.key.clone();
        if is_duplicate_key(&e) {
            self.finish(
                id,
                Err(Error::DuplicateKey {
                    key,
                    message: e.message,
                    attempts: 0,
                }),
            );
            return;
        }
        if let Phase::Sent { request_id } = &call.phase {
            let request_id = request_id.clone();
            self.by_request.remove(&request_id);
            if e.is_retryable() {
                // Refused before acceptance, transiently: the job was not
                // created by this attempt; retry with the same key.
                let floor = e.retry_after();
                let retry = &self.config.retry;
                let delay = call
                    .schedule
                    .get_or_insert_with(|| retry.schedule())
                    .next_delay(floor);
                call.last_error = Some(format!("{}: {}", e.code, e.message));
                let now = Instant::now();
                start_recovery(call, now, self.config.retry.max_elapsed);
                let not_before = later(now, delay);
                debug!(parent: &call.span, code = %e.code, ?delay, "transient rejection; retrying with the same key");
                call.phase = Phase::Queued { not_before };
                self.timers.push(Reverse((not_before, id)));
                self.answered();
                return;
            }
        }
        let err = ToolError {
            attempts: 0,
            retryable: e.is_retryable(),
            code: e.code,
            message: e.message,
            details: e.details,
            replayed: call.replayed || foreign,
            job_id: call.job_id.clone().or(envelope.job_id.clone()),
            key,
        };
        self.finish(id, Err(Error::Tool(Box::new(err))));
    }

    fn on_cancel_reply(&mut self, envelope: &Envelope, outcome: CancelOutcome) {
        let id = match envelope
            .correlation_id
            .as_deref()
            .and_then(|r| self.by_request.get(r).copied())
        {
            Some(Pending::Cancel(id)) => Some(id),
            _ => envelope
                .job_id
                .as_deref()
                .and_then(|j| self.by_job.get(j).copied()),
        };
        let Some(id) = id else { return };
        self.remove_pending_of(id, |p| matches!(p, Pending::Cancel(_)));
        if let Some(call) = self.calls.get_mut(&id) {
            if !call.cancel_waiters.is_empty() {
                let (waiter, _) = call.cancel_waiters.remove(0);
                let _ = waiter.send(outcome);
            }
        }
    }
}

fn pending_call(p: &Pending) -> u64 {
    match p {
        Pending::Submit(id) | Pending::Subscribe(id) | Pending::Cancel(id) => *id,
    }
}

/// How long the ladder waits on the live stream before its next step. Each
/// step waits longer; a job event restarts the current wait without growing it.
fn ladder_wait(call: &mut Call, config: &Config) -> Duration {
    let retry = &config.retry;
    call.ladder
        .get_or_insert_with(|| retry.ladder())
        .next_ceiling()
}

fn ladder_current(call: &mut Call, config: &Config) -> Duration {
    match &call.ladder {
        Some(schedule) => schedule.current(),
        None => ladder_wait(call, config),
    }
}

/// Starts the retry budget's clock at the call's first failure, so a long
/// call that fails late still gets its full budget.
fn start_recovery(call: &mut Call, now: Instant, max_elapsed: Duration) {
    if !call.recovering {
        call.recovering = true;
        call.budget_at = later(now, max_elapsed);
    }
}

/// A frame re-sent from another session (a replayed, stored answer).
fn is_foreign(envelope: &Envelope, session: Option<&str>) -> bool {
    matches!((envelope.session_id.as_deref(), session), (Some(theirs), Some(ours)) if theirs != ours)
}
