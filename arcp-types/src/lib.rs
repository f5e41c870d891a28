//! # arcp-types
//!
//! The wire layer of the ARCP SDK: the [`Envelope`], both message dialects
//! ([`Dialect::V1_1`] and [`Dialect::Legacy`]) behind one dialect-neutral
//! model ([`Frame`], [`Message`]), the open [`ErrorCode`] set, and
//! [`IdempotencyKey`]. serde only: no I/O, no async runtime.
//!
//! ```
//! use arcp_types::{Dialect, Frame, Invoke, Message, IdempotencyKey};
//! use serde_json::json;
//!
//! let key = IdempotencyKey::new();
//! let frame = Frame::new(Message::Invoke(
//!     Invoke::new("echo", json!({"hello": "world"})).with_idempotency_key(key.as_str()),
//! ));
//! // The same call in each dialect's own words.
//! let v11 = Dialect::V1_1.to_envelope(&frame);
//! assert_eq!(v11.kind, "job.submit");
//! assert_eq!(v11.payload["idempotency_key"], key.as_str());
//! let legacy = Dialect::Legacy.to_envelope(&frame);
//! assert_eq!(legacy.kind, "tool.invoke");
//! assert_eq!(legacy.idempotency_key.as_deref(), Some(key.as_str()));
//! ```

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The package README's code compiles (and runs, where it is not `no_run`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod dialect;
mod envelope;
mod error_code;
mod events;
mod extra_fields;
mod ids;
mod json_escape;
mod key;
mod message;
mod raw_json;
mod scan;

pub use dialect::{DecodeError, Decoded, Dialect, EncodedRequest, PayloadScope};
pub use envelope::{Envelope, Header, PROTOCOL_VERSION};
pub use error_code::ErrorCode;
pub use events::EventBody;
pub use ids::{
    format_rfc3339, is_message_id, is_trace_id, new_message_id, new_trace_id, now_rfc3339,
    write_new_message_id, write_new_message_id_and_timestamp, write_now_rfc3339,
};
pub use key::{canonical_json, IdempotencyKey, KeyError, MAX_KEY_LEN};
pub use message::*;
pub use raw_json::RawJson;
pub use scan::peek_kind;
