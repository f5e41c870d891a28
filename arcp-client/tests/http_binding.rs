//! The HTTP binding against wiremock: every status code the binding
//! defines, `Retry-After` in both forms, and the header contract (one key on
//! every attempt, a fresh envelope id per attempt, a byte-identical intent).

mod http_support;

use std::time::{Duration, Instant, SystemTime};

use arcp_sdk::{CancelOutcome, Error, Execution, IdempotencyKey};
use arcp_types::ErrorCode;
use http_support::*;
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn json_body(body: String) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body, "application/json")
}

fn status(code: u16) -> ResponseTemplate {
    ResponseTemplate::new(code).set_body_raw(
        r#"{"type":"about:blank","detail":"from the test server"}"#,
        "application/problem+json",
    )
}

/// Mounts `response` for the next `times` POSTs to /arcp.
async fn answer(server: &MockServer, response: ResponseTemplate, times: u64) {
    Mock::given(method("POST"))
        .and(path("/arcp"))
        .respond_with(response)
        .up_to_n_times(times)
        .expect(times)
        .mount(server)
        .await;
}

async fn posts(server: &MockServer) -> Vec<wiremock::Request> {
    server.received_requests().await.unwrap_or_default()
}

#[tokio::test]
async fn a_terminal_envelope_is_the_outcome() {
    let server = MockServer::start().await;
    answer(&server, json_body(result("job_1", json!({"ok": 1}))), 1).await;
    let client = client(&server.uri()).connect().await.unwrap();
    assert!(client.runtime().unwrap().replays_terminal());
    let out = client.invoke_tool("echo", json!({"a": 1})).await.unwrap();
    assert_eq!(out.value, json!({"ok": 1}));
    assert_eq!(out.job_id.as_deref(), Some("job_1"));
    assert_eq!((out.attempts, out.replayed), (1, false));
    let requests = posts(&server).await;
    let h = &requests[0].headers;
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["authorization"], format!("Bearer {TOKEN}").as_str());
    assert!(h["accept"]
        .to_str()
        .unwrap()
        .contains("application/x-ndjson"));
    let sent = envelope(&requests[0].body);
    assert_eq!(sent.kind, "job.submit");
    assert_eq!(sent.payload["agent"], "echo");
    assert_eq!(
        h["idempotency-key"],
        format!("\"{}\"", sent.payload["idempotency_key"].as_str().unwrap()).as_str()
    );
}

#[tokio::test]
async fn an_ndjson_stream_delivers_events_then_the_terminal() {
    let server = MockServer::start().await;
    let body = ndjson(&[
        accepted("job_7"),
        progress("job_7", 1, 1, 2),
        progress("job_7", 2, 2, 2),
        progress("job_7", 2, 2, 2), // a repeat: deduplicated by event_seq
        result("job_7", json!("done")),
    ]);
    answer(
        &server,
        ResponseTemplate::new(200).set_body_raw(body, "application/x-ndjson"),
        1,
    )
    .await;
    let client = client(&server.uri()).connect().await.unwrap();
    let mut call = client.invoke_tool("work", json!({})).send();
    let mut events = call.events();
    let handle = call.handle();
    let out = call.await.unwrap();
    assert_eq!(out.value, json!("done"));
    assert_eq!(handle.job_id().as_deref(), Some("job_7"));
    let mut seen = Vec::new();
    while let Some(e) = events.next().await {
        assert!(is_progress(&e.typed()));
        seen.push(e.event_seq);
    }
    assert_eq!(seen, [Some(1), Some(2)]);
}

#[tokio::test]
async fn the_same_key_on_every_attempt_a_fresh_envelope_id_and_the_same_bytes() {
    let server = MockServer::start().await;
    answer(&server, status(503), 2).await;
    answer(&server, status(409), 1).await;
    answer(&server, json_body(result("job_1", json!(1))), 1).await;
    let client = client(&server.uri()).connect().await.unwrap();
    let key = IdempotencyKey::try_from("order-4812").unwrap();
    let out = client
        .invoke_tool("refund", json!({"order": 4812, "cents": 1.5}))
        .idempotency_key(key.clone())
        .option("max_runtime_sec", json!(30))
        .send()
        .await
        .unwrap();
    assert_eq!(out.attempts, 4);
    let requests = posts(&server).await;
    assert_eq!(requests.len(), 4);
    let payload = raw_payload(&requests[0].body);
    let mut ids = std::collections::HashSet::new();
    for r in &requests {
        assert_eq!(r.headers["idempotency-key"], "\"order-4812\"");
        assert_eq!(
            raw_payload(&r.body),
            payload,
            "the intent is byte-identical"
        );
        let sent = envelope(&r.body);
        assert_eq!(sent.payload["idempotency_key"], "order-4812");
        assert!(ids.insert(sent.id), "every attempt has a fresh envelope id");
    }
}

#[tokio::test]
async fn conflict_409_is_retried_with_backoff_until_the_replay() {
    let server = MockServer::start().await;
    answer(&server, status(409), 2).await;
    answer(
        &server,
        json_body(result("job_1", json!("stored"))).insert_header("Arcp-Replayed", "true"),
        1,
    )
    .await;
    let client = client(&server.uri()).connect().await.unwrap();
    let out = client.invoke_tool("refund", json!({})).await.unwrap();
    assert_eq!(out.value, json!("stored"));
    assert!(out.replayed);
    assert_eq!(out.attempts, 3);
}

#[tokio::test]
async fn conflict_409_until_the_budget_is_spent_is_outcome_unavailable() {
    let server = MockServer::start().await;
    answer(&server, status(409), 3).await;
    let client = client(&server.uri())
        .retry(fast_retry().max_attempts(3))
        .connect()
        .await
        .unwrap();
    let err = client.invoke_tool("refund", json!({})).await.unwrap_err();
    assert!(
        matches!(err, Error::OutcomeUnavailable { attempts: 3, .. }),
        "{err:?}"
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn unprocessable_422_is_duplicate_key_and_never_retried() {
    let server = MockServer::start().await;
    answer(&server, status(422), 1).await;
    let client = client(&server.uri()).connect().await.unwrap();
    let key = IdempotencyKey::try_from("k-422").unwrap();
    let err = client
        .invoke_tool("refund", json!({}))
        .idempotency_key(key.clone())
        .send()
        .await
        .unwrap_err();
    let Error::DuplicateKey {
        key: refused,
        attempts,
        message,
        execution,
    } = &err
    else {
        panic!("expected DuplicateKey, got {err:?}");
    };
    assert_eq!((refused, *attempts), (&key, 1));
    assert!(message.contains("from the test server"), "{message}");
    assert_eq!(err.code_name(), "DUPLICATE_KEY");
    // A 422 may come from a whole-body fingerprint, which another caller of
    // a supplied key draws with the same intent: not proof for such a key.
    assert_eq!(*execution, arcp_sdk::Execution::NotSent);
}

#[tokio::test]
async fn unauthorized_401_and_forbidden_403_are_typed_and_never_retried() {
    for code in [401, 403] {
        let server = MockServer::start().await;
        // A careless server echoes the token: it must not reach the error.
        let body = format!(r#"{{"detail":"bad token {TOKEN}"}}"#);
        answer(
            &server,
            ResponseTemplate::new(code).set_body_raw(body, "application/json"),
            1,
        )
        .await;
        let client = client(&server.uri()).connect().await.unwrap();
        let err = client.invoke_tool("refund", json!({})).await.unwrap_err();
        let Error::Unauthenticated { message } = &err else {
            panic!("expected Unauthenticated for {code}, got {err:?}");
        };
        assert!(message.contains(&code.to_string()));
        assert!(!message.contains(TOKEN) && !format!("{err:?}").contains(TOKEN));
        assert!(!err.is_retryable());
    }
}

#[tokio::test]
async fn too_many_requests_429_honours_retry_after_seconds_as_a_floor() {
    let server = MockServer::start().await;
    answer(&server, status(429).insert_header("Retry-After", "1"), 1).await;
    answer(&server, json_body(result("job_1", json!(1))), 1).await;
    let client = client(&server.uri()).connect().await.unwrap();
    let started = Instant::now();
    let out = client.invoke_tool("refund", json!({})).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "{:?}",
        started.elapsed()
    );
    assert_eq!((out.attempts, out.replayed), (2, false));
}

#[tokio::test]
async fn unavailable_503_honours_retry_after_as_an_http_date() {
    let server = MockServer::start().await;
    let when = httpdate_in(Duration::from_secs(2));
    answer(
        &server,
        status(503).insert_header("Retry-After", when.as_str()),
        1,
    )
    .await;
    answer(&server, json_body(result("job_1", json!(1))), 1).await;
    let client = client(&server.uri()).connect().await.unwrap();
    let started = Instant::now();
    client.invoke_tool("refund", json!({})).await.unwrap();
    // The date has one-second resolution: at least one second is left of two.
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
}

fn httpdate_in(d: Duration) -> String {
    httpdate::fmt_http_date(SystemTime::now() + d)
}

#[tokio::test]
async fn unavailable_503_with_retry_after_every_time_is_retries_exhausted() {
    let server = MockServer::start().await;
    answer(&server, status(503).insert_header("Retry-After", "0"), 3).await;
    let client = client(&server.uri())
        .retry(fast_retry().max_attempts(3))
        .connect()
        .await
        .unwrap();
    let err = client.invoke_tool("refund", json!({})).await.unwrap_err();
    let Error::RetriesExhausted {
        attempts,
        last_error,
        ..
    } = &err
    else {
        panic!("expected RetriesExhausted, got {err:?}");
    };
    assert_eq!(*attempts, 3);
    assert!(last_error.contains("503"), "{last_error}");
}

#[tokio::test]
async fn a_retry_after_beyond_the_budget_gives_up_at_once() {
    let server = MockServer::start().await;
    answer(&server, status(503).insert_header("Retry-After", "3600"), 1).await;
    let client = client(&server.uri()).connect().await.unwrap();
    let started = Instant::now();
    let err = client.invoke_tool("refund", json!({})).await.unwrap_err();
    assert!(
        matches!(err, Error::RetriesExhausted { attempts: 1, .. }),
        "{err:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn server_errors_are_retried_and_only_a_marked_answer_counts_as_a_replay() {
    let server = MockServer::start().await;
    answer(&server, status(502), 1).await;
    answer(&server, json_body(result("job_1", json!(1))), 1).await;
    let client = client(&server.uri()).connect().await.unwrap();
    let out = client.invoke_tool("refund", json!({})).await.unwrap();
    // The first request may or may not have reached the runtime: without
    // the runtime's replay mark the answer may be a first execution.
    assert_eq!((out.attempts, out.replayed), (2, false));
}

#[tokio::test]
async fn a_terminal_tool_error_is_returned_not_retried() {
    let server = MockServer::start().await;
    let body = error(Some("job_9"), ErrorCode::Unavailable, true);
    answer(&server, json_body(body), 1).await;
    let client = client(&server.uri()).connect().await.unwrap();
    let err = client.invoke_tool("refund", json!({})).await.unwrap_err();
    let Error::Tool(tool) = &err else {
        panic!("expected a tool error, got {err:?}");
    };
    assert_eq!(tool.code, ErrorCode::Unavailable);
    assert_eq!(tool.job_id.as_deref(), Some("job_9"));
    assert_eq!(tool.attempts, 1);
}

#[tokio::test]
async fn a_retryable_refusal_before_acceptance_is_retried() {
    let server = MockServer::start().await;
    answer(
        &server,
        json_body(error(None, ErrorCode::ResourceExhausted, true)),
        1,
    )
    .await;
    answer(&server, json_body(result("job_1", json!(1))), 1).await;
    let client = client(&server.uri()).connect().await.unwrap();
    let out = client.invoke_tool("refund", json!({})).await.unwrap();
    assert_eq!(out.attempts, 2);
}

#[tokio::test]
async fn an_accepted_only_answer_is_asked_again_with_the_same_key() {
    let server = MockServer::start().await;
    answer(&server, json_body(accepted("job_3")), 1).await;
    answer(
        &server,
        json_body(result("job_3", json!("late"))).insert_header("Arcp-Replayed", "true"),
        1,
    )
    .await;
    let client = client(&server.uri()).connect().await.unwrap();
    let out = client.invoke_tool("refund", json!({})).await.unwrap();
    assert_eq!(out.value, json!("late"));
    // The first attempt's unmarked acceptance started the job: its stored
    // result is this call's own execution, whatever the mark says.
    assert_eq!((out.attempts, out.replayed), (2, false));
}

/// The first acceptance of `job_3`, marked a replay or not.
fn accepted_job_3(marked: bool) -> ResponseTemplate {
    let body = json_body(accepted("job_3"));
    if marked {
        body.insert_header("Arcp-Replayed", "true")
    } else {
        body
    }
}

/// The key was bound to `job_3`; the retry's answer is the result of
/// another job, `job_4`, with no replay mark: the runtime ran the call
/// again (it lost its record of the key), so the result is a first
/// execution of `job_4`, not a stored outcome, as over WebSocket. The
/// result of `job_3` is its stored outcome when `job_3` was a replay
/// (its acceptance marked so), and this call's own execution when its
/// first attempt started it (unmarked).
#[tokio::test]
async fn a_retry_answered_by_another_job_is_not_a_replay() {
    for (marked, job, replayed) in [
        (false, "job_4", false),
        (false, "job_3", false),
        (true, "job_4", false),
        (true, "job_3", true),
    ] {
        let server = MockServer::start().await;
        answer(&server, accepted_job_3(marked), 1).await;
        answer(&server, json_body(result(job, json!("again"))), 1).await;
        let client = client(&server.uri()).connect().await.unwrap();
        let out = client.invoke_tool("refund", json!({})).await.unwrap();
        assert_eq!(out.value, json!("again"));
        assert_eq!(out.job_id.as_deref(), Some(job));
        assert_eq!(
            (out.attempts, out.replayed),
            (2, replayed),
            "{marked} {job}"
        );
    }
}

/// A job's error in a single JSON body: the body carries the terminal
/// alone, so no acceptance before it says nothing of a stored outcome. On
/// a first attempt it is not a replay; after the key was bound to `job_3`,
/// an error of `job_4` is a new execution, and one of `job_3` a replay
/// only when `job_3`'s acceptance was (not this call's own job).
#[tokio::test]
async fn a_jobs_error_in_a_json_body_is_a_replay_only_of_the_bound_job() {
    let server = MockServer::start().await;
    answer(
        &server,
        json_body(error(Some("job_1"), ErrorCode::Internal, false)),
        1,
    )
    .await;
    let once = client(&server.uri()).connect().await.unwrap();
    let tool_error = |err: Error| match err {
        Error::Tool(tool) => tool,
        other => panic!("expected a tool error, got {other:?}"),
    };
    let first = tool_error(once.invoke_tool("refund", json!({})).await.unwrap_err());
    assert_eq!((first.attempts, first.replayed), (1, false));
    for (marked, job, replayed) in [
        (false, "job_4", false),
        (false, "job_3", false),
        (true, "job_3", true),
    ] {
        let server = MockServer::start().await;
        answer(&server, accepted_job_3(marked), 1).await;
        answer(
            &server,
            json_body(error(Some(job), ErrorCode::Internal, false)),
            1,
        )
        .await;
        let client = client(&server.uri()).connect().await.unwrap();
        let e = tool_error(client.invoke_tool("refund", json!({})).await.unwrap_err());
        assert_eq!(e.job_id.as_deref(), Some(job));
        assert_eq!((e.attempts, e.replayed), (2, replayed), "{marked} {job}");
    }
}

#[tokio::test]
async fn an_undefined_status_is_an_http_error_not_retried() {
    let server = MockServer::start().await;
    answer(&server, status(404), 1).await;
    let client = client(&server.uri()).connect().await.unwrap();
    let err = client.invoke_tool("refund", json!({})).await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Http {
                status: 404,
                attempts: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.code_name(), "HTTP_ERROR");
}

#[tokio::test]
async fn the_call_deadline_bounds_a_slow_response() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(json_body(result("job_1", json!(1))).set_delay(Duration::from_secs(5)))
        .mount(&server)
        .await;
    let client = client(&server.uri()).connect().await.unwrap();
    let started = Instant::now();
    let err = client
        .invoke_tool("refund", json!({}))
        .deadline(Duration::from_millis(300))
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::DeadlineExceeded { attempts: 1, .. }),
        "{err:?}"
    );
    // The POST was handed over: the runtime may be running the tool.
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn nothing_listening_costs_time_not_attempts() {
    // A port with nothing behind it: connects fail until the deadline.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let client = client(&format!("http://127.0.0.1:{port}"))
        .retry(fast_retry().max_elapsed(Duration::from_millis(300)))
        .connect()
        .await
        .unwrap();
    let err = client.invoke_tool("refund", json!({})).await.unwrap_err();
    assert!(
        matches!(&err, Error::RetriesExhausted { attempts: 0, last_error, .. } if last_error.contains("connect")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_repeated_key_is_answered_from_the_outcome_cache() {
    let server = MockServer::start().await;
    answer(&server, json_body(result("job_1", json!(1))), 1).await;
    let client = client(&server.uri()).connect().await.unwrap();
    let key = IdempotencyKey::try_from("cached").unwrap();
    let call = || {
        client
            .invoke_tool("refund", json!({"a": 1}))
            .idempotency_key(key.clone())
            .send()
    };
    assert!(!call().await.unwrap().replayed);
    assert!(call().await.unwrap().replayed);
    // A cached answer carries the trace of the caller it answers.
    let traced = client
        .invoke_tool("refund", json!({"a": 1}))
        .idempotency_key(key.clone())
        .traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        .send()
        .await
        .unwrap();
    assert!(traced.replayed);
    assert_eq!(traced.trace_id, "0af7651916cd43dd8448eb211c80319c");
    let other = client
        .invoke_tool("refund", json!({"a": 2}))
        .idempotency_key(key.clone())
        .send()
        .await;
    assert!(matches!(
        other,
        Err(Error::DuplicateKey { attempts: 0, .. })
    ));
}

#[tokio::test]
async fn cancel_is_not_dispatched_over_http() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(json_body(result("job_1", json!(1))).set_delay(Duration::from_millis(300)))
        .mount(&server)
        .await;
    let client = client(&server.uri()).connect().await.unwrap();
    let call = client.invoke_tool("refund", json!({})).send();
    let handle = call.handle();
    let task = tokio::spawn(call);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let outcome = handle.cancel().await;
    assert!(
        matches!(&outcome, CancelOutcome::NotDispatched { reason } if reason.contains("HTTP")),
        "{outcome:?}"
    );
    assert!(task.await.unwrap().is_ok());
}

#[tokio::test]
async fn close_interrupts_calls_in_flight_and_fails_later_ones() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(json_body(result("job_1", json!(1))).set_delay(Duration::from_secs(5)))
        .mount(&server)
        .await;
    let client = client(&server.uri()).connect().await.unwrap();
    let task = tokio::spawn({
        let client = client.clone();
        async move { client.invoke_tool("refund", json!({})).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    client.close().await;
    // The POST was in flight: the call may have run, and keeps its key.
    let err = task.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::Interrupted { .. }), "{err:?}");
    assert_eq!(err.execution(), Execution::MayHaveRun);
    assert!(matches!(
        client.invoke_tool("refund", json!({})).await,
        Err(Error::Closed)
    ));
}

#[tokio::test]
async fn bad_urls_and_tokens_fail_at_connect() {
    let err = arcp_sdk::Client::builder("http://")
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Connect {
                retryable: false,
                ..
            }
        ),
        "{err:?}"
    );
    let err = arcp_sdk::Client::builder("http://127.0.0.1:9/arcp")
        .bearer_token("bad\ntoken")
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidCall { .. }), "{err:?}");
    assert!(!format!("{err:?}").contains("bad\ntoken"));
}

/// A final status after a status that may have forwarded the POST (a
/// gateway's 502): the first request may have run the tool.
#[tokio::test]
async fn a_final_status_after_an_exposure_may_have_run() {
    for (first, last) in [(502, 401), (502, 404), (504, 403), (522, 400), (500, 501)] {
        let server = MockServer::start().await;
        answer(&server, status(first), 1).await;
        answer(&server, status(last), 1).await;
        let client = client(&server.uri()).connect().await.unwrap();
        let err = client.invoke_tool("refund", json!({})).await.unwrap_err();
        assert_eq!(
            err.execution(),
            Execution::MayHaveRun,
            "{first} then {last}: {err}"
        );
        assert!(err.key().is_some(), "{first} then {last}: keeps the key");
        assert_eq!(posts(&server).await.len(), 2, "{first} then {last}");
    }
}

/// The same final statuses on the first request prove nothing ran.
#[tokio::test]
async fn a_final_status_on_the_first_request_did_not_run() {
    for last in [401, 403, 404, 400, 501] {
        let server = MockServer::start().await;
        answer(&server, status(last), 1).await;
        let client = client(&server.uri()).connect().await.unwrap();
        let err = client.invoke_tool("refund", json!({})).await.unwrap_err();
        assert_eq!(err.execution(), Execution::NotRun, "{last}: {err}");
    }
}

/// A job's own error is the tool's, whatever its code: `UNAUTHENTICATED`
/// or `DUPLICATE_KEY` from the job (it names one) ran the tool.
#[tokio::test]
async fn a_jobs_own_error_is_the_tools_whatever_its_code() {
    for code in [
        ErrorCode::Unauthenticated,
        ErrorCode::DuplicateKey,
        ErrorCode::FailedPrecondition,
    ] {
        let server = MockServer::start().await;
        let body = ndjson(&[accepted("job_7"), error(Some("job_7"), code.clone(), false)]);
        answer(
            &server,
            ResponseTemplate::new(200).set_body_raw(body, "application/x-ndjson"),
            1,
        )
        .await;
        let client = client(&server.uri()).connect().await.unwrap();
        let err = client.invoke_tool("refund", json!({})).await.unwrap_err();
        match &err {
            Error::Tool(e) => {
                assert_eq!(e.code, code);
                assert_eq!(e.execution, Execution::Ran);
                assert_eq!(e.job_id.as_deref(), Some("job_7"));
            }
            other => panic!("{code}: {other:?}"),
        }
    }
}

/// Gateway statuses that may have forwarded the request are retried with
/// the same key, as 502 is.
#[tokio::test]
async fn cloudflare_style_52x_statuses_are_exposures_and_retried() {
    for code in [520, 521, 523, 524] {
        let server = MockServer::start().await;
        answer(&server, status(code), 1).await;
        answer(&server, json_body(result("job_1", json!(1))), 1).await;
        let client = client(&server.uri()).connect().await.unwrap();
        let out = client.invoke_tool("refund", json!({})).await.unwrap();
        assert_eq!(out.attempts, 2, "{code}");
    }
}

/// A bare 503 (no `Retry-After`) is what a proxy answers when its upstream
/// reset after it forwarded the request: retried, and the call may have run.
#[tokio::test]
async fn a_bare_503_is_retried_as_an_exposure() {
    let server = MockServer::start().await;
    answer(&server, status(503), 3).await;
    let client = client(&server.uri())
        .retry(fast_retry().max_attempts(3))
        .connect()
        .await
        .unwrap();
    let err = client.invoke_tool("refund", json!({})).await.unwrap_err();
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err}");
    assert_eq!(posts(&server).await.len(), 3);
}
