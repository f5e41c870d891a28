//! Redirects, followed by hand, hop by hop, so that each hop is checked:
//! never from `https` to `http`, the bearer token only to the runtime's own
//! origin (an [`Origin`] per hop), no `Referer`, no link-local or cloud
//! metadata address unless allowed.

use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION, LOCATION};
use reqwest::Url;

use super::{hosts, ArtifactFetcher, ArtifactRef, Fetch};
use crate::error::Error;
use crate::http::{describe, display_uri};

/// Redirects followed (artifact URIs often redirect to signed storage URLs).
const MAX_REDIRECTS: usize = 5;

impl ArtifactFetcher {
    /// Sends the `GET` and follows redirects by hand, checking each hop.
    /// An `Err` is what the attempt led to instead of a response.
    pub(super) async fn follow(
        &self,
        url: &Url,
        shown: &str,
        artifact: &ArtifactRef,
    ) -> Result<reqwest::Response, Fetch> {
        let refuse = |status: Option<u16>, message: String| {
            Fetch::Done(Err(Error::ArtifactFetch {
                uri: shown.to_owned(),
                status,
                message,
                retryable: false,
            }))
        };
        let accept = artifact
            .media_type
            .as_deref()
            .and_then(|m| HeaderValue::from_str(&format!("{m}, */*;q=0.1")).ok());
        let mut hop = url.clone();
        let mut redirects = 0;
        loop {
            if !self.inner.allow_link_local {
                if let Some(ip) = hosts::refused_literal(&hop) {
                    return Err(refuse(None, hosts::refusal(&ip.to_string())));
                }
            }
            let mut request = self.inner.http.get(hop.clone());
            if let Some(accept) = &accept {
                request = request.header(ACCEPT, accept.clone());
            }
            if let Some((origin, header)) = &self.inner.credential {
                if Origin::of(&hop).as_ref() == Some(origin) {
                    request = request.header(AUTHORIZATION, header.clone());
                }
            }
            // A provider's token, fresh for each request to the origin.
            if let Some((origin, config)) = &self.inner.provider {
                if Origin::of(&hop).as_ref() == Some(origin) {
                    match crate::credentials::provided_authorization(config).await {
                        Ok(Some((token, header))) => {
                            self.remember_provided(token);
                            request = request.header(AUTHORIZATION, header);
                        }
                        Ok(None) => {}
                        Err(e) => return Err(Fetch::Done(Err(e))),
                    }
                }
            }
            let response = match request.send().await {
                Ok(response) => response,
                Err(e) => {
                    if let Some(refused) = hosts::link_local_refusal(&e) {
                        return Err(refuse(None, refused.to_string()));
                    }
                    // reqwest's message carries the URL, query included.
                    return Err(Fetch::Retry {
                        status: None,
                        floor: None,
                        message: describe(&e.without_url()),
                    });
                }
            };
            let status = response.status().as_u16();
            if !matches!(status, 301 | 302 | 303 | 307 | 308) {
                return Ok(response);
            }
            let Some(location) = response
                .headers()
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
            else {
                return Ok(response);
            };
            let next = match hop.join(location) {
                Ok(next) => next,
                Err(e) => {
                    return Err(refuse(
                        Some(status),
                        format!("HTTP {status} redirect to an invalid location: {e}"),
                    ))
                }
            };
            let target = display_uri(next.as_str());
            redirects += 1;
            if redirects > MAX_REDIRECTS {
                return Err(refuse(
                    Some(status),
                    format!("more than {MAX_REDIRECTS} redirects (the last to {target})"),
                ));
            }
            match (hop.scheme(), next.scheme()) {
                ("https", "https") | ("http", "http" | "https") => {}
                ("https", "http") => {
                    return Err(refuse(
                        Some(status),
                        format!(
                            "HTTP {status} redirect from https to {target} refused: \
                             it would fetch in clear what was asked for over TLS"
                        ),
                    ))
                }
                (_, other) => {
                    return Err(refuse(
                        Some(status),
                        format!("HTTP {status} redirect to the {other} scheme refused"),
                    ))
                }
            }
            tracing::debug!(uri = %shown, to = %target, status, "artifact redirected");
            hop = next;
        }
    }
}

/// Scheme, host and port; `ws`/`wss` count as `http`/`https`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Origin {
    scheme: &'static str,
    host: String,
    port: Option<u16>,
}

impl Origin {
    pub(super) fn of(url: &Url) -> Option<Origin> {
        let scheme = match url.scheme() {
            "http" | "ws" => "http",
            "https" | "wss" => "https",
            _ => return None,
        };
        Some(Origin {
            scheme,
            host: url.host_str()?.to_ascii_lowercase(),
            port: url.port_or_known_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_match_scheme_host_and_port() {
        let o = |u: &str| Origin::of(&Url::parse(u).unwrap());
        assert_eq!(o("ws://H:80/arcp"), o("http://h/x"));
        assert_eq!(o("wss://h/arcp"), o("https://h:443/y"));
        assert_ne!(o("https://h/"), o("http://h/"));
        assert_ne!(o("https://h/"), o("https://h:8443/"));
        assert_eq!(o("ftp://h/"), None);
    }
}
