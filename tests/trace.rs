//! Trace context: a caller's W3C `traceparent` becomes the call's trace id,
//! carried by every attempt across a cut connection, in both dialects.

mod support;

use arcp_mock::{Dialect, Fault};
use arcp_sdk::Error;
use serde_json::json;
use support::mock::{client, mock, submits};

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

async fn one_trace_across_a_cut(dialect: Dialect) {
    let mock = mock(dialect).start().await.unwrap();
    let client = client(&mock.ws_url(), dialect).connect().await.unwrap();
    mock.inject(Fault::DropOnSubmit);
    let out = client
        .invoke_tool("refund", json!({"order": 1}))
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
        .invoke_tool("refund", json!({"order": 1}))
        .traceparent("00-not-a-trace-01")
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidCall { .. }), "{err:?}");
    assert!(err.to_string().contains("00-not-a-trace-01"), "{err}");
    assert!(submits(&mock).is_empty());
}

/// A repeated call answered without attempts of its own (joined to the
/// first while it runs, or from the outcome cache once it ended) reports
/// its own trace id, not the first caller's: the trace is the caller's.
#[tokio::test]
async fn a_call_answered_by_another_reports_its_own_trace() {
    const OTHER_PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const OTHER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = mock(dialect).start().await.unwrap();
        let client = client(&mock.ws_url(), dialect).connect().await.unwrap();
        let args = json!({"order": 7, "steps": 2, "ms": 30});
        let call = |parent: &'static str| {
            client
                .invoke_tool("refund", args.clone())
                .key_str("trace-owner-key")
                .traceparent(parent)
                .send()
        };
        let (first, joined) = tokio::join!(call(PARENT), call(OTHER_PARENT));
        let (first, joined) = (first.unwrap(), joined.unwrap());
        assert_eq!(first.trace_id, TRACE, "{dialect}");
        assert_eq!(joined.trace_id, OTHER_TRACE, "{dialect}: joined");
        let cached = call(OTHER_PARENT).await.unwrap();
        assert!(cached.replayed, "{dialect}: answered from the cache");
        assert_eq!(cached.trace_id, OTHER_TRACE, "{dialect}: cached");
        assert_eq!(first.value, cached.value, "{dialect}");
        assert_eq!(mock.executions("refund"), 1, "{dialect}");
    }
}

/// Over HTTP too: a result carries its caller's trace, the first call's
/// and a repeat answered from the outcome cache alike.
#[tokio::test]
async fn over_http_each_result_carries_its_callers_trace() {
    const OTHER_PARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const OTHER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = client(&mock.http_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let call = |parent: &'static str| {
        client
            .invoke_tool("refund", json!({"order": 8}))
            .key_str("http-trace-key")
            .traceparent(parent)
            .send()
    };
    let first = call(PARENT).await.unwrap();
    assert_eq!(first.trace_id, TRACE);
    let cached = call(OTHER_PARENT).await.unwrap();
    assert!(cached.replayed, "answered from the cache");
    assert_eq!(cached.trace_id, OTHER_TRACE);
    assert_eq!(first.value, cached.value);
    assert_eq!(mock.executions("refund"), 1);
}
