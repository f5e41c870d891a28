//! Every TLS connection uses the SDK's own rustls configuration and crypto
//! provider, never the process-wide default: an application whose default
//! provider is unusable (or ambiguous, with two providers compiled in)
//! still gets working `wss://` and `https://` and certificate errors that
//! say what failed, not a panic in the connection task.
//!
//! A binary of its own: the process default installed here would leak into
//! other tests.

mod support;

use std::sync::Once;
use std::time::Duration;

use arcp_mock::Dialect;
use arcp_sdk::{ArtifactFetcher, ArtifactRef, Client, Error};
use serde_json::json;
use support::mock::mock;
use support::tls::tls_front;

/// Installs, once, a process-wide provider no TLS connection can use: no
/// cipher suites and no key exchange groups. Anything built from the
/// process default panics or fails its handshake.
fn install_unusable_default() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let unusable = rustls::crypto::CryptoProvider {
            cipher_suites: Vec::new(),
            kx_groups: Vec::new(),
            ..rustls::crypto::ring::default_provider()
        };
        unusable
            .install_default()
            .expect("no default provider was installed before");
    });
}

fn assert_certificate_error(err: &Error) {
    match err {
        Error::Connect {
            message, retryable, ..
        } => {
            assert!(!retryable, "{message}");
            assert!(message.to_lowercase().contains("certificate"), "{message}");
        }
        other => panic!("expected a certificate error, got {other:?}"),
    }
}

#[tokio::test]
async fn wss_with_a_custom_root_works_whatever_the_process_default() {
    install_unusable_default();
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (port, cert) = tls_front(mock.address()).await;
    let client = Client::builder(format!("wss://localhost:{port}/arcp"))
        .add_root_certificate_der(cert.to_vec())
        .connect()
        .await
        .unwrap();
    let out = client.invoke_tool("echo", json!({"n": 1})).await.unwrap();
    assert_eq!(out.value, json!({"n": 1}));
    assert_eq!(mock.executions("echo"), 1);
}

/// With no TLS setting at all (the web PKI roots), the handshake runs with
/// the SDK's provider: it gets as far as the server's certificate, which
/// the web PKI does not trust.
#[tokio::test]
async fn wss_with_default_settings_reaches_the_certificate_check() {
    install_unusable_default();
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (port, _cert) = tls_front(mock.address()).await;
    let err = Client::builder(format!("wss://localhost:{port}/arcp"))
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap_err();
    assert_certificate_error(&err);
    assert_eq!(mock.connections(), 0);
}

#[tokio::test]
async fn https_with_default_settings_reaches_the_certificate_check() {
    install_unusable_default();
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (port, _cert) = tls_front(mock.http_address()).await;
    let client = Client::builder(format!("https://localhost:{port}/arcp"))
        .connect()
        .await
        .unwrap();
    let err = client
        .invoke_tool("echo", json!({}))
        .deadline(Duration::from_secs(5))
        .send()
        .await
        .unwrap_err();
    assert_certificate_error(&err);
    assert_eq!(mock.executions("echo"), 0);
}

/// A standalone artifact fetcher with no TLS configuration of its own
/// (no retries: the question is only which provider ran the handshake).
#[tokio::test]
async fn an_artifact_fetch_with_default_settings_reaches_the_certificate_check() {
    install_unusable_default();
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (port, _cert) = tls_front(mock.http_address()).await;
    let fetcher = ArtifactFetcher::builder()
        .timeout(Duration::from_secs(5))
        .retry(arcp_sdk::RetryPolicy::none())
        .build()
        .unwrap();
    let artifact = ArtifactRef::new(format!("https://localhost:{port}/blob"));
    let err = fetcher.fetch(&artifact).await.unwrap_err();
    let text = err.to_string().to_lowercase();
    assert!(text.contains("certificate"), "{err:?}");
}
