//! Constructors of the payload types. The types are `#[non_exhaustive]` (a
//! field added in a later release is not a breaking change), so code outside
//! this crate builds them here: `new` takes the required fields, `with_*`
//! sets an optional one, and every field stays public to read and assign.

use serde_json::Value;

use super::{
    Accepted, Ack, Auth, Cancel, Close, ErrorReply, Invoke, JobEvent, JobResult, Object, Open,
    PeerInfo, Ping, Pong, Receipt, ResumeRequest, Subscribe, Unknown, Welcome,
};

impl Open {
    /// A session request from `client` with `auth`, the dialect's default
    /// capabilities and no resume.
    pub fn new(client: PeerInfo, auth: Auth) -> Self {
        Open {
            client,
            auth,
            capabilities: Value::Null,
            resume: None,
            extra: Object::new(),
        }
    }

    /// Offers these capabilities, in the dialect's own shape.
    pub fn with_capabilities(mut self, capabilities: Value) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Resumes an earlier session (v1.1).
    pub fn with_resume(mut self, resume: ResumeRequest) -> Self {
        self.resume = Some(resume);
        self
    }
}

impl PeerInfo {
    /// An implementation's name and version.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        PeerInfo {
            name: name.into(),
            version: version.into(),
            extra: Object::new(),
        }
    }
}

impl Auth {
    /// Credentials of any `scheme` (see also [`Auth::bearer`], [`Auth::none`]).
    pub fn new(scheme: impl Into<String>, token: Option<String>) -> Self {
        Auth {
            scheme: scheme.into(),
            token,
            extra: Object::new(),
        }
    }
}

impl ResumeRequest {
    /// Resume `session_id` with its latest `resume_token`, having processed
    /// events up to `last_event_seq`.
    pub fn new(
        session_id: impl Into<String>,
        resume_token: impl Into<String>,
        last_event_seq: u64,
    ) -> Self {
        ResumeRequest {
            session_id: session_id.into(),
            resume_token: resume_token.into(),
            last_event_seq,
        }
    }
}

impl Close {
    /// A close with a reason.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

impl Ping {
    /// A ping carrying `nonce`.
    pub fn new(nonce: impl Into<String>) -> Self {
        Ping {
            nonce: nonce.into(),
            ..Ping::default()
        }
    }

    /// Says when the ping was sent (RFC 3339).
    pub fn with_sent_at(mut self, sent_at: impl Into<String>) -> Self {
        self.sent_at = Some(sent_at.into());
        self
    }
}

impl Pong {
    /// The answer to the ping that carried `ping_nonce`.
    pub fn new(ping_nonce: impl Into<String>) -> Self {
        Pong {
            ping_nonce: ping_nonce.into(),
            ..Pong::default()
        }
    }

    /// Says when the ping was received (RFC 3339).
    pub fn with_received_at(mut self, received_at: impl Into<String>) -> Self {
        self.received_at = Some(received_at.into());
        self
    }
}

impl Ack {
    /// Events processed up to `last_processed_seq`.
    pub fn new(last_processed_seq: u64) -> Self {
        Ack {
            last_processed_seq,
            extra: Object::new(),
        }
    }
}

impl Welcome {
    /// A session `session_id` established by `runtime`: no resume token, no
    /// heartbeat, no capabilities until set.
    pub fn new(session_id: impl Into<String>, runtime: PeerInfo) -> Self {
        Welcome {
            session_id: session_id.into(),
            runtime,
            resume_token: None,
            resume_window_sec: None,
            heartbeat_interval_sec: None,
            capabilities: Value::Null,
            extra: Object::new(),
        }
    }

    /// The token to resume the session with, and how long it stays
    /// resumable (v1.1).
    pub fn with_resume(mut self, token: impl Into<String>, window_sec: Option<u64>) -> Self {
        self.resume_token = Some(token.into());
        self.resume_window_sec = window_sec;
        self
    }

    /// Negotiates heartbeats at this interval.
    pub fn with_heartbeat_interval_sec(mut self, seconds: u64) -> Self {
        self.heartbeat_interval_sec = Some(seconds);
        self
    }

    /// The negotiated capabilities, in the dialect's own shape.
    pub fn with_capabilities(mut self, capabilities: Value) -> Self {
        self.capabilities = capabilities;
        self
    }
}

impl ErrorReply {
    /// Says whether retrying may succeed (else the code's default applies).
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = Some(retryable);
        self
    }

    /// Structured details (for example `retry_after_seconds`).
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The request this error answers.
    pub fn with_request_id(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = Some(request_id.into());
        self
    }
}

impl Invoke {
    /// Invoke `tool` with `arguments`, without a key.
    pub fn new(tool: impl Into<String>, arguments: Value) -> Self {
        Invoke {
            tool: tool.into(),
            arguments,
            idempotency_key: None,
            extra: Object::new(),
        }
    }

    /// Carries this idempotency key.
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

impl Cancel {
    /// Cancel `job_id`.
    pub fn new(job_id: impl Into<String>) -> Self {
        Cancel {
            job_id: job_id.into(),
            reason: None,
            extra: Object::new(),
        }
    }

    /// Says why.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

impl Subscribe {
    /// Attach to `job_id`'s events.
    pub fn new(job_id: impl Into<String>) -> Self {
        Subscribe {
            job_id: job_id.into(),
            from_event_seq: None,
            history: None,
            extra: Object::new(),
        }
    }

    /// Replay buffered events after this sequence.
    pub fn with_from_event_seq(mut self, seq: u64) -> Self {
        self.from_event_seq = Some(seq);
        self
    }

    /// Whether to replay buffered history.
    pub fn with_history(mut self, history: bool) -> Self {
        self.history = Some(history);
        self
    }
}

impl Accepted {
    /// The request bound to `job_id`.
    pub fn new(job_id: impl Into<String>) -> Self {
        Accepted {
            job_id: job_id.into(),
            request_id: None,
            extra: Object::new(),
        }
    }

    /// The request this answers.
    pub fn with_request_id(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = Some(request_id.into());
        self
    }
}

impl JobEvent {
    /// An event of `kind` (`progress`, `log`, ...) with its `body`.
    pub fn new(kind: impl Into<String>, body: Value) -> Self {
        JobEvent {
            kind: kind.into(),
            ts: None,
            body,
            extra: Object::new(),
        }
    }

    /// Says when the event happened (RFC 3339).
    pub fn with_ts(mut self, ts: impl Into<String>) -> Self {
        self.ts = Some(ts.into());
        self
    }
}

impl JobResult {
    /// A terminal success with `result` inline (`None`: the result is
    /// elsewhere, for example behind a `result_ref` in `extra`).
    pub fn new(result: Option<Value>) -> Self {
        JobResult {
            result,
            extra: Object::new(),
        }
    }
}

impl Receipt {
    /// A receipt for a request bound to `job_id` (when known); `replay`
    /// marks a duplicate.
    pub fn new(job_id: Option<String>, replay: bool) -> Self {
        Receipt {
            replay,
            job_id,
            extra: Object::new(),
        }
    }
}

impl Unknown {
    /// A message of wire type `kind` kept verbatim.
    pub fn new(kind: impl Into<String>, payload: Value) -> Self {
        Unknown {
            kind: kind.into(),
            payload,
        }
    }
}

macro_rules! with_extra {
    ($($ty:ty),* $(,)?) => {$(
        impl $ty {
            /// Adds fields this crate does not model, sent and kept verbatim.
            pub fn with_extra(mut self, extra: Object) -> Self {
                if self.extra.is_empty() {
                    self.extra = extra;
                } else {
                    self.extra.extend(extra);
                }
                self
            }
        }
    )*};
}

with_extra!(
    Open, PeerInfo, Auth, Close, Ping, Pong, Ack, Welcome, ErrorReply, Invoke, Cancel, Subscribe,
    Accepted, JobEvent, JobResult, Receipt,
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dialect, ErrorCode, Frame, Message};
    use serde_json::json;

    #[test]
    fn constructors_encode_as_the_literals_they_replace() {
        let invoke = Invoke::new("echo", json!({"a": 1}))
            .with_idempotency_key("k1")
            .with_extra(Object::from_iter([("lease_request".into(), json!({}))]));
        let env = Dialect::V1_1.to_envelope(&Frame::new(Message::Invoke(invoke.clone())));
        assert_eq!(env.kind, "job.submit");
        assert_eq!(env.payload["input"], json!({"a": 1}));
        assert_eq!(env.payload["idempotency_key"], "k1");
        assert_eq!(env.payload["lease_request"], json!({}));
        let back = Dialect::V1_1.decode_envelope(env).expect("decodes");
        assert_eq!(back.message, Message::Invoke(invoke));

        let reply = ErrorReply::new(ErrorCode::Unavailable, "busy")
            .with_retryable(false)
            .with_details(json!({"retry_after_seconds": 2}))
            .with_request_id("msg_1");
        assert!(!reply.is_retryable());
        assert_eq!(reply.retry_after(), Some(std::time::Duration::from_secs(2)));
        assert_eq!(reply.request_id.as_deref(), Some("msg_1"));

        let welcome = Welcome::new("sess_1", PeerInfo::new("rt", "1.0"))
            .with_resume("rt_token", Some(60))
            .with_heartbeat_interval_sec(15)
            .with_capabilities(json!({"features": ["subscriptions"]}));
        assert!(welcome.has_feature("subscriptions"));
        assert_eq!(welcome.resume_window_sec, Some(60));

        let sub = Subscribe::new("job_1")
            .with_from_event_seq(4)
            .with_history(true);
        assert_eq!((sub.from_event_seq, sub.history), (Some(4), Some(true)));
        let open = Open::new(PeerInfo::new("c", "0"), Auth::none())
            .with_resume(ResumeRequest::new("sess_1", "rt", 9));
        assert_eq!(open.resume.map(|r| r.last_event_seq), Some(9));
        assert_eq!(
            Ping::new("n").with_sent_at("t").sent_at.as_deref(),
            Some("t")
        );
        assert_eq!(Pong::new("n").ping_nonce, "n");
        assert_eq!(
            Cancel::new("job_1").with_reason("r").reason.as_deref(),
            Some("r")
        );
        assert_eq!(
            Accepted::new("job_1")
                .with_request_id("m")
                .request_id
                .as_deref(),
            Some("m")
        );
        assert_eq!(
            JobEvent::new("log", json!("x")).with_ts("t").ts.as_deref(),
            Some("t")
        );
        assert!(Receipt::new(None, true).replay);
        assert_eq!(
            Close::default().with_reason("bye").reason.as_deref(),
            Some("bye")
        );
        assert_eq!(Ack::new(3).last_processed_seq, 3);
        assert_eq!(JobResult::new(Some(json!(1))).result, Some(json!(1)));
        assert_eq!(Unknown::new("x.y", json!({})).kind, "x.y");
    }
}
