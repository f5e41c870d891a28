//! The digest of a call's intent, and the mark a journal record carries
//! when the application's redaction hook changed its arguments.
//!
//! A redacted record cannot be compared with a re-issued call by its text
//! (the arguments differ by design), so it keeps the SHA-256 of the
//! unredacted intent in canonical form: object members sorted by name,
//! numbers as written (`1` and `1.0` differ, as runtimes comparing texts
//! tell them apart). Two intents are the same when their canonical forms
//! are, which is also what `request::same_intent` compares.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The top-level member of a recorded intent that marks it redacted; its
/// value is `{"intent_sha256": "<64 hex digits>"}`. Never sent: a record
/// carrying it is not re-sent (see `JournalEntry::invoke`).
pub(crate) const REDACTED_MARK: &str = "arcp_journal_redacted";

/// The member of the mark holding the unredacted intent's digest.
const DIGEST_FIELD: &str = "intent_sha256";

/// The SHA-256 of `intent`'s canonical form, as 64 lowercase hex digits.
pub(crate) fn digest(intent: &Value) -> String {
    let mut text = String::new();
    canonical(intent, &mut text);
    let hash = Sha256::digest(text.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in hash {
        hex.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        hex.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
    }
    hex
}

/// The mark to add to a redacted record, for the unredacted `intent`.
pub(crate) fn mark(intent: &Value) -> Value {
    serde_json::json!({ DIGEST_FIELD: digest(intent) })
}

/// Whether the parsed recorded intent carries the redaction mark.
pub(crate) fn is_marked(intent: &Value) -> bool {
    intent.get(REDACTED_MARK).is_some()
}

/// The digest identifying `intent`: the one its mark records when it was
/// redacted (`None` when the mark is malformed: it matches nothing), else
/// its own.
pub(crate) fn identity(intent: &Value) -> Option<String> {
    match intent.get(REDACTED_MARK) {
        Some(mark) => mark
            .get(DIGEST_FIELD)
            .and_then(Value::as_str)
            .filter(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_ascii_lowercase),
        None => Some(digest(intent)),
    }
}

/// Writes `value` with object members sorted by name and no whitespace,
/// whatever order the map keeps (a build with serde_json's
/// `preserve_order` keeps insertion order).
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (name, member)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(name.clone()).to_string());
                out.push(':');
                canonical(member, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_digest_ignores_member_order_and_keeps_number_kinds() {
        let a = json!({"tool": "t", "arguments": {"a": 1, "b": [2, {"c": 3, "d": 4}]}});
        let b: Value =
            serde_json::from_str(r#"{"arguments":{"b":[2,{"d":4,"c":3}],"a":1},"tool":"t"}"#)
                .unwrap();
        assert_eq!(digest(&a), digest(&b));
        assert_eq!(digest(&a).len(), 64);
        let float = json!({"tool": "t", "arguments": {"a": 1.0, "b": [2, {"c": 3, "d": 4}]}});
        assert_ne!(digest(&a), digest(&float));
        let reordered = json!({"tool": "t", "arguments": {"a": 1, "b": [{"c": 3, "d": 4}, 2]}});
        assert_ne!(digest(&a), digest(&reordered));
    }

    #[test]
    fn a_marked_intent_is_identified_by_its_mark() {
        let original = json!({"tool": "t", "arguments": {"card": "4111"}});
        let mut redacted = json!({"tool": "t", "arguments": {}});
        redacted[REDACTED_MARK] = mark(&original);
        assert!(is_marked(&redacted));
        assert!(!is_marked(&original));
        assert_eq!(identity(&redacted), identity(&original));
        redacted[REDACTED_MARK] = json!({"intent_sha256": "not hex"});
        assert_eq!(identity(&redacted), None);
    }
}
