//! Connecting as the CLI does, with the library's defaults: the dialect is
//! found by probing (`auto`), so either runtime family answers the first
//! call; a host that does not exist fails at once, naming the host.

mod support;

use std::time::{Duration, Instant};

use arcp_mock::Dialect;
use arcp_sdk::{Client, Error, Execution};
use serde_json::json;
use support::mock::mock;

/// The default dialect reaches a runtime of either family, each call run
/// once, without the 30 s of retries a wrong fixed dialect costs.
#[tokio::test]
async fn the_default_dialect_reaches_both_runtime_families() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = mock(dialect).start().await.unwrap();
        let started = Instant::now();
        let client = Client::builder(mock.ws_url()).connect().await.unwrap();
        let out = client
            .invoke_tool("echo", json!({"dialect": dialect.to_string()}))
            .deadline(Duration::from_secs(10))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{dialect}: {e:?}"));
        assert_eq!(out.value, json!({"dialect": dialect.to_string()}));
        assert_eq!(mock.executions("echo"), 1, "{dialect}");
        assert_eq!(client.runtime().unwrap().dialect(), dialect);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{dialect}: {:?}",
            started.elapsed()
        );
        client.close().await;
    }
}

/// A host the resolver says does not exist is not retried: `connect()`
/// fails within a second, naming the host.
#[tokio::test]
async fn a_host_that_does_not_exist_fails_connect_at_once() {
    let host = "no-such-host.invalid";
    let started = Instant::now();
    let err = Client::builder(format!("ws://{host}:7777/arcp"))
        .connect()
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "took {took:?}: {err:?}");
    match &err {
        Error::Connect {
            message, retryable, ..
        } => {
            assert!(!retryable, "{message}");
            assert!(message.contains(host), "{message}");
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
    assert!(!err.is_retryable());
}

/// The same through a call on a lazily connected client: the call ends at
/// once, and nothing was sent.
#[tokio::test]
async fn a_call_to_a_host_that_does_not_exist_ends_at_once() {
    let host = "no-such-host.invalid";
    let client = Client::builder(format!("ws://{host}:7777/arcp")).connect_lazy();
    let started = Instant::now();
    let err = client
        .invoke_tool("echo", json!({}))
        .deadline(Duration::from_secs(30))
        .send()
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "took {took:?}: {err:?}");
    assert!(err.to_string().contains(host), "{err}");
    assert_ne!(err.execution(), Execution::Ran, "{err:?}");
    assert_ne!(err.execution(), Execution::MayHaveRun, "{err:?}");
}

/// The same against the published runtimes: the Python runtime answers
/// v1.1, the Rust one drops the v1.1 hello and is spoken to in legacy; a
/// counted call runs once on each, within seconds.
#[tokio::test]
async fn the_default_dialect_reaches_each_published_runtime() {
    use support::peers::{Peer, PeerKind};
    for (kind, expected) in [
        (PeerKind::Python, Dialect::V1_1),
        (PeerKind::Rust, Dialect::Legacy),
    ] {
        let peer = Peer::start(kind);
        let started = Instant::now();
        let client = Client::builder(peer.url.clone())
            .bearer_token(peer.token())
            .connect()
            .await
            .unwrap_or_else(|e| panic!("{expected}: {e:?}"));
        assert_eq!(client.runtime().unwrap().dialect(), expected);
        client
            .invoke_tool("counter", peer.counter_args(1, 0, "default-dialect"))
            .deadline(Duration::from_secs(10))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{expected}: {e:?}"));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{expected}: {:?}",
            started.elapsed()
        );
        assert_eq!(peer.executions().await, 1, "{expected}");
        client.close().await;
    }
}
