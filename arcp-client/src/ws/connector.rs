//! Dialing a session (async-nats's `Connector`): connect, upgrade,
//! handshake, probe the dialect, resume, and classify every failure as
//! transient (dial again after backoff) or definitive (report it).
//!
//! It runs as one future inside the driver's loop, so while it dials the
//! driver still serves deadlines, cancels and `close()`.

use std::sync::Arc;
use std::time::Duration;

use arcp_types::{Auth, Dialect, ErrorCode, Frame, Message, Open, PeerInfo, Pong, Welcome};
use tracing::{debug, info, warn};

use super::link_io::{DialFailure, DialPlan, Established};
use super::transport::{self, Inbound, SocketReader, SocketWriter};
use crate::config::{shown_url, Config, Secret};
use crate::credentials;
use crate::error::Error;

/// Why one handshake did not produce a session.
enum Refusal {
    /// The runtime refused the credentials.
    Auth(String),
    /// The resume was refused; a fresh session may still work.
    ResumeRefused(String),
    /// The runtime said it does not speak this dialect.
    WrongDialect(String),
    /// The connection closed before the runtime said anything (a legacy
    /// runtime drops TCP on a message type it does not know, and so does a
    /// flaky network).
    ClosedSilently(String),
    /// Worth dialing again (a timeout, a cut, a transient refusal).
    Transient(String, Option<Duration>),
    /// No welcome within the handshake timeout (transient; the timer is
    /// the error's source, so `Error::is_timeout` sees it).
    TimedOut(String, tokio::time::error::Elapsed),
    /// Refused for good.
    Definitive(String),
}

/// Dials one session according to `plan`.
pub(crate) async fn dial(
    config: Arc<Config>,
    plan: DialPlan,
) -> Result<(SocketReader, SocketWriter, Established), DialFailure> {
    let mut resume = plan.resume;
    let probing = plan.dialects.len() > 1;
    let mut explicit_refusals = 0;
    let mut resume_refused = None;
    let mut last = String::new();
    let mut token = credentials::bearer_token(&config)
        .await
        .map_err(|e| transient(e, None))?;
    let mut refreshed = false;
    for &dialect in &plan.dialects {
        // At most three tries per dialect: a refused resume, a token
        // refused as stale (with a provider), then fresh.
        for _ in 0..3 {
            let (mut reader, mut writer) =
                transport::connect(&config).await.map_err(|failure| {
                    if plan.had_session {
                        super::dial::on_reconnect(failure)
                    } else {
                        failure
                    }
                })?;
            let resuming = resume.is_some();
            let hello = Hello {
                dialect,
                resume: resume.clone(),
                token: token.as_ref(),
            };
            match handshake(&config, &mut reader, &mut writer, hello).await {
                Ok(welcome) => {
                    let est = Established {
                        dialect,
                        welcome,
                        resuming,
                        resume_refused,
                    };
                    return Ok((reader, writer, est));
                }
                Err(Refusal::Auth(message)) if config.token_provider.is_some() && !refreshed => {
                    // The token may have expired since the provider gave
                    // it: ask once more before calling it refused.
                    info!(%message, "the runtime refused the token; asking the provider for a fresh one");
                    refreshed = true;
                    token = credentials::bearer_token(&config)
                        .await
                        .map_err(|e| transient(e, None))?;
                    last = message;
                }
                Err(Refusal::Auth(message)) => {
                    return Err(definitive(Error::Unauthenticated { message }))
                }
                Err(Refusal::ResumeRefused(message)) => {
                    info!(%message, "resume refused; opening a new session");
                    resume = None;
                    resume_refused = Some(message.clone());
                    last = message;
                }
                Err(Refusal::WrongDialect(message)) => {
                    debug!(%dialect, %message, "the runtime does not speak this dialect");
                    explicit_refusals += 1;
                    last = message;
                    break;
                }
                Err(Refusal::ClosedSilently(message)) if probing => {
                    debug!(%dialect, %message, "closed before the welcome; trying the next dialect");
                    last = message;
                    break;
                }
                Err(Refusal::ClosedSilently(message)) => {
                    let hint = match dialect {
                        Dialect::V1_1 => {
                            " (a legacy runtime closes on session.hello: try the legacy or auto dialect)"
                        }
                        _ => "",
                    };
                    return Err(transient(
                        handshake_error(
                            &config,
                            format!("{message} before the welcome{hint}"),
                            true,
                        ),
                        None,
                    ));
                }
                Err(Refusal::Transient(message, floor)) => {
                    return Err(transient(handshake_error(&config, message, true), floor))
                }
                Err(Refusal::TimedOut(message, elapsed)) => {
                    let error = Error::Handshake {
                        url: shown_url(&config.url),
                        message,
                        retryable: true,
                        source: Some(crate::error::ErrorSource::new(elapsed)),
                    };
                    return Err(transient(error, None));
                }
                Err(Refusal::Definitive(message)) => {
                    return Err(definitive(handshake_error(&config, message, false)))
                }
            }
        }
    }
    // Every dialect failed. Only explicit refusals prove the runtime speaks
    // none of them; a silent close may be the network.
    let names: Vec<String> = plan.dialects.iter().map(|d| d.to_string()).collect();
    let message = format!(
        "the runtime did not accept {} ({last})",
        names.join(" nor ")
    );
    if explicit_refusals == plan.dialects.len() {
        Err(definitive(handshake_error(&config, message, false)))
    } else {
        Err(transient(handshake_error(&config, message, true), None))
    }
}

fn handshake_error(config: &Config, message: String, retryable: bool) -> Error {
    Error::Handshake {
        url: shown_url(&config.url),
        message,
        retryable,
        source: None,
    }
}

fn definitive(error: Error) -> DialFailure {
    DialFailure {
        error,
        transient: false,
        floor: None,
    }
}

fn transient(error: Error, floor: Option<Duration>) -> DialFailure {
    DialFailure {
        error,
        transient: true,
        floor,
    }
}

/// What one hello carries.
struct Hello<'a> {
    dialect: Dialect,
    resume: Option<arcp_types::ResumeRequest>,
    token: Option<&'a Secret>,
}

async fn handshake(
    config: &Config,
    reader: &mut SocketReader,
    writer: &mut SocketWriter,
    hello: Hello<'_>,
) -> Result<Welcome, Refusal> {
    let Hello {
        dialect,
        resume,
        token,
    } = hello;
    let resuming = resume.is_some();
    let client = PeerInfo::new(config.client_name.clone(), config.client_version.clone());
    let auth = match token {
        Some(t) => Auth::bearer(t.0.clone()),
        None => Auth::none(),
    };
    let mut open = Open::new(client, auth);
    open.resume = resume;
    let timeout = config.handshake_timeout;
    let exchange = async {
        write(
            writer,
            dialect.encode(&Frame::new(Message::Open(open))),
            config,
        )
        .await?;
        let mut heard_anything = false;
        loop {
            let text = match reader.recv().await {
                Inbound::Text(text) => text,
                Inbound::Other => continue,
                Inbound::Closed { reason, .. } if !heard_anything => {
                    return Err(Refusal::ClosedSilently(reason))
                }
                Inbound::Closed { reason, .. } => return Err(Refusal::Transient(reason, None)),
            };
            heard_anything = true;
            let frame = match dialect.decode(&text) {
                Ok(frame) => frame,
                Err(e) => {
                    warn!(error = %config.redact(e.to_string()), "skipping an undecodable frame during the handshake");
                    continue;
                }
            };
            match frame.message {
                Message::Welcome(welcome) => return Ok(welcome),
                Message::SessionError(e) | Message::Rejected(e) | Message::Nack(e) => {
                    // The provider's token as well as the fixed one.
                    let redactor = config
                        .redactor()
                        .with_secret(token.map(|t| t.0.clone()).unwrap_or_default());
                    let message = redactor.redact_owned(e.message.clone());
                    let text = format!("{}: {message}", e.code);
                    return Err(match e.code {
                        ErrorCode::Unauthenticated => Refusal::Auth(message),
                        _ if resuming => Refusal::ResumeRefused(text),
                        ErrorCode::InvalidRequest | ErrorCode::Unimplemented => {
                            Refusal::WrongDialect(text)
                        }
                        _ if e.is_retryable() => Refusal::Transient(text, e.retry_after()),
                        _ => Refusal::Definitive(text),
                    });
                }
                Message::Ping(p) => {
                    let pong = Frame::new(Message::Pong(
                        Pong::new(p.nonce).with_received_at(arcp_types::now_rfc3339()),
                    ));
                    write(writer, dialect.encode(&pong), config).await?;
                }
                _ => debug!("ignoring a frame before the session welcome"),
            }
        }
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => result,
        Err(elapsed) => Err(Refusal::TimedOut(
            format!("no session welcome within the handshake timeout of {timeout:?}"),
            elapsed,
        )),
    }
}

/// Writes one frame during the handshake.
async fn write(writer: &mut SocketWriter, text: String, config: &Config) -> Result<(), Refusal> {
    writer
        .send(&mut vec![text], config.write_timeout)
        .await
        .map_err(|e| Refusal::Transient(e, None))
}
