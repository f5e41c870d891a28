//! # arcp
//!
//! Umbrella crate of the ARCP Rust SDK. It re-exports the three crates:
//!
//! - [`types`] (`arcp-types`): the wire: envelope, both dialects, error codes, keys;
//! - [`client`] (`arcp-client`): the replay-aware client;
//! - [`mock`] (`arcp-mock`): an in-process runtime and a chaos proxy for tests.
//!
//! See the README for a tour and `examples/` for runnable retry patterns.

#![forbid(unsafe_code)]

pub use arcp_client as client;
pub use arcp_mock as mock;
pub use arcp_types as types;
