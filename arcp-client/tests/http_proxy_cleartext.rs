//! A token bound for an `http://` runtime goes to a forwarding proxy in
//! clear (the `Authorization` header of each request): refused when the
//! proxy, from `HTTP_PROXY` or the builder, is not on this machine, even
//! for a runtime on this machine, unless `allow_insecure_token`; `https://`
//! through the same proxy is a `CONNECT` tunnel with TLS inside, and is
//! allowed. (One test in its own binary: it sets the process's
//! environment.)

use std::time::Duration;

use arcp_sdk::{Client, Error};

fn refused(result: Result<Client, Error>, what: &str) {
    let err = result.expect_err(what);
    let text = err.to_string();
    assert!(
        matches!(
            err,
            Error::Connect {
                retryable: false,
                ..
            }
        ),
        "{what}: {err:?}"
    );
    assert!(text.contains("allow_insecure_token"), "{what}: {text}");
    assert!(
        text.contains("10.255.255.1"),
        "{what}: names the proxy: {text}"
    );
    assert!(!text.contains("http-hop-token"), "{what}: {text}");
}

#[tokio::test]
async fn an_http_token_through_a_remote_proxy_is_refused_unless_allowed() {
    std::env::set_var("HTTP_PROXY", "http://user:pw@10.255.255.1:3128");
    std::env::set_var("HTTPS_PROXY", "http://10.255.255.1:3128");
    std::env::remove_var("NO_PROXY");
    std::env::remove_var("no_proxy");
    let target = "http://127.0.0.1:9/arcp";
    let started = std::time::Instant::now();
    refused(
        Client::builder(target)
            .bearer_token("http-hop-token")
            .connect()
            .await,
        "HTTP_PROXY",
    );
    refused(
        Client::builder("http://user:http-hop-token@127.0.0.1:9/arcp")
            .connect()
            .await,
        "the URL's credentials",
    );
    refused(
        Client::builder(target)
            .bearer_token("http-hop-token")
            .no_proxy()
            .proxy("http://10.255.255.1:3128")
            .connect()
            .await,
        "the builder's proxy",
    );
    assert!(started.elapsed() < Duration::from_secs(1), "it dialed");
    // Allowed: TLS through the tunnel, no proxy, no credential, the option.
    for (builder, what) in [
        (
            Client::builder("https://runtime.example/arcp").bearer_token("t"),
            "https://",
        ),
        (
            Client::builder(target).bearer_token("t").no_proxy(),
            "no proxy",
        ),
        (Client::builder(target), "no credential"),
        (
            Client::builder(target)
                .bearer_token("t")
                .allow_insecure_token(true),
            "allowed",
        ),
    ] {
        // A refused configuration ends every call of a lazy client with
        // its error; an allowed one only fails to reach the proxy.
        let client = builder.connect_lazy();
        let call = client
            .invoke_tool("echo", serde_json::json!({}))
            .deadline(std::time::Duration::from_millis(300))
            .await;
        if let Err(err) = call {
            assert!(
                !err.to_string().contains("allow_insecure_token"),
                "{what}: {err}"
            );
        }
    }
    std::env::remove_var("HTTP_PROXY");
    std::env::remove_var("HTTPS_PROXY");
}
