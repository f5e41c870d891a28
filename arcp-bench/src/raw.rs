//! The raw ceiling: a bare tokio-tungstenite client exchanging the same
//! frames as our client (the request bytes are one of our client's encoded
//! requests with a per-call id patched in), TCP_NODELAY, all requests of a
//! batch written with one flush. It tracks calls by id with string scans,
//! no JSON parsing: what no real client can go below.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use arcp_types::{Auth, Dialect, Frame, IdempotencyKey, Invoke, Message, Open, PeerInfo};
use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message as Ws;

use crate::stats::{self, Sample};

type WsStream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The value of `"key":"..."` in a frame, by plain scan.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":\"");
    let start = text.find(&pat)? + pat.len();
    let len = text[start..].find('"')?;
    Some(&text[start..start + len])
}

/// The request our client would send for one echo call, as wire text, and
/// the byte range of its envelope id.
pub(crate) fn template(dialect: Dialect, session: &str) -> (String, std::ops::Range<usize>) {
    let mut frame = Frame::new(Message::Invoke(
        Invoke::new("echo", crate::clients::echo_args())
            .with_idempotency_key(IdempotencyKey::new().to_string()),
    ));
    frame.envelope.session_id = Some(session.to_owned());
    frame.envelope.trace_id = Some(arcp_types::new_trace_id());
    let id = frame.envelope.id.clone();
    let text = dialect.encode(&frame);
    let at = text.find(&id).expect("the id is in the frame");
    (text, at..at + id.len())
}

fn slot_of(id: &str) -> Option<usize> {
    id.strip_prefix("msg_")?.get(..10)?.parse().ok()
}

async fn handshake(ws: &mut WsStream, dialect: Dialect) -> Result<String, String> {
    let open = Frame::new(Message::Open(Open::new(
        PeerInfo::new("raw", "0"),
        Auth::bearer(crate::TOKEN),
    )));
    ws.send(Ws::text(dialect.encode(&open)))
        .await
        .map_err(|e| e.to_string())?;
    while let Some(msg) = ws.next().await {
        if let Ws::Text(t) = msg.map_err(|e| e.to_string())? {
            if let Ok(frame) = dialect.decode(t.as_str()) {
                if let Message::Welcome(w) = frame.message {
                    return Ok(w.session_id);
                }
            }
        }
    }
    Err("closed during the handshake".into())
}

pub(crate) async fn run(
    url: &str,
    dialect: Dialect,
    c: usize,
    warmup: Duration,
    window: Duration,
    server_pid: Option<u32>,
) -> Result<Sample, String> {
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(url, None, true)
        .await
        .map_err(|e| e.to_string())?;
    let session = handshake(&mut ws, dialect).await?;
    let (template, id_at) = template(dialect, &session);
    let mut sent: Vec<Option<Instant>> = vec![None; c];
    let mut seq = 0u64;
    let mut jobs: HashMap<String, usize> = HashMap::with_capacity(c * 2);
    let mut lat_ns: Vec<u64> = Vec::with_capacity(1 << 16);
    let mut in_flight = 0usize;

    let request = |slot: usize, seq: u64| {
        let mut text = template.clone();
        let id = format!("msg_{slot:010}{seq:016}");
        text.replace_range(id_at.clone(), &id);
        Ws::text(text)
    };
    for (slot, at) in sent.iter_mut().enumerate() {
        seq += 1;
        ws.feed(request(slot, seq))
            .await
            .map_err(|e| e.to_string())?;
        *at = Some(Instant::now());
        in_flight += 1;
    }
    ws.flush().await.map_err(|e| e.to_string())?;

    let start = Instant::now();
    let (mut measuring, mut stopping) = (false, false);
    let (mut cpu0, mut srv0, mut t0) = (Duration::ZERO, Duration::ZERO, start);
    let mut result = Sample::default();
    let mut done: Vec<usize> = Vec::with_capacity(c);
    while in_flight > 0 {
        let first = match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
            Ok(Some(Ok(m))) => m,
            _ => return Err("the server stopped answering".into()),
        };
        let mut batch = vec![first];
        while let Some(Some(Ok(m))) = ws.next().now_or_never() {
            batch.push(m);
        }
        for msg in batch {
            let Ws::Text(text) = msg else { continue };
            let text = text.as_str();
            let kind = field(text, "type").unwrap_or("");
            let slot = match (dialect, kind) {
                (Dialect::Legacy, "job.completed") => {
                    field(text, "correlation_id").and_then(slot_of)
                }
                (Dialect::Legacy, _) => None,
                (_, "job.accepted") => {
                    if let (Some(job), Some(slot)) = (
                        field(text, "job_id"),
                        field(text, "request_id").and_then(slot_of),
                    ) {
                        jobs.insert(job.to_owned(), slot);
                    }
                    None
                }
                (_, "job.result") => field(text, "job_id").and_then(|j| jobs.remove(j)),
                _ => None,
            };
            if let Some(slot) = slot {
                if let Some(at) = sent.get_mut(slot).and_then(Option::take) {
                    in_flight -= 1;
                    if measuring {
                        lat_ns.push(at.elapsed().as_nanos() as u64);
                    }
                    done.push(slot);
                }
            }
        }
        let now = Instant::now();
        if !measuring && !stopping && now >= start + warmup {
            measuring = true;
            cpu0 = stats::self_cpu();
            srv0 = server_pid.map(stats::process_cpu).unwrap_or_default();
            t0 = now;
        } else if measuring && now >= t0 + window {
            measuring = false;
            stopping = true;
            result.secs = t0.elapsed().as_secs_f64();
            result.client_cpu = stats::self_cpu().saturating_sub(cpu0);
            result.server_cpu = server_pid
                .map(stats::process_cpu)
                .unwrap_or_default()
                .saturating_sub(srv0);
        }
        if !stopping {
            for slot in done.drain(..) {
                seq += 1;
                ws.feed(request(slot, seq))
                    .await
                    .map_err(|e| e.to_string())?;
                sent[slot] = Some(Instant::now());
                in_flight += 1;
            }
            ws.flush().await.map_err(|e| e.to_string())?;
        }
        done.clear();
    }
    let _ = ws.close(None).await;
    lat_ns.sort_unstable();
    result.calls = lat_ns.len() as u64;
    result.lat_ns = lat_ns;
    Ok(result)
}
