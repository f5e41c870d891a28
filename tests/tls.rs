//! `wss://` through rustls: a loopback TLS endpoint with a self-signed
//! certificate (rcgen) in front of the mock runtime. Trusted through a custom
//! root, calls work; untrusted, connecting fails at once with a clear,
//! non-retryable error.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arcp_mock::Dialect;
use arcp_sdk::{Client, Error};
use serde_json::json;
use support::mock::mock;
use support::tls::tls_front;

#[tokio::test]
async fn wss_with_a_custom_root_works() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (port, cert) = tls_front(mock.address()).await;
    let client = Client::builder(format!("wss://localhost:{port}/arcp"))
        .add_root_certificate_der(cert.to_vec())
        .connect()
        .await
        .unwrap();
    let out = client
        .invoke_tool("echo", json!({"over": "tls"}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"over": "tls"}));
    assert_eq!(mock.executions("echo"), 1);
}

#[tokio::test]
async fn an_untrusted_certificate_is_a_clear_non_retried_error() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (port, _cert) = tls_front(mock.address()).await;
    let started = Instant::now();
    let err = Client::builder(format!("wss://localhost:{port}/arcp"))
        .handshake_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap_err();
    match &err {
        Error::Connect {
            message, retryable, ..
        } => {
            assert!(!retryable, "a certificate error is not retried");
            assert!(message.contains("TLS"), "{message}");
            assert!(message.to_lowercase().contains("certificate"), "{message}");
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert!(err.is_connect() && !err.is_timeout() && !err.is_auth());
    // `source()` leads to the rustls error that says why.
    let source = std::error::Error::source(&err).expect("a source");
    let tls = source
        .downcast_ref::<rustls::Error>()
        .expect("a rustls error");
    assert!(
        matches!(tls, rustls::Error::InvalidCertificate(_)),
        "{tls:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2), "failed at once");
    assert_eq!(mock.connections(), 0, "nothing reached the runtime");
}

#[tokio::test]
async fn pem_roots_are_read_and_bad_pem_is_named() {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let pem = certified.cert.pem();
    assert!(Client::builder("wss://localhost:1/arcp")
        .add_root_certificates_pem(&pem)
        .is_ok());
    let err = Client::builder("wss://localhost:1/arcp")
        .add_root_certificates_pem("not a certificate")
        .unwrap_err();
    assert!(err.to_string().contains("no certificate"), "{err}");
}

/// The HTTP binding over TLS: the mock's HTTP side behind the same front.
#[tokio::test]
async fn https_with_a_custom_root_works() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (port, cert) = tls_front(mock.http_address()).await;
    let client = Client::builder(format!("https://localhost:{port}/arcp"))
        .add_root_certificate_der(cert.to_vec())
        .connect()
        .await
        .unwrap();
    for n in 0..3 {
        let out = client.invoke_tool("echo", json!({ "n": n })).await.unwrap();
        assert_eq!(out.value, json!({ "n": n }));
    }
    assert_eq!(mock.executions("echo"), 3);
    assert_eq!(mock.http_requests(), 3);
}

#[tokio::test]
async fn https_with_an_untrusted_certificate_is_a_clear_non_retried_error() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (port, _cert) = tls_front(mock.http_address()).await;
    let client = Client::builder(format!("https://localhost:{port}/arcp"))
        .handshake_timeout(Duration::from_secs(5))
        .retry(
            arcp_sdk::RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(5))
                .max_delay(Duration::from_millis(20))
                .max_elapsed(Duration::from_secs(1)),
        )
        .connect()
        .await
        .unwrap();
    let started = Instant::now();
    let err = client
        .invoke_tool("echo", json!({}))
        .deadline(Duration::from_secs(3))
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.execution(), arcp_sdk::Execution::NotRun, "{err:?}");
    // As over WebSocket: retrying cannot make the certificate trusted.
    match &err {
        Error::Connect {
            message, retryable, ..
        } => {
            assert!(!retryable, "a certificate error is not retried");
            assert!(message.contains("TLS"), "{message}");
            assert!(message.to_lowercase().contains("certificate"), "{message}");
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "failed at once"
    );
    assert_eq!(mock.http_requests(), 0, "nothing reached the runtime");
}

/// A caller's own rustls configuration, ALPN protocols and all: the HTTP
/// binding speaks HTTP/1.1 over it (and never panics on it).
#[tokio::test]
async fn https_with_a_callers_tls_config_that_names_alpn_protocols() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (port, cert) = tls_front(mock.http_address()).await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let client = Client::builder(format!("https://localhost:{port}/arcp"))
        .tls_config(Arc::new(config))
        .connect()
        .await
        .unwrap();
    let out = client
        .invoke_tool("echo", json!({"alpn": 1}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"alpn": 1}));
}
