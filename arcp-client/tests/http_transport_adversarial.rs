//! Adversarial raw-TCP servers against the HTTP binding's new connection
//! stack (hyper's pooled client): keep-alive reuse races, bytes after a
//! body, stuck streams, odd framing, blackholed connects, and many calls
//! against a server that drops connections at random. Each test checks the
//! outcome against what the server received and executed, and measures
//! that nothing outlives the call's deadline.

mod http_support;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arcp_sdk::{Client, ClientBuilder, Error, Execution, RetryPolicy};
use http_support::*;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// Ground truth kept by a test server.
#[derive(Default)]
struct Truth {
    /// Requests read, on any connection.
    requests: AtomicUsize,
    /// Connections accepted.
    connections: AtomicUsize,
    /// Executions per idempotency key.
    executed: Mutex<HashMap<String, usize>>,
}

impl Truth {
    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
    fn executions(&self, key: &str) -> usize {
        self.executed.lock().unwrap().get(key).copied().unwrap_or(0)
    }
    fn total_executions(&self) -> usize {
        self.executed.lock().unwrap().values().sum()
    }
    /// Runs the tool for `key` once; returns whether it ran now (false: a
    /// repeat, which a runtime answers from its store).
    fn execute(&self, key: &str) -> bool {
        let mut map = self.executed.lock().unwrap();
        let n = map.entry(key.to_owned()).or_insert(0);
        *n += 1;
        *n == 1
    }
}

type Handler = Arc<
    dyn Fn(TcpStream, usize, Arc<Truth>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync,
>;

/// Accepts connections forever; each is handed to `handler` with its index.
async fn serve(handler: Handler) -> (String, Arc<Truth>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/arcp", listener.local_addr().unwrap());
    let truth = Arc::new(Truth::default());
    let t = truth.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let n = t.connections.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(handler(stream, n, t.clone()));
        }
    });
    (url, truth)
}

/// The idempotency key a request carries (its sf-string unquoted).
fn key_of(seen: &Seen) -> String {
    seen.header("idempotency-key")
        .unwrap()
        .trim_matches('"')
        .to_owned()
}

/// Reads one request and counts it.
async fn next_request(stream: &mut TcpStream, truth: &Truth) -> Option<Seen> {
    let seen = read_request(stream).await?;
    truth.requests.fetch_add(1, Ordering::SeqCst);
    Some(seen)
}

fn response(content_type: &str, body: &str, extra: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The terminal for `key`: its value names the key, so a result delivered
/// to the wrong call shows.
fn answer_for(key: &str) -> String {
    result(&format!("job_{key}"), json!({ "key": key }))
}

fn builder(url: &str) -> ClientBuilder {
    Client::builder(url)
        .bearer_token(TOKEN)
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(5))
                .max_delay(Duration::from_millis(40))
                .outcome_poll(Duration::from_millis(5))
                .max_attempts(6)
                .max_elapsed(Duration::from_secs(10)),
        )
        .connect_timeout(Duration::from_secs(2))
        .default_deadline(Duration::from_secs(5))
}

fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(TcpStream, usize, Arc<Truth>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Arc::new(move |s, n, t| Box::pin(f(s, n, t)))
}

/// Runs `n` sequential calls and checks each against the ground truth.
async fn sequential_calls(client: &Client, truth: &Truth, n: usize) {
    for i in 0..n {
        let started = Instant::now();
        let out = client
            .invoke_tool("refund", json!({ "order": i }))
            .deadline(Duration::from_secs(3))
            .send()
            .await;
        let elapsed = started.elapsed();
        let out = out.unwrap_or_else(|e| panic!("call {i} failed after {elapsed:?}: {e:?}"));
        let key = out.key.as_str().to_owned();
        assert_eq!(
            out.value,
            json!({ "key": key }),
            "call {i}: a foreign answer"
        );
        assert_eq!(truth.executions(&key), 1, "call {i}");
        assert!(
            elapsed < Duration::from_secs(2),
            "call {i} took {elapsed:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// keep-alive reuse races

/// The server answers one request per connection with keep-alive, then
/// closes the idle connection after a short delay (racing the next call's
/// reuse), sometimes after reading the next request (without running it).
#[tokio::test]
async fn idle_close_races_with_reuse() {
    for delay_ms in [0u64, 1, 2, 5, 10] {
        let (url, truth) = serve(handler(
            move |mut stream, conn, truth: Arc<Truth>| async move {
                let Some(seen) = next_request(&mut stream, &truth).await else {
                    return;
                };
                let key = key_of(&seen);
                let fresh = truth.execute(&key);
                let extra = if fresh { "" } else { "Arcp-Replayed: true\r\n" };
                let _ = stream
                    .write_all(&response("application/json", &answer_for(&key), extra))
                    .await;
                if conn % 2 == 0 {
                    // Close the idle connection, racing its reuse.
                    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                } else {
                    // Read the next request on this connection, then close
                    // without running it.
                    let _ = next_request(&mut stream, &truth).await;
                }
            },
        ))
        .await;
        let client = builder(&url).connect().await.unwrap();
        for i in 0..20 {
            let out = client
                .invoke_tool("refund", json!({ "order": i }))
                .deadline(Duration::from_secs(3))
                .send()
                .await
                .unwrap_or_else(|e| panic!("delay {delay_ms} call {i}: {e:?}"));
            let key = out.key.as_str().to_owned();
            assert_eq!(out.value, json!({ "key": key }));
            assert_eq!(truth.executions(&key), 1);
            if out.attempts == 1 {
                assert!(!out.replayed);
            }
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        }
        assert_eq!(truth.total_executions(), 20);
    }
}

/// `Connection: close` and HTTP/1.0 answers: each call gets its own
/// connection, and every answer is right.
#[tokio::test]
async fn connection_close_and_http10_answers() {
    for (version, extra) in [
        ("HTTP/1.1", "Connection: close\r\n"),
        ("HTTP/1.0", ""),
        ("HTTP/1.0", "Connection: keep-alive\r\n"),
    ] {
        let (url, truth) = serve(handler(move |mut stream, _, truth: Arc<Truth>| async move {
            while let Some(seen) = next_request(&mut stream, &truth).await {
                let key = key_of(&seen);
                truth.execute(&key);
                let body = answer_for(&key);
                let head = format!(
                    "{version} 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
                if extra.contains("close") {
                    return;
                }
            }
        }))
        .await;
        let client = builder(&url).connect().await.unwrap();
        sequential_calls(&client, &truth, 5).await;
    }
}

/// An HTTP/1.0 NDJSON answer with no length: the body ends when the
/// server closes.
#[tokio::test]
async fn http10_stream_delimited_by_close() {
    let (url, truth) = serve(handler(|mut stream, _, truth: Arc<Truth>| async move {
        if let Some(seen) = next_request(&mut stream, &truth).await {
            let key = key_of(&seen);
            truth.execute(&key);
            let body = ndjson(&[accepted("job_1"), answer_for(&key)]);
            let _ = stream
                .write_all(
                    format!("HTTP/1.0 200 OK\r\nContent-Type: application/x-ndjson\r\n\r\n{body}")
                        .as_bytes(),
                )
                .await;
        }
    }))
    .await;
    let client = builder(&url).connect().await.unwrap();
    sequential_calls(&client, &truth, 3).await;
}

/// After a complete answer, the server writes garbage on the same
/// connection: at once (same segment), or later while it is idle in the
/// pool. The next call must not read the garbage as its answer.
#[tokio::test]
async fn garbage_after_the_body_does_not_confuse_the_next_call() {
    for later_ms in [0u64, 30] {
        let (url, truth) = serve(handler(
            move |mut stream, _, truth: Arc<Truth>| async move {
                while let Some(seen) = next_request(&mut stream, &truth).await {
                    let key = key_of(&seen);
                    truth.execute(&key);
                    let mut bytes = response("application/json", &answer_for(&key), "");
                    if later_ms == 0 {
                        bytes.extend_from_slice(b"GARBAGE\r\n\r\n");
                        let _ = stream.write_all(&bytes).await;
                    } else {
                        let _ = stream.write_all(&bytes).await;
                        tokio::time::sleep(Duration::from_millis(later_ms)).await;
                        let _ = stream.write_all(b"GARBAGE\r\n\r\n").await;
                    }
                }
            },
        ))
        .await;
        let client = builder(&url).connect().await.unwrap();
        for i in 0..6 {
            let out = client
                .invoke_tool("refund", json!({ "order": i }))
                .send()
                .await
                .unwrap_or_else(|e| panic!("later {later_ms} call {i}: {e:?}"));
            let key = out.key.as_str().to_owned();
            assert_eq!(out.value, json!({ "key": key }));
            assert_eq!(truth.executions(&key), 1);
            tokio::time::sleep(Duration::from_millis(2 * later_ms + 5)).await;
            // A call that reads garbage must not have been counted as
            // answered without the server having seen it twice.
            assert_eq!(
                out.attempts as usize, 1,
                "later {later_ms} call {i}: the garbage cost an attempt"
            );
        }
    }
}

/// A complete response followed, in the same write, by a second complete
/// response (a smuggled one, behind `Transfer-Encoding` beside a
/// `Content-Length`): the next call must never take it as its answer.
#[tokio::test]
async fn a_smuggled_second_response_is_never_the_next_calls_answer() {
    let (url, truth) = serve(handler(|mut stream, _, truth: Arc<Truth>| async move {
        while let Some(seen) = next_request(&mut stream, &truth).await {
            let key = key_of(&seen);
            truth.execute(&key);
            let body = answer_for(&key);
            let smuggled_body = answer_for("smuggled");
            let smuggled = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{smuggled_body}",
                smuggled_body.len()
            );
            let chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
            let bytes = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{chunked}{smuggled}",
                chunked.len() + smuggled.len()
            );
            let _ = stream.write_all(bytes.as_bytes()).await;
        }
    }))
    .await;
    let client = builder(&url).connect().await.unwrap();
    for i in 0..6 {
        let out = client
            .invoke_tool("refund", json!({ "order": i }))
            .deadline(Duration::from_secs(3))
            .send()
            .await;
        match out {
            Ok(out) => {
                let key = out.key.as_str().to_owned();
                assert_eq!(
                    out.value,
                    json!({ "key": key }),
                    "call {i}: the smuggled answer"
                );
                assert_eq!(truth.executions(&key), 1);
            }
            Err(e) => panic!("call {i}: {e:?}"),
        }
    }
}

// ---------------------------------------------------------------------------
// dropped calls, stuck streams

/// A call dropped mid-body (its caller's timeout), then the next call on
/// the same client: a clean connection, the right answer, at once.
#[tokio::test]
async fn a_call_dropped_mid_body_leaves_a_clean_pool() {
    let (url, truth) = serve(handler(|mut stream, _, truth: Arc<Truth>| async move {
        while let Some(seen) = next_request(&mut stream, &truth).await {
            let key = key_of(&seen);
            let first = truth.requests() == 1;
            truth.execute(&key);
            let body = answer_for(&key);
            if first {
                // Half the body, then nothing for a long time.
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&body.as_bytes()[..body.len() / 2]).await;
                tokio::time::sleep(Duration::from_secs(30)).await;
                let _ = stream.write_all(&body.as_bytes()[body.len() / 2..]).await;
            } else {
                let _ = stream
                    .write_all(&response("application/json", &body, ""))
                    .await;
            }
        }
    }))
    .await;
    let client = builder(&url).connect().await.unwrap();
    let dropped = tokio::time::timeout(
        Duration::from_millis(200),
        client.invoke_tool("refund", json!({ "order": "dropped" })),
    )
    .await;
    assert!(dropped.is_err());
    sequential_calls(&client, &truth, 3).await;
    assert_eq!(truth.requests(), 4);
}

/// NDJSON, chunked: the terminal line, then the stream never ends (no last
/// chunk, the connection held open). The call returns at once; the next
/// call does not wait on the stuck connection.
#[tokio::test]
async fn a_stream_that_never_ends_after_its_terminal() {
    let (url, truth) = serve(handler(|mut stream, _, truth: Arc<Truth>| async move {
        while let Some(seen) = next_request(&mut stream, &truth).await {
            let key = key_of(&seen);
            truth.execute(&key);
            let body = ndjson(&[accepted(&format!("job_{key}")), answer_for(&key)]);
            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n";
            let _ = stream
                .write_all(format!("{head}{:x}\r\n{body}\r\n", body.len()).as_bytes())
                .await;
            // Never the last chunk; hold the connection.
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
    }))
    .await;
    let client = builder(&url).connect().await.unwrap();
    for i in 0..5 {
        let started = Instant::now();
        let out = client
            .invoke_tool("refund", json!({ "order": i }))
            .send()
            .await
            .unwrap();
        let elapsed = started.elapsed();
        let key = out.key.as_str().to_owned();
        assert_eq!(out.value, json!({ "key": key }));
        assert!(
            elapsed < Duration::from_millis(500),
            "call {i}: {elapsed:?}"
        );
    }
    assert_eq!(truth.requests(), 5);
}

/// Events keep coming after the terminal, without end: the call returns.
#[tokio::test]
async fn a_stream_that_keeps_talking_after_its_terminal() {
    let (url, truth) = serve(handler(|mut stream, _, truth: Arc<Truth>| async move {
        while let Some(seen) = next_request(&mut stream, &truth).await {
            let key = key_of(&seen);
            truth.execute(&key);
            let job = format!("job_{key}");
            let body = ndjson(&[accepted(&job), answer_for(&key)]);
            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n";
            let _ = stream
                .write_all(format!("{head}{:x}\r\n{body}\r\n", body.len()).as_bytes())
                .await;
            for seq in 0..10_000u64 {
                let line = ndjson(&[progress(&job, seq, seq, 10_000)]);
                if stream
                    .write_all(format!("{:x}\r\n{line}\r\n", line.len()).as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }))
    .await;
    let client = builder(&url).connect().await.unwrap();
    for i in 0..3 {
        let started = Instant::now();
        let out = client
            .invoke_tool("refund", json!({ "order": i }))
            .send()
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(out.value, json!({ "key": out.key.as_str() }));
    }
    assert_eq!(truth.requests(), 3);
}

// ---------------------------------------------------------------------------
// framing and heads

/// Informational answers before the real one (100 Continue, 102
/// Processing, 103 Early Hints): skipped.
#[tokio::test]
async fn informational_answers_before_the_real_one() {
    let (url, truth) = serve(handler(|mut stream, _, truth: Arc<Truth>| async move {
        while let Some(seen) = next_request(&mut stream, &truth).await {
            let key = key_of(&seen);
            truth.execute(&key);
            let _ = stream
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n")
                .await;
            let _ = stream
                .write_all(&response("application/json", &answer_for(&key), ""))
                .await;
        }
    }))
    .await;
    let client = builder(&url).connect().await.unwrap();
    sequential_calls(&client, &truth, 3).await;
}

/// The runtime ran the tool, then its answer's head is malformed (an
/// invalid status line, an oversized head, too many headers, a bad
/// Content-Length): the outcome may not say "not run".
#[tokio::test]
async fn a_malformed_head_after_the_tool_ran_may_have_run() {
    let big = "x".repeat(1 << 20);
    let many: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    let heads: Vec<(&str, String)> = vec![
        ("invalid status line", "HTTP/1.1 OK\r\n\r\n".to_owned()),
        (
            "status 2000",
            "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n".to_owned(),
        ),
        ("not http", "SSH-2.0-OpenSSH_9.6\r\n".to_owned()),
        (
            "oversized header",
            format!("HTTP/1.1 200 OK\r\nX-Big: {big}\r\n\r\n"),
        ),
        (
            "too many headers",
            format!("HTTP/1.1 200 OK\r\n{many}Content-Length: 0\r\n\r\n"),
        ),
        (
            "bad content-length",
            "HTTP/1.1 200 OK\r\nContent-Length: 12, 13\r\n\r\n".to_owned(),
        ),
        (
            "http/2 preface",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_owned(),
        ),
    ];
    for (what, head) in heads {
        let head = Arc::new(head);
        let (url, truth) = serve(handler(move |mut stream, _, truth: Arc<Truth>| {
            let head = head.clone();
            async move {
                if let Some(seen) = next_request(&mut stream, &truth).await {
                    truth.execute(&key_of(&seen));
                    let _ = stream.write_all(head.as_bytes()).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }))
        .await;
        let client = builder(&url).connect().await.unwrap();
        let started = Instant::now();
        let err = client
            .invoke_tool("refund", json!({ "order": 1 }))
            .deadline(Duration::from_secs(2))
            .send()
            .await
            .expect_err(what);
        assert!(started.elapsed() < Duration::from_millis(2_500), "{what}");
        assert!(truth.total_executions() >= 1, "{what}");
        assert_eq!(
            err.execution(),
            Execution::MayHaveRun,
            "{what}: the tool ran, yet {err:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// blackholed connects

/// An https:// endpoint whose server accepts TCP and never speaks TLS:
/// the connect timeout (TCP and TLS, as over WebSocket) ends each connect,
/// not the session handshake's; nothing was sent.
#[tokio::test]
async fn a_tls_server_that_never_answers_the_handshake() {
    let (url, truth) = serve(handler(|stream, _, _| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(stream);
    }))
    .await;
    let url = url.replace("http://", "https://");
    let client = builder(&url)
        .connect_timeout(Duration::from_millis(200))
        .handshake_timeout(Duration::from_secs(30))
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(5))
                .max_delay(Duration::from_millis(40))
                .max_attempts(3)
                .max_elapsed(Duration::from_millis(700)),
        )
        .connect()
        .await
        .unwrap();
    let started = Instant::now();
    let err = client
        .invoke_tool("refund", json!({ "order": 1 }))
        .deadline(Duration::from_secs(5))
        .send()
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_millis(1_500),
        "{elapsed:?}: {err:?}"
    );
    assert_eq!(truth.requests(), 0);
    assert_eq!(err.execution(), Execution::NotRun, "{err:?}");
}

// ---------------------------------------------------------------------------
// many calls, random drops

/// 64 concurrent calls against a keep-alive runtime that, at random, runs
/// the tool and drops the connection before answering, drops it after
/// reading the request without running it, drops it mid-answer, or
/// answers. Every outcome is checked against what the runtime executed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_against_random_drops() {
    let seed = Arc::new(AtomicUsize::new(0x2545_f491));
    let (url, truth) = serve(handler(move |mut stream, _, truth: Arc<Truth>| {
        let seed = seed.clone();
        async move {
            while let Some(seen) = next_request(&mut stream, &truth).await {
                // xorshift, shared
                let mut x = seed.load(Ordering::SeqCst);
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                seed.store(x, Ordering::SeqCst);
                let key = key_of(&seen);
                let body = answer_for(&key);
                match x % 6 {
                    0 => {
                        // Read, run nothing, close.
                        return;
                    }
                    1 => {
                        // Run, close before answering.
                        truth.execute(&key);
                        return;
                    }
                    2 => {
                        // Run, answer half, reset.
                        truth.execute(&key);
                        let bytes = response("application/json", &body, "");
                        let _ = stream.write_all(&bytes[..bytes.len() - 10]).await;
                        #[allow(deprecated)]
                        let _ = stream.set_linger(Some(Duration::ZERO));
                        return;
                    }
                    3 => {
                        // Answer, then close the idle connection soon.
                        let fresh = truth.execute(&key);
                        let extra = if fresh { "" } else { "Arcp-Replayed: true\r\n" };
                        let _ = stream
                            .write_all(&response("application/json", &body, extra))
                            .await;
                        tokio::time::sleep(Duration::from_millis((x % 3) as u64)).await;
                        return;
                    }
                    _ => {
                        let fresh = truth.execute(&key);
                        let extra = if fresh { "" } else { "Arcp-Replayed: true\r\n" };
                        let _ = stream
                            .write_all(&response("application/json", &body, extra))
                            .await;
                    }
                }
            }
        }
    }))
    .await;
    let client = Arc::new(
        builder(&url)
            .retry(
                RetryPolicy::exponential()
                    .initial_delay(Duration::from_millis(2))
                    .max_delay(Duration::from_millis(20))
                    .max_attempts(4)
                    .max_elapsed(Duration::from_secs(5)),
            )
            .connect()
            .await
            .unwrap(),
    );
    for round in 0..3 {
        let mut calls = Vec::new();
        for i in 0..64 {
            let client = client.clone();
            calls.push(tokio::spawn(async move {
                let key = arcp_sdk::IdempotencyKey::new();
                let started = Instant::now();
                let out = client
                    .invoke_tool("refund", json!({ "round": round, "i": i }))
                    .idempotency_key(key.clone())
                    .deadline(Duration::from_secs(4))
                    .send()
                    .await;
                (key.as_str().to_owned(), out, started.elapsed())
            }));
        }
        for call in calls {
            let (key, out, elapsed) = call.await.unwrap();
            assert!(elapsed < Duration::from_millis(4_300), "{key}: {elapsed:?}");
            let ran = truth.executions(&key);
            match out {
                Ok(out) => {
                    assert_eq!(out.value, json!({ "key": key }), "a foreign answer");
                    assert!(ran >= 1, "{key}: Ok, yet the runtime never ran it");
                }
                Err(e) => {
                    if e.execution() == Execution::NotRun {
                        assert_eq!(ran, 0, "{key}: ran {ran} time(s), yet {e:?}");
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// URL credentials, close

/// `Client::close()` while a call waits on a stuck connection: the call
/// ends at once, saying it may have run (the request was sent).
#[tokio::test]
async fn close_while_a_call_waits_on_a_stuck_connection() {
    let (url, truth) = serve(handler(|mut stream, _, truth: Arc<Truth>| async move {
        if let Some(seen) = next_request(&mut stream, &truth).await {
            truth.execute(&key_of(&seen));
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
    }))
    .await;
    let client = Arc::new(builder(&url).connect().await.unwrap());
    let c = client.clone();
    let call = tokio::spawn(async move { c.invoke_tool("refund", json!({})).await });
    while truth.requests() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    client.close().await;
    let err = tokio::time::timeout(Duration::from_secs(1), call)
        .await
        .expect("the call outlived close()")
        .unwrap()
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err:?}");
}

/// A server that runs the tool and trickles its answer's head a byte at a
/// time: the call's deadline still ends it, on time, "may have run".
#[tokio::test]
async fn a_trickled_head_keeps_the_deadline() {
    let (url, truth) = serve(handler(|mut stream, _, truth: Arc<Truth>| async move {
        if let Some(seen) = next_request(&mut stream, &truth).await {
            truth.execute(&key_of(&seen));
            for b in b"HTTP/1.1 200 OK\r\nX-Slow: "
                .iter()
                .chain(std::iter::repeat(&b'a'))
            {
                if stream.write_all(&[*b]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }))
    .await;
    let client = builder(&url).connect().await.unwrap();
    let started = Instant::now();
    let err = client
        .invoke_tool("refund", json!({}))
        .deadline(Duration::from_millis(800))
        .send()
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_millis(900), "{elapsed:?}");
    assert_eq!(err.execution(), Execution::MayHaveRun, "{err:?}");
    assert_eq!(truth.total_executions(), 1);
}

// ---------------------------------------------------------------------------
// findings

/// Credentials in the endpoint URL (`http://user:pw@host/arcp`, no bearer
/// token): reqwest, which calls used before, sends them as
/// `Authorization: Basic`; whatever the client does, it must not put them
/// on the request line, and a call must reach the server.
#[tokio::test]
async fn credentials_in_the_endpoint_url() {
    let seen_heads = Arc::new(Mutex::new(Vec::new()));
    let heads = seen_heads.clone();
    let (url, _truth) = serve(handler(move |mut stream, _, truth: Arc<Truth>| {
        let heads = heads.clone();
        async move {
            while let Some(seen) = next_request(&mut stream, &truth).await {
                heads.lock().unwrap().push(seen.head.clone());
                let key = key_of(&seen);
                truth.execute(&key);
                let _ = stream
                    .write_all(&response("application/json", &answer_for(&key), ""))
                    .await;
            }
        }
    }))
    .await;
    let url = url.replace("http://", "http://user:pw@");
    let client = Client::builder(&url)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let out = client
        .invoke_tool("refund", json!({ "order": 1 }))
        .deadline(Duration::from_secs(3))
        .send()
        .await
        .unwrap();
    assert_eq!(out.value, json!({ "key": out.key.as_str() }));
    let head = seen_heads.lock().unwrap()[0].to_lowercase();
    assert!(head.starts_with("post /arcp http/1.1\r\n"), "{head}");
    assert!(
        head.contains("authorization: basic dxnlcjpwdw==\r\n"),
        "the URL's credentials were dropped: {head}"
    );
}

/// A server that echoes what it was sent (the `Authorization` header, the
/// password) in an error: the URL's credentials stay out of the message.
#[tokio::test]
async fn url_credentials_echoed_by_the_server_are_redacted() {
    const PASSWORD: &str = "pa55-9x7q";
    let (url, _truth) = serve(handler(move |mut stream, _, truth: Arc<Truth>| async move {
        if let Some(seen) = next_request(&mut stream, &truth).await {
            let echo = format!(
                "bad credentials {} for user:{PASSWORD}",
                seen.header("authorization").unwrap_or_default()
            );
            let reply = format!(
                "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{echo}",
                echo.len()
            );
            let _ = stream.write_all(reply.as_bytes()).await;
        }
    }))
    .await;
    let url = url.replace("http://", &format!("http://user:{PASSWORD}@"));
    let client = Client::builder(&url).connect().await.unwrap();
    let err = client
        .invoke_tool("refund", json!({ "order": 1 }))
        .deadline(Duration::from_secs(3))
        .send()
        .await
        .unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("bad credentials"), "{shown}");
    assert!(!shown.contains(PASSWORD), "{shown}");
    assert!(!shown.contains("dXNlcjpwYTU1LTl4N3E"), "{shown}");
}

/// A listener whose accept queue is full: new connects are never answered
/// (the SYN is dropped), as a blackholed address. Returns its URL.
async fn blackhole() -> (String, Vec<std::net::TcpStream>, tokio::net::TcpListener) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let address = listener.local_addr().unwrap();
    // Fill the accept queue (never accepted).
    let mut fillers = Vec::new();
    for _ in 0..8 {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(std::net::TcpStream::connect_timeout(
                &address,
                Duration::from_millis(200),
            ));
        });
        if let Ok(Ok(s)) = rx.recv_timeout(Duration::from_millis(400)) {
            fillers.push(s);
        }
    }
    (format!("http://{address}/arcp"), fillers, listener)
}

/// A call into a blackhole with these deadlines: its error, and how long
/// it took.
async fn call_into_a_blackhole(connect: Duration, deadline: Duration) -> (Error, Duration) {
    let (url, _fillers, _listener) = blackhole().await;
    let client = builder(&url)
        .connect_timeout(connect)
        .connect()
        .await
        .unwrap();
    let started = Instant::now();
    let err = client
        .invoke_tool("refund", json!({ "order": 1 }))
        .deadline(deadline)
        .send()
        .await
        .unwrap_err();
    (err, started.elapsed())
}

/// Connecting never completes: the connect timeout ends each connect;
/// the call ends by its own deadline, and nothing was sent, so the
/// outcome must say "not run".
#[tokio::test]
async fn a_blackholed_endpoint_keeps_the_deadline_and_says_not_run() {
    // A sanity check that it is a blackhole.
    let (url, _fillers, _listener) = blackhole().await;
    let probe = tokio::time::timeout(
        Duration::from_millis(300),
        TcpStream::connect(url.trim_start_matches("http://").trim_end_matches("/arcp")),
    )
    .await;
    assert!(probe.is_err(), "the listener is not a blackhole: {probe:?}");
    let (err, elapsed) =
        call_into_a_blackhole(Duration::from_millis(300), Duration::from_millis(1_000)).await;
    assert!(elapsed < Duration::from_millis(1_300), "{elapsed:?}");
    assert_eq!(
        err.execution(),
        Execution::NotRun,
        "no connection was ever established, yet: {err:?}"
    );
    // Connects were given up at the connect timeout, and the error says so.
    let Error::DeadlineExceeded {
        last_error: Some(last),
        ..
    } = &err
    else {
        panic!("no connect timed out within the deadline: {err:?}");
    };
    assert!(last.contains("300ms"), "{last}");
}

/// The connect timeout longer than the call's deadline: the call's
/// deadline still ends it, and nothing was sent.
#[tokio::test]
async fn a_blackholed_endpoint_with_a_long_connect_timeout() {
    let (err, elapsed) =
        call_into_a_blackhole(Duration::from_secs(30), Duration::from_millis(500)).await;
    assert!(elapsed < Duration::from_millis(800), "{elapsed:?}");
    assert_eq!(
        err.execution(),
        Execution::NotRun,
        "no connection was ever established, yet: {err:?}"
    );
}

/// Connection refused on every connect (a dead port): nothing is ever
/// sent. When the call's deadline ends it, it must say "not run", wherever
/// the deadline falls (in a backoff sleep or in a connect attempt).
#[tokio::test]
async fn a_refused_endpoint_until_the_deadline_says_not_run() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/arcp", dead.local_addr().unwrap());
    drop(dead);
    let client = builder(&url).connect().await.unwrap();
    let mut wrong = Vec::new();
    for i in 0..100u64 {
        let err = client
            .invoke_tool("refund", json!({ "order": i }))
            .deadline(Duration::from_millis(20 + 7 * (i % 10)))
            .send()
            .await
            .unwrap_err();
        if err.execution() != Execution::NotRun {
            wrong.push(format!("{err:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of 100 calls that never connected say otherwise, e.g. {}",
        wrong.len(),
        wrong[0]
    );
}

/// The runtime runs the tool, then answers `101 Switching Protocols` to a
/// request that asked for no upgrade (RFC 9110 forbids it; hyper passes it
/// on as the final answer). Nothing says the request was refused before it
/// ran, so the outcome may not say "not run".
#[tokio::test]
async fn an_unasked_101_after_the_tool_ran_may_have_run() {
    let (url, truth) = serve(handler(|mut stream, _, truth: Arc<Truth>| async move {
        if let Some(seen) = next_request(&mut stream, &truth).await {
            truth.execute(&key_of(&seen));
            let _ = stream
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: foo\r\nConnection: upgrade\r\n\r\n")
                .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }))
    .await;
    let client = builder(&url).connect().await.unwrap();
    let err = client
        .invoke_tool("refund", json!({ "order": 1 }))
        .deadline(Duration::from_secs(2))
        .send()
        .await
        .unwrap_err();
    // A lost answer: retried with the same key (this server, unlike a
    // runtime, runs every request it gets).
    assert!(truth.total_executions() >= 1);
    assert_eq!(
        truth.executions(err.key().unwrap().as_str()),
        truth.total_executions(),
        "every request carried the call's key"
    );
    assert_eq!(
        err.execution(),
        Execution::MayHaveRun,
        "the tool ran, yet {err:?}"
    );
}
