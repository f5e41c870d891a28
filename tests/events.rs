//! `Client::events()`: the connection's story, in order — connected, cut,
//! reconnecting, resumed, and a refused resume.

mod support;

use std::time::Duration;

use arcp_mock::{Dialect, Fault};
use arcp_sdk::{ConnectionEvent, ConnectionEvents};
use serde_json::json;
use support::mock::{client, mock};

/// The next event, or a failure naming what was awaited.
async fn next(events: &mut ConnectionEvents, what: &str) -> ConnectionEvent {
    tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .unwrap_or_else(|_| panic!("no {what} event within 5 s"))
        .unwrap_or_else(|| panic!("the event stream ended before {what}"))
}

#[tokio::test]
async fn connect_cut_reconnect_and_resume_are_reported_in_order() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1).connect_lazy();
    let mut events = client.events();
    client.invoke_tool("echo", json!({"n": 1})).await.unwrap();
    let first = match next(&mut events, "connected").await {
        ConnectionEvent::Connected {
            runtime,
            dialect,
            session_id,
            resumed,
            ..
        } => {
            assert_eq!(runtime, "arcp-mock");
            assert_eq!(dialect, Dialect::V1_1);
            assert!(!resumed, "the first session is new");
            session_id
        }
        other => panic!("{other:?}"),
    };
    // A cut in the middle of a call.
    mock.inject(Fault::DropAfterAccepted);
    client
        .invoke_tool("refund", json!({"order": 1, "ms": 50}))
        .await
        .unwrap();
    assert!(matches!(
        next(&mut events, "disconnected").await,
        ConnectionEvent::Disconnected { .. }
    ));
    match next(&mut events, "reconnecting").await {
        ConnectionEvent::Reconnecting { attempt, .. } => assert_eq!(attempt, 1),
        other => panic!("{other:?}"),
    }
    match next(&mut events, "connected again").await {
        ConnectionEvent::Connected {
            session_id,
            resumed,
            ..
        } => {
            assert!(resumed, "the session was resumed");
            assert_eq!(session_id, first);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(mock.executions("refund"), 1);
}

#[tokio::test]
async fn a_refused_resume_is_reported_before_the_new_session() {
    // A detached session expires at once: the resume after the cut is refused
    // (a zero window, so that no reconnect is quick enough to beat it).
    let mock = mock(Dialect::V1_1)
        .resume_window(Duration::ZERO)
        .start()
        .await
        .unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let mut events = client.events();
    mock.inject(Fault::DropAfterAccepted);
    client
        .invoke_tool("refund", json!({"order": 2, "steps": 5, "ms": 30}))
        .await
        .unwrap();
    let mut seen = Vec::new();
    loop {
        let event = next(&mut events, "a new session").await;
        let done = matches!(event, ConnectionEvent::Connected { .. });
        seen.push(event);
        if done {
            break;
        }
    }
    let kinds: Vec<&str> = seen
        .iter()
        .map(|e| match e {
            ConnectionEvent::Disconnected { .. } => "disconnected",
            ConnectionEvent::Reconnecting { .. } => "reconnecting",
            ConnectionEvent::ResumeRefused { .. } => "resume_refused",
            ConnectionEvent::Connected { .. } => "connected",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "disconnected",
            "reconnecting",
            "resume_refused",
            "connected"
        ],
        "{seen:?}"
    );
    assert!(matches!(
        seen.last(),
        Some(ConnectionEvent::Connected { resumed: false, .. })
    ));
    assert_eq!(mock.executions("refund"), 1);
}

#[tokio::test]
async fn a_listener_that_falls_behind_is_told_how_much_it_missed() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let client = client(&mock.ws_url(), Dialect::V1_1)
        .connect()
        .await
        .unwrap();
    let mut events = client.events();
    // Far more cuts than the listener's buffer holds, none of them read.
    for i in 0..40 {
        mock.inject(Fault::DropAfterAccepted);
        client
            .invoke_tool("refund", json!({"order": i, "ms": 5}))
            .await
            .unwrap();
    }
    match next(&mut events, "slow consumer").await {
        ConnectionEvent::SlowConsumer { missed, .. } => assert!(missed > 0),
        other => panic!("{other:?}"),
    }
    // The client kept working while the listener lagged.
    assert_eq!(mock.executions("refund"), 40);
}
