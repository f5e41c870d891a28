//! Payload readers for [`Keep::Outcome`](super::Keep::Outcome): the replies
//! every call receives, read for what deciding its outcome needs. Fields
//! skipped here are still checked to be JSON (the envelope parse did that)
//! but are not built: no string, map or tree is allocated for them.

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::extra_fields::Key;
use crate::message::{Accepted, JobEvent, JobResult, Object};

/// The kind of event whose body a receiver needs even when nobody watches
/// the call: its chunks make up the result.
const RESULT_CHUNK: &str = "result_chunk";

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

/// An event with its unmodelled fields skipped, and its body too unless
/// the event is a result chunk. A body that comes before the `kind` is
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
                let (mut kind, mut ts, mut body) = (None::<String>, None, None::<Value>);
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_str() {
                        "kind" if kind.is_none() => kind = Some(map.next_value()?),
                        "ts" if ts.is_none() => ts = Some(map.next_value::<Option<String>>()?),
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
                    ts: ts.flatten(),
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
    payload: &'a serde_json::value::RawValue,
    value_field: &str,
    fallback_field: Option<&str>,
) -> Option<&'a serde_json::value::RawValue> {
    use serde_json::value::RawValue;
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
