//! The HTTP binding through the proxy the environment names, as reqwest
//! and curl read it: a client built as the README shows sends its calls to
//! the proxy in `HTTP_PROXY`, the target in absolute form, the proxy's
//! credentials beside the runtime's. (One test in its own binary: it sets
//! the process's environment.)

mod http_support;

use http_support::*;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

#[tokio::test]
async fn calls_go_through_the_proxy_the_environment_names() {
    let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = proxy.local_addr().unwrap();
    std::env::set_var("HTTP_PROXY", format!("http://user:pw@{address}"));
    std::env::set_var("NO_PROXY", "");
    let answer = result("job_1", json!({"refunded": 40}));
    let seen = tokio::spawn(async move {
        let (mut stream, _) = proxy.accept().await.unwrap();
        let request = read_request(&mut stream).await.unwrap();
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        stream.write_all(reply.as_bytes()).await.unwrap();
        request
    });
    // The runtime's host does not resolve: only the proxy can answer.
    let client = client("http://runtime.invalid:8080/v1/arcp")
        .allow_insecure_token(true)
        .connect()
        .await
        .unwrap();
    let out = client
        .invoke_tool("refund", json!({"order": 4812}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"refunded": 40}));
    let request = seen.await.unwrap();
    assert!(
        request
            .head
            .starts_with("POST http://runtime.invalid:8080/v1/arcp HTTP/1.1\r\n"),
        "{}",
        request.head
    );
    assert_eq!(
        request.header("proxy-authorization").as_deref(),
        Some("Basic dXNlcjpwdw==")
    );
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {TOKEN}"))
    );
    assert!(request.header("idempotency-key").is_some());
}
