//! The HTTP binding (`docs/http-binding.md`) on a second loopback port: one
//! `job.submit` envelope per `POST`, answered with one terminal envelope
//! (`application/json`) or, when the client accepts
//! `application/x-ndjson`, a chunked stream of envelopes up to the terminal.
//!
//! A minimal HTTP/1.1 server: one request per connection (`Connection:
//! close`), a `Content-Length` body, bounded head and body sizes, a read
//! timeout. The runtime logic is the engine's (`Engine::http_submit`):
//! sessions, idempotency bindings, replay, tools, execution counts and
//! faults are the same as over WebSocket. What the binding adds:
//!
//! | situation | answer |
//! |---|---|
//! | same key and intent, job still running | 409 |
//! | same key and intent, job finished | 200, the stored terminal, `Arcp-Replayed: true` |
//! | same key, other intent | 422 |
//! | refused credentials | 401 |
//! | retryable refusal before acceptance (`RESOURCE_EXHAUSTED` / other) | 429 / 503 with `Retry-After` |
//! | anything else | 200 with the envelopes |
//!
//! Faults apply to the envelopes of a response as to WebSocket frames: a
//! drop closes the TCP connection mid-response (no terminating chunk).

use std::sync::Arc;
use std::time::Duration;

use arcp_types::{Auth, Dialect, ErrorCode, Frame, Message};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use crate::engine::{Engine, HttpSubmit, Out, OUTBOUND_CAPACITY};

/// Largest request head (request line and headers).
const MAX_HEAD: usize = 16 * 1024;
/// Largest request body (the WebSocket message limit).
const MAX_BODY: usize = 16 << 20;
/// Most request headers.
const MAX_HEADERS: usize = 64;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The response header that marks a replayed outcome.
const REPLAYED: &str = "Arcp-Replayed";
const NDJSON: &str = "application/x-ndjson";

pub(crate) async fn accept_loop(engine: Arc<Engine>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                let (abort_tx, abort_rx) = oneshot::channel();
                let task = tokio::spawn(serve(Arc::clone(&engine), stream, abort_rx));
                let _ = abort_tx.send(task.abort_handle());
            }
            // Out of file descriptors and the like: back off, keep serving.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

struct Request {
    method: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
            .map(str::trim)
    }
}

/// Why no request could be read.
enum Refused {
    /// Answer with this status and detail.
    Status(u16, String),
    /// The client went away or sent nothing in time: close.
    Gone,
}

/// Ends the submit's connection and session however the task ends.
struct Registration {
    engine: Arc<Engine>,
    conn: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.engine.http_done(self.conn);
    }
}

async fn serve(engine: Arc<Engine>, mut stream: TcpStream, abort: oneshot::Receiver<AbortHandle>) {
    let abort = abort.await.ok();
    let request = match tokio::time::timeout(READ_TIMEOUT, read_request(&mut stream)).await {
        Ok(Ok(request)) => request,
        Ok(Err(Refused::Status(status, detail))) => {
            let _ = problem(&mut stream, status, &detail, &[]).await;
            return;
        }
        Ok(Err(Refused::Gone)) | Err(_) => return,
    };
    if request.method != "POST" {
        let detail = "the ARCP HTTP binding takes POST";
        let _ = problem(&mut stream, 405, detail, &[("Allow", "POST".into())]).await;
        return;
    }
    let auth = match request.header("authorization") {
        None => Auth::none(),
        Some(value) => match value.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => {
                Auth::bearer(token.trim())
            }
            _ => Auth::new("unsupported", None),
        },
    };
    let key = match request.header("idempotency-key").map(parse_key) {
        None => None,
        Some(Some(key)) => Some(key),
        Some(None) => {
            let detail = "Idempotency-Key must be a quoted string (RFC 8941) or a bare token";
            let _ = problem(&mut stream, 400, detail, &[]).await;
            return;
        }
    };
    let ndjson = request.header("accept").is_some_and(|a| a.contains(NDJSON));
    let Ok(body) = std::str::from_utf8(&request.body) else {
        let _ = problem(&mut stream, 400, "the body is not UTF-8", &[]).await;
        return;
    };
    let (tx, rx) = mpsc::channel(OUTBOUND_CAPACITY);
    let (conn, answer) = engine.http_submit(&auth, key.as_deref(), body, tx);
    let _ = match answer {
        HttpSubmit::BadRequest(detail) => problem(&mut stream, 400, &detail, &[]).await,
        HttpSubmit::Unauthenticated(detail) => {
            let challenge = [("WWW-Authenticate", "Bearer".to_owned())];
            problem(&mut stream, 401, &detail, &challenge).await
        }
        HttpSubmit::Conflict(detail) => problem(&mut stream, 422, &detail, &[]).await,
        HttpSubmit::InFlight => {
            let detail = "a request with this idempotency key is still being processed";
            problem(&mut stream, 409, detail, &[]).await
        }
        HttpSubmit::Replay(terminal) => {
            let mut response = Response::new(ndjson, true);
            let written = response.frame(&mut stream, &terminal).await.map(|_| ());
            if written.is_ok() {
                let envelope = Dialect::V1_1.to_envelope(&terminal);
                engine.written(conn, envelope, &terminal, false);
            }
            written
        }
        HttpSubmit::Ignored => {
            // Black hole: hold the request until the client gives up.
            let mut sink = [0u8; 512];
            while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
            Ok(())
        }
        HttpSubmit::Started(conn) => {
            let _registration = Registration {
                engine: Arc::clone(&engine),
                conn,
            };
            if let Some(abort) = abort {
                engine.set_abort(conn, abort);
            }
            respond(&engine, conn, &mut stream, rx, ndjson).await;
            Ok(())
        }
    };
}

/// Writes a submit's envelopes as they come, until its terminal (or a fault
/// or the client ends the response).
async fn respond(
    engine: &Engine,
    conn: u64,
    stream: &mut TcpStream,
    mut rx: mpsc::Receiver<Out>,
    ndjson: bool,
) {
    let mut response = Response::new(ndjson, false);
    let mut first = true;
    while let Some(out) = rx.recv().await {
        let (frame, stray) = match out {
            Out::Frame(frame) => (frame, false),
            Out::Stray(frame) => (frame, true),
            // A drop or close: end abruptly, mid-response.
            Out::Close(_) | Out::Kill => return,
        };
        let action = engine.outbound_action(conn);
        if let Some(delay) = action.delay {
            tokio::time::sleep(delay).await;
        }
        if action.drop_before {
            return;
        }
        if std::mem::take(&mut first) {
            if let Some((status, retry_after)) = refusal(&frame.message) {
                let headers: Vec<(&str, String)> = retry_after
                    .map(|secs| ("Retry-After", secs.to_string()))
                    .into_iter()
                    .collect();
                let body = Dialect::V1_1.encode(&frame);
                let _ = write_whole(stream, status, "application/json", &headers, &body).await;
                return;
            }
        }
        let done = match response.frame(stream, &frame).await {
            Ok(done) => done,
            Err(_) => return,
        };
        if ndjson || done {
            // JSON responses carry only the terminal.
            let envelope = Dialect::V1_1.to_envelope(&frame);
            engine.written(conn, envelope, &frame, stray);
        }
        if done {
            return;
        }
        if action.drop_after {
            return;
        }
    }
}

/// One response in the making: JSON (only the terminal, sent whole) or
/// NDJSON (chunked, every envelope as it comes).
struct Response {
    ndjson: bool,
    replayed: bool,
    started: bool,
}

impl Response {
    fn new(ndjson: bool, replayed: bool) -> Self {
        Response {
            ndjson,
            replayed,
            started: false,
        }
    }

    fn extra_headers(&self) -> Vec<(&'static str, String)> {
        if self.replayed {
            vec![(REPLAYED, "true".into())]
        } else {
            Vec::new()
        }
    }

    /// Writes one envelope; returns whether it was the terminal (the
    /// response is then complete).
    async fn frame(&mut self, stream: &mut TcpStream, frame: &Frame) -> std::io::Result<bool> {
        let terminal = is_terminal(&frame.message);
        let text = Dialect::V1_1.encode(frame);
        if !self.ndjson {
            if terminal {
                let headers = self.extra_headers();
                write_whole(stream, 200, "application/json", &headers, &text).await?;
            }
            return Ok(terminal);
        }
        if !self.started {
            self.started = true;
            let mut head = status_line(200);
            head.push_str(&format!(
                "Content-Type: {NDJSON}\r\nTransfer-Encoding: chunked\r\n"
            ));
            for (name, value) in self.extra_headers() {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            stream.write_all(head.as_bytes()).await?;
        }
        let line = format!("{:x}\r\n{text}\n\r\n", text.len() + 1);
        stream.write_all(line.as_bytes()).await?;
        if terminal {
            stream.write_all(b"0\r\n\r\n").await?;
            stream.shutdown().await?;
        }
        Ok(terminal)
    }
}

fn is_terminal(message: &Message) -> bool {
    matches!(
        message,
        Message::Result(_)
            | Message::Error(_)
            | Message::Cancelled(_)
            | Message::SessionError(_)
            | Message::Nack(_)
            | Message::Rejected(_)
    )
}

/// The status of a refusal that comes before acceptance, where the binding
/// gives it one, and its `Retry-After` in whole seconds.
fn refusal(message: &Message) -> Option<(u16, Option<u64>)> {
    let (Message::Error(e) | Message::SessionError(e) | Message::Nack(e) | Message::Rejected(e)) =
        message
    else {
        return None;
    };
    let retry_after = e
        .retry_after()
        .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0));
    match &e.code {
        ErrorCode::DuplicateKey => Some((422, None)),
        ErrorCode::Unauthenticated => Some((401, None)),
        ErrorCode::ResourceExhausted if e.is_retryable() => Some((429, retry_after)),
        _ if e.is_retryable() => Some((503, retry_after)),
        _ => None,
    }
}

/// The key from an `Idempotency-Key` header: an RFC 8941 sf-string
/// (`"..."` with `\"` and `\\` escapes), or, leniently, a bare token.
fn parse_key(value: &str) -> Option<String> {
    let Some(quoted) = value.strip_prefix('"') else {
        return (!value.is_empty() && !value.contains(['"', '\\'])).then(|| value.to_owned());
    };
    let mut key = String::new();
    let mut chars = quoted.chars();
    loop {
        match chars.next()? {
            '"' => return chars.as_str().is_empty().then_some(key),
            '\\' => match chars.next()? {
                c @ ('"' | '\\') => key.push(c),
                _ => return None,
            },
            c => key.push(c),
        }
    }
}

async fn read_request(stream: &mut TcpStream) -> Result<Request, Refused> {
    let mut buffer = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await.map_err(|_| Refused::Gone)?;
        if n == 0 {
            return Err(Refused::Gone);
        }
        buffer.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Request::new(&mut headers);
        let head_len = match parsed.parse(&buffer) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if buffer.len() > MAX_HEAD => {
                return Err(Refused::Status(431, "the request head is too large".into()))
            }
            Ok(httparse::Status::Partial) => continue,
            Err(e) => return Err(Refused::Status(400, format!("malformed request: {e}"))),
        };
        let method = parsed.method.unwrap_or_default().to_owned();
        let headers: Vec<(String, Vec<u8>)> = parsed
            .headers
            .iter()
            .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
            .collect();
        let request = Request {
            method,
            headers,
            body: Vec::new(),
        };
        if request.header("transfer-encoding").is_some() {
            let detail = "send the body with a Content-Length";
            return Err(Refused::Status(411, detail.into()));
        }
        let length = match request.header("content-length") {
            None => 0,
            Some(text) => text
                .parse::<usize>()
                .map_err(|_| Refused::Status(400, "invalid Content-Length".into()))?,
        };
        if length > MAX_BODY {
            let detail = format!("the body is over {MAX_BODY} bytes");
            return Err(Refused::Status(413, detail));
        }
        let mut body = buffer.split_off(head_len);
        while body.len() < length {
            let n = stream.read(&mut chunk).await.map_err(|_| Refused::Gone)?;
            if n == 0 {
                return Err(Refused::Gone);
            }
            body.extend_from_slice(&chunk[..n]);
        }
        body.truncate(length);
        return Ok(Request { body, ..request });
    }
}

fn status_line(status: u16) -> String {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Unknown",
    };
    format!("HTTP/1.1 {status} {reason}\r\nConnection: close\r\nCache-Control: no-store\r\n")
}

async fn write_whole(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    headers: &[(&str, String)],
    body: &str,
) -> std::io::Result<()> {
    let mut head = status_line(status);
    head.push_str(&format!(
        "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
        body.len()
    ));
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

/// An RFC 9457 problem response.
async fn problem(
    stream: &mut TcpStream,
    status: u16,
    detail: &str,
    headers: &[(&str, String)],
) -> std::io::Result<()> {
    let body = serde_json::json!({
        "type": "about:blank",
        "status": status,
        "detail": detail,
    })
    .to_string();
    write_whole(stream, status, "application/problem+json", headers, &body).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_as_sf_strings_or_bare_tokens() {
        assert_eq!(parse_key("\"abc\"").as_deref(), Some("abc"));
        assert_eq!(parse_key(r#""a\"b\\c""#).as_deref(), Some("a\"b\\c"));
        assert_eq!(parse_key("abc").as_deref(), Some("abc"));
        assert_eq!(parse_key("\"abc"), None);
        assert_eq!(parse_key("\"a\"b"), None);
        assert_eq!(parse_key(r#""a\x""#), None);
        assert_eq!(parse_key(""), None);
    }
}
