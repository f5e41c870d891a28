//! The ARCP envelope: the JSON object every message travels in.

use std::borrow::Cow;
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
#[non_exhaustive]
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
        // The outgoing header with owned strings: moved in, not copied.
        let header = Header {
            id: Cow::Owned(crate::new_message_id()),
            kind: Cow::Owned(kind.into()),
            timestamp: Some(Cow::Owned(crate::now_rfc3339())),
            ..Header::outgoing("", "")
        };
        header.into_envelope(Value::Object(Map::new()))
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
        self.as_header()
            .to_json_with(kind, idempotency_key, payload)
    }

    /// This envelope's header, borrowed.
    fn as_header(&self) -> Header<'_> {
        fn borrow(s: &Option<String>) -> Option<Cow<'_, str>> {
            s.as_deref().map(Cow::Borrowed)
        }
        Header {
            arcp: Cow::Borrowed(&self.arcp),
            id: Cow::Borrowed(&self.id),
            kind: Cow::Borrowed(&self.kind),
            timestamp: borrow(&self.timestamp),
            session_id: borrow(&self.session_id),
            job_id: borrow(&self.job_id),
            event_seq: self.event_seq,
            correlation_id: borrow(&self.correlation_id),
            causation_id: borrow(&self.causation_id),
            idempotency_key: borrow(&self.idempotency_key),
            trace_id: borrow(&self.trace_id),
            priority: borrow(&self.priority),
            subscription_id: borrow(&self.subscription_id),
            extensions: self.extensions.as_ref().map(Cow::Borrowed),
            extra: Cow::Borrowed(&self.extra),
        }
    }
}

impl<'a> Header<'a> {
    /// The header of a message to send: the current protocol version, `id`
    /// (see [`crate::new_message_id`]) and `timestamp` (see
    /// [`crate::write_now_rfc3339`]); every other field empty.
    pub fn outgoing(id: &'a str, timestamp: &'a str) -> Self {
        Header {
            arcp: Cow::Borrowed(PROTOCOL_VERSION),
            id: Cow::Borrowed(id),
            kind: Cow::Borrowed(""),
            timestamp: Some(Cow::Borrowed(timestamp)),
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
            extra: Cow::Owned(Map::new()),
        }
    }

    /// Wire JSON of this header with `kind`, an optional envelope-level
    /// idempotency key and `payload` already encoded, in [`Envelope`]'s
    /// field order; one buffer, sized up front.
    ///
    /// Written field by field (this is on every request's path): a string
    /// with nothing to escape is copied as it is, anything else goes
    /// through serde_json. A header with extension or unknown fields is
    /// written by serde alone; both ways give the same bytes (tested).
    pub(crate) fn to_json_with(
        &self,
        kind: &str,
        idempotency_key: Option<&str>,
        payload: &serde_json::value::RawValue,
    ) -> String {
        if self.extensions.is_some() || !self.extra.is_empty() {
            return self.to_json_with_serde(kind, idempotency_key, payload);
        }
        let mut out = String::with_capacity(self.wire_size(kind, idempotency_key, payload));
        out.push_str("{\"arcp\":");
        json_string(&mut out, &self.arcp);
        out.push_str(",\"id\":");
        json_string(&mut out, &self.id);
        out.push_str(",\"type\":");
        json_string(&mut out, kind);
        let field = |out: &mut String, name: &str, value: Option<&str>| {
            if let Some(value) = value {
                out.push_str(name);
                json_string(out, value);
            }
        };
        field(&mut out, ",\"timestamp\":", self.timestamp.as_deref());
        field(&mut out, ",\"session_id\":", self.session_id.as_deref());
        field(&mut out, ",\"job_id\":", self.job_id.as_deref());
        if let Some(seq) = self.event_seq {
            use std::fmt::Write as _;
            let _ = write!(out, ",\"event_seq\":{seq}");
        }
        field(
            &mut out,
            ",\"correlation_id\":",
            self.correlation_id.as_deref(),
        );
        field(&mut out, ",\"causation_id\":", self.causation_id.as_deref());
        let key = idempotency_key.or(self.idempotency_key.as_deref());
        field(&mut out, ",\"idempotency_key\":", key);
        field(&mut out, ",\"trace_id\":", self.trace_id.as_deref());
        field(&mut out, ",\"priority\":", self.priority.as_deref());
        field(
            &mut out,
            ",\"subscription_id\":",
            self.subscription_id.as_deref(),
        );
        out.push_str(",\"payload\":");
        out.push_str(payload.get());
        out.push('}');
        out
    }

    /// What [`to_json_with`](Self::to_json_with) needs, plus room for
    /// escapes and unknown fields.
    fn wire_size(
        &self,
        kind: &str,
        idempotency_key: Option<&str>,
        payload: &serde_json::value::RawValue,
    ) -> usize {
        // The header's fixed part and field names fit in 256 bytes.
        let strings = [
            Some(&*self.id),
            self.timestamp.as_deref(),
            self.session_id.as_deref(),
            self.job_id.as_deref(),
            self.correlation_id.as_deref(),
            self.causation_id.as_deref(),
            idempotency_key.or(self.idempotency_key.as_deref()),
            self.trace_id.as_deref(),
            self.subscription_id.as_deref(),
        ];
        let size = 256 + kind.len() + payload.get().len();
        size + strings.iter().flatten().map(|s| s.len()).sum::<usize>()
    }

    /// [`to_json_with`](Self::to_json_with) through serde: any header.
    fn to_json_with_serde(
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
            extensions: self.extensions.as_deref(),
            payload,
            extra: &self.extra,
        };
        let mut out = Vec::with_capacity(self.wire_size(kind, idempotency_key, payload));
        // Strings, numbers and JSON values only: serialization cannot fail,
        // and serde_json writes valid UTF-8.
        if serde_json::to_writer(&mut out, &wire).is_err() {
            return String::new();
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

/// Appends `s` as a JSON string: copied as it is when nothing in it needs
/// escaping (ids, timestamps, keys), else escaped by serde_json.
fn json_string(out: &mut String, s: &str) {
    if crate::json_escape::first_special(s.as_bytes()).is_some() {
        // A string always serializes.
        out.push_str(&serde_json::to_string(s).unwrap_or_default());
    } else {
        out.push('"');
        out.push_str(s);
        out.push('"');
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
        let (header, payload) =
            d.deserialize_map(EnvelopeVisitor::<Value>(std::marker::PhantomData))?;
        Ok(header.into_envelope(payload.unwrap_or(Value::Null)))
    }
}

impl Envelope {
    /// Parses wire text into the header, its strings borrowed from `text`
    /// where they need no unescaping, and the payload's raw JSON, also
    /// borrowed: the payload is parsed later, straight into the type its
    /// `type` names, with no tree in between. `None` when the frame has no
    /// payload.
    pub(crate) fn parse_raw(
        text: &str,
    ) -> Result<(Header<'_>, Option<&serde_json::value::RawValue>), serde_json::Error> {
        let mut d = serde_json::Deserializer::from_str(text);
        let parsed = d.deserialize_map(EnvelopeVisitor::<&serde_json::value::RawValue>(
            std::marker::PhantomData,
        ))?;
        d.end()?;
        Ok(parsed)
    }
}

/// An envelope's header read from a frame without copying it: each string
/// is borrowed from the frame's text unless it had to be unescaped. What a
/// receiver that only looks at a frame needs; [`Header::into_envelope`]
/// makes the owned [`Envelope`].
///
/// The fields mean what [`Envelope`]'s do.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Header<'a> {
    /// Protocol version.
    pub arcp: Cow<'a, str>,
    /// Unique message id.
    pub id: Cow<'a, str>,
    /// Message type.
    pub kind: Cow<'a, str>,
    /// Sender timestamp, RFC 3339.
    pub timestamp: Option<Cow<'a, str>>,
    /// Session the message belongs to.
    pub session_id: Option<Cow<'a, str>>,
    /// Job the message is about.
    pub job_id: Option<Cow<'a, str>>,
    /// Session-scoped sequence number of job events.
    pub event_seq: Option<u64>,
    /// Id of the request this message answers (legacy dialect).
    pub correlation_id: Option<Cow<'a, str>>,
    /// Id of the message that caused this one.
    pub causation_id: Option<Cow<'a, str>>,
    /// Logical idempotency key of a command.
    pub idempotency_key: Option<Cow<'a, str>>,
    /// W3C trace id.
    pub trace_id: Option<Cow<'a, str>>,
    /// Priority.
    pub priority: Option<Cow<'a, str>>,
    /// Subscription the message is delivered under.
    pub subscription_id: Option<Cow<'a, str>>,
    /// Namespaced extension fields.
    pub extensions: Option<Cow<'a, Map<String, Value>>>,
    /// Header fields this crate does not know, kept verbatim.
    pub extra: Cow<'a, Map<String, Value>>,
}

impl Header<'_> {
    /// The owned envelope of this header and `payload`.
    pub fn into_envelope(self, payload: Value) -> Envelope {
        let own = |s: Option<Cow<'_, str>>| s.map(Cow::into_owned);
        Envelope {
            arcp: self.arcp.into_owned(),
            id: self.id.into_owned(),
            kind: self.kind.into_owned(),
            timestamp: own(self.timestamp),
            session_id: own(self.session_id),
            job_id: own(self.job_id),
            event_seq: self.event_seq,
            correlation_id: own(self.correlation_id),
            causation_id: own(self.causation_id),
            idempotency_key: own(self.idempotency_key),
            trace_id: own(self.trace_id),
            priority: own(self.priority),
            subscription_id: own(self.subscription_id),
            extensions: self.extensions.map(Cow::into_owned),
            payload,
            extra: self.extra.into_owned(),
        }
    }
}

/// A JSON string borrowed from the input when it has no escapes, copied
/// otherwise (serde's own `Cow<str>` always copies).
struct Str<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct StrVisitor;
        impl<'de> Visitor<'de> for StrVisitor {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Str<'de>, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(StrVisitor)
    }
}

/// Reads an envelope's header; `P` is how the payload is kept (a `Value`
/// tree, or the raw text borrowed from the input).
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
    type Value = (Header<'de>, Option<P>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an ARCP envelope (a JSON object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut arcp, mut id, mut kind): (Option<Str<'de>>, Option<Str<'de>>, Option<Str<'de>>) =
            (None, None, None);
        // Optional fields: `Some(None)` is an explicit `null`.
        let mut timestamp: Option<Option<Str<'de>>> = None;
        let mut session_id: Option<Option<Str<'de>>> = None;
        let mut job_id: Option<Option<Str<'de>>> = None;
        let mut event_seq: Option<Option<u64>> = None;
        let mut correlation_id: Option<Option<Str<'de>>> = None;
        let mut causation_id: Option<Option<Str<'de>>> = None;
        let mut idempotency_key: Option<Option<Str<'de>>> = None;
        let mut trace_id: Option<Option<Str<'de>>> = None;
        let mut priority: Option<Option<Str<'de>>> = None;
        let mut subscription_id: Option<Option<Str<'de>>> = None;
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
        let opt = |s: Option<Option<Str<'de>>>| s.flatten().map(|s| s.0);
        let header = Header {
            arcp: arcp.ok_or_else(|| de::Error::missing_field("arcp"))?.0,
            id: id.ok_or_else(|| de::Error::missing_field("id"))?.0,
            kind: kind.ok_or_else(|| de::Error::missing_field("type"))?.0,
            timestamp: opt(timestamp),
            session_id: opt(session_id),
            job_id: opt(job_id),
            event_seq: event_seq.flatten(),
            correlation_id: opt(correlation_id),
            causation_id: opt(causation_id),
            idempotency_key: opt(idempotency_key),
            trace_id: opt(trace_id),
            priority: opt(priority),
            subscription_id: opt(subscription_id),
            extensions: extensions.flatten().map(Cow::Owned),
            extra: Cow::Owned(extra),
        };
        Ok((header, payload))
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
        // A header read in place borrows what needs no unescaping, and
        // unescapes the rest.
        let text = r#"{"arcp":"1.1","id":"m\u0031","type":"job.result","job_id":"job_1",
            "correlation_id":"a\"b","payload":{}}"#;
        let (header, payload) = Envelope::parse_raw(text).unwrap();
        assert!(matches!(header.kind, Cow::Borrowed("job.result")));
        assert!(matches!(header.job_id, Some(Cow::Borrowed("job_1"))));
        assert!(matches!(header.id, Cow::Owned(ref id) if id == "m1"));
        assert_eq!(header.correlation_id.as_deref(), Some("a\"b"));
        assert_eq!(payload.map(|p| p.get()), Some("{}"));
        let owned = header.into_envelope(Value::Null);
        let tree: Envelope = serde_json::from_str(text).unwrap();
        assert_eq!(
            Envelope {
                payload: Value::Null,
                ..tree
            },
            owned
        );

        // No payload reads as null, as before.
        let bare: Envelope = serde_json::from_str(r#"{"arcp":"1.1","id":"m","type":"t"}"#).unwrap();
        assert!(bare.payload.is_null());
    }

    mod writer {
        use proptest::prelude::*;

        use super::*;

        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                4 => "[a-zA-Z0-9_.:-]{0,16}",
                1 => "[a-z\"\\\\/\u{7f}\u{e9}\u{1F600}\t\n\u{1}]{0,8}",
            ]
        }

        fn header() -> impl Strategy<Value = (Header<'static>, Option<String>, String)> {
            let opt = || proptest::option::of(text());
            (
                (
                    text(),
                    text(),
                    opt(),
                    opt(),
                    opt(),
                    proptest::option::of(any::<u64>()),
                ),
                (opt(), opt(), opt(), opt(), opt(), opt()),
                (opt(), any::<bool>(), text()),
            )
                .prop_map(
                    |(
                        (arcp, id, ts, session, job, seq),
                        (corr, cause, key, trace, prio, sub),
                        (env_key, odd, kind),
                    )| {
                        let own = |s: Option<String>| s.map(Cow::Owned);
                        let mut extra = Map::new();
                        if odd {
                            extra.insert("x_vendor".into(), Value::from(1));
                        }
                        let header = Header {
                            arcp: Cow::Owned(arcp),
                            id: Cow::Owned(id),
                            kind: Cow::Borrowed(""),
                            timestamp: own(ts),
                            session_id: own(session),
                            job_id: own(job),
                            event_seq: seq,
                            correlation_id: own(corr),
                            causation_id: own(cause),
                            idempotency_key: own(key),
                            trace_id: own(trace),
                            priority: own(prio),
                            subscription_id: own(sub),
                            extensions: None,
                            extra: Cow::Owned(extra),
                        };
                        (header, env_key, kind)
                    },
                )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]

            /// The field-by-field writer gives serde's bytes, and the
            /// frame reads back as the header it was written from.
            #[test]
            fn writes_what_serde_writes((header, key, kind) in header()) {
                let payload = serde_json::value::RawValue::from_string(r#"{"a":[1,"b"]}"#.into()).unwrap();
                let fast = header.to_json_with(&kind, key.as_deref(), &payload);
                let serde = header.to_json_with_serde(&kind, key.as_deref(), &payload);
                prop_assert_eq!(&fast, &serde);
                let back: Envelope = serde_json::from_str(&fast).unwrap();
                prop_assert_eq!(&back.kind, &kind);
                prop_assert_eq!(back.idempotency_key.as_deref(), key.as_deref().or(header.idempotency_key.as_deref()));
                prop_assert_eq!(back.trace_id.as_deref(), header.trace_id.as_deref());
            }
        }
    }
}
