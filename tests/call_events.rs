//! A call's own events (`Invocation::events`): a watched call receives
//! each event whole, body included, in both dialects, while other calls on
//! the same connection go unwatched (their events are decoded only for
//! what their outcome needs, and are not delivered to anyone).

mod support;

use std::time::Duration;

use arcp_mock::{Dialect, MockRuntime};
use arcp_sdk::EventBody;
use serde_json::json;
use support::mock::client;

fn chatty() -> arcp_mock::MockRuntimeBuilder {
    MockRuntime::builder().tool("chatty", |args, ctx| async move {
        let n = args["n"].as_u64().unwrap_or(0);
        ctx.log("info", format!("call {n} started")).await;
        ctx.metric("cost", 0.5, "USD").await;
        ctx.progress(1, 2).await;
        ctx.sleep(Duration::from_millis(20)).await;
        ctx.progress(2, 2).await;
        Ok(json!({"n": n}))
    })
}

#[tokio::test]
async fn a_watched_call_gets_every_event_whole_beside_unwatched_calls() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = chatty().dialect(dialect).start().await.unwrap();
        let client = client(&mock.ws_url(), dialect).connect().await.unwrap();
        // Unwatched calls around the watched one, on the same connection.
        let others: Vec<_> = (0..8)
            .map(|n| {
                let client = client.clone();
                tokio::spawn(async move { client.invoke_tool("chatty", json!({"n": n})).await })
            })
            .collect();
        let mut call = client.invoke_tool("chatty", json!({"n": 100})).send();
        let mut events = call.events();
        let out = call.await.unwrap();
        assert_eq!(out.value, json!({"n": 100}), "{dialect}");
        let mut seen = Vec::new();
        while let Some(event) = events.next().await {
            seen.push(event.typed());
        }
        let logs: Vec<_> = seen
            .iter()
            .filter_map(|e| match e {
                EventBody::Log { level, message } => Some((level.as_str(), message.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(logs, [("info", "call 100 started")], "{dialect}: {seen:?}");
        let metric = seen.iter().find_map(|e| match e {
            EventBody::Metric { name, value, unit } => Some((name.clone(), *value, unit.clone())),
            _ => None,
        });
        assert_eq!(
            metric,
            Some(("cost".to_owned(), 0.5, Some("USD".to_owned()))),
            "{dialect}: {seen:?}"
        );
        let progress: Vec<f64> = seen
            .iter()
            .filter_map(|e| match e {
                EventBody::Progress { current, .. } => Some(*current),
                _ => None,
            })
            .collect();
        assert_eq!(progress.len(), 2, "{dialect}: {seen:?}");
        assert!(progress[0] < progress[1], "{dialect}: {progress:?}");
        for (n, other) in others.into_iter().enumerate() {
            let out = other.await.unwrap().unwrap();
            assert_eq!(out.value, json!({"n": n}), "{dialect}");
        }
    }
}
