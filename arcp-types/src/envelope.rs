//! The ARCP envelope: the JSON object every message travels in.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The protocol version both published runtimes put in `arcp`.
pub const PROTOCOL_VERSION: &str = "1.1";

/// One ARCP message on the wire.
///
/// Carries every header field either dialect uses. Fields this crate does not
/// know are kept in [`Envelope::extra`] and written back unchanged, so a
/// runtime that adds a header does not break decoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Protocol version (`"1.1"` for both published runtimes).
    pub arcp: String,
    /// Unique message id (see [`crate::new_message_id`]).
    pub id: String,
    /// Message type, such as `job.submit` or `tool.invoke`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Sender timestamp, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    /// Session the message belongs to, once one exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Job the message is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// Session-scoped sequence number of job events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_seq: Option<u64>,
    /// Id of the request this message answers (legacy dialect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// Id of the message that caused this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<String>,
    /// Logical idempotency key of a command (legacy dialect carries it here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// W3C trace id shared by every message of one logical operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// `low`, `normal`, `high` or `critical`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// Subscription the message is delivered under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription_id: Option<String>,
    /// Namespaced extension fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Map<String, Value>>,
    /// The type-specific body.
    #[serde(default)]
    pub payload: Value,
    /// Header fields this crate does not know, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Envelope {
    /// A new envelope with a fresh id, the current timestamp and an empty payload.
    pub fn new(kind: impl Into<String>) -> Self {
        Envelope {
            arcp: PROTOCOL_VERSION.to_owned(),
            id: crate::new_message_id(),
            kind: kind.into(),
            timestamp: Some(crate::now_rfc3339()),
            session_id: None,
            job_id: None,
            event_seq: None,
            correlation_id: None,
            causation_id: None,
            idempotency_key: None,
            trace_id: None,
            priority: None,
            subscription_id: None,
            extensions: None,
            payload: Value::Object(Map::new()),
            extra: Map::new(),
        }
    }
}

impl Default for Envelope {
    fn default() -> Self {
        Envelope::new("")
    }
}
