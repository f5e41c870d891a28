//! The behaviours that make the mock an oracle for reliability tests:
//! `job.subscribe` with history, refused upgrades, close codes, stray
//! frames, the runtime-family presets, and the ground truth (jobs,
//! connection log, executions by key).

mod common;

use std::time::Duration;

use arcp_mock::{Fault, JobStatus, MockRuntime, MockRuntimeBuilder, Preset};
use arcp_types::{Dialect, Frame, Message, Subscribe};
use common::*;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite;

async fn session(mock: &MockRuntime, token: &str) -> Client {
    let mut client = Client::connect(mock).await;
    client.handshake(token).await;
    client
}

fn subscribe(job_id: &str, from: Option<u64>, history: Option<bool>) -> Frame {
    let mut sub = Subscribe::new(job_id);
    sub.from_event_seq = from;
    sub.history = history;
    Frame::new(Message::Subscribe(sub))
}

fn features(welcome: &Value) -> Vec<String> {
    welcome["payload"]["capabilities"]["features"]
        .as_array()
        .expect("features")
        .iter()
        .map(|f| f.as_str().unwrap().to_owned())
        .collect()
}

/// Submits and reads up to the terminal; returns the job id.
async fn run_to_end(client: &mut Client, tool: &str, args: Value, key: Option<&str>) -> String {
    client.submit(tool, args, key).await;
    let (accepted, _) = client.recv_type("job.accepted").await;
    let job_id = accepted.job_id().unwrap().to_owned();
    client.until_terminal(&job_id).await;
    job_id
}

// ---------------------------------------------------------------- subscribe

#[tokio::test]
async fn subscribe_is_advertised_where_python_lists_it() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    let mut client = Client::connect(&mock).await;
    let (_, welcome) = client.handshake("t").await;
    let offered = features(&welcome);
    let at = offered
        .iter()
        .position(|f| f == "subscribe")
        .expect("subscribe");
    assert_eq!(offered[at - 1], "list_jobs");
    assert_eq!(offered[at + 1], "progress");

    // Off (TS / Go / Java): not advertised, and refused as unsupported.
    let mock = builder(Dialect::V1_1)
        .subscribe(false)
        .start()
        .await
        .unwrap();
    let mut client = Client::connect(&mock).await;
    let (_, welcome) = client.handshake("t").await;
    assert!(!features(&welcome).contains(&"subscribe".to_owned()));
    let job_id = run_to_end(&mut client, "echo", json!(1), None).await;
    client.send(&subscribe(&job_id, Some(0), Some(true))).await;
    let (frame, wire) = client.recv().await;
    assert_eq!(wire["type"], "session.error");
    assert_eq!(error_code(&frame), "INVALID_REQUEST");
}

#[tokio::test]
async fn subscribe_with_history_replays_events_then_streams_live_to_the_terminal() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    let mut submitter = session(&mock, "t").await;
    submitter
        .submit("slow", json!({"ms": 300}), Some("sub-1"))
        .await;
    let (accepted, _) = submitter.recv_type("job.accepted").await;
    let job_id = accepted.job_id().unwrap().to_owned();
    let (_, log) = submitter.recv_type("job.event").await;
    let (_, progress) = submitter.recv_type("job.event").await;
    drop(submitter);

    let mut watcher = session(&mock, "t").await;
    let request = subscribe(&job_id, Some(0), Some(true));
    let request_id = request.envelope.id.clone();
    watcher.send(&request).await;
    let (_, subscribed) = watcher.recv().await;
    assert_eq!(subscribed["type"], "job.subscribed");
    assert_eq!(subscribed["job_id"], job_id.as_str());
    assert_eq!(subscribed["payload"]["job_id"], job_id.as_str());
    assert_eq!(subscribed["payload"]["request_id"], request_id.as_str());
    assert_eq!(subscribed["payload"]["current_status"], "running");
    assert_eq!(subscribed["payload"]["agent"], "slow");
    assert_eq!(subscribed["payload"]["replayed"], true);

    // History: the same events (same envelope ids), sequenced on the
    // watcher's own session.
    let (_, first) = watcher.recv().await;
    let (_, second) = watcher.recv().await;
    assert_eq!(first["id"], log["id"]);
    assert_eq!(first["payload"], log["payload"]);
    assert_eq!(second["id"], progress["id"]);
    assert_eq!(first["session_id"], watcher.session_id.as_deref().unwrap());
    assert!(second["event_seq"].as_u64() > first["event_seq"].as_u64());

    // Then live, up to the terminal.
    let (terminal, wire) = watcher.recv().await;
    assert_eq!(wire["type"], "job.result");
    assert_eq!(terminal.job_id(), Some(job_id.as_str()));
    assert_eq!(wire["payload"]["result"], json!({"ms": 300}));
    assert_eq!(mock.executions("slow"), 1);
    // The submitter's connection is gone; the watcher got the terminal.
    let job = mock
        .jobs()
        .into_iter()
        .find(|j| j.job_id == job_id)
        .unwrap();
    assert!(job.terminal_delivered);
    assert_eq!(job.status, JobStatus::Completed);
}

#[tokio::test]
async fn subscribe_to_a_finished_job_gets_history_after_from_seq_and_the_terminal() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    let mut submitter = session(&mock, "t").await;
    submitter.submit("slow", json!({"ms": 1}), None).await;
    let (accepted, _) = submitter.recv_type("job.accepted").await;
    let job_id = accepted.job_id().unwrap().to_owned();
    let frames = submitter.until_terminal(&job_id).await;
    let log_seq = frames[0].1["event_seq"].as_u64().unwrap();

    // From after the first event: only the second is replayed.
    let mut watcher = session(&mock, "t").await;
    watcher
        .send(&subscribe(&job_id, Some(log_seq), Some(true)))
        .await;
    let (_, subscribed) = watcher.recv().await;
    assert_eq!(subscribed["payload"]["current_status"], "success");
    assert_eq!(subscribed["payload"]["subscribed_from"], log_seq);
    let (_, event) = watcher.recv().await;
    assert_eq!(event["id"], frames[1].1["id"]);
    let (_, terminal) = watcher.recv().await;
    assert_eq!(terminal["type"], "job.result");
    assert_eq!(terminal["id"], frames[2].1["id"]);

    // Without history: the status and the terminal only.
    let mut late = session(&mock, "t").await;
    late.send(&subscribe(&job_id, None, None)).await;
    let (_, subscribed) = late.recv().await;
    assert_eq!(subscribed["payload"]["replayed"], false);
    let (_, terminal) = late.recv().await;
    assert_eq!(terminal["type"], "job.result");
    late.expect_silence(ms(100)).await;
}

#[tokio::test]
async fn subscribe_refusals_carry_the_request_id() {
    let mock = builder(Dialect::V1_1)
        .token("alice-token", "alice")
        .token("bob-token", "bob")
        .start()
        .await
        .unwrap();
    let mut alice = session(&mock, "alice-token").await;
    let unknown = subscribe("job_01NOSUCHJOB00000000000000", Some(0), Some(true));
    alice.send(&unknown).await;
    let (frame, wire) = alice.recv().await;
    assert_eq!(wire["type"], "session.error");
    assert_eq!(error_code(&frame), "JOB_NOT_FOUND");
    assert_eq!(frame.request_id(), Some(unknown.envelope.id.as_str()));

    let job_id = run_to_end(&mut alice, "echo", json!(1), None).await;
    let mut bob = session(&mock, "bob-token").await;
    let foreign = subscribe(&job_id, Some(0), Some(true));
    bob.send(&foreign).await;
    let (frame, _) = bob.recv().await;
    assert_eq!(error_code(&frame), "PERMISSION_DENIED");
    assert_eq!(frame.request_id(), Some(foreign.envelope.id.as_str()));
}

// ----------------------------------------------------- refused upgrades

/// Connects; returns the refusal's status and headers, or `None` when the
/// upgrade succeeded.
async fn upgrade(mock: &MockRuntime) -> Option<(u16, Option<String>, Option<String>)> {
    let attempt = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(mock.ws_url()))
        .await
        .expect("connect timed out");
    match attempt {
        Ok(_) => None,
        Err(tungstenite::Error::Http(response)) => {
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .map(|v| v.to_str().unwrap().to_owned())
            };
            Some((
                response.status().as_u16(),
                header("retry-after"),
                header("www-authenticate"),
            ))
        }
        Err(e) => panic!("unexpected connect error: {e}"),
    }
}

#[tokio::test]
async fn refused_upgrades_answer_with_a_status_and_retry_after() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    mock.inject(Fault::RefuseUpgrade {
        status: 429,
        retry_after: Some(Duration::from_millis(1500)),
    });
    assert_eq!(upgrade(&mock).await, Some((429, Some("2".into()), None)));
    // One-shot: the next upgrade succeeds.
    assert_eq!(upgrade(&mock).await, None);

    mock.inject(Fault::RefuseUpgrade {
        status: 401,
        retry_after: None,
    });
    assert_eq!(
        upgrade(&mock).await,
        Some((401, None, Some("Bearer".into())))
    );

    // Standing: every upgrade, until cleared.
    mock.inject_always(Fault::RefuseUpgrade {
        status: 503,
        retry_after: Some(Duration::from_secs(3)),
    });
    for _ in 0..2 {
        assert_eq!(upgrade(&mock).await, Some((503, Some("3".into()), None)));
    }
    mock.clear_faults();
    let mut client = session(&mock, "t").await;
    run_to_end(&mut client, "echo", json!(1), None).await;
}

// ----------------------------------------------------------- close codes

#[tokio::test]
async fn frames_over_the_size_limit_close_with_1009_unexecuted() {
    let mock = builder(Dialect::V1_1)
        .max_inbound_frame_size(512)
        .start()
        .await
        .unwrap();
    let mut client = session(&mock, "t").await;
    client
        .submit("echo", json!({"blob": "x".repeat(600)}), Some("big"))
        .await;
    match client.next().await {
        Next::Closed(code) => assert_eq!(code, Some(1009)),
        other => panic!("expected close 1009, got {other:?}"),
    }
    assert_eq!(mock.executions("echo"), 0);
    assert_eq!(mock.executions_for_key("big"), 0);

    // Frames within the limit are served.
    let mut client = session(&mock, "t").await;
    run_to_end(&mut client, "echo", json!({"blob": "small"}), None).await;
    assert_eq!(mock.executions("echo"), 1);
}

#[tokio::test]
async fn close_with_closes_the_submitting_connection_before_executing() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = builder(dialect).start().await.unwrap();
        mock.inject(Fault::CloseWith { code: 1013 });
        let mut client = session(&mock, "t").await;
        client.ping("still-fine").await;
        client.recv_type("session.pong").await;
        client.submit("echo", json!(1), Some("k")).await;
        match client.next().await {
            Next::Closed(code) => assert_eq!(code, Some(1013), "{dialect:?}"),
            other => panic!("expected close 1013, got {other:?}"),
        }
        assert_eq!(mock.executions("echo"), 0);
        // One-shot: the retry runs.
        let mut client = session(&mock, "t").await;
        run_to_end(&mut client, "echo", json!(1), Some("k")).await;
        assert_eq!(mock.executions_for_key("k"), 1);
    }
}

#[tokio::test]
async fn legacy_can_answer_unparseable_frames_instead_of_dropping() {
    let mock = builder(Dialect::Legacy)
        .drop_on_unparseable(false)
        .start()
        .await
        .unwrap();
    let mut client = session(&mock, "t").await;
    let id = arcp_types::new_message_id();
    let bad = json!({"arcp": "1.1", "id": id, "type": "arcpx.vendor.thing.v1", "payload": {}});
    client.send_text(bad.to_string()).await;
    let (frame, wire) = client.recv().await;
    assert_eq!(wire["type"], "nack");
    assert_eq!(error_code(&frame), "INVALID_ARGUMENT");
    assert_eq!(wire["correlation_id"], id.as_str());
    client.send_text("{not json".into()).await;
    let (_, wire) = client.recv().await;
    assert_eq!(wire["type"], "nack");
    // The connection stays.
    client.ping("n").await;
    client.recv_type("session.pong").await;
}

// ---------------------------------------------------------- stray frames

#[tokio::test]
async fn stray_frames_follow_every_terminal_without_touching_ground_truth() {
    for dialect in [Dialect::V1_1, Dialect::Legacy] {
        let mock = builder(dialect).start().await.unwrap();
        mock.inject_always(Fault::StrayFrames);
        let mut client = session(&mock, "t").await;
        let job_id = run_to_end(&mut client, "echo", json!({"a": 1}), Some("k")).await;
        let terminal_kind = if dialect == Dialect::V1_1 {
            "job.result"
        } else {
            "job.completed"
        };
        let (_, duplicate) = client.recv().await;
        assert_eq!(duplicate["type"], terminal_kind, "{dialect:?}");
        assert_eq!(duplicate["job_id"], job_id.as_str());
        let (late, _) = client.recv().await;
        assert!(matches!(late.message, Message::Event(_)), "{late:?}");
        assert_eq!(late.job_id(), Some(job_id.as_str()));
        let (ghost, _) = client.recv().await;
        assert!(matches!(ghost.message, Message::Error(_)), "{ghost:?}");
        let ghost_job = ghost.job_id().unwrap().to_owned();
        assert_ne!(ghost_job, job_id);
        assert!(ghost.request_id().is_some());

        // The duplicate after the first terminal came from the same frame.
        let log = mock.connection_log();
        let sent = &log.last().unwrap().sent;
        let terminals: Vec<&arcp_types::Envelope> =
            sent.iter().filter(|e| e.kind == terminal_kind).collect();
        assert_eq!(terminals.len(), 2);
        assert_eq!(terminals[0].id, terminals[1].id);

        // Ground truth: one job, run once, the ghost unknown.
        let jobs = mock.jobs();
        assert_eq!(jobs.len(), 1, "{jobs:?}");
        assert_eq!(jobs[0].job_id, job_id);
        assert_eq!(jobs[0].executions, 1);
        assert_eq!(mock.total_executions(), 1);
        assert_eq!(mock.executions_by_key().get("k"), Some(&1));
        assert_eq!(mock.executions_by_key().len(), 1);
    }
}

// ------------------------------------------------------------ ground truth

#[tokio::test]
async fn jobs_record_intent_executions_status_and_terminal_delivery() {
    let mock = builder(Dialect::V1_1)
        .preset(Preset::Python113)
        .token("alice-token", "alice")
        .start()
        .await
        .unwrap();
    // The terminal is stored but its connection dropped instead: not
    // delivered.
    mock.inject(Fault::DropBeforeTerminal);
    let mut client = session(&mock, "alice-token").await;
    client
        .submit("slow", json!({"ms": 50}), Some("k-truth"))
        .await;
    let (accepted, _) = client.recv_type("job.accepted").await;
    let job_id = accepted.job_id().unwrap().to_owned();
    let running = mock.jobs();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].status, JobStatus::Running);
    client.expect_drop().await;

    let job = &mock.jobs()[0];
    assert_eq!(job.job_id, job_id);
    assert_eq!(job.idempotency_key.as_deref(), Some("k-truth"));
    assert_eq!(job.tool, "slow");
    assert_eq!(job.arguments, json!({"ms": 50}));
    assert_eq!(job.principal, "alice");
    assert_eq!(job.executions, 1);
    assert_eq!(job.status, JobStatus::Completed);
    assert!(!job.terminal_delivered);

    // A retry with the same key gets the stored terminal: now delivered.
    let mut client = session(&mock, "alice-token").await;
    client
        .submit("slow", json!({"ms": 50}), Some("k-truth"))
        .await;
    client.recv_type("job.result").await;
    let job = &mock.jobs()[0];
    assert!(job.terminal_delivered);
    assert_eq!(job.executions, 1);

    // Failed and cancelled jobs.
    let failed = run_to_end(&mut client, "fail", json!({}), None).await;
    client.submit("slow", json!({"ms": 5000}), None).await;
    let (accepted, _) = client.recv_type("job.accepted").await;
    let cancelled = accepted.job_id().unwrap().to_owned();
    client
        .send(&Frame::new(Message::Cancel(arcp_types::Cancel::new(
            cancelled.clone(),
        ))))
        .await;
    client.until_terminal(&cancelled).await;
    let status = |id: &str| mock.jobs().into_iter().find(|j| j.job_id == id).unwrap();
    assert_eq!(status(&failed).status, JobStatus::Failed);
    assert_eq!(status(&cancelled).status, JobStatus::Cancelled);
    assert!(status(&cancelled).terminal_delivered);
    assert_eq!(mock.executions_by_key(), [("k-truth".to_owned(), 1)].into());
}

#[tokio::test]
async fn connection_log_lists_what_each_connection_received_and_sent() {
    let mock = builder(Dialect::V1_1).start().await.unwrap();
    let mut first = session(&mock, "t").await;
    let request = first.submit("echo", json!(1), None).await;
    first.recv_type("job.result").await;
    let mut second = session(&mock, "t").await;
    second.ping("p").await;
    second.recv_type("session.pong").await;

    let log = mock.connection_log();
    assert_eq!(log.len(), 2);
    assert!(log[0].id < log[1].id);
    assert!(!log[0].http);
    let kinds = |list: &[arcp_types::Envelope]| -> Vec<String> {
        list.iter().map(|e| e.kind.clone()).collect()
    };
    assert_eq!(kinds(&log[0].received), ["session.hello", "job.submit"]);
    assert_eq!(log[0].received[1].id, request);
    assert_eq!(
        kinds(&log[0].sent),
        ["session.welcome", "job.accepted", "job.result"]
    );
    assert_eq!(kinds(&log[1].received), ["session.hello", "session.ping"]);
    assert_eq!(kinds(&log[1].sent), ["session.welcome", "session.pong"]);
    // The wire form: payload fields as sent.
    assert_eq!(log[0].sent[1].payload["request_id"], request.as_str());
}

/// An HTTP submit whose response is cut keeps running, and what it emits
/// afterwards is still kept for `job.subscribe` (its own session is gone):
/// a WebSocket subscriber gets it, then the terminal.
#[tokio::test]
async fn an_http_job_outlives_its_response_for_subscribers() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mock = MockRuntime::builder()
        .tool("late", |_args, ctx| async move {
            ctx.sleep(ms(150)).await;
            ctx.log("info", "after the response").await;
            ctx.sleep(ms(250)).await;
            Ok(json!("done"))
        })
        .start()
        .await
        .unwrap();
    let body = Dialect::V1_1.encode(&invoke("late", json!({}), Some("k-http")));
    let request = format!(
        "POST /arcp HTTP/1.1\r\nHost: t\r\nAccept: application/x-ndjson\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut http = tokio::net::TcpStream::connect(mock.http_address())
        .await
        .unwrap();
    http.write_all(request.as_bytes()).await.unwrap();
    let mut read = Vec::new();
    let accepted: Value = tokio::time::timeout(WAIT, async {
        loop {
            let mut chunk = [0u8; 4096];
            let n = http.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the response ended before job.accepted");
            read.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&read).into_owned();
            if let Some(line) = text.lines().find(|l| l.contains("\"job.accepted\"")) {
                return serde_json::from_str(line).unwrap();
            }
        }
    })
    .await
    .expect("job.accepted in time");
    let job_id = accepted["job_id"].as_str().unwrap().to_owned();

    // Cut the response: its connection and session end, the job runs on.
    mock.kill_connections();
    drop(http);
    tokio::time::sleep(ms(250)).await;
    let job = |mock: &MockRuntime| mock.jobs().into_iter().find(|j| j.job_id == job_id);
    assert_eq!(job(&mock).unwrap().status, JobStatus::Running);

    let mut watcher = session(&mock, "t").await;
    watcher.send(&subscribe(&job_id, Some(0), Some(true))).await;
    let (_, subscribed) = watcher.recv_type("job.subscribed").await;
    assert_eq!(subscribed["payload"]["replayed"], true);
    let (_, event) = watcher.recv().await;
    assert_eq!(event["type"], "job.event");
    assert_eq!(event["payload"]["body"]["message"], "after the response");
    let (_, terminal) = watcher.recv().await;
    assert_eq!(terminal["type"], "job.result");
    assert_eq!(terminal["job_id"], job_id.as_str());

    let job = job(&mock).unwrap();
    assert_eq!(job.status, JobStatus::Completed);
    assert!(job.terminal_delivered);
    assert_eq!(mock.executions_for_key("k-http"), 1);
    let log = mock.connection_log();
    assert!(log[0].http);
    assert_eq!(log[0].received[0].kind, "job.submit");
}

// ------------------------------------------------------------------ presets

/// What a preset answers to the same key and intent after completion, and
/// to the same key with another intent: the wire types, in order.
async fn preset_answers(preset: Preset) -> (MockRuntime, Vec<Value>, Vec<Value>) {
    let mock = MockRuntimeBuilder::default()
        .preset(preset)
        .tool("echo", |args, _ctx| async move { Ok(args) })
        .start()
        .await
        .unwrap();
    let mut client = session(&mock, "t").await;
    run_to_end(&mut client, "echo", json!({"n": 1}), Some("k")).await;
    client.submit("echo", json!({"n": 1}), Some("k")).await;
    let mut same = Vec::new();
    while let Some(Next::Frame(_, wire)) = client.next_within(ms(150)).await {
        same.push(wire);
    }
    client.submit("echo", json!({"n": 2}), Some("k")).await;
    let mut other = Vec::new();
    while let Some(Next::Frame(_, wire)) = client.next_within(ms(150)).await {
        other.push(wire);
    }
    (mock, same, other)
}

fn types(frames: &[Value]) -> Vec<&str> {
    frames.iter().map(|f| f["type"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn each_preset_answers_as_its_runtime_family() {
    let (mock, same, other) = preset_answers(Preset::Python113).await;
    assert_eq!(mock.dialect(), Dialect::V1_1);
    assert_eq!(types(&same), ["job.accepted", "job.result"]);
    assert_eq!(types(&other), ["session.error"]);
    assert_eq!(other[0]["payload"]["code"], "DUPLICATE_KEY");
    assert!(other[0]["payload"].get("request_id").is_none());

    let (mock, same, other) = preset_answers(Preset::TsGoJava).await;
    assert_eq!(mock.dialect(), Dialect::V1_1);
    assert_eq!(types(&same), ["job.accepted"]);
    assert_eq!(types(&other), ["job.error"]);
    assert_eq!(other[0]["payload"]["code"], "DUPLICATE_KEY");
    assert!(other[0]["payload"]["request_id"].is_string());

    let (mock, same, other) = preset_answers(Preset::Rust200).await;
    assert_eq!(mock.dialect(), Dialect::Legacy);
    assert_eq!(types(&same), ["job.accepted"]);
    assert_eq!(types(&other), ["job.failed"]);
    assert_eq!(other[0]["payload"]["code"], "FAILED_PRECONDITION");

    // Newer PHP: the terminal with no job.accepted first; another intent is
    // not signalled (the original's terminal again) and never runs.
    let (mock, same, other) = preset_answers(Preset::PhpNewer).await;
    assert_eq!(mock.dialect(), Dialect::Legacy);
    assert_eq!(types(&same), ["job.completed"]);
    assert_eq!(types(&other), ["job.completed"]);
    assert_eq!(other[0]["payload"]["value"], json!({"n": 1}));
    assert_eq!(mock.jobs().len(), 1);
    assert_eq!(mock.jobs()[0].arguments, json!({"n": 1}));
    assert_eq!(mock.executions("echo"), 1);

    // Older PHP: `ack` with `replay`, for both.
    let (mock, same, other) = preset_answers(Preset::PhpOlder).await;
    assert_eq!(types(&same), ["ack"]);
    assert_eq!(same[0]["payload"]["replay"], true);
    assert_eq!(types(&other), ["ack"]);
    assert_eq!(mock.executions("echo"), 1);
}

#[tokio::test]
async fn presets_set_subscribe_and_the_runtime_identity() {
    for (preset, name, subscribe) in [
        (Preset::Python113, "arcp-python-peer", true),
        (Preset::TsGoJava, "arcp-mock", false),
    ] {
        let mock = MockRuntimeBuilder::default()
            .preset(preset)
            .start()
            .await
            .unwrap();
        let mut client = Client::connect(&mock).await;
        let (_, welcome) = client.handshake("t").await;
        assert_eq!(welcome["payload"]["runtime"]["name"], name);
        assert_eq!(
            features(&welcome).contains(&"subscribe".to_owned()),
            subscribe,
            "{preset:?}"
        );
    }
    let mock = MockRuntimeBuilder::default()
        .preset(Preset::Rust200)
        .start()
        .await
        .unwrap();
    let mut client = Client::connect(&mock).await;
    let (_, welcome) = client.handshake("t").await;
    assert_eq!(welcome["payload"]["runtime"]["kind"], "arcp-rs");
    assert_eq!(welcome["payload"]["runtime"]["version"], "2.0.0");
    assert_eq!(welcome["payload"]["capabilities"]["subscriptions"], false);

    // Knobs after a preset override it.
    let mock = MockRuntimeBuilder::default()
        .preset(Preset::TsGoJava)
        .subscribe(true)
        .start()
        .await
        .unwrap();
    let mut client = Client::connect(&mock).await;
    let (_, welcome) = client.handshake("t").await;
    assert!(features(&welcome).contains(&"subscribe".to_owned()));
}
