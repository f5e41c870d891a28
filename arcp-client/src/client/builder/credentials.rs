//! The setters for what a client presents and trusts: its credentials
//! (bearer token, token provider, headers), its proxy, whether a token may
//! go out in clear, and its TLS roots.

use std::sync::Arc;

use super::ClientBuilder;
use crate::config::Secret;
use crate::error::Error;

impl ClientBuilder {
    /// Authenticate with this bearer token. It is never logged or printed.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.config.token = Some(Secret(token.into()));
        self
    }

    /// Gets the bearer token from `provider`, called before each connection
    /// (the first, each reconnect, and once more when the runtime refuses a
    /// token as stale) and before each request of the HTTP binding: for
    /// credentials that expire. It replaces [`bearer_token`](Self::bearer_token)
    /// for sessions and calls; artifact fetches (`fetch_artifact`) send only
    /// a fixed `bearer_token`. Cache inside the provider if fetching a token
    /// is costly.
    ///
    /// A provider that fails ends nothing at once: the failure
    /// ([`Error::TokenProvider`], with the provider's error as its source)
    /// is retried as a failed connection is, with the reconnect backoff,
    /// within the connect budget and each call's deadline.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), arcp_sdk::Error> {
    /// let client = arcp_sdk::Client::builder("wss://runtime.example/arcp")
    ///     .token_provider(|| async {
    ///         // e.g. a token that a sidecar refreshes in the environment;
    ///         // any error type converts (here `std::env::VarError`)
    ///         std::env::var("ARCP_TOKEN")
    ///     })
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn token_provider<F, Fut, E>(mut self, provider: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<String, E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.config.token_provider = Some(crate::config::TokenProvider(Arc::new(move || {
            let token = provider();
            Box::pin(async move { token.await.map_err(Into::into) })
        })));
        self
    }

    /// Adds a header to the WebSocket upgrade request (API gateways often
    /// authenticate there) and to each request of the HTTP binding. May be
    /// called more than once; the values are never logged or shown. An
    /// invalid name or value fails `connect()` with [`Error::InvalidCall`].
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.config
            .headers
            .push((name.into(), Secret(value.into())));
        self
    }

    /// Connects through this HTTP proxy (`http://[user:password@]host:port`),
    /// whatever the environment says: `ws://` and `wss://` through a
    /// `CONNECT` tunnel (TLS end to end), and the HTTP binding as
    /// [`reqwest`](https://docs.rs/reqwest) would. Without this setting the
    /// environment's proxy applies: `HTTPS_PROXY` (`wss://`, `https://`),
    /// `HTTP_PROXY` (`ws://`, `http://`), `ALL_PROXY`, and `NO_PROXY`'s
    /// exceptions. Only `http://` proxies are supported; another scheme
    /// fails `connect()` with [`Error::Connect`]. Artifact fetches
    /// (`fetch_artifact`) follow the environment's settings alone.
    pub fn proxy(mut self, url: impl Into<String>) -> Self {
        self.config.proxy = crate::config::ProxyChoice::Url(Secret(url.into()));
        self
    }

    /// Connects directly, ignoring the environment's proxy variables.
    pub fn no_proxy(mut self) -> Self {
        self.config.proxy = crate::config::ProxyChoice::Off;
        self
    }

    /// Lets the bearer token (and a URL's own credentials) go out in clear,
    /// over `ws://` or `http://`, to a host other than this machine. Off by
    /// default: such a client fails to connect with [`Error::Connect`]
    /// naming this option, before anything is sent. Loopback hosts
    /// (`localhost`, `127.0.0.0/8`, `::1`) are always allowed.
    pub fn allow_insecure_token(mut self, allow: bool) -> Self {
        self.config.allow_insecure_token = allow;
        self
    }

    /// Trusts this certificate (DER) as a root for `wss://` and `https://`, in addition to
    /// the bundled web PKI roots: for a runtime with a private CA or a
    /// self-signed certificate.
    pub fn add_root_certificate_der(mut self, der: impl Into<Vec<u8>>) -> Self {
        self.config
            .tls
            .extra_roots
            .push(rustls_pki_types::CertificateDer::from(der.into()));
        self
    }

    /// Trusts every certificate in this PEM text as a root for `wss://` and
    /// `https://`.
    /// Fails with [`Error::InvalidCall`] naming the problem if the text holds
    /// no valid certificate.
    pub fn add_root_certificates_pem(mut self, pem: &str) -> Result<Self, Error> {
        use rustls_pki_types::pem::PemObject;
        let certs: Vec<_> = rustls_pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| Error::invalid_call(format!("root certificate PEM is invalid: {e}")))?;
        if certs.is_empty() {
            return Err(Error::invalid_call(
                "root certificate PEM holds no certificate".into(),
            ));
        }
        self.config.tls.extra_roots.extend(certs);
        Ok(self)
    }

    /// Uses this rustls configuration for `wss://` and `https://` as is (roots, client
    /// certificates, protocol versions); overrides the other TLS settings.
    pub fn tls_config(mut self, config: Arc<rustls::ClientConfig>) -> Self {
        self.config.tls.config = Some(config);
        self
    }
}
