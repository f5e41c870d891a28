//! # arcp-mock
//!
//! An in-process ARCP runtime for tests: the [wiremock] of ARCP. Start a
//! [`MockRuntime`] in one line, register tools as async closures, point the
//! code under test at its `ws://` URL, break things on purpose, and assert
//! how many times each tool really ran.
//!
//! It speaks both message sets in use ([`Dialect::V1_1`] as the Python 1.1.3
//! runtime does, [`Dialect::Legacy`] as the Rust 2.0.0 runtime does) and
//! reproduces how each runtime family answers a retried call
//! ([`ReplayPolicy`], [`ConflictSignal`]), down to the field names and types
//! in the captured transcripts.
//!
//! ## Install
//!
//! ```toml
//! [dev-dependencies]
//! arcp-mock = "0.1"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! ## Getting started
//!
//! ```
//! use arcp_mock::{Fault, MockRuntime, ToolFailure};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> std::io::Result<()> {
//! let mock = MockRuntime::builder()
//!     .tool("refund", |args, ctx| async move {
//!         ctx.progress(1, 2).await;
//!         match args["order"].as_u64() {
//!             Some(order) => Ok(json!({"refunded": order})),
//!             None => Err(ToolFailure::new("INVALID_ARGUMENT", "order is required")),
//!         }
//!     })
//!     .start()
//!     .await?;
//!
//! // Cut the connection right after the first `job.accepted`.
//! mock.inject(Fault::DropAfterAccepted);
//!
//! // Point the client under test at the mock, and run it:
//! let url = mock.ws_url(); // ws://127.0.0.1:PORT/arcp
//! // let out = client.invoke_tool("refund", json!({"order": 4812})).await?;
//!
//! // Then: however many retries it took, the refund ran exactly once.
//! // mock.expect_executions("refund", 1);
//! # let _ = url;
//! # Ok(())
//! # } // dropping `mock` verifies the expectations
//! ```
//!
//! [`MockRuntime`] shows the same scenario end to end with a raw WebSocket
//! client.
//!
//! ## Concepts
//!
//! - **Tools** are `Fn(Value, ToolContext) -> impl Future<Output =
//!   Result<Value, ToolFailure>>` closures. A [`ToolContext`] emits job
//!   events (progress, log, metric, result chunks), sleeps, and tells the job
//!   id, key and principal. Each call of the closure is one *execution*:
//!   [`MockRuntime::executions`], [`MockRuntime::executions_for_key`].
//! - **Idempotency** is scoped by (principal, key). The intent fingerprint is
//!   the runtime's: v1.1 compares the whole `job.submit` payload (as Python
//!   compares dicts), legacy compares the tool name and
//!   `serde_json::to_string(arguments)` (so `1` and `1.0` differ). A submit
//!   without a key always executes.
//! - **Replay policy**: what a same-key, same-intent resubmission gets
//!   ([`ReplayPolicy`]); **conflict signal**: how a same-key, other-intent
//!   one is refused ([`ConflictSignal`]). Both default to the dialect's
//!   reference runtime.
//! - **Presets**: one per runtime family of the replay table, with
//!   [`MockRuntimeBuilder::preset`]:
//!   - [`Preset::Python113`]: v1.1 Python 1.1.3; terminal replayed after
//!     completion, `session.error DUPLICATE_KEY` without request id,
//!     `job.subscribe`, resume without re-attaching running jobs.
//!   - [`Preset::Rust200`]: legacy Rust 2.0.0; `job.accepted` only, `job.failed
//!     FAILED_PRECONDITION`, no subscribe or resume, drops TCP on bad frames.
//!   - [`Preset::TsGoJava`]: v1.1 TypeScript / Go / Java; `job.accepted`
//!     only, `job.error DUPLICATE_KEY` with the request id, no subscribe.
//!   - [`Preset::PhpNewer`]: legacy PHP (newer); the stored terminal without
//!     `job.accepted`, other intents not signalled.
//!   - [`Preset::PhpOlder`]: legacy PHP (older); `ack` with `replay: true`,
//!     other intents not signalled.
//! - **Sessions**: v1.1 `session.hello` / `session.welcome` with resume
//!   (rotating tokens, a bounded replay buffer, `RESUME_WINDOW_EXPIRED`),
//!   `session.ack`, heartbeats; legacy `session.open` / `session.accepted`,
//!   no resume. Jobs outlive their connection.
//! - **Faults** ([`Fault`]) are one-shot and FIFO ([`MockRuntime::inject`])
//!   or standing ([`MockRuntime::inject_always`]): drop on submit, after
//!   `job.accepted`, before the terminal, after N frames, during the
//!   handshake; delay replies; reject the next submit with a code and
//!   `retry_after`; black-hole everything without closing; answer the
//!   WebSocket upgrade with an HTTP status (429 / 503 with `Retry-After`,
//!   401); close with a given code; follow terminals with stray and
//!   duplicate frames. Inbound frames over
//!   [`MockRuntimeBuilder::max_inbound_frame_size`] are closed with 1009.
//!   A fault that concerns one call can be scoped to a tool or a key
//!   ([`MockRuntime::inject_for`], [`FaultScope`]); a running tool can drop
//!   its own connection after its side effect
//!   ([`ToolContext::drop_connection`]).
//! - **Ground truth** for checkers, during and after a run:
//!   [`MockRuntime::jobs`] (per job: key, tool, arguments, principal, how
//!   many times the tool ran, status, whether the terminal ever reached a
//!   client), [`MockRuntime::executions_by_key`], and
//!   [`MockRuntime::connection_log`] (what each connection received and
//!   sent).
//! - **Verification**: [`MockRuntime::expect_executions`] and friends, and
//!   [`MockRuntime::expect`] with an [`Expectation`] (named, exact or ranged
//!   [`Times`]), checked by [`MockRuntime::verify`] and when the mock is
//!   dropped; [`MockRuntime::expect_scoped`] returns an
//!   [`ExpectationGuard`] that counts only while it lives and checks on drop;
//!   [`MockRuntime::reset`] starts a test over (counts, expectations,
//!   faults); [`MockRuntime::add_tool`] adds a tool to a running mock;
//!   [`MockRuntime::received`] returns every envelope the client sent, to
//!   assert for example that every attempt reused the key with a
//!   byte-identical payload under a fresh envelope id.
//! - **HTTP**: the same runtime also serves the ARCP HTTP binding
//!   (`docs/http-binding.md` in this package) on a second port, [`MockRuntime::http_url`]:
//!   409 while a key's job runs, the stored terminal with `Arcp-Replayed:
//!   true` after, 422 for another intent; tools, keys, counts and faults are
//!   shared with the WebSocket side.
//! - **Chaos**: a [`ChaosProxy`] sits between any client and any runtime
//!   (this one or a real one) and kills or stalls connections on a seeded,
//!   reproducible schedule.
//!
//! ## Test isolation
//!
//! Each `MockRuntime` binds its own ephemeral port on `127.0.0.1` and keeps
//! all state (sessions, jobs, keys, counters, faults) to itself, so tests
//! run in parallel without interfering. Dropping it closes the listener and
//! every connection and aborts running tools; it then checks the
//! expectations (unless the test is already panicking).
//!
//! Memory is bounded everywhere: the outbound queue per connection (a client
//! that stops reading is dropped), the resume buffer per session, the
//! sessions, finished jobs and idempotency bindings kept, and the
//! [`MockRuntime::received`] log (last 10 000 envelopes).
//!
//! ## Prior art
//!
//! | | wiremock (HTTP) | arcp-mock |
//! |---|---|---|
//! | start | `MockServer::start().await` | `MockRuntime::builder()..start().await` |
//! | stub | `Mock::given(..).respond_with(..)` | `.tool(name, closure)` |
//! | expectations | `.expect(n)` or a range, `.named(..)`, verified on drop | `expect(Expectation::tool(t).times(n).named(..))`, verified on drop |
//! | scoped | `mount_as_scoped` | `expect_scoped`, checked when the guard drops |
//! | start over | `reset()` | `reset()` |
//! | add stubs later | `mount(&server)` | `add_tool(name, closure)` |
//! | inspect requests | `received_requests()` | `received()` |
//! | failure injection | a responder returning errors or delays | [`Fault`] (per tool or key with [`FaultScope`]), [`ChaosProxy`] |
//! | protocol state | stateless | sessions, resume, idempotency keys, replay |
//!
//! [wiremock]: https://docs.rs/wiremock

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The package README's code compiles (and runs, where it is not `no_run`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// Module order: each module imports only modules listed before it, so the
// arrows run one way.
//
// - `config`, `expect`, `fault`, `verify`, `tool`: leaves (settings,
//   expectations, fault scripts, ground-truth records, tools and the event
//   sink they write to);
// - `engine`: state and protocol logic, knows no socket;
// - `guard`: a scoped expectation, holding the engine;
// - `ws`, `http`: the transports, which move frames for the engine;
// - `runtime`, `builder`: the public handle and its builder;
// - `chaos`: the chaos proxy, standalone.
mod config;
mod expect;
mod fault;
mod tool;
mod verify;

mod engine;

mod guard;

mod http;
mod ws;

mod builder;
mod runtime;

mod chaos;

pub use arcp_types::{Dialect, Envelope, ErrorCode};
pub use builder::MockRuntimeBuilder;
pub use chaos::{ChaosProxy, ChaosProxyBuilder, ChaosProxyHandle, ChaosReport, Kill, KillReason};
pub use config::{ConflictSignal, Preset, ReplayPolicy};
pub use expect::{Expectation, Times};
pub use fault::{Fault, FaultScope, UnscopableFault};
pub use guard::ExpectationGuard;
pub use runtime::MockRuntime;
pub use tool::{ToolContext, ToolFailure};
pub use verify::{ConnRecord, JobRecord, JobStatus, VerifyError};
