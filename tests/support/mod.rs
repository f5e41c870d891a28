//! Shared test support.
#![allow(dead_code)]

pub mod gateway;
pub mod link;
pub mod mock;
pub mod peers;
pub mod targets;

/// Sends the client's tracing output to the test's captured output
/// (`RUST_LOG=arcp_sdk=debug cargo test -- --nocapture` to see it).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
}
