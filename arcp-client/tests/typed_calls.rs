//! Typed calls against the mock runtime: arguments from a `Serialize`,
//! results into a `DeserializeOwned`, with the untyped call's key, retry and
//! replay rules.

use std::collections::BTreeMap;
use std::time::Duration;

use arcp_mock::{Dialect, Fault, MockRuntime};
use arcp_sdk::{Client, Error, Execution, IdempotencyKey, RetryPolicy};
use arcp_types::Envelope;
use serde_json::{json, Value};

use arcp_sdk::Tool;
use serde::{Deserialize, Serialize};

/// The refund tool's arguments, as an application types them.
#[derive(Debug, Serialize)]
struct Refund {
    order: u64,
    cents: u64,
}

/// The refund tool's result.
#[derive(Debug, PartialEq, Deserialize)]
struct Refunded {
    refunded: u64,
    cents: u64,
}

/// The refund tool, typed.
const REFUND: Tool<Refund, Refunded> = Tool::new("refund");

/// What the mock's `refund` answers for `args`: the order and the amount.
fn refunded(args: &Value) -> Value {
    json!({"refunded": args["order"], "cents": args["cents"]})
}

/// `refund` answers `{"refunded": order, "cents": cents}`, after `ms`;
/// `garbled` answers a result no `Refunded` decodes from.
async fn mock(dialect: Dialect) -> MockRuntime {
    MockRuntime::builder()
        .dialect(dialect)
        .tool("refund", |args: Value, ctx| async move {
            let ms = args["ms"].as_u64().unwrap_or(50);
            ctx.sleep(Duration::from_millis(ms)).await;
            Ok(refunded(&args))
        })
        .tool("garbled", |_args: Value, _ctx| async move {
            Ok(json!({"refunded": "all of it"}))
        })
        .start()
        .await
        .expect("mock starts")
}

async fn client(mock: &MockRuntime, dialect: Dialect) -> Client {
    Client::builder(mock.ws_url())
        .dialect(dialect)
        .default_deadline(Duration::from_secs(15))
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(10))
                .max_delay(Duration::from_millis(200))
                .max_attempts(6)
                .outcome_poll(Duration::from_millis(100)),
        )
        .connect()
        .await
        .expect("connects")
}

fn submits(mock: &MockRuntime) -> Vec<Envelope> {
    mock.received()
        .into_iter()
        .filter(|e| e.kind == "job.submit" || e.kind == "tool.invoke")
        .collect()
}

/// The arguments of a submit, wherever the dialect put them (v1.1
/// `input`, legacy `arguments`).
fn arguments(submit: &Envelope) -> &Value {
    match submit.payload.get("input") {
        Some(input) => input,
        None => &submit.payload["arguments"],
    }
}

#[tokio::test]
async fn a_typed_call_sends_the_serialized_arguments_and_decodes_the_result() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = mock(dialect).await;
        let client = client(&mock, dialect).await;
        let out = REFUND
            .call(
                &client,
                &Refund {
                    order: 4812,
                    cents: 500,
                },
            )
            .await
            .expect("the refund succeeds");
        assert_eq!(
            out.value,
            Refunded {
                refunded: 4812,
                cents: 500
            }
        );
        assert_eq!(out.attempts, 1);
        assert!(!out.replayed);
        assert!(out.job_id.is_some());
        let sent = submits(&mock);
        assert_eq!(sent.len(), 1, "{dialect:?}");
        assert_eq!(arguments(&sent[0]), &json!({"order": 4812, "cents": 500}));
        mock.expect_executions("refund", 1);
        mock.verify();
    }
}

#[tokio::test]
async fn a_tool_named_at_run_time_decodes_into_any_type() {
    let mock = mock(Dialect::V1_1).await;
    let client = client(&mock, Dialect::V1_1).await;
    let out = Tool::<Value, BTreeMap<String, u64>>::named("refund")
        .call(&client, &json!({"order": 7, "cents": 3}))
        .await
        .expect("a map of numbers");
    assert_eq!(
        out.value,
        BTreeMap::from([("cents".into(), 3), ("refunded".into(), 7)])
    );
    mock.expect_executions("refund", 1);
}

#[tokio::test]
async fn a_typed_call_across_a_disconnect_reuses_its_key_and_runs_once() {
    let mock = mock(Dialect::V1_1).await;
    let client = client(&mock, Dialect::V1_1).await;
    let args = Refund {
        order: 4812,
        cents: 500,
    };
    let key = REFUND.derive_key("orders", &args).expect("serializes");
    // The connection dies right after the runtime accepts the call.
    mock.inject(Fault::DropAfterAccepted);
    let out = REFUND
        .call(&client, &args)
        .idempotency_key(key.clone())
        .deadline(Duration::from_secs(10))
        .send()
        .await
        .expect("recovered after the cut");
    assert_eq!(out.value.refunded, 4812);
    assert_eq!(out.key, key);
    mock.expect_executions_for_key(key.as_str(), 1);
    mock.expect_executions("refund", 1);
    // Every request of the call carried the key and the same arguments.
    for submit in submits(&mock) {
        assert_eq!(submit.payload["idempotency_key"], key.as_str());
        assert_eq!(arguments(&submit), &json!({"order": 4812, "cents": 500}));
    }
    mock.verify();
}

#[tokio::test]
async fn a_result_that_does_not_decode_is_an_error_that_says_the_tool_ran() {
    let mock = mock(Dialect::V1_1).await;
    let client = client(&mock, Dialect::V1_1).await;
    let key = IdempotencyKey::new();
    let err = Tool::<Value, Refunded>::new("garbled")
        .call(&client, &json!({"order": 1}))
        .idempotency_key(key.clone())
        .send()
        .await
        .expect_err("a string is not a number");
    assert_eq!(err.execution(), Execution::Ran);
    assert!(!err.is_retryable());
    assert_eq!(err.key(), Some(&key));
    assert!(err.job_id().is_some());
    let Error::ResultDecode(decode) = &err else {
        panic!("not a decode error: {err:?}");
    };
    assert_eq!(decode.value, json!({"refunded": "all of it"}));
    assert_eq!(decode.key, key);
    mock.expect_executions("garbled", 1);

    // The outcome is final: the same key returns the same raw result,
    // replayed, and the tool does not run again.
    let again = client
        .invoke_tool("garbled", json!({"order": 1}))
        .idempotency_key(key)
        .send()
        .await
        .expect("the untyped result");
    assert_eq!(again.value, decode.value);
    assert!(again.replayed);
    mock.expect_executions("garbled", 1);
    mock.verify();
}

#[tokio::test]
async fn arguments_that_do_not_serialize_send_nothing() {
    let mock = mock(Dialect::V1_1).await;
    let client = client(&mock, Dialect::V1_1).await;
    // JSON object keys must be strings: a map keyed by pairs does not serialize.
    let args: BTreeMap<(u8, u8), u8> = BTreeMap::from([((1, 2), 3)]);
    let err = Tool::<_, Value>::new("refund")
        .call(&client, &args)
        .await
        .expect_err("does not serialize");
    assert_eq!(err.execution(), Execution::NotRun);
    assert!(
        matches!(&err, Error::ArgumentsEncode { tool, .. } if tool == "refund"),
        "{err:?}"
    );
    assert!(submits(&mock).is_empty());
    mock.expect_executions("refund", 0);
    mock.verify();
}

/// With a key the caller supplied, arguments that do not serialize prove
/// only that this call sent nothing: an earlier call with the key may have
/// run, so it says "not sent" (retry with the same key), not "did not run".
#[tokio::test]
async fn arguments_that_do_not_serialize_under_a_supplied_key_say_not_sent() {
    let mock = mock(Dialect::V1_1).await;
    let client = client(&mock, Dialect::V1_1).await;
    let args: BTreeMap<(u8, u8), u8> = BTreeMap::from([((1, 2), 3)]);
    let err = Tool::<_, Value>::new("refund")
        .call(&client, &args)
        .idempotency_key(IdempotencyKey::new())
        .await
        .expect_err("does not serialize");
    assert_eq!(err.execution(), Execution::NotSent, "{err:?}");
    assert!(
        matches!(&err, Error::ArgumentsEncode { tool, .. } if tool == "refund"),
        "the error keeps its variant: {err:?}"
    );
    assert!(submits(&mock).is_empty());
    mock.expect_executions("refund", 0);
    mock.verify();
}
