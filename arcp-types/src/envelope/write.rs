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
        payload: &serde_json::value::RawValue,
    ) -> String {
        self.as_header()
            .to_json_with(kind, idempotency_key, payload)
    }
}

impl Header<'_> {
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
    pub(super) fn to_json_with_serde(
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
