//! The application's journal redaction hook
//! ([`ClientBuilder::journal_redact`](crate::ClientBuilder::journal_redact)):
//! what a record holds when the hook changes a call's arguments, and the
//! ending of such a record on recovery.
//!
//! The live call always sends the real arguments; only the record differs.
//! A record the hook changed carries the digest of the unredacted intent
//! (see `intent_digest`), so a re-issue of its key is still recognised as
//! the same call (or refused as another), and it is never re-sent by a
//! recovery: re-sending it would send other arguments under the same key.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use arcp_types::Invoke;
use serde_json::Value;

use super::{JournalEntry, JournalOutcome};
use crate::error::Error;
use crate::intent_digest;

/// The hook: given the tool and its arguments, redacts or drops fields in
/// place before the call is recorded.
pub(crate) type RedactFn = dyn Fn(&str, &mut Value) + Send + Sync + 'static;

/// A client's redaction hook.
#[derive(Clone)]
pub(crate) struct Redaction(pub(crate) Arc<RedactFn>);

impl fmt::Debug for Redaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Redaction(<hook>)")
    }
}

impl Redaction {
    /// The intent to record for `invoke` (serialized as `intent`): `None`
    /// when the hook left the arguments as they were (record `intent`
    /// itself), else the redacted intent carrying the unredacted intent's
    /// digest.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCall`] when the hook panicked (nothing is recorded
    /// or sent), or when the call's own fields use the redaction mark's
    /// name.
    pub(crate) fn apply(&self, invoke: &Invoke, intent: &str) -> Result<Option<String>, Error> {
        if invoke.extra.contains_key(intent_digest::REDACTED_MARK) {
            return Err(Error::invalid_call(format!(
                "the call's field {:?} is reserved for the journal's redaction mark",
                intent_digest::REDACTED_MARK
            )));
        }
        let mut arguments = invoke.arguments.clone();
        let hook = &self.0;
        catch_unwind(AssertUnwindSafe(|| hook(&invoke.tool, &mut arguments))).map_err(|_| {
            Error::invalid_call(format!(
                "the journal redaction hook panicked on a call of {:?}; nothing was recorded or \
                 sent",
                invoke.tool
            ))
        })?;
        if arguments == invoke.arguments {
            return Ok(None);
        }
        let unredacted: Value = serde_json::from_str(intent).map_err(|e| {
            Error::invalid_call(format!("the request does not parse back as JSON: {e}"))
        })?;
        let mut record = invoke.clone();
        record.arguments = arguments;
        record.extra.insert(
            intent_digest::REDACTED_MARK.to_owned(),
            intent_digest::mark(&unredacted),
        );
        serde_json::to_string(&record).map(Some).map_err(|e| {
            Error::invalid_call(format!("the redacted arguments do not serialize: {e}"))
        })
    }
}

/// Whether `entry`'s recorded intent was changed by a redaction hook.
pub(crate) fn is_redacted(entry: &JournalEntry) -> bool {
    serde_json::from_str::<Value>(&entry.intent).is_ok_and(|v| intent_digest::is_marked(&v))
}

/// How recovery ends a redacted record: "outcome unknown", since the
/// arguments that may have reached the runtime are not in the record.
pub(crate) fn unrecoverable_outcome(entry: &JournalEntry) -> JournalOutcome {
    JournalOutcome::OutcomeUnknown {
        job_id: entry.job_id().map(str::to_owned),
        reason: format!(
            "not recoverable: the journal redaction hook changed the recorded arguments, so \
             re-sending the record would send other arguments under the same key; it may have \
             run (state {} when recovered). Re-issue the call with its key and its full \
             arguments to learn its outcome",
            entry.state.name()
        ),
        attempts: entry.attempts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hook() -> Redaction {
        Redaction(Arc::new(|tool: &str, args: &mut Value| {
            if tool == "pay" {
                if let Some(map) = args.as_object_mut() {
                    map.remove("card");
                }
            }
        }))
    }

    #[test]
    fn a_changed_record_drops_the_field_and_keeps_the_digest() {
        let invoke = Invoke::new("pay", json!({"card": "4111-secret", "amount": 5}))
            .with_idempotency_key("k");
        let intent = serde_json::to_string(&invoke).unwrap();
        let record = hook().apply(&invoke, &intent).unwrap().unwrap();
        assert!(!record.contains("4111-secret"), "{record}");
        assert!(record.contains("\"amount\":5"), "{record}");
        assert!(crate::request::same_intent(&record, &intent));
        let other = Invoke::new("pay", json!({"card": "5500-other", "amount": 5}))
            .with_idempotency_key("k");
        let other_intent = serde_json::to_string(&other).unwrap();
        let other_record = hook().apply(&other, &other_intent).unwrap().unwrap();
        assert!(!crate::request::same_intent(&record, &other_record));
        assert!(!crate::request::same_intent(&record, &other_intent));
    }

    #[test]
    fn an_unchanged_call_is_recorded_as_sent() {
        let invoke = Invoke::new("other", json!({"card": "4111"})).with_idempotency_key("k");
        let intent = serde_json::to_string(&invoke).unwrap();
        assert_eq!(hook().apply(&invoke, &intent).unwrap(), None);
    }

    #[test]
    fn a_panicking_hook_is_a_typed_error() {
        let panics = Redaction(Arc::new(|_: &str, _: &mut Value| panic!("bad hook")));
        let invoke = Invoke::new("pay", json!({})).with_idempotency_key("k");
        let intent = serde_json::to_string(&invoke).unwrap();
        let err = panics.apply(&invoke, &intent).unwrap_err();
        assert!(
            matches!(err, Error::InvalidCall { ref message, .. } if message.contains("panicked")),
            "{err}"
        );
    }

    #[test]
    fn the_mark_is_reserved() {
        let mut extra = serde_json::Map::new();
        extra.insert(intent_digest::REDACTED_MARK.into(), json!({}));
        let invoke = Invoke::new("pay", json!({}))
            .with_idempotency_key("k")
            .with_extra(extra);
        let intent = serde_json::to_string(&invoke).unwrap();
        assert!(matches!(
            hook().apply(&invoke, &intent),
            Err(Error::InvalidCall { .. })
        ));
    }
}
