//! A name that stops resolving, through the public API: before the first
//! session it fails `connect()` at once; after one, a reconnect rides it out
//! within the call's budget, and a call in flight still runs once.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use arcp_mock::{Fault, MockRuntime};
use serde_json::json;

use super::test_resolver;
use crate::{Client, Error, Execution, RetryPolicy};

async fn runtime() -> (MockRuntime, SocketAddr) {
    let mock = MockRuntime::builder()
        .tool(
            "echo",
            |args: serde_json::Value, _ctx| async move { Ok(args) },
        )
        .start()
        .await
        .unwrap();
    let address = mock.ws_url()["ws://".len()..]
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    (mock, address)
}

#[tokio::test]
async fn before_any_session_a_missing_host_fails_connect_within_a_second() {
    let host = "never-resolves.test";
    test_resolver::set(host, None);
    let started = Instant::now();
    let err = Client::builder(format!("ws://{host}:7777/arcp"))
        .connect()
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "{err:?}");
    assert!(
        matches!(&err, Error::Connect { retryable: false, message, .. } if message.contains(host)),
        "{err:?}"
    );
}

#[tokio::test]
async fn after_a_session_a_dns_blip_is_ridden_out_and_the_call_runs_once() {
    let host = "blips-during-failover.test";
    let (mock, address) = runtime().await;
    test_resolver::set(host, Some(address));
    let client = Client::builder(format!("ws://{host}:{}/arcp", address.port()))
        .retry(RetryPolicy::exponential().initial_delay(Duration::from_millis(20)))
        .connect()
        .await
        .unwrap();
    // The name stops resolving, and the connection dies with a call
    // accepted; the name comes back a little later.
    test_resolver::set(host, None);
    mock.inject(Fault::DropAfterAccepted);
    let back = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        test_resolver::set(host, Some(address));
    });
    let out = client
        .invoke_tool("echo", json!({"n": 1}))
        .deadline(Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("the blip ended the call: {e:?}"));
    assert_eq!(out.value, json!({"n": 1}));
    back.await.unwrap();
    assert_eq!(mock.executions("echo"), 1);
    client.close().await;
}

#[tokio::test]
async fn after_a_session_a_host_gone_for_good_ends_the_call_naming_it() {
    let host = "gone-after-a-session.test";
    let (mock, address) = runtime().await;
    test_resolver::set(host, Some(address));
    let client = Client::builder(format!("ws://{host}:{}/arcp", address.port()))
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(20))
                .max_elapsed(Duration::from_secs(1)),
        )
        .connect()
        .await
        .unwrap();
    test_resolver::set(host, None);
    mock.inject(Fault::DropAfterAccepted);
    let started = Instant::now();
    let err = client
        .invoke_tool("echo", json!({"n": 2}))
        .deadline(Duration::from_secs(10))
        .await
        .unwrap_err();
    // Not at once: the reconnect was retried, within the budget.
    assert!(started.elapsed() >= Duration::from_millis(200), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "{err:?}");
    assert!(err.to_string().contains(host), "{err}");
    // It was accepted before the cut: it may have run, at most once.
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err:?}");
    assert!(mock.executions("echo") <= 1);
    client.close().await;
}
