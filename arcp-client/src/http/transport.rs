//! The connection stack of the HTTP binding's calls: hyper's HTTP/1.1
//! client and connection pool over TCP, rustls, and the proxy the
//! environment names, decided once for the client's one endpoint.
//!
//! ```text
//!  Transport::send ──▶ hyper pool ──(a new connection)──▶ Connector: the connect timeout
//!                                                          └▶ rustls for https:// (HttpsConnector)
//!                                                              └▶ Route: Direct        TCP to the endpoint
//!                                                                        Forward(proxy) TCP to an http:// proxy,
//!                                                                                       requests in absolute form
//!                                                                        Tunnel(proxy)  TCP to the proxy, CONNECT,
//!                                                                                       then TLS to the endpoint
//! ```
//!
//! Why not reqwest, as artifact fetch uses: its per-request layers
//! (redirect policy, retry policy, URL conversions: the request's URL is
//! parsed twice even with redirects off) cost a call about a quarter of its
//! CPU (BENCHMARKS.md). A call posts to one endpoint with no redirects, so
//! what reqwest adds is the proxy choice, made here once from the same
//! variables reqwest reads (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`,
//! `NO_PROXY`, in either case).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderValue, Request, Uri};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_service::Service;

use self::route::{ProxyError, Route, RouteStream};
use super::gate::GatedBody;
use crate::config::web_pki_config;

mod route;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long an idle connection stays in the pool.
const POOL_IDLE: Duration = Duration::from_secs(60);
/// TCP keepalive: the first probe after this long idle, then one each
/// this long, three unanswered ending the connection.
const TCP_KEEPALIVE: Duration = Duration::from_secs(15);

/// The call path's HTTP client: one per [`crate::Client`], its pool shared
/// by every call.
pub(crate) struct Transport {
    client: Client<Connector, GatedBody>,
    user_agent: HeaderValue,
    /// Credentials for a forwarding proxy, sent with each request (a
    /// tunnelling proxy gets them in its `CONNECT`).
    proxy_authorization: Option<HeaderValue>,
}

/// What a [`Transport`] is built from.
pub(crate) struct Settings {
    /// The one endpoint every request goes to (the proxy is chosen for it).
    pub(crate) endpoint: Uri,
    pub(crate) user_agent: String,
    /// Bounds connecting: TCP, the proxy's `CONNECT` and TLS together.
    pub(crate) connect_timeout: Duration,
    /// rustls' configuration; `None` for the web PKI roots.
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
    /// Which proxy, if any, serves the endpoint.
    pub(crate) proxies: Matcher,
}

impl Transport {
    /// Builds the client. Nothing connects until the first request.
    pub(crate) fn new(settings: Settings) -> Result<Self, String> {
        let user_agent = HeaderValue::try_from(settings.user_agent)
            .map_err(|_| "the client name cannot be sent as a User-Agent header".to_owned())?;
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        // A peer gone silent under a long call shows within a minute.
        tcp.set_keepalive(Some(TCP_KEEPALIVE));
        tcp.set_keepalive_interval(Some(TCP_KEEPALIVE));
        tcp.set_keepalive_retries(Some(3));
        let (route, proxy_authorization) =
            Route::for_endpoint(&settings.endpoint, &settings.proxies, tcp, &user_agent)?;
        let mut tls = match settings.tls {
            Some(tls) => (*tls).clone(),
            None => web_pki_config(&[])
                .ok_or_else(|| "TLS: the default protocol versions are unsupported".to_owned())?,
        };
        // This client speaks HTTP/1.1 alone: it offers that, whatever a
        // caller's configuration names (as reqwest did).
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        // `http://` passes through; `https://` gets TLS.
        let https = HttpsConnector::from((route, Arc::new(tls)));
        let connector = Connector {
            inner: https,
            timeout: settings.connect_timeout,
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(connector);
        Ok(Transport {
            client,
            user_agent,
            proxy_authorization,
        })
    }

    /// Sends one request; the `User-Agent` (and a forwarding proxy's
    /// credentials) are added here.
    pub(crate) fn send(&self, mut request: Request<GatedBody>) -> ResponseFuture {
        let headers = request.headers_mut();
        headers.insert(http::header::USER_AGENT, self.user_agent.clone());
        if let Some(auth) = &self.proxy_authorization {
            headers.insert(http::header::PROXY_AUTHORIZATION, auth.clone());
        }
        self.client.request(request)
    }
}

/// Why a failed connect cannot succeed on a retry, if it cannot: a TLS
/// handshake that failed (an untrusted or mismatched certificate), or a
/// proxy that refused the tunnel for good (407: it needs credentials; any
/// other 4xx but 408 and 429). The errors are found along the chain of
/// causes, inside the I/O errors that carry them (an I/O error's `source`
/// skips the error it wraps, so those are opened by `get_ref`).
pub(crate) fn definitive_failure(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cause = Some(e);
    while let Some(error) = cause {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(format!("the TLS handshake failed: {tls}"));
        }
        if let Some(proxy) = error.downcast_ref::<ProxyError>() {
            return proxy.is_definitive().then(|| proxy.to_string());
        }
        cause = match error.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => error.source(),
        };
    }
    None
}

/// rustls over a [`Route`], all of it under the connect timeout.
#[derive(Clone)]
struct Connector {
    inner: HttpsConnector<Route>,
    timeout: Duration,
}

type Connecting =
    Pin<Box<dyn Future<Output = Result<MaybeHttpsStream<RouteStream>, BoxError>> + Send>>;

impl Service<Uri> for Connector {
    type Response = MaybeHttpsStream<RouteStream>;
    type Error = BoxError;
    type Future = Connecting;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, dst: Uri) -> Connecting {
        let connecting = self.inner.call(dst);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(connected) => connected,
                Err(_) => Err(format!("connecting took longer than {timeout:?}").into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::gate::AttemptGate;
    use crate::request::CallShared;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn settings(endpoint: &str, proxies: Matcher) -> Settings {
        Settings {
            endpoint: endpoint.parse().unwrap(),
            user_agent: "arcp-sdk/test".into(),
            connect_timeout: Duration::from_secs(5),
            tls: None,
            proxies,
        }
    }

    fn post(transport: &Transport, endpoint: &str) -> ResponseFuture {
        let gate = AttemptGate::new(Arc::new(CallShared::default()));
        let body = bytes::Bytes::from_static(b"{}");
        let mut request = Request::new(GatedBody::new(body, gate));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = endpoint.parse().unwrap();
        transport.send(request)
    }

    /// A peer that reads one request head (lower-cased), answers `reply`,
    /// and hands the head over.
    async fn peer(reply: &'static str) -> (String, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let head = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                if stream.read(&mut byte).await.unwrap() == 0 {
                    break;
                }
                head.push(byte[0]);
            }
            stream.write_all(reply.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&head).to_lowercase()
        });
        (address, head)
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

    fn describe_chain(e: &(dyn std::error::Error + 'static)) -> String {
        crate::http::describe(e)
    }

    #[tokio::test]
    async fn a_forwarding_proxy_gets_each_request_in_absolute_form_with_its_credentials() {
        let (proxy, head) = peer(OK).await;
        let proxies = Matcher::builder()
            .http(format!("http://user:pw@{proxy}"))
            .build();
        // The endpoint's host does not resolve: only the proxy can answer.
        let endpoint = "http://runtime.invalid:9/arcp";
        let transport = Transport::new(settings(endpoint, proxies)).unwrap();
        let response = post(&transport, endpoint).await.unwrap();
        assert_eq!(response.status(), 200);
        let head = head.await.unwrap();
        assert!(
            head.starts_with("post http://runtime.invalid:9/arcp http/1.1\r\n"),
            "{head}"
        );
        assert!(
            head.contains("proxy-authorization: basic dxnlcjpwdw==\r\n"),
            "{head}"
        );
        assert!(head.contains("user-agent: arcp-sdk/test\r\n"), "{head}");
    }

    #[tokio::test]
    async fn an_https_endpoint_is_tunnelled_through_connect() {
        let (proxy, head) = peer("HTTP/1.1 407 Proxy Authentication Required\r\n\r\n").await;
        let proxies = Matcher::builder()
            .https(format!("http://user:pw@{proxy}"))
            .build();
        let endpoint = "https://runtime.invalid/arcp";
        let transport = Transport::new(settings(endpoint, proxies)).unwrap();
        let refused = post(&transport, endpoint).await.unwrap_err();
        // The proxy's refusal is a failure to connect: nothing was sent.
        assert!(refused.is_connect(), "{refused:?}");
        let head = head.await.unwrap();
        assert!(
            head.starts_with("connect runtime.invalid:443 http/1.1\r\n"),
            "{head}"
        );
        assert!(head.contains("user-agent: arcp-sdk/test\r\n"), "{head}");
        let shown = describe_chain(&refused);
        assert!(shown.contains("refused the credentials"), "{shown}");
        assert!(!shown.contains("pw"), "{shown}");
        assert!(
            head.contains("proxy-authorization: basic dxnlcjpwdw==\r\n"),
            "{head}"
        );
    }

    #[tokio::test]
    async fn an_endpoint_under_no_proxy_is_reached_directly() {
        let (runtime, head) = peer(OK).await;
        let unused = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxies = Matcher::builder()
            .http(format!("http://{}", unused.local_addr().unwrap()))
            .no("127.0.0.1")
            .build();
        let endpoint = format!("http://{runtime}/arcp");
        let transport = Transport::new(settings(&endpoint, proxies)).unwrap();
        let response = post(&transport, &endpoint).await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(head.await.unwrap().starts_with("post /arcp http/1.1\r\n"));
    }

    #[test]
    fn a_proxy_that_is_not_plain_http_is_refused_by_its_address_alone() {
        for proxy in [
            "socks5://user:pw@127.0.0.1:1080",
            "https://user:pw@proxy.example:8443",
        ] {
            let proxies = Matcher::builder().all(proxy).build();
            let Err(message) = Transport::new(settings("http://runtime.example/arcp", proxies))
            else {
                panic!("{proxy} was taken");
            };
            let address = proxy.replace("user:pw@", "");
            assert!(message.contains(&address), "{message}");
            assert!(!message.contains("pw"), "{message}");
        }
    }
}
