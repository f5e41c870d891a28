//! Writing an envelope around a payload encoded beforehand: field by field
//! into one buffer sized up front (this is on every request's path), or
//! through serde for a header with extension or unknown fields; both give
//! the same bytes (tested).

use serde::Serialize;
use serde_json::{Map, Value};

use super::{Envelope, Header};

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
        payload: &str,
    ) -> String {
        self.as_header()
            .to_json_with(kind, idempotency_key, payload)
    }
}

impl Header<'_> {
    /// Wire JSON of this header with `kind`, an optional envelope-level
    /// idempotency key and `payload` (one JSON value's text, encoded
    /// beforehand), in [`Envelope`]'s field order; one buffer, sized up
    /// front.
    ///
    /// Written field by field (this is on every request's path): a string
    /// with nothing to escape is copied as it is, anything else goes
    /// through serde_json. A header with extension or unknown fields is
    /// written by serde alone; both ways give the same bytes (tested).
    pub(crate) fn to_json_with(
        &self,
        kind: &str,
        idempotency_key: Option<&str>,
        payload: &str,
    ) -> String {
        if self.extensions.is_some() || !self.extra.is_empty() {
            return self.to_json_with_serde(kind, idempotency_key, payload);
        }
        let (before_seq, after_seq) = self.optional_fields(idempotency_key);
        let mut out = String::with_capacity(self.wire_size(kind, idempotency_key, payload));
        out.push_str(ARCP);
        json_string(&mut out, &self.arcp);
        out.push_str(ID);
        json_string(&mut out, &self.id);
        out.push_str(TYPE);
        json_string(&mut out, kind);
        let fields = |out: &mut String, fields: &[(&str, Option<&str>)]| {
            for (name, value) in fields {
                if let Some(value) = value {
                    out.push_str(name);
                    json_string(out, value);
                }
            }
        };
        fields(&mut out, &before_seq);
        if let Some(seq) = self.event_seq {
            use std::fmt::Write as _;
            let _ = write!(out, "{EVENT_SEQ}{seq}");
        }
        fields(&mut out, &after_seq);
        out.push_str(PAYLOAD);
        out.push_str(payload);
        out.push('}');
        out
    }

    /// The optional string fields in wire order, before and after
    /// `event_seq`, with their names as written.
    fn optional_fields<'a>(&'a self, idempotency_key: Option<&'a str>) -> OptionalFields<'a> {
        (
            [
                (",\"timestamp\":", self.timestamp.as_deref()),
                (",\"session_id\":", self.session_id.as_deref()),
                (",\"job_id\":", self.job_id.as_deref()),
            ],
            [
                (",\"correlation_id\":", self.correlation_id.as_deref()),
                (",\"causation_id\":", self.causation_id.as_deref()),
                (
                    ",\"idempotency_key\":",
                    idempotency_key.or(self.idempotency_key.as_deref()),
                ),
                (",\"trace_id\":", self.trace_id.as_deref()),
                (",\"priority\":", self.priority.as_deref()),
                (",\"subscription_id\":", self.subscription_id.as_deref()),
            ],
        )
    }

    /// What [`to_json_with`](Self::to_json_with) writes: exact when no
    /// string needs escaping (ids, timestamps and keys never do), room to
    /// spare when one does. Exact matters: the socket takes a full buffer
    /// as it is, and one with room left over costs a block of its own
    /// (a `Bytes` made from a `Vec` whose length is not its capacity).
    pub(super) fn wire_size(
        &self,
        kind: &str,
        idempotency_key: Option<&str>,
        payload: &str,
    ) -> usize {
        let (before_seq, after_seq) = self.optional_fields(idempotency_key);
        let optional = before_seq
            .iter()
            .chain(&after_seq)
            .filter_map(|(name, value)| Some(name.len() + quoted_size((*value)?)))
            .sum::<usize>();
        let seq = self.event_seq.map_or(0, |seq| {
            EVENT_SEQ.len() + seq.checked_ilog10().map_or(1, |d| d as usize + 1)
        });
        ARCP.len()
            + quoted_size(&self.arcp)
            + ID.len()
            + quoted_size(&self.id)
            + TYPE.len()
            + quoted_size(kind)
            + optional
            + seq
            + PAYLOAD.len()
            + payload.len()
            + 1
    }

    /// [`to_json_with`](Self::to_json_with) through serde: any header.
    pub(super) fn to_json_with_serde(
        &self,
        kind: &str,
        idempotency_key: Option<&str>,
        payload: &str,
    ) -> String {
        // Text this crate encoded: it parses (the check is the price of
        // the rare header that takes this way).
        let Ok(raw) = serde_json::from_str::<&serde_json::value::RawValue>(payload) else {
            return String::new();
        };
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
            payload: raw,
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

/// The field names [`Header::to_json_with`] writes around the optional ones.
const ARCP: &str = "{\"arcp\":";
const ID: &str = ",\"id\":";
const TYPE: &str = ",\"type\":";
const EVENT_SEQ: &str = ",\"event_seq\":";
const PAYLOAD: &str = ",\"payload\":";

/// A header's optional string fields with their written names, before and
/// after `event_seq`.
type OptionalFields<'a> = (
    [(&'static str, Option<&'a str>); 3],
    [(&'static str, Option<&'a str>); 6],
);

/// The bytes [`json_string`] writes for `s`: exact when nothing in it needs
/// escaping, else an upper bound (an escape takes at most six bytes).
fn quoted_size(s: &str) -> usize {
    match crate::json_escape::first_special(s.as_bytes()) {
        None => s.len() + 2,
        Some(_) => 6 * s.len() + 2,
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
