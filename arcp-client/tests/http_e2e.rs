//! The HTTP binding end to end: the client against `arcp-mock`'s HTTP
//! endpoint, counting how many times each tool really ran.

mod http_support;

use std::time::Duration;

use arcp_mock::{ErrorCode, Fault, MockRuntime, MockRuntimeBuilder, ToolFailure};
use arcp_sdk::{Error, IdempotencyKey};
use http_support::*;
use serde_json::{json, Value};

fn mock() -> MockRuntimeBuilder {
    MockRuntime::builder()
        .tool("refund", |args: Value, ctx| async move {
            let steps = args["steps"].as_u64().unwrap_or(0);
            let ms = args["ms"].as_u64().unwrap_or(0);
            ctx.sleep(Duration::from_millis(ms)).await;
            for i in 1..=steps {
                ctx.progress(i, steps).await;
            }
            Ok(json!({"refunded": args["order"]}))
        })
        .tool("fail", |_args: Value, _ctx| async move {
            Err(ToolFailure::new("PERMISSION_DENIED", "not yours"))
        })
}

#[tokio::test]
async fn a_call_over_http_runs_once() {
    let mock = mock().start().await.unwrap();
    mock.expect_executions("refund", 1);
    let client = client(&mock.http_url()).connect().await.unwrap();
    let out = client
        .invoke_tool("refund", json!({"order": 4812}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"refunded": 4812}));
    assert!(out.job_id.is_some());
    assert_eq!((out.attempts, out.replayed), (1, false));
    assert_eq!(mock.http_requests(), 1);
    assert_eq!(mock.connections(), 0, "no WebSocket was used");
}

#[tokio::test]
async fn a_response_cut_after_acceptance_is_recovered_without_a_second_run() {
    let mock = mock().start().await.unwrap();
    mock.expect_executions("refund", 1);
    // The first response is cut right after `job.accepted`; the job runs on
    // for 300 ms, so the retries first meet 409 (still running), then the
    // stored terminal.
    mock.inject(Fault::DropAfterAccepted);
    let client = client(&mock.http_url())
        .retry(
            fast_retry()
                .outcome_poll(Duration::from_millis(50))
                .max_delay(Duration::from_millis(200)),
        )
        .connect()
        .await
        .unwrap();
    let key = IdempotencyKey::try_from("refund-4812").unwrap();
    let out = client
        .invoke_tool("refund", json!({"order": 4812, "ms": 300}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(out.value, json!({"refunded": 4812}));
    // The job is the call's own (accepted fresh on its first attempt): its
    // stored terminal answering a re-sent POST is no replay.
    assert!(!out.replayed, "{out:?}");
    assert!(out.attempts >= 2, "{}", out.attempts);
    assert_eq!(mock.executions_for_key(key.as_str()), 1);
    // Every attempt: the same key and payload, a fresh envelope id.
    let sent = mock.received();
    assert_eq!(sent.len() as u32, out.attempts);
    let mut ids = std::collections::HashSet::new();
    for e in &sent {
        assert_eq!(e.payload["idempotency_key"], "refund-4812");
        assert_eq!(e.payload, sent[0].payload);
        assert!(ids.insert(e.id.clone()));
    }
}

#[tokio::test]
async fn a_dropped_request_is_sent_again_and_runs_once() {
    let mock = mock().start().await.unwrap();
    mock.expect_executions("refund", 1);
    mock.inject(Fault::DropOnSubmit);
    let client = client(&mock.http_url()).connect().await.unwrap();
    let out = client
        .invoke_tool("refund", json!({"order": 1}))
        .await
        .unwrap();
    assert_eq!(out.attempts, 2);
}

#[tokio::test]
async fn progress_events_stream_over_ndjson() {
    let mock = mock().start().await.unwrap();
    let client = client(&mock.http_url()).connect().await.unwrap();
    let mut call = client
        .invoke_tool("refund", json!({"order": 2, "steps": 3}))
        .send();
    let mut events = call.events();
    let out = call.await.unwrap();
    assert_eq!(out.value, json!({"refunded": 2}));
    let mut n = 0;
    while let Some(event) = events.next().await {
        assert!(is_progress(&event.typed()));
        n += 1;
    }
    assert_eq!(n, 3);
}

#[tokio::test]
async fn the_same_key_with_other_arguments_is_refused_with_422() {
    let mock = mock().start().await.unwrap();
    let key = IdempotencyKey::try_from("order-7").unwrap();
    let first = client(&mock.http_url()).connect().await.unwrap();
    first
        .invoke_tool("refund", json!({"order": 7}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    // Another client (no local cache of the key): the runtime refuses.
    let other = client(&mock.http_url()).connect().await.unwrap();
    let err = other
        .invoke_tool("refund", json!({"order": 8}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::DuplicateKey { attempts: 1, .. }),
        "{err:?}"
    );
    // The same arguments get the stored outcome, flagged as a replay.
    let again = other
        .invoke_tool("refund", json!({"order": 7}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(mock.executions("refund"), 1);
}

#[tokio::test]
async fn a_transient_refusal_is_retried_after_its_retry_after() {
    let mock = mock().start().await.unwrap();
    mock.inject(Fault::RejectNextSubmit {
        code: ErrorCode::Unavailable,
        retry_after: Some(Duration::from_millis(200)),
    });
    let client = client(&mock.http_url()).connect().await.unwrap();
    let started = std::time::Instant::now();
    let out = client
        .invoke_tool("refund", json!({"order": 3}))
        .await
        .unwrap();
    assert_eq!((out.attempts, out.replayed), (2, false));
    // 503 with `Retry-After: 1` (whole seconds, rounded up).
    assert!(started.elapsed() >= Duration::from_millis(950));
    assert_eq!(mock.executions("refund"), 1);
}

#[tokio::test]
async fn a_tool_error_is_returned_once() {
    let mock = mock().start().await.unwrap();
    let client = client(&mock.http_url()).connect().await.unwrap();
    let err = client.invoke_tool("fail", json!({})).await.unwrap_err();
    let Error::Tool(tool) = &err else {
        panic!("expected a tool error, got {err:?}");
    };
    assert_eq!(tool.code, ErrorCode::PermissionDenied);
    assert!(tool.job_id.is_some());
    assert_eq!(mock.http_requests(), 1);
    assert_eq!(mock.executions("fail"), 1);
}

#[tokio::test]
async fn an_unknown_tool_is_refused_not_retried() {
    let mock = mock().start().await.unwrap();
    let client = client(&mock.http_url()).connect().await.unwrap();
    let err = client.invoke_tool("nope", json!({})).await.unwrap_err();
    assert!(
        matches!(&err, Error::Tool(t) if t.code == ErrorCode::AgentNotAvailable),
        "{err:?}"
    );
    assert_eq!(mock.http_requests(), 1);
}

#[tokio::test]
async fn credentials_are_checked() {
    let mock = mock().token(TOKEN, "alice").start().await.unwrap();
    let wrong = arcp_sdk::Client::builder(mock.http_url())
        .bearer_token("wrong")
        .connect()
        .await
        .unwrap();
    let err = wrong.invoke_tool("refund", json!({})).await.unwrap_err();
    assert!(matches!(err, Error::Unauthenticated { .. }), "{err:?}");
    let right = client(&mock.http_url()).connect().await.unwrap();
    right
        .invoke_tool("refund", json!({"order": 1}))
        .await
        .unwrap();
    assert_eq!(mock.executions("refund"), 1);
}

#[tokio::test]
async fn the_json_form_works_for_clients_that_do_not_stream() {
    // A plain HTTP client asking for application/json gets the terminal only.
    let mock = mock().start().await.unwrap();
    let frame = arcp_types::Frame::new(arcp_types::Message::Invoke(
        arcp_types::Invoke::new("refund", json!({"order": 9, "steps": 2}))
            .with_idempotency_key("plain-1"),
    ));
    let body = arcp_types::Dialect::V1_1.encode(&frame);
    let http = reqwest_like_post(&mock.http_url(), &body).await;
    assert!(http.starts_with("HTTP/1.1 200"), "{http}");
    assert!(http.contains("Content-Type: application/json"), "{http}");
    assert!(http.contains("\"type\":\"job.result\""), "{http}");
    assert!(!http.contains("job.event"), "{http}");
}

/// A bare HTTP/1.1 POST over TCP (no NDJSON in `Accept`); the whole response.
async fn reqwest_like_post(url: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/arcp")
        .to_owned();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /arcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json\r\nIdempotency-Key: \"plain-1\"\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[tokio::test]
async fn a_legacy_mock_serves_the_binding_with_its_own_fingerprint_rules() {
    let mock = mock()
        .dialect(arcp_mock::Dialect::Legacy)
        .start()
        .await
        .unwrap();
    let key = IdempotencyKey::try_from("legacy-1").unwrap();
    let call = |client: arcp_sdk::Client, args: Value| {
        let key = key.clone();
        async move {
            client
                .invoke_tool("refund", args)
                .idempotency_key(key)
                .send()
                .await
        }
    };
    let first = call(
        client(&mock.http_url()).connect().await.unwrap(),
        json!({"order": 1}),
    )
    .await
    .unwrap();
    assert!(!first.replayed);
    // Legacy runtimes compare the arguments' text: `1.0` is not `1`.
    let err = call(
        client(&mock.http_url()).connect().await.unwrap(),
        json!({"order": 1.0}),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::DuplicateKey { .. }), "{err:?}");
    let again = call(
        client(&mock.http_url()).connect().await.unwrap(),
        json!({"order": 1}),
    )
    .await
    .unwrap();
    assert!(again.replayed);
    assert_eq!(again.job_id, first.job_id);
    assert_eq!(mock.executions("refund"), 1);
}

#[tokio::test]
async fn huge_deadlines_and_budgets_are_not_a_panic() {
    let mock = mock().start().await.unwrap();
    let client = client(&mock.http_url())
        .retry(
            fast_retry()
                .max_elapsed(Duration::MAX)
                .max_delay(Duration::MAX),
        )
        .connect()
        .await
        .unwrap();
    let out = client
        .invoke_tool("refund", json!({"order": 5}))
        .deadline(Duration::MAX)
        .send()
        .await
        .unwrap();
    assert_eq!(out.value, json!({"refunded": 5}));
}
