//! Dialect codecs: [`Frame`] to and from wire JSON.
//!
//! Two message sets are in use: ARCP v1.1 (`session.hello`, `job.submit`,
//! `job.result`, ...) and the legacy RFC-0001 v2 set (`session.open`,
//! `tool.invoke`, `job.completed`, ...) that the published Rust runtime speaks.
//! Each codec maps the dialect-neutral [`Message`] model to its own wire
//! names and field placement; nothing above a codec needs to know which one
//! is on the wire.
//!
//! Decoding is lossless for every message type this crate models: fields it
//! does not know are kept and written back. Documented normalisations:
//! - a `null` optional field may be dropped (`"details": null`);
//! - alias spellings are re-encoded under their main name: v1.1
//!   `session.bye` as `session.close`; legacy `ping`/`pong` as
//!   `session.ping`/`session.pong`, `tool.result` as `job.completed`,
//!   `tool.error` as `job.failed`, `session.unauthenticated` as
//!   `session.rejected`;
//! - `RATE_LIMITED` is re-encoded as `RESOURCE_EXHAUSTED`;
//! - a `session.hello` / `session.open` without `capabilities` re-encodes
//!   with `"capabilities": {}` (a programmatic [`Open`](crate::Open) with null
//!   capabilities gets the dialect's defaults instead).

mod legacy;
mod outcome_readers;
mod v1_1;

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::message::{Frame, Message, Object};
use crate::scan;
use crate::{Envelope, Header, RawJson};

/// Which ARCP message set is on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// ARCP v1.1: `session.hello`, `job.submit`, `job.result`, ...
    V1_1,
    /// RFC-0001 v2: `session.open`, `tool.invoke`, `job.completed`, ...
    Legacy,
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dialect::V1_1 => "v1.1",
            Dialect::Legacy => "legacy",
        })
    }
}

/// A frame that could not be decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Not a JSON object with the envelope's required fields.
    #[error("frame is not a valid ARCP envelope: {0}")]
    Envelope(#[source] serde_json::Error),
    /// The envelope is fine but its payload does not fit its type.
    #[error("invalid `{kind}` payload: {source}")]
    Payload {
        /// The envelope's `type`.
        kind: String,
        /// What was wrong.
        #[source]
        source: serde_json::Error,
    },
}

/// A frame's payload as [`Dialect::decode_with`] reads it.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // read one at a time, on the stack
pub enum Decoded<'a> {
    /// The payload decoded.
    Message(Message),
    /// A plainly successful result's value, unparsed (see
    /// [`Dialect::plain_result_value`]): read with
    /// [`PayloadScope::OutcomeOnly`] only.
    PlainResult(RawJson<'a>),
}

/// How much of a payload [`Dialect::decode_payload`] keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PayloadScope {
    /// Everything: lossless, as [`Dialect::decode`].
    #[default]
    All,
    /// What deciding a call's outcome needs, for a receiver nobody watches:
    /// the fields this crate does not model are skipped in an acceptance, an
    /// event and a started job (whose payload is then empty), and so are an
    /// event's `ts` and its body unless the event is a `result_chunk` (a body written
    /// before its event's `kind` is read, then dropped); a result with a
    /// value keeps, of its other fields, only those that say how the job
    /// ended (`final_status`, `code`, `message`, `result_id`, `result_ref`),
    /// and one without a value keeps them all (they say where the value is
    /// and describe it). A legacy acceptance's `request_id` is only what its
    /// payload says (the request it answers is the header's
    /// `correlation_id`). Every other message is decoded in full.
    /// Skipped fields are not built, so they cost no allocation; they are
    /// not checked beyond being JSON.
    OutcomeOnly,
}

impl Dialect {
    /// Decodes one text frame.
    ///
    /// One pass over the text: the header is read into an [`Envelope`] and
    /// the payload is parsed from its raw text straight into the type the
    /// frame's `type` names (no intermediate `Value` tree).
    pub fn decode(self, text: &str) -> Result<Frame, DecodeError> {
        let (header, message) = self.decode_borrowed(text)?;
        Ok(Frame {
            envelope: header.into_envelope(Value::Null),
            message,
        })
    }

    /// Decodes one text frame as [`decode`](Self::decode) does, leaving the
    /// header's strings borrowed from `text`: a receiver that only looks at
    /// the header copies nothing.
    pub fn decode_borrowed(self, text: &str) -> Result<(Header<'_>, Message), DecodeError> {
        let (header, raw) = self.decode_header(text)?;
        let message = self.decode_payload(&header, raw, PayloadScope::All)?;
        Ok((header, message))
    }

    /// The first half of [`decode_borrowed`](Self::decode_borrowed): the
    /// header, and the payload's raw JSON (borrowed from `text`; `None`
    /// when the frame has none), for a receiver that looks at the header
    /// before deciding how much of the payload to keep.
    pub fn decode_header(
        self,
        text: &str,
    ) -> Result<(Header<'_>, Option<RawJson<'_>>), DecodeError> {
        if let Some(scanned) = crate::scan::scan_header(text) {
            return Ok(scanned);
        }
        let (header, payload) = Envelope::parse_raw(text).map_err(DecodeError::Envelope)?;
        Ok((header, payload.map(RawJson::from)))
    }

    /// The second half: the payload of the frame whose header is `header`,
    /// read into the type its `type` names, keeping what `scope` says.
    pub fn decode_payload(
        self,
        header: &Header<'_>,
        payload: Option<RawJson<'_>>,
        scope: PayloadScope,
    ) -> Result<Message, DecodeError> {
        self.decode_message(Head::of(header), Payload::Raw(payload), scope)
    }

    /// For a receiver that hands a call's value on without reading it (the
    /// client's connection task: the caller that receives the value parses
    /// it): the value of a result frame as raw JSON, borrowed from the
    /// frame, when the result is plainly a success with an inline value
    /// (`job.result`, or the legacy `job.completed`; no status other than
    /// `success`; the value not `null`). `None` for every other frame, and
    /// for a result that is anything but plain: decode it with
    /// [`decode_payload`](Self::decode_payload). Where this gives a value,
    /// `decode_payload` reads the same value and no failure status.
    pub fn plain_result_value<'a>(
        self,
        header: &Header<'_>,
        payload: Option<RawJson<'a>>,
    ) -> Option<RawJson<'a>> {
        let payload = payload?;
        match (self, &*header.kind) {
            (Dialect::V1_1, "job.result") => {
                outcome_readers::plain_result_value(payload, "result", None)
            }
            // `value` is the legacy name; `result` counts only without it.
            (Dialect::Legacy, "job.completed") => {
                outcome_readers::plain_result_value(payload, "value", Some("result"))
            }
            _ => None,
        }
    }

    /// One frame read the way a receiver of calls' replies reads it, in one
    /// pass over the payload where the frame allows: the header first, then
    /// `scope_of(&header)` says how much of the payload to keep, and with
    /// [`PayloadScope::OutcomeOnly`] a plainly successful result is handed
    /// out as its value's text ([`plain_result_value`](Self::plain_result_value)).
    ///
    /// The same answer as [`decode_header`](Self::decode_header), then
    /// `plain_result_value` (outcome-only scope) or
    /// [`decode_payload`](Self::decode_payload), and the same errors. What
    /// differs is the cost: when the payload is the frame's last field (as
    /// runtimes write it), an acceptance, an event or a result read for its
    /// outcome is checked by the reading itself instead of by a scan before
    /// it. `scope_of` may be called twice (a frame that turns out not to end
    /// with its payload is read again, whole).
    pub fn decode_with<'a>(
        self,
        text: &'a str,
        scope_of: impl Fn(&Header<'a>) -> PayloadScope,
    ) -> Result<(Header<'a>, Decoded<'a>, PayloadScope), DecodeError> {
        let (header, payload) = match scan::scan_header_deferring(text) {
            Some((header, scan::Payload::Tail(tail))) => {
                let scope = scope_of(&header);
                if let Some(read) = self.read_tail(&header, tail, scope) {
                    return Ok((header, read, scope));
                }
                // Not the payload after all (a field after it), or not
                // JSON: the full reading decides.
                self.decode_header(text)?
            }
            Some((header, scan::Payload::Checked(payload))) => (header, payload),
            None => self.decode_header(text)?,
        };
        let scope = scope_of(&header);
        let read = self.read_payload(&header, payload, scope)?;
        Ok((header, read, scope))
    }

    /// The payload of [`decode_with`](Self::decode_with) from checked text.
    #[inline]
    fn read_payload<'a>(
        self,
        header: &Header<'_>,
        payload: Option<RawJson<'a>>,
        scope: PayloadScope,
    ) -> Result<Decoded<'a>, DecodeError> {
        if scope == PayloadScope::OutcomeOnly {
            if let Some(value) = self.plain_result_value(header, payload) {
                return Ok(Decoded::PlainResult(value));
            }
        }
        self.decode_payload(header, payload, scope)
            .map(Decoded::Message)
    }

    /// The payload of [`decode_with`](Self::decode_with) from a frame's
    /// unchecked tail, or `None` when it is not one whole JSON value.
    ///
    /// The readers of a call's acceptance, events and result, read for the
    /// outcome, check every byte of their payload (a walk that checks as
    /// it skips, or serde reading the text whole); they take the tail as
    /// it is. Every other frame's payload is checked first, as the scan
    /// would have (some readers skip a payload they have no use for).
    #[inline]
    fn read_tail<'a>(
        self,
        header: &Header<'_>,
        tail: &'a str,
        scope: PayloadScope,
    ) -> Option<Decoded<'a>> {
        let reads_all = scope == PayloadScope::OutcomeOnly
            && matches!(
                &*header.kind,
                "job.accepted" | "job.event" | "job.result" | "job.completed"
            );
        let payload = if reads_all {
            RawJson::unchecked(tail)
        } else {
            scan::checked_value(tail)?
        };
        self.read_payload(header, Some(payload), scope).ok()
    }

    /// Decodes an already parsed envelope (its `payload` tree included).
    pub fn decode_envelope(self, mut envelope: Envelope) -> Result<Frame, DecodeError> {
        let payload = Payload::Tree(std::mem::take(&mut envelope.payload));
        let message =
            self.decode_message(Head::of_envelope(&envelope), payload, PayloadScope::All)?;
        Ok(Frame { envelope, message })
    }

    fn decode_message(
        self,
        head: Head<'_>,
        payload: Payload<'_>,
        scope: PayloadScope,
    ) -> Result<Message, DecodeError> {
        match self {
            Dialect::V1_1 => v1_1::decode(head, payload, scope),
            Dialect::Legacy => legacy::decode(head, payload, scope),
        }
    }

    /// Encodes a frame to its wire envelope.
    pub fn to_envelope(self, frame: &Frame) -> Envelope {
        let mut envelope = frame.envelope.clone();
        let (kind, payload) = match self {
            Dialect::V1_1 => v1_1::encode(frame, &mut envelope),
            Dialect::Legacy => legacy::encode(frame, &mut envelope),
        };
        envelope.kind = kind.into_owned();
        envelope.payload = payload;
        envelope
    }

    /// Encodes a frame to wire JSON text.
    pub fn encode(self, frame: &Frame) -> String {
        // An Envelope holds only strings, numbers and JSON values, so
        // serialization cannot fail.
        serde_json::to_string(&self.to_envelope(frame)).unwrap_or_default()
    }
}

/// A request's payload encoded once for one dialect
/// ([`Dialect::encode_invoke`]); every attempt re-sends these exact bytes
/// under a fresh envelope ([`EncodedRequest::frame`]).
#[derive(Debug, Clone)]
pub struct EncodedRequest {
    dialect: Dialect,
    kind: &'static str,
    /// One JSON object's text, as this crate wrote it.
    payload: String,
    envelope_key: Option<String>,
}

impl EncodedRequest {
    /// The dialect it was encoded for.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The payload's wire JSON.
    pub fn payload(&self) -> &str {
        &self.payload
    }

    /// Wire JSON of one attempt: `header` (id, timestamp, session, trace,
    /// ...) around the payload encoded once. Byte for byte what
    /// [`Dialect::encode`] writes for the same frame, without re-encoding
    /// the payload.
    pub fn frame(&self, header: &Envelope) -> String {
        header.to_json_with(self.kind, self.envelope_key.as_deref(), &self.payload)
    }

    /// The request these bytes encode, decoded back: what re-encoding the
    /// same request for another dialect starts from, so a sender need not
    /// keep the request itself once it is encoded.
    pub fn to_invoke(&self) -> Result<crate::message::Invoke, DecodeError> {
        let head = Head {
            kind: self.kind,
            job_id: None,
            correlation_id: None,
            idempotency_key: self.envelope_key.as_deref(),
        };
        match self.dialect.decode_message(
            head,
            Payload::Raw(Some(RawJson::checked(&self.payload))),
            PayloadScope::All,
        )? {
            Message::Invoke(invoke) => Ok(invoke),
            // The payload was encoded as a request just above.
            other => Err(DecodeError::Payload {
                kind: self.kind.to_owned(),
                source: serde::de::Error::custom(format_args!(
                    "decoded as {:?}, not a request",
                    std::mem::discriminant(&other)
                )),
            }),
        }
    }

    /// [`frame`](Self::frame) around a borrowed header (see
    /// [`Header::outgoing`]): a sender that keeps its ids and timestamp
    /// buffers copies nothing but the output.
    pub fn frame_with(&self, header: &Header<'_>) -> String {
        header.to_json_with(self.kind, self.envelope_key.as_deref(), &self.payload)
    }
}

impl Dialect {
    /// Encodes the payload of a `job.submit` / `tool.invoke` once, in one
    /// pass (no clone of the arguments, no intermediate tree). The fields
    /// come out in the order the full encoder writes them (sorted by name,
    /// as a JSON object of this crate sorts them).
    pub fn encode_invoke(self, invoke: &crate::message::Invoke) -> EncodedRequest {
        let mut fields = Fields::default();
        let (kind, envelope_key) = match self {
            Dialect::V1_1 => v1_1::invoke_fields(invoke, &mut fields),
            Dialect::Legacy => legacy::invoke_fields(invoke, &mut fields),
        };
        EncodedRequest {
            dialect: self,
            kind,
            // Strings and JSON values serialize infallibly; the text is not
            // parsed back to be checked (it was just written as JSON).
            payload: serde_json::to_string(&fields.sorted()).unwrap_or_else(|_| "{}".to_owned()),
            envelope_key,
        }
    }
}

/// One payload field for [`SortedObject`]: a name and a borrowed value.
type Field<'a> = (&'a str, FieldValue<'a>);

/// A borrowed payload value.
#[derive(Clone, Copy)]
enum FieldValue<'a> {
    Str(&'a str),
    Json(&'a Value),
}

/// A payload's fields as they are gathered: a request's own few on the
/// stack, spilling to the heap only for extension fields beyond them.
struct Fields<'a> {
    inline: [Field<'a>; INLINE_FIELDS],
    len: usize,
    spilled: Vec<Field<'a>>,
}

/// Fields kept on the stack: a `job.submit`'s three and one extension.
const INLINE_FIELDS: usize = 4;

impl Default for Fields<'_> {
    fn default() -> Self {
        Fields {
            inline: [("", FieldValue::Str("")); INLINE_FIELDS],
            len: 0,
            spilled: Vec::new(),
        }
    }
}

impl<'a> Fields<'a> {
    fn push(&mut self, field: Field<'a>) {
        if self.len < INLINE_FIELDS {
            self.inline[self.len] = field;
            self.len += 1;
        } else {
            if self.spilled.is_empty() {
                self.spilled.extend_from_slice(&self.inline);
            }
            self.spilled.push(field);
        }
    }

    /// Sorted by name (stable), the first of a repeated name kept.
    fn sorted(&mut self) -> SortedObject<'_> {
        if self.spilled.is_empty() {
            let fields = &mut self.inline[..self.len];
            fields.sort_by(|a, b| a.0.cmp(b.0));
            let mut kept = 0;
            for i in 0..fields.len() {
                if kept == 0 || fields[i].0 != fields[kept - 1].0 {
                    fields[kept] = fields[i];
                    kept += 1;
                }
            }
            return SortedObject(&self.inline[..kept]);
        }
        self.spilled.sort_by(|a, b| a.0.cmp(b.0));
        self.spilled.dedup_by(|later, earlier| later.0 == earlier.0);
        SortedObject(&self.spilled)
    }
}

/// Fields already sorted by name, serialized as one JSON object.
struct SortedObject<'a>(&'a [Field<'a>]);

impl Serialize for SortedObject<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, value) in self.0 {
            match value {
                FieldValue::Str(v) => map.serialize_entry(name, v)?,
                FieldValue::Json(v) => map.serialize_entry(name, v)?,
            }
        }
        map.end()
    }
}

/// An `Open` whose `capabilities` are null asks the encoder for the
/// dialect's defaults; one decoded without capabilities must not, so absent
/// reads as `{}` (and re-encodes so).
fn decode_open(mut open: crate::message::Open) -> crate::message::Open {
    if open.capabilities.is_null() {
        open.capabilities = Value::Object(Object::new());
    }
    open
}

/// The header fields a codec reads to decode a payload, borrowed from a
/// [`Header`] or an [`Envelope`].
#[derive(Clone, Copy)]
pub(super) struct Head<'a> {
    kind: &'a str,
    job_id: Option<&'a str>,
    correlation_id: Option<&'a str>,
    idempotency_key: Option<&'a str>,
}

impl<'a> Head<'a> {
    fn of(header: &'a Header<'_>) -> Self {
        Head {
            kind: &header.kind,
            job_id: header.job_id.as_deref(),
            correlation_id: header.correlation_id.as_deref(),
            idempotency_key: header.idempotency_key.as_deref(),
        }
    }

    fn of_envelope(envelope: &'a Envelope) -> Self {
        Head {
            kind: &envelope.kind,
            job_id: envelope.job_id.as_deref(),
            correlation_id: envelope.correlation_id.as_deref(),
            idempotency_key: envelope.idempotency_key.as_deref(),
        }
    }
}

/// A frame's payload on its way to a model type: the raw JSON text
/// borrowed from the frame (parsed once, into the target type), or a tree
/// parsed before (a caller that decoded the envelope itself). A missing
/// payload is `Raw(None)` or `Tree(Null)`.
pub(super) enum Payload<'a> {
    Raw(Option<RawJson<'a>>),
    Tree(Value),
}

impl From<Value> for Payload<'_> {
    fn from(value: Value) -> Self {
        Payload::Tree(value)
    }
}

impl Payload<'_> {
    /// The payload as a tree, for the codec steps that rewrite fields.
    fn into_value(self, kind: &str) -> Result<Value, DecodeError> {
        match self {
            Payload::Tree(value) => Ok(value),
            Payload::Raw(None) => Ok(Value::Null),
            Payload::Raw(Some(raw)) => {
                serde_json::from_str(raw.get()).map_err(|source| DecodeError::Payload {
                    kind: kind.to_owned(),
                    source,
                })
            }
        }
    }
}

/// Deserializes a payload; `null` reads as an empty object.
fn from_payload<'a, T: DeserializeOwned>(
    kind: &str,
    payload: impl Into<Payload<'a>>,
) -> Result<T, DecodeError> {
    let error = |source| DecodeError::Payload {
        kind: kind.to_owned(),
        source,
    };
    match payload.into() {
        Payload::Tree(Value::Null) | Payload::Raw(None) => {
            serde_json::from_value(Value::Object(Object::new())).map_err(error)
        }
        Payload::Tree(value) => serde_json::from_value(value).map_err(error),
        Payload::Raw(Some(raw)) if raw.get() == "null" => {
            serde_json::from_value(Value::Object(Object::new())).map_err(error)
        }
        Payload::Raw(Some(raw)) => serde_json::from_str(raw.get()).map_err(error),
    }
}

/// A payload that must be a JSON object (or `null`, read as empty).
fn object_payload<'a>(kind: &str, payload: impl Into<Payload<'a>>) -> Result<Object, DecodeError> {
    from_payload(kind, payload)
}

/// Serializes a payload struct. The model types serialize infallibly.
fn to_payload<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// Renames `from` to `to` in a nested object, if present.
fn rename_in(payload: &mut Value, object: &str, from: &str, to: &str) {
    if let Some(inner) = payload.get_mut(object).and_then(Value::as_object_mut) {
        if let Some(v) = inner.remove(from) {
            inner.insert(to.to_owned(), v);
        }
    }
}

/// Renames a top-level field of an object payload, if present.
fn rename(payload: &mut Value, from: &str, to: &str) {
    if let Some(map) = payload.as_object_mut() {
        if let Some(v) = map.remove(from) {
            map.insert(to.to_owned(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Invoke, Message};
    use serde_json::json;

    #[test]
    fn a_request_encoded_once_is_byte_identical_to_a_full_encode() {
        let invokes = [
            json!({"tool": "refund", "arguments": {"order": 4812, "note": "é\"x"}}),
            json!({"tool": "t", "arguments": [1, 2.5, null], "idempotency_key": "k-1"}),
            json!({"tool": "t", "arguments": {}, "idempotency_key": "k-2",
                   "lease_request": {"secs": 5}, "max_runtime_sec": 9}),
            json!({"tool": "t", "arguments": "text", "idempotency_key": "k-3",
                   "extra_field": true}),
        ];
        for dialect in [Dialect::V1_1, Dialect::Legacy] {
            for invoke in &invokes {
                let invoke: Invoke = serde_json::from_value(invoke.clone()).unwrap();
                let mut frame = Frame::new(Message::Invoke(invoke.clone()));
                frame.envelope.session_id = Some("sess_1".into());
                frame.envelope.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
                frame.envelope.extra.insert("x_vendor".into(), json!(1));
                let encoded = dialect.encode_invoke(&invoke);
                assert_eq!(encoded.dialect(), dialect);
                assert_eq!(
                    encoded.frame(&frame.envelope),
                    dialect.encode(&frame),
                    "{dialect}: {invoke:?}"
                );
                // The same around a borrowed header.
                let envelope = &frame.envelope;
                let timestamp = envelope.timestamp.as_deref().unwrap();
                let mut header = Header::outgoing(&envelope.id, timestamp);
                header.session_id = Some("sess_1".into());
                header.trace_id = Some("4bf92f3577b34da6a3ce929d0e0e4736".into());
                header.extra = std::borrow::Cow::Borrowed(&envelope.extra);
                assert_eq!(encoded.frame_with(&header), dialect.encode(&frame));
                // And back: the request is recovered from its bytes, so a
                // sender may drop it once encoded.
                let back = encoded.to_invoke().unwrap();
                let again = dialect.encode_invoke(&back);
                assert_eq!(again.frame_with(&header), dialect.encode(&frame));
                let other = match dialect {
                    Dialect::V1_1 => Dialect::Legacy,
                    _ => Dialect::V1_1,
                };
                assert_eq!(
                    other.encode_invoke(&back).payload(),
                    other.encode_invoke(&invoke).payload(),
                    "{dialect} -> {other}: {invoke:?}"
                );
            }
        }
    }
}
