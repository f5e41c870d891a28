//! The ARCP envelope: the JSON object every message travels in.
//!
//! This file holds the two views of a header: [`Envelope`] (owned, with
//! its payload as a JSON tree) and [`Header`] (borrowed from a frame's
//! text). How a header is read from wire text is `envelope/read.rs`; how it
//! is written around a payload encoded beforehand, `envelope/write.rs`.

mod read;
mod write;

pub(crate) use read::Field;

use std::borrow::Cow;

use serde::Serialize;
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
                let payload = r#"{"a":[1,"b"]}"#;
                let fast = header.to_json_with(&kind, key.as_deref(), payload);
                let serde = header.to_json_with_serde(&kind, key.as_deref(), payload);
                prop_assert_eq!(&fast, &serde);
                // Sized up front: never short, and exact when nothing was
                // escaped (every escape starts with a backslash), so the
                // buffer goes to the socket with no room left over.
                // (Unknown fields take serde's way, which grows its buffer.)
                let size = header.wire_size(&kind, key.as_deref(), payload);
                if header.extra.is_empty() {
                    prop_assert!(fast.len() <= size, "{} > {size}", fast.len());
                    if !fast.contains('\\') {
                        prop_assert_eq!(fast.len(), size);
                        prop_assert_eq!(fast.capacity(), fast.len());
                    }
                }
                let back: Envelope = serde_json::from_str(&fast).unwrap();
                prop_assert_eq!(&back.kind, &kind);
                prop_assert_eq!(back.idempotency_key.as_deref(), key.as_deref().or(header.idempotency_key.as_deref()));
                prop_assert_eq!(back.trace_id.as_deref(), header.trace_id.as_deref());
            }
        }
    }
}
