//! The fast path for reading an envelope's header: one forward scan over the
//! frame's bytes, every string borrowed, no serde visitor.
//!
//! It takes the frames real runtimes send on the hot path (known header
//! fields, strings without escapes, an object payload) and declines
//! everything else by returning `None`: an escape in a string or key, an
//! unknown or repeated field, `extensions`, a number that is not a plain
//! `u64`, a missing required field, anything malformed. The caller then
//! parses the frame with serde, which either reads it or reports the
//! precise error. So this scanner never decides whether a frame is valid;
//! it only ever produces what the serde path would have produced
//! (`codec_props` checks that on generated frames).
//!
//! The payload is checked to be JSON by one validating skip over it
//! ([`plain_value_end`]), which takes the plain kind (strings without
//! escapes, nesting up to [`PLAIN_DEPTH`]); anything else in a payload is
//! read by serde as a borrowed `RawValue`, which validates it. Either way
//! the payload is valid JSON where the scan goes on after it. For a reader
//! that checks what it reads ([`scan_header_deferring`]), a payload written
//! last is not scanned at all but left to that reader.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Map;

use crate::envelope::{Field, Header};
use crate::json_escape::plain_string_at;
use crate::raw_json::RawJson;

/// Nesting the validating skip follows; deeper values go to serde.
const PLAIN_DEPTH: usize = 64;

/// The header and raw payload of `text`, or `None` when the frame needs
/// the serde path (see the module docs).
pub(crate) fn scan_header(text: &str) -> Option<(Header<'_>, Option<RawJson<'_>>)> {
    match scan(text, false)? {
        (header, Payload::Checked(payload)) => Some((header, payload)),
        // Not made without deferring.
        (_, Payload::Tail(_)) => None,
    }
}

/// A payload as [`scan_header_deferring`] leaves it.
pub(crate) enum Payload<'a> {
    /// Checked JSON (or no payload): the scan read the whole frame.
    Checked(Option<RawJson<'a>>),
    /// The text between `"payload":` and the frame's closing brace, not
    /// checked: the payload, if the frame is valid JSON that ends with its
    /// payload (as runtimes write frames). Whoever reads it must check
    /// that it is one whole JSON value, and read the frame otherwise.
    Tail(&'a str),
}

/// [`scan_header`], except that a payload written after every required
/// header field is not scanned but left as its [`Payload::Tail`]: one
/// reader that checks as it reads then passes over it once instead of
/// twice.
#[inline]
pub(crate) fn scan_header_deferring(text: &str) -> Option<(Header<'_>, Payload<'_>)> {
    scan(text, true)
}

fn scan(text: &str, defer_tail: bool) -> Option<(Header<'_>, Payload<'_>)> {
    let mut s = Scanner {
        text,
        bytes: text.as_bytes(),
        at: 0,
    };
    let mut slots = Slots::default();
    let mut tail = None;
    s.skip_ws();
    s.eat(b'{')?;
    s.skip_ws();
    if s.peek()? == b'}' {
        // `{}` lacks the required fields: serde's error says which.
        return None;
    }
    loop {
        s.skip_ws();
        // `extensions` and unknown fields are kept as JSON trees: serde's job.
        let field = s.field()?;
        s.skip_ws();
        s.eat(b':')?;
        s.skip_ws();
        match field {
            Field::Arcp => set(&mut slots.arcp, s.plain_string()?)?,
            Field::Id => set(&mut slots.id, s.plain_string()?)?,
            Field::Type => set(&mut slots.kind, s.plain_string()?)?,
            Field::Timestamp => set(&mut slots.timestamp, s.optional_string()?)?,
            Field::SessionId => set(&mut slots.session_id, s.optional_string()?)?,
            Field::JobId => set(&mut slots.job_id, s.optional_string()?)?,
            Field::CorrelationId => set(&mut slots.correlation_id, s.optional_string()?)?,
            Field::CausationId => set(&mut slots.causation_id, s.optional_string()?)?,
            Field::IdempotencyKey => set(&mut slots.idempotency_key, s.optional_string()?)?,
            Field::TraceId => set(&mut slots.trace_id, s.optional_string()?)?,
            Field::Priority => set(&mut slots.priority, s.optional_string()?)?,
            Field::SubscriptionId => set(&mut slots.subscription_id, s.optional_string()?)?,
            Field::EventSeq => set(&mut slots.event_seq, s.optional_u64()?)?,
            Field::Payload => {
                // Only once the required fields are read: a frame that
                // names its type after the payload is scanned whole.
                let required = slots.arcp.is_some() && slots.id.is_some() && slots.kind.is_some();
                if defer_tail && required && slots.payload.is_none() {
                    if let Some(rest) = s.tail() {
                        tail = Some(rest);
                        break;
                    }
                }
                set(&mut slots.payload, s.raw_value()?)?
            }
            // Never made by `field`: serde's, as every other name.
            Field::Extensions | Field::Other(_) => return None,
        }
        s.skip_ws();
        match s.next()? {
            b',' => continue,
            b'}' => break,
            _ => return None,
        }
    }
    let payload = match tail {
        Some(tail) => Payload::Tail(tail),
        None => {
            s.skip_ws();
            if s.at != s.bytes.len() {
                return None;
            }
            Payload::Checked(slots.payload)
        }
    };
    let header = Header {
        arcp: Cow::Borrowed(slots.arcp?),
        id: Cow::Borrowed(slots.id?),
        kind: Cow::Borrowed(slots.kind?),
        timestamp: borrowed(slots.timestamp),
        session_id: borrowed(slots.session_id),
        job_id: borrowed(slots.job_id),
        event_seq: slots.event_seq.flatten(),
        correlation_id: borrowed(slots.correlation_id),
        causation_id: borrowed(slots.causation_id),
        idempotency_key: borrowed(slots.idempotency_key),
        trace_id: borrowed(slots.trace_id),
        priority: borrowed(slots.priority),
        subscription_id: borrowed(slots.subscription_id),
        extensions: None,
        extra: Cow::Owned(Map::new()),
    };
    Some((header, payload))
}

/// A frame's `type`, read without the rest of it, when only fields with
/// plain string values come before it, as runtimes write envelopes
/// (`{"arcp":"1.1","id":"..","type":"job.event",..`); `None` when anything
/// else comes first. Nothing after `type` is looked at, so the frame may
/// still be invalid: this tells a receiver what a frame would be if it
/// decodes (to leave one it has no use for undecoded), never that it does.
pub fn peek_kind(text: &str) -> Option<&str> {
    let mut s = Scanner {
        text,
        bytes: text.as_bytes(),
        at: 0,
    };
    s.skip_ws();
    s.eat(b'{')?;
    loop {
        s.skip_ws();
        let key = s.plain_string()?;
        s.skip_ws();
        s.eat(b':')?;
        s.skip_ws();
        let value = s.plain_string()?;
        if key == "type" {
            return Some(value);
        }
        s.skip_ws();
        s.eat(b',')?;
    }
}

/// Each field as read: `Some(None)` is an explicit `null`.
#[derive(Default)]
struct Slots<'a> {
    arcp: Option<&'a str>,
    id: Option<&'a str>,
    kind: Option<&'a str>,
    timestamp: Option<Option<&'a str>>,
    session_id: Option<Option<&'a str>>,
    job_id: Option<Option<&'a str>>,
    event_seq: Option<Option<u64>>,
    correlation_id: Option<Option<&'a str>>,
    causation_id: Option<Option<&'a str>>,
    idempotency_key: Option<Option<&'a str>>,
    trace_id: Option<Option<&'a str>>,
    priority: Option<Option<&'a str>>,
    subscription_id: Option<Option<&'a str>>,
    payload: Option<RawJson<'a>>,
}

/// Fills a slot once; a repeated field declines (serde reports it).
fn set<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

fn borrowed(slot: Option<Option<&str>>) -> Option<Cow<'_, str>> {
    slot.flatten().map(Cow::Borrowed)
}

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scanner<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn eat(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// A header field's name, quotes included, when it is one the scan
    /// reads: compared byte for byte with the known names (one that
    /// matches holds no escape), by its first letter. `extensions` and
    /// unknown names are `None`: serde keeps them as JSON trees.
    fn field(&mut self) -> Option<Field> {
        let rest = &self.bytes[self.at..];
        let is = |name: &[u8]| rest.starts_with(name);
        let (name, field): (&[u8], Field) = match *rest.get(1)? {
            b'a' if is(b"\"arcp\"") => (b"\"arcp\"", Field::Arcp),
            b'i' if is(b"\"id\"") => (b"\"id\"", Field::Id),
            b'i' if is(b"\"idempotency_key\"") => (b"\"idempotency_key\"", Field::IdempotencyKey),
            b't' if is(b"\"type\"") => (b"\"type\"", Field::Type),
            b't' if is(b"\"timestamp\"") => (b"\"timestamp\"", Field::Timestamp),
            b't' if is(b"\"trace_id\"") => (b"\"trace_id\"", Field::TraceId),
            b's' if is(b"\"session_id\"") => (b"\"session_id\"", Field::SessionId),
            b's' if is(b"\"subscription_id\"") => (b"\"subscription_id\"", Field::SubscriptionId),
            b'j' if is(b"\"job_id\"") => (b"\"job_id\"", Field::JobId),
            b'c' if is(b"\"correlation_id\"") => (b"\"correlation_id\"", Field::CorrelationId),
            b'c' if is(b"\"causation_id\"") => (b"\"causation_id\"", Field::CausationId),
            b'p' if is(b"\"payload\"") => (b"\"payload\"", Field::Payload),
            b'p' if is(b"\"priority\"") => (b"\"priority\"", Field::Priority),
            b'e' if is(b"\"event_seq\"") => (b"\"event_seq\"", Field::EventSeq),
            _ => return None,
        };
        self.at += name.len();
        Some(field)
    }

    /// A string with no escapes and no control characters, borrowed.
    fn plain_string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let (string, next) = plain_string_at(self.text, self.at)?;
        self.at = next;
        Some(string)
    }

    fn null(&mut self) -> Option<()> {
        if self.bytes[self.at..].starts_with(b"null") {
            self.at += 4;
            Some(())
        } else {
            None
        }
    }

    fn optional_string(&mut self) -> Option<Option<&'a str>> {
        if self.peek()? == b'n' {
            self.null()?;
            return Some(None);
        }
        self.plain_string().map(Some)
    }

    /// A plain non-negative integer that fits a `u64`, or `null`.
    fn optional_u64(&mut self) -> Option<Option<u64>> {
        if self.peek()? == b'n' {
            self.null()?;
            return Some(None);
        }
        let start = self.at;
        let mut value: u64 = 0;
        while let Some(digit @ b'0'..=b'9') = self.peek() {
            value = value
                .checked_mul(10)?
                .checked_add(u64::from(digit - b'0'))?;
            self.at += 1;
        }
        let digits = self.at - start;
        // No digits or a leading zero: serde's. A fraction or exponent is
        // declined by the caller, which wants `,` or `}` next.
        if digits == 0 || (digits > 1 && self.bytes[start] == b'0') {
            return None;
        }
        Some(Some(value))
    }

    /// The rest of the frame up to its closing brace, whitespace trimmed:
    /// the value starting here, if it is the frame's last. Not checked.
    fn tail(&self) -> Option<&'a str> {
        let end_before_ws = |mut end: usize| {
            while end > self.at && matches!(self.bytes[end - 1], b' ' | b'\t' | b'\n' | b'\r') {
                end -= 1;
            }
            end
        };
        let brace = end_before_ws(self.bytes.len()).checked_sub(1)?;
        if brace < self.at || self.bytes[brace] != b'}' {
            return None;
        }
        let end = end_before_ws(brace);
        // Both ends sit next to ASCII bytes: char boundaries.
        (end > self.at)
            .then(|| self.text.get(self.at..end))
            .flatten()
    }

    /// The next JSON value, validated: by the plain skip, else by serde's
    /// `RawValue`.
    fn raw_value(&mut self) -> Option<RawJson<'a>> {
        if let Some(end) = plain_value_end(self.text, self.at, 0, Numbers::Any) {
            let value = self.text.get(self.at..end)?;
            self.at = end;
            return Some(RawJson::checked(value));
        }
        let rest = &self.text[self.at..];
        let mut de = serde_json::Deserializer::from_str(rest);
        let raw = <&RawValue>::deserialize(&mut de).ok()?;
        // `raw` is a slice of `rest` starting at its first byte (no
        // whitespace is left before a value): it ends where the value does.
        let offset = raw.get().as_ptr() as usize - rest.as_ptr() as usize;
        self.at += offset + raw.get().len();
        Some(RawJson::from(raw))
    }
}

/// `text` as one whole JSON value, checked: by the plain skip, else by
/// serde. `None` when it is not exactly one value.
pub(crate) fn checked_value(text: &str) -> Option<RawJson<'_>> {
    if plain_value_end(text, 0, 0, Numbers::Any) == Some(text.len()) {
        return Some(RawJson::checked(text));
    }
    serde_json::from_str::<&RawValue>(text)
        .ok()
        .map(RawJson::from)
}

/// Which numbers [`plain_value_end`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Numbers {
    /// Any, by JSON's grammar (a raw value has no range).
    Any,
    /// Those without an exponent and at most 40 characters long: what
    /// building a `serde_json::Value` never refuses.
    Small,
}

/// Where the JSON value that starts at byte `at` of `text` ends, when it is
/// valid JSON of the plain kind: strings without escapes or control
/// characters, nesting up to [`PLAIN_DEPTH`] (counting from `depth`),
/// numbers as `numbers` says. `None` for anything else, valid or not
/// (serde then judges it): a value this accepts, serde's `RawValue`
/// accepts with the same extent (`plain_values_are_what_serde_reads`).
pub(crate) fn plain_value_end(
    text: &str,
    at: usize,
    depth: usize,
    numbers: Numbers,
) -> Option<usize> {
    let bytes = text.as_bytes();
    match *bytes.get(at)? {
        b'"' => plain_string_at(text, at + 1).map(|(_, next)| next),
        open @ (b'{' | b'[') => {
            if depth == PLAIN_DEPTH {
                return None;
            }
            let close = if open == b'{' { b'}' } else { b']' };
            let mut i = json_ws(bytes, at + 1);
            if *bytes.get(i)? == close {
                return Some(i + 1);
            }
            loop {
                if open == b'{' {
                    if *bytes.get(i)? != b'"' {
                        return None;
                    }
                    i = json_ws(bytes, plain_string_at(text, i + 1)?.1);
                    if *bytes.get(i)? != b':' {
                        return None;
                    }
                    i = json_ws(bytes, i + 1);
                }
                i = json_ws(bytes, plain_value_end(text, i, depth + 1, numbers)?);
                match *bytes.get(i)? {
                    b',' => i = json_ws(bytes, i + 1),
                    b if b == close => return Some(i + 1),
                    _ => return None,
                }
            }
        }
        b't' => literal_end(bytes, at, b"true"),
        b'f' => literal_end(bytes, at, b"false"),
        b'n' => literal_end(bytes, at, b"null"),
        b'-' | b'0'..=b'9' => {
            let end = number_end(bytes, at)?;
            let small = || end - at <= 40 && !bytes[at..end].iter().any(|b| b | 0x20 == b'e');
            (numbers == Numbers::Any || small()).then_some(end)
        }
        _ => None,
    }
}

/// Past JSON whitespace from `at`.
fn json_ws(bytes: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(at) {
        at += 1;
    }
    at
}

fn literal_end(bytes: &[u8], at: usize, literal: &[u8]) -> Option<usize> {
    bytes[at..]
        .starts_with(literal)
        .then_some(at + literal.len())
}

/// The end of a number by JSON's grammar
/// (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`), whatever its size:
/// a raw value is not converted, so it has no range.
fn number_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    let digits = |from: usize| {
        let mut end = from;
        while let Some(b'0'..=b'9') = bytes.get(end) {
            end += 1;
        }
        end
    };
    if bytes.get(at) == Some(&b'-') {
        at += 1;
    }
    at = match *bytes.get(at)? {
        // A leading zero followed by a digit is refused, not cut short.
        b'0' if matches!(bytes.get(at + 1), Some(b'0'..=b'9')) => return None,
        b'0' => at + 1,
        b'1'..=b'9' => digits(at + 1),
        _ => return None,
    };
    if bytes.get(at) == Some(&b'.') {
        let end = digits(at + 1);
        if end == at + 1 {
            return None;
        }
        at = end;
    }
    if let Some(b'e' | b'E') = bytes.get(at) {
        at += 1;
        if let Some(b'+' | b'-') = bytes.get(at) {
            at += 1;
        }
        let end = digits(at);
        if end == at {
            return None;
        }
        at = end;
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    use serde_json::Value;

    use super::*;
    use crate::envelope::Envelope;

    #[test]
    fn a_payload_written_last_is_left_as_the_frames_tail() {
        let tail = |text| match scan_header_deferring(text) {
            Some((_, Payload::Tail(tail))) => Some(tail),
            _ => None,
        };
        let frame = r#"{"arcp":"1.1","id":"m","type":"job.result","payload":{"result":1} }
"#;
        assert_eq!(tail(frame), Some(r#"{"result":1}"#));
        // Not checked: a tail is whatever comes before the closing brace.
        let more = r#"{"arcp":"1.1","id":"m","type":"job.result","payload":{"a":1},"x":2}"#;
        assert_eq!(tail(more), Some(r#"{"a":1},"x":2"#));
        // A required field after the payload: scanned whole, checked.
        let late = r#"{"arcp":"1.1","id":"m","payload":{"a":1},"type":"job.result"}"#;
        assert!(matches!(
            scan_header_deferring(late),
            Some((_, Payload::Checked(Some(raw)))) if raw.get() == r#"{"a":1}"#
        ));
        // Nothing before the brace: not a tail. A frame cut short: its
        // payload's own brace is taken for the frame's (the reader finds
        // the rest is not one whole value).
        assert_eq!(
            tail(r#"{"arcp":"1.1","id":"m","type":"t","payload": }"#),
            None
        );
        let cut = r#"{"arcp":"1.1","id":"m","type":"t","payload":{"a":1}"#;
        assert_eq!(tail(cut), Some(r#"{"a":1"#));
        assert!(crate::Dialect::V1_1
            .decode_with(cut, |_| crate::PayloadScope::OutcomeOnly)
            .is_err());
        // Without deferring, the same frames read as before.
        assert!(scan_header(frame).is_some());
        assert!(scan_header(more).is_none());
    }

    #[test]
    fn peek_kind_reads_a_leading_type_and_nothing_else() {
        let event = r#"{"arcp":"1.1","id":"01J","type":"job.event","job_id":"job_1","payload":{"kind":"log"}}"#;
        assert_eq!(peek_kind(event), Some("job.event"));
        assert_eq!(
            peek_kind(" { \"type\" : \"job.result\" }"),
            Some("job.result")
        );
        // A `type` inside the payload is not the envelope's.
        let result =
            r#"{"arcp":"1.1","id":"01J","payload":{"type":"job.event"},"type":"job.result"}"#;
        assert_eq!(peek_kind(result), None);
        // Not plain before it (a number, an escape): not read.
        assert_eq!(peek_kind(r#"{"event_seq":1,"type":"job.event"}"#), None);
        assert_eq!(peek_kind(r#"{"id":"a\"b","type":"job.event"}"#), None);
        assert_eq!(peek_kind(r#"{"type":"job.\u0065vent"}"#), None);
        assert_eq!(peek_kind(r#"{"arcp":"1.1"}"#), None);
        assert_eq!(peek_kind("not json"), None);
        // Where it reads one, the full decoding agrees.
        let frame = crate::Dialect::V1_1.decode(event).unwrap();
        assert_eq!(frame.envelope.kind, "job.event");
    }

    /// The scanner either declines or reads exactly what serde reads.
    fn agrees(text: &str) -> Result<bool, TestCaseError> {
        let Some((header, payload)) = scan_header(text) else {
            return Ok(false);
        };
        let (want, want_payload) = Envelope::parse_raw(text).map_err(|e| {
            TestCaseError::fail(format!("scanned a frame serde refuses ({e}): {text}"))
        })?;
        prop_assert_eq!(header, want, "{}", text);
        prop_assert_eq!(payload.map(RawJson::get), want_payload.map(RawValue::get));
        Ok(true)
    }

    #[test]
    fn takes_a_plain_frame_and_borrows_every_string() {
        let text = r#" {"arcp":"1.1", "id" : "m1","type":"job.result","job_id":"job_1",
            "event_seq":42,"session_id":null,"payload":{"result":{"a":"\"x\""}}} "#;
        assert!(agrees(text).unwrap());
        let (header, payload) = scan_header(text).unwrap();
        assert!(matches!(header.job_id, Some(Cow::Borrowed("job_1"))));
        assert_eq!(header.event_seq, Some(42));
        assert_eq!(header.session_id, None);
        assert_eq!(payload.unwrap().get(), r#"{"result":{"a":"\"x\""}}"#);
    }

    #[test]
    fn declines_what_serde_must_read_or_refuse() {
        for text in [
            // Escapes, unknown fields, extensions, repeats.
            r#"{"arcp":"1.1","id":"m\u0031","type":"t"}"#,
            r#"{"arcp":"1.1","i\u0064":"m1","type":"t"}"#,
            r#"{"arcp":"1.1","id":"m1","type":"t","x_vendor":1}"#,
            r#"{"arcp":"1.1","id":"m1","type":"t","extensions":{}}"#,
            r#"{"arcp":"1.1","id":"m1","id":"m2","type":"t"}"#,
            // Numbers that are not plain u64s.
            r#"{"arcp":"1.1","id":"m1","type":"t","event_seq":07}"#,
            r#"{"arcp":"1.1","id":"m1","type":"t","event_seq":-1}"#,
            r#"{"arcp":"1.1","id":"m1","type":"t","event_seq":1.5}"#,
            r#"{"arcp":"1.1","id":"m1","type":"t","event_seq":1e3}"#,
            r#"{"arcp":"1.1","id":"m1","type":"t","event_seq":18446744073709551616}"#,
            // Missing or null required fields, malformed objects.
            r#"{"arcp":"1.1","type":"t"}"#,
            r#"{"arcp":"1.1","id":null,"type":"t"}"#,
            r#"{}"#,
            r#"{"arcp":"1.1","id":"m1","type":"t",}"#,
            r#"{"arcp":"1.1","id":"m1","type":"t"} x"#,
            r#"{"arcp":"1.1","id":"m1","type":"t","payload":{"a":}}"#,
            r#"{"arcp":"1.1","id":"m1","type":"t","payload":"#,
            r#"{"arcp":"1.1","id":"m1","type":"t","job_id":nul}"#,
            "{\"arcp\":\"1.1\",\"id\":\"m\t1\",\"type\":\"t\"}",
            r#"["arcp"]"#,
            "",
        ] {
            assert!(scan_header(text).is_none(), "took {text}");
        }
    }

    #[test]
    fn agrees_with_serde_on_every_captured_frame() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
        let mut files = vec![
            std::path::PathBuf::from(root).join("python-runtime-1.1.3.jsonl"),
            std::path::PathBuf::from(root).join("python-runtime-1.1.3-resume.jsonl"),
        ];
        for entry in std::fs::read_dir(format!("{root}/rust-runtime-2.0.0")).unwrap() {
            files.push(entry.unwrap().path());
        }
        let (mut frames, mut taken) = (0, 0);
        for file in files {
            for line in std::fs::read_to_string(&file).unwrap().lines() {
                let Ok(record) = serde_json::from_str::<Value>(line) else {
                    continue;
                };
                let text = match (&record["raw"], &record["env"]) {
                    (Value::String(raw), _) => raw.clone(),
                    (_, env @ Value::Object(_)) => env.to_string(),
                    _ => continue,
                };
                // Close records are not envelopes.
                if Envelope::parse_raw(&text).is_err() {
                    continue;
                }
                frames += 1;
                taken += usize::from(agrees(&text).unwrap());
            }
        }
        // Both runtimes' frames carry known header fields only: all of
        // them take the fast path.
        assert!(frames > 100, "only {frames} captured frames");
        assert_eq!(taken, frames, "frames the scanner declined");
    }

    /// A string field's value: mostly plain, sometimes escaped, null or
    /// of another type.
    fn string_value() -> impl Strategy<Value = String> {
        prop_oneof![
            8 => "[a-z0-9_.:-]{0,12}".prop_map(|s| format!("\"{s}\"")),
            1 => "[a-z\"\\\\/\u{e9}\u{1F600}\t]{1,6}".prop_map(|s| Value::String(s).to_string()),
            1 => Just("null".to_owned()),
            1 => Just("12".to_owned()),
            1 => Just("\"unterminated".to_owned()),
        ]
    }

    /// `event_seq`: mostly a plain u64, sometimes a number serde refuses.
    fn number_value() -> impl Strategy<Value = String> {
        prop_oneof![
            6 => any::<u64>().prop_map(|n| n.to_string()),
            1 => proptest::sample::select(vec![
                "0", "007", "-3", "2.5", "1e2", "18446744073709551616", "null", "\"7\"", "nul",
            ])
            .prop_map(str::to_owned),
        ]
    }

    fn payload_value() -> impl Strategy<Value = String> {
        proptest::sample::select(vec![
            r#"{"a":[1,{"b":"}"}],"c":null}"#,
            r#"{"result":"x\"y"}"#,
            "{}",
            "[true, false]",
            "null",
            "3",
            r#""text""#,
            r#"{"a":}"#,
            r#"{"a":1"#,
        ])
        .prop_map(str::to_owned)
    }

    /// A field the scanner leaves to serde.
    fn odd_field() -> impl Strategy<Value = (String, String)> {
        let name = proptest::sample::select(vec!["extensions", "x_vendor", "j\\u006fb_id", "id"]);
        (name.prop_map(str::to_owned), payload_value())
    }

    fn whitespace() -> impl Strategy<Value = &'static str> {
        proptest::sample::select(vec!["", "", "", " ", "\n\t", "\r\n  "])
    }

    /// A frame with each header field present or not, values mostly of
    /// their type, sometimes one field the scanner declines, in any order;
    /// sometimes cut short.
    fn frame() -> impl Strategy<Value = String> {
        let mut fields: Vec<BoxedStrategy<Option<(String, String)>>> = Vec::new();
        for name in ["arcp", "id", "type"] {
            let value = prop_oneof![9 => Just("\"v1\"".to_owned()), 1 => string_value()];
            fields.push(
                proptest::option::weighted(0.95, value.prop_map(move |v| (name.to_owned(), v)))
                    .boxed(),
            );
        }
        for name in [
            "timestamp",
            "session_id",
            "job_id",
            "correlation_id",
            "causation_id",
            "idempotency_key",
            "trace_id",
            "priority",
            "subscription_id",
        ] {
            fields.push(
                proptest::option::weighted(
                    0.3,
                    string_value().prop_map(move |v| (name.to_owned(), v)),
                )
                .boxed(),
            );
        }
        fields.push(
            proptest::option::weighted(
                0.5,
                number_value().prop_map(|v| ("event_seq".to_owned(), v)),
            )
            .boxed(),
        );
        fields.push(
            proptest::option::weighted(
                0.7,
                payload_value().prop_map(|v| ("payload".to_owned(), v)),
            )
            .boxed(),
        );
        fields.push(proptest::option::weighted(0.15, odd_field()).boxed());
        let spaced = proptest::collection::vec(whitespace(), 4);
        (fields, spaced, proptest::option::weighted(0.1, 0.0..1.0f64))
            .prop_map(|(fields, ws, cut)| {
                (fields.into_iter().flatten().collect::<Vec<_>>(), ws, cut)
            })
            .prop_flat_map(|(fields, ws, cut)| (Just(fields).prop_shuffle(), Just(ws), Just(cut)))
            .prop_map(|(fields, ws, cut)| {
                let body: Vec<String> = fields
                    .iter()
                    .map(|(name, value)| format!("{}\"{name}\"{}:{}{value}", ws[0], ws[1], ws[2]))
                    .collect();
                let mut text = format!("{}{{{}}}{}", ws[3], body.join(","), ws[3]);
                if let Some(cut) = cut {
                    let mut at = (text.len() as f64 * cut) as usize;
                    while !text.is_char_boundary(at) {
                        at -= 1;
                    }
                    text.truncate(at);
                }
                text
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn reads_what_serde_reads_or_declines(text in frame()) {
            agrees(&text)?;
        }
    }

    /// JSON text of a generated value, sometimes damaged: cut short, a
    /// byte of JSON's alphabet put in or taken out.
    fn json_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "[a-z \"\\\\\u{e9}\n]{0,8}".prop_map(Value::String),
        ];
        let value = leaf.prop_recursive(6, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z\"]{0,4}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        let numbers = proptest::sample::select(vec![
            "-0",
            "0.5e-3",
            "1E+9",
            "00",
            "-",
            "1.",
            ".5",
            "1e",
            "2e+",
            "-01",
            "123456789012345678901234567890",
        ])
        .prop_map(str::to_owned);
        let text = prop_oneof![
            4 => (value, any::<bool>()).prop_map(|(v, pretty)| if pretty {
                serde_json::to_string_pretty(&v).unwrap()
            } else {
                v.to_string()
            }),
            1 => numbers,
        ];
        let damage = proptest::option::weighted(
            0.4,
            (
                0.0..1.0f64,
                proptest::sample::select(b"{}[],:\"\\ 0-.etfn\t".to_vec()),
                0..3u8,
            ),
        );
        (text, damage).prop_map(|(mut text, damage)| {
            if let Some((at, byte, how)) = damage {
                let mut at = (text.len() as f64 * at) as usize;
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                match how {
                    0 => text.truncate(at),
                    1 => text.insert(at, char::from(byte)),
                    _ => {
                        if at < text.len() && text.as_bytes()[at].is_ascii() {
                            text.remove(at);
                        }
                    }
                }
            }
            text
        })
    }

    /// What serde's `RawValue` reads from the start of `text`: its extent.
    fn serde_value_end(text: &str) -> Option<usize> {
        let mut de = serde_json::Deserializer::from_str(text);
        let raw = <&RawValue>::deserialize(&mut de).ok()?;
        Some(raw.get().as_ptr() as usize - text.as_ptr() as usize + raw.get().len())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// The plain skip never takes what serde refuses, and ends a value
        /// where serde does.
        #[test]
        fn plain_values_are_what_serde_reads(text in json_text()) {
            if let Some(end) = plain_value_end(&text, 0, 0, Numbers::Any) {
                prop_assert_eq!(Some(end), serde_value_end(&text), "{:?}", text);
            }
        }
    }

    #[test]
    fn the_plain_skip_takes_payloads_as_runtimes_write_them_and_declines_the_rest() {
        for (text, end) in [
            (
                r#"{"job_id":"job_1","lease":{},"n":[1,-2.5e3,true,false,null]} "#,
                60,
            ),
            ("[ ]", 3),
            ("-0", 2),
            ("0,", 1),
            ("{ \"a\" :\n[ {\"b\":\"c\"} ] }", 23),
        ] {
            assert_eq!(
                plain_value_end(text, 0, 0, Numbers::Any),
                Some(end),
                "{text}"
            );
            assert_eq!(serde_value_end(text), Some(end), "{text}");
        }
        let deep = format!(
            "{}{}",
            "[".repeat(PLAIN_DEPTH + 1),
            "]".repeat(PLAIN_DEPTH + 1)
        );
        for text in [
            r#"{"a":"x\"y"}"#,
            "\"tab\there\"",
            "{\"a\":1,}",
            "[1 2]",
            "01",
            "1.",
            "tru",
            "{\"a\"}",
            deep.as_str(),
            "",
        ] {
            assert!(
                plain_value_end(text, 0, 0, Numbers::Any).is_none_or(|end| end < text.len()),
                "took {text}"
            );
        }
        // Declined by the skip, still read by serde: escapes, deep nesting.
        assert!(serde_value_end(r#"{"a":"x\"y"}"#).is_some());
        assert!(serde_value_end(&deep).is_some());
    }

    /// The generator reaches the fast path often enough to mean something.
    #[test]
    fn generated_frames_are_often_taken() {
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = frame();
        let taken = (0..1000)
            .filter(|_| {
                let text = strategy.new_tree(&mut runner).unwrap().current();
                scan_header(&text).is_some()
            })
            .count();
        assert!(taken > 200, "only {taken} of 1000 generated frames taken");
    }
}
