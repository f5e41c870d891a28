//! The WebSocket transport: an I/O-free core and a thin async shell.
//!
//! ```text
//!  Client ──Command (bounded channel)──▶ driver ──▶ core (calls, requests, timers, session)
//!                                          │  ▲         │
//!                     connector (dial) ◀───┘  │         ▼ take_transmit / poll_timeout / poll_dial
//!                     transport (reader, writer) ◀──────┘
//! ```
//!
//! - `core.rs`, `inbound.rs`, `calls.rs`, `attribution.rs`, `assembly.rs`,
//!   `session.rs`: the core. No socket, no `await`, time passed in.
//! - `connector.rs`, `transport.rs`, `driver.rs`: the shell.
//!
//! `docs/architecture.md` has the state machines, the request table and
//! the outcome rule.

mod assembly;
mod attribution;
mod calls;
mod connector;
mod core;
#[cfg(test)]
mod core_tests;
mod driver;
mod inbound;
mod session;
mod transport;

pub(crate) use self::calls::PreparedCall;
pub(crate) use self::core::{Command, Core};
pub(crate) use driver::run;
