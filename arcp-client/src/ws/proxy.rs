//! `ws://` and `wss://` through an HTTP proxy: a `CONNECT` tunnel to the
//! runtime, then TLS (for `wss://`) and the upgrade through it, end to end.
//!
//! The proxy is the builder's ([`crate::ClientBuilder::proxy`]) or the
//! environment's, read as curl and reqwest read it: `HTTPS_PROXY` for
//! `wss://`, `HTTP_PROXY` for `ws://` (not under CGI, where a request's
//! `Proxy:` header sets it), `ALL_PROXY` for both, lower-case names too;
//! `NO_PROXY` lists hosts reached directly (`*`, a host, or a domain and
//! its subdomains, with or without a leading dot).

use base64::Engine as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::dial::{self, failure};
use super::link_io::DialFailure;
use tokio_tungstenite::tungstenite::http::Uri;

use crate::config::{Config, ProxyChoice};
use crate::error::Error;
use crate::percent::percent_decode;

/// The longest answer to `CONNECT` read before the tunnel is given up.
const MAX_CONNECT_ANSWER: usize = 8 * 1024;

/// A proxy to tunnel through.
#[derive(Debug, PartialEq)]
pub(super) struct Proxy {
    host: String,
    port: u16,
    /// `Proxy-Authorization`, from the proxy URL's user info.
    authorization: Option<String>,
    /// Its address for messages, without credentials.
    shown: String,
}

/// The proxy for a connection to `host` (`secure`: `wss://`), if any.
pub(super) fn for_target(
    choice: &ProxyChoice,
    host: &str,
    secure: bool,
) -> Result<Option<Proxy>, String> {
    match choice {
        ProxyChoice::Off => Ok(None),
        ProxyChoice::Url(url) => parse(&url.0).map(Some),
        ProxyChoice::Env => from_env(&|name| std::env::var(name).ok(), host, secure),
    }
}

/// Refuses a credential that a `ws://` session would carry in clear
/// through a proxy not on this machine
/// (`cleartext::check_cleartext_proxy`), before anything is sent. A URL or
/// a proxy that does not parse is left to the dial, which says why.
pub(crate) fn check_cleartext(config: &Config) -> Result<(), Error> {
    let Ok(uri) = config.url.trim().parse::<Uri>() else {
        return Ok(());
    };
    let Some(host) = uri.host() else {
        return Ok(());
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let secure = uri.scheme_str() == Some("wss");
    let proxy = for_target(&config.proxy, host, secure).ok().flatten();
    crate::cleartext::check_cleartext_proxy(
        &config.url,
        proxy.as_ref().map(|p| p.shown.as_str()),
        crate::cleartext::sends_credential(config),
        config.allow_insecure_token,
    )
}

/// The environment's proxy for `host`, read through `var`.
fn from_env(
    var: &dyn Fn(&str) -> Option<String>,
    host: &str,
    secure: bool,
) -> Result<Option<Proxy>, String> {
    let no_proxy = var("NO_PROXY").or_else(|| var("no_proxy"));
    if no_proxy.is_some_and(|list| bypassed(&list, host)) {
        return Ok(None);
    }
    // Under CGI, HTTP_PROXY may come from a request's `Proxy:` header.
    let cgi = var("REQUEST_METHOD").is_some();
    let names: &[&str] = if secure {
        &["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"]
    } else if cgi {
        &["http_proxy", "ALL_PROXY", "all_proxy"]
    } else {
        &["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
    };
    let chosen = names
        .iter()
        .filter_map(|name| var(name))
        .find(|value| !value.trim().is_empty());
    chosen.map(|url| parse(&url)).transpose()
}

/// Whether `NO_PROXY`'s `list` names `host`.
fn bypassed(list: &str, host: &str) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    list.split(',').map(str::trim).any(|entry| {
        let entry = entry.trim_start_matches('.').to_ascii_lowercase();
        !entry.is_empty()
            && (entry == "*"
                || host == entry
                || host
                    .strip_suffix(entry.as_str())
                    .is_some_and(|rest| rest.ends_with('.')))
    })
}

/// A proxy URL: `http://[user:password@]host[:port][/]`, or a bare
/// `host:port` (taken as `http://`, as curl does).
fn parse(url: &str) -> Result<Proxy, String> {
    let url = url.trim();
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, rest)) => {
            let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
            return Err(format!(
                "the proxy {scheme}://{} is not an http:// proxy, the only kind \
                 WebSocket connections go through",
                host.trim_end_matches('/')
            ));
        }
        None => url,
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((userinfo, hostport)) => (Some(userinfo), hostport),
        None => (None, authority),
    };
    let (host, port) = split_host_port(hostport)
        .ok_or_else(|| format!("the proxy address http://{hostport} is not host[:port]"))?;
    let authorization = userinfo.map(|userinfo| {
        let pair = percent_decode(userinfo);
        let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
        format!("Basic {encoded}")
    });
    Ok(Proxy {
        shown: format!("http://{hostport}"),
        host,
        port,
        authorization,
    })
}

/// `host[:port]` (an IPv6 address in brackets), port 80 when absent.
fn split_host_port(hostport: &str) -> Option<(String, u16)> {
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (hostport, None),
        }
    };
    let port = match port {
        Some(port) => port.parse().ok()?,
        None => 80,
    };
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

/// A TCP stream to `host:port` through `proxy`'s `CONNECT` tunnel.
pub(super) async fn tunnel(
    proxy: &Proxy,
    host: &str,
    port: u16,
    url: &str,
) -> Result<TcpStream, DialFailure> {
    let shown = &proxy.shown;
    let mut tcp = dial::tcp(&proxy.host, proxy.port, url)
        .await
        .map_err(|mut failure| {
            if let Error::Connect { message, .. } = &mut failure.error {
                *message = format!("the proxy {shown}: {message}");
            }
            failure
        })?;
    let target = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(auth) = &proxy.authorization {
        request.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    request.push_str("\r\n");
    let broken = |reason: String| failure(url, format!("the proxy {shown}: {reason}"), true, None);
    tcp.write_all(request.as_bytes())
        .await
        .map_err(|e| broken(format!("sending CONNECT failed: {e}")))?;
    // Byte by byte up to the blank line: what follows belongs to the tunnel.
    let mut head = Vec::with_capacity(128);
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_CONNECT_ANSWER {
            return Err(broken("its answer to CONNECT is oversized".into()));
        }
        let byte = tcp
            .read_u8()
            .await
            .map_err(|e| broken(format!("its answer to CONNECT was cut short: {e}")))?;
        head.push(byte);
    }
    let status =
        connect_status(&head).ok_or_else(|| broken("its answer to CONNECT is not HTTP".into()))?;
    if (200..300).contains(&status) {
        return Ok(tcp);
    }
    // Credentials missing or refused, or a target the proxy will not reach,
    // stay that way; a gateway error or a busy proxy may not.
    let transient = status == 408 || status == 429 || status >= 500;
    let what = if status == 407 {
        match proxy.authorization {
            Some(_) => "refused the credentials in its URL (HTTP 407)".to_owned(),
            None => "requires credentials (HTTP 407): put them in its URL".to_owned(),
        }
    } else {
        format!("refused the tunnel to {target} with HTTP {status}")
    };
    Err(failure(
        url,
        format!("the proxy {shown} {what}"),
        transient,
        None,
    ))
}

/// The status code of an HTTP/1.x response head.
fn connect_status(head: &[u8]) -> Option<u16> {
    let line = head.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    parts.next().filter(|v| v.starts_with("HTTP/1."))?;
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    fn proxy_for(vars: &[(&str, &str)], host: &str, secure: bool) -> Option<String> {
        from_env(&env(vars), host, secure)
            .unwrap()
            .map(|p| format!("{}:{}", p.host, p.port))
    }

    #[test]
    fn the_environment_names_the_proxy_per_scheme() {
        let vars = [
            ("HTTPS_PROXY", "http://secure.proxy:3128"),
            ("HTTP_PROXY", "http://plain.proxy:8080"),
        ];
        assert_eq!(
            proxy_for(&vars, "rt.example", true).as_deref(),
            Some("secure.proxy:3128")
        );
        assert_eq!(
            proxy_for(&vars, "rt.example", false).as_deref(),
            Some("plain.proxy:8080")
        );
        let all = [("all_proxy", "proxy.example")];
        assert_eq!(
            proxy_for(&all, "rt.example", true).as_deref(),
            Some("proxy.example:80")
        );
        assert_eq!(proxy_for(&[], "rt.example", true), None);
        assert_eq!(proxy_for(&[("HTTPS_PROXY", " ")], "rt.example", true), None);
    }

    #[test]
    fn under_cgi_the_upper_case_http_proxy_is_ignored() {
        let vars = [
            ("HTTP_PROXY", "http://injected:1"),
            ("REQUEST_METHOD", "GET"),
        ];
        assert_eq!(proxy_for(&vars, "rt.example", false), None);
    }

    #[test]
    fn no_proxy_names_hosts_and_domains() {
        let vars = [
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("NO_PROXY", "internal.example, .corp.example,10.0.0.7,::1"),
        ];
        for direct in [
            "internal.example",
            "a.internal.example",
            "corp.example",
            "x.corp.example",
            "10.0.0.7",
            "[::1]",
        ] {
            assert_eq!(proxy_for(&vars, direct, true), None, "{direct}");
        }
        for proxied in ["notinternal.example", "example", "10.0.0.70"] {
            assert!(proxy_for(&vars, proxied, true).is_some(), "{proxied}");
        }
        let star = [("HTTPS_PROXY", "http://proxy:3128"), ("no_proxy", "*")];
        assert_eq!(proxy_for(&star, "anything", true), None);
    }

    #[test]
    fn a_proxy_url_gives_address_and_credentials() {
        let p = parse("http://us%40er:p%3Aw@[::1]:3128/").unwrap();
        assert_eq!((p.host.as_str(), p.port), ("::1", 3128));
        // base64("us@er:p:w")
        assert_eq!(p.authorization.as_deref(), Some("Basic dXNAZXI6cDp3"));
        assert_eq!(p.shown, "http://[::1]:3128", "no credentials shown");
        let err = parse("socks5://user:pw@proxy:1080").unwrap_err();
        assert!(err.contains("socks5://proxy:1080"), "{err}");
        assert!(!err.contains("pw"), "{err}");
        assert!(parse("http://:80").is_err());
        assert!(parse("http://proxy:notaport").is_err());
    }

    #[test]
    fn connect_answers_are_read_by_status() {
        assert_eq!(
            connect_status(b"HTTP/1.1 200 Connection established\r\n\r\n"),
            Some(200)
        );
        assert_eq!(connect_status(b"HTTP/1.0 407 Auth\r\n\r\n"), Some(407));
        assert_eq!(connect_status(b"SSH-2.0-OpenSSH\r\n\r\n"), None);
    }
}
