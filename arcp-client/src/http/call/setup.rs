//! Building the HTTP backend: the endpoint and its credentials, the
//! transport, and the task that expires the outcome cache on time.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Uri;
use hyper_util::client::proxy::matcher::Matcher;
use tokio::sync::watch;

use super::super::transport::{Settings, Transport};
use super::super::{bearer_header, display_uri, endpoint, take_url_credentials};
use super::HttpBackend;
use crate::cache::OutcomeCache;
use crate::config::{Config, ProxyChoice};
use crate::error::Error;

impl HttpBackend {
    /// Validates the URL and token and builds the HTTP client. Nothing is
    /// sent: the binding has no handshake, so a wrong URL or token shows on
    /// the first call. The proxy is the one the environment names for the
    /// endpoint, read here once.
    pub(crate) fn new(config: Arc<Config>) -> Result<Self, Error> {
        let mut endpoint = endpoint(&config.url)?;
        // A bearer token, when set, wins over the URL's own credentials.
        let mut redactor = config.redactor();
        let url_auth = take_url_credentials(&mut endpoint).map(|taken| {
            for secret in taken.secrets {
                redactor = std::mem::take(&mut redactor).with_secret(secret);
            }
            taken.header
        });
        let auth = bearer_header(config.token.as_ref())?.or(url_auth);
        let headers = crate::credentials::checked_headers(&config)?;
        let setup_failed = |message: String| Error::Connect {
            url: display_uri(&config.url),
            message,
            retryable: false,
            source: None,
        };
        let target = Uri::try_from(endpoint.as_str())
            .map_err(|e| setup_failed(format!("invalid HTTP URL: {e}")))?;
        let proxies = match &config.proxy {
            ProxyChoice::Env => Matcher::from_env(),
            ProxyChoice::Off => Matcher::builder().build(),
            ProxyChoice::Url(url) => Matcher::builder().all(url.0.clone()).build(),
        };
        // A forwarding proxy reads an `http://` request's credentials.
        let proxy = proxies.intercept(&target).map(|i| i.uri().to_string());
        crate::cleartext::check_cleartext_proxy(
            &config.url,
            proxy.as_deref(),
            crate::cleartext::sends_credential(&config),
            config.allow_insecure_token,
        )?;
        let transport = Transport::new(Settings {
            endpoint: target.clone(),
            user_agent: format!("{}/{}", config.client_name, config.client_version),
            connect_timeout: config.connect_timeout,
            tls: config.tls.client_config(),
            proxies,
        })
        .map_err(|e| setup_failed(format!("could not set up the HTTP client: {e}")))?;
        Ok(HttpBackend {
            transport,
            // For messages: the query may carry a credential.
            endpoint: display_uri(endpoint.as_str()),
            target,
            auth,
            redactor,
            headers,
            cache: sweep(Arc::new(Mutex::new(
                OutcomeCache::new(config.outcome_cache_capacity, config.outcome_cache_ttl)
                    .with_max_bytes(config.outcome_cache_bytes),
            ))),
            config,
            closed: watch::Sender::new(false),
        })
    }
}

/// The longest the cache's sweeper sleeps, so it notices the backend gone.
const SWEEP_IDLE: Duration = Duration::from_secs(1);

/// Expires `cache`'s outcomes on time, from a task of its own (the HTTP
/// binding has no connection task), until the backend drops the cache.
/// Outside a Tokio runtime the cache expires as calls look at it.
fn sweep(cache: Arc<Mutex<OutcomeCache>>) -> Arc<Mutex<OutcomeCache>> {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return cache;
    };
    let weak = Arc::downgrade(&cache);
    runtime.spawn(async move {
        loop {
            let next = {
                let Some(cache) = weak.upgrade() else { return };
                let next = crate::sync::lock(&cache).next_expiry();
                next
            };
            let now = Instant::now();
            let wait = next.map_or(SWEEP_IDLE, |t| t.saturating_duration_since(now));
            tokio::time::sleep(wait.min(SWEEP_IDLE)).await;
            let Some(cache) = weak.upgrade() else { return };
            crate::sync::lock(&cache).expire(Instant::now());
        }
    });
    cache
}
