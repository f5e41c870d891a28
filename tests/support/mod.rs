//! Shared test support.
#![allow(dead_code)]

pub(crate) mod gateway;
pub(crate) mod link;
pub(crate) mod mock;
pub(crate) mod peers;
pub(crate) mod relay;
pub(crate) mod targets;
pub(crate) mod tls;

/// Sends the client's tracing output to the test's captured output
/// (`RUST_LOG=arcp_sdk=debug cargo test -- --nocapture` to see it).
pub(crate) fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
}
