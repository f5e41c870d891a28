//! The environment's proxy, adversarially (its own binary: it sets the
//! process's environment; the tests take turns through one lock, each
//! client built after its variables are set).

mod http_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arcp_sdk::{Execution, RetryPolicy};
use http_support::*;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

static ENV: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn clear() {
    for var in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"] {
        std::env::remove_var(var);
        std::env::remove_var(var.to_lowercase());
    }
}

/// A proxy that reads each request head and answers `reply`; it counts
/// connections and keeps the heads.
async fn proxy(reply: &'static str) -> (String, Arc<AtomicUsize>, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let connections = Arc::new(AtomicUsize::new(0));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let (count, log) = (connections.clone(), heads.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            count.fetch_add(1, Ordering::SeqCst);
            let log = log.clone();
            tokio::spawn(async move {
                if let Some(seen) = read_request(&mut stream).await {
                    log.lock().unwrap().push(seen);
                }
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    (address, connections, heads)
}

/// Credentials in the endpoint URL through a forwarding proxy: they must
/// not travel in the request line (proxies log it).
#[tokio::test]
async fn url_credentials_stay_off_the_request_line_through_a_proxy() {
    let _env = ENV.lock().await;
    clear();
    let answer = result("job_1", json!(1));
    let reply: &'static str = Box::leak(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        )
        .into_boxed_str(),
    );
    let (address, _, heads) = proxy(reply).await;
    std::env::set_var("HTTP_PROXY", format!("http://{address}"));
    let c = client("http://user:pw@runtime.invalid:8080/v1/arcp")
        .allow_insecure_token(true)
        .connect()
        .await
        .unwrap();
    clear();
    let _ = c
        .invoke_tool("refund", json!({"order": 1}))
        .deadline(Duration::from_secs(2))
        .send()
        .await;
    let head = heads.lock().unwrap()[0].head.clone();
    let line = head.lines().next().unwrap().to_owned();
    assert!(
        !line.contains("pw"),
        "the URL's password is on the request line: {line}"
    );
}

/// A tunnelling proxy that refuses `CONNECT` with 407: retrying cannot
/// supply credentials. The call should end at once with an error that
/// says so (as a TLS failure does), not re-`CONNECT` until its deadline.
#[tokio::test]
async fn a_proxy_refusing_connect_with_407_is_not_hammered() {
    let _env = ENV.lock().await;
    clear();
    let (address, connections, _) =
        proxy("HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n").await;
    std::env::set_var("HTTPS_PROXY", format!("http://{address}"));
    let c = client("https://runtime.invalid/v1/arcp")
        .connect()
        .await
        .unwrap();
    clear();
    let started = Instant::now();
    let refused = c
        .invoke_tool("refund", json!({"order": 1}))
        .deadline(Duration::from_secs(2))
        .send()
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    let connects = connections.load(Ordering::SeqCst);
    assert_eq!(refused.execution(), Execution::NotRun, "{refused:?}");
    assert!(
        connects <= 2
            && elapsed < Duration::from_millis(500)
            && refused.to_string().contains("407"),
        "{connects} CONNECTs in {elapsed:?}, then: {refused}"
    );
}

/// `HTTP_PROXY` names a dead port: the error says what failed: the proxy,
/// by its address. (Whether it says "not run" when the deadline comes
/// first: see `a_refused_endpoint_until_the_deadline_says_not_run`.)
#[tokio::test]
async fn a_dead_proxy_is_named_in_the_error() {
    let _env = ENV.lock().await;
    clear();
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = dead.local_addr().unwrap().to_string();
    drop(dead);
    std::env::set_var("HTTP_PROXY", format!("http://{address}"));
    // The deadline first.
    let c = client("http://runtime.invalid:8080/v1/arcp")
        .allow_insecure_token(true)
        .connect()
        .await
        .unwrap();
    let started = Instant::now();
    let deadline = c
        .invoke_tool("refund", json!({"order": 1}))
        .deadline(Duration::from_secs(1))
        .send()
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(1_300));
    assert_eq!(deadline.execution(), Execution::NotRun, "{deadline:?}");
    // The retry budget first.
    let c = client("http://runtime.invalid:8080/v1/arcp")
        .allow_insecure_token(true)
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(5))
                .max_delay(Duration::from_millis(40))
                .max_attempts(3)
                .max_elapsed(Duration::from_millis(300)),
        )
        .connect()
        .await
        .unwrap();
    let budget = c
        .invoke_tool("refund", json!({"order": 1}))
        .deadline(Duration::from_secs(5))
        .send()
        .await
        .unwrap_err();
    assert_eq!(budget.execution(), Execution::NotRun, "{budget:?}");
    clear();
    for (what, e) in [("deadline first", &deadline), ("budget first", &budget)] {
        let text = e.to_string();
        assert!(
            text.contains("proxy") && text.contains(&address),
            "{what}: the error does not say the proxy {address} could not be reached: {text}"
        );
    }
}
