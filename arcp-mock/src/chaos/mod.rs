//! `ChaosProxy`: a seeded, fault-injecting loopback TCP proxy for WebSocket
//! traffic.
//!
//! The proxy forwards the HTTP/1.1 upgrade byte-for-byte, then follows the
//! RFC 6455 framing in both directions (without buffering whole frames) so it
//! can drop a connection exactly at a frame boundary, on a schedule derived
//! from a seed.
//!
//! One file per job: `proxy.rs` is the public API (builder, handle),
//! `report.rs` what the proxy did, `schedule.rs` the proxy's state and each
//! connection's kill schedule, `pump.rs` the accept and forwarding loops,
//! `upgrade.rs` the scan for the end of the HTTP upgrade, and `frames.rs`
//! the RFC 6455 frame parser that decides what each read may forward.

mod frames;
mod proxy;
mod pump;
mod report;
mod schedule;
mod upgrade;

pub use proxy::{ChaosProxy, ChaosProxyBuilder, ChaosProxyHandle};
pub use report::{ChaosReport, Kill, KillReason};

#[cfg(test)]
mod tests;
