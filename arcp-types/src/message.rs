//! The dialect-neutral domain model: what either peer can say.
//!
//! A [`Frame`] is an envelope header plus one [`Message`]. The dialect codecs
//! in [`crate::Dialect`] map frames to and from wire JSON; nothing above them
//! needs to know whether `job.submit` or `tool.invoke` is on the wire.
//!
//! Every payload struct keeps fields it does not model in `extra`, so decoding
//! and re-encoding a frame loses nothing. The payload structs are
//! `#[non_exhaustive]`: build them with their constructors (`new`, `with_*`)
//! and read or assign their public fields.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{Envelope, ErrorCode};

mod build;

/// A JSON object, the body of messages whose fields the client does not model.
pub type Object = Map<String, Value>;

/// One decoded message: the envelope header and the typed body.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Header fields. `kind` and `payload` are owned by the codec: on decode
    /// they keep the wire values; on encode they are regenerated from `message`.
    pub envelope: Envelope,
    /// The typed body.
    pub message: Message,
}

impl Frame {
    /// A frame with a fresh envelope (new id, current timestamp).
    pub fn new(message: Message) -> Self {
        Frame {
            envelope: Envelope::new(""),
            message,
        }
    }

    /// The id of the request this frame answers, wherever the dialect puts it
    /// (v1.1: `payload.request_id`; legacy: the envelope's `correlation_id`).
    pub fn request_id(&self) -> Option<&str> {
        let from_body = match &self.message {
            Message::Accepted(a) => a.request_id.as_deref(),
            Message::Error(e)
            | Message::SessionError(e)
            | Message::Rejected(e)
            | Message::Nack(e) => e.request_id.as_deref(),
            _ => None,
        };
        from_body.or(self.envelope.correlation_id.as_deref())
    }

    /// The job this frame is about, from the body or the envelope.
    pub fn job_id(&self) -> Option<&str> {
        let from_body = match &self.message {
            Message::Accepted(a) => Some(a.job_id.as_str()),
            Message::Cancel(c) => Some(c.job_id.as_str()),
            Message::Subscribe(s) => Some(s.job_id.as_str()),
            Message::Receipt(r) => r.job_id.as_deref(),
            _ => None,
        };
        from_body.or(self.envelope.job_id.as_deref())
    }
}

/// Every message of either dialect, by meaning.
///
/// Wire names per dialect are listed on each variant as `v1.1` / `legacy`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Message {
    // --- session, client to runtime ---
    /// Open a session, or resume one. `session.hello` / `session.open`.
    Open(Open),
    /// Close the session. `session.close` (also read: `session.bye`) / `session.close`.
    Close(Close),
    /// Liveness probe. `session.ping` (legacy also reads `ping`).
    Ping(Ping),
    /// Answer to a ping. `session.pong` (legacy also reads `pong`).
    Pong(Pong),
    /// Highest processed event sequence. `session.ack`.
    Ack(Ack),
    /// Request the job inventory. `session.list_jobs`.
    ListJobs(Object),
    /// Legacy resume request. — / `resume`.
    Resume(Object),

    // --- session, runtime to client ---
    /// Session established. `session.welcome` / `session.accepted`.
    Welcome(Welcome),
    /// Session refused. — / `session.rejected` or `session.unauthenticated`.
    Rejected(ErrorReply),
    /// Session-level error. `session.error` / —.
    SessionError(ErrorReply),
    /// Session ended by the runtime. — / `session.evicted`.
    Evicted(Object),
    /// Close acknowledged. `session.closed` / —.
    Closed(Object),
    /// Job inventory. `session.jobs`.
    Jobs(Object),

    // --- jobs, client to runtime ---
    /// Invoke a tool. `job.submit` / `tool.invoke`.
    Invoke(Invoke),
    /// Cancel a job. `job.cancel` / `cancel`.
    Cancel(Cancel),
    /// Attach to a job's event stream. `job.subscribe`.
    Subscribe(Subscribe),
    /// Detach from a job. `job.unsubscribe`.
    Unsubscribe(Object),

    // --- jobs, runtime to client ---
    /// The runtime bound the request to a job. `job.accepted`.
    Accepted(Accepted),
    /// The job started running. — / `job.started`.
    Started(Object),
    /// A non-terminal job event. `job.event` / `job.progress`, `metric`, `log`, `job.result_chunk`.
    Event(JobEvent),
    /// Terminal success. `job.result` / `job.completed` (also read: `tool.result`).
    Result(JobResult),
    /// Terminal failure. `job.error` / `job.failed` (also read: `tool.error`).
    Error(ErrorReply),
    /// Terminal cancellation. `job.result` with `final_status: cancelled` / `job.cancelled`.
    Cancelled(Object),
    /// Cancel request acknowledged. `job.cancelled` / `cancel.accepted`.
    CancelAccepted(Object),
    /// Cancel request refused. — / `cancel.refused`.
    CancelRefused(Object),
    /// Subscription acknowledged. `job.subscribed`.
    Subscribed(Object),
    /// Transport-level receipt; `replay: true` marks a duplicate. — / `ack`.
    Receipt(Receipt),
    /// Request refused. — / `nack`.
    Nack(ErrorReply),

    /// A message type this crate does not know, kept verbatim.
    Unknown(Unknown),
}

/// `session.hello` / `session.open`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Open {
    /// Who is connecting.
    pub client: PeerInfo,
    /// Credentials.
    pub auth: Auth,
    /// Capabilities offered, in the dialect's own shape (v1.1: `{encodings, features}`;
    /// legacy: a map of flags). `Null` asks the encoder for the dialect's
    /// defaults, so callers need not know the dialect.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub capabilities: Value,
    /// Resume an earlier session instead of opening a new one (v1.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<ResumeRequest>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Object,
}

/// Name and version of a client or runtime (legacy spells `name` as `kind`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PeerInfo {
    /// Implementation name.
    #[serde(default)]
    pub name: String,
    /// Implementation version.
    #[serde(default)]
    pub version: String,
    /// Fields not modelled here (for example legacy `trust_level`).
    #[serde(flatten)]
    pub extra: Object,
}

/// Credentials presented in [`Open`].
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Auth {
    /// `bearer` or `none`.
    pub scheme: String,
    /// The bearer token. Never printed by `Debug`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Object,
}

impl Auth {
    /// Bearer-token credentials.
    pub fn bearer(token: impl Into<String>) -> Self {
        Auth {
            scheme: "bearer".into(),
            token: Some(token.into()),
            extra: Object::new(),
        }
    }

    /// No credentials.
    pub fn none() -> Self {
        Auth {
            scheme: "none".into(),
            token: None,
            extra: Object::new(),
        }
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth")
            .field("scheme", &self.scheme)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

/// The `resume` block of a v1.1 `session.hello`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ResumeRequest {
    /// The session to resume.
    pub session_id: String,
    /// The most recent resume token (tokens rotate on every welcome).
    pub resume_token: String,
    /// Highest event sequence the client processed.
    pub last_event_seq: u64,
}

impl fmt::Debug for ResumeRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResumeRequest")
            .field("session_id", &self.session_id)
            .field("resume_token", &"<redacted>")
            .field("last_event_seq", &self.last_event_seq)
            .finish()
    }
}

/// `session.close`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Close {
    /// Why the session is closing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Object,
}

/// `session.ping`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Ping {
    /// Echoed back in the pong.
    #[serde(default)]
    pub nonce: String,
    /// When the ping was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<String>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Object,
}

/// `session.pong`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Pong {
    /// The nonce of the ping answered.
    #[serde(default)]
    pub ping_nonce: String,
    /// When the ping was received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received_at: Option<String>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Object,
}

/// `session.ack`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Ack {
    /// Highest event sequence processed.
    pub last_processed_seq: u64,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Object,
}

/// `session.welcome` / `session.accepted`.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Welcome {
    /// The session id.
    pub session_id: String,
    /// Which runtime answered.
    #[serde(default)]
    pub runtime: PeerInfo,
    /// Token to resume this session later (v1.1; rotates on every welcome).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_token: Option<String>,
    /// How long the runtime keeps the session resumable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_window_sec: Option<u64>,
    /// Heartbeat interval; absent means heartbeats are not negotiated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_interval_sec: Option<u64>,
    /// Capabilities in the dialect's own shape; see [`Welcome::features`].
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub capabilities: Value,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Object,
}

impl Welcome {
    /// Negotiated feature names, read from either shape: a v1.1
    /// `features` list, or a legacy map of flags (the flags set to `true`).
    pub fn features(&self) -> Vec<String> {
        match &self.capabilities {
            Value::Object(map) => match map.get("features") {
                Some(Value::Array(list)) => list
                    .iter()
                    .filter_map(|f| f.as_str().map(str::to_owned))
                    .collect(),
                _ => map
                    .iter()
                    .filter(|(_, v)| v.as_bool() == Some(true))
                    .map(|(k, _)| k.clone())
                    .collect(),
            },
            _ => Vec::new(),
        }
    }

    /// Whether a feature flag was negotiated.
    pub fn has_feature(&self, name: &str) -> bool {
        self.features().iter().any(|f| f == name)
    }
}

impl fmt::Debug for Welcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Welcome")
            .field("session_id", &self.session_id)
            .field("runtime", &self.runtime)
            .field(
                "resume_token",
                &self.resume_token.as_ref().map(|_| "<redacted>"),
            )
            .field("resume_window_sec", &self.resume_window_sec)
            .field("heartbeat_interval_sec", &self.heartbeat_interval_sec)
            .field("capabilities", &self.capabilities)
            .finish_non_exhaustive()
    }
}

/// An error from the runtime: `job.error`, `job.failed`, `tool.error`,
/// `session.error`, `session.rejected`, `nack`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ErrorReply {
    /// The error code.
    pub code: ErrorCode,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
    /// Whether retrying may succeed; absent means "use the code's default".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    /// Structured details (for example `retry_after_seconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// The request this error answers, when the runtime says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Object,
}

impl ErrorReply {
    /// An error with a code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorReply {
            code,
            message: message.into(),
            retryable: None,
            details: None,
            request_id: None,
            extra: Object::new(),
        }
    }

    /// `retryable` as sent, else the code's default.
    pub fn is_retryable(&self) -> bool {
        self.retryable
            .unwrap_or_else(|| self.code.default_retryable())
    }

    /// The runtime's requested minimum delay before a retry, from
    /// `details.retry_after_seconds`, `details.retry_after_ms` or `retry_after`.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        let details = self.details.as_ref()?.as_object()?;
        let secs = |v: &Value| v.as_f64().filter(|s| s.is_finite() && *s >= 0.0);
        if let Some(s) = details.get("retry_after_seconds").and_then(secs) {
            return Some(std::time::Duration::from_secs_f64(s.min(86_400.0)));
        }
        if let Some(s) = details.get("retry_after").and_then(secs) {
            return Some(std::time::Duration::from_secs_f64(s.min(86_400.0)));
        }
        details
            .get("retry_after_ms")
            .and_then(secs)
            .map(|ms| std::time::Duration::from_secs_f64((ms / 1000.0).min(86_400.0)))
    }
}

/// `job.submit` / `tool.invoke`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Invoke {
    /// Tool (v1.1: agent) name.
    pub tool: String,
    /// Arguments (v1.1: input). Kept as a `Value` so re-encoding is byte-stable.
    #[serde(default)]
    pub arguments: Value,
    /// Idempotency key (v1.1: in the payload; legacy: on the envelope).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Fields not modelled here (`lease_request`, `max_runtime_sec`, ...).
    #[serde(flatten)]
    pub extra: Object,
}

impl Invoke {
    /// The payload field names either dialect writes from this request's
    /// own fields (v1.1 `agent`, `input`, `idempotency_key`; legacy `tool`,
    /// `arguments`). An entry of [`extra`](Self::extra) under one of these
    /// names is not sent as given: the modelled field takes its place.
    pub const MODELLED_FIELDS: [&'static str; 5] =
        ["agent", "input", "idempotency_key", "tool", "arguments"];
}

/// `job.cancel` / `cancel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Cancel {
    /// The job to cancel.
    pub job_id: String,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Fields not modelled here (legacy `deadline_ms`).
    #[serde(flatten)]
    pub extra: Object,
}

/// `job.subscribe`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Subscribe {
    /// The job to attach to.
    pub job_id: String,
    /// Replay buffered events with a higher sequence than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_event_seq: Option<u64>,
    /// Whether to replay buffered history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<bool>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Object,
}

/// `job.accepted`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Accepted {
    /// The job the request is bound to. On a replay, the original job.
    pub job_id: String,
    /// The request this answers, when the runtime says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Fields not modelled here (`agent`, `lease`, `accepted_at`, ...).
    #[serde(flatten)]
    pub extra: Object,
}

/// A non-terminal job event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct JobEvent {
    /// `progress`, `log`, `metric`, `result_chunk`, `status`, ...
    pub kind: String,
    /// When the event happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<String>,
    /// The kind-specific body.
    #[serde(default)]
    pub body: Value,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Object,
}

/// Terminal success: `job.result` / `job.completed` / `tool.result`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct JobResult {
    /// The result value, when inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Fields not modelled here (`completed_at`, `result_id`, `result_ref`, ...).
    #[serde(flatten)]
    pub extra: Object,
}

crate::extra_fields::deserialize_with_extra!(Accepted {
    job_id: "job_id" required,
    request_id: "request_id",
});
crate::extra_fields::deserialize_with_extra!(JobEvent {
    kind: "kind" required,
    ts: "ts",
    body: "body",
});
crate::extra_fields::deserialize_with_extra!(JobResult { result: "result" });

/// Legacy transport receipt (`ack`); older runtimes mark a duplicate with `replay`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Receipt {
    /// Whether the acknowledged request was a replay of an earlier one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replay: bool,
    /// The job the request is bound to, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Object,
}

/// A message whose type this crate does not know.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Unknown {
    /// The wire type.
    pub kind: String,
    /// The payload, verbatim.
    pub payload: Value,
}
