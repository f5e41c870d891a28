//! The v1.1 front-end, as the Python 1.1.3 runtime answers: envelope checks,
//! `session.hello` / `session.welcome` with resume, `job.subscribe`,
//! `session.ack`, `job.cancel`, and the HTTP binding's `POST` (one v1.1
//! `job.submit` envelope). Each frame is decoded here and handed to the
//! shared operations.

use std::time::Duration;

use arcp_types::{
    is_message_id, now_rfc3339, Auth, Cancel, Dialect, Envelope, ErrorCode, Frame, Message, Open,
    PeerInfo, Subscribe, Welcome, PROTOCOL_VERSION,
};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use super::conns::Out;
use super::flavor::{new_id, object, session_error};
use super::sessions::ceil_secs;
use super::state::{Host, State};
use super::submit::{Caller, Submitted};
use crate::fault::Fault;

/// What the HTTP binding answers one `POST` with (`crate::http` maps it to
/// a status).
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

/// The checks every v1.1 envelope passes, then its decoding: the frame and
/// its wire type, or why it is refused.
fn validate(envelope: Envelope) -> Result<(String, Frame), String> {
    if envelope.arcp != PROTOCOL_VERSION {
        return Err(format!(
            "arcp must be '{PROTOCOL_VERSION}', got '{}'",
            envelope.arcp
        ));
    }
    if !is_message_id(&envelope.id, false) {
        return Err(format!(
            "id must be a ULID or UUIDv7, got '{}'",
            envelope.id
        ));
    }
    let kind = envelope.kind.clone();
    let frame = Dialect::V1_1
        .decode_envelope(envelope)
        .map_err(|e| e.to_string())?;
    Ok((kind, frame))
}

/// A text frame that is not an envelope.
pub(super) fn malformed(st: &mut State, conn: u64, why: String) {
    invalid(st, conn, why);
}

/// One envelope from a WebSocket client (already recorded).
pub(super) fn receive(st: &mut State, host: &Host, conn: u64, envelope: Envelope) {
    let (kind, Frame { envelope, message }) = match validate(envelope) {
        Ok(decoded) => decoded,
        Err(why) => return invalid(st, conn, why),
    };
    if let Message::Open(open) = message {
        return hello(st, conn, open);
    }
    if st.conns.session(conn).is_none() {
        return invalid(st, conn, "no session: send session.hello first".into());
    }
    match message {
        Message::Ping(ping) => st.on_ping(conn, &envelope, ping),
        Message::Pong(_) => {}
        Message::Ack(ack) => {
            if let Some(sid) = st.conns.session(conn) {
                st.sessions.ack(&sid, ack.last_processed_seq);
            }
        }
        Message::Close(_) => st.close(conn),
        Message::ListJobs(_) => st.on_list_jobs(conn, &envelope),
        Message::Invoke(invoke) => {
            st.submit(host, Caller::Socket(conn), &envelope.id, invoke);
        }
        Message::Cancel(cancel) => on_cancel(st, conn, &envelope, cancel),
        Message::Subscribe(sub) if st.cfg.subscribe => subscribe(st, conn, &envelope, sub),
        Message::Unknown(u) => invalid(st, conn, format!("unknown envelope type: '{}'", u.kind)),
        _ => invalid(st, conn, format!("unsupported envelope type: '{kind}'")),
    }
}

/// `session.error INVALID_REQUEST`; the connection stays.
fn invalid(st: &mut State, conn: u64, message: String) {
    let error = session_error(ErrorCode::InvalidRequest, message);
    let frame = st.reply(conn, Message::SessionError(error));
    st.send(conn, frame);
}

/// A refused handshake: `session.error`, then close.
fn refuse(st: &mut State, conn: u64, code: ErrorCode, message: String) {
    let frame = st.reply(conn, Message::SessionError(session_error(code, message)));
    st.send(conn, frame);
    st.close(conn);
}

/// `session.hello`: a new session, or a resume of a detached one (its
/// buffered envelopes after `last_event_seq` follow the welcome).
fn hello(st: &mut State, conn: u64, open: Open) {
    if st.fault(|f| matches!(f, Fault::DropDuringHandshake)) {
        return st.kill(conn);
    }
    if st.conns.session(conn).is_some() {
        return invalid(st, conn, "session already established".into());
    }
    let Ok(principal) = st.authenticate(&open.auth) else {
        let why = "invalid bearer token".into();
        return refuse(st, conn, ErrorCode::Unauthenticated, why);
    };
    let features: Vec<&str> = open
        .capabilities
        .get("features")
        .and_then(Value::as_array)
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let heartbeat = st.cfg.heartbeat.filter(|_| features.contains(&"heartbeat"));
    let agent_versions = features.contains(&"agent_versions");

    let (session_id, replay_after) = match &open.resume {
        None => {
            let id = new_id("sess");
            st.sessions.open(id.clone(), principal.clone(), None);
            (id, None)
        }
        Some(resume) => match st
            .sessions
            .check_resume(&principal, resume, st.cfg.resume_window)
        {
            Ok(()) => (resume.session_id.clone(), Some(resume.last_event_seq)),
            Err((code, message)) => return refuse(st, conn, code, message),
        },
    };
    let token = new_id("rtk");
    let Some((previous, replay)) =
        st.sessions
            .attach(&session_id, conn, token.clone(), replay_after)
    else {
        return;
    };
    // A resume while the old connection still looks alive takes over.
    if let Some(old) = previous {
        st.abort(old);
    }
    st.bind(conn, &session_id, principal);
    if let (Some(c), Some(interval)) = (st.conns.get(conn), heartbeat) {
        c.link.heartbeat.send_replace(Some(interval));
    }
    let welcome = welcome(st, &session_id, token, heartbeat, agent_versions);
    st.send(conn, welcome);
    for frame in replay {
        st.send(conn, frame);
    }
}

/// `session.welcome`, with the features and agents as Python lists them.
fn welcome(
    st: &State,
    session_id: &str,
    token: String,
    heartbeat: Option<Duration>,
    agent_versions: bool,
) -> Frame {
    let cfg = &st.cfg;
    let mut tools: Vec<&String> = st.tools.keys().collect();
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
        let millis = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
        extra.insert("heartbeat_interval_ms".into(), json!(millis));
    }
    let runtime = PeerInfo::new(cfg.runtime_name.clone(), cfg.runtime_version.clone());
    let mut welcome = Welcome::new(session_id, runtime)
        .with_resume(token, Some(ceil_secs(cfg.resume_window)))
        .with_capabilities(json!({
            "encodings": ["json"],
            "features": features,
            "agents": agents,
        }))
        .with_extra(extra);
    welcome.heartbeat_interval_sec = heartbeat.map(ceil_secs);
    let mut frame = st.flavor.frame(Message::Welcome(welcome));
    frame.envelope.session_id = Some(session_id.to_owned());
    frame
}

/// `job.subscribe` (when offered): `job.subscribed`, the job's buffered
/// events after `from_event_seq` when `history` is asked, the terminal if
/// the job has finished, then live events.
fn subscribe(st: &mut State, conn: u64, envelope: &Envelope, sub: Subscribe) {
    let principal = st.conns.principal(conn);
    let Some(sid) = st.conns.session(conn) else {
        return;
    };
    let refusal = match st.jobs.get(&sub.job_id) {
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
        let frame = st.reply(conn, Message::SessionError(error));
        st.send(conn, frame);
        return;
    }
    let Some(job) = st.jobs.get(&sub.job_id) else {
        return;
    };
    let with_history = sub.history.unwrap_or(false);
    let from = sub.from_event_seq.unwrap_or(0);
    let history: Vec<Frame> = if with_history {
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
    let terminal = job.terminal();
    let body = json!({
        "job_id": job.id,
        "current_status": job.status_name(),
        "agent": job.tool,
        "lease": {},
        "subscribed_from": if with_history { from } else { latest },
        "replayed": !history.is_empty(),
        "request_id": envelope.id,
    });
    let job_id = job.id.clone();
    let mut frame = st.reply(conn, Message::Subscribed(object(body)));
    frame.envelope.job_id = Some(job_id.clone());
    st.send(conn, frame);
    for event in history {
        st.deliver_to(conn, &sid, event);
    }
    if let Some(terminal) = terminal {
        return st.deliver_to(conn, &sid, terminal);
    }
    let conns = &st.conns;
    if let Some(job) = st.jobs.get_mut(&job_id) {
        job.subscribe(conn, sid, |c| conns.is_live(c));
    }
}

/// `job.cancel`: refused with `session.error JOB_NOT_FOUND`; else (with
/// [`crate::MockRuntimeBuilder::cancel_ack`]) `job.cancelled`, then the
/// terminal.
fn on_cancel(st: &mut State, conn: u64, envelope: &Envelope, cancel: Cancel) {
    let job_id = cancel.job_id;
    if let Some(reason) = st.cancel_refusal(conn, &job_id) {
        let mut error = session_error(ErrorCode::JobNotFound, format!("{reason}: {job_id}"));
        error.request_id = Some(envelope.id.clone());
        let frame = st.reply(conn, Message::SessionError(error));
        st.send(conn, frame);
        return;
    }
    if st.cfg.cancel_ack {
        let ack = Message::CancelAccepted(object(json!({"job_id": job_id})));
        let mut frame = st.reply(conn, ack);
        frame.envelope.job_id = Some(job_id.clone());
        st.send(conn, frame);
    }
    st.cancel_job(&job_id);
}

/// One `POST` of the HTTP binding, on connection `conn` (allocated, not yet
/// registered): the envelope checks of a WebSocket frame, the header key
/// merged into the payload, the credentials, then the shared submit (whose
/// frames go to `tx`).
#[allow(clippy::too_many_arguments)] // a request's parts, passed through once
pub(super) fn http_submit(
    st: &mut State,
    host: &Host,
    blackholed: bool,
    conn: u64,
    auth: &Auth,
    header_key: Option<&str>,
    body: &str,
    tx: mpsc::Sender<Out>,
) -> HttpSubmit {
    let envelope: Envelope = match serde_json::from_str(body) {
        Ok(envelope) => envelope,
        Err(e) => return HttpSubmit::BadRequest(format!("invalid envelope: {e}")),
    };
    st.record(conn, envelope.clone());
    if blackholed {
        return HttpSubmit::Ignored;
    }
    let (kind, Frame { envelope, message }) = match validate(envelope) {
        Ok(decoded) => decoded,
        Err(why) => return HttpSubmit::BadRequest(why),
    };
    let Message::Invoke(mut invoke) = message else {
        return HttpSubmit::BadRequest(format!(
            "the HTTP binding takes one job.submit envelope per request, got '{kind}'"
        ));
    };
    match (header_key, invoke.idempotency_key.as_deref()) {
        (Some(header), Some(payload)) if header != payload => {
            let why = "the Idempotency-Key header and the payload's idempotency_key differ";
            return HttpSubmit::BadRequest(why.into());
        }
        (Some(header), None) => invoke.idempotency_key = Some(header.to_owned()),
        _ => {}
    }
    let principal = match st.authenticate(auth) {
        Ok(principal) => principal,
        Err(message) => return HttpSubmit::Unauthenticated(message.to_owned()),
    };
    let key = invoke.idempotency_key.clone().unwrap_or_default();
    let caller = Caller::Http {
        conn,
        tx,
        principal,
    };
    match st.submit(host, caller, &envelope.id, invoke) {
        Submitted::Answered => HttpSubmit::Started(conn),
        Submitted::InFlight => HttpSubmit::InFlight,
        Submitted::Replay(terminal) => HttpSubmit::Replay(terminal),
        Submitted::Conflict => HttpSubmit::Conflict(format!(
            "idempotency key '{key}' already used with different parameters"
        )),
    }
}
