//! The ARCP envelope: the JSON object every message travels in.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The protocol version both published runtimes put in `arcp`.
pub const PROTOCOL_VERSION: &str = "1.1";

/// One ARCP message on the wire.
///
/// Carries every header field either dialect uses. Fields this crate does not
/// know are kept in [`Envelope::extra`] and written back unchanged, so a
/// runtime that adds a header does not break decoding.
///
/// Decoding is one pass: known header fields are read straight into their
/// types and unknown ones into `extra`, without buffering the object first
/// (as a derived `#[serde(flatten)]` would).
#[derive(Debug, Clone, PartialEq, Serialize)]
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

/// The envelope as written with a payload encoded beforehand: the same
/// fields, in the same order, as `Envelope`'s own serialization.
#[derive(Serialize)]
struct WithPayload<'a> {
    arcp: &'a str,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    job_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    correlation_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    causation_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    idempotency_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    subscription_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    extensions: Option<&'a Map<String, Value>>,
    payload: &'a serde_json::value::RawValue,
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

impl Envelope {
    /// Wire JSON of this envelope's header with `kind`, an optional
    /// envelope-level idempotency key, and `payload` already encoded: one
    /// pass, no payload tree.
    pub(crate) fn to_json_with(
        &self,
        kind: &str,
        idempotency_key: Option<&str>,
        payload: &serde_json::value::RawValue,
    ) -> String {
        let wire = WithPayload {
            arcp: &self.arcp,
            id: &self.id,
            kind,
            timestamp: self.timestamp.as_deref(),
            session_id: self.session_id.as_deref(),
            job_id: self.job_id.as_deref(),
            event_seq: self.event_seq,
            correlation_id: self.correlation_id.as_deref(),
            causation_id: self.causation_id.as_deref(),
            idempotency_key: idempotency_key.or(self.idempotency_key.as_deref()),
            trace_id: self.trace_id.as_deref(),
            priority: self.priority.as_deref(),
            subscription_id: self.subscription_id.as_deref(),
            extensions: self.extensions.as_ref(),
            payload,
            extra: &self.extra,
        };
        // Strings, numbers and JSON values only: serialization cannot fail.
        serde_json::to_string(&wire).unwrap_or_default()
    }
}

/// A header key, matched without allocating for the known ones.
enum Field {
    Arcp,
    Id,
    Type,
    Timestamp,
    SessionId,
    JobId,
    EventSeq,
    CorrelationId,
    CausationId,
    IdempotencyKey,
    TraceId,
    Priority,
    SubscriptionId,
    Extensions,
    Payload,
    Other(String),
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FieldVisitor;
        impl Visitor<'_> for FieldVisitor {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an envelope field name")
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Field, E> {
                Ok(match key {
                    "arcp" => Field::Arcp,
                    "id" => Field::Id,
                    "type" => Field::Type,
                    "timestamp" => Field::Timestamp,
                    "session_id" => Field::SessionId,
                    "job_id" => Field::JobId,
                    "event_seq" => Field::EventSeq,
                    "correlation_id" => Field::CorrelationId,
                    "causation_id" => Field::CausationId,
                    "idempotency_key" => Field::IdempotencyKey,
                    "trace_id" => Field::TraceId,
                    "priority" => Field::Priority,
                    "subscription_id" => Field::SubscriptionId,
                    "extensions" => Field::Extensions,
                    "payload" => Field::Payload,
                    other => Field::Other(other.to_owned()),
                })
            }
        }
        d.deserialize_identifier(FieldVisitor)
    }
}

impl<'de> Deserialize<'de> for Envelope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (mut envelope, payload) =
            d.deserialize_map(EnvelopeVisitor::<Value>(std::marker::PhantomData))?;
        envelope.payload = payload.unwrap_or(Value::Null);
        Ok(envelope)
    }
}

impl Envelope {
    /// Parses wire text into the header (with a `null` payload) and the
    /// payload's raw JSON, borrowed from `text`: the payload is parsed
    /// later, straight into the type its `type` names, with no tree in
    /// between. `None` when the frame has no payload.
    pub(crate) fn parse_raw(
        text: &str,
    ) -> Result<(Envelope, Option<&serde_json::value::RawValue>), serde_json::Error> {
        let mut d = serde_json::Deserializer::from_str(text);
        let parsed = d.deserialize_map(EnvelopeVisitor::<&serde_json::value::RawValue>(
            std::marker::PhantomData,
        ))?;
        d.end()?;
        Ok(parsed)
    }
}

/// Reads an envelope; `P` is how the payload is kept (a `Value` tree, or
/// the raw text borrowed from the input).
struct EnvelopeVisitor<P>(std::marker::PhantomData<P>);

/// Reads a field's value, refusing a second occurrence of the same field.
fn once<'de, A, T>(map: &mut A, slot: &mut Option<T>, name: &'static str) -> Result<(), A::Error>
where
    A: MapAccess<'de>,
    T: Deserialize<'de>,
{
    if slot.is_some() {
        return Err(de::Error::duplicate_field(name));
    }
    *slot = Some(map.next_value()?);
    Ok(())
}

impl<'de, P: Deserialize<'de>> Visitor<'de> for EnvelopeVisitor<P> {
    type Value = (Envelope, Option<P>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an ARCP envelope (a JSON object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut arcp, mut id, mut kind) = (None, None, None);
        // Optional fields: `Some(None)` is an explicit `null`.
        let mut timestamp: Option<Option<String>> = None;
        let mut session_id: Option<Option<String>> = None;
        let mut job_id: Option<Option<String>> = None;
        let mut event_seq: Option<Option<u64>> = None;
        let mut correlation_id: Option<Option<String>> = None;
        let mut causation_id: Option<Option<String>> = None;
        let mut idempotency_key: Option<Option<String>> = None;
        let mut trace_id: Option<Option<String>> = None;
        let mut priority: Option<Option<String>> = None;
        let mut subscription_id: Option<Option<String>> = None;
        let mut extensions: Option<Option<Map<String, Value>>> = None;
        let mut payload: Option<P> = None;
        let mut extra = Map::new();
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::Arcp => once(&mut map, &mut arcp, "arcp")?,
                Field::Id => once(&mut map, &mut id, "id")?,
                Field::Type => once(&mut map, &mut kind, "type")?,
                Field::Timestamp => once(&mut map, &mut timestamp, "timestamp")?,
                Field::SessionId => once(&mut map, &mut session_id, "session_id")?,
                Field::JobId => once(&mut map, &mut job_id, "job_id")?,
                Field::EventSeq => once(&mut map, &mut event_seq, "event_seq")?,
                Field::CorrelationId => once(&mut map, &mut correlation_id, "correlation_id")?,
                Field::CausationId => once(&mut map, &mut causation_id, "causation_id")?,
                Field::IdempotencyKey => once(&mut map, &mut idempotency_key, "idempotency_key")?,
                Field::TraceId => once(&mut map, &mut trace_id, "trace_id")?,
                Field::Priority => once(&mut map, &mut priority, "priority")?,
                Field::SubscriptionId => once(&mut map, &mut subscription_id, "subscription_id")?,
                Field::Extensions => once(&mut map, &mut extensions, "extensions")?,
                Field::Payload => once(&mut map, &mut payload, "payload")?,
                Field::Other(name) => {
                    let value = map.next_value()?;
                    extra.insert(name, value);
                }
            }
        }
        let envelope = Envelope {
            arcp: arcp.ok_or_else(|| de::Error::missing_field("arcp"))?,
            id: id.ok_or_else(|| de::Error::missing_field("id"))?,
            kind: kind.ok_or_else(|| de::Error::missing_field("type"))?,
            timestamp: timestamp.flatten(),
            session_id: session_id.flatten(),
            job_id: job_id.flatten(),
            event_seq: event_seq.flatten(),
            correlation_id: correlation_id.flatten(),
            causation_id: causation_id.flatten(),
            idempotency_key: idempotency_key.flatten(),
            trace_id: trace_id.flatten(),
            priority: priority.flatten(),
            subscription_id: subscription_id.flatten(),
            extensions: extensions.flatten(),
            payload: Value::Null,
            extra,
        };
        Ok((envelope, payload))
    }
}

impl Default for Envelope {
    fn default() -> Self {
        Envelope::new("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_keeps_unknown_fields_and_refuses_malformed_headers() {
        let text = r#"{"arcp":"1.1","id":"m1","type":"job.result","job_id":null,
            "event_seq":7,"x_vendor":{"a":[1,2]},"payload":{"result":1}}"#;
        let env: Envelope = serde_json::from_str(text).unwrap();
        assert_eq!(env.kind, "job.result");
        assert_eq!(env.job_id, None);
        assert_eq!(env.event_seq, Some(7));
        assert_eq!(env.extra["x_vendor"], serde_json::json!({"a": [1, 2]}));
        assert_eq!(env.payload, serde_json::json!({"result": 1}));
        // Round trip: the unknown header is written back.
        let again: Envelope = serde_json::from_str(&serde_json::to_string(&env).unwrap()).unwrap();
        assert_eq!(again, env);

        for bad in [
            r#"{"id":"m1","type":"t"}"#,
            r#"{"arcp":"1.1","type":"t"}"#,
            r#"{"arcp":"1.1","id":"m1"}"#,
            r#"{"arcp":"1.1","id":"m1","type":"t","id":"m2"}"#,
            r#"{"arcp":"1.1","id":"m1","type":"t","event_seq":-1}"#,
            r#"{"arcp":1,"id":"m1","type":"t"}"#,
            r#"["arcp"]"#,
        ] {
            assert!(serde_json::from_str::<Envelope>(bad).is_err(), "{bad}");
        }
        // No payload reads as null, as before.
        let bare: Envelope = serde_json::from_str(r#"{"arcp":"1.1","id":"m","type":"t"}"#).unwrap();
        assert!(bare.payload.is_null());
    }
}
