//! Where a new connection's TCP goes: straight to the endpoint, to a
//! forwarding proxy (an `http://` endpoint), or through a proxy's `CONNECT`
//! tunnel (an `https://` endpoint, TLS end to end), chosen once for the
//! client's one endpoint.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderValue, Uri};
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower_service::Service;

use super::BoxError;

/// The longest answer to `CONNECT` read before the tunnel is given up.
const MAX_CONNECT_ANSWER: usize = 8 * 1024;

/// Where a new connection's TCP goes.
#[derive(Clone)]
pub(super) enum Route {
    /// TCP to the endpoint itself.
    Direct(HttpConnector),
    /// TCP to the proxy, each request's target in absolute form.
    Forward { tcp: HttpConnector, proxy: Proxy },
    /// `CONNECT` to the proxy, then the endpoint's TLS through it.
    Tunnel {
        tcp: HttpConnector,
        proxy: Proxy,
        /// The proxy's credentials, and the client's `User-Agent` (some
        /// proxies filter tunnels on it), sent with `CONNECT`.
        authorization: Option<HeaderValue>,
        user_agent: HeaderValue,
    },
}

/// A proxy.
#[derive(Clone)]
pub(super) struct Proxy {
    /// Where to connect.
    uri: Uri,
    /// Its address for messages, without credentials.
    shown: String,
}

impl Route {
    /// The route to `endpoint` under the environment's proxy settings, and
    /// what a forwarding proxy's requests carry for its credentials.
    pub(super) fn for_endpoint(
        endpoint: &Uri,
        proxies: &Matcher,
        tcp: HttpConnector,
        user_agent: &HeaderValue,
    ) -> Result<(Route, Option<HeaderValue>), String> {
        let Some(intercept) = proxies.intercept(endpoint) else {
            return Ok((Route::Direct(tcp), None));
        };
        let proxy = Proxy {
            uri: intercept.uri().clone(),
            shown: shown(intercept.uri()),
        };
        if proxy.uri.scheme_str() != Some("http") {
            return Err(format!(
                "the proxy {} that the environment names for {} is not an http:// proxy, \
                 the only kind the HTTP binding connects through",
                proxy.shown,
                shown(endpoint)
            ));
        }
        let authorization = intercept.basic_auth().cloned().map(|mut auth| {
            auth.set_sensitive(true);
            auth
        });
        Ok(if endpoint.scheme_str() == Some("https") {
            let route = Route::Tunnel {
                tcp,
                proxy,
                authorization,
                user_agent: user_agent.clone(),
            };
            (route, None)
        } else {
            (Route::Forward { tcp, proxy }, authorization)
        })
    }
}

/// A proxy's address for a message: without its credentials.
fn shown(uri: &Uri) -> String {
    let host = uri.host().unwrap_or("");
    match (uri.scheme_str(), uri.port_u16()) {
        (Some(scheme), Some(port)) => format!("{scheme}://{host}:{port}"),
        (Some(scheme), None) => format!("{scheme}://{host}"),
        _ => host.to_owned(),
    }
}

/// Why going through a proxy failed.
#[derive(Debug)]
pub(crate) enum ProxyError {
    /// No TCP connection to the proxy.
    Unreachable { proxy: String, source: BoxError },
    /// The proxy answered `CONNECT` with something other than 2xx
    /// (`sent_credentials`: whether the request carried any).
    Refused {
        proxy: String,
        status: u16,
        sent_credentials: bool,
    },
    /// The proxy's answer to `CONNECT` was cut short, oversized or not HTTP.
    Broken { proxy: String, reason: String },
}

impl ProxyError {
    /// Whether a retry cannot change the answer: credentials missing or
    /// refused (407), or the tunnel refused by policy (a 4xx but 408, 429).
    pub(crate) fn is_definitive(&self) -> bool {
        matches!(self, ProxyError::Refused { status, .. }
            if (400..500).contains(status) && !matches!(status, 408 | 429))
    }
}

impl std::fmt::Display for ProxyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProxyError::Unreachable { proxy, .. } => {
                write!(f, "the proxy {proxy} could not be reached")
            }
            ProxyError::Refused {
                proxy,
                status: 407,
                sent_credentials: false,
            } => write!(
                f,
                "the proxy {proxy} answered CONNECT with HTTP 407: it needs credentials \
                 (in the proxy URL: http://user:password@host:port)"
            ),
            ProxyError::Refused {
                proxy,
                status: 407,
                sent_credentials: true,
            } => write!(
                f,
                "the proxy {proxy} answered CONNECT with HTTP 407: it refused the credentials \
                 in the proxy URL"
            ),
            ProxyError::Refused { proxy, status, .. } => {
                write!(f, "the proxy {proxy} answered CONNECT with HTTP {status}")
            }
            ProxyError::Broken { proxy, reason } => {
                write!(f, "the proxy {proxy} broke off the tunnel: {reason}")
            }
        }
    }
}

impl std::error::Error for ProxyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProxyError::Unreachable { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

type Routing = Pin<Box<dyn Future<Output = Result<RouteStream, BoxError>> + Send>>;

impl Service<Uri> for Route {
    type Response = RouteStream;
    type Error = BoxError;
    type Future = Routing;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Route::Direct(tcp) | Route::Forward { tcp, .. } | Route::Tunnel { tcp, .. } => {
                tcp.poll_ready(cx).map_err(Into::into)
            }
        }
    }

    fn call(&mut self, dst: Uri) -> Routing {
        match self {
            Route::Direct(tcp) => {
                let connecting = tcp.call(dst);
                Box::pin(async move {
                    Ok(RouteStream {
                        io: connecting.await?,
                        forwarded: false,
                    })
                })
            }
            Route::Forward { tcp, proxy } => {
                let connecting = tcp.call(proxy.uri.clone());
                let shown = proxy.shown.clone();
                Box::pin(async move {
                    let io = connecting.await.map_err(|e| ProxyError::Unreachable {
                        proxy: shown,
                        source: e.into(),
                    })?;
                    Ok(RouteStream {
                        io,
                        forwarded: true,
                    })
                })
            }
            Route::Tunnel {
                tcp,
                proxy,
                authorization,
                user_agent,
            } => {
                let connecting = tcp.call(proxy.uri.clone());
                let shown = proxy.shown.clone();
                let headers = TunnelHeaders {
                    authorization: authorization.clone(),
                    user_agent: user_agent.clone(),
                };
                Box::pin(async move {
                    let io = connecting.await.map_err(|e| ProxyError::Unreachable {
                        proxy: shown.clone(),
                        source: e.into(),
                    })?;
                    let mut stream = io.into_inner();
                    tunnel(&mut stream, &dst, &headers, &shown).await?;
                    Ok(RouteStream {
                        io: TokioIo::new(stream),
                        forwarded: false,
                    })
                })
            }
        }
    }
}

/// What `CONNECT` carries besides its target.
struct TunnelHeaders {
    authorization: Option<HeaderValue>,
    user_agent: HeaderValue,
}

/// Asks the proxy on `stream` for a tunnel to `dst` (RFC 9110 §9.3.6) and
/// reads its answer's head; a 2xx opens the tunnel.
async fn tunnel(
    stream: &mut TcpStream,
    dst: &Uri,
    headers: &TunnelHeaders,
    proxy: &str,
) -> Result<(), ProxyError> {
    let broken = |reason: String| ProxyError::Broken {
        proxy: proxy.to_owned(),
        reason,
    };
    let host = dst
        .host()
        .ok_or_else(|| broken("the endpoint has no host".into()))?;
    let port = dst
        .port_u16()
        .unwrap_or(if dst.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let mut request =
        format!("CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n").into_bytes();
    request.extend_from_slice(b"User-Agent: ");
    request.extend_from_slice(headers.user_agent.as_bytes());
    request.extend_from_slice(b"\r\n");
    if let Some(auth) = &headers.authorization {
        request.extend_from_slice(b"Proxy-Authorization: ");
        request.extend_from_slice(auth.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"\r\n");
    stream
        .write_all(&request)
        .await
        .map_err(|e| broken(format!("writing CONNECT: {e}")))?;
    // The head, byte by byte: what follows it is the tunnel's, not ours.
    let mut head = Vec::with_capacity(256);
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_CONNECT_ANSWER {
            return Err(broken(format!(
                "its answer's head is over {MAX_CONNECT_ANSWER} bytes"
            )));
        }
        let byte = stream
            .read_u8()
            .await
            .map_err(|e| broken(format!("reading its answer: {e}")))?;
        head.push(byte);
    }
    // "HTTP/1.x NNN ...": the status line alone (headers may hold any byte).
    let status = head
        .strip_prefix(b"HTTP/1.")
        .and_then(|rest| rest.get(2..5))
        .and_then(|code| std::str::from_utf8(code).ok())
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| broken("its answer is not HTTP".into()))?;
    if (200..300).contains(&status) {
        Ok(())
    } else {
        Err(ProxyError::Refused {
            proxy: proxy.to_owned(),
            status,
            sent_credentials: headers.authorization.is_some(),
        })
    }
}

/// A connection's TCP stream, and whether it reaches a forwarding proxy
/// (hyper then writes each request's target in absolute form).
pub(super) struct RouteStream {
    io: TokioIo<TcpStream>,
    forwarded: bool,
}

impl Connection for RouteStream {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.forwarded)
    }
}

impl Read for RouteStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl Write for RouteStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A proxy that answers `CONNECT` with `answer`; the tunnel's outcome.
    async fn tunnel_through(answer: &'static [u8]) -> Result<(), ProxyError> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                head.push(stream.read_u8().await.unwrap());
            }
            stream.write_all(answer).await.unwrap();
        });
        let mut stream = TcpStream::connect(address).await.unwrap();
        let dst: Uri = "https://runtime.example/arcp".parse().unwrap();
        let headers = TunnelHeaders {
            authorization: None,
            user_agent: HeaderValue::from_static("arcp-sdk/test"),
        };
        tunnel(&mut stream, &dst, &headers, "http://proxy:3128").await
    }

    #[tokio::test]
    async fn a_tunnel_opens_on_2xx_and_only_a_refusal_by_policy_is_final() {
        assert!(
            tunnel_through(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .is_ok()
        );
        // Any byte in a header: only the status line is read.
        assert!(tunnel_through(b"HTTP/1.1 200 OK\r\nX-Note: \xff\r\n\r\n")
            .await
            .is_ok());
        let needs_credentials = tunnel_through(b"HTTP/1.1 407 Proxy Auth\r\n\r\n")
            .await
            .unwrap_err();
        assert!(needs_credentials.is_definitive());
        assert!(needs_credentials.to_string().contains("407"));
        let forbidden = tunnel_through(b"HTTP/1.0 403 Forbidden\r\n\r\n").await;
        assert!(forbidden.unwrap_err().is_definitive());
        for passing in [
            &b"HTTP/1.1 502 Bad Gateway\r\n\r\n"[..],
            b"HTTP/1.1 429 Slow\r\n\r\n",
        ] {
            let refused = tunnel_through(passing).await.unwrap_err();
            assert!(!refused.is_definitive(), "{refused}");
        }
        let garbage = tunnel_through(b"SSH-2.0-OpenSSH\r\n\r\n")
            .await
            .unwrap_err();
        assert!(matches!(garbage, ProxyError::Broken { .. }), "{garbage}");
    }
}
