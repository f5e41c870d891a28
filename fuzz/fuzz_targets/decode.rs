//! Both dialect decoders on arbitrary bytes: a typed error or a frame, never a
//! panic; a decoded frame re-encodes and decodes again to the same message;
//! a payload the header's reader hands out as checked is JSON; and a plain
//! result value (what the client hands on unparsed) is exactly
//! the value the decoding the client would otherwise use reads; and
//! `decode_with` (the payload read once) answers as the two steps do.
#![no_main]

use arcp_types::{Decoded, Dialect, Message, PayloadScope};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        if let Ok(frame) = dialect.decode(text) {
            // Reading a decoded frame's typed views never panics either.
            let _ = frame.request_id();
            let _ = frame.job_id();
            if let Message::Event(event) = &frame.message {
                let _ = event.typed();
            }
            let again = dialect
                .decode(&dialect.encode(&frame))
                .expect("a frame this codec produced decodes");
            assert_eq!(again.message, frame.message, "{dialect}: not stable");
        }
        for scope in [PayloadScope::All, PayloadScope::OutcomeOnly] {
            let steps = dialect.decode_header(text).and_then(|(header, payload)| {
                if scope == PayloadScope::OutcomeOnly {
                    if let Some(value) = dialect.plain_result_value(&header, payload) {
                        return Ok((header, Decoded::PlainResult(value)));
                    }
                }
                let message = dialect.decode_payload(&header, payload, scope)?;
                Ok((header, Decoded::Message(message)))
            });
            match (dialect.decode_with(text, |_| scope), steps) {
                (Ok((header, read, _)), Ok(expected)) => {
                    assert_eq!((header, read), expected, "{dialect} {scope:?}")
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{dialect}"),
                (a, b) => panic!("{dialect} {scope:?}: decode_with {a:?}, steps {b:?}"),
            }
        }
        if let Ok((header, payload)) = dialect.decode_header(text) {
            // A payload handed out as checked JSON is JSON.
            if let Some(raw) = payload {
                serde_json::from_str::<&serde_json::value::RawValue>(raw.get())
                    .expect("a checked payload is JSON");
            }
            if let Some(raw) = dialect.plain_result_value(&header, payload) {
                let value: serde_json::Value =
                    serde_json::from_str(raw.get()).expect("a plain value parses");
                match dialect.decode_payload(&header, payload, PayloadScope::OutcomeOnly) {
                    Ok(Message::Result(r)) => assert_eq!(r.result, Some(value), "{dialect}"),
                    other => panic!("{dialect}: plain value, decoded {other:?}"),
                }
            }
        }
    }
});
