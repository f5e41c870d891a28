//! Helpers for the HTTP binding tests: envelopes built with the codec, a
//! client with a fast retry budget, and readers for what a server received.

#![allow(dead_code)]

use std::time::Duration;

use arcp_sdk::{Client, ClientBuilder, RetryPolicy};
use arcp_types::{
    Accepted, Dialect, Envelope, ErrorCode, ErrorReply, EventBody, Frame, JobEvent, JobResult,
    Message,
};
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

pub(crate) const TOKEN: &str = "s3cr3t-token";

/// A retry policy that gives up within a second.
pub(crate) fn fast_retry() -> RetryPolicy {
    RetryPolicy::exponential()
        .initial_delay(Duration::from_millis(5))
        .max_delay(Duration::from_millis(40))
        .outcome_poll(Duration::from_millis(5))
        .max_attempts(6)
        .max_elapsed(Duration::from_secs(10))
}

/// A client of the HTTP binding at `url` with a bearer token and fast retries.
pub(crate) fn client(url: &str) -> ClientBuilder {
    Client::builder(url)
        .bearer_token(TOKEN)
        .retry(fast_retry())
        .connect_timeout(Duration::from_secs(2))
        .default_deadline(Duration::from_secs(20))
}

fn encode(mut frame: Frame, job_id: Option<&str>) -> String {
    frame.envelope.job_id = job_id.map(str::to_owned);
    Dialect::V1_1.encode(&frame)
}

/// A terminal `job.result` carrying `value`.
pub(crate) fn result(job_id: &str, value: Value) -> String {
    encode(
        Frame::new(Message::Result(JobResult::new(Some(value)))),
        Some(job_id),
    )
}

/// A `job.error` (a terminal tool error when `job_id` is set; a refusal
/// before acceptance otherwise).
pub(crate) fn error(job_id: Option<&str>, code: ErrorCode, retryable: bool) -> String {
    let mut e = ErrorReply::new(code, "refused by the test");
    e.retryable = Some(retryable);
    encode(Frame::new(Message::Error(e)), job_id)
}

/// A `job.accepted`.
pub(crate) fn accepted(job_id: &str) -> String {
    encode(
        Frame::new(Message::Accepted(Accepted::new(job_id))),
        Some(job_id),
    )
}

/// A `job.event` of kind `progress` with a sequence number.
pub(crate) fn progress(job_id: &str, seq: u64, current: u64, total: u64) -> String {
    let mut frame = Frame::new(Message::Event(JobEvent::new(
        "progress",
        json!({"current": current, "total": total}),
    )));
    frame.envelope.event_seq = Some(seq);
    encode(frame, Some(job_id))
}

/// NDJSON: one envelope per line.
pub(crate) fn ndjson(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// A request body as an envelope.
pub(crate) fn envelope(body: &[u8]) -> Envelope {
    serde_json::from_slice(body).expect("the client sends one JSON envelope")
}

/// The exact bytes of a request body's `payload` (the intent).
pub(crate) fn raw_payload(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Raw<'a> {
        #[serde(borrow)]
        payload: &'a serde_json::value::RawValue,
    }
    let raw: Raw<'_> = serde_json::from_slice(body).expect("an envelope with a payload");
    raw.payload.get().to_owned()
}

/// Whether an event is a progress event.
pub(crate) fn is_progress(body: &EventBody) -> bool {
    matches!(body, EventBody::Progress { .. })
}

/// One request as the server saw it: its head (lowercased) and body.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) head: String,
    pub(crate) body: Vec<u8>,
}

impl Seen {
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
}

/// Reads one HTTP/1.1 request (head, then a body of its `Content-Length`)
/// from a raw connection; `None` if it closes first.
pub(crate) async fn read_request(stream: &mut TcpStream) -> Option<Seen> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(i) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut seen = Seen {
        head,
        body: buffer[head_end..].to_vec(),
    };
    let length: usize = seen
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while seen.body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        seen.body.extend_from_slice(&chunk[..n]);
    }
    Some(seen)
}
