//! # arcp-sdk
//!
//! A replay-aware client for the Agent Runtime Control Protocol (ARCP).
//! Every logical call gets one stable idempotency key; the client retries
//! with backoff across disconnects (reconnecting and resuming the session),
//! and accepts a replayed result or error, or `DUPLICATE_KEY`, as terminal:
//! a dropped connection never runs a side effect twice.
//!
//! ```no_run
//! use arcp_sdk::{Client, Error, Tool};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize)]
//! struct Refund {
//!     order: u64,
//! }
//!
//! #[derive(Deserialize)]
//! struct Refunded {
//!     refunded: u64,
//! }
//!
//! const REFUND: Tool<Refund, Refunded> = Tool::new("refund");
//!
//! # async fn demo() -> Result<(), Error> {
//! let client = Client::builder("ws://127.0.0.1:7777/arcp")
//!     .bearer_token("secret")
//!     .connect()
//!     .await?;
//! let out = REFUND.call(&client, &Refund { order: 4812 }).await?;
//! println!("refunded {} (attempts: {})", out.value.refunded, out.attempts);
//! # Ok(()) }
//! ```
//!
//! Calls are typed ([`Tool`], [`Client::invoke_as`]: arguments from any
//! `Serialize`, results into any `DeserializeOwned`) or JSON
//! ([`Client::invoke_tool`], [`Client::invoke`]); a typed call is the JSON
//! call underneath, with the same keys, retries and replays. Every error
//! says whether the tool ran ([`Error::execution`]).
//!
//! Keys in memory survive network failures, not a crash of the caller's
//! process. With a journal (`ClientBuilder::journal_path`, a SQLite file)
//! each call is recorded before it is sent, so a restarted process resumes
//! the calls the crashed one left unfinished ([`Client::recover`]) and reads
//! their outcomes ([`Client::lookup`]), and the tool still runs once. With
//! `PostgresJournal` (feature `postgres`) the journal is a database a fleet
//! of workers shares: any worker finishes a dead worker's calls, under
//! leases and fencing.
//!
//! It speaks both ARCP message sets in use: v1.1 (`job.submit`, ...) and the
//! legacy `tool.invoke` set ([`DialectChoice`]). The state machine, the
//! invariants and the replay matrix are in
//! [`docs/architecture.md`](https://docs.rs/crate/arcp-sdk/latest/source/docs/architecture.md), which this package ships.
//!
//! An `http://` or `https://` URL selects the HTTP binding
//! ([`docs/http-binding.md`](https://docs.rs/crate/arcp-sdk/latest/source/docs/http-binding.md)) instead of WebSocket: one `POST` per attempt, the
//! key also in the IETF `Idempotency-Key` header, the same keys, retry policy
//! and outcomes. `Client::fetch_artifact` (or an `ArtifactFetcher`)
//! downloads an `ArtifactRef` with a size limit and sha256 verification.
//!
//! ## Cargo features
//!
//! The default build is lean: WebSocket (`ws://`, `wss://` with rustls) and
//! the in-memory journal. Opt in to the rest:
//!
//! - `http`: the HTTP binding for `http://` and `https://` URLs, and
//!   artifact fetch (reqwest).
//! - `sqlite`: `SqliteJournal` and `ClientBuilder::journal_path` (SQLite
//!   compiled from source).
//! - `metrics`: counters, gauges and histograms through the `metrics`
//!   facade (names and labels in this package's README, "Metrics"); the
//!   application installs the exporter.
//! - `postgres`: `PostgresJournal`, the fleet journal a fleet of workers
//!   shares in one PostgreSQL database (leases, fencing; tokio-postgres and
//!   a deadpool pool).

#![forbid(unsafe_code)]
// On docs.rs (every feature on), each item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The package README's code compiles (and runs, where it is not `no_run`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// The one redaction path, a leaf that `config` imports.
mod redact;
// Leaves: import no other module of the crate (but `sync`, the first).
mod config;
mod connection_events;
mod error;
mod fate;
mod outcome;
mod stats;
mod sync;
// Metrics (empty without the `metrics` feature).
mod telemetry;
// A call's intent and the pure rules.
mod cache;
mod classify;
mod cleartext;
mod profile;
mod request;
mod retry;
// Durable records of calls.
mod journal;
// The transports, and the client on top.
mod backend;
mod client;
#[cfg(feature = "http")]
mod http;
mod invocation;
mod typed;
mod ws;

/// The hash map of the per-call tables (calls, keys, jobs, requests, the
/// outcome cache): hashed with foldhash, seeded per map, several times
/// faster than SipHash on these short keys.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

pub use arcp_types::{Dialect, ErrorCode, EventBody, IdempotencyKey, JobEvent};
pub use client::{Client, ClientBuilder};
pub use config::{DialectChoice, RetryPolicy};
pub use connection_events::{ConnectionEvent, ConnectionEvents};
pub use error::{Error, Execution, ResultDecodeError, ToolError};
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use http::{ArtifactFetcher, ArtifactFetcherBuilder, ArtifactRef};
pub use invocation::{CallHandle, Events, Invocation, InvokeBuilder};
pub use journal::{
    Journal, JournalEntry, JournalError, JournalErrorKind, JournalOutcome, JournalState,
    JournalWrite, MemoryJournal, PurgeReport, RecoveryMode, Retention,
};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use journal::{PostgresJournal, PostgresOptions};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use journal::{SqliteJournal, SqliteOptions, Synchronous};
pub use outcome::{CancelOutcome, InvocationEvent, ToolOutput};
pub use profile::RuntimeProfile;
pub use redact::{escape_control, Redactor};
/// The TLS library of `wss://` connections, re-exported so that the
/// `rustls::ClientConfig` given to [`ClientBuilder::tls_config`] comes from
/// the version this crate uses.
pub use rustls;
pub use stats::ClientStats;
pub use typed::Tool;
