//! An HTTP gateway between a client of the HTTP binding and a runtime, on
//! loopback, that answers statuses of its own on a seeded schedule: it
//! forwards a request, forwards it and answers 502 or 504 instead of the
//! runtime's answer, cuts the forwarded answer short, delays it, or answers
//! 401, 404, 429 or 503 without forwarding. It counts what it forwarded.
//!
//! One request per connection (the mock's binding closes each), read whole
//! (head and `Content-Length` body) before the gateway decides.
//!
//! Started with [`Gateway::fingerprinting`], it is also an idempotency-key
//! middleware as draft-ietf-httpapi-idempotency-key-header describes one:
//! it remembers each `Idempotency-Key`'s whole body and answers 422, without
//! forwarding, a request whose key it saw with another body (a client's own
//! retry, whose envelope id and timestamp differ, included).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the gateway does with one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Move {
    /// Forward it and relay the answer.
    Forward,
    /// Forward it, wait this long, then relay the answer.
    ForwardSlowly(Duration),
    /// Forward it, relay this many bytes of the answer, then cut.
    ForwardCut(usize),
    /// Forward it, discard the answer, answer this status (502, 504).
    ForwardThen(u16),
    /// Answer this status without forwarding (401, 404, 429, 503).
    Refuse(u16),
}

/// A running gateway; stops when dropped.
pub(crate) struct Gateway {
    addr: SocketAddr,
    forwarded: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

/// Each idempotency key's first body, when the gateway fingerprints them.
type Bodies = Option<Arc<Mutex<HashMap<String, Vec<u8>>>>>;

impl Drop for Gateway {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Gateway {
    /// Starts a gateway to `upstream`; `next` picks each request's move.
    pub(crate) async fn start(
        upstream: SocketAddr,
        next: impl FnMut() -> Move + Send + 'static,
    ) -> std::io::Result<Gateway> {
        Self::start_with(upstream, next, None).await
    }

    /// [`start`](Self::start), answering 422 to a known key with another
    /// body (see the module's documentation).
    pub(crate) async fn fingerprinting(
        upstream: SocketAddr,
        next: impl FnMut() -> Move + Send + 'static,
    ) -> std::io::Result<Gateway> {
        Self::start_with(upstream, next, Some(Default::default())).await
    }

    async fn start_with(
        upstream: SocketAddr,
        next: impl FnMut() -> Move + Send + 'static,
        bodies: Bodies,
    ) -> std::io::Result<Gateway> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let forwarded = Arc::new(AtomicU64::new(0));
        let next = Arc::new(Mutex::new(next));
        let task = tokio::spawn({
            let forwarded = forwarded.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let chosen = (next.lock().unwrap())();
                    let forwarded = forwarded.clone();
                    let bodies = bodies.clone();
                    tokio::spawn(async move {
                        let _ = serve(client, upstream, chosen, &forwarded, bodies).await;
                    });
                }
            }
        });
        Ok(Gateway {
            addr,
            forwarded,
            task,
        })
    }

    /// The gateway's URL for the HTTP binding.
    pub(crate) fn url(&self) -> String {
        format!("http://{}/arcp", self.addr)
    }

    /// Requests forwarded to the runtime so far.
    pub(crate) fn forwarded(&self) -> u64 {
        self.forwarded.load(Ordering::SeqCst)
    }
}

async fn serve(
    mut client: TcpStream,
    upstream: SocketAddr,
    chosen: Move,
    forwarded: &AtomicU64,
    bodies: Bodies,
) -> std::io::Result<()> {
    let request = read_request(&mut client).await?;
    if let Some(bodies) = bodies {
        if !same_body_as_before(&bodies, &request) {
            return answer(&mut client, 422).await;
        }
    }
    if let Move::Refuse(status) = chosen {
        return answer(&mut client, status).await;
    }
    let mut runtime = TcpStream::connect(upstream).await?;
    runtime.write_all(&request).await?;
    forwarded.fetch_add(1, Ordering::SeqCst);
    let mut response = Vec::new();
    runtime.read_to_end(&mut response).await?;
    match chosen {
        Move::Forward => client.write_all(&response).await?,
        Move::ForwardSlowly(d) => {
            tokio::time::sleep(d).await;
            client.write_all(&response).await?;
        }
        Move::ForwardCut(n) => client.write_all(&response[..n.min(response.len())]).await?,
        Move::ForwardThen(status) => answer(&mut client, status).await?,
        Move::Refuse(_) => unreachable!("answered above"),
    }
    client.shutdown().await
}

/// Records the request's body under its `Idempotency-Key` if the key is
/// new; false when the key was seen with another body.
fn same_body_as_before(bodies: &Mutex<HashMap<String, Vec<u8>>>, request: &[u8]) -> bool {
    let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else {
        return true;
    };
    let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
    let Some(key) = head
        .lines()
        .find_map(|l| l.strip_prefix("idempotency-key:"))
        .map(|v| v.trim().to_owned())
    else {
        return true;
    };
    let body = &request[end + 4..];
    let mut bodies = bodies.lock().unwrap();
    bodies.entry(key).or_insert_with(|| body.to_vec()) == body
}

/// The request's bytes: its head and its `Content-Length` body.
async fn read_request(client: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + length {
                let n = client.read(&mut chunk).await?;
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            return Ok(buf);
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(buf);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn answer(client: &mut TcpStream, status: u16) -> std::io::Result<()> {
    let body = format!("the gateway answered {status}");
    let head = format!(
        "HTTP/1.1 {status} Gateway\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await?;
    client.shutdown().await
}
