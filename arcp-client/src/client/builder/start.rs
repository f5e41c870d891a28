//! Starting a client's transport: the configuration checked, the backend
//! for the URL's scheme started (the WebSocket connection task, or the
//! HTTP binding), and what `connect` still waits for.

use std::sync::{Arc, Mutex};
use std::time::Instant;

#[cfg(feature = "http")]
use std::sync::OnceLock;

use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::backend::Backend;
use crate::config::{is_http_url, Config};
use crate::error::Error;
use crate::fate::LiveKeys;
#[cfg(feature = "http")]
use crate::http::HttpBackend;
use crate::profile::RuntimeProfile;
#[cfg(feature = "http")]
use crate::sync::lock;
use crate::ws::{self, Core};

use super::super::lazy_journal::LazyJournal;
use super::super::{Client, Inner};

/// A client's transport, started; what `connect` still waits for.
pub(super) struct Started {
    config: Arc<Config>,
    pub(super) backend: Backend,
    profile: Arc<Mutex<Option<RuntimeProfile>>>,
    events: tokio::sync::broadcast::Sender<crate::connection_events::ConnectionEvent>,
    /// The first session's outcome, when asked for.
    pub(super) ready: Option<oneshot::Receiver<Result<RuntimeProfile, Error>>>,
}

impl Started {
    /// A transport for a client whose configuration can never work: no
    /// connection task, so its calls (refused before they reach it) have
    /// nowhere to go, and closing it does nothing.
    pub(super) fn unusable(config: Arc<Config>) -> Started {
        let (tx, _) = mpsc::channel(1);
        Started {
            config,
            backend: Backend::Ws {
                tx,
                dialect: Default::default(),
            },
            profile: Arc::new(Mutex::new(None)),
            events: tokio::sync::broadcast::channel(1).0,
            ready: None,
        }
    }

    pub(super) fn into_client(self, journal: LazyJournal, broken: Option<Error>) -> Client {
        Client {
            inner: Arc::new(Inner {
                in_flight: Arc::new(Semaphore::new(self.config.max_in_flight)),
                config: self.config,
                backend: self.backend,
                profile: self.profile,
                #[cfg(feature = "http")]
                artifacts: OnceLock::new(),
                journal,
                broken,
                live_keys: LiveKeys::default(),
                events: self.events,
            }),
        }
    }
}

/// Checks the configuration and starts the backend for the URL's scheme;
/// with `wait_ready`, the first session's outcome is to be awaited.
pub(super) fn start_backend(config: Arc<Config>, wait_ready: bool) -> Result<Started, Error> {
    crate::credentials::checked_headers(&config)?;
    crate::cleartext::check_cleartext_credential(
        &config.url,
        config.token.is_some()
            || config.token_provider.is_some()
            || crate::cleartext::url_has_credentials(&config.url),
        config.allow_insecure_token,
    )?;
    let profile = Arc::new(Mutex::new(None));
    let (events, _) = tokio::sync::broadcast::channel(EVENT_CAPACITY);
    let mut ready = None;
    let backend = if is_http_url(&config.url) {
        http_backend(&config, &profile)?
    } else {
        check_ws_url(&config.url)?;
        ws::check_cleartext_proxy(&config)?;
        let (tx, rx) = mpsc::channel(config.max_in_flight.clamp(16, 4096));
        let (ready_tx, ready_rx) = oneshot::channel();
        if wait_ready {
            ready = Some(ready_rx);
        }
        let core = Core::new(
            config.clone(),
            wait_ready.then_some(ready_tx),
            profile.clone(),
            events.clone(),
            Instant::now(),
        );
        let dialect = core.dialect_hint();
        tokio::spawn(ws::run(config.clone(), rx, core));
        Backend::Ws { tx, dialect }
    };
    Ok(Started {
        config,
        backend,
        profile,
        events,
        ready,
    })
}

/// The HTTP binding's backend; its runtime profile is known without a
/// handshake.
#[cfg(feature = "http")]
fn http_backend(
    config: &Arc<Config>,
    profile: &Mutex<Option<RuntimeProfile>>,
) -> Result<Backend, Error> {
    let backend = HttpBackend::new(config.clone())?;
    *lock(profile) = Some(backend.profile());
    Ok(Backend::Http(Arc::new(backend)))
}

/// Without the `http` feature an `http(s)://` URL can never work: say which
/// feature is missing rather than "unsupported scheme".
#[cfg(not(feature = "http"))]
fn http_backend(
    config: &Arc<Config>,
    _profile: &Mutex<Option<RuntimeProfile>>,
) -> Result<Backend, Error> {
    Err(Error::Connect {
        url: crate::config::shown_url(&config.url),
        message: "this build of arcp-sdk has no HTTP binding: enable its `http` feature \
                  (or use a ws:// or wss:// URL)"
            .into(),
        retryable: false,
        source: None,
    })
}

/// Connection events kept for a listener that has not read them yet.
const EVENT_CAPACITY: usize = 64;

/// A WebSocket URL that can never work fails at once, not after retries.
fn check_ws_url(url: &str) -> Result<(), Error> {
    let bad = |message: String| Error::Connect {
        url: crate::config::shown_url(url),
        message,
        retryable: false,
        source: None,
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(|| {
        bad("the URL has no scheme (expected ws://, wss://, http:// or https://)".into())
    })?;
    if !matches!(scheme.to_ascii_lowercase().as_str(), "ws" | "wss") {
        return Err(bad(format!(
            "unsupported URL scheme {scheme:?} (expected ws://, wss://, http:// or https://)"
        )));
    }
    if rest.is_empty() || rest.starts_with('/') {
        return Err(bad("the URL has no host".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_that_can_never_work_are_refused_at_once() {
        for url in ["127.0.0.1:7777", "ftp://x/arcp", "ws://", "ws:///arcp"] {
            let e = check_ws_url(url).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::Connect {
                        retryable: false,
                        ..
                    }
                ),
                "{url}: {e}"
            );
        }
        assert!(check_ws_url("ws://127.0.0.1:7777/arcp").is_ok());
        assert!(check_ws_url("WSS://example.com").is_ok());
    }
}
