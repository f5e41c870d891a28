//! The HTTP ceiling: plain reqwest, no ARCP client. Each call POSTs the
//! request our client sends (the same `job.submit` envelope, encoded by our
//! codec once, a fresh envelope id patched in per call) with the same
//! headers (`Content-Type`, `Accept`, `Idempotency-Key`, `Authorization`,
//! `User-Agent`) through one `reqwest::Client` (keep-alive, TCP_NODELAY,
//! as ours), reads the whole body and checks by a byte scan that it holds
//! the terminal: no JSON parsing, no retries, no state per call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arcp_types::{Dialect, Frame, IdempotencyKey, Invoke, Message};
use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};

/// What our client sends in `Accept` (`arcp-client/src/http/call.rs`).
const ACCEPT_BOTH: &str = "application/x-ndjson, application/json;q=0.9";
const TERMINAL: &[u8] = b"\"type\":\"job.result\"";

/// A raw HTTP caller of one tool; cheap to clone.
#[derive(Clone)]
pub(crate) struct RawHttp {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    url: reqwest::Url,
    template: String,
    /// Where the envelope id's 26 characters after `msg_` are.
    id_at: std::ops::Range<usize>,
    key: HeaderValue,
    auth: HeaderValue,
    user_agent: HeaderValue,
    seq: AtomicU64,
}

/// Our client's request for one call of `tool` with the bench's arguments,
/// as wire text, and where its envelope id is.
pub(crate) fn template(tool: &str) -> (String, String, std::ops::Range<usize>) {
    let key = IdempotencyKey::new().to_string();
    let mut frame = Frame::new(Message::Invoke(
        Invoke::new(tool, crate::clients::echo_args()).with_idempotency_key(key.clone()),
    ));
    frame.envelope.trace_id = Some(arcp_types::new_trace_id());
    let id = frame.envelope.id.clone();
    let text = Dialect::V1_1.encode(&frame);
    let at = text.find(&id).expect("the id is in the frame") + "msg_".len();
    (text, key, at..at + id.len() - "msg_".len())
}

impl RawHttp {
    /// A caller of `tool` at the endpoint `url`.
    pub(crate) fn new(url: &str, tool: &str) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_idle_timeout(std::time::Duration::from_secs(60))
            .build()
            .map_err(|e| e.to_string())?;
        let (template, key, id_at) = template(tool);
        let header = |text: String| HeaderValue::from_str(&text).map_err(|e| e.to_string());
        Ok(RawHttp {
            inner: Arc::new(Inner {
                http,
                url: reqwest::Url::parse(url).map_err(|e| e.to_string())?,
                template,
                id_at,
                key: header(format!("\"{key}\""))?,
                auth: header(format!("Bearer {}", crate::TOKEN))?,
                user_agent: header(format!("arcp-rust/{}", env!("CARGO_PKG_VERSION")))?,
                seq: AtomicU64::new(0),
            }),
        })
    }

    /// The request of one call: the template under a fresh envelope id.
    fn body(&self) -> Vec<u8> {
        let inner = &*self.inner;
        let mut body = inner.template.clone().into_bytes();
        let mut n = inner.seq.fetch_add(1, Ordering::Relaxed);
        for digit in body[inner.id_at.clone()].iter_mut().rev() {
            *digit = b'0' + (n % 10) as u8;
            n /= 10;
        }
        body
    }

    /// Sends one call and returns the response once its head arrived.
    pub(crate) async fn send(&self) -> Result<reqwest::Response, String> {
        let inner = &*self.inner;
        let response = inner
            .http
            .post(inner.url.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(ACCEPT, HeaderValue::from_static(ACCEPT_BOTH))
            .header("idempotency-key", inner.key.clone())
            .header(AUTHORIZATION, inner.auth.clone())
            .header(USER_AGENT, inner.user_agent.clone())
            .body(self.body())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if response.status() != reqwest::StatusCode::OK {
            return Err(format!("HTTP {}", response.status()));
        }
        Ok(response)
    }

    /// Reads a response whole; it must hold the terminal.
    pub(crate) async fn finish(response: reqwest::Response) -> Result<(), String> {
        let body = response.bytes().await.map_err(|e| e.to_string())?;
        if body.windows(TERMINAL.len()).any(|w| w == TERMINAL) {
            Ok(())
        } else {
            Err("the response holds no terminal".into())
        }
    }

    /// One call, to its terminal.
    pub(crate) async fn call(&self) -> Result<(), String> {
        Self::finish(self.send().await?).await
    }
}
