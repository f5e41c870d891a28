//! wiremock-style expectations: verified on demand and on drop, with a
//! readable report.

mod common;

use arcp_mock::MockRuntime;
use arcp_types::Dialect;
use common::*;
use serde_json::json;

async fn run_echo_twice(mock: &MockRuntime) {
    let mut client = Client::connect(mock).await;
    client.handshake("t").await;
    for _ in 0..2 {
        client.submit("echo", json!(1), None).await;
        client.recv_type("job.result").await;
    }
}

#[tokio::test]
async fn met_expectations_verify() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    mock.expect_executions("echo", 2);
    mock.expect_executions("slow", 0);
    mock.expect_total_executions(2);
    run_echo_twice(&mock).await;
    mock.verify();
}

#[tokio::test]
async fn unmet_expectations_are_reported_readably() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    mock.expect_executions("echo", 1);
    mock.expect_executions_for_key("k", 1);
    mock.expect_executions("slow", 0);
    run_echo_twice(&mock).await;
    let error = mock.try_verify().unwrap_err();
    assert_eq!(
        error.to_string(),
        "arcp-mock: 2 of 3 expectations not met:\n  \
         - tool `echo`: expected 1 execution, got 2\n  \
         - idempotency key `k`: expected 1 execution, got 0"
    );
    assert_eq!(error.failures().len(), 2);
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| mock.verify()))
        .expect_err("verify panics");
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("tool `echo`: expected 1 execution, got 2"),
        "{message}"
    );
    // Already asserted: skip the check on drop.
    std::mem::forget(mock);
}

#[tokio::test]
#[should_panic(expected = "tool `echo`: expected 3 executions, got 2")]
async fn unmet_expectations_panic_on_drop() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    mock.expect_executions("echo", 3);
    run_echo_twice(&mock).await;
    drop(mock);
}
