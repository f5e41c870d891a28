//! Artifact fetch is safe with URIs a runtime chooses: no `Referer` on a
//! redirect, a URL's query (presigned credentials) never in an error or a
//! log, the token only to the runtime's own origin on every hop, and
//! link-local (cloud metadata) addresses refused unless allowed.

mod http_support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arcp_sdk::{ArtifactFetcher, ArtifactRef, Error};
use http_support::*;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const BODY: &[u8] = b"hello, artifact";
const SIGNATURE: &str = "X-Amz-Signature=c2VjcmV0LXNpZ25hdHVyZQ";

fn fetcher() -> ArtifactFetcher {
    ArtifactFetcher::builder()
        .retry(fast_retry())
        .connect_timeout(Duration::from_millis(300))
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap()
}

async fn redirect(server: &MockServer, at: &str, to: &str) {
    Mock::given(method("GET"))
        .and(path(at))
        .respond_with(ResponseTemplate::new(302).insert_header("location", to))
        .mount(server)
        .await;
}

async fn ok_at(server: &MockServer, at: &str) {
    Mock::given(method("GET"))
        .and(path(at))
        .respond_with(ResponseTemplate::new(200).set_body_raw(BODY, "text/plain"))
        .mount(server)
        .await;
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Everything logged (every level) while `f` runs on this thread.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (logs, tracing::subscriber::set_default(subscriber))
}

#[tokio::test]
async fn a_redirect_sends_no_referer() {
    let server = MockServer::start().await;
    redirect(&server, "/a/1", "/b/1").await;
    ok_at(&server, "/b/1").await;
    let uri = format!("{}/a/1?{SIGNATURE}", server.uri());
    let bytes = fetcher().fetch(&ArtifactRef::new(uri)).await.unwrap();
    assert_eq!(bytes, BODY);
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2, "the redirect was followed");
    let second = &requests[1];
    assert_eq!(second.url.path(), "/b/1");
    assert!(
        !second.headers.contains_key("referer"),
        "Referer sent: {:?}",
        second.headers.get("referer")
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_fetch_keeps_the_query_out_of_errors_and_logs() {
    let (logs, _guard) = capture();
    // Straight to a dead address, and through a redirect to one.
    let server = MockServer::start().await;
    let dead = format!("http://127.0.0.1:{}/bucket/2?{SIGNATURE}", closed_port());
    redirect(&server, "/a/2", &dead).await;
    for uri in [
        format!("http://127.0.0.1:{}/bucket/1?{SIGNATURE}", closed_port()),
        format!("{}/a/2", server.uri()),
    ] {
        let e = fetcher().fetch(&ArtifactRef::new(uri)).await.unwrap_err();
        assert!(matches!(e, Error::ArtifactFetch { .. }), "{e:?}");
        for shown in [e.to_string(), format!("{e:?}")] {
            assert!(!shown.contains("c2VjcmV0"), "the query leaked: {shown}");
        }
    }
    let logged = logs.text();
    assert!(
        logged.contains("retrying"),
        "the logs were captured: {logged}"
    );
    assert!(!logged.contains("c2VjcmV0"), "the query leaked: {logged}");
}

#[tokio::test]
async fn link_local_addresses_are_refused_without_a_request() {
    let server = MockServer::start().await;
    redirect(
        &server,
        "/a/3",
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    )
    .await;
    for uri in [
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://[fe80::1]:8080/a".to_owned(),
        "http://[fd00:ec2::254]/latest".to_owned(),
        format!("{}/a/3", server.uri()),
    ] {
        let started = Instant::now();
        let e = fetcher().fetch(&ArtifactRef::new(&uri)).await.unwrap_err();
        match &e {
            Error::ArtifactFetch {
                message, retryable, ..
            } => {
                assert!(message.contains("allow_link_local"), "{uri}: {e}");
                assert!(!retryable, "{uri}: {e}");
            }
            other => panic!("{uri}: {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_millis(250),
            "{uri}: refused before any connection attempt, not after {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn link_local_addresses_are_reachable_when_allowed() {
    let allowed = ArtifactFetcher::builder()
        .retry(fast_retry())
        .connect_timeout(Duration::from_millis(200))
        .timeout(Duration::from_millis(600))
        .allow_link_local(true)
        .build()
        .unwrap();
    // Nothing answers there in a test; what matters is that it was tried.
    let e = allowed
        .fetch(&ArtifactRef::new(
            "http://169.254.169.254/latest/meta-data/",
        ))
        .await
        .unwrap_err();
    assert!(!e.to_string().contains("allow_link_local"), "{e}");

    let server = MockServer::start().await;
    let client = client(&format!("{}/arcp", server.uri()))
        .connect()
        .await
        .unwrap();
    let e = client
        .fetch_artifact(&ArtifactRef::new("http://169.254.169.254/latest/"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("allow_link_local"), "{e}");
}

#[tokio::test]
async fn the_token_is_not_carried_by_a_redirect_to_another_origin() {
    let runtime = MockServer::start().await;
    let storage = MockServer::start().await;
    redirect(
        &runtime,
        "/artifacts/1",
        &format!("{}/bucket/1", storage.uri()),
    )
    .await;
    ok_at(&storage, "/bucket/1").await;
    let client = client(&format!("{}/arcp", runtime.uri()))
        .bearer_token("tok-artifact-secret")
        .connect()
        .await
        .unwrap();
    let own = ArtifactRef::new(format!("{}/artifacts/1", runtime.uri()));
    assert_eq!(client.fetch_artifact(&own).await.unwrap(), BODY);
    let first = &runtime.received_requests().await.unwrap()[0];
    assert_eq!(
        first.headers.get("authorization").unwrap(),
        "Bearer tok-artifact-secret",
        "the runtime's own origin gets the token"
    );
    let hop = &storage.received_requests().await.unwrap()[0];
    assert!(!hop.headers.contains_key("authorization"));
}
