//! A minimal fast server of the HTTP binding (`docs/http-binding.md`):
//! HTTP/1.1 with keep-alive, one `job.submit` envelope per `POST`, an echo
//! tool, no idempotency index, TCP_NODELAY, single-threaded.
//!
//! It answers as a runtime of the binding answers a client that prefers a
//! stream (`Accept: application/x-ndjson`): `200`, chunked
//! `application/x-ndjson`, the envelopes the Python runtime 1.1.3 sends for
//! a call, in its field order and without a session (`job.accepted` with
//! `payload.request_id`, one `job.event` log line, `job.result`), each line
//! a chunk, all written at once. A client that accepts only JSON gets the
//! terminal alone with a `Content-Length`. A request without the bench's
//! bearer token gets `401`.
//!
//! For the memory benchmark, `hold` is accepted (its head, `job.accepted`
//! and event are written at once) but its terminal is withheld until a
//! `release` call arrives on any connection.
//!
//! Requests are parsed with httparse and borrowed serde structs, replies
//! formatted straight into one buffer per read: a few microseconds per call.

use std::fmt::Write as _;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::listener;

/// Largest request head.
const MAX_HEAD: usize = 16 * 1024;
/// Largest request body.
const MAX_BODY: usize = 16 << 20;
const NDJSON: &str = "application/x-ndjson";

/// Serves on an ephemeral loopback port; prints `ARCP_URL=http://...` once
/// listening.
pub(crate) fn serve(port: u16) -> std::io::Result<()> {
    // One thread, as the WebSocket fast server: the client gets the other core.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = listener::bind_and_announce(port, "http").await?;
        // Bumped by each `release`: every held call then completes.
        let releases = Arc::new(watch::Sender::new(0u64));
        loop {
            let tcp = listener::accept(&listener).await;
            tokio::spawn(connection(tcp, releases.clone()));
        }
    })
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    id: &'a str,
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Submit<'a> {
    #[serde(borrow)]
    agent: &'a str,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

/// One request, read whole.
struct Request {
    /// Bytes of head and body (removed from the read buffer once answered).
    len: usize,
    authorized: bool,
    ndjson: bool,
    body: std::ops::Range<usize>,
}

/// The request at the start of `buf`: `Ok(None)` until it is all there.
fn parse(buf: &[u8]) -> Result<Option<Request>, &'static str> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut request = httparse::Request::new(&mut headers);
    let head = match request.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => return Err("head too large"),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err("malformed request"),
    };
    let mut length = 0;
    let (mut authorized, mut ndjson) = (false, false);
    for h in request.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            length = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or("invalid content-length")?;
        } else if h.name.eq_ignore_ascii_case("authorization") {
            authorized = h.value.strip_prefix(b"Bearer ") == Some(crate::TOKEN.as_bytes());
        } else if h.name.eq_ignore_ascii_case("accept") {
            ndjson = h
                .value
                .windows(NDJSON.len())
                .any(|w| w == NDJSON.as_bytes());
        }
    }
    if length > MAX_BODY {
        return Err("body too large");
    }
    if buf.len() < head + length {
        return Ok(None);
    }
    Ok(Some(Request {
        len: head + length,
        authorized,
        ndjson,
        body: head..head + length,
    }))
}

/// Monotonic ULIDs without a clock read per id.
struct Ids(ulid::Ulid);

impl Ids {
    fn push(&mut self, prefix: &str, out: &mut String) {
        let mut buf = [0u8; ulid::ULID_LEN];
        out.push_str(prefix);
        out.push_str(self.0.array_to_str(&mut buf));
        self.0 = ulid::Ulid(self.0 .0.wrapping_add(1));
    }
}

/// The envelopes of one call, as lines without their newline.
struct Reply {
    accepted: String,
    event: String,
    result: String,
}

fn reply(ids: &mut Ids, now: &str, request: &str, tool: &str, value: &str) -> Reply {
    let mut job = String::with_capacity(30);
    ids.push("job_", &mut job);
    let mut head = |kind: &str, seq: Option<u32>| {
        let mut s = String::with_capacity(320 + value.len());
        s.push_str("{\"arcp\":\"1.1\",\"id\":\"");
        ids.push("", &mut s);
        let _ = write!(s, "\",\"type\":\"{kind}\",\"job_id\":\"{job}\"");
        if let Some(seq) = seq {
            let _ = write!(s, ",\"event_seq\":{seq}");
        }
        s
    };
    let mut accepted = head("job.accepted", None);
    let mut event = head("job.event", Some(1));
    let mut result = head("job.result", Some(2));
    let _ = write!(
        accepted,
        ",\"payload\":{{\"job_id\":\"{job}\",\"agent\":\"{tool}\",\"accepted_at\":\"{now}\",\"lease\":{{}},\"request_id\":\"{request}\"}}}}"
    );
    let _ = write!(
        event,
        ",\"payload\":{{\"kind\":\"log\",\"ts\":\"{now}\",\"body\":{{\"level\":\"info\",\"message\":\"{tool} started\"}}}}}}"
    );
    let _ = write!(
        result,
        ",\"payload\":{{\"final_status\":\"success\",\"result\":{value},\"completed_at\":\"{now}\"}}}}"
    );
    Reply {
        accepted,
        event,
        result,
    }
}

fn chunk(out: &mut Vec<u8>, line: &str) {
    let _ = write!(ByteWriter(out), "{:x}\r\n", line.len() + 1);
    out.extend_from_slice(line.as_bytes());
    out.extend_from_slice(b"\n\r\n");
}

const STREAM_HEAD: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n";
const STREAM_END: &[u8] = b"0\r\n\r\n";

fn whole(out: &mut Vec<u8>, status: &str, content_type: &str, body: &str) {
    let _ = write!(
        ByteWriter(out),
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
}

/// `fmt::Write` into a byte buffer.
struct ByteWriter<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for ByteWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// What a request asks of its connection after its answer is buffered.
enum After {
    Next,
    /// Wait for a release after the `seen`-th, then write this terminal
    /// (and the stream's end).
    Hold {
        terminal: Vec<u8>,
        seen: u64,
    },
    Close,
}

async fn connection(mut tcp: TcpStream, releases: Arc<watch::Sender<u64>>) {
    let _ = tcp.set_nodelay(true);
    let mut ids = Ids(ulid::Ulid::new());
    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    let mut out: Vec<u8> = Vec::with_capacity(8192);
    let mut releases_seen = releases.subscribe();
    loop {
        let now = arcp_types::now_rfc3339();
        // Every complete request already read is answered in one write.
        let mut after = After::Next;
        while matches!(after, After::Next) {
            let request = match parse(&buf) {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(why) => {
                    whole(&mut out, "400 Bad Request", "text/plain", why);
                    after = After::Close;
                    break;
                }
            };
            after = answer(&request, &buf, &mut out, &mut ids, &now, &releases);
            buf.drain(..request.len);
        }
        if !out.is_empty() {
            if tcp.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        match after {
            After::Next => {}
            After::Close => return,
            After::Hold { terminal, seen } => {
                if releases_seen.wait_for(|n| *n > seen).await.is_err() {
                    return;
                }
                if tcp.write_all(&terminal).await.is_err() {
                    return;
                }
                continue;
            }
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(8192);
        }
        match tcp.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Buffers the answer to one request.
fn answer(
    request: &Request,
    buf: &[u8],
    out: &mut Vec<u8>,
    ids: &mut Ids,
    now: &str,
    releases: &watch::Sender<u64>,
) -> After {
    if !request.authorized {
        whole(
            out,
            "401 Unauthorized",
            "application/problem+json",
            r#"{"type":"about:blank","status":401,"detail":"bad token"}"#,
        );
        return After::Next;
    }
    let body = &buf[request.body.clone()];
    let submit = serde_json::from_slice::<Envelope>(body)
        .ok()
        .filter(|e| e.kind == "job.submit")
        .and_then(|e| {
            let payload = e.payload.map_or("{}", RawValue::get);
            serde_json::from_str::<Submit>(payload)
                .ok()
                .map(|s| (e.id, s))
        });
    let Some((request_id, submit)) = submit else {
        whole(
            out,
            "400 Bad Request",
            "text/plain",
            "not a job.submit envelope",
        );
        return After::Next;
    };
    let value = submit.input.map_or("null", RawValue::get);
    let tool = submit.agent;
    let reply = reply(ids, now, request_id, tool, value);
    if tool == "release" {
        releases.send_modify(|n| *n += 1);
    }
    if request.ndjson {
        out.extend_from_slice(STREAM_HEAD);
        chunk(out, &reply.accepted);
        chunk(out, &reply.event);
        let mut terminal = Vec::with_capacity(reply.result.len() + 16);
        chunk(&mut terminal, &reply.result);
        terminal.extend_from_slice(STREAM_END);
        if tool == "hold" {
            return After::Hold {
                terminal,
                seen: *releases.borrow(),
            };
        }
        out.extend_from_slice(&terminal);
        After::Next
    } else {
        let mut terminal = Vec::with_capacity(reply.result.len() + 96);
        whole(&mut terminal, "200 OK", "application/json", &reply.result);
        if tool == "hold" {
            return After::Hold {
                terminal,
                seen: *releases.borrow(),
            };
        }
        out.extend_from_slice(&terminal);
        After::Next
    }
}

/// The response this server sends to one echo call (NDJSON), for tests.
#[cfg(test)]
fn sample_response(request_id: &str, value: &str) -> Vec<u8> {
    let mut ids = Ids(ulid::Ulid::new());
    let reply = reply(
        &mut ids,
        &arcp_types::now_rfc3339(),
        request_id,
        "echo",
        value,
    );
    let mut out = STREAM_HEAD.to_vec();
    for line in [&reply.accepted, &reply.event, &reply.result] {
        chunk(&mut out, line);
    }
    out.extend_from_slice(STREAM_END);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the server sends decodes with our codec, one envelope a line,
    /// and answers the request by its id.
    #[test]
    fn replies_are_v1_1_envelopes_one_per_line() {
        let response = sample_response("msg_01", r#"{"order":4812}"#);
        let text = std::str::from_utf8(&response).unwrap();
        let (_, body) = text.split_once("\r\n\r\n").unwrap();
        let lines: Vec<&str> = body
            .split("\r\n")
            .filter(|l| l.starts_with('{'))
            .map(str::trim_end)
            .collect();
        assert_eq!(lines.len(), 3);
        let kinds: Vec<String> = lines
            .iter()
            .map(|l| {
                let frame = arcp_types::Dialect::V1_1.decode(l).expect("decodes");
                frame.envelope.kind
            })
            .collect();
        assert_eq!(kinds, ["job.accepted", "job.event", "job.result"]);
        assert!(lines[0].contains(r#""request_id":"msg_01""#));
        assert!(lines[2].contains(r#""result":{"order":4812}"#));
    }

    #[test]
    fn requests_are_read_whole_and_checked() {
        let body = r#"{"type":"job.submit"}"#;
        let head = format!(
            "POST /arcp HTTP/1.1\r\nAuthorization: Bearer {}\r\nAccept: {NDJSON}\r\nContent-Length: {}\r\n\r\n",
            crate::TOKEN,
            body.len()
        );
        let full = format!("{head}{body}");
        let r = parse(full.as_bytes()).unwrap().unwrap();
        assert!(r.authorized && r.ndjson);
        assert_eq!(r.len, full.len());
        assert_eq!(&full.as_bytes()[r.body], body.as_bytes());
        assert!(parse(&full.as_bytes()[..full.len() - 1]).unwrap().is_none());
        let wrong = full.replace(crate::TOKEN, "nope");
        assert!(!parse(wrong.as_bytes()).unwrap().unwrap().authorized);
    }
}
