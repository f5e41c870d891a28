//! Idempotency keys: one per logical call, reused by every attempt.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use uuid::Uuid;

/// Longest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 255;

/// The UUIDv5 namespace of [`IdempotencyKey::derive`]. Fixed forever: changing
/// it would change every derived key.
const DERIVE_NAMESPACE: Uuid = Uuid::from_u128(0x6a1c_3f0e_9b2d_4c57_8e41_2f7d_a0c5_b913);

/// A logical idempotency key for one tool call.
///
/// The runtime deduplicates on it: every attempt of one logical call carries
/// the same key, so a retry after a lost connection can never start the work
/// a second time. Keys are non-empty, at most 255 bytes of printable ASCII.
///
/// Cloning is cheap (a shared, immutable string): a call's key is held by
/// the call, its waiters, the outcome and the caches at once.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(Arc<str>);

/// Why a string is not a valid [`IdempotencyKey`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is the empty string.
    #[error("idempotency key is empty")]
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`] bytes.
    #[error("idempotency key is {len} bytes long; at most {MAX_KEY_LEN} are allowed")]
    TooLong {
        /// Length of the rejected key in bytes.
        len: usize,
    },
    /// The key contains a byte outside printable ASCII (0x20..=0x7E).
    #[error("idempotency key has a non-printable or non-ASCII character at byte {position}")]
    InvalidCharacter {
        /// Byte offset of the first offending character.
        position: usize,
    },
}

impl IdempotencyKey {
    /// A fresh random key (UUIDv7: time-ordered, so keys sort by creation).
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Self::of_uuid(Uuid::now_v7())
    }

    /// A key derived from the call itself: UUIDv5 over the canonical JSON of
    /// `[namespace, tool, args]` (object keys sorted, no whitespace).
    ///
    /// The same inputs give the same key in every process and every release
    /// of this crate, so a restarted program that re-issues the same call
    /// reuses the key instead of starting the work again. Pick `namespace` to
    /// separate unrelated uses of the same tool (for example a tenant id).
    ///
    /// ```
    /// use arcp_types::IdempotencyKey;
    /// use serde_json::json;
    /// let a = IdempotencyKey::derive("orders", "refund", &json!({"order": 4812, "cents": 500}));
    /// let b = IdempotencyKey::derive("orders", "refund", &json!({"cents": 500, "order": 4812}));
    /// assert_eq!(a, b); // key order does not matter
    /// ```
    pub fn derive(namespace: &str, tool: &str, args: &Value) -> Self {
        let mut canonical = String::new();
        write_canonical(
            &Value::Array(vec![
                Value::String(namespace.to_owned()),
                Value::String(tool.to_owned()),
                args.clone(),
            ]),
            &mut canonical,
        );
        Self::of_uuid(Uuid::new_v5(&DERIVE_NAMESPACE, canonical.as_bytes()))
    }

    /// A UUID's hyphenated lowercase form, formatted without a temporary.
    fn of_uuid(uuid: Uuid) -> Self {
        let mut buf = Uuid::encode_buffer();
        IdempotencyKey(Arc::from(&*uuid.hyphenated().encode_lower(&mut buf)))
    }

    /// The key as sent on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Checks the key rules without allocating.
    pub fn validate(s: &str) -> Result<(), KeyError> {
        if s.is_empty() {
            return Err(KeyError::Empty);
        }
        if s.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong { len: s.len() });
        }
        match s.bytes().position(|b| !(0x20..=0x7e).contains(&b)) {
            Some(position) => Err(KeyError::InvalidCharacter { position }),
            None => Ok(()),
        }
    }
}

/// Canonical JSON: object keys sorted by their UTF-8 bytes, no whitespace,
/// strings and numbers exactly as `serde_json` prints them.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = KeyError;
    fn try_from(s: String) -> Result<Self, KeyError> {
        IdempotencyKey::validate(&s)?;
        Ok(IdempotencyKey(s.into()))
    }
}

impl TryFrom<&str> for IdempotencyKey {
    type Error = KeyError;
    fn try_from(s: &str) -> Result<Self, KeyError> {
        IdempotencyKey::validate(s)?;
        Ok(IdempotencyKey(s.into()))
    }
}

impl std::str::FromStr for IdempotencyKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        IdempotencyKey::try_from(s)
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({:?})", self.0)
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Serialize for IdempotencyKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for IdempotencyKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        IdempotencyKey::try_from(s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn new_keys_are_valid_and_distinct() {
        let a = IdempotencyKey::new();
        let b = IdempotencyKey::new();
        assert_ne!(a, b);
        IdempotencyKey::validate(a.as_str()).unwrap();
    }

    #[test]
    fn validation_names_the_problem() {
        assert_eq!(IdempotencyKey::try_from(""), Err(KeyError::Empty));
        assert_eq!(
            IdempotencyKey::try_from("x".repeat(256)),
            Err(KeyError::TooLong { len: 256 })
        );
        assert!(IdempotencyKey::try_from("x".repeat(255)).is_ok());
        assert_eq!(
            IdempotencyKey::try_from("ab\ncd"),
            Err(KeyError::InvalidCharacter { position: 2 })
        );
        assert_eq!(
            IdempotencyKey::try_from("café"),
            Err(KeyError::InvalidCharacter { position: 3 })
        );
        let msg = KeyError::TooLong { len: 300 }.to_string();
        assert!(msg.contains("300") && msg.contains("255"), "{msg}");
    }

    #[test]
    fn derive_is_pinned_across_releases() {
        // Pinned value (also computed independently with Python's uuid.uuid5 over
        // the canonical JSON): if this changes, every caller's derived keys change.
        let key = IdempotencyKey::derive("orders", "refund", &json!({"order": 4812}));
        assert_eq!(key.as_str(), "7aa2459d-effd-5deb-b49f-904937de7557");
        let again = IdempotencyKey::derive("orders", "refund", &json!({"order": 4812}));
        assert_eq!(key, again);
        assert_ne!(
            key,
            IdempotencyKey::derive("orders", "refund", &json!({"order": 4813}))
        );
        assert_ne!(
            key,
            IdempotencyKey::derive("other", "refund", &json!({"order": 4812}))
        );
    }

    #[test]
    fn canonical_json_sorts_keys_and_has_no_whitespace() {
        let v = json!({"b": [1, {"z": null, "a": "x"}], "a": 1.5});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":1.5,"b":[1,{"a":"x","z":null}]}"#
        );
    }
}
