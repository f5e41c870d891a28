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
//! Calls are typed ([`Tool`]: arguments from any
//! `Serialize`, results into any `DeserializeOwned`) or JSON
//! ([`Client::invoke_tool`]); a typed call is the JSON
//! call underneath, with the same keys, retries and replays. Every error
//! says whether the tool ran ([`Error::execution`]). The knobs that trade
//! CPU time and memory, not behaviour, are in [`tuning`].
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
//! ## Handling outcomes
//!
//! Every call ends with a [`ToolOutput`] or an [`Error`], and every error
//! says whether the tool ran ([`Error::execution`]). Decide on that, not on
//! the variant:
//!
//! ```no_run
//! use arcp_sdk::{Client, Error, Execution};
//! use serde_json::json;
//!
//! async fn refund(client: &Client) -> Result<(), Error> {
//!     match client.invoke_tool("refund", json!({"order": 4812})).await {
//!         Ok(out) => println!("refunded: {} (replayed: {})", out.value, out.replayed),
//!         Err(e) => match e.execution() {
//!             // Proven: the runtime never ran this intent under this key.
//!             // Safe to issue the work again, even under a new key.
//!             Execution::NotRun => eprintln!("not run: {e}"),
//!             // This call sent nothing, but the key was supplied (an earlier
//!             // call with it may have run): retry with the same key.
//!             Execution::NotSent => eprintln!("not sent; retry with key {:?}", e.key()),
//!             // It ran and failed (`Error::Tool`), or its result did not
//!             // decode: do not run it again.
//!             Execution::Ran => eprintln!("ran: {e}"),
//!             // At most once, outcome unknown (or the job was cancelled,
//!             // `Error::Cancelled`): keep the key and job id and ask again
//!             // later with the same key.
//!             Execution::MayHaveRun => {
//!                 eprintln!("may have run: key {:?}, job {:?}", e.key(), e.job_id())
//!             }
//!         },
//!     }
//!     Ok(())
//! }
//! ```
//!
//! (The match has no wildcard arm: [`Execution`] has exactly these four
//! classes.)
//!
//! What each outcome means, over WebSocket (`ws://`, `wss://`) and over the
//! HTTP binding (`http://`, `https://`):
//!
//! | outcome | did the tool run? | WebSocket | HTTP binding |
//! |---|---|---|---|
//! | `Ok(`[`ToolOutput`]`)` | yes, once | the job's result; `replayed` when the runtime marked it a stored outcome, or it comes from the job the key was bound to | the same; `replayed` when the runtime marks it (`Arcp-Replayed`) or the answer is from the job an earlier attempt bound the key to (`job.accepted`; a 409 names no job, so an answer after it is not taken for a replay) |
//! | [`Error::Tool`] | yes (its [`ToolError::execution`]: not run for a refusal before acceptance) | the job failed with `e.code`, or the runtime refused the request before accepting it; not retried with the same key | the same, from the ARCP envelope in the body |
//! | [`Error::DuplicateKey`] | as its `execution` field says: not run, unless an earlier attempt of this call may have reached the runtime (then maybe) | the key is bound to another intent; never retried | also HTTP 422 |
//! | [`Error::NotSent`] | not by this call; the key was supplied, and an earlier call with it may have run: retry with the same key | what stopped this call is its `cause` (a failed connect, refused credentials, a closed client, a deadline before any send) | the same (a 404 or 401 on the first POST, say) |
//! | [`Error::RetriesExhausted`] | no | every attempt refused before acceptance (`UNAVAILABLE`, rate limits) or not sent, until the budget ran out | 429 or 503 with `Retry-After` (or retryable refusals) every time |
//! | [`Error::OutcomeUnavailable`] | maybe, at most once | a request may have run and its outcome could not be had (the budget ran out, a later attempt was refused, a runtime that replays only `job.accepted`); retry later with `key` | also a 5xx other than 501 and 505, a 503 without `Retry-After`, a cut or unreadable answer, then a final status |
//! | [`Error::DeadlineExceeded`] | as its `execution` field says | the call's deadline passed | a POST handed to the HTTP client and unanswered counts as sent |
//! | [`Error::Interrupted`] | maybe, at most once | the client was closed with the call in flight | the same for a POST in flight |
//! | [`Error::RequestRejected`] | no | the runtime closed the connection because it could not take the request in (1009, 1002, 1003, 1007), again when re-sent alone (a policy close, 1008, never clears the doubt) | (WebSocket only) |
//! | [`Error::Unauthenticated`] | no | the runtime refused the credentials in the handshake, or the upgrade with 401/403 | HTTP 401 or 403 |
//! | [`Error::Http`] | no | (HTTP only) | a status the binding does not define (400, 404, 405, 501, 505, ...) |
//! | [`Error::Cancelled`] | maybe, at most once (cancelled in the runtime's queue or while it ran); the key's outcome is final | the runtime cancelled the job | the same |
//! | [`Error::ResultDecode`] | yes | a typed call's result does not decode; the raw result is kept | the same |
//! | [`Error::ArgumentsEncode`], [`Error::InvalidCall`] | no (as their `execution` field says: `not_sent` for a key you supplied) | rejected before anything was sent | the same |
//! | [`Error::Connect`], [`Error::Handshake`] | no | no connection or session (`connect()`, or a call that could not get one) | the endpoint cannot be used (a bad URL, an untrusted certificate) |
//! | [`Error::Journal`] | no (`JOURNAL_FENCED`, `JOURNAL_UNAVAILABLE`: maybe) | the journal failed; the call was not sent by this client | the same |
//! | [`Error::Closed`] | no | the client was closed before the call was sent | the same |
//!
//! For programs that branch on the kind of failure, as with reqwest:
//! [`Error::is_timeout`] (a deadline, or a connect or handshake timeout),
//! [`Error::is_connect`] (no connection or session could be established),
//! [`Error::is_auth`] (credentials refused) and [`Error::is_retryable`]
//! (the same call, with the same key, may end differently). Connect and
//! handshake errors carry their cause: [`std::error::Error::source`] leads
//! to the `std::io::Error`, `rustls::Error` or timer underneath. An
//! [`Error::NotSent`] answers each of these for its `cause`.
//!
//! Where a row says "no", a call whose key was generated says
//! [`Execution::NotRun`]; with a key you supplied, the same ending is an
//! [`Error::NotSent`] around it, unless the runtime or the journal proved
//! that the key did not run.
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
// The per-call tables' hash map, a leaf that `fate`, `cache` and `ws` import.
mod fast_map;
// Leaves: import no other module of the crate (but `sync`, the first).
mod config;
mod connection_events;
mod error;
mod fate;
mod outcome;
mod percent;
mod stats;
mod sync;
// Metrics (empty without the `metrics` feature).
mod telemetry;
// A call's intent and the pure rules.
mod cache;
mod classify;
mod cleartext;
mod intent_digest;
mod profile;
mod request;
mod retry;
// A call's deadline, one value from its start.
mod deadline;
// A call's attempts: one record for both transports.
mod attempts;
// The bearer token, from where the application keeps it.
mod credentials;
// Durable records of calls.
mod journal;
// The transports, and the client on top.
mod backend;
mod client;
#[cfg(feature = "http")]
mod http;
mod invocation;
pub mod tuning;
mod typed;
mod ws;

pub use arcp_types::{Dialect, ErrorCode, EventBody, IdempotencyKey, JobEvent};
pub use client::{Client, ClientBuilder};
pub use config::{DialectChoice, RetryPolicy};
pub use connection_events::{ConnectionEvent, ConnectionEvents};
pub use error::{Error, ErrorSource, Execution, ResultDecodeError, ToolError};
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use http::{ArtifactFetcher, ArtifactFetcherBuilder, ArtifactRef};
pub use invocation::{CallHandle, Events, Invocation, InvokeBuilder, RecoveryPass};
pub use journal::{
    ClaimPosition, Journal, JournalEntry, JournalError, JournalErrorKind, JournalOutcome,
    JournalState, JournalWrite, MemoryJournal, PurgeReport, RecoveryMode, Retention,
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
/// The TLS library of `wss://` and `https://` connections, re-exported so that the
/// `rustls::ClientConfig` given to [`ClientBuilder::tls_config`] comes from
/// the version this crate uses.
pub use rustls;
pub use stats::ClientStats;
pub use typed::Tool;
