//! Artifact fetch over `https://`: a redirect to `http://` is refused (the
//! bytes asked for over TLS would come in clear, and a token would follow),
//! while a redirect that stays on `https://` is followed. A loopback TLS
//! endpoint (rcgen's self-signed certificate) fronts a wiremock server.

use std::sync::Arc;

use arcp_sdk::{ArtifactFetcher, ArtifactRef, Error, RetryPolicy};
use rustls::pki_types::CertificateDer;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

mod support;

use support::tls::tls_front;

const BODY: &[u8] = b"over tls";

fn trusting(cert: CertificateDer<'static>) -> ArtifactFetcher {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    ArtifactFetcher::builder()
        .tls_config(Arc::new(tls))
        .retry(RetryPolicy::exponential().max_attempts(2))
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

#[tokio::test]
async fn a_redirect_from_https_to_http_is_refused() {
    let storage = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/plain"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(BODY, "text/plain"))
        .mount(&storage)
        .await;
    let (port, cert) = tls_front(*storage.address()).await;
    let fetcher = trusting(cert);
    redirect(&storage, "/down", &format!("{}/plain", storage.uri())).await;
    redirect(
        &storage,
        "/across",
        &format!("https://localhost:{port}/plain"),
    )
    .await;

    // Staying on https is followed.
    let across = ArtifactRef::new(format!("https://localhost:{port}/across"));
    assert_eq!(fetcher.fetch(&across).await.unwrap(), BODY);

    let before = storage.received_requests().await.unwrap().len();
    let down = ArtifactRef::new(format!("https://localhost:{port}/down"));
    match fetcher.fetch(&down).await {
        Err(Error::ArtifactFetch {
            status, retryable, ..
        }) => {
            assert_eq!(status, Some(302));
            assert!(!retryable, "a policy refusal is not retried");
        }
        other => panic!("expected the redirect refused, got {other:?}"),
    }
    let seen: Vec<String> = storage.received_requests().await.unwrap()[before..]
        .iter()
        .map(|r| r.url.path().to_owned())
        .collect();
    assert_eq!(seen, ["/down"], "the http location was never requested");
}
