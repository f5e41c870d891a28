//! TLS to the server, with rustls and the SDK's own crypto provider, as the
//! connection string's `sslmode` and `sslrootcert` ask, with libpq's
//! meanings:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | - |
//! | `allow`, `prefer` (the default) | when the server offers it | not checked |
//! | `require` | always | not checked; with `sslrootcert`, as `verify-ca` |
//! | `verify-ca` | always | signed by a trusted root |
//! | `verify-full` | always | signed by a trusted root, and names the host |
//!
//! Trusted roots: the PEM file `sslrootcert` names, or the web PKI roots
//! (`sslrootcert=system`, and the default: libpq would read
//! `~/.postgresql/root.crt` instead). TLS is never used over a Unix socket
//! (the server does not offer it there).
//!
//! tokio-postgres parses neither `verify-*` nor `sslrootcert`, so both are
//! taken out of the connection string here before it is parsed.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};

use crate::percent::percent_decode;

/// What the connection string asks of TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(value: &str) -> Result<Mode, String> {
        Ok(match value {
            "disable" => Mode::Disable,
            // tokio-postgres cannot try plain first, then TLS: `allow` is
            // served as `prefer` (TLS when offered), the stricter of the two.
            "allow" | "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode {other:?} is not one of disable, allow, prefer, require, \
                     verify-ca, verify-full"
                ))
            }
        })
    }

    /// tokio-postgres' own setting: whether TLS is tried, and required.
    pub(super) fn ssl_mode(self) -> SslMode {
        match self {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }
}

/// The TLS settings taken out of a connection string.
#[derive(Debug, PartialEq)]
pub(super) struct Settings {
    pub(super) mode: Mode,
    pub(super) root_cert: Option<String>,
}

/// Splits `url` into what tokio-postgres parses and the TLS settings.
pub(super) fn take_settings(url: &str) -> Result<(String, Settings), String> {
    let mut mode = None;
    let mut root_cert = None;
    let mut take = |key: &str, value: String| -> Result<bool, String> {
        match key {
            "sslmode" => mode = Some(Mode::parse(&value)?),
            "sslrootcert" => root_cert = Some(value),
            _ => return Ok(false),
        }
        Ok(true)
    };
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let (base, query) = match url.split_once('?') {
            Some((base, query)) => (base, query),
            None => (url, ""),
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if !take(
                key,
                String::from_utf8_lossy(&percent_decode(value)).into_owned(),
            )? {
                kept.push(pair);
            }
        }
        match kept.is_empty() {
            true => base.to_owned(),
            false => format!("{base}?{}", kept.join("&")),
        }
    } else {
        let mut kept = Vec::new();
        for (key, value, text) in key_values(url)? {
            if !take(&key, value)? {
                kept.push(text);
            }
        }
        kept.join(" ")
    };
    let settings = Settings {
        mode: mode.unwrap_or(Mode::Prefer),
        root_cert,
    };
    Ok((rest, settings))
}

/// The `key=value` pairs of a libpq keyword string (values unquoted and
/// unescaped), each with its original text.
fn key_values(text: &str) -> Result<Vec<(String, String, &str)>, String> {
    let bytes = text.as_bytes();
    let mut pairs = Vec::new();
    let mut i = 0;
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == bytes.len() {
            return Ok(pairs);
        }
        let start = i;
        while i < bytes.len() && bytes[i] != b'=' && !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let key = text[start..i].to_owned();
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if bytes.get(i) != Some(&b'=') {
            return Err(format!("{key:?} in the connection string has no value"));
        }
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = Vec::new();
        if bytes.get(i) == Some(&b'\'') {
            i += 1;
            loop {
                match bytes.get(i) {
                    None => return Err(format!("the value of {key:?} has no closing quote")),
                    Some(b'\'') => break,
                    Some(b'\\') if i + 1 < bytes.len() => {
                        value.push(bytes[i + 1]);
                        i += 2;
                        continue;
                    }
                    Some(&b) => value.push(b),
                }
                i += 1;
            }
            i += 1;
        } else {
            while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
                if bytes[i] == b'\\' && i + 1 < bytes.len() {
                    i += 1;
                }
                value.push(bytes[i]);
                i += 1;
            }
        }
        let value = String::from_utf8_lossy(&value).into_owned();
        pairs.push((key, value, &text[start..i]));
    }
}

/// The rustls configuration `settings` call for.
pub(super) fn client_config(settings: &Settings) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let checks = match (settings.mode, &settings.root_cert) {
        (Mode::Disable | Mode::Prefer, _) | (Mode::Require, None) => None,
        (Mode::Require | Mode::VerifyCa, _) => Some(false),
        (Mode::VerifyFull, _) => Some(true),
    };
    let mut config = match checks {
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(provider)))
            .with_no_client_auth(),
        Some(name_too) => {
            let roots = Arc::new(roots(settings.root_cert.as_deref())?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| format!("TLS setup: {e}"))?;
            let verifier: Arc<dyn ServerCertVerifier> = if name_too {
                webpki
            } else {
                Arc::new(ChainOnly(webpki))
            };
            builder
                .dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_no_client_auth()
        }
    };
    // PostgreSQL 17 checks it on direct TLS; earlier servers ignore it.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(config)
}

/// The roots `sslrootcert` names: a PEM file, or `system` (and nothing)
/// for the web PKI roots.
fn roots(root_cert: Option<&str>) -> Result<rustls::RootCertStore, String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match root_cert {
        None | Some("system") => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(path) => {
            let pem = std::fs::read(path)
                .map_err(|e| format!("sslrootcert {path}: cannot be read: {e}"))?;
            let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("sslrootcert {path}: invalid PEM: {e}"))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!("sslrootcert {path}: holds no usable certificate"));
            }
        }
    }
    Ok(roots)
}

/// `prefer` and `require`: encryption without authentication, as libpq
/// does (the handshake's signatures are still checked).
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain to a trusted root, not the host name. The web
/// PKI verifier checks the chain first: a name mismatch is reported only
/// for a chain it accepted.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// tokio-postgres' TLS hook over rustls. It keeps the last handshake
/// failure: tokio-postgres reports one only as "error performing TLS
/// handshake", and the journal's error names the reason.
#[derive(Clone)]
pub(super) struct RustlsConnect {
    config: Arc<rustls::ClientConfig>,
    pub(super) last_failure: Arc<Mutex<Option<String>>>,
}

impl RustlsConnect {
    pub(super) fn new(config: rustls::ClientConfig) -> Self {
        RustlsConnect {
            config: Arc::new(config),
            last_failure: Arc::new(Mutex::new(None)),
        }
    }
}

impl<S> MakeTlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnector;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(&mut self, host: &str) -> Result<RustlsConnector, Self::Error> {
        // No host name over a Unix socket, where the server offers no TLS.
        let host = if host.is_empty() { "localhost" } else { host };
        Ok(RustlsConnector {
            config: self.config.clone(),
            name: ServerName::try_from(host.to_owned())?,
            last_failure: self.last_failure.clone(),
        })
    }
}

/// One connection's TLS handshake.
pub(super) struct RustlsConnector {
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
    last_failure: Arc<Mutex<Option<String>>>,
}

impl<S> TlsConnect<S> for RustlsConnector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let connector = tokio_rustls::TlsConnector::from(self.config);
            match connector.connect(self.name, stream).await {
                Ok(tls) => Ok(RustlsStream(Box::new(tls))),
                Err(e) => {
                    *crate::sync::lock(&self.last_failure) = Some(e.to_string());
                    Err(e)
                }
            }
        })
    }
}

/// A TLS connection to the server.
pub(super) struct RustlsStream<S>(Box<tokio_rustls::client::TlsStream<S>>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        // SCRAM without channel binding (`-PLUS` needs the certificate's
        // hash under its own signature algorithm); SCRAM itself still
        // authenticates both sides' knowledge of the password.
        ChannelBinding::none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_of_a_url() {
        let (rest, s) = take_settings(
            "postgres://u@h/db?sslmode=verify-full&application_name=x&sslrootcert=%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@h/db?application_name=x");
        assert_eq!(s.mode, Mode::VerifyFull);
        assert_eq!(s.root_cert.as_deref(), Some("/ca.pem"));
        let (rest, s) = take_settings("postgresql://u@h/db").unwrap();
        assert_eq!(
            (rest.as_str(), s.mode),
            ("postgresql://u@h/db", Mode::Prefer)
        );
    }

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out_of_keywords() {
        let (rest, s) = take_settings(
            "host=h sslmode = 'verify-ca' sslrootcert='/my certs/ca.pem' password='a b\\'c'",
        )
        .unwrap();
        assert_eq!(rest, "host=h password='a b\\'c'");
        assert_eq!(s.mode, Mode::VerifyCa);
        assert_eq!(s.root_cert.as_deref(), Some("/my certs/ca.pem"));
        assert!(take_settings("host=h sslmode=maybe")
            .unwrap_err()
            .contains("maybe"));
        assert!(take_settings("host=h sslmode").is_err());
        assert!(take_settings("host='h").is_err());
    }

    #[test]
    fn allow_is_served_as_prefer_and_require_with_a_root_checks_it() {
        let mode = |m: &str| {
            take_settings(&format!("host=h sslmode={m}"))
                .unwrap()
                .1
                .mode
        };
        assert_eq!(mode("allow"), Mode::Prefer);
        assert_eq!(mode("disable").ssl_mode(), SslMode::Disable);
        assert_eq!(mode("verify-ca").ssl_mode(), SslMode::Require);
        let missing = Settings {
            mode: Mode::Require,
            root_cert: Some("/nonexistent/ca.pem".into()),
        };
        let err = client_config(&missing).unwrap_err();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
    }
}
