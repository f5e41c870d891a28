//! Errors a program can inspect: `source()` chains from connect and
//! handshake errors down to the I/O error or the timer that ran out, and
//! `is_timeout()`, `is_connect()` and `is_auth()` against real failures
//! (a closed port, a listener that never upgrades, a runtime that never
//! welcomes, refused credentials, a deadline). The TLS chain is in
//! `tests/tls.rs`.

mod support;

use std::error::Error as _;
use std::time::{Duration, Instant};

use arcp_mock::{Dialect, Fault};
use arcp_sdk::{Client, Error};
use serde_json::json;
use support::mock::mock;
use tokio::net::TcpListener;

/// The `std::io::Error` in `err`'s source chain, if any.
fn io_cause(err: &Error) -> Option<&std::io::Error> {
    let mut next = err.source();
    while let Some(cause) = next {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        next = cause.source();
    }
    None
}

#[tokio::test]
async fn a_refused_connection_chains_down_to_the_io_error() {
    // A port nobody listens on: bind, note it, close.
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().port()
    };
    let err = Client::builder(format!("ws://127.0.0.1:{port}/arcp"))
        .connect_budget(Duration::from_millis(300))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(err.is_connect() && !err.is_auth(), "{err:?}");
    let io = io_cause(&err).unwrap_or_else(|| panic!("no io::Error under {err:?}"));
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused, "{io:?}");
}

#[tokio::test]
async fn a_listener_that_never_upgrades_is_a_connect_timeout() {
    // Accepts TCP and then says nothing: the WebSocket upgrade never comes.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            sockets.push(socket);
        }
    });
    let started = Instant::now();
    let err = Client::builder(format!("ws://127.0.0.1:{port}/arcp"))
        .connect_timeout(Duration::from_millis(200))
        .connect_budget(Duration::from_millis(500))
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_connect(), "{err:?}");
    assert!(err.is_timeout(), "a silent upgrade is a timeout: {err:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "bounded");
    held.abort();
}

#[tokio::test]
async fn a_runtime_that_never_welcomes_is_a_handshake_timeout() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    mock.inject(Fault::BlackHole);
    let err = Client::builder(mock.ws_url())
        .handshake_timeout(Duration::from_millis(200))
        .connect_budget(Duration::from_millis(500))
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_connect(), "{err:?}");
    assert!(err.is_timeout(), "no welcome in time is a timeout: {err:?}");
    assert_eq!(mock.total_executions(), 0);
}

#[tokio::test]
async fn refused_credentials_are_auth_not_connect() {
    let mock = mock(Dialect::V1_1)
        .token("right-token", "alice")
        .start()
        .await
        .unwrap();
    let err = Client::builder(mock.ws_url())
        .bearer_token("wrong-token")
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unauthenticated { .. }), "{err:?}");
    assert!(err.is_auth(), "{err:?}");
    assert!(!err.is_connect() && !err.is_timeout(), "{err:?}");
}

#[tokio::test]
async fn a_passed_deadline_is_a_timeout_and_a_tool_error_is_none_of_them() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = Client::builder(mock.ws_url()).connect().await.unwrap();
    let err = client
        .invoke_tool("refund", json!({"order": 1, "ms": 2_000}))
        .deadline(Duration::from_millis(100))
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DeadlineExceeded { .. }), "{err:?}");
    assert!(
        err.is_timeout() && !err.is_connect() && !err.is_auth(),
        "{err:?}"
    );
    let err = client
        .invoke_tool("fail", json!({"code": "UNAUTHENTICATED"}))
        .await
        .unwrap_err();
    // The tool ran and reported the code itself: not the client's credentials.
    assert!(matches!(err, Error::Tool(_)), "{err:?}");
    assert!(
        !err.is_auth() && !err.is_timeout() && !err.is_connect(),
        "{err:?}"
    );
    client.close().await;
}
