//! # arcp-client
//!
//! A replay-aware client for the Agent Runtime Control Protocol (ARCP).
//! `invoke_tool` gives every logical call one stable idempotency key, retries
//! with backoff across disconnects (reconnecting and resuming the session),
//! and accepts a replayed result or error, or `DUPLICATE_KEY`, as terminal:
//! a dropped connection never runs a side effect twice.
//!
//! ```no_run
//! # async fn demo() -> Result<(), arcp_client::Error> {
//! use arcp_client::Client;
//! use serde_json::json;
//!
//! let client = Client::builder("ws://127.0.0.1:7777/arcp")
//!     .bearer_token("secret")
//!     .connect()
//!     .await?;
//! let out = client.invoke_tool("refund", json!({"order": 4812})).await?;
//! println!("{} (attempts: {})", out.value, out.attempts);
//! # Ok(()) }
//! ```
//!
//! It speaks both ARCP message sets in use: v1.1 (`job.submit`, ...) and the
//! legacy `tool.invoke` set ([`DialectChoice`]). See `docs/architecture.md`
//! for the state machine and the replay matrix.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cache;
mod client;
mod connection;
mod error;
mod invocation;
mod profile;
mod retry;

pub use arcp_types::{Dialect, ErrorCode, EventBody, IdempotencyKey, JobEvent};
pub use client::{Client, ClientBuilder, DialectChoice};
pub use error::{Error, ToolError};
pub use invocation::{
    CallHandle, CancelOutcome, Events, Invocation, InvocationEvent, InvokeBuilder, ToolOutput,
};
pub use profile::RuntimeProfile;
pub use retry::RetryPolicy;
