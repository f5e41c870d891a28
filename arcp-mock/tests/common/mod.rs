//! A raw ARCP client for driving the mock in tests: a tokio-tungstenite socket
//! plus the `arcp-types` codec, and helpers to compare envelope shapes with the
//! captured transcripts of the real runtimes.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use arcp_mock::{MockRuntime, MockRuntimeBuilder, ToolFailure};
use arcp_types::{Auth, Dialect, Frame, Invoke, Message, Open, PeerInfo, Ping, ResumeRequest};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long any single wait in a test may take.
pub(crate) const WAIT: Duration = Duration::from_secs(3);

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A builder with the tools most tests use:
/// - `echo` returns its arguments;
/// - `slow` sleeps `args.ms` milliseconds (default 300), emitting a log and a
///   progress event first, then returns its arguments;
/// - `fail` fails with `args.code` (default `PERMISSION_DENIED`).
pub(crate) fn builder(dialect: Dialect) -> MockRuntimeBuilder {
    MockRuntime::builder()
        .dialect(dialect)
        .tool("echo", |args, _ctx| async move { Ok(args) })
        .tool("slow", |args, ctx| async move {
            ctx.log("info", "slow started").await;
            ctx.progress(0, 1).await;
            let wait = args["ms"].as_u64().unwrap_or(300);
            ctx.sleep(Duration::from_millis(wait)).await;
            Ok(args)
        })
        .tool("fail", |args, _ctx| async move {
            let code = args["code"]
                .as_str()
                .unwrap_or("PERMISSION_DENIED")
                .to_owned();
            Err(
                ToolFailure::new(code.as_str(), format!("asked to fail with {code}"))
                    .retryable(false),
            )
        })
}

/// What the socket produced next.
#[allow(clippy::large_enum_variant)] // test helper; boxing buys nothing here
#[derive(Debug)]
pub(crate) enum Next {
    /// A text frame: decoded, and the wire JSON.
    Frame(Frame, Value),
    /// A WebSocket close frame with this code.
    Closed(Option<u16>),
    /// The TCP connection ended without a close frame.
    Dropped,
}

pub(crate) struct Client {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    pub dialect: Dialect,
    pub session_id: Option<String>,
    pub resume_token: Option<String>,
}

impl Client {
    pub(crate) async fn connect(mock: &MockRuntime) -> Client {
        Client::connect_url(&mock.ws_url(), mock.dialect()).await
    }

    pub(crate) async fn connect_url(url: &str, dialect: Dialect) -> Client {
        let (ws, _) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(url))
            .await
            .expect("connect timed out")
            .expect("connect failed");
        Client {
            ws,
            dialect,
            session_id: None,
            resume_token: None,
        }
    }

    /// Sends a frame (encoded by the codec), on the current session.
    pub(crate) async fn send(&mut self, frame: &Frame) {
        let mut frame = frame.clone();
        if frame.envelope.session_id.is_none() {
            frame.envelope.session_id = self.session_id.clone();
        }
        let text = self.dialect.encode(&frame);
        self.send_text(text).await;
    }

    pub(crate) async fn send_text(&mut self, text: String) {
        self.ws
            .send(WsMessage::text(text))
            .await
            .expect("send failed");
    }

    /// The next thing the socket produces (never a ping/pong control frame).
    pub(crate) async fn next(&mut self) -> Next {
        self.next_within(WAIT)
            .await
            .unwrap_or_else(|| panic!("nothing received within {WAIT:?}"))
    }

    /// As [`next`], or `None` after `wait`.
    pub(crate) async fn next_within(&mut self, wait: Duration) -> Option<Next> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let msg = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .ok()?;
            return Some(match msg {
                Some(Ok(WsMessage::Text(text))) => {
                    let value: Value = serde_json::from_str(text.as_str()).expect("not JSON");
                    let frame = self
                        .dialect
                        .decode(text.as_str())
                        .expect("undecodable frame");
                    Next::Frame(frame, value)
                }
                Some(Ok(WsMessage::Close(close))) => Next::Closed(close.map(|c| u16::from(c.code))),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => Next::Dropped,
            });
        }
    }

    /// The next frame; panics on close or drop.
    pub(crate) async fn recv(&mut self) -> (Frame, Value) {
        match self.next().await {
            Next::Frame(frame, value) => (frame, value),
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    /// Reads until a frame of wire type `kind`; panics on close or drop.
    pub(crate) async fn recv_type(&mut self, kind: &str) -> (Frame, Value) {
        loop {
            let (frame, value) = self.recv().await;
            if value["type"] == kind {
                return (frame, value);
            }
        }
    }

    /// Asserts nothing arrives for `wait`.
    pub(crate) async fn expect_silence(&mut self, wait: Duration) {
        if let Some(next) = self.next_within(wait).await {
            panic!("expected silence, got {next:?}");
        }
    }

    /// Asserts the connection is dropped without a close frame (frames before
    /// the drop are skipped and returned).
    pub(crate) async fn expect_drop(&mut self) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            match self.next().await {
                Next::Frame(_, value) => seen.push(value),
                Next::Dropped => return seen,
                Next::Closed(code) => panic!("expected an abrupt drop, got close {code:?}"),
            }
        }
    }

    /// Asserts a close frame with code 1000 (frames before it are skipped).
    pub(crate) async fn expect_close(&mut self) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            match self.next().await {
                Next::Frame(_, value) => seen.push(value),
                Next::Closed(code) => {
                    assert_eq!(code, Some(1000), "close code");
                    return seen;
                }
                Next::Dropped => panic!("expected a close frame, got a drop after {seen:?}"),
            }
        }
    }

    /// Opens a session (`session.hello` / `session.open`) and returns the
    /// welcome. v1.1 offers the codec's default features (heartbeat included).
    pub(crate) async fn handshake(&mut self, token: &str) -> (Frame, Value) {
        self.send(&open_frame(token, None, Value::Null)).await;
        let (frame, value) = self.recv().await;
        self.absorb_welcome(&frame);
        (frame, value)
    }

    /// Sends a resume hello and returns what came back.
    pub(crate) async fn resume(
        &mut self,
        token: &str,
        session_id: &str,
        resume_token: &str,
        last_event_seq: u64,
    ) -> Next {
        let resume = ResumeRequest::new(session_id, resume_token, last_event_seq);
        self.send(&open_frame(token, Some(resume), Value::Null))
            .await;
        let next = self.next().await;
        if let Next::Frame(frame, _) = &next {
            self.absorb_welcome(frame);
        }
        next
    }

    fn absorb_welcome(&mut self, frame: &Frame) {
        if let Message::Welcome(w) = &frame.message {
            self.session_id = Some(w.session_id.clone());
            self.resume_token = w.resume_token.clone();
        }
    }

    /// Submits a tool call; returns the request (envelope) id.
    pub(crate) async fn submit(&mut self, tool: &str, args: Value, key: Option<&str>) -> String {
        self.submit_frame(invoke(tool, args, key)).await
    }

    pub(crate) async fn submit_frame(&mut self, frame: Frame) -> String {
        let id = frame.envelope.id.clone();
        self.send(&frame).await;
        id
    }

    /// Sends a ping; returns its envelope id.
    pub(crate) async fn ping(&mut self, nonce: &str) -> String {
        let frame = Frame::new(Message::Ping(Ping::new(nonce)));
        let id = frame.envelope.id.clone();
        self.send(&frame).await;
        id
    }

    /// Reads frames until the terminal of `job_id`; returns every frame read.
    pub(crate) async fn until_terminal(&mut self, job_id: &str) -> Vec<(Frame, Value)> {
        let mut seen = Vec::new();
        loop {
            let (frame, value) = self.recv().await;
            let terminal = is_terminal(&frame) && frame.envelope.job_id.as_deref() == Some(job_id);
            seen.push((frame, value));
            if terminal {
                return seen;
            }
        }
    }
}

pub(crate) fn is_terminal(frame: &Frame) -> bool {
    matches!(
        frame.message,
        Message::Result(_) | Message::Error(_) | Message::Cancelled(_)
    ) && frame.envelope.job_id.is_some()
}

/// `session.hello` / `session.open` with a bearer token.
pub(crate) fn open_frame(token: &str, resume: Option<ResumeRequest>, capabilities: Value) -> Frame {
    let mut open = Open::new(PeerInfo::new("raw-probe", "0.0.1"), Auth::bearer(token))
        .with_capabilities(capabilities);
    open.resume = resume;
    Frame::new(Message::Open(open))
}

/// `job.submit` / `tool.invoke`.
pub(crate) fn invoke(tool: &str, args: Value, key: Option<&str>) -> Frame {
    let mut invoke = Invoke::new(tool, args);
    invoke.idempotency_key = key.map(str::to_owned);
    Frame::new(Message::Invoke(invoke))
}

pub(crate) fn error_code(frame: &Frame) -> String {
    match &frame.message {
        Message::Error(e) | Message::SessionError(e) | Message::Rejected(e) | Message::Nack(e) => {
            e.code.to_string()
        }
        other => panic!("not an error: {other:?}"),
    }
}

// ----------------------------------------------------------------- captures

pub(crate) fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"))
}

/// Envelopes the runtime sent, from one capture file (both capture formats).
pub(crate) fn captured_from_runtime(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(fixtures().join(file)).expect("fixture");
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(record) = serde_json::from_str::<Value>(line) else {
            continue; // the `.head` capture ends mid-line
        };
        match record["dir"].as_str() {
            Some("recv") => {
                out.push(serde_json::from_str(record["raw"].as_str().unwrap()).unwrap());
            }
            Some("<<") => out.push(record["env"].clone()),
            _ => {}
        }
    }
    out
}

/// Every runtime-sent envelope of a dialect's captures.
pub(crate) fn captured(dialect: Dialect) -> Vec<Value> {
    if dialect == Dialect::Legacy {
        let dir = fixtures().join("rust-runtime-2.0.0");
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        files
            .iter()
            .flat_map(|f| captured_from_runtime(&format!("rust-runtime-2.0.0/{f}")))
            .collect()
    } else {
        let mut all = captured_from_runtime("python-runtime-1.1.3.jsonl");
        all.extend(captured_from_runtime("python-runtime-1.1.3-resume.jsonl"));
        all
    }
}

/// The first captured runtime envelope matching `pred`.
pub(crate) fn capture(dialect: Dialect, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    captured(dialect)
        .into_iter()
        .find(|v| pred(v))
        .unwrap_or_else(|| panic!("no captured {what}"))
}

/// The JSON type of a value, by name.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Asserts two envelopes have the same shape: the same keys at every object
/// level and the same JSON types, arrays compared by type only. Paths in
/// `opaque` (such as `payload.result`) only need to be present on both;
/// keys in `extensions` may appear in the mock's envelope only.
pub(crate) fn assert_same_shape(
    mock: &Value,
    captured: &Value,
    opaque: &[&str],
    extensions: &[&str],
) {
    let mut problems = Vec::new();
    compare("", mock, captured, opaque, extensions, &mut problems);
    assert!(
        problems.is_empty(),
        "shape of the mock's `{}` differs from the capture:\n  {}\nmock:     {mock}\ncaptured: {captured}",
        mock["type"].as_str().unwrap_or("?"),
        problems.join("\n  ")
    );
}

fn compare(
    path: &str,
    mock: &Value,
    cap: &Value,
    opaque: &[&str],
    extensions: &[&str],
    problems: &mut Vec<String>,
) {
    if opaque.contains(&path) {
        return;
    }
    match (mock, cap) {
        (Value::Object(m), Value::Object(c)) => {
            for key in c.keys() {
                if !m.contains_key(key) {
                    problems.push(format!("missing `{}`", join(path, key)));
                }
            }
            for (key, mv) in m {
                let sub = join(path, key);
                match c.get(key) {
                    Some(cv) => compare(&sub, mv, cv, opaque, extensions, problems),
                    None if extensions.contains(&sub.as_str()) => {}
                    None => problems.push(format!("extra `{sub}`")),
                }
            }
        }
        _ if json_type(mock) != json_type(cap) => problems.push(format!(
            "`{path}` is {} in the mock, {} in the capture",
            json_type(mock),
            json_type(cap)
        )),
        _ => {}
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

pub(crate) fn no_features() -> Value {
    json!({"encodings": ["json"], "features": []})
}
