//! Both dialect decoders on arbitrary bytes: a typed error or a frame, never a
//! panic; and a decoded frame re-encodes and decodes again to the same message.
#![no_main]

use arcp_types::Dialect;
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
            if let arcp_types::Message::Event(event) = &frame.message {
                let _ = event.typed();
            }
            let again = dialect
                .decode(&dialect.encode(&frame))
                .expect("a frame this codec produced decodes");
            assert_eq!(again.message, frame.message, "{dialect}: not stable");
        }
    }
});
