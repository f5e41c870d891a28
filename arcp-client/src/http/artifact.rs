//! Artifact fetch: resolve an `artifact_ref` / `result_ref` over HTTP(S),
//! streaming, with a size limit and sha256 verification.
//!
//! Bytes that do not match their reference are never returned: a sha256 or
//! size mismatch is [`Error::ArtifactMismatch`], a body over the limit is
//! [`Error::ArtifactTooLarge`] (the download stops at the limit, so memory
//! stays bounded), a missing artifact is [`Error::ArtifactNotFound`].
//! Transient failures (connection loss, 408, 429, 5xx) are retried with the
//! [`RetryPolicy`], `Retry-After` being a floor; `GET` is safe to repeat.
//!
//! Redirects are followed here, hop by hop, so that each hop is checked:
//! never from `https` to `http`, the bearer token only to the runtime's own
//! origin, no `Referer`, no link-local or cloud metadata address unless
//! allowed. A URL's query (where presigned URLs carry credentials) never
//! appears in an error or a log.
//!
//! This file is the fetcher; what a reference says (and the digest it
//! promises) is `artifact/reference.rs`; which hosts a fetch may reach,
//! `artifact/hosts.rs`; following redirects hop by hop,
//! `artifact/redirect.rs`.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use reqwest::header::HeaderValue;
use reqwest::Url;
use sha2::{Digest, Sha256};

use super::{
    bearer_header, body_detail, build_http_client, describe, display_uri, read_capped, retry_after,
    ERROR_BODY_LIMIT,
};
use crate::config::RetryPolicy;
use crate::config::{Config, Secret};
use crate::error::Error;
use crate::retry::{saturating_deadline, Decision, RetryBudget};

mod hosts;
mod redirect;
mod reference;
use redirect::Origin;
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use reference::ArtifactRef;
use reference::{hex, parse_sha256};

/// Default limit on an artifact's size: 64 MiB.
pub(crate) use crate::config::DEFAULT_MAX_ARTIFACT_SIZE;
/// Default bound on one fetch, retries included.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Largest buffer reserved up front, whatever the server announces.
const MAX_PREALLOCATION: u64 = 1 << 20;

/// Fetches artifacts over HTTP(S) with a size limit, sha256 verification
/// and retries. Cheap to clone.
///
/// [`crate::Client::fetch_artifact`] uses one configured from the client
/// (its retry policy, TLS settings, `max_artifact_size`, and its bearer
/// token for URIs on the runtime's own origin); build one yourself to fetch
/// without a client.
///
/// ```no_run
/// # async fn demo() -> Result<(), arcp_sdk::Error> {
/// use arcp_sdk::{ArtifactFetcher, ArtifactRef};
///
/// let fetcher = ArtifactFetcher::builder().max_size(8 << 20).build()?;
/// let bytes = fetcher
///     .fetch(&ArtifactRef::new("https://store.example/a/1").with_size(4))
///     .await?;
/// # let _ = bytes; Ok(()) }
/// ```
#[derive(Clone)]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub struct ArtifactFetcher {
    inner: Arc<FetcherInner>,
}

struct FetcherInner {
    http: reqwest::Client,
    max_size: u64,
    retry: RetryPolicy,
    timeout: Duration,
    /// The bearer token, sent only to URIs of this origin.
    credential: Option<(Origin, HeaderValue)>,
    token: Option<Secret>,
    /// The client's token provider, asked for each request to this origin
    /// (instead of `credential`).
    provider: Option<(Origin, Arc<Config>)>,
    /// The provider's tokens given out so far, redacted from error details.
    provided: std::sync::Mutex<Vec<Secret>>,
    /// Whether link-local and cloud metadata addresses may be fetched.
    allow_link_local: bool,
}

impl fmt::Debug for ArtifactFetcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArtifactFetcher")
            .field("max_size", &self.inner.max_size)
            .field("retry", &self.inner.retry)
            .field("timeout", &self.inner.timeout)
            .field("allow_link_local", &self.inner.allow_link_local)
            .field(
                "token_origin",
                &self.inner.credential.as_ref().map(|(o, _)| o),
            )
            .finish_non_exhaustive()
    }
}

/// Configures an [`ArtifactFetcher`]. Made by [`ArtifactFetcher::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until build() is called"]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub struct ArtifactFetcherBuilder {
    max_size: u64,
    retry: RetryPolicy,
    timeout: Duration,
    connect_timeout: Duration,
    token: Option<(String, Secret)>,
    /// A client's token provider and proxy choice (`from_config`).
    provider: Option<Arc<Config>>,
    proxy: crate::config::ProxyChoice,
    tls: Option<Arc<rustls::ClientConfig>>,
    user_agent: String,
    allow_link_local: bool,
}

impl ArtifactFetcherBuilder {
    /// Largest artifact accepted, in bytes (default 64 MiB). A reference or
    /// a `Content-Length` over it fails before downloading; a body that
    /// grows over it stops there.
    pub fn max_size(mut self, bytes: u64) -> Self {
        self.max_size = bytes;
        self
    }

    /// Retry schedule and budget for transient failures (default
    /// [`RetryPolicy::default`]).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Bound on one fetch, retries included (default 5 minutes).
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = d;
        self
    }

    /// Bound on establishing a connection (default 10 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// Sends `Authorization: Bearer <token>` to URIs with the same origin
    /// (scheme, host, port) as `origin`, and to no other: an artifact URI
    /// may point at third-party storage. `ws://`/`wss://` origins match
    /// `http://`/`https://`. Each redirect hop is matched on its own: a hop
    /// to another scheme, host or port goes without the header.
    pub fn bearer_token(mut self, origin: impl Into<String>, token: impl Into<String>) -> Self {
        self.token = Some((origin.into(), Secret(token.into())));
        self
    }

    /// Allows fetching from link-local addresses (169.254.0.0/16, fe80::/10)
    /// and the cloud metadata addresses (169.254.169.254, fd00:ec2::254),
    /// directly or through a redirect or a name resolving there (default:
    /// refused, with a non-retryable [`Error::ArtifactFetch`]). A runtime
    /// chooses artifact URIs: on a cloud machine the metadata service hands
    /// the machine's credentials to whoever asks from it. Not checked when
    /// a proxy resolves names (`HTTP_PROXY` and friends).
    pub fn allow_link_local(mut self, allow: bool) -> Self {
        self.allow_link_local = allow;
        self
    }

    /// Uses this rustls configuration for `https://` (roots, client
    /// certificates); default: the bundled web PKI roots.
    pub fn tls_config(mut self, config: Arc<rustls::ClientConfig>) -> Self {
        self.tls = Some(config);
        self
    }

    /// Builds the fetcher.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCall`] for a token origin that is not a URL or a token
    /// an HTTP header cannot carry; [`Error::Connect`] if the HTTP client
    /// cannot be set up.
    pub fn build(self) -> Result<ArtifactFetcher, Error> {
        let http = build_http_client(
            self.user_agent,
            self.connect_timeout,
            self.tls,
            // Followed by hand, hop by hop (`follow`): reqwest's policy would
            // send a `Referer` and keep the token across a scheme change.
            reqwest::redirect::Policy::none(),
            (!self.allow_link_local).then_some(hosts::CheckedResolver),
            &self.proxy,
        )
        .map_err(|message| Error::Connect {
            url: "artifact fetcher".into(),
            message,
            retryable: false,
            source: None,
        })?;
        let (credential, token) = match self.token {
            Some((origin_url, token)) => {
                let origin = Url::parse(&origin_url)
                    .ok()
                    .and_then(|u| Origin::of(&u))
                    .ok_or_else(|| {
                        Error::invalid_call(format!(
                            "token origin {} is not an absolute http(s) or ws(s) URL",
                            display_uri(&origin_url)
                        ))
                    })?;
                let header = bearer_header(Some(&token))?;
                (header.map(|h| (origin, h)), Some(token))
            }
            None => (None, None),
        };
        let provider = self.provider.and_then(|config| {
            let origin = Url::parse(&config.url).ok().and_then(|u| Origin::of(&u))?;
            Some((origin, config))
        });
        Ok(ArtifactFetcher {
            inner: Arc::new(FetcherInner {
                http,
                max_size: self.max_size,
                retry: self.retry,
                timeout: self.timeout,
                credential,
                token,
                provider,
                provided: Default::default(),
                allow_link_local: self.allow_link_local,
            }),
        })
    }
}

/// What one fetch attempt led to.
enum Fetch {
    Done(Result<Vec<u8>, Error>),
    Retry {
        status: Option<u16>,
        floor: Option<Duration>,
        message: String,
    },
}

impl ArtifactFetcher {
    /// A builder with the defaults: 64 MiB, the default retry policy, 5
    /// minutes per fetch, no token.
    pub fn builder() -> ArtifactFetcherBuilder {
        ArtifactFetcherBuilder {
            max_size: DEFAULT_MAX_ARTIFACT_SIZE,
            retry: RetryPolicy::default(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: Duration::from_secs(10),
            token: None,
            provider: None,
            proxy: Default::default(),
            tls: None,
            user_agent: format!("arcp-rust/{}", env!("CARGO_PKG_VERSION")),
            allow_link_local: false,
        }
    }

    /// The fetcher of a [`crate::Client`]: its limits, retry policy, TLS
    /// settings, its proxy choice, and its token (or its token provider's,
    /// asked for each request) for the runtime's origin.
    pub(crate) fn from_config(config: &Config) -> Result<ArtifactFetcher, Error> {
        let mut builder = ArtifactFetcher::builder()
            .max_size(config.max_artifact_size)
            .retry(config.retry.clone())
            .timeout(config.default_deadline)
            .connect_timeout(config.connect_timeout)
            .allow_link_local(config.allow_link_local_artifacts);
        builder.user_agent = format!("{}/{}", config.client_name, config.client_version);
        builder.tls = config.tls.client_config();
        builder.proxy = config.proxy.clone();
        if config.token_provider.is_some() {
            builder.provider = Some(Arc::new(config.clone()));
        } else if let Some(token) = &config.token {
            builder = builder.bearer_token(config.url.clone(), token.0.clone());
        }
        builder.build()
    }

    /// Downloads the artifact and verifies it against its reference: at most
    /// the size limit, exactly `size` bytes and the `sha256` digest when the
    /// reference gives them.
    ///
    /// # Errors
    ///
    /// [`Error::ArtifactMismatch`], [`Error::ArtifactTooLarge`],
    /// [`Error::ArtifactNotFound`], [`Error::Unauthenticated`] (401/403),
    /// [`Error::ArtifactFetch`] (transport failures and other statuses,
    /// after retries where they may help), [`Error::InvalidCall`] for a URI
    /// that is not `http(s)://` or a malformed `sha256`.
    pub async fn fetch(&self, artifact: &ArtifactRef) -> Result<Vec<u8>, Error> {
        let shown = display_uri(&artifact.uri);
        let url = Url::parse(artifact.uri.trim())
            .map_err(|e| Error::invalid_call(format!("artifact URI {shown} is invalid: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::invalid_call(format!(
                "artifact URI {shown}: the {} scheme cannot be fetched over HTTP",
                url.scheme()
            )));
        }
        let expected = match artifact.sha256.as_deref() {
            Some(hex) => Some(parse_sha256(hex).ok_or_else(|| {
                Error::invalid_call(format!(
                    "artifact {shown}: sha256 {hex:?} is not 64 hexadecimal digits"
                ))
            })?),
            None => None,
        };
        let limit = self.inner.max_size;
        if let Some(size) = artifact.size.filter(|&s| s > limit) {
            return Err(Error::ArtifactTooLarge {
                uri: shown,
                limit,
                size: Some(size),
            });
        }
        let timeout = self.inner.timeout;
        let deadline_at = saturating_deadline(Instant::now(), timeout);
        let deadline = tokio::time::Instant::from_std(deadline_at);
        let fetch = self.fetch_with_retries(&url, &shown, artifact, expected, deadline_at);
        match tokio::time::timeout_at(deadline, fetch).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Error::ArtifactFetch {
                uri: shown,
                status: None,
                message: format!("no complete response within {timeout:?}"),
                retryable: true,
            }),
        }
    }

    async fn fetch_with_retries(
        &self,
        url: &Url,
        shown: &str,
        artifact: &ArtifactRef,
        expected: Option<[u8; 32]>,
        deadline_at: Instant,
    ) -> Result<Vec<u8>, Error> {
        let retry = &self.inner.retry;
        let mut budget = RetryBudget::default();
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let (status, floor, message) =
                match self.fetch_once(url, shown, artifact, expected).await {
                    Fetch::Done(outcome) => return outcome,
                    Fetch::Retry {
                        status,
                        floor,
                        message,
                    } => (status, floor, message),
                };
            let now = Instant::now();
            match budget.after_failure(retry, attempts, floor, deadline_at, now) {
                Decision::RetryAt(at) => {
                    tracing::debug!(uri = %shown, attempt = attempts, delay = ?at - now, %message, "artifact fetch failed; retrying");
                    tokio::time::sleep_until(at.into()).await;
                }
                Decision::GiveUp(why) => {
                    return Err(Error::ArtifactFetch {
                        uri: shown.to_owned(),
                        status,
                        message: format!("{why} after {attempts} attempt(s); last: {message}"),
                        retryable: true,
                    });
                }
            }
        }
    }

    async fn fetch_once(
        &self,
        url: &Url,
        shown: &str,
        artifact: &ArtifactRef,
        expected: Option<[u8; 32]>,
    ) -> Fetch {
        let mut response = match self.follow(url, shown, artifact).await {
            Ok(response) => response,
            Err(fetch) => return fetch,
        };
        let status = response.status().as_u16();
        let uri = || shown.to_owned();
        match status {
            200..=299 => {}
            404 | 410 => return Fetch::Done(Err(Error::ArtifactNotFound { uri: uri(), status })),
            401 | 403 => {
                let detail = self.detail(&mut response).await;
                return Fetch::Done(Err(Error::Unauthenticated {
                    message: format!("HTTP {status} fetching artifact {shown}: {detail}"),
                }));
            }
            408 | 429 | 500 | 502 | 503 | 504 => {
                let floor = retry_after(response.headers(), SystemTime::now());
                let detail = self.detail(&mut response).await;
                return Fetch::Retry {
                    status: Some(status),
                    floor,
                    message: format!("HTTP {status}: {detail}"),
                };
            }
            _ => {
                let detail = self.detail(&mut response).await;
                return Fetch::Done(Err(Error::ArtifactFetch {
                    uri: uri(),
                    status: Some(status),
                    message: format!("HTTP {status}: {detail}"),
                    retryable: false,
                }));
            }
        }
        let limit = self.inner.max_size;
        let announced = response.content_length();
        if let Some(length) = announced {
            if length > limit {
                return Fetch::Done(Err(Error::ArtifactTooLarge {
                    uri: uri(),
                    limit,
                    size: Some(length),
                }));
            }
            if let Some(size) = artifact.size.filter(|&s| s != length) {
                return Fetch::Done(Err(size_mismatch(shown, size, length.to_string())));
            }
        }
        let reserve = announced
            .or(artifact.size)
            .unwrap_or(0)
            .min(MAX_PREALLOCATION);
        let mut body = Vec::with_capacity(usize::try_from(reserve).unwrap_or(0));
        let mut hasher = Sha256::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let total = body.len() as u64 + chunk.len() as u64;
                    if total > limit {
                        return Fetch::Done(Err(Error::ArtifactTooLarge {
                            uri: uri(),
                            limit,
                            size: None,
                        }));
                    }
                    if let Some(size) = artifact.size.filter(|&s| total > s) {
                        return Fetch::Done(Err(size_mismatch(
                            shown,
                            size,
                            format!("more than {size}"),
                        )));
                    }
                    hasher.update(&chunk);
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => {
                    return Fetch::Retry {
                        status: Some(status),
                        floor: None,
                        message: format!(
                            "the body was cut off after {} bytes: {}",
                            body.len(),
                            describe(&e.without_url())
                        ),
                    }
                }
            }
        }
        if let Some(size) = artifact.size.filter(|&s| s != body.len() as u64) {
            return Fetch::Done(Err(size_mismatch(shown, size, body.len().to_string())));
        }
        if let Some(expected) = expected {
            let actual: [u8; 32] = hasher.finalize().into();
            if actual != expected {
                return Fetch::Done(Err(Error::ArtifactMismatch {
                    uri: uri(),
                    what: "sha256".into(),
                    expected: hex(&expected),
                    actual: hex(&actual),
                }));
            }
        }
        Fetch::Done(Ok(body))
    }

    /// Keeps a token the provider gave out, to redact it from error
    /// details (the last few: a provider rotates them).
    pub(super) fn remember_provided(&self, token: Secret) {
        let mut provided = crate::sync::lock(&self.inner.provided);
        if !provided.iter().any(|t| t.0 == token.0) {
            if provided.len() == PROVIDED_KEPT {
                provided.remove(0);
            }
            provided.push(token);
        }
    }

    async fn detail(&self, response: &mut reqwest::Response) -> String {
        match read_capped(response, ERROR_BODY_LIMIT).await {
            Ok(body) => {
                let mut redactor = crate::config::redact_token(self.inner.token.as_ref());
                for token in crate::sync::lock(&self.inner.provided).iter() {
                    redactor = redactor.with_secret(token.0.clone());
                }
                body_detail(&body, &redactor)
            }
            Err(_) => "the response body could not be read".into(),
        }
    }
}

/// How many of the provider's tokens a fetcher redacts.
const PROVIDED_KEPT: usize = 4;

fn size_mismatch(shown: &str, expected: u64, actual: String) -> Error {
    Error::ArtifactMismatch {
        uri: shown.to_owned(),
        what: "size".into(),
        expected: expected.to_string(),
        actual,
    }
}
