//! A minimal fast ARCP server: both dialects, an echo tool, no event log, no
//! idempotency index, TCP_NODELAY, and every batch of replies written with a
//! single flush.
//!
//! It answers each request with the three frames the published runtimes
//! send, in their field order (captures in `arcp-types/tests/fixtures/`):
//! - legacy (`tool.invoke`, as the Rust runtime 2.0.0): `job.accepted`,
//!   `job.started`, `job.completed`, each with `correlation_id`;
//! - v1.1 (`job.submit`, as the Python runtime 1.1.3): `job.accepted` with
//!   `payload.request_id`, one `job.event` (a log line), `job.result`.
//!
//! Two extra tools exist for the memory benchmark: `hold` is accepted (and
//! started) but its terminal is withheld until a `release` call arrives on
//! the same connection, which completes every held job and itself.
//!
//! Requests are parsed with borrowed serde structs (no `Value` tree) and
//! replies are formatted straight into strings, so this server costs a few
//! microseconds per call and stays out of the way of the clients measured.

use std::fmt::Write as _;

use futures_util::{FutureExt, SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use crate::listener;

/// Serves on an ephemeral loopback port; prints `ARCP_URL=...` once listening.
pub(crate) fn serve(port: u16) -> std::io::Result<()> {
    // One thread: a single connection is served by one task anyway, and the
    // machine has two cores (one for the client, one for this server).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = listener::bind_and_announce(port, "ws").await?;
        loop {
            let tcp = listener::accept(&listener).await;
            tokio::spawn(connection(tcp));
        }
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Legacy,
    V1_1,
}

#[derive(Deserialize)]
struct Req<'a> {
    #[serde(borrow, rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    id: &'a str,
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct LegacyInvoke<'a> {
    #[serde(borrow)]
    tool: &'a str,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Submit<'a> {
    #[serde(borrow)]
    agent: &'a str,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct PingBody<'a> {
    #[serde(borrow, default)]
    nonce: Option<&'a str>,
}

struct Held {
    request: String,
    job: String,
    value: String,
}

struct Conn {
    dialect: Dialect,
    session: String,
    seq: u64,
    ids: IdGen,
    /// RFC 3339 timestamp, refreshed once per batch of replies.
    now: String,
    held: Vec<Held>,
    out: Vec<String>,
}

/// Monotonic ULIDs without a clock read or an allocation per id.
struct IdGen {
    next: ulid::Ulid,
}

impl IdGen {
    fn new() -> Self {
        IdGen {
            next: ulid::Ulid::new(),
        }
    }

    fn push(&mut self, prefix: &str, out: &mut String) {
        let mut buf = [0u8; ulid::ULID_LEN];
        out.push_str(prefix);
        out.push_str(self.next.array_to_str(&mut buf));
        self.next = ulid::Ulid(self.next.0.wrapping_add(1));
    }

    fn string(&mut self, prefix: &str) -> String {
        let mut s = String::with_capacity(prefix.len() + ulid::ULID_LEN);
        self.push(prefix, &mut s);
        s
    }
}

async fn connection(tcp: TcpStream) {
    let _ = tcp.set_nodelay(true);
    let config = WebSocketConfig::default().max_message_size(Some(64 << 20));
    let Ok(mut ws) = tokio_tungstenite::accept_async_with_config(tcp, Some(config)).await else {
        return;
    };
    let mut conn = Conn {
        dialect: Dialect::Legacy,
        session: String::new(),
        seq: 0,
        ids: IdGen::new(),
        now: arcp_types::now_rfc3339(),
        held: Vec::new(),
        out: Vec::with_capacity(256),
    };
    let mut open = true;
    while open {
        let first = match ws.next().await {
            Some(Ok(m)) => m,
            _ => break,
        };
        conn.now = arcp_types::now_rfc3339();
        open = conn.on_message(first);
        // Everything that already arrived is answered in the same flush.
        while open {
            match ws.next().now_or_never() {
                Some(Some(Ok(m))) => open = conn.on_message(m),
                Some(_) => open = false,
                None => break,
            }
        }
        for text in conn.out.drain(..) {
            if ws.feed(Message::text(text)).await.is_err() {
                return;
            }
        }
        if ws.flush().await.is_err() {
            return;
        }
    }
    let _ = ws.close(None).await;
}

impl Conn {
    /// Handles one inbound message; false ends the connection.
    fn on_message(&mut self, msg: Message) -> bool {
        let text = match &msg {
            Message::Text(t) => t.as_str(),
            Message::Close(_) => return false,
            _ => return true,
        };
        let Ok(req) = serde_json::from_str::<Req>(text) else {
            return true;
        };
        let payload = req.payload.map_or("{}", RawValue::get);
        match req.kind {
            "session.open" => {
                self.dialect = Dialect::Legacy;
                self.session = self.ids.string("sess_");
                self.legacy_accepted(req.id);
            }
            "session.hello" => {
                self.dialect = Dialect::V1_1;
                self.session = self.ids.string("sess_");
                self.welcome();
            }
            "tool.invoke" => {
                if let Ok(inv) = serde_json::from_str::<LegacyInvoke>(payload) {
                    let args = inv.arguments.map_or("null", RawValue::get);
                    self.job(req.id, inv.tool, args);
                }
            }
            "job.submit" => {
                if let Ok(sub) = serde_json::from_str::<Submit>(payload) {
                    let args = sub.input.map_or("null", RawValue::get);
                    self.job(req.id, sub.agent, args);
                }
            }
            "session.ping" | "ping" => {
                let body: PingBody = serde_json::from_str(payload).unwrap_or_default();
                self.pong(req.id, body.nonce.unwrap_or(""));
            }
            "session.close" => return false,
            _ => {} // session.ack and anything else: nothing to answer
        }
        true
    }

    fn job(&mut self, request: &str, tool: &str, args: &str) {
        let job = self.ids.string("job_");
        self.accepted(request, &job, tool);
        self.progress(request, &job, tool);
        match tool {
            "hold" => self.held.push(Held {
                request: request.to_owned(),
                job,
                value: args.to_owned(),
            }),
            "release" => {
                for h in std::mem::take(&mut self.held) {
                    self.terminal(&h.request, &h.job, &h.value);
                }
                self.terminal(request, &job, args);
            }
            _ => self.terminal(request, &job, args),
        }
    }

    /// Common envelope head, up to and including `"type":"<kind>"`.
    fn head(&mut self, s: &mut String, kind: &str, job: Option<&str>, corr: Option<&str>) {
        match self.dialect {
            Dialect::Legacy => {
                s.push_str("{\"arcp\":\"1.1\",\"id\":\"");
                self.ids.push("msg_", s);
                let _ = write!(
                    s,
                    "\",\"timestamp\":\"{}\",\"session_id\":\"{}\"",
                    self.now, self.session
                );
                if let Some(job) = job {
                    let _ = write!(s, ",\"job_id\":\"{job}\"");
                }
                if let Some(corr) = corr {
                    let _ = write!(s, ",\"correlation_id\":\"{corr}\"");
                }
                if job.is_some() {
                    self.seq += 1;
                    let _ = write!(s, ",\"event_seq\":{}", self.seq);
                }
                let _ = write!(s, ",\"type\":\"{kind}\"");
            }
            Dialect::V1_1 => {
                s.push_str("{\"arcp\":\"1.1\",\"id\":\"");
                self.ids.push("", s);
                let _ = write!(
                    s,
                    "\",\"type\":\"{kind}\",\"session_id\":\"{}\"",
                    self.session
                );
                if let Some(job) = job {
                    let _ = write!(s, ",\"job_id\":\"{job}\"");
                    if kind != "job.accepted" {
                        self.seq += 1;
                        let _ = write!(s, ",\"event_seq\":{}", self.seq);
                    }
                }
            }
        }
    }

    fn legacy_accepted(&mut self, open_id: &str) {
        let mut s = String::with_capacity(512);
        self.head(&mut s, "session.accepted", None, Some(open_id));
        let _ = write!(
            s,
            ",\"payload\":{{\"session_id\":\"{}\",\"runtime\":{{\"kind\":\"arcp-bench-fast\",\"version\":\"1.0.0\",\"trust_level\":\"trusted\"}},\"capabilities\":{{\"streaming\":true,\"durable_jobs\":true,\"artifacts\":false,\"subscriptions\":false}},\"lease\":{{\"expires_at\":\"{}\"}}}}}}",
            self.session, self.now
        );
        self.out.push(s);
    }

    fn welcome(&mut self) {
        let mut s = String::with_capacity(512);
        self.head(&mut s, "session.welcome", None, None);
        let token = self.ids.string("rtk_");
        let _ = write!(
            s,
            ",\"payload\":{{\"runtime\":{{\"name\":\"arcp-bench-fast\",\"version\":\"1.0.0\"}},\"session_id\":\"{}\",\"resume_token\":\"{token}\",\"resume_window_sec\":600,\"capabilities\":{{\"encodings\":[\"json\"],\"features\":[\"heartbeat\",\"ack\"]}},\"accepted_at\":\"{}\"}}}}",
            self.session, self.now
        );
        self.out.push(s);
    }

    fn pong(&mut self, ping_id: &str, nonce: &str) {
        let mut s = String::with_capacity(256);
        self.head(&mut s, "session.pong", None, Some(ping_id));
        let _ = write!(
            s,
            ",\"payload\":{{\"ping_nonce\":\"{nonce}\",\"received_at\":\"{}\"}}}}",
            self.now
        );
        self.out.push(s);
    }

    fn accepted(&mut self, request: &str, job: &str, tool: &str) {
        let mut s = String::with_capacity(384);
        match self.dialect {
            Dialect::Legacy => {
                self.head(&mut s, "job.accepted", Some(job), Some(request));
                let _ = write!(s, ",\"payload\":{{\"job_id\":\"{job}\"}}}}");
            }
            Dialect::V1_1 => {
                self.head(&mut s, "job.accepted", Some(job), None);
                let _ = write!(
                    s,
                    ",\"payload\":{{\"job_id\":\"{job}\",\"agent\":\"{tool}\",\"accepted_at\":\"{}\",\"lease\":{{}},\"request_id\":\"{request}\"}}}}",
                    self.now
                );
            }
        }
        self.out.push(s);
    }

    fn progress(&mut self, request: &str, job: &str, tool: &str) {
        let mut s = String::with_capacity(384);
        match self.dialect {
            Dialect::Legacy => {
                self.head(&mut s, "job.started", Some(job), Some(request));
                let _ = write!(s, ",\"payload\":{{\"description\":\"invoking {tool}\"}}}}");
            }
            Dialect::V1_1 => {
                self.head(&mut s, "job.event", Some(job), None);
                let _ = write!(
                    s,
                    ",\"payload\":{{\"kind\":\"log\",\"ts\":\"{}\",\"body\":{{\"level\":\"info\",\"message\":\"{tool} started\"}}}}}}",
                    self.now
                );
            }
        }
        self.out.push(s);
    }

    fn terminal(&mut self, request: &str, job: &str, value: &str) {
        let mut s = String::with_capacity(384 + value.len());
        match self.dialect {
            Dialect::Legacy => {
                self.head(&mut s, "job.completed", Some(job), Some(request));
                let _ = write!(s, ",\"payload\":{{\"value\":{value}}}}}");
            }
            Dialect::V1_1 => {
                self.head(&mut s, "job.result", Some(job), None);
                let _ = write!(
                    s,
                    ",\"payload\":{{\"final_status\":\"success\",\"result\":{value},\"completed_at\":\"{}\"}}}}",
                    self.now
                );
            }
        }
        self.out.push(s);
    }
}

/// The reply frames this server sends for one echo call in a dialect
/// (`legacy` or not), and the request id they answer; for the codec benchmark.
pub(crate) fn sample_replies(legacy: bool, args: &str) -> Vec<String> {
    let mut ids = IdGen::new();
    let session = ids.string("sess_");
    let mut conn = Conn {
        dialect: if legacy {
            Dialect::Legacy
        } else {
            Dialect::V1_1
        },
        session,
        seq: 0,
        ids,
        now: arcp_types::now_rfc3339(),
        held: Vec::new(),
        out: Vec::new(),
    };
    let request = arcp_types::new_message_id();
    conn.job(&request, "echo", args);
    conn.out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both clients measured must accept what the fast server sends.
    #[test]
    fn replies_decode_with_our_codec_and_the_reference_types() {
        for legacy in [true, false] {
            let dialect = if legacy {
                arcp_types::Dialect::Legacy
            } else {
                arcp_types::Dialect::V1_1
            };
            let replies = sample_replies(legacy, r#"{"order":4812}"#);
            assert_eq!(replies.len(), 3);
            for r in &replies {
                let frame = dialect.decode(r).expect("our codec decodes it");
                assert!(frame.request_id().is_some() || frame.job_id().is_some());
                if legacy {
                    serde_json::from_str::<arcp_core::Envelope>(r)
                        .expect("the reference client's envelope type parses it");
                }
            }
        }
    }
}
