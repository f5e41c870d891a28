//! No credential in clear unless asked: a bearer token (or a URL's own
//! credentials) bound for a host other than this machine over `ws://` or
//! `http://` is refused before anything is sent.
//!
//! A pure rule of (URL, whether a credential will be sent), so it applies
//! to every source of a token, whenever one is about to be used.

use std::net::{IpAddr, Ipv6Addr};

use crate::config::Config;
use crate::error::Error;
use crate::redact::shown_url;

/// The option that lets a credential go out in clear, as errors name it.
pub(crate) const ALLOW_OPTION: &str = "ClientBuilder::allow_insecure_token(true)";

/// `Ok` unless a credential would cross the network in clear: `url` has a
/// clear-text scheme (`ws://`, `http://`), its host is not a loopback one
/// (`localhost`, `127.0.0.0/8`, `::1`), `sends_credential` and not
/// `allowed`. The error names the option that allows it.
pub(crate) fn check_cleartext_credential(
    url: &str,
    sends_credential: bool,
    allowed: bool,
) -> Result<(), Error> {
    if !sends_credential || allowed {
        return Ok(());
    }
    let Some((scheme, rest)) = url.trim_start().split_once("://") else {
        // Not a URL the transports accept; they say why.
        return Ok(());
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "ws" && scheme != "http" {
        return Ok(());
    }
    let host = host_of(rest);
    if is_loopback(host) {
        return Ok(());
    }
    Err(Error::Connect {
        url: shown_url(url),
        message: format!(
            "refusing to send the bearer token (or the URL's credentials) in clear over \
             {scheme}:// to {host:?}, which is not this machine: use {secure}:// (TLS), or \
             allow it with {ALLOW_OPTION}",
            secure = if scheme == "ws" { "wss" } else { "https" },
        ),
        retryable: false,
        source: None,
    })
}

/// `Ok` unless a credential bound for `url` over a clear-text scheme
/// (`ws://`, `http://`) would reach `proxy` (the `http://` proxy the
/// connection goes through, if any) in clear, and the proxy is not on this
/// machine: a forwarding proxy reads the `Authorization` header of an
/// `http://` request, and a `CONNECT` tunnel carries a `ws://` session's
/// hello as it is. `wss://` and `https://` are encrypted end to end through
/// a tunnel, so any proxy is fine for them. Checked besides
/// [`check_cleartext_credential`], which judges the target itself.
pub(crate) fn check_cleartext_proxy(
    url: &str,
    proxy: Option<&str>,
    sends_credential: bool,
    allowed: bool,
) -> Result<(), Error> {
    let Some(proxy) = proxy else {
        return Ok(());
    };
    if !sends_credential || allowed {
        return Ok(());
    }
    let Some((scheme, _)) = url.trim_start().split_once("://") else {
        return Ok(());
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "ws" && scheme != "http" {
        return Ok(());
    }
    let proxy_rest = proxy
        .trim()
        .split_once("://")
        .map_or(proxy.trim(), |(_, rest)| rest);
    let proxy_host = host_of(proxy_rest);
    if is_loopback(proxy_host) {
        return Ok(());
    }
    Err(Error::Connect {
        url: shown_url(url),
        message: format!(
            "refusing to send the bearer token (or the URL's credentials) in clear over \
             {scheme}:// through the proxy at {proxy_host:?}, which is not this machine: the \
             proxy would read it. Use {secure}:// (TLS, end to end through the proxy), no \
             proxy for this host (NO_PROXY, ClientBuilder::no_proxy), or allow it with \
             {ALLOW_OPTION}",
            secure = if scheme == "ws" { "wss" } else { "https" },
        ),
        retryable: false,
        source: None,
    })
}

/// Whether a client with `config` sends a credential: a bearer token, a
/// token provider's, or the URL's own user info.
pub(crate) fn sends_credential(config: &Config) -> bool {
    config.token.is_some() || config.token_provider.is_some() || url_has_credentials(&config.url)
}

/// Whether `url` (`http://user:password@...`) carries credentials of its
/// own.
pub(crate) fn url_has_credentials(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    rest[..authority_end].contains('@')
}

/// The host of a URL's remainder after `scheme://`: no user info, no port,
/// an IPv6 address without its brackets.
fn host_of(rest: &str) -> &str {
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(v6) = host_port.strip_prefix('[') {
        return v6.split(']').next().unwrap_or("");
    }
    host_port.split(':').next().unwrap_or("")
}

/// `localhost` (the name RFC 6761 reserves for this machine), any address
/// of `127.0.0.0/8`, `::1`, and an IPv4-mapped loopback address.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => v4.is_loopback(),
        Ok(IpAddr::V6(v6)) => {
            v6 == Ipv6Addr::LOCALHOST || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_to_a_remote_host_in_clear_is_refused() {
        for url in [
            "ws://example.com/arcp",
            "WS://10.0.0.7:7777/arcp",
            "http://agents.example.com:8080/arcp",
            "ws://[2001:db8::1]:7/arcp",
            "ws://127.0.0.1.example.com/arcp",
            "ws://user:pw@example.com/arcp",
            "ws://localhost@example.com/arcp",
        ] {
            let e = check_cleartext_credential(url, true, false).unwrap_err();
            let text = e.to_string();
            assert!(text.contains(ALLOW_OPTION), "{url}: {text}");
            assert!(!text.contains("pw"), "{text}");
            assert!(
                matches!(
                    e,
                    Error::Connect {
                        retryable: false,
                        ..
                    }
                ),
                "{url}"
            );
            assert!(check_cleartext_credential(url, true, true).is_ok(), "{url}");
            assert!(
                check_cleartext_credential(url, false, false).is_ok(),
                "{url}"
            );
        }
    }

    #[test]
    fn loopback_and_tls_are_allowed() {
        for url in [
            "ws://127.0.0.1:7777/arcp",
            "ws://127.8.9.10/arcp",
            "ws://localhost:1/arcp",
            "http://LOCALHOST./arcp",
            "ws://[::1]:7777/arcp",
            "http://[::ffff:127.0.0.1]/arcp",
            "ws://user:pw@127.0.0.1/arcp",
            "wss://example.com/arcp",
            "https://example.com/arcp",
        ] {
            assert!(
                check_cleartext_credential(url, true, false).is_ok(),
                "{url}"
            );
        }
    }

    #[test]
    fn a_credential_in_clear_through_a_remote_proxy_is_refused() {
        for (url, proxy) in [
            // A forwarding proxy reads the Authorization header.
            ("http://127.0.0.1:8080/arcp", "http://proxy.example:3128"),
            ("http://localhost/arcp", "10.0.0.9:3128"),
            // A CONNECT tunnel carries the hello as it is.
            (
                "ws://127.0.0.1:7777/arcp",
                "http://user:pw@proxy.example:3128/",
            ),
            ("ws://[::1]:7777/arcp", "http://[2001:db8::7]:3128"),
        ] {
            let e = check_cleartext_proxy(url, Some(proxy), true, false).unwrap_err();
            let text = e.to_string();
            assert!(text.contains(ALLOW_OPTION), "{url} via {proxy}: {text}");
            assert!(text.contains("proxy"), "{text}");
            assert!(!text.contains("pw"), "{text}");
            assert!(matches!(
                e,
                Error::Connect {
                    retryable: false,
                    ..
                }
            ));
            assert!(check_cleartext_proxy(url, Some(proxy), true, true).is_ok());
            assert!(check_cleartext_proxy(url, Some(proxy), false, false).is_ok());
        }
    }

    #[test]
    fn tls_through_any_proxy_and_clear_text_through_a_local_one_are_allowed() {
        for (url, proxy) in [
            (
                "wss://runtime.example/arcp",
                Some("http://proxy.example:3128"),
            ),
            ("https://runtime.example/arcp", Some("http://10.0.0.9:3128")),
            ("ws://127.0.0.1:7777/arcp", Some("http://127.0.0.1:3128")),
            ("http://localhost/arcp", Some("localhost:3128")),
            ("ws://127.0.0.1:7777/arcp", None),
        ] {
            assert!(
                check_cleartext_proxy(url, proxy, true, false).is_ok(),
                "{url} via {proxy:?}"
            );
        }
    }

    #[test]
    fn url_credentials_are_seen() {
        assert!(url_has_credentials("http://u:p@h/arcp"));
        assert!(!url_has_credentials("http://h/a@b"));
        assert!(!url_has_credentials("nothing"));
    }
}
