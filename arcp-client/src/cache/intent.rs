//! An intent (a request's tool, arguments and every option) reduced to a
//! fingerprint: what the outcome cache and call joining compare.

use arcp_types::Invoke;

/// An intent (tool, arguments and every option) reduced to what the
/// outcome cache and call joining compare: a fingerprint, and the size of
/// the request as encoded, for the frame-size check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Intent {
    pub(crate) fingerprint: u64,
    pub(crate) size: usize,
}

/// The fingerprint of a request's intent: its tool, arguments, key and
/// every other field, walked as values (not serialized: that cost as much
/// as encoding the request). Two sealed intents (the key in
/// `idempotency_key`, as every caller passes them) meet exactly when their
/// JSON texts would be equal: values are equal, and a number keeps its
/// kind and sign (`1` and `1.0`, `0.0` and `-0.0` are different texts, so
/// different intents, as a runtime that compares texts sees them). Fingerprints are
/// compared only inside this process, so the hash need not be stable
/// across builds; foldhash's quality hasher (fixed seed: equal intents
/// must meet).
pub(crate) fn fingerprint_of(invoke: &Invoke) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = foldhash::quality::FixedState::with_seed(INTENT_SEED).build_hasher();
    hash_text(&mut h, &invoke.tool);
    hash_value(&mut h, &invoke.arguments);
    match &invoke.idempotency_key {
        Some(key) => {
            h.write_u8(1);
            hash_text(&mut h, key);
        }
        None => h.write_u8(0),
    }
    hash_object(&mut h, &invoke.extra);
    h.finish()
}

/// One JSON value into `h`: a tag per kind, lengths before contents, so
/// no two different values write the same sequence.
fn hash_value(h: &mut impl std::hash::Hasher, value: &serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Null => h.write_u8(0),
        Value::Bool(b) => h.write_u8(if *b { 1 } else { 2 }),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                h.write_u8(3);
                h.write_u64(u);
            } else if let Some(i) = n.as_i64() {
                h.write_u8(4);
                h.write_i64(i);
            } else {
                // A float (not written as an integer): its bits, so -0.0
                // and 0.0 differ as their texts do.
                h.write_u8(5);
                h.write_u64(n.as_f64().unwrap_or(f64::NAN).to_bits());
            }
        }
        Value::String(text) => {
            h.write_u8(6);
            hash_text(h, text);
        }
        Value::Array(items) => {
            h.write_u8(7);
            h.write_usize(items.len());
            for item in items {
                hash_value(h, item);
            }
        }
        Value::Object(map) => {
            h.write_u8(8);
            hash_object(h, map);
        }
    }
}

/// An object's entries in its map's order (sorted by key: serde_json's map
/// without `preserve_order`, as serialization also writes them).
fn hash_object(h: &mut impl std::hash::Hasher, map: &serde_json::Map<String, serde_json::Value>) {
    h.write_usize(map.len());
    for (name, value) in map {
        hash_text(h, name);
        hash_value(h, value);
    }
}

fn hash_text(h: &mut impl std::hash::Hasher, text: &str) {
    h.write_usize(text.len());
    h.write(text.as_bytes());
}

/// The size of a request not yet encoded for a dialect: its serialized
/// length, counted without keeping the text (within a few bytes of either
/// dialect's payload: the field names differ).
pub(crate) fn serialized_size(invoke: &Invoke) -> usize {
    struct Counting(usize);
    impl std::io::Write for Counting {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Counting(0);
    // An `Invoke` holds strings and JSON values only: it always serializes.
    let _ = serde_json::to_writer(&mut out, invoke);
    out.0
}

/// The [`Intent`] of a request from its payload encoded once
/// ([`arcp_types::EncodedRequest`]): the same payload text is the same
/// intent (the encoding is a function of the intent). For a transport that
/// keeps only encoded requests in its cache; a fingerprint is compared only
/// with others made the same way.
#[cfg(feature = "http")]
pub(crate) fn intent_of_payload(payload: &str) -> Intent {
    use std::hash::BuildHasher;
    Intent {
        fingerprint: foldhash::quality::FixedState::with_seed(INTENT_SEED).hash_one(payload),
        size: payload.len(),
    }
}

/// Any constant: it only has to be the same for every call of a process.
const INTENT_SEED: u64 = 0x6172_6370_696e_7465;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_intents_meet_and_any_difference_parts_them() {
        let invoke = |tool: &str, arguments: serde_json::Value| {
            Invoke::new(tool, arguments).with_idempotency_key("k1")
        };
        let base = invoke("refund", serde_json::json!({"order": 7, "cents": 100}));
        let fingerprint = fingerprint_of(&base);
        assert_eq!(fingerprint, fingerprint_of(&base.clone()));
        let mut with_extra = base.clone();
        with_extra
            .extra
            .insert("max_runtime_sec".into(), serde_json::json!(5));
        let mut without_key = base.clone();
        without_key.idempotency_key = None;
        for other in [
            invoke("refund", serde_json::json!({"order": 7, "cents": 101})),
            invoke("refund", serde_json::json!({"order": 8, "cents": 100})),
            invoke("refunds", serde_json::json!({"order": 7, "cents": 100})),
            invoke("refund", serde_json::json!({"order": 7})),
            invoke("refund", serde_json::json!({"order": 7.0, "cents": 100})),
            invoke(
                "refund",
                serde_json::json!({"order": 7, "cents": 100, "note": null}),
            ),
            base.clone().with_idempotency_key("k2"),
            with_extra,
            without_key,
        ] {
            assert_ne!(fingerprint_of(&other), fingerprint, "{other:?}");
        }
    }

    /// Values whose texts differ by a number's kind or sign, or by where
    /// strings and containers are cut, are different intents.
    #[test]
    fn near_misses_are_different_intents() {
        use serde_json::json;
        let of = |v: serde_json::Value| fingerprint_of(&Invoke::new("t", v));
        for (a, b) in [
            (json!(0.0), json!(-0.0)),
            (json!(1), json!(1.0)),
            (json!(u64::MAX), json!(-1)),
            (json!("ab"), json!(["a", "b"])),
            (json!(["ab"]), json!(["a", "b"])),
            (json!({"a": "b"}), json!({"ab": ""})),
            (json!([[], []]), json!([[[]]])),
            (json!(null), json!({})),
        ] {
            assert_ne!(of(a.clone()), of(b.clone()), "{a} and {b}");
        }
    }

    #[test]
    fn the_size_of_a_request_not_yet_encoded_is_its_serialized_length() {
        let invoke = Invoke::new("refund", serde_json::json!({"order": 7, "note": "a\"b"}))
            .with_idempotency_key("k1");
        assert_eq!(
            serialized_size(&invoke),
            serde_json::to_string(&invoke).unwrap().len()
        );
    }

    /// JSON values from a small alphabet, so that two drawn independently
    /// are often equal, or differ only in a number's kind or sign, or in
    /// where a string is cut.
    fn small_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::json;
        let leaf = prop_oneof![
            Just(json!(null)),
            Just(json!(true)),
            Just(json!(false)),
            Just(json!(0)),
            Just(json!(1)),
            Just(json!(-1)),
            Just(json!(u64::MAX)),
            Just(json!(1.0)),
            Just(json!(0.0)),
            Just(json!(-0.0)),
            Just(json!("")),
            Just(json!("a")),
            Just(json!("ab")),
        ];
        leaf.prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(serde_json::Value::Array),
                proptest::collection::vec(
                    (prop_oneof![Just(""), Just("a"), Just("ab")], inner),
                    0..3
                )
                .prop_map(|entries| {
                    serde_json::Value::Object(
                        entries
                            .into_iter()
                            .map(|(k, v)| (k.to_owned(), v))
                            .collect(),
                    )
                }),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]
        /// Two intents meet exactly when their JSON texts are equal, as a
        /// runtime comparing texts tells them apart; and an intent read
        /// back from its own text is the same intent.
        #[test]
        fn intents_meet_exactly_when_their_texts_are_equal(a in small_value(), b in small_value()) {
            let of = |v: &serde_json::Value| Invoke::new("t", v.clone()).with_idempotency_key("k");
            let (ia, ib) = (of(&a), of(&b));
            let same_text = serde_json::to_string(&ia).unwrap() == serde_json::to_string(&ib).unwrap();
            proptest::prop_assert_eq!(fingerprint_of(&ia) == fingerprint_of(&ib), same_text);
            let reread: serde_json::Value = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
            proptest::prop_assert_eq!(fingerprint_of(&of(&reread)), fingerprint_of(&ia));
        }
    }
}
