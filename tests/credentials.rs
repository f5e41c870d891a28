//! Credentials that change: a token provider called for each connection
//! (and once more when the runtime refuses a token as stale), and extra
//! headers on the WebSocket upgrade and the HTTP binding's requests.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arcp_mock::{Dialect, Fault};
use arcp_sdk::{Client, Error};
use serde_json::json;
use support::mock::mock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A provider that hands out `tokens` in turn (the last one from then on),
/// counting its calls.
fn provider(
    tokens: &'static [&'static str],
) -> (
    Arc<AtomicUsize>,
    impl Fn() -> std::future::Ready<Result<String, std::io::Error>> + Send + Sync + 'static,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let provide = move || {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(tokens[n.min(tokens.len() - 1)].to_owned()))
    };
    (calls, provide)
}

/// The first token is refused: the provider is asked again, the session
/// opens with the fresh token, and the call runs once.
#[tokio::test]
async fn a_token_refused_as_stale_is_refreshed_once() {
    let mock = mock(Dialect::V1_1)
        .token("fresh", "svc")
        .start()
        .await
        .unwrap();
    let (calls, provide) = provider(&["stale", "fresh"]);
    let client = Client::builder(mock.ws_url())
        .token_provider(provide)
        .connect()
        .await
        .unwrap();
    let out = client.invoke_tool("echo", json!({"n": 1})).await.unwrap();
    assert_eq!(out.value, json!({"n": 1}));
    assert_eq!(mock.executions("echo"), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// A refused fresh token is a refusal: no loop of provider calls.
#[tokio::test]
async fn a_fresh_token_refused_again_is_unauthenticated() {
    let mock = mock(Dialect::V1_1)
        .token("good", "svc")
        .start()
        .await
        .unwrap();
    let (calls, provide) = provider(&["bad"]);
    let err = Client::builder(mock.ws_url())
        .dialect(Dialect::V1_1)
        .token_provider(provide)
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unauthenticated { .. }), "{err:?}");
    assert!(!err.to_string().contains("bad"), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// The connection drops after the runtime accepted the call; by then the
/// provider's token has expired (the runtime refuses it), so the reconnect
/// asks for a fresh one, and the call completes, run once.
#[tokio::test]
async fn a_reconnect_after_expiry_uses_a_refreshed_token_and_the_tool_runs_once() {
    let mock = mock(Dialect::V1_1)
        .token("t1", "svc")
        .token("t3", "svc")
        .start()
        .await
        .unwrap();
    // t1 for the first session; t2 (expired: unknown to the runtime) for
    // the reconnect; t3 after the refusal.
    let (calls, provide) = provider(&["t1", "t2", "t3"]);
    let client = Client::builder(mock.ws_url())
        .token_provider(provide)
        .connect()
        .await
        .unwrap();
    mock.inject(Fault::DropAfterAccepted);
    let out = client
        .invoke_tool("refund", json!({"order": 7, "ms": 50}))
        .deadline(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    assert_eq!(out.value, json!({"refunded": 7}));
    assert_eq!(mock.executions("refund"), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert!(mock.connections() >= 3, "{}", mock.connections());
}

/// A provider that fails: `connect()` ends with the typed error, whose
/// source is the provider's own error.
#[tokio::test]
async fn a_failing_provider_is_a_typed_error_with_its_source() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let err = Client::builder(mock.ws_url())
        .connect_budget(Duration::from_millis(300))
        .token_provider(|| async {
            Err::<String, _>(std::io::Error::other("the token service is down"))
        })
        .connect()
        .await
        .unwrap_err();
    match &err {
        Error::TokenProvider { message, .. } => {
            assert!(message.contains("the token service is down"), "{message}")
        }
        other => panic!("expected a token provider error, got {other:?}"),
    }
    let source = std::error::Error::source(&err).expect("a source");
    assert!(source.to_string().contains("token service"), "{source}");
    assert_eq!(mock.connections(), 0, "nothing was dialed");
}

/// Forwards each connection to `upstream`, recording the head of each
/// request (up to the blank line) as it goes by.
async fn recording_front(upstream: std::net::SocketAddr) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if client.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).to_lowercase());
                let Ok(mut server) = TcpStream::connect(upstream).await else {
                    return;
                };
                if server.write_all(&head).await.is_err() {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    (port, heads)
}

#[tokio::test]
async fn extra_headers_reach_the_runtime_on_the_upgrade() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (port, heads) = recording_front(mock.address()).await;
    let client = Client::builder(format!("ws://127.0.0.1:{port}/arcp"))
        .header("X-Api-Key", "k-123")
        .header("x-tenant", "blue")
        .connect()
        .await
        .unwrap();
    client.invoke_tool("echo", json!({})).await.unwrap();
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(heads[0].starts_with("get /arcp"), "{}", heads[0]);
    assert!(
        heads[0].contains("\r\nx-api-key: k-123\r\n"),
        "{}",
        heads[0]
    );
    assert!(heads[0].contains("\r\nx-tenant: blue\r\n"), "{}", heads[0]);
}

#[tokio::test]
async fn extra_headers_and_the_providers_token_reach_the_http_binding() {
    let mock = mock(Dialect::V1_1)
        .token("h2", "svc")
        .start()
        .await
        .unwrap();
    let (port, heads) = recording_front(mock.http_address()).await;
    let (calls, provide) = provider(&["h1", "h2"]);
    let client = Client::builder(format!("http://127.0.0.1:{port}/arcp"))
        .header("X-Api-Key", "k-456")
        .token_provider(provide)
        .connect()
        .await
        .unwrap();
    // Each request asks the provider: the first token (h1) is refused as
    // unknown, so this call fails; the next request carries h2.
    let refused = client.invoke_tool("echo", json!({"n": 1})).await;
    assert!(refused.is_err(), "{refused:?}");
    let out = client.invoke_tool("echo", json!({"n": 2})).await.unwrap();
    assert_eq!(out.value, json!({"n": 2}));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(mock.executions("echo"), 1);
    let heads = heads.lock().unwrap().clone();
    assert!(
        heads.iter().all(|h| h.contains("\r\nx-api-key: k-456\r\n")),
        "{heads:?}"
    );
    assert!(
        heads
            .iter()
            .any(|h| h.contains("\r\nauthorization: bearer h2\r\n")),
        "{heads:?}"
    );
}

#[tokio::test]
async fn an_invalid_header_fails_connect_with_a_typed_error() {
    let err = Client::builder("ws://127.0.0.1:1/arcp")
        .header("bad header", "v")
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidCall { .. }), "{err:?}");
    assert!(err.to_string().contains("bad header"), "{err}");
}

/// An HTTP server that answers 401 with the request's bearer token echoed
/// in its body (a careless gateway).
async fn echoing_401() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request).to_string();
                let token = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("authorization: bearer ")
                            .map(|_| l[22..].trim().to_owned())
                    })
                    .unwrap_or_default();
                let body = format!("{{\"detail\":\"token {token} has expired\"}}");
                let response = format!(
                    "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    port
}

/// The provider's token, echoed by an HTTP server in a refusal, is not in
/// the error (it is fetched per call, so the backend's redactor lacks it).
#[tokio::test]
async fn the_providers_token_echoed_over_http_is_redacted() {
    let port = echoing_401().await;
    let (_, provide) = provider(&["provided-secret-4711"]);
    let client = Client::builder(format!("http://127.0.0.1:{port}/arcp"))
        .token_provider(provide)
        .connect()
        .await
        .unwrap();
    let e = client
        .invoke_tool("echo", json!({}))
        .await
        .expect_err("refused");
    let shown = format!("{e} {e:?}");
    assert!(shown.contains("has expired"), "the server's words: {shown}");
    assert!(!shown.contains("provided-secret-4711"), "leaked: {shown}");
    client.close().await;
}
