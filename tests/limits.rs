//! Every limit has a test that hits it and checks the error: frame size (in
//! and out), events buffered per call, calls in flight, retry budget, and
//! the option names a request cannot carry.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arcp_mock::{Dialect, ErrorCode, Fault, MockRuntime};
use arcp_sdk::Error;
use serde_json::json;
use support::mock::{client, mock, submits};

#[tokio::test]
async fn an_inbound_frame_over_the_limit_is_refused_and_named() {
    let mock = MockRuntime::builder()
        .tool("big", |_, _| async move { Ok(json!("x".repeat(200_000))) })
        .start()
        .await
        .unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .max_frame_size(64 * 1024)
        .retry(
            arcp_sdk::RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(10))
                .max_elapsed(Duration::from_secs(1)),
        )
        .connect()
        .await
        .unwrap();
    let err = client.invoke_tool("big", json!({})).await.unwrap_err();
    match &err {
        Error::OutcomeUnavailable { reason, .. } => {
            assert!(reason.contains("size limit"), "{reason}")
        }
        other => panic!("expected OutcomeUnavailable naming the size limit, got {other:?}"),
    }
    assert_eq!(mock.executions("big"), 1, "never run twice");
}

#[tokio::test]
async fn an_outbound_request_over_the_limit_is_rejected_before_sending() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .max_frame_size(64 * 1024)
        .connect()
        .await
        .unwrap();
    let err = client
        .invoke_tool("echo", json!({"blob": "y".repeat(100_000)}))
        .await
        .unwrap_err();
    match &err {
        Error::InvalidCall { message, .. } => assert!(message.contains("limit"), "{message}"),
        other => panic!("expected InvalidCall, got {other:?}"),
    }
    assert!(submits(&mock).is_empty(), "nothing was sent");
}

/// An option under a name the request already carries (either dialect's)
/// would be dropped from the payload by the modelled field yet still count
/// in the call's intent: it is refused, named, and nothing is sent, over
/// WebSocket in both dialects and over HTTP.
#[tokio::test]
async fn an_option_named_like_a_field_of_the_request_is_refused_before_sending() {
    for (dialect, http) in [
        (Dialect::V1_1, false),
        (Dialect::Legacy, false),
        (Dialect::V1_1, true),
    ] {
        let mock = mock(dialect).start().await.unwrap();
        let url = if http { mock.http_url() } else { mock.ws_url() };
        let client = client(&url, dialect).connect().await.unwrap();
        for name in ["agent", "input", "idempotency_key", "tool", "arguments"] {
            let err = client
                .invoke_tool("echo", json!({"n": 1}))
                .option(name, json!("elsewhere"))
                .send()
                .await
                .unwrap_err();
            match &err {
                Error::InvalidCall { message, .. } => {
                    assert!(message.contains(&format!("{name:?}")), "{message}")
                }
                other => panic!("{url}: {name}: expected InvalidCall, got {other:?}"),
            }
        }
        let out = client
            .invoke_tool("echo", json!({"n": 1}))
            .option("max_runtime_sec", json!(30))
            .send()
            .await
            .unwrap();
        assert_eq!(out.attempts, 1, "{url}: an unmodelled option is sent");
        let sent = submits(&mock);
        assert_eq!(sent.len(), 1, "{url}: only the valid call was sent");
        assert_eq!(sent[0].payload["max_runtime_sec"], json!(30), "{url}");
    }
}

#[tokio::test]
async fn undrained_events_beyond_the_buffer_are_dropped_not_blocking() {
    let mock = MockRuntime::builder()
        .tool("chatty", |_, ctx| async move {
            for i in 1..=50 {
                ctx.progress(i, 50).await;
            }
            Ok(json!("done"))
        })
        .start()
        .await
        .unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .tuning(arcp_sdk::tuning::Tuning::new().event_buffer(4))
        .connect()
        .await
        .unwrap();
    let mut call = client.invoke_tool("chatty", json!({})).send();
    let mut events = call.events(); // taken, never read during the call
    let out = call.await.unwrap();
    assert_eq!(
        out.value,
        json!("done"),
        "the call is not blocked by its events"
    );
    let mut kept = 0;
    while events.next().await.is_some() {
        kept += 1;
    }
    assert_eq!(
        kept, 4,
        "the buffer keeps the first events; later ones are dropped"
    );
}

#[tokio::test]
async fn calls_beyond_max_in_flight_wait_for_a_slot() {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (r, p) = (running.clone(), peak.clone());
    let mock = MockRuntime::builder()
        .tool("slow", move |_, ctx| {
            let (running, peak) = (r.clone(), p.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                ctx.sleep(Duration::from_millis(80)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok(json!(null))
            }
        })
        .start()
        .await
        .unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .max_in_flight(2)
        .connect()
        .await
        .unwrap();
    let calls: Vec<_> = (0..6)
        .map(|_| tokio::spawn(client.invoke_tool("slow", json!({})).send()))
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert_eq!(
        peak.load(Ordering::SeqCst),
        2,
        "never more than two at once"
    );
    assert_eq!(mock.executions("slow"), 6);
}

#[tokio::test]
async fn the_retry_budget_bounds_a_call_refused_every_time() {
    let mock = mock(Dialect::Legacy).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::Legacy)
        .connect()
        .await
        .unwrap();
    mock.inject_always(Fault::RejectNextSubmit {
        code: ErrorCode::Unavailable,
        retry_after: None,
    });
    let err = client.invoke_tool("echo", json!({})).await.unwrap_err();
    match &err {
        Error::RetriesExhausted {
            attempts,
            last_error,
            ..
        } => {
            assert_eq!(*attempts, 6, "max_attempts of the test client");
            assert!(last_error.contains("UNAVAILABLE"), "{last_error}");
        }
        other => panic!("expected RetriesExhausted, got {other:?}"),
    }
    assert_eq!(submits(&mock).len(), 6);
    assert_eq!(mock.executions("echo"), 0, "nothing ran");
}

fn streaming_mock() -> arcp_mock::MockRuntimeBuilder {
    MockRuntime::builder().tool("stream", |_, ctx| async move {
        for part in ["alpha ", "beta ", "gamma"] {
            ctx.result_chunk(part, part != "gamma").await;
        }
        Ok(serde_json::Value::Null)
    })
}

#[tokio::test]
async fn a_result_streamed_in_chunks_is_reassembled() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = streaming_mock().dialect(dialect).start().await.unwrap();
        let client = client(&mock.ws_url(), dialect).connect().await.unwrap();
        let out = client.invoke_tool("stream", json!({})).await.unwrap();
        assert_eq!(out.value, json!("alpha beta gamma"), "{dialect}");
    }
}

#[tokio::test]
async fn a_streamed_result_over_the_limit_is_returned_as_its_reference() {
    let mock = streaming_mock().start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .max_result_size(8)
        .connect()
        .await
        .unwrap();
    let out = client.invoke_tool("stream", json!({})).await.unwrap();
    assert!(out.value["result_id"].is_string(), "{}", out.value);
    // The reference comes with every field the runtime gave beside it
    // (here the completion time), whether or not the call was watched.
    assert!(out.value["completed_at"].is_string(), "{}", out.value);
    let mut watched = client
        .invoke_tool("stream", json!({"watched": true}))
        .send();
    let _events = watched.events();
    let watched = watched.await.unwrap();
    let fields = |v: &serde_json::Value| {
        let mut names: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        names.sort();
        names
    };
    assert_eq!(fields(&out.value), fields(&watched.value));
}

#[tokio::test]
async fn huge_durations_do_not_overflow() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .default_deadline(Duration::MAX)
        .retry(
            arcp_sdk::RetryPolicy::exponential()
                .max_delay(Duration::MAX)
                .max_elapsed(Duration::MAX)
                .outcome_poll(Duration::MAX),
        )
        .connect()
        .await
        .unwrap();
    let out = client
        .invoke_tool("echo", json!({"n": 1}))
        .deadline(Duration::MAX)
        .send()
        .await
        .unwrap();
    assert_eq!(out.value, json!({"n": 1}));
}

/// The largest outcome cache capacity a caller can ask for is a bound like
/// any other: calls over both transports work under it, and a repeat under
/// a generated key still reads as the replay it is.
#[tokio::test]
async fn the_largest_outcome_cache_capacity_is_a_bound_like_any_other() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    for url in [mock.ws_url(), mock.http_url()] {
        let client = client(&url, Dialect::V1_1)
            .tuning(
                arcp_sdk::tuning::Tuning::new().outcome_cache(usize::MAX, Duration::from_secs(600)),
            )
            .connect()
            .await
            .unwrap();
        let before = mock.executions("refund");
        for order in 0..3 {
            let out = tokio::time::timeout(
                Duration::from_secs(10),
                client.invoke_tool("refund", json!({"order": order})).send(),
            )
            .await
            .expect("the call ended")
            .unwrap_or_else(|e| panic!("{url}: {e:?}"));
            let again = client
                .invoke_tool("refund", json!({"order": order}))
                .idempotency_key(out.key)
                .send()
                .await
                .unwrap();
            assert!(again.replayed, "{url}: {again:?}");
        }
        assert_eq!(mock.executions("refund") - before, 3, "{url}");
    }
}
