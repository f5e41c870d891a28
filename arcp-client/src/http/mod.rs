//! The HTTP binding of ARCP (`docs/http-binding.md`) and artifact fetch.
//!
//! A call is one `job.submit` envelope per `POST`, the idempotency key also
//! in the `Idempotency-Key` header; the answer is one terminal envelope
//! (`application/json`) or a stream of envelopes up to the terminal
//! (`application/x-ndjson`). [`HttpBackend`] runs each call as a loop of
//! attempts with the same key and the same intent under a fresh envelope id,
//! reading the status codes of draft-ietf-httpapi-idempotency-key-header
//! (409 in flight, 422 other payload) and `Retry-After`.
//!
//! [`ArtifactFetcher`] resolves `artifact_ref` / `result_ref` URIs with a
//! size limit and sha256 verification.

mod artifact;
mod call;
mod gate;
mod transport;

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::Url;

use crate::config::Secret;
use crate::error::Error;

#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use artifact::{ArtifactFetcher, ArtifactFetcherBuilder, ArtifactRef};
pub(crate) use call::HttpBackend;

/// Response header that marks a stored outcome replayed for a repeated key.
pub(crate) const REPLAYED_HEADER: &str = "arcp-replayed";
/// The IETF request header carrying the idempotency key.
pub(crate) const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// Media type of a stream of envelopes, one JSON object per line.
pub(crate) const NDJSON: &str = "application/x-ndjson";
/// Longest `Retry-After` honoured; anything longer is clamped (a runtime
/// asking for days is misconfigured, and the retry budget ends the call).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(86_400);
/// Bytes of an error response body read for its message.
pub(crate) const ERROR_BODY_LIMIT: usize = 8 * 1024;

/// The endpoint to `POST` to: the URL as given, or `/arcp` when it names no
/// path.
pub(crate) fn endpoint(url: &str) -> Result<Url, Error> {
    let invalid = |message: String| Error::Connect {
        url: display_uri(url),
        message,
        retryable: false,
        source: None,
    };
    let mut parsed =
        Url::parse(url.trim()).map_err(|e| invalid(format!("invalid HTTP URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(invalid(
            "the HTTP binding needs an http:// or https:// URL with a host".into(),
        ));
    }
    if parsed.path().is_empty() || parsed.path() == "/" {
        parsed.set_path("/arcp");
    }
    Ok(parsed)
}

/// `Authorization: Bearer <token>`, marked sensitive so that it is never
/// printed by `Debug`.
pub(crate) fn bearer_header(token: Option<&Secret>) -> Result<Option<HeaderValue>, Error> {
    let Some(token) = token else {
        return Ok(None);
    };
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.0)).map_err(|_| {
        Error::invalid_call(
            "the bearer token has characters that an HTTP header cannot carry".into(),
        )
    })?;
    value.set_sensitive(true);
    Ok(Some(value))
}

/// Credentials an endpoint's URL carried.
pub(crate) struct UrlCredentials {
    /// `Authorization: Basic`, as curl and reqwest send them.
    pub(crate) header: HeaderValue,
    /// What must never appear in a message (a server may echo them): the
    /// password, and the header's encoded pair.
    pub(crate) secrets: Vec<String>,
}

/// The endpoint's own credentials (`http://user:password@host/arcp`), taken
/// out of it: never on the request line or in a message.
pub(crate) fn take_url_credentials(url: &mut Url) -> Option<UrlCredentials> {
    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    let password = percent_decoded(url.password().unwrap_or(""));
    let mut pair = percent_decoded(url.username());
    pair.push(b':');
    pair.extend_from_slice(&password);
    let _ = url.set_username("");
    let _ = url.set_password(None);
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
    let mut header = HeaderValue::try_from(format!("Basic {encoded}")).ok()?;
    header.set_sensitive(true);
    let mut secrets = vec![encoded];
    if !password.is_empty() {
        secrets.push(String::from_utf8_lossy(&password).into_owned());
    }
    Some(UrlCredentials { header, secrets })
}

/// `%XX` escapes decoded (a URL's user info is percent-encoded).
fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&hi), Some(&lo)) if hex(hi).is_some() && hex(lo).is_some() => {
                let value = hex(hi).unwrap_or(0) * 16 + hex(lo).unwrap_or(0);
                out.push(value as u8);
                i += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

/// A reqwest client: rustls (the given configuration, else the bundled web
/// PKI roots), HTTP/1.1, no automatic decompression or retries.
pub(crate) fn build_http_client(
    user_agent: String,
    connect_timeout: Duration,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    redirect: reqwest::redirect::Policy,
    resolver: Option<impl reqwest::dns::Resolve + 'static>,
    proxy: &crate::config::ProxyChoice,
) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .user_agent(user_agent)
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .redirect(redirect)
        .pool_idle_timeout(Duration::from_secs(60));
    // Always a configuration of our own: reqwest's default reads the
    // process-wide crypto provider.
    let tls = match tls {
        Some(tls) => (*tls).clone(),
        None => crate::config::web_pki_config(&[])
            .ok_or_else(|| "TLS: the default protocol versions are unsupported".to_owned())?,
    };
    if let Some(resolver) = resolver {
        builder = builder.dns_resolver(std::sync::Arc::new(resolver));
    }
    // The environment's proxy variables are reqwest's default.
    match proxy {
        crate::config::ProxyChoice::Env => {}
        crate::config::ProxyChoice::Off => builder = builder.no_proxy(),
        crate::config::ProxyChoice::Url(url) => {
            let proxy = reqwest::Proxy::all(url.0.as_str()).map_err(|e| {
                format!(
                    "the proxy {} is not a usable URL: {}",
                    crate::config::shown_url(&url.0),
                    describe(&e)
                )
            })?;
            builder = builder.proxy(proxy);
        }
    }
    builder
        .use_preconfigured_tls(tls)
        .build()
        .map_err(|e| format!("could not set up the HTTP client: {}", describe(&e)))
}

/// The `Idempotency-Key` header value: an RFC 8941 sf-string (quoted), as the
/// draft specifies. Keys are printable ASCII, which an sf-string can carry
/// once `"` and `\` are escaped.
pub(crate) fn idempotency_key_header(key: &str) -> Result<HeaderValue, Error> {
    let mut quoted = String::with_capacity(key.len() + 2);
    quoted.push('"');
    for c in key.chars() {
        if c == '"' || c == '\\' {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    // From the string itself: its buffer becomes the header's, uncopied.
    HeaderValue::try_from(quoted).map_err(|_| {
        Error::invalid_call(format!(
            "idempotency key {key:?} cannot be sent as an HTTP header"
        ))
    })
}

/// The `Retry-After` header as a delay from `now`: delay-seconds or an
/// HTTP-date (RFC 9110 §10.2.3). A date in the past is no delay; anything
/// unparsable is ignored.
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(MAX_RETRY_AFTER),
    )
}

/// Whether a response header is present and says `true` (or `1`).
pub(crate) fn header_is_true(headers: &HeaderMap, name: &str) -> bool {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true") || v.trim() == "1")
}

/// Whether a response's media type (without parameters, in any case) is
/// `wanted` (given in lower case).
pub(crate) fn has_media_type(headers: &HeaderMap, wanted: &str) -> bool {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(wanted))
}

/// Why a body could not be read whole.
pub(crate) enum ReadError {
    /// The connection failed mid-body.
    Transport(String),
    /// The body is longer than the limit; reading stopped there.
    TooLarge,
}

/// A response body read a piece at a time: hyper's (calls) or reqwest's
/// (artifact fetch).
pub(crate) trait BodyChunks {
    /// Why the body could not be read on.
    type Error: std::error::Error + 'static;
    /// The next piece of the body; `None` at its end.
    async fn next_chunk(&mut self) -> Result<Option<bytes::Bytes>, Self::Error>;
}

impl BodyChunks for reqwest::Response {
    type Error = reqwest::Error;
    async fn next_chunk(&mut self) -> Result<Option<bytes::Bytes>, reqwest::Error> {
        self.chunk().await
    }
}

impl BodyChunks for hyper::body::Incoming {
    type Error = hyper::Error;
    /// Trailers are skipped.
    async fn next_chunk(&mut self) -> Result<Option<bytes::Bytes>, hyper::Error> {
        use http_body_util::BodyExt as _;
        while let Some(frame) = self.frame().await {
            if let Ok(data) = frame?.into_data() {
                return Ok(Some(data));
            }
        }
        Ok(None)
    }
}

/// Reads a whole body, stopping (without buffering more) once it exceeds
/// `limit` bytes.
pub(crate) async fn read_capped(
    response: &mut impl BodyChunks,
    limit: usize,
) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    loop {
        match response.next_chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > limit {
                    return Err(ReadError::TooLarge);
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(ReadError::Transport(describe(&e))),
        }
    }
}

/// A short human-readable message from an error response body: an RFC 9457
/// problem's `detail` or `title`, an ARCP error's `message`, or the text.
/// Redacted before it is cut short, so a secret across the cut never leaks
/// its first part.
pub(crate) fn body_detail(body: &[u8], redactor: &Redactor) -> String {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
        let pick = |v: &serde_json::Value, field: &str| {
            v.get(field)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        let found = pick(&value, "detail")
            .or_else(|| pick(&value, "title"))
            .or_else(|| pick(&value, "message"))
            .or_else(|| value.get("payload").and_then(|p| pick(p, "message")));
        if let Some(found) = found {
            return truncate(&redactor.redact(found.trim()));
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        "no details in the response".into()
    } else {
        truncate(&redactor.redact(text))
    }
}

fn truncate(text: &str) -> String {
    const MAX: usize = 300;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

use crate::redact::Redactor;

/// A URI fit for errors and logs: no user info, and the query replaced
/// (presigned URLs carry credentials there).
pub(crate) fn display_uri(uri: &str) -> String {
    match Url::parse(uri) {
        Ok(mut url) => {
            let had_query = url.query().is_some();
            url.set_query(None);
            url.set_fragment(None);
            let _ = url.set_password(None);
            let _ = url.set_username("");
            let mut text = url.to_string();
            if had_query {
                text.push_str("?<redacted>");
            }
            text
        }
        Err(_) => {
            let cut = uri.find(['?', '#']).unwrap_or(uri.len());
            let base = &uri[..cut];
            let base = base.rsplit_once('@').map_or(base, |(_, host)| host);
            truncate(base)
        }
    }
}

/// An error with its chain of causes ("error sending request: connection
/// reset by peer"), which reqwest's own message leaves out.
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_defaults_the_path() {
        assert_eq!(endpoint("http://h:1").unwrap().as_str(), "http://h:1/arcp");
        assert_eq!(
            endpoint("https://h/v1/arcp").unwrap().as_str(),
            "https://h/v1/arcp"
        );
        assert!(endpoint("http://").is_err());
        assert!(endpoint("ftp://h/").is_err());
    }

    #[test]
    fn url_credentials_become_basic_auth_and_leave_the_url() {
        let mut url = Url::parse("http://us%40er:p%3Aw@h:1/arcp").unwrap();
        let taken = take_url_credentials(&mut url).unwrap();
        // base64("us@er:p:w")
        assert_eq!(taken.header, "Basic dXNAZXI6cDp3");
        assert!(taken.header.is_sensitive());
        assert_eq!(taken.secrets, ["dXNAZXI6cDp3", "p:w"]);
        assert_eq!(url.as_str(), "http://h:1/arcp");
        let mut plain = Url::parse("http://h:1/arcp").unwrap();
        assert!(take_url_credentials(&mut plain).is_none());
        assert_eq!(percent_decoded("%zz%4"), b"%zz%4");
    }

    #[test]
    fn key_header_is_an_sf_string() {
        assert_eq!(idempotency_key_header("abc").unwrap(), "\"abc\"");
        assert_eq!(idempotency_key_header("a\"b\\c").unwrap(), r#""a\"b\\c""#);
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(7)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        headers.insert(RETRY_AFTER, HeaderValue::from_str(&later).unwrap());
        assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(30)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        headers.insert(RETRY_AFTER, HeaderValue::from_str(&earlier).unwrap());
        assert_eq!(retry_after(&headers, now), Some(Duration::ZERO));
        headers.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&headers, now), None);
        headers.insert(RETRY_AFTER, HeaderValue::from_static("99999999999"));
        assert_eq!(retry_after(&headers, now), Some(MAX_RETRY_AFTER));
    }

    #[test]
    fn uris_lose_their_credentials_in_messages() {
        assert_eq!(
            display_uri("https://user:pw@store.example/a/b?X-Amz-Signature=s3cr3t"),
            "https://store.example/a/b?<redacted>"
        );
        assert_eq!(display_uri("not a uri?token=1"), "not a uri");
    }

    #[test]
    fn error_bodies_are_summarised() {
        let none = Redactor::default();
        assert_eq!(
            body_detail(
                br#"{"type":"about:blank","title":"Conflict","detail":"in flight"}"#,
                &none
            ),
            "in flight"
        );
        assert_eq!(
            body_detail(
                br#"{"type":"session.error","payload":{"code":"X","message":"m"}}"#,
                &none
            ),
            "m"
        );
        assert_eq!(body_detail(b"  plain  ", &none), "plain");
        assert_eq!(body_detail(b"", &none), "no details in the response");
    }

    #[test]
    fn a_token_across_the_cut_leaks_no_part() {
        let token = "tok-0123456789abcdef";
        let redactor = Redactor::default().with_secret(token);
        // The token starts 290 characters in: the 300-character cut falls
        // inside it.
        let body = format!("{} {token} and more", "x".repeat(289));
        let shown = body_detail(body.as_bytes(), &redactor);
        assert!(!shown.contains("tok-0123"), "{shown}");
        let problem = serde_json::json!({"detail": body}).to_string();
        let shown = body_detail(problem.as_bytes(), &redactor);
        assert!(!shown.contains("tok-0123"), "{shown}");
    }
}
