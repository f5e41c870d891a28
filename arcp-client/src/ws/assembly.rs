//! A result streamed in `result_chunk` events (v1.1 §8.4), reassembled in
//! order and bounded by the client's `max_result_size`.

use serde_json::Value;

/// A streamed result: the decoded bytes of its chunks so far, in order.
pub(crate) struct Assembly {
    pub(crate) result_id: String,
    base64: bool,
    bytes: Vec<u8>,
    next_chunk: u64,
    /// Out of order, undecodable, or over the size limit: the terminal's
    /// reference is returned instead of a partial value.
    broken: bool,
}

impl Assembly {
    /// A new assembly for result `result_id`.
    pub(crate) fn new(result_id: String, base64: bool) -> Self {
        Assembly {
            result_id,
            base64,
            bytes: Vec::new(),
            next_chunk: 0,
            broken: false,
        }
    }

    pub(crate) fn push(&mut self, chunk: &arcp_types::EventBody, limit: usize) {
        use base64::Engine as _;
        let arcp_types::EventBody::ResultChunk {
            result_id,
            chunk_seq,
            data,
            encoding,
            ..
        } = chunk
        else {
            return;
        };
        if self.broken || *result_id != self.result_id {
            return;
        }
        if *chunk_seq != self.next_chunk {
            self.broken = true;
            return;
        }
        self.next_chunk += 1;
        let decoded = if encoding == "base64" {
            base64::engine::general_purpose::STANDARD.decode(data).ok()
        } else {
            Some(data.as_bytes().to_vec())
        };
        match decoded {
            Some(bytes) if self.bytes.len() + bytes.len() <= limit => self.bytes.extend(bytes),
            _ => {
                self.broken = true;
                self.bytes = Vec::new();
            }
        }
    }

    /// The assembled value: text for `utf8` chunks, base64 for binary.
    pub(crate) fn value(self) -> Option<Value> {
        use base64::Engine as _;
        if self.broken {
            return None;
        }
        Some(Value::String(if self.base64 {
            base64::engine::general_purpose::STANDARD.encode(&self.bytes)
        } else {
            String::from_utf8(self.bytes).ok()?
        }))
    }
}
