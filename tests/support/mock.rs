//! Mock runtimes for the client's tests: one builder per scenario, fast
//! retry budgets, and a `refund` tool whose executions the tests count.

use std::time::Duration;

use arcp_mock::{Dialect, MockRuntime, MockRuntimeBuilder, ToolFailure};
use arcp_sdk::{Client, ClientBuilder, RetryPolicy};
use arcp_types::Envelope;
use serde_json::{json, Value};

/// A mock with the tools the tests use:
/// - `refund`: emits `steps` progress events, `ms` apart, returns `{"refunded": order}`;
/// - `fail`: fails with `code` (retryable when `retryable` is true);
/// - `echo`: returns its arguments.
pub(crate) fn mock(dialect: Dialect) -> MockRuntimeBuilder {
    MockRuntime::builder()
        .dialect(dialect)
        .tool("refund", |args: Value, ctx| async move {
            let steps = args["steps"].as_u64().unwrap_or(0);
            let ms = args["ms"].as_u64().unwrap_or(0);
            for i in 1..=steps {
                ctx.sleep(Duration::from_millis(ms)).await;
                ctx.progress(i, steps).await;
            }
            if steps == 0 && ms > 0 {
                ctx.sleep(Duration::from_millis(ms)).await;
            }
            Ok(json!({"refunded": args["order"]}))
        })
        .tool("fail", |args: Value, _ctx| async move {
            let code = args["code"]
                .as_str()
                .unwrap_or("PERMISSION_DENIED")
                .to_owned();
            Err(
                ToolFailure::new(code.as_str(), format!("asked to fail with {code}"))
                    .retryable(args["retryable"].as_bool().unwrap_or(false)),
            )
        })
        .tool("echo", |args: Value, _ctx| async move { Ok(args) })
}

/// A client for `url` with budgets sized for tests (a call gives up within
/// a few seconds).
pub(crate) fn client(url: &str, dialect: Dialect) -> ClientBuilder {
    Client::builder(url)
        .dialect(dialect)
        .handshake_timeout(Duration::from_secs(2))
        .default_deadline(Duration::from_secs(15))
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(10))
                .max_delay(Duration::from_millis(200))
                .max_attempts(6)
                .max_elapsed(Duration::from_secs(5))
                .outcome_poll(Duration::from_millis(100)),
        )
}

/// Every submit the mock received, in order.
pub(crate) fn submits(mock: &MockRuntime) -> Vec<Envelope> {
    mock.received()
        .into_iter()
        .filter(|e| e.kind == "job.submit" || e.kind == "tool.invoke")
        .collect()
}

/// The idempotency key of a submit, wherever the dialect put it.
pub(crate) fn key_of(submit: &Envelope) -> Option<String> {
    submit.idempotency_key.clone().or_else(|| {
        submit.payload["idempotency_key"]
            .as_str()
            .map(str::to_owned)
    })
}

/// Makes `mock` unreachable: every reconnect refused (503), the live
/// connections closed, and a moment for the client to see it.
pub(crate) async fn cut_off(mock: &MockRuntime) {
    mock.inject_always(arcp_mock::Fault::RefuseUpgrade {
        status: 503,
        retry_after: None,
    });
    mock.kill_connections();
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Runs the test body once per dialect, as two named tests.
#[macro_export]
macro_rules! both_dialects {
    ($(#[$meta:meta])* async fn $name:ident($dialect:ident: Dialect) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            async fn run($dialect: arcp_mock::Dialect) $body
            #[tokio::test]
            async fn v1_1() {
                run(arcp_mock::Dialect::V1_1).await
            }
            #[tokio::test]
            async fn legacy() {
                run(arcp_mock::Dialect::Legacy).await
            }
        }
    };
}

/// A supplied key's `refund {"order": 15}` that sends nothing (the runtime
/// unreachable), on a journal built with `retention` and
/// `runtime_key_retention`: its error.
pub(crate) async fn unreachable_call_on_journal(
    path: &std::path::Path,
    key: &arcp_sdk::IdempotencyKey,
    retention: arcp_sdk::Retention,
    runtime_key_retention: Duration,
) -> arcp_sdk::Error {
    unreachable_call_of(
        path,
        key,
        json!({"order": 15}),
        retention,
        runtime_key_retention,
    )
    .await
}

/// [`unreachable_call_on_journal`] with these `refund` arguments.
pub(crate) async fn unreachable_call_of(
    path: &std::path::Path,
    key: &arcp_sdk::IdempotencyKey,
    arguments: Value,
    retention: arcp_sdk::Retention,
    runtime_key_retention: Duration,
) -> arcp_sdk::Error {
    // A port held for the while, closing every connection at once (freed
    // instead, another test's runtime could take it).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let refuser = tokio::spawn(async move {
        while let Ok((connection, _)) = listener.accept().await {
            drop(connection);
        }
    });
    // Its retries give up well before its deadline, so the journal has
    // time to record the ending durably on a loaded machine.
    let client = client(&format!("ws://127.0.0.1:{port}/arcp"), Dialect::V1_1)
        .connect_budget(Duration::from_millis(500))
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(10))
                .max_delay(Duration::from_millis(100))
                .max_elapsed(Duration::from_millis(500)),
        )
        .journal_path(path)
        .journal_retention(retention)
        .runtime_key_retention(runtime_key_retention)
        .connect_lazy();
    let err = client
        .invoke_tool("refund", arguments)
        .idempotency_key(key.clone())
        .deadline(Duration::from_secs(10))
        .send()
        .await
        .unwrap_err();
    client.close().await;
    refuser.abort();
    err
}
