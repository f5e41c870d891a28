//! Trace context: a caller's W3C `traceparent` becomes the call's trace id,
//! carried by every attempt across a cut connection, in both dialects.

mod support;

use arcp::client::Error;
use arcp::mock::{Dialect, Fault};
use serde_json::json;
use support::mock::{client, mock, submits};

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

async fn one_trace_across_a_cut(dialect: Dialect) {
    let mock = mock(dialect).start().await.unwrap();
    let client = client(&mock.ws_url(), dialect).connect().await.unwrap();
    mock.inject(Fault::DropOnSubmit);
    let out = client
        .invoke("refund", json!({"order": 1}))
        .traceparent(PARENT)
        .send()
        .await
        .unwrap();
    assert_eq!(out.trace_id, TRACE);
    let sent = submits(&mock);
    assert!(sent.len() >= 2, "the cut forced a second attempt: {sent:?}");
    for submit in &sent {
        let on_wire = submit
            .trace_id
            .as_deref()
            .or_else(|| submit.payload["trace_id"].as_str());
        assert_eq!(on_wire, Some(TRACE), "{submit:?}");
    }
    assert_eq!(mock.executions("refund"), 1);
}

#[tokio::test]
async fn one_trace_across_a_cut_v1_1() {
    one_trace_across_a_cut(Dialect::V1_1).await;
}

#[tokio::test]
async fn one_trace_across_a_cut_legacy() {
    one_trace_across_a_cut(Dialect::Legacy).await;
}

#[tokio::test]
async fn a_malformed_traceparent_is_refused_before_sending() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let err = client
        .invoke("refund", json!({"order": 1}))
        .traceparent("00-not-a-trace-01")
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidCall(_)), "{err:?}");
    assert!(err.to_string().contains("00-not-a-trace-01"), "{err}");
    assert!(submits(&mock).is_empty());
}
