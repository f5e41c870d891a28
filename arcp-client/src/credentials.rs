//! What the client presents to the runtime: extra headers, and the bearer
//! token: the fixed one
//! ([`ClientBuilder::bearer_token`](crate::ClientBuilder::bearer_token)) or
//! a fresh one from the application's provider
//! ([`ClientBuilder::token_provider`](crate::ClientBuilder::token_provider)).
//! Every session hello and HTTP request obtains its token here, and only
//! here, so a rule about where a token may go applies to both sources.

use std::sync::Arc;

use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};

use crate::config::{Config, Secret};
use crate::error::Error;

/// The token for the next connection or request, if any. A provider is
/// called each time (it caches, if caching is wanted).
pub(crate) async fn bearer_token(config: &Config) -> Result<Option<Secret>, Error> {
    let Some(provider) = &config.token_provider else {
        return Ok(config.token.clone());
    };
    // Bounded: a provider that hangs must not hold the connection.
    let wait = config.connect_timeout;
    match tokio::time::timeout(wait, (provider.0)()).await {
        Ok(Ok(token)) => {
            // Before it is sent: any text that may quote it is redacted.
            config.provided_tokens.note(&token);
            Ok(Some(Secret(token)))
        }
        Ok(Err(e)) => Err(Error::TokenProvider {
            message: e.to_string(),
            source: Some(Arc::from(e)),
        }),
        Err(_) => Err(Error::TokenProvider {
            message: format!("no token within the connect timeout of {wait:?}"),
            source: None,
        }),
    }
}

/// With a token provider, a fresh token for one HTTP request and its
/// `Authorization` value (sensitive); `None` without a provider (the fixed
/// token's header is made once).
#[cfg(feature = "http")]
pub(crate) async fn provided_authorization(
    config: &Config,
) -> Result<Option<(Secret, HeaderValue)>, Error> {
    if config.token_provider.is_none() {
        return Ok(None);
    }
    let Some(token) = bearer_token(config).await? else {
        return Ok(None);
    };
    let mut header = HeaderValue::from_str(&format!("Bearer {}", token.0)).map_err(|_| {
        Error::invalid_call("the provider's token has characters a header cannot carry".into())
    })?;
    header.set_sensitive(true);
    Ok(Some((token, header)))
}

/// The extra headers ([`ClientBuilder::header`](crate::ClientBuilder::header)),
/// each checked, marked sensitive (kept out of `Debug`).
pub(crate) fn checked_headers(config: &Config) -> Result<Vec<(HeaderName, HeaderValue)>, Error> {
    config
        .headers
        .iter()
        .map(|(name, value)| {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| Error::invalid_call(format!("{name:?} is not a valid header name")))?;
            let mut value = HeaderValue::from_str(&value.0).map_err(|_| {
                Error::invalid_call(format!(
                    "the value of header {name} has characters a header cannot carry"
                ))
            })?;
            value.set_sensitive(true);
            Ok((name, value))
        })
        .collect()
}
