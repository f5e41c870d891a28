//! A connection reset mid-body: a raw TCP server sends the response head and
//! half a body, then closes. The client cannot know whether the job ran, so
//! it retries with the same key (the runtime deduplicates) and takes the
//! answer to the retry, flagged as a possible replay.

mod http_support;

use std::sync::{Arc, Mutex};

use http_support::*;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// Serves `responses` in order, one per connection; each is written as given
/// (so it can be cut short), then the connection is closed.
async fn serve(responses: Vec<Vec<u8>>) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/arcp", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        for response in responses {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            if let Some(request) = read_request(&mut stream).await {
                log.lock().unwrap().push(request);
            }
            let _ = stream.write_all(&response).await;
            let _ = stream.flush().await;
            // Dropping the stream closes the connection, mid-body or not.
        }
    });
    (url, seen)
}

fn whole(content_type: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn check_attempts(seen: &[Seen], n: usize) {
    assert_eq!(seen.len(), n);
    let key = seen[0].header("idempotency-key").expect("a key header");
    let payload = raw_payload(&seen[0].body);
    let mut ids = std::collections::HashSet::new();
    for s in seen {
        assert_eq!(s.header("idempotency-key").as_deref(), Some(key.as_str()));
        assert_eq!(raw_payload(&s.body), payload);
        assert!(ids.insert(envelope(&s.body).id));
    }
}

#[tokio::test]
async fn a_json_body_cut_in_half_is_retried_with_the_same_key() {
    let full = result("job_1", json!({"refunded": 4812}));
    let half = &full[..full.len() / 2];
    // Content-Length promises the whole body; half of it arrives.
    let cut = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{half}",
        full.len()
    )
    .into_bytes();
    let (url, seen) = serve(vec![cut, whole("application/json", &full)]).await;
    let client = client(&url).connect().await.unwrap();
    let out = client
        .invoke_tool("refund", json!({"order": 4812}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"refunded": 4812}));
    assert_eq!(out.attempts, 2);
    // The first attempt may have run the job, or not: without the
    // runtime's replay mark the answer is not claimed to be a stored one.
    assert!(!out.replayed);
    check_attempts(&seen.lock().unwrap(), 2);
}

#[tokio::test]
async fn an_ndjson_stream_cut_after_acceptance_is_retried_with_the_same_key() {
    // Chunked, the accept line delivered, then the connection drops without
    // the terminating chunk.
    let line = format!("{}\n", accepted("job_5"));
    let cut = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{line}\r\n",
        line.len()
    )
    .into_bytes();
    let replay = ndjson(&[result("job_5", json!("done"))]);
    let (url, seen) = serve(vec![cut, whole("application/x-ndjson", &replay)]).await;
    let client = client(&url).connect().await.unwrap();
    let call = client.invoke_tool("refund", json!({"order": 1})).send();
    let handle = call.handle();
    let out = call.await.unwrap();
    assert_eq!(out.value, json!("done"));
    assert_eq!(out.job_id.as_deref(), Some("job_5"));
    assert_eq!(handle.job_id().as_deref(), Some("job_5"));
    // The job the first attempt's (unmarked) acceptance started is this
    // call's own: its stored result is no replay.
    assert_eq!((out.attempts, out.replayed), (2, false));
    check_attempts(&seen.lock().unwrap(), 2);
}

#[tokio::test]
async fn a_connection_closed_before_any_response_is_retried() {
    let (url, seen) = serve(vec![
        Vec::new(),
        whole("application/json", &result("job_1", json!(1))),
    ])
    .await;
    let client = client(&url).connect().await.unwrap();
    let out = client.invoke_tool("refund", json!({})).await.unwrap();
    assert_eq!((out.attempts, out.replayed), (2, false));
    check_attempts(&seen.lock().unwrap(), 2);
}

#[tokio::test]
async fn cut_every_time_is_outcome_unavailable() {
    let full = result("job_1", json!(1));
    let cut = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{{",
        full.len()
    )
    .into_bytes();
    let (url, _seen) = serve(vec![cut; 3]).await;
    let client = client(&url)
        .retry(fast_retry().max_attempts(3))
        .connect()
        .await
        .unwrap();
    let err = client.invoke_tool("refund", json!({})).await.unwrap_err();
    assert!(
        matches!(
            &err,
            arcp_sdk::Error::OutcomeUnavailable { attempts: 3, reason, .. } if reason.contains("cut off")
        ),
        "{err:?}"
    );
}

/// A stream sent in chunks of `size` bytes, cut anywhere: inside a line,
/// between a line and its newline, between lines.
fn chunked(content: &str, size: usize) -> Vec<u8> {
    let mut out =
        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    for piece in content.as_bytes().chunks(size) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

#[tokio::test]
async fn ndjson_lines_cut_between_chunks_are_read_whole() {
    let content = ndjson(&[
        accepted("job_9"),
        progress("job_9", 1, 1, 2),
        progress("job_9", 2, 2, 2),
        result("job_9", json!({"refunded": 4812})),
    ]);
    for size in [1, 7, 64, content.find('\n').unwrap(), content.len()] {
        for watched in [false, true] {
            let (url, seen) = serve(vec![chunked(&content, size)]).await;
            let client = client(&url).connect().await.unwrap();
            let mut call = client.invoke_tool("refund", json!({"order": 4812})).send();
            let events = watched.then(|| call.events());
            let handle = call.handle();
            let out = call.await.unwrap();
            assert_eq!(out.value, json!({"refunded": 4812}), "chunks of {size}");
            assert_eq!((out.attempts, out.replayed), (1, false));
            assert_eq!(handle.job_id().as_deref(), Some("job_9"));
            if let Some(mut events) = events {
                let mut seqs = Vec::new();
                while let Some(e) = events.next().await {
                    seqs.push(e.event_seq);
                }
                assert_eq!(seqs, [Some(1), Some(2)], "chunks of {size}");
            }
            check_attempts(&seen.lock().unwrap(), 1);
        }
    }
}
