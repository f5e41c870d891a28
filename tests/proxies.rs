//! `ws://` and `wss://` through an HTTP proxy's `CONNECT` tunnel (and the
//! HTTP binding's `https://` through the builder's proxy): the builder's
//! proxy, and the environment's (`HTTPS_PROXY`, `HTTP_PROXY`,
//! `NO_PROXY`). The proxy here is a small one written for the test: it
//! records each `CONNECT` and forwards the bytes.
//!
//! Only one test reads the environment; every other test names its proxy
//! (or none) explicitly, so the variables it sets change nothing else.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arcp_mock::Dialect;
use arcp_sdk::{Client, Error};
use serde_json::json;
use support::mock::mock;
use support::tls::tls_front;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A `CONNECT` proxy on loopback. Answers each tunnel request with
/// `answer`'s status (200 opens the tunnel), and records the request heads.
async fn connect_proxy(status: u16) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    match client.read_u8().await {
                        Ok(byte) => head.push(byte),
                        Err(_) => return,
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                seen.lock().unwrap().push(head.clone());
                let target = head.split_whitespace().nth(1).unwrap_or("").to_owned();
                if status != 200 || !head.starts_with("CONNECT ") {
                    let answer = format!("HTTP/1.1 {status} No\r\nContent-Length: 0\r\n\r\n");
                    let _ = client.write_all(answer.as_bytes()).await;
                    return;
                }
                let Ok(mut upstream) = TcpStream::connect(target.as_str()).await else {
                    let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                    return;
                };
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_ok()
                {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
            });
        }
    });
    (port, heads)
}

#[tokio::test]
async fn a_wss_call_goes_through_the_builders_proxy_with_its_credentials() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (tls_port, cert) = tls_front(mock.address()).await;
    let (proxy_port, heads) = connect_proxy(200).await;
    let client = Client::builder(format!("wss://localhost:{tls_port}/arcp"))
        .add_root_certificate_der(cert.to_vec())
        .proxy(format!("http://user:pw@127.0.0.1:{proxy_port}"))
        .connect()
        .await
        .unwrap();
    let out = client
        .invoke_tool("echo", json!({"via": "proxy"}))
        .await
        .unwrap();
    assert_eq!(out.value, json!({"via": "proxy"}));
    assert_eq!(mock.executions("echo"), 1);
    let heads = heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        heads[0].starts_with(&format!("CONNECT localhost:{tls_port} HTTP/1.1\r\n")),
        "{}",
        heads[0]
    );
    // base64("user:pw")
    assert!(
        heads[0].contains("\r\nProxy-Authorization: Basic dXNlcjpwdw==\r\n"),
        "{}",
        heads[0]
    );
}

#[tokio::test]
async fn a_ws_call_goes_through_the_builders_proxy() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (proxy_port, heads) = connect_proxy(200).await;
    let client = Client::builder(mock.ws_url())
        .proxy(format!("http://127.0.0.1:{proxy_port}"))
        .connect()
        .await
        .unwrap();
    client.invoke_tool("echo", json!({})).await.unwrap();
    assert_eq!(mock.executions("echo"), 1);
    let heads = heads.lock().unwrap().clone();
    let target = mock.address().to_string();
    assert!(
        heads[0].starts_with(&format!("CONNECT {target} ")),
        "{heads:?}"
    );
    assert!(!heads[0].contains("Proxy-Authorization"), "{heads:?}");
}

/// The builder's proxy serves the HTTP binding too.
#[tokio::test]
async fn an_https_call_goes_through_the_builders_proxy() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (tls_port, cert) = tls_front(mock.http_address()).await;
    let (proxy_port, heads) = connect_proxy(200).await;
    let client = Client::builder(format!("https://localhost:{tls_port}/arcp"))
        .add_root_certificate_der(cert.to_vec())
        .proxy(format!("http://127.0.0.1:{proxy_port}"))
        .connect()
        .await
        .unwrap();
    client.invoke_tool("echo", json!({})).await.unwrap();
    assert_eq!(mock.executions("echo"), 1);
    let heads = heads.lock().unwrap().clone();
    assert!(
        heads[0].starts_with(&format!("CONNECT localhost:{tls_port} ")),
        "{heads:?}"
    );
}

/// A proxy that wants credentials refuses for good: `connect()` fails at
/// once, naming the proxy (without the credentials) and what it wants.
#[tokio::test]
async fn a_proxy_that_refuses_the_credentials_fails_at_once() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (proxy_port, _heads) = connect_proxy(407).await;
    let started = Instant::now();
    let err = Client::builder(mock.ws_url())
        .proxy(format!("http://user:secret-pw@127.0.0.1:{proxy_port}"))
        .connect()
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "{err:?}");
    match &err {
        Error::Connect {
            message, retryable, ..
        } => {
            assert!(!retryable, "{message}");
            assert!(message.contains("407"), "{message}");
            assert!(
                message.contains(&format!("127.0.0.1:{proxy_port}")),
                "{message}"
            );
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
    assert!(!format!("{err:?}").contains("secret-pw"), "{err:?}");
    assert_eq!(mock.connections(), 0);
}

#[tokio::test]
async fn a_proxy_of_another_scheme_is_refused_by_name() {
    let err = Client::builder("ws://127.0.0.1:1/arcp")
        .proxy("socks5://127.0.0.1:1080")
        .connect()
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("socks5://127.0.0.1:1080"), "{err}");
}

/// The environment's proxy, per scheme, and `NO_PROXY`'s exceptions; the
/// builder's `no_proxy()` ignores the environment.
#[tokio::test]
async fn the_environments_proxy_applies_unless_no_proxy_names_the_host() {
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (tls_port, cert) = tls_front(mock.address()).await;
    let (proxy_port, heads) = connect_proxy(200).await;
    let proxy = format!("http://127.0.0.1:{proxy_port}");
    std::env::remove_var("NO_PROXY");
    std::env::remove_var("no_proxy");
    std::env::set_var("HTTPS_PROXY", &proxy);
    std::env::set_var("HTTP_PROXY", &proxy);
    let call = |url: String, direct: bool| {
        let cert = cert.clone();
        async move {
            let mut builder = Client::builder(url).add_root_certificate_der(cert.to_vec());
            if direct {
                builder = builder.no_proxy();
            }
            let client = builder.connect().await.unwrap();
            client.invoke_tool("echo", json!({})).await.unwrap();
            client.close().await;
        }
    };
    let wss = format!("wss://localhost:{tls_port}/arcp");
    call(wss.clone(), false).await;
    assert_eq!(heads.lock().unwrap().len(), 1, "wss:// through HTTPS_PROXY");
    call(mock.ws_url(), false).await;
    assert_eq!(heads.lock().unwrap().len(), 2, "ws:// through HTTP_PROXY");
    call(wss.clone(), true).await;
    assert_eq!(heads.lock().unwrap().len(), 2, "no_proxy(): direct");
    std::env::set_var("NO_PROXY", "example.com, localhost");
    call(wss, false).await;
    assert_eq!(heads.lock().unwrap().len(), 2, "NO_PROXY: direct");
    std::env::remove_var("NO_PROXY");
    std::env::remove_var("HTTPS_PROXY");
    std::env::remove_var("HTTP_PROXY");
    assert_eq!(mock.executions("echo"), 4);
}

/// A token bound for a `ws://` runtime, even on this machine, is refused
/// when the `CONNECT` tunnel goes through a proxy elsewhere: the session
/// hello would carry it in clear through the proxy. Refused before any
/// dial (the unroutable proxy is never tried), naming the option; a proxy
/// on this machine, or `wss://`, or the option, lets it through.
#[tokio::test]
async fn a_ws_token_through_a_remote_proxy_is_refused_unless_allowed() {
    let remote_proxy = "http://10.255.255.1:3128";
    let started = Instant::now();
    let err = Client::builder("ws://127.0.0.1:9/arcp")
        .bearer_token("proxy-hop-token-1")
        .proxy(remote_proxy)
        .connect()
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1), "it dialed");
    let text = err.to_string();
    assert!(
        matches!(
            err,
            Error::Connect {
                retryable: false,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(text.contains("allow_insecure_token"), "{text}");
    assert!(text.contains("10.255.255.1"), "names the proxy: {text}");
    assert!(!text.contains("proxy-hop-token-1"), "{text}");
    // A token provider is a credential too.
    let err = Client::builder("ws://127.0.0.1:9/arcp")
        .token_provider(|| async { Ok::<_, std::io::Error>("provided".to_owned()) })
        .proxy(remote_proxy)
        .connect_lazy()
        .invoke_tool("echo", json!({}))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("allow_insecure_token"), "{err}");
    // Allowed: TLS end to end, no credential, or the option.
    for builder in [
        Client::builder("wss://runtime.example/arcp").bearer_token("t"),
        Client::builder("ws://127.0.0.1:9/arcp"),
        Client::builder("ws://127.0.0.1:9/arcp")
            .bearer_token("t")
            .allow_insecure_token(true),
    ] {
        // A refused configuration ends every call of a lazy client with
        // its error; an allowed one only fails to reach the proxy.
        let client = builder.proxy(remote_proxy).connect_lazy();
        let call = client
            .invoke_tool("echo", json!({}))
            .deadline(Duration::from_millis(300))
            .await;
        if let Err(err) = call {
            assert!(!err.to_string().contains("allow_insecure_token"), "{err}");
        }
    }

    // Through a proxy on this machine the call runs, token and all.
    let mock = mock(Dialect::V1_1).start().await.unwrap();
    let (proxy_port, heads) = connect_proxy(200).await;
    let client = Client::builder(mock.ws_url())
        .bearer_token("local-hop-token")
        .proxy(format!("http://127.0.0.1:{proxy_port}"))
        .connect()
        .await
        .unwrap();
    client.invoke_tool("echo", json!({})).await.unwrap();
    assert_eq!(mock.executions("echo"), 1);
    assert_eq!(heads.lock().unwrap().len(), 1, "through the proxy");
}
