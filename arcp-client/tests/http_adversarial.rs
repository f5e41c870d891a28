//! Adversarial HTTP servers against the binding's promise: `Execution::NotRun`
//! only when the tool certainly did not run. A raw tokio TCP server (raw
//! HTTP/1.1 bytes) counts the executions it performs; each test compares the
//! outcome's claim with that count.

mod http_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arcp_sdk::{Client, ClientBuilder, Execution, IdempotencyKey, RetryPolicy};
use http_support::read_request;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

#[derive(Clone, Debug)]
enum Step {
    Write(Vec<u8>),
    Sleep(Duration),
    /// RST instead of FIN.
    Reset,
}

struct Server {
    url: String,
    executions: Arc<AtomicUsize>,
}

impl Server {
    fn executions(&self) -> usize {
        self.executions.load(Ordering::SeqCst)
    }
}

/// Serves every connection with `script(request_index, executions)`; the
/// script runs the tool by bumping `executions`.
async fn serve<F>(script: F) -> Server
where
    F: Fn(usize, &AtomicUsize) -> Vec<Step> + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/arcp", listener.local_addr().unwrap());
    let executions = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(AtomicUsize::new(0));
    let script = Arc::new(script);
    let (ex, rq) = (executions.clone(), requests.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let (ex, rq, script) = (ex.clone(), rq.clone(), script.clone());
            tokio::spawn(async move {
                if read_request(&mut stream).await.is_none() {
                    return;
                }
                let n = rq.fetch_add(1, Ordering::SeqCst);
                for step in script(n, &ex) {
                    match step {
                        Step::Write(bytes) => {
                            let _ = stream.write_all(&bytes).await;
                            let _ = stream.flush().await;
                        }
                        Step::Sleep(d) => tokio::time::sleep(d).await,
                        Step::Reset => {
                            #[allow(deprecated)]
                            let _ = stream.set_linger(Some(Duration::ZERO));
                            drop(stream);
                            return;
                        }
                    }
                }
            });
        }
    });
    Server { url, executions }
}

fn whole(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A runtime that runs the tool on the first request and answers it with
/// `first`, and answers every later request with `later` (running nothing).
fn once(
    first: Vec<Step>,
    later: Vec<Step>,
) -> impl Fn(usize, &AtomicUsize) -> Vec<Step> + Send + Sync + 'static {
    move |n, ex| {
        if n == 0 {
            ex.fetch_add(1, Ordering::SeqCst);
            first.clone()
        } else {
            later.clone()
        }
    }
}

fn builder(url: &str) -> ClientBuilder {
    Client::builder(url)
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(5))
                .max_delay(Duration::from_millis(40))
                .outcome_poll(Duration::from_millis(5))
                .max_attempts(4)
                .max_elapsed(Duration::from_secs(10)),
        )
        .connect_timeout(Duration::from_secs(2))
        .default_deadline(Duration::from_secs(20))
}

/// A call whose POST reached the runtime (which ran the tool) is dropped by
/// its caller while it waits for the answer (`tokio::time::timeout`, a
/// `select!`). The same client then re-issues the same call with the same
/// key; the runtime, which has meanwhile revoked the token, answers 401.
/// The client sent this key and intent, so the refusal must not say "not
/// run" (re-issuing the work would run it a second time): the dropped call
/// leaves the key remembered as bound, as over WebSocket.
#[tokio::test]
async fn http_a_dropped_call_then_its_key_again_refused_may_have_run() {
    let server = serve(once(
        // Runs the tool, answers late (the caller has gone by then).
        vec![Step::Sleep(Duration::from_millis(500)), Step::Reset],
        vec![Step::Write(whole("401 Unauthorized", "token revoked"))],
    ))
    .await;
    let client = builder(&server.url).connect().await.unwrap();
    let key = IdempotencyKey::new();
    let args = json!({"order": 1});
    let dropped = tokio::time::timeout(
        Duration::from_millis(200),
        client
            .invoke_tool("refund", args.clone())
            .idempotency_key(key.clone())
            .send(),
    )
    .await;
    assert!(dropped.is_err(), "the first call is dropped mid-POST");
    assert_eq!(server.executions(), 1, "the POST reached the runtime");
    let err = client
        .invoke_tool("refund", args)
        .idempotency_key(key)
        .deadline(Duration::from_secs(2))
        .send()
        .await
        .unwrap_err();
    assert_eq!(server.executions(), 1);
    assert_ne!(
        err.execution(),
        Execution::NotRun,
        "the tool ran once under this key, yet: {err:?}"
    );
}

/// The runtime runs the tool, then fails with a 5xx the binding does not
/// list (507: it could not store the outcome; 599: a proxy's read timeout
/// after forwarding the request). Every server error but 501 and 505 counts
/// as "may have reached the runtime", not only the common ones.
#[tokio::test]
async fn http_an_unlisted_5xx_after_the_tool_ran_may_have_run() {
    for status in ["507 Insufficient Storage", "599 Network Read Timeout"] {
        let answer = vec![Step::Write(whole(status, "the server failed"))];
        let server = serve(once(answer.clone(), answer)).await;
        let client = builder(&server.url).connect().await.unwrap();
        let err = client
            .invoke_tool("refund", json!({"order": 2}))
            .deadline(Duration::from_secs(2))
            .send()
            .await
            .unwrap_err();
        assert_eq!(server.executions(), 1, "{status}");
        assert_ne!(
            err.execution(),
            Execution::NotRun,
            "{status}: the tool ran once, yet: {err:?}"
        );
    }
}
