//! Payload readers for [`PayloadScope::OutcomeOnly`](super::PayloadScope::OutcomeOnly): the replies
//! every call receives, read for what deciding its outcome needs. Fields
//! skipped here are still checked to be JSON (the envelope parse did that)
//! but are not built: no string, map or tree is allocated for them.
//!
//! A payload read from a frame's text is JSON already checked (a
//! `RawJson`), so the readers first walk it without serde ([`Walk`]):
//! one pass that skips what it does not read instead of parsing it again.
//! The walk declines anything it would have to judge rather than skip (an
//! escape where it reads, a duplicate field, a number that might not fit,
//! deep nesting, another shape); serde's reader then decides, so the walk
//! only ever gives what serde's would (`codec_props` checks both). The
//! walk is `outcome_readers/walk.rs`.

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use serde_json::value::RawValue;

use super::{from_payload, DecodeError, Payload};
use crate::extra_fields::Key;
use crate::message::{Accepted, JobEvent, JobResult, Object};
use crate::raw_json::RawJson;

mod walk;
use walk::Walk;

/// The kind of event whose body a receiver needs even when nobody watches
/// the call: its chunks make up the result.
const RESULT_CHUNK: &str = "result_chunk";

/// A payload as the readers take it: the checked text of a frame's
/// payload, when it has one.
fn raw_text<'a>(payload: &Payload<'a>) -> Option<&'a str> {
    match payload {
        Payload::Raw(Some(raw)) => Some(raw.get()),
        _ => None,
    }
}

/// An acceptance read for [`PayloadScope::OutcomeOnly`]: by the walk, else by serde.
pub(super) fn accepted(kind: &str, payload: Payload<'_>) -> Result<Accepted, DecodeError> {
    if let Some(accepted) = raw_text(&payload).and_then(walk_accepted) {
        return Ok(accepted);
    }
    Ok(from_payload::<LeanAccepted>(kind, payload)?.0)
}

fn walk_accepted(text: &str) -> Option<Accepted> {
    let (mut job_id, mut request_id) = (None, None::<Option<&str>>);
    Walk::new(text, false).object(|name, w| {
        match name {
            "job_id" if job_id.is_none() => job_id = Some(w.plain_string()?),
            "request_id" if request_id.is_none() => {
                request_id = Some(if w.null()? {
                    None
                } else {
                    Some(w.plain_string()?)
                });
            }
            "job_id" | "request_id" => return None,
            _ => {
                w.skip(0)?;
            }
        }
        Some(())
    })?;
    Some(Accepted {
        job_id: job_id?.to_owned(),
        request_id: request_id.flatten().map(str::to_owned),
        extra: Object::new(),
    })
}

/// An event read for [`PayloadScope::OutcomeOnly`]: by the walk, else by serde.
pub(super) fn event(kind: &str, payload: Payload<'_>) -> Result<JobEvent, DecodeError> {
    if let Some(event) = raw_text(&payload).and_then(walk_event) {
        return Ok(event);
    }
    Ok(from_payload::<LeanEvent>(kind, payload)?.0)
}

fn walk_event(text: &str) -> Option<JobEvent> {
    let (mut kind, mut ts, mut body) = (None::<&str>, false, false);
    Walk::new(text, false).object(|name, w| {
        match name {
            "kind" if kind.is_none() => kind = Some(w.plain_string()?),
            // Read (a string or null, as the full decoding wants one) but
            // not kept: no outcome depends on it.
            "ts" if !ts => {
                ts = true;
                if !w.null()? {
                    w.plain_string()?;
                }
            }
            // A body is skipped only once the kind says it is not a
            // result chunk (whose body serde builds).
            "body" if !body && kind.is_some_and(|k| k != RESULT_CHUNK) => {
                body = true;
                w.skip(0)?;
            }
            "kind" | "ts" | "body" => return None,
            _ => {
                w.skip(0)?;
            }
        }
        Some(())
    })?;
    let kind = kind.filter(|k| *k != RESULT_CHUNK)?;
    Some(JobEvent {
        kind: kind.to_owned(),
        ts: None,
        body: Value::Null,
        extra: Object::new(),
    })
}

/// An acceptance with its unmodelled fields skipped.
pub(super) struct LeanAccepted(pub(super) Accepted);

impl<'de> Deserialize<'de> for LeanAccepted {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LeanAccepted;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an Accepted object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LeanAccepted, A::Error> {
                let (mut job_id, mut request_id) = (None, None);
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_str() {
                        "job_id" if job_id.is_none() => job_id = Some(map.next_value()?),
                        "request_id" if request_id.is_none() => {
                            request_id = map.next_value::<Option<String>>()?;
                        }
                        "job_id" | "request_id" => {
                            return Err(serde::de::Error::custom(format_args!(
                                "duplicate field `{}`",
                                key.as_str()
                            )))
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(LeanAccepted(Accepted {
                    job_id: job_id.ok_or_else(|| serde::de::Error::missing_field("job_id"))?,
                    request_id,
                    extra: Object::new(),
                }))
            }
        }
        d.deserialize_map(V)
    }
}

/// An event with its unmodelled fields and its `ts` skipped, and its body
/// too unless the event is a result chunk. A body that comes before the `kind` is
/// kept (the kind is not known yet); the runtimes write the kind first.
pub(super) struct LeanEvent(pub(super) JobEvent);

impl<'de> Deserialize<'de> for LeanEvent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LeanEvent;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JobEvent object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LeanEvent, A::Error> {
                let (mut kind, mut ts, mut body) = (None::<String>, false, None::<Value>);
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_str() {
                        "kind" if kind.is_none() => kind = Some(map.next_value()?),
                        // Read as the full decoding reads it, not kept.
                        "ts" if !ts => {
                            ts = true;
                            map.next_value::<Option<String>>()?;
                        }
                        "body" if body.is_none() => {
                            if kind.as_deref().is_some_and(|k| k != RESULT_CHUNK) {
                                map.next_value::<IgnoredAny>()?;
                                body = Some(Value::Null);
                            } else {
                                body = Some(map.next_value()?);
                            }
                        }
                        "kind" | "ts" | "body" => {
                            return Err(serde::de::Error::custom(format_args!(
                                "duplicate field `{}`",
                                key.as_str()
                            )))
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                let kind = kind.ok_or_else(|| serde::de::Error::missing_field("kind"))?;
                let body = match body {
                    // Read before its kind was: drop it now, as if skipped.
                    Some(_) if kind != RESULT_CHUNK => Value::Null,
                    other => other.unwrap_or_default(),
                };
                Ok(LeanEvent(JobEvent {
                    kind,
                    ts: None,
                    body,
                    extra: Object::new(),
                }))
            }
        }
        d.deserialize_map(V)
    }
}

/// The fields of a result besides its value that say how the job ended or
/// where its value is: the ones a receiver reads to decide the outcome.
const RESULT_FIELDS: &[&str] = &["final_status", "code", "message", "result_id", "result_ref"];

/// A result with only its value and [`RESULT_FIELDS`] kept. A result
/// without a value is not lean: its fields say where the value is (a
/// reference and what describes it), so the caller gets all of them;
/// [`lean_or_full`] reads such a result again in full.
pub(super) struct LeanResult(pub(super) JobResult);

/// A lean result, or the full one when it has no value.
pub(super) fn lean_or_full(
    lean: impl FnOnce() -> Result<JobResult, super::DecodeError>,
    full: impl FnOnce() -> Result<JobResult, super::DecodeError>,
) -> Result<JobResult, super::DecodeError> {
    let result = lean()?;
    if result.result.is_some() {
        Ok(result)
    } else {
        full()
    }
}

impl<'de> Deserialize<'de> for LeanResult {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LeanResult;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JobResult object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LeanResult, A::Error> {
                let mut result = None::<Option<Value>>;
                let mut extra = Object::new();
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_str() {
                        "result" if result.is_none() => result = Some(map.next_value()?),
                        "result" => return Err(serde::de::Error::duplicate_field("result")),
                        name if RESULT_FIELDS.contains(&name) => {
                            let value = map.next_value()?;
                            extra.insert(key.into_string(), value);
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(LeanResult(JobResult {
                    result: result.flatten(),
                    extra,
                }))
            }
        }
        d.deserialize_map(V)
    }
}

/// Drops the fields of a result with a value other than [`RESULT_FIELDS`],
/// for a result read another way first (the legacy `job.completed`, whose
/// runtimes send only its value: nothing to save by skipping).
pub(super) fn keep_result_fields(result: &mut JobResult) {
    if result.result.is_some() {
        result
            .extra
            .retain(|name, _| RESULT_FIELDS.contains(&name.as_str()));
    }
}

/// A legacy event (`job.progress`, `log`, ...) whose payload is its body:
/// kept only for result chunks.
pub(super) fn legacy_event_body(
    kind: &str,
    body: impl FnOnce() -> Result<Value, super::DecodeError>,
) -> Result<Value, super::DecodeError> {
    if kind == RESULT_CHUNK {
        body()
    } else {
        Ok(Value::Null)
    }
}

/// A result's inline value as raw JSON, borrowed from the frame, when the
/// result is plainly a success with a value: the value field appears once
/// and is not `null`, and `final_status`, if present, is `"success"`.
/// Anything else (no value, another status, a repeated field, a payload
/// that is not an object) is `None`: the caller decodes the frame instead.
pub(super) fn plain_result_value<'a>(
    payload: RawJson<'a>,
    value_field: &str,
    fallback_field: Option<&str>,
) -> Option<RawJson<'a>> {
    match walk_plain_result(payload.get(), value_field, fallback_field) {
        // The value's text is a whole value of checked JSON: checked JSON.
        Some(Some(value)) => Some(RawJson::checked(value)),
        Some(None) => None,
        None => serde_plain_result_value(payload, value_field, fallback_field).map(RawJson::from),
    }
}

/// [`plain_result_value`] by the walk: `Some(answer)`, or `None` when the
/// walk declines. Strict: serde's reader builds every value of the payload
/// (a number out of range refuses it), so the walk declines any string
/// with an escape and any number with an exponent.
fn walk_plain_result<'a>(
    text: &'a str,
    value_field: &str,
    fallback_field: Option<&str>,
) -> Option<Option<&'a str>> {
    let (mut value, mut fallback) = (None::<&str>, None::<&str>);
    let mut plain = true;
    Walk::new(text, true).object(|name, w| {
        if name == value_field {
            plain &= value.is_none();
            value = Some(w.skip(0)?);
        } else if Some(name) == fallback_field {
            plain &= fallback.is_none();
            fallback = Some(w.skip(0)?);
        } else if name == "final_status" {
            plain &= w.skip(0)? == "\"success\"";
        } else {
            w.skip(0)?;
        }
        Some(())
    })?;
    let chosen = value.or(fallback).filter(|v| *v != "null");
    Some(chosen.filter(|_| plain))
}

/// [`plain_result_value`] by serde.
fn serde_plain_result_value<'a>(
    payload: RawJson<'a>,
    value_field: &str,
    fallback_field: Option<&str>,
) -> Option<&'a RawValue> {
    struct V<'f> {
        value_field: &'f str,
        fallback_field: Option<&'f str>,
    }
    impl<'de> Visitor<'de> for V<'_> {
        type Value = Option<&'de RawValue>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a result object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let (mut value, mut fallback) = (None::<&RawValue>, None::<&RawValue>);
            let mut plain = true;
            while let Some(key) = map.next_key::<Key<'de>>()? {
                let name = key.as_str();
                if name == self.value_field {
                    plain &= value.is_none();
                    value = Some(map.next_value()?);
                } else if Some(name) == self.fallback_field {
                    plain &= fallback.is_none();
                    fallback = Some(map.next_value()?);
                } else if name == "final_status" {
                    let status: &RawValue = map.next_value()?;
                    plain &= status.get() == "\"success\"";
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            // The value field wins when present, even as `null` (the legacy
            // `job.completed` rule); `null` is no value.
            let chosen = value.or(fallback).filter(|v| v.get() != "null");
            Ok(chosen.filter(|_| plain))
        }
    }
    let mut de = serde_json::Deserializer::from_str(payload.get());
    let value = de
        .deserialize_map(V {
            value_field,
            fallback_field,
        })
        .ok()
        .flatten()?;
    de.end().ok()?;
    // A raw value is only checked to be JSON; the full decoding builds
    // values, which also refuses numbers out of range and nesting past the
    // parser's limit. Refuse what it refuses (anywhere in the payload, from
    // the payload's root: the same depth budget), building nothing.
    serde_json::from_str::<Checked>(payload.get()).ok()?;
    Some(value)
}

/// Any JSON value read in full and kept nowhere: it fails exactly where
/// building a `serde_json::Value` from the same text would.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Checked;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_unit<E>(self) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_none<E>(self) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Checked, D::Error> {
                Checked::deserialize(d)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Checked, A::Error> {
                while seq.next_element::<Checked>()?.is_some() {}
                Ok(Checked)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
                while map.next_entry::<Checked, Checked>()?.is_some() {}
                Ok(Checked)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the walk reads a payload, serde's reader reads the same;
    /// where serde's refuses it, the walk declines.
    #[test]
    fn the_walk_reads_what_serde_reads_or_declines() {
        let accepted = [
            (
                r#"{"job_id":"j1","agent":"echo","lease":{"a":[1,{"b":null}]},"request_id":"m1"}"#,
                true,
            ),
            // An escape, even in a skipped field: serde's.
            (r#"{"request_id":null,"x":"a\"b\\c","job_id":"j1"}"#, false),
            (r#"{ "job_id" : "j1" , "n" : -1.5e3 }"#, true),
            (r#"{"job_id":"j\u0031"}"#, false),
            (r#"{"job\u005fid":"j1"}"#, false),
            (r#"{"job_id":"j1","job_id":"j2"}"#, false),
            (r#"{"job_id":7}"#, false),
            (r#"{"agent":"echo"}"#, false),
            (r#"[1]"#, false),
        ];
        for (text, walked) in accepted {
            let walk = walk_accepted(text);
            assert_eq!(walk.is_some(), walked, "{text}");
            let serde = serde_json::from_str::<LeanAccepted>(text).map(|a| a.0);
            if let Some(walk) = walk {
                assert_eq!(Ok(walk), serde.map_err(|e| e.to_string()), "{text}");
            }
        }
        let events = [
            (
                r#"{"kind":"log","ts":"t","body":{"level":"info","m":[1,2]}}"#,
                true,
            ),
            (
                r#"{"kind":"progress","body":"x","ts":null,"extra":true}"#,
                true,
            ),
            (r#"{"body":{},"kind":"log"}"#, false),
            (r#"{"kind":"result_chunk","body":{"data":"x"}}"#, false),
            (r#"{"kind":"log","kind":"log"}"#, false),
            (r#"{"ts":"t"}"#, false),
        ];
        for (text, walked) in events {
            let walk = walk_event(text);
            assert_eq!(walk.is_some(), walked, "{text}");
            if let Some(walk) = walk {
                let serde = serde_json::from_str::<LeanEvent>(text).unwrap().0;
                assert_eq!(walk, serde, "{text}");
            }
        }
        // Not JSON: the walk checks what it skips, so it declines, and
        // serde refuses (the payload of a frame read in one pass is
        // checked by this walk alone).
        for text in [
            r#"{"job_id":"j1","x":nul}"#,
            r#"{"job_id":"j1","x":nulls}"#,
            r#"{"job_id":"j1","x":tru}"#,
            r#"{"job_id":"j1","x":01}"#,
            r#"{"job_id":"j1","x":1.}"#,
            r#"{"job_id":"j1","x":-}"#,
            r#"{"job_id":"j1","x":[1,]}"#,
            r#"{"job_id":"j1","x":{"a"}}"#,
            r#"{"job_id":"j1","x":{"a":1,}}"#,
            r#"{"job_id":"j1","x":"a}"#,
            r#"{"job_id":"j1","x":"tab	in"}"#,
            r#"{"job_id":"j1"},"x":1}"#,
            r#"{"job_id":"j1"} x"#,
            r#"{"job_id":"j1","request_id":nul}"#,
        ] {
            assert!(walk_accepted(text).is_none(), "{text}");
            assert!(
                serde_json::from_str::<LeanAccepted>(text).is_err(),
                "{text}"
            );
            let event = text.replace("job_id", "kind");
            assert!(walk_event(&event).is_none(), "{event}");
            assert!(
                serde_json::from_str::<LeanEvent>(&event).is_err(),
                "{event}"
            );
            let result = text.replace("job_id", "result");
            assert_eq!(walk_plain_result(&result, "result", None), None, "{result}");
        }
        let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        assert!(walk_accepted(&format!(r#"{{"job_id":"j","x":{deep}}}"#)).is_none());
        let results = [
            (
                r#"{"final_status":"success","result":{"a":[1,2.5]},"completed_at":"t"}"#,
                Some(Some(r#"{"a":[1,2.5]}"#)),
            ),
            (r#"{"result":null}"#, Some(None)),
            (r#"{"final_status":"error","result":1}"#, Some(None)),
            (r#"{"result":1,"result":2}"#, Some(None)),
            // Serde's reader builds every value: the walk leaves these to it.
            (r#"{"result":1,"x":1e400}"#, None),
            (r#"{"result":"a\nb"}"#, None),
        ];
        for (text, expected) in results {
            let walk = walk_plain_result(text, "result", None);
            assert_eq!(walk, expected, "{text}");
            let raw: &RawValue = serde_json::from_str(text).unwrap();
            let raw = RawJson::from(raw);
            let serde = serde_plain_result_value(raw, "result", None).map(RawValue::get);
            if let Some(walk) = walk {
                assert_eq!(walk, serde, "{text}");
            }
            assert_eq!(
                plain_result_value(raw, "result", None).map(RawJson::get),
                serde
            );
        }
    }
}
