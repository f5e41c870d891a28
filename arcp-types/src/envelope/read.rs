//! Reading an envelope from wire text in one pass: known header fields
//! straight into their types, strings borrowed from the text where they
//! need no unescaping, unknown fields into `extra`, and the payload either
//! as a JSON tree or as raw text to be parsed later.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::{Envelope, Header};

/// A header key, matched without allocating for the known ones (also the
/// fast scanner's, `crate::scan`, which declines `Extensions` and `Other`).
pub(crate) enum Field {
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
