//! The WebSocket transport: an I/O-free core and a thin async shell.
//!
//! ```text
//!  Client ──Command (bounded channel)──▶ driver ──▶ core (calls, requests, timers, session)
//!                                          │  ▲         │
//!                     connector (dial) ◀───┘  │         ▼ take_transmit / poll_timeout / poll_dial
//!                     transport (reader, writer) ◀──────┘
//! ```
//!
//! - the core, no socket, no `await`, time passed in: `core.rs` (its state,
//!   private to it and its children, what the driver asks, time), and its
//!   children in `core/`: `commands.rs`, `link_events.rs`, `inbound.rs`
//!   (results and errors in `inbound/verdicts.rs`), `call_machine.rs` (one
//!   concern of `impl Core` each), `tests.rs`; its state in owned types,
//!   each with its invariants: `link_state.rs` (the link, the send window;
//!   the shell's dial results and losses, plain records, in `link_io.rs`),
//!   `dialer.rs` (when to dial again; its bucket of immediate reconnects in
//!   `reconnect.rs`), `outbox.rs`, `timers.rs`, `requests.rs` (the request
//!   table), `calls.rs` (a call; its cancel in `cancel.rs`), `call_table.rs`
//!   (the calls and their key and job indexes), `waiters.rs` (a call's
//!   callers), `session.rs`; `assembly.rs`, `ids.rs`.
//! - `connector.rs`, `transport.rs` (TCP in `dial.rs`, a proxy's tunnel in
//!   `proxy.rs`), `driver.rs`: the shell; `spin.rs`, when
//!   the driver polls instead of sleeping for a lone call's reply.
//!
//! `docs/architecture.md` has the state machines, the request table and
//! the outcome rule.

mod ack;
mod assembly;
mod call_table;
mod calls;
mod cancel;
mod connector;
mod core;
mod dial;
mod dialer;
mod driver;
mod given_up;
mod ids;
mod link_io;
mod link_state;
mod outbox;
mod proxy;
mod reconnect;
mod requests;
mod session;
mod spin;
mod timers;
mod transport;
mod waiters;

pub(crate) use self::core::{Command, Core};
pub(crate) use driver::run;
pub(crate) use proxy::check_cleartext as check_cleartext_proxy;
