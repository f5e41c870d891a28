//! The mock's HTTP binding endpoint with a raw HTTP/1.1 client: bad input
//! gets a status and never a panic; a submit runs once; a repeat while it
//! runs is 409; after it, the stored terminal is replayed.

use std::time::Duration;

use arcp_mock::MockRuntime;
use arcp_types::{Dialect, Frame, Invoke, Message};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn exchange(mock: &MockRuntime, raw: &[u8]) -> String {
    let mut stream = TcpStream::connect(mock.http_address()).await.unwrap();
    stream.write_all(raw).await.unwrap();
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response)).await;
    String::from_utf8_lossy(&response).into_owned()
}

fn post(body: &str, extra: &str) -> Vec<u8> {
    format!(
        "POST /arcp HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn submit(key: &str, args: serde_json::Value) -> String {
    Dialect::V1_1.encode(&Frame::new(Message::Invoke(
        Invoke::new("slow", args).with_idempotency_key(key),
    )))
}

async fn mock() -> MockRuntime {
    MockRuntime::builder()
        .tool("slow", |args, ctx| async move {
            ctx.sleep(Duration::from_millis(300)).await;
            Ok(args)
        })
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn bad_requests_get_a_status() {
    let mock = mock().await;
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"GET /arcp HTTP/1.1\r\nHost: t\r\n\r\n".to_vec(), "405"),
        (b"\x00\x01 not http\r\n\r\n".to_vec(), "400"),
        (
            b"POST /arcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
            "411",
        ),
        (
            b"POST /arcp HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n".to_vec(),
            "413",
        ),
        (
            b"POST /arcp HTTP/1.1\r\nContent-Length: nope\r\n\r\n".to_vec(),
            "400",
        ),
        (post("{not json", ""), "400"),
        (
            post(r#"{"arcp":"1.1","id":"x","type":"job.submit"}"#, ""),
            "400",
        ),
        (
            post(&submit("k1", json!({})), "Idempotency-Key: \"other\"\r\n"),
            "400",
        ),
        (
            post(
                &submit("k1", json!({})),
                "Idempotency-Key: \"unterminated\r\n",
            ),
            "400",
        ),
        (
            format!(
                "POST /arcp HTTP/1.1\r\nX: {}\r\n\r\n",
                "a".repeat(20 * 1024)
            )
            .into_bytes(),
            "431",
        ),
    ];
    for (raw, status) in cases {
        let response = exchange(&mock, &raw).await;
        assert!(
            response.starts_with(&format!("HTTP/1.1 {status}")),
            "expected {status}, got {response:?}"
        );
    }
    assert_eq!(mock.total_executions(), 0);
}

#[tokio::test]
async fn a_repeat_is_409_while_running_then_the_replayed_terminal() {
    let mock = mock().await;
    let body = submit("k-409", json!({"n": 1}));
    let first = {
        let raw = post(&body, "Idempotency-Key: \"k-409\"\r\n");
        let address = mock.http_address();
        tokio::spawn(async move {
            let mut stream = TcpStream::connect(address).await.unwrap();
            stream.write_all(&raw).await.unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).await.unwrap();
            response
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A fresh envelope id, the same payload: still running.
    let repeat = submit("k-409", json!({"n": 1}));
    let busy = exchange(&mock, &post(&repeat, "")).await;
    assert!(busy.starts_with("HTTP/1.1 409"), "{busy}");
    let other = exchange(&mock, &post(&submit("k-409", json!({"n": 2})), "")).await;
    assert!(other.starts_with("HTTP/1.1 422"), "{other}");
    let first = first.await.unwrap();
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(!first.contains("Arcp-Replayed"), "{first}");
    let replay = exchange(&mock, &post(&repeat, "")).await;
    assert!(replay.starts_with("HTTP/1.1 200"), "{replay}");
    assert!(replay.contains("Arcp-Replayed: true"), "{replay}");
    assert!(replay.contains("\"type\":\"job.result\""), "{replay}");
    assert_eq!(mock.executions("slow"), 1);
    assert_eq!(mock.http_requests(), 4);
}
