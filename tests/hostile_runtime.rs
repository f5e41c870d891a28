//! A buggy or hostile runtime: around the real answer to a call it sends
//! malformed JSON, wrong types, huge numbers, unknown message types, frames
//! for unknown jobs, duplicate terminals, out-of-order and gapped `event_seq`.
//! Property: never a panic, never a wrong outcome; the call gets its real
//! result, in both dialects.

use std::time::Duration;

use arcp_sdk::Client;
use arcp_types::{
    Accepted, Dialect, ErrorCode, ErrorReply, Frame, JobEvent, JobResult, Message, Open, Unknown,
    Welcome,
};
use futures_util::{SinkExt, StreamExt};
use proptest::prelude::*;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message as Ws;

/// One piece of noise the runtime sends.
#[derive(Debug, Clone)]
enum Noise {
    Garbage(String),
    NotAnEnvelope(Value),
    UnknownType(String),
    EventForUnknownJob(u64),
    ResultForUnknownJob,
    ErrorForUnknownRequest,
    HugeSeq,
    WrongTypes,
    Binary(Vec<u8>),
    /// An event of the real job with an arbitrary (maybe stale) sequence.
    EventOfOurJob(u64),
    DuplicateTerminal,
}

/// Noise that is not an answer to the call: anything but a terminal of the
/// real job (a terminal before the real one *is* the real one).
fn noise_before_terminal() -> impl Strategy<Value = Noise> {
    noise().prop_filter("not a terminal of the call", |n| {
        !matches!(n, Noise::DuplicateTerminal)
    })
}

fn noise() -> impl Strategy<Value = Noise> {
    prop_oneof![
        ".{0,40}".prop_map(Noise::Garbage),
        prop_oneof![
            Just(json!(null)),
            Just(json!([1, 2])),
            Just(json!({"type": 7}))
        ]
        .prop_map(Noise::NotAnEnvelope),
        "[a-z]{1,8}\\.[a-z]{1,8}".prop_map(Noise::UnknownType),
        any::<u64>().prop_map(Noise::EventForUnknownJob),
        Just(Noise::ResultForUnknownJob),
        Just(Noise::ErrorForUnknownRequest),
        Just(Noise::HugeSeq),
        Just(Noise::WrongTypes),
        proptest::collection::vec(any::<u8>(), 0..32).prop_map(Noise::Binary),
        (0u64..20).prop_map(Noise::EventOfOurJob),
        Just(Noise::DuplicateTerminal),
    ]
}

fn render(dialect: Dialect, noise: &Noise, job: &str) -> Ws {
    let frame = |message: Message, job_id: Option<&str>, seq: Option<u64>| {
        let mut f = Frame::new(message);
        f.envelope.job_id = job_id.map(str::to_owned);
        f.envelope.event_seq = seq;
        Ws::text(dialect.encode(&f))
    };
    match noise {
        Noise::Garbage(s) => Ws::text(s.clone()),
        Noise::NotAnEnvelope(v) => Ws::text(v.to_string()),
        Noise::UnknownType(kind) => frame(
            Message::Unknown(Unknown::new(kind.clone(), json!({"x": 1}))),
            None,
            None,
        ),
        Noise::EventForUnknownJob(seq) => frame(progress(), Some("job_nobody"), Some(*seq)),
        Noise::ResultForUnknownJob => {
            frame(result(json!("not yours")), Some("job_nobody"), Some(1))
        }
        Noise::ErrorForUnknownRequest => {
            let mut e = ErrorReply::new(ErrorCode::PermissionDenied, "not for you");
            e.request_id = Some("msg_01M81NOTAREQUEST00000000".into());
            frame(Message::Error(e), Some("job_nobody"), None)
        }
        Noise::HugeSeq => Ws::text(format!(
            r#"{{"arcp":"1.1","id":"msg_x","type":"job.event","job_id":"{job}","event_seq":1e400,"payload":{{}}}}"#
        )),
        Noise::WrongTypes => Ws::text(format!(
            r#"{{"arcp":"1.1","id":"msg_x","type":"job.accepted","job_id":"{job}","payload":{{"job_id":42}}}}"#
        )),
        Noise::Binary(bytes) => Ws::binary(bytes.clone()),
        Noise::EventOfOurJob(seq) => frame(progress(), Some(job), Some(*seq)),
        Noise::DuplicateTerminal => frame(result(json!("a second terminal")), Some(job), Some(99)),
    }
}

fn progress() -> Message {
    Message::Event(JobEvent::new("progress", json!({"current": 1, "total": 2})))
}

fn result(value: Value) -> Message {
    Message::Result(JobResult::new(Some(value)))
}

/// Serves one session: welcome, then for the first submit the script
/// `before, accepted, mid, result, after`.
async fn hostile_runtime(
    dialect: Dialect,
    before: Vec<Noise>,
    mid: Vec<Noise>,
    after: Vec<Noise>,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/arcp", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(socket).await.unwrap();
        let job = "job_01M81REAL0000000000000000";
        while let Some(Ok(Ws::Text(text))) = ws.next().await {
            let Ok(frame) = dialect.decode(text.as_str()) else {
                continue;
            };
            match frame.message {
                Message::Open(Open { .. }) => {
                    let welcome: Welcome = serde_json::from_value(json!({
                        "session_id": "sess_1", "runtime": {"name": "hostile", "version": "0"}
                    }))
                    .unwrap();
                    let mut f = Frame::new(Message::Welcome(welcome));
                    f.envelope.correlation_id = Some(frame.envelope.id.clone());
                    ws.send(Ws::text(dialect.encode(&f))).await.unwrap();
                }
                Message::Invoke(invoke) => {
                    let request = frame.envelope.id.clone();
                    let mut script: Vec<Ws> =
                        before.iter().map(|n| render(dialect, n, job)).collect();
                    let mut accepted = Frame::new(Message::Accepted(
                        Accepted::new(job).with_request_id(request),
                    ));
                    accepted.envelope.job_id = Some(job.into());
                    script.push(Ws::text(dialect.encode(&accepted)));
                    script.extend(mid.iter().map(|n| render(dialect, n, job)));
                    let mut done = Frame::new(result(invoke.arguments.clone()));
                    done.envelope.job_id = Some(job.into());
                    done.envelope.event_seq = Some(50);
                    script.push(Ws::text(dialect.encode(&done)));
                    script.extend(after.iter().map(|n| render(dialect, n, job)));
                    for message in script {
                        if ws.send(message).await.is_err() {
                            return;
                        }
                    }
                }
                _ => {}
            }
        }
    });
    url
}

fn check(
    dialect: Dialect,
    before: Vec<Noise>,
    mid: Vec<Noise>,
    after: Vec<Noise>,
) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let url = hostile_runtime(dialect, before, mid, after).await;
        let client = Client::builder(url)
            .dialect(dialect)
            .handshake_timeout(Duration::from_secs(2))
            .connect()
            .await
            .map_err(|e| TestCaseError::fail(format!("connect: {e}")))?;
        let args = json!({"order": 4812});
        let out = tokio::time::timeout(
            Duration::from_secs(5),
            client
                .invoke_tool("refund", args.clone())
                .deadline(Duration::from_secs(4))
                .send(),
        )
        .await
        .map_err(|_| TestCaseError::fail("the call hung"))?
        .map_err(|e| TestCaseError::fail(format!("wrong outcome: {e:?}")))?;
        prop_assert_eq!(out.value, args);
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn noise_never_changes_the_outcome_v1_1(
        before in proptest::collection::vec(noise_before_terminal(), 0..6),
        mid in proptest::collection::vec(noise_before_terminal(), 0..6),
        after in proptest::collection::vec(noise(), 0..6),
    ) {
        check(Dialect::V1_1, before, mid, after)?;
    }

    #[test]
    fn noise_never_changes_the_outcome_legacy(
        before in proptest::collection::vec(noise_before_terminal(), 0..6),
        mid in proptest::collection::vec(noise_before_terminal(), 0..6),
        after in proptest::collection::vec(noise(), 0..6),
    ) {
        check(Dialect::Legacy, before, mid, after)?;
    }
}
