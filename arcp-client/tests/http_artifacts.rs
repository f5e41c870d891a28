//! Artifact fetch against wiremock: verified bytes, sha256 and size
//! mismatches, 404, oversize, 503 then ok, and the token kept to the
//! runtime's own origin.

mod http_support;

use std::time::{Duration, Instant};

use arcp_sdk::{ArtifactFetcher, ArtifactRef, Error};
use http_support::*;
use wiremock::matchers::{header_exists, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const BODY: &[u8] = b"hello, artifact";

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn serve(server: &MockServer, at: &str, response: ResponseTemplate, times: u64) {
    Mock::given(method("GET"))
        .and(path(at))
        .respond_with(response)
        .up_to_n_times(times)
        .expect(times)
        .mount(server)
        .await;
}

fn ok() -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(BODY, "text/plain")
}

fn fetcher() -> ArtifactFetcher {
    ArtifactFetcher::builder()
        .retry(fast_retry())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_verified_artifact_is_returned() {
    let server = MockServer::start().await;
    serve(&server, "/a/1", ok(), 1).await;
    let r = ArtifactRef::new(format!("{}/a/1", server.uri()))
        .with_sha256(sha256_hex(BODY))
        .with_size(BODY.len() as u64)
        .with_media_type("text/plain");
    assert_eq!(fetcher().fetch(&r).await.unwrap(), BODY);
    let requests = server.received_requests().await.unwrap();
    assert!(requests[0].headers["accept"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
}

#[tokio::test]
async fn a_sha256_mismatch_is_a_typed_error_never_the_bytes() {
    let server = MockServer::start().await;
    serve(&server, "/a/1", ok(), 1).await;
    let wrong = sha256_hex(b"something else");
    let r = ArtifactRef::new(format!("{}/a/1", server.uri())).with_sha256(wrong.clone());
    let err = fetcher().fetch(&r).await.unwrap_err();
    let Error::ArtifactMismatch {
        what,
        expected,
        actual,
        ..
    } = &err
    else {
        panic!("expected ArtifactMismatch, got {err:?}");
    };
    assert_eq!(what, "sha256");
    assert_eq!(expected, &wrong);
    assert_eq!(actual, &sha256_hex(BODY));
    assert_eq!(err.code_name(), "ARTIFACT_MISMATCH");
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn a_size_mismatch_is_a_typed_error() {
    let server = MockServer::start().await;
    serve(&server, "/a/1", ok(), 1).await;
    let r = ArtifactRef::new(format!("{}/a/1", server.uri())).with_size(3);
    let err = fetcher().fetch(&r).await.unwrap_err();
    assert!(
        matches!(&err, Error::ArtifactMismatch { what, .. } if what == "size"),
        "{err:?}"
    );
}

#[tokio::test]
async fn not_found_is_typed_and_not_retried() {
    let server = MockServer::start().await;
    serve(&server, "/gone", ResponseTemplate::new(404), 1).await;
    let r = ArtifactRef::new(format!("{}/gone?X-Signature=secret", server.uri()));
    let err = fetcher().fetch(&r).await.unwrap_err();
    assert!(
        matches!(&err, Error::ArtifactNotFound { status: 404, .. }),
        "{err:?}"
    );
    // Presigned query strings never reach messages.
    assert!(!err.to_string().contains("secret"), "{err}");
}

#[tokio::test]
async fn an_oversized_body_stops_at_the_limit() {
    let server = MockServer::start().await;
    let big = vec![7u8; 64 * 1024];
    serve(
        &server,
        "/big",
        ResponseTemplate::new(200).set_body_raw(big, "application/octet-stream"),
        1,
    )
    .await;
    let small = ArtifactFetcher::builder().max_size(1024).build().unwrap();
    let r = ArtifactRef::new(format!("{}/big", server.uri()));
    let err = small.fetch(&r).await.unwrap_err();
    assert!(
        matches!(&err, Error::ArtifactTooLarge { limit: 1024, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_reference_over_the_limit_is_refused_without_a_request() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ok())
        .expect(0)
        .mount(&server)
        .await;
    let small = ArtifactFetcher::builder().max_size(10).build().unwrap();
    let r = ArtifactRef::new(format!("{}/big", server.uri())).with_size(11);
    let err = small.fetch(&r).await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::ArtifactTooLarge {
                limit: 10,
                size: Some(11),
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn unavailable_then_ok_is_retried_after_retry_after() {
    let server = MockServer::start().await;
    serve(
        &server,
        "/a/1",
        ResponseTemplate::new(503).insert_header("Retry-After", "1"),
        1,
    )
    .await;
    serve(&server, "/a/1", ok(), 1).await;
    let r = ArtifactRef::new(format!("{}/a/1", server.uri())).with_sha256(sha256_hex(BODY));
    let started = Instant::now();
    assert_eq!(fetcher().fetch(&r).await.unwrap(), BODY);
    assert!(started.elapsed() >= Duration::from_millis(950));
}

#[tokio::test]
async fn unavailable_every_time_gives_up_retryable() {
    let server = MockServer::start().await;
    serve(&server, "/a/1", ResponseTemplate::new(503), 3).await;
    let fetcher = ArtifactFetcher::builder()
        .retry(fast_retry().max_attempts(3))
        .build()
        .unwrap();
    let r = ArtifactRef::new(format!("{}/a/1", server.uri()));
    let err = fetcher.fetch(&r).await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::ArtifactFetch {
                status: Some(503),
                retryable: true,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn unfetchable_references_are_invalid() {
    let f = fetcher();
    for r in [
        ArtifactRef::new("arcp://session/s/artifact/a"),
        ArtifactRef::new("not a uri"),
        ArtifactRef::new("https://example.invalid/a").with_sha256("abc"),
    ] {
        let err = f.fetch(&r).await.unwrap_err();
        assert!(matches!(err, Error::InvalidCall { .. }), "{err:?}");
    }
}

#[tokio::test]
async fn the_client_sends_its_token_only_to_the_runtime_origin() {
    let runtime = MockServer::start().await;
    let storage = MockServer::start().await;
    Mock::given(method("GET"))
        .and(header_exists("authorization"))
        .respond_with(ok())
        .expect(1)
        .mount(&runtime)
        .await;
    Mock::given(method("GET"))
        .respond_with(ok())
        .expect(1)
        .mount(&storage)
        .await;
    let client = client(&format!("{}/arcp", runtime.uri()))
        .connect()
        .await
        .unwrap();
    let own = ArtifactRef::new(format!("{}/artifacts/1", runtime.uri()));
    assert_eq!(client.fetch_artifact(&own).await.unwrap(), BODY);
    let foreign = ArtifactRef::new(format!("{}/bucket/1", storage.uri()));
    assert_eq!(client.fetch_artifact(&foreign).await.unwrap(), BODY);
    let sent = &storage.received_requests().await.unwrap()[0];
    assert!(!sent.headers.contains_key("authorization"));
}

#[tokio::test]
async fn the_client_limit_applies() {
    let server = MockServer::start().await;
    serve(&server, "/a/1", ok(), 1).await;
    let client = client(&server.uri())
        .max_artifact_size(4)
        .connect()
        .await
        .unwrap();
    let r = ArtifactRef::new(format!("{}/a/1", server.uri()));
    let err = client.fetch_artifact(&r).await.unwrap_err();
    assert!(
        matches!(err, Error::ArtifactTooLarge { limit: 4, .. }),
        "{err:?}"
    );
}

/// Answers only a request that carries the token the provider issued last.
struct CurrentTokenOnly(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl wiremock::Respond for CurrentTokenOnly {
    fn respond(&self, request: &wiremock::Request) -> ResponseTemplate {
        let current = self.0.load(std::sync::atomic::Ordering::SeqCst);
        let sent = request
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if current > 0 && sent == Some(format!("Bearer token-{current}").as_str()) {
            ok()
        } else {
            ResponseTemplate::new(401)
        }
    }
}

#[tokio::test]
async fn the_client_fetches_with_its_token_providers_current_token() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let runtime = MockServer::start().await;
    let issued = Arc::new(AtomicU64::new(0));
    Mock::given(method("GET"))
        .respond_with(CurrentTokenOnly(issued.clone()))
        .mount(&runtime)
        .await;
    let counter = issued.clone();
    let client = arcp_sdk::Client::builder(format!("{}/arcp", runtime.uri()))
        .token_provider(move || {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            async move { Ok::<_, std::io::Error>(format!("token-{n}")) }
        })
        .retry(fast_retry())
        .connect()
        .await
        .unwrap();
    let own = ArtifactRef::new(format!("{}/artifacts/1", runtime.uri()));
    // Each fetch asks the provider: the token the endpoint wants changes.
    for _ in 0..2 {
        assert_eq!(client.fetch_artifact(&own).await.unwrap(), BODY);
    }
    assert!(issued.load(Ordering::SeqCst) >= 2);
    // The provider's token still goes only to the runtime's own origin.
    let storage = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ok())
        .expect(1)
        .mount(&storage)
        .await;
    let foreign = ArtifactRef::new(format!("{}/bucket/1", storage.uri()));
    assert_eq!(client.fetch_artifact(&foreign).await.unwrap(), BODY);
    let sent = &storage.received_requests().await.unwrap()[0];
    assert!(!sent.headers.contains_key("authorization"));
}

#[tokio::test]
async fn the_client_fetches_artifacts_through_its_proxy() {
    // A host that does not resolve: only the proxy can reach it.
    let proxy = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/artifacts/1"))
        .respond_with(ok())
        .expect(1)
        .mount(&proxy)
        .await;
    let client = arcp_sdk::Client::builder("http://runtime.invalid/arcp")
        .proxy(proxy.uri())
        .retry(fast_retry())
        .connect()
        .await
        .unwrap();
    let artifact = ArtifactRef::new("http://runtime.invalid/artifacts/1");
    assert_eq!(client.fetch_artifact(&artifact).await.unwrap(), BODY);
    let sent = &proxy.received_requests().await.unwrap()[0];
    assert_eq!(
        sent.headers.get("host").and_then(|h| h.to_str().ok()),
        Some("runtime.invalid")
    );
}

#[tokio::test]
async fn no_proxy_fetches_directly() {
    let runtime = MockServer::start().await;
    serve(&runtime, "/artifacts/1", ok(), 1).await;
    // A proxy that does not listen: set, then turned off.
    let client = arcp_sdk::Client::builder(format!("{}/arcp", runtime.uri()))
        .proxy("http://127.0.0.1:9")
        .no_proxy()
        .retry(fast_retry())
        .connect()
        .await
        .unwrap();
    let artifact = ArtifactRef::new(format!("{}/artifacts/1", runtime.uri()));
    assert_eq!(client.fetch_artifact(&artifact).await.unwrap(), BODY);
}
