//! The legacy front-end, as the Rust 2.0.0 runtime answers: envelope checks
//! (a frame it cannot parse drops the TCP connection), `session.open` /
//! `session.accepted` without resume, `cancel`, `session.close`, and `nack
//! UNIMPLEMENTED` for subscriptions. Each frame is decoded here and handed
//! to the shared operations.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arcp_types::{
    format_rfc3339, Cancel, Dialect, Envelope, ErrorCode, ErrorReply, Frame, Message, Open,
    PeerInfo, Welcome,
};
use serde_json::json;

use super::flavor::{error_reply, new_id, object};
use super::state::{Host, State};
use super::submit::Caller;
use crate::fault::Fault;

/// A text frame that is not an envelope.
pub(super) fn malformed(st: &mut State, conn: u64, why: String) {
    unparseable(st, conn, None, &why);
}

/// One envelope from a client (already recorded).
pub(super) fn receive(st: &mut State, host: &Host, conn: u64, envelope: Envelope) {
    if !envelope.id.starts_with("msg_") {
        let id = envelope.id;
        return unparseable(st, conn, Some(&id), "envelope id must start with msg_");
    }
    let id = envelope.id.clone();
    let Frame { envelope, message } = match Dialect::Legacy.decode_envelope(envelope) {
        Ok(frame) => frame,
        Err(e) => return unparseable(st, conn, Some(&id), &e.to_string()),
    };
    match message {
        Message::Open(open) => session_open(st, conn, &envelope, open),
        // The Rust runtime cannot parse these and drops the TCP connection.
        Message::Resume(_) | Message::Unknown(_) => {
            let why = format!("unknown message type '{}'", envelope.kind);
            unparseable(st, conn, Some(&envelope.id), &why);
        }
        // ... and ignores anything else until the session is open.
        _ if st.conns.session(conn).is_none() => {}
        Message::Ping(ping) => st.on_ping(conn, &envelope, ping),
        Message::Close(_) => session_close(st, conn),
        Message::ListJobs(_) => st.on_list_jobs(conn, &envelope),
        Message::Invoke(invoke) => {
            st.submit(host, Caller::Socket(conn), &envelope.id, invoke);
        }
        Message::Cancel(cancel) => on_cancel(st, conn, &envelope, cancel),
        Message::Subscribe(_) => {
            let why = "subscriptions are not supported";
            let error = error_reply(ErrorCode::Unimplemented, why, false, Some(&envelope.id));
            let frame = st.reply(conn, Message::Nack(error));
            st.send_stamped(conn, frame);
        }
        _ => {}
    }
}

/// A frame the runtime cannot parse. Rust 2.0.0 drops the TCP connection;
/// with [`crate::MockRuntimeBuilder::drop_on_unparseable`] off, `nack
/// INVALID_ARGUMENT`, correlated when the id is readable.
fn unparseable(st: &mut State, conn: u64, id: Option<&str>, why: &str) {
    if st.cfg.drop_on_unparseable {
        return st.kill(conn);
    }
    let mut nack = error_reply(ErrorCode::InvalidArgument, why, false, id);
    // A legacy `nack` payload has no `retryable`.
    nack.retryable = None;
    let mut frame = st.reply(conn, Message::Nack(nack));
    frame.envelope.correlation_id = id.map(str::to_owned);
    st.send(conn, frame);
}

/// `session.open`: a fresh session on this connection (any previous one
/// ends), welcomed with `session.accepted` and a one-hour lease.
fn session_open(st: &mut State, conn: u64, envelope: &Envelope, open: Open) {
    if st.fault(|f| matches!(f, Fault::DropDuringHandshake)) {
        return st.kill(conn);
    }
    let principal = match st.authenticate(&open.auth) {
        Ok(principal) => principal,
        Err(message) => {
            // Rust 2.0.0 keeps the connection open after a rejection.
            let error = ErrorReply::new(ErrorCode::Unauthenticated, message)
                .with_request_id(envelope.id.clone());
            let frame = st.flavor.frame(Message::Rejected(error));
            st.send(conn, frame);
            return;
        }
    };
    st.detach(conn);
    let session_id = new_id("sess");
    st.sessions
        .open(session_id.clone(), principal.clone(), Some(conn));
    st.bind(conn, &session_id, principal);
    let expires = SystemTime::now()
        .checked_add(Duration::from_secs(3600))
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .unwrap_or_default();
    let lease = format_rfc3339(expires.as_secs(), expires.subsec_micros());
    let runtime = PeerInfo::new(st.cfg.runtime_name.clone(), st.cfg.runtime_version.clone())
        .with_extra(object(json!({"trust_level": "trusted"})));
    let welcome = Welcome::new(session_id.clone(), runtime)
        .with_capabilities(json!({
            "streaming": true,
            "durable_jobs": true,
            "artifacts": false,
            "subscriptions": false,
        }))
        .with_extra(object(json!({ "lease": { "expires_at": lease } })));
    let mut frame = st.flavor.frame(Message::Welcome(welcome));
    frame.envelope.session_id = Some(session_id);
    frame.envelope.correlation_id = Some(envelope.id.clone());
    st.send(conn, frame);
}

/// `session.close`: Rust 2.0.0 cancels the jobs this connection submitted
/// and drops the socket.
fn session_close(st: &mut State, conn: u64) {
    let running: Vec<String> = st
        .jobs
        .values()
        .filter(|j| j.origin_conn == conn && j.is_running())
        .map(|j| j.id.clone())
        .collect();
    for job_id in running {
        st.cancel_job(&job_id);
    }
    st.kill(conn);
}

/// `cancel`: `cancel.accepted` (then the job's cancellation) or
/// `cancel.refused` with the reason, correlated and sequenced.
fn on_cancel(st: &mut State, conn: u64, envelope: &Envelope, cancel: Cancel) {
    let job_id = cancel.job_id;
    let refusal = st.cancel_refusal(conn, &job_id);
    let answer = match refusal {
        None => Message::CancelAccepted(object(json!({"target_id": job_id}))),
        Some(reason) => {
            Message::CancelRefused(object(json!({"target_id": job_id, "reason": reason})))
        }
    };
    let mut frame = st.reply(conn, answer);
    frame.envelope.correlation_id = Some(envelope.id.clone());
    st.send_stamped(conn, frame);
    if refusal.is_none() {
        st.cancel_job(&job_id);
    }
}
