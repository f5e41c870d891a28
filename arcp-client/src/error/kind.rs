//! The kind questions a program asks of an error, as reqwest's
//! `is_timeout()` and `is_connect()`: part of the error leaf.

use arcp_types::ErrorCode;

use super::{Error, Execution};

impl Error {
    /// Whether a timer ran out: the call's deadline
    /// ([`Error::DeadlineExceeded`]), or, while connecting, the connect
    /// timeout, the handshake timeout or the connect budget
    /// ([`Error::Connect`] or [`Error::Handshake`] whose
    /// [`source`](std::error::Error::source) chain holds a
    /// `tokio::time::error::Elapsed` or an `std::io::Error` of kind
    /// `TimedOut`). A call that gave up on its retry budget is
    /// [`Error::RetriesExhausted`] or [`Error::OutcomeUnavailable`], not a
    /// timeout.
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::DeadlineExceeded { .. } => true,
            Error::NotSent { cause, .. } => cause.is_timeout(),
            Error::Connect { .. } | Error::Handshake { .. } => {
                let mut next = std::error::Error::source(self);
                while let Some(cause) = next {
                    if cause.is::<tokio::time::error::Elapsed>()
                        || cause
                            .downcast_ref::<std::io::Error>()
                            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
                    {
                        return true;
                    }
                    next = cause.source();
                }
                false
            }
            _ => false,
        }
    }

    /// Whether the connection or the session could not be established:
    /// [`Error::Connect`] (dialing, TLS, the WebSocket upgrade, an HTTP
    /// binding's connection) or [`Error::Handshake`] (the session hello).
    /// Nothing of the call was sent. Credentials the runtime refused are
    /// [`Error::is_auth`] instead.
    pub fn is_connect(&self) -> bool {
        match self {
            Error::NotSent { cause, .. } => cause.is_connect(),
            other => matches!(other, Error::Connect { .. } | Error::Handshake { .. }),
        }
    }

    /// Whether the runtime refused the credentials: [`Error::Unauthenticated`]
    /// (the session handshake, a WebSocket upgrade or an HTTP call answered
    /// 401 or 403), or a request refused before acceptance with
    /// `UNAUTHENTICATED` or `PERMISSION_DENIED` (an [`Error::Tool`] whose
    /// [`execution`](crate::ToolError::execution) is [`Execution::NotRun`]). A tool
    /// that ran and reported one of those codes itself is not an auth error
    /// of the client's.
    pub fn is_auth(&self) -> bool {
        match self {
            Error::Unauthenticated { .. } => true,
            Error::NotSent { cause, .. } => cause.is_auth(),
            Error::Tool(e) => {
                e.execution == Execution::NotRun
                    && matches!(
                        e.code,
                        ErrorCode::Unauthenticated | ErrorCode::PermissionDenied
                    )
            }
            _ => false,
        }
    }
}
